//! The runtime's side of the branch table (`trestle_abi::branches`): the hook that logs
//! a branch's comparison under its fixed CmpLog id, and the dump of the guards' edge
//! numbers, which exist only once the program runs.

use libafl_targets::cmps::{
    CmpLogHeader, CmpLogInstruction, CmpLogMap, CMPLOG_KIND_INS, CMPLOG_KIND_RTN, CMPLOG_MAP_RTN_H,
    CMPLOG_RTN_LEN,
};
use libafl_targets::{CMPLOG_ENABLED, CMPLOG_MAP_H, CMPLOG_MAP_PTR, CMPLOG_MAP_W};
use std::mem::size_of;
use trestle_abi::branches::{encode_guard_numbers, GuardRow, CMP_ROUTINE_STRING, ENV_BRANCH_DUMP};

// One all-zero row from the runtime itself, so that the section and the linker's
// start/stop symbols exist in every program (padding rows have module key 0).
#[used]
#[link_section = trestle_abi::section_name!(branch_guards)]
static mut GUARDS_PAD: [u64; 3] = [0; 3];
#[used]
#[link_section = trestle_abi::section_name!(branches)]
static mut BRANCHES_PAD: [u8; 8] = [0; 8];

extern "C" {
    #[link_name = concat!("__start_", trestle_abi::section_name!(branch_guards))]
    static GUARDS_START: GuardRow;
    #[link_name = concat!("__stop_", trestle_abi::section_name!(branch_guards))]
    static GUARDS_STOP: GuardRow;
}

// The hook writes LibAFL's CmpLog map as its own `trace-cmp` hooks do; its fields are
// private, so it is written by layout: the headers, then the operands.
const HEADER: usize = size_of::<CmpLogHeader>();
const OPERANDS: usize = size_of::<CmpLogInstruction>();
const _: () = assert!(
    HEADER == 4
        && OPERANDS == 24
        && size_of::<CmpLogMap>() >= CMPLOG_MAP_W * (HEADER + CMPLOG_MAP_H * OPERANDS)
);

/// A branch's comparison: `trestle_abi::branches::CMP_HOOK`. Logs `a` and `b` at `id`
/// while a CmpLog tracer is attached, exactly as SanitizerCoverage's `trace-cmp` hooks
/// would have under their own id.
///
/// # Safety
/// Called by instrumented code only, single-threaded as the `trace-cmp` hooks are.
#[no_mangle]
pub unsafe extern "C" fn __trestle_cmp(id: u64, size: u8, a: u64, b: u64, a_is_const: u8) {
    // SAFETY: the flag and the map pointer are LibAFL's, set up before any hook runs;
    // the writes stay within entry `id` of the map, as its own hooks' do. The goal's
    // statics are written by this (single) thread only.
    unsafe {
        if id == GOAL_CMP {
            let d = operand_distance(size, a, b);
            if d < GOAL_DISTANCE {
                GOAL_DISTANCE = d;
            }
        }
        if CMPLOG_ENABLED == 0 || size == 0 {
            return;
        }
        CMPLOG_ENABLED = 0;
        let k = id as usize & (CMPLOG_MAP_W - 1);
        let map = CMPLOG_MAP_PTR as *mut u8;
        let header = map.add(k * HEADER);
        let (hits, shape, kind) = (header as *mut u16, header.add(2), header.add(3));
        let wanted = size - 1;
        let hit = if *kind != CMPLOG_KIND_INS {
            *kind = CMPLOG_KIND_INS;
            *hits = 1;
            *shape = wanted;
            0
        } else {
            let h = *hits;
            *hits = h.wrapping_add(1);
            if *shape < wanted {
                *shape = wanted;
            }
            h
        } as usize
            & (CMPLOG_MAP_H - 1);
        let op = map.add(CMPLOG_MAP_W * HEADER + (k * CMPLOG_MAP_H + hit) * OPERANDS);
        (op as *mut u64).write_unaligned(a);
        (op.add(8) as *mut u64).write_unaligned(b);
        *op.add(16) = a_is_const;
        CMPLOG_ENABLED = 1;
    }
}

/// A comparison routine's operands: `trestle_abi::branches::CMP_ROUTINE_HOOK`, called
/// right before the routine with its pointers. While a CmpLog tracer is attached, logs
/// the first `n` bytes of each (at most [`CMPLOG_RTN_LEN`]), or with
/// `CMP_ROUTINE_STRING` set each C string up to its NUL or the bound in `n`'s other
/// bits (at most one byte less), zero-padded, as a routine entry at `id`. Only then are
/// the operands read, and no further than the routine itself reads them (for
/// `strncmp`, not past its bound).
///
/// # Safety
/// Called by instrumented code only, with the pointers the routine is about to read.
#[no_mangle]
pub unsafe extern "C" fn __trestle_cmp_routine(id: u64, a: *const u8, b: *const u8, n: u64) {
    // SAFETY: as in `__trestle_cmp`; the operands are read only within what the
    // routine called next reads (a string to its NUL, or `n` bytes).
    unsafe {
        if CMPLOG_ENABLED == 0 || a.is_null() || b.is_null() {
            return;
        }
        CMPLOG_ENABLED = 0;
        let string = n & CMP_ROUTINE_STRING != 0;
        let limit = if string {
            (n & !CMP_ROUTINE_STRING).min(CMPLOG_RTN_LEN as u64 - 1)
        } else {
            n.min(CMPLOG_RTN_LEN as u64)
        } as usize;
        let read = |p: *const u8| -> [u8; CMPLOG_RTN_LEN] {
            let mut out = [0u8; CMPLOG_RTN_LEN];
            for (i, slot) in out.iter_mut().enumerate().take(limit) {
                let c = *p.add(i);
                if c == 0 && string {
                    break;
                }
                *slot = c;
            }
            out
        };
        let (va, vb) = (read(a), read(b));
        let k = id as usize & (CMPLOG_MAP_W - 1);
        let map = CMPLOG_MAP_PTR as *mut u8;
        let header = map.add(k * HEADER);
        let (hits, shape, kind) = (header as *mut u16, header.add(2), header.add(3));
        let hit = if *kind != CMPLOG_KIND_RTN {
            *kind = CMPLOG_KIND_RTN;
            *hits = 1;
            *shape = (CMPLOG_RTN_LEN - 1) as u8;
            0
        } else {
            let h = *hits;
            *hits = h.wrapping_add(1);
            h as usize % CMPLOG_MAP_RTN_H
        };
        let entry = map.add(CMPLOG_MAP_W * HEADER + (k * CMPLOG_MAP_RTN_H + hit) * ROUTINE);
        std::ptr::copy_nonoverlapping(va.as_ptr(), entry, CMPLOG_RTN_LEN);
        std::ptr::copy_nonoverlapping(vb.as_ptr(), entry.add(CMPLOG_RTN_LEN), CMPLOG_RTN_LEN);
        CMPLOG_ENABLED = 1;
    }
}

/// The size of one routine entry of the map: both operands.
const ROUTINE: usize = 2 * CMPLOG_RTN_LEN;
const _: () = assert!(CMPLOG_MAP_RTN_H * ROUTINE <= CMPLOG_MAP_H * OPERANDS);

/// The comparison whose operand distance is tracked ([`trestle_abi::fuzz::ENV_FUZZ_GOAL_CMP`]);
/// `u64::MAX` for none.
pub(crate) static mut GOAL_CMP: u64 = u64::MAX;
/// The least distance between its operands in the current execution; `u64::MAX`
/// when it was not reached.
pub(crate) static mut GOAL_DISTANCE: u64 = u64::MAX;

/// How far apart two operands of `size` bytes are: the lesser of their differences
/// either way round, modulo the width (so that it serves signed and unsigned
/// comparisons alike).
fn operand_distance(size: u8, a: u64, b: u64) -> u64 {
    let mask = if size >= 8 || size == 0 {
        u64::MAX
    } else {
        (1u64 << (8 * size as u32)) - 1
    };
    let (x, y) = (a.wrapping_sub(b) & mask, b.wrapping_sub(a) & mask);
    x.min(y)
}

/// The slot (0..=64) of a distance: its bit length.
pub(crate) fn distance_slot(d: u64) -> usize {
    (64 - d.leading_zeros()) as usize
}

/// With `TRESTLE_BRANCH_DUMP` set, write every guard row's edge number there and exit
/// (the host runs the program once so, before `main`); otherwise one lookup.
pub fn maybe_dump() {
    let Some(path) = std::env::var_os(ENV_BRANCH_DUMP) else {
        return;
    };
    // SAFETY: the linker's symbols bound the section; the guards were numbered by
    // their modules' constructors, which ran before `main`.
    let rows: Vec<(u64, u64, u32)> = unsafe {
        let start = &raw const GUARDS_START;
        let n = (&raw const GUARDS_STOP as usize - start as usize) / size_of::<GuardRow>();
        std::slice::from_raw_parts(start, n)
            .iter()
            .filter(|r| r.module != 0 && !r.guard.is_null())
            .map(|r| (r.module, r.slot, *r.guard))
            .collect()
    };
    let code = match std::fs::write(&path, encode_guard_numbers(&rows)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!(
                "trestle runtime: cannot write the branch guards to {}: {e}",
                std::path::Path::new(&path).display()
            );
            2
        }
    };
    // SAFETY: leaving before `main` runs; nothing of the program's to flush.
    unsafe { libc::_exit(code) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances_are_modular_in_the_width_and_slots_are_bit_lengths() {
        assert_eq!(operand_distance(4, 5, 1_000_000), 999_995);
        assert_eq!(
            operand_distance(4, 0xffff_ffff, 1),
            2,
            "-1 and 1 as 32-bit values"
        );
        assert_eq!(
            operand_distance(1, 0x1ff, 0x01),
            2,
            "the width masks the bits above it"
        );
        assert_eq!(operand_distance(8, 7, 7), 0);
        assert_eq!(distance_slot(0), 0);
        assert_eq!(distance_slot(1), 1);
        assert_eq!(distance_slot(999_995), 20);
        assert_eq!(distance_slot(u64::MAX), 64);
    }
}

//! Where a faulting pointer came from: the global variable it was loaded from.
//!
//! A pointer stored wrongly once (set to NULL where a default should have been
//! installed) faults wherever it is used next: cut's planted output-delimiter bug
//! faults in `main` reading it and in `cut_fields` writing from it through `fwrite`, two
//! faulting lines of one bug. What the two crashes share is the pointer's origin: in
//! the few instructions before the fault (or before the call that led out of the
//! program to it), the program loaded a pointer from the global `output_delimiter_string`,
//! and that global, in the data the preload copied at the crash ([`RawStack::data`]),
//! holds the address that faulted (give or take a page: a field of a NULL structure),
//! and is itself a bad pointer (NULL, or pointing at nothing mapped): a good pointer
//! read past its end is named by its line, as before.
//!
//! The load is recognised by its bytes in the program's file (`mov r64, [rip+disp32]`),
//! the global by the symbol table: an 8-byte data object starting exactly where the
//! load reads. Exactly one such global must explain the fault; otherwise there is no
//! origin and the crash is named by its faulting line alone.

use crate::signature::{elf_is_dyn, same_file, RawStack};
use object::{Object as _, ObjectSymbol as _, SymbolKind};
use std::collections::BTreeMap;
use std::os::unix::fs::FileExt as _;
use std::path::Path;

/// How many bytes of code before the crash's address the loads are looked for in.
const WINDOW: u64 = 48;

/// How far past a pointer's value a fault still counts as a use of that pointer.
const NEAR: u64 = 4096;

/// The global variable the crash's faulting pointer was loaded from, if the record
/// and the program show exactly one (see the module documentation).
pub fn pointer_origin(raw: &RawStack, program: &Path) -> Option<String> {
    if !matches!(raw.signal, libc::SIGSEGV | libc::SIGBUS) || raw.data.is_empty() {
        return None;
    }
    let fault = raw.fault_addr?;
    let maps: Vec<&(u64, u64, u64, String)> = raw
        .maps
        .iter()
        .filter(|m| same_file(Path::new(&m.3), program))
        .collect();
    let mapping = |a: u64| maps.iter().find(|m| (m.0..m.1).contains(&a)).copied();
    // The innermost address in the program: the faulting instruction, or the return
    // address of the call that left the program (into the C library, say).
    let (at, (start, _, offset, _)) = raw
        .addresses()
        .into_iter()
        .find_map(|(a, _)| Some((a, mapping(a)?)))?;
    let file_at = at - start + offset;
    let from = file_at.saturating_sub(WINDOW).max(*offset);
    let mut code = vec![0u8; (file_at - from) as usize];
    std::fs::File::open(program)
        .ok()?
        .read_exact_at(&mut code, from)
        .ok()?;
    let code_start = at - (file_at - from);
    let base = if elf_is_dyn(program) {
        maps.iter().map(|m| m.0 - m.2).min()?
    } else {
        0
    };
    // The loads whose global holds a bad pointer that explains the fault, first: the
    // symbol table (a whole read of a program that may be tens of MB) only for those.
    let candidates: Vec<u64> = code
        .windows(RIP_LOAD_LEN)
        .enumerate()
        .filter_map(|(i, window)| rip_load(window, code_start + (i + RIP_LOAD_LEN) as u64))
        .filter(|&target| {
            raw.word_at(target).is_some_and(|value| {
                // The pointer itself bad (NULL, or pointing at nothing mapped), not a
                // good pointer read past its end: cut's range-delimiter bug reads too
                // far through the same global the output-delimiter bug leaves NULL, and
                // is another bug.
                let bad =
                    value < NEAR || !raw.mapped.iter().any(|(a, b)| (*a..*b).contains(&value));
                bad && value <= fault && fault - value < NEAR
            })
        })
        .collect();
    if candidates.is_empty() {
        return None;
    }
    let globals = pointer_globals(program)?;
    let mut found: Vec<&str> = Vec::new();
    for target in candidates {
        if let Some(name) = globals.get(&target.wrapping_sub(base)) {
            if !found.contains(&name.as_str()) {
                found.push(name);
            }
        }
    }
    match found[..] {
        [one] => Some(one.to_owned()),
        _ => None,
    }
}

/// The length of `mov r64, [rip+disp32]`.
const RIP_LOAD_LEN: usize = 7;

/// If `b` is `mov r64, [rip+disp32]` (REX.W, with or without REX.R; opcode 8b; ModRM
/// mode 00, r/m 101), the address it loads from, `next` being the address after it.
fn rip_load(b: &[u8], next: u64) -> Option<u64> {
    let [rex, 0x8b, modrm, d0, d1, d2, d3] = *b else {
        return None;
    };
    if !matches!(rex, 0x48 | 0x4c) || modrm & 0xc7 != 0x05 {
        return None;
    }
    Some(next.wrapping_add_signed(i32::from_le_bytes([d0, d1, d2, d3]).into()))
}

/// The program's pointer-sized data objects by address (as the file has them).
fn pointer_globals(program: &Path) -> Option<BTreeMap<u64, String>> {
    let bytes = std::fs::read(program).ok()?;
    let elf = object::File::parse(&*bytes).ok()?;
    Some(
        elf.symbols()
            .filter(|s| s.kind() == SymbolKind::Data && s.size() == 8)
            .filter_map(|s| Some((s.address(), s.name().ok()?.to_owned())))
            .filter(|(_, name)| !name.is_empty())
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_keeps_the_programs_data_as_it_was() {
        let raw = crate::signature::parse_stack(
            "signal 11\naddr 0x0\npc 0x1000\nmaps\nend-maps\n\
             data 0x4000\n0000000000000000\n2a00000000000000ff\nend-data\n\
             data 0x9000\n0100000000000000\nend-data\nframe 0x1000\n",
        )
        .unwrap();
        assert_eq!(raw.word_at(0x4000), Some(0));
        assert_eq!(raw.word_at(0x4008), Some(42));
        assert_eq!(raw.word_at(0x400a), None, "runs past the copy");
        assert_eq!(raw.word_at(0x9000), Some(1));
        assert_eq!(raw.word_at(0x8ff8), None);
        assert_eq!(raw.frames, [0x1000]);
        assert!(
            crate::signature::parse_stack("signal 11\ndata 0x4000\nnot hex\nend-data\n").is_err()
        );
    }

    #[test]
    fn a_rip_relative_pointer_load_is_recognised_by_its_bytes() {
        // movq 0x84e4(%rip), %rdi at 0x2d4d (cut's load of output_delimiter_string).
        let load = [0x48, 0x8b, 0x3d, 0xe4, 0x84, 0x00, 0x00];
        assert_eq!(rip_load(&load, 0x2d54), Some(0xb238));
        // movq 0x8b22(%rip), %rcx; and r8-r15 as the destination (REX.R).
        assert_eq!(
            rip_load(&[0x48, 0x8b, 0x0d, 0x22, 0x8b, 0, 0], 0x2716),
            Some(0xb238)
        );
        assert_eq!(
            rip_load(&[0x4c, 0x8b, 0x05, 0xf0, 0xff, 0xff, 0xff], 0x1000),
            Some(0xff0)
        );
        // Not a load from rip: through a register, a 32-bit load, a store.
        assert_eq!(rip_load(&[0x48, 0x8b, 0x07, 0, 0, 0, 0], 0x1000), None);
        assert_eq!(rip_load(&[0x8b, 0x05, 0, 0, 0, 0, 0], 0x1000), None);
        assert_eq!(rip_load(&[0x48, 0x89, 0x05, 0, 0, 0, 0], 0x1000), None);
    }
}

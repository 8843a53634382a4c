//! The branch table: every two-way or multi-way branch of the program's optimised code,
//! with the edge-coverage guards that tell which of its directions ran. The host reads
//! it to find *roadblocks*: branches the system fuzzer reached with one direction never
//! taken, and what stands behind that direction.
//!
//! `trestle-cc` writes it after optimisation, when SanitizerCoverage has placed its
//! guards (`instrument/src/branches.rs`), into two sections:
//!
//! - [`SECTION_BRANCHES`]: per module, a framed, bincode-encoded [`ModuleBranches`],
//!   read by the host from the binary with `object`.
//! - [`SECTION_BRANCH_GUARDS`]: an array of [`GuardRow`]s, one per guard a branch
//!   refers to. The guards are numbered only when the program starts (each module's
//!   constructor hands its guards to the runtime), so their numbers exist only in a
//!   running process: with [`ENV_BRANCH_DUMP`] set, the runtime writes each row's
//!   number to that file ([`encode_guard_numbers`]) and exits before `main` runs.
//!
//! A branch's comparison, when the pass could tie one to it, logs its operands into the
//! CmpLog map under a fixed id ([`Branch::cmp`]) instead of one derived from a return
//! address, so the host can read what the program compared at the roadblock.

use crate::meta::{decode_frames, encode_frame, MetaError};
use serde::{Deserialize, Serialize};

/// Section holding framed [`ModuleBranches`] blobs.
pub const SECTION_BRANCHES: &str = crate::section_name!(branches);
/// Section holding [`GuardRow`] arrays.
pub const SECTION_BRANCH_GUARDS: &str = crate::section_name!(branch_guards);

/// Magic word opening each blob in [`SECTION_BRANCHES`] (little endian "TRBR").
pub const BRANCHES_MAGIC: u32 = u32::from_le_bytes(*b"TRBR");

/// Version of [`ModuleBranches`]' encoding.
pub const BRANCHES_VERSION: u32 = 2;

/// Environment variable: write the guard numbers of [`SECTION_BRANCH_GUARDS`] to this
/// file and exit (status 0) before `main` runs.
pub const ENV_BRANCH_DUMP: &str = "TRESTLE_BRANCH_DUMP";

/// `void __trestle_cmp(i64 id, i8 size, i64 a, i64 b, i8 a_is_const)`: a branch's
/// comparison, logged into the CmpLog map at `id` (below [`CMP_IDS`]) as LibAFL's
/// `trace-cmp` hooks log theirs; `size` is the operand size in bytes.
pub const CMP_HOOK: &str = "__trestle_cmp";

/// Comparison ids are below this (the CmpLog map's width).
pub const CMP_IDS: u32 = 1 << 16;

/// `void __trestle_cmp_routine(i64 id, ptr a, ptr b, i64 n)`: called right before a
/// call to a string or memory comparison routine (`strcmp`, `memcmp`, ...), logs what
/// it compares into the CmpLog map at `id` as a routine entry (LibAFL's `Bytes`
/// operands, zero-padded): the first `n` bytes of each (at most 32), or with
/// [`CMP_ROUTINE_STRING`] set in `n`, each C string up to its NUL or the bound in
/// the other bits of `n`, whichever comes first (at most 31 bytes).
pub const CMP_ROUTINE_HOOK: &str = "__trestle_cmp_routine";

/// The bit of [`CMP_ROUTINE_HOOK`]'s `n` that says the operands are C strings.
pub const CMP_ROUTINE_STRING: u64 = 1 << 63;

/// The CmpLog id of the `index`th comparison routine call of `module` (another range
/// of indexes than [`cmp_id`]'s branches).
pub fn routine_cmp_id(module: &str, index: u32) -> u32 {
    cmp_id(module, index | 1 << 31)
}

/// The branches of one module.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleBranches {
    /// The module's source file name, as the compiler saw it.
    pub module: String,
    /// [`module_key`] of `module`: the key of this module's [`GuardRow`]s.
    pub key: u64,
    /// Source files the branches name, by index.
    pub files: Vec<String>,
    /// The branches.
    pub branches: Vec<Branch>,
}

/// One conditional branch or switch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Branch {
    /// Symbol id (`ids::symbol_id`) of the function whose optimised code holds it (the
    /// source function may have been inlined into it: see `file` and `line`).
    pub function: u64,
    /// Source file (index into [`ModuleBranches::files`]) and line, when known.
    pub file: Option<u32>,
    /// Source line (0 when unknown).
    pub line: u32,
    /// The CmpLog id its comparison logs under, when it has one.
    pub cmp: Option<u32>,
    /// Its directions: `true` then `false` for a two-way branch, the default then each
    /// case for a switch.
    pub directions: Vec<Direction>,
}

/// One direction of a branch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Direction {
    /// Guard slots of the first guarded blocks on its side: any of them hit means the
    /// direction was taken. Empty when the direction has no guard of its own (it leads
    /// straight into code other paths reach too).
    pub guards: Vec<u32>,
    /// Guarded blocks only reachable through this direction (dominated by its first
    /// block): the code a fuzzer misses while it never takes it.
    pub behind: u32,
    /// The case value, for a switch's case.
    pub case: Option<i64>,
    /// Every path from it ends the program through a call that never returns and is
    /// no crash (`exit`, `error`, the program's own fatal-error function; not `abort`
    /// or a failed `assert`): an error exit, where a fuzzer finds a message.
    pub ends: bool,
}

/// One row of [`SECTION_BRANCH_GUARDS`] (LLVM `{ i64, i64, ptr }`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct GuardRow {
    /// [`ModuleBranches::key`] of the module the guard belongs to (0: padding).
    pub module: u64,
    /// The slot a [`Direction`] names it by.
    pub slot: u64,
    /// The guard, whose value the runtime sets to its edge number.
    pub guard: *const u32,
}

/// The key of a module's guard rows.
pub fn module_key(module: &str) -> u64 {
    crate::ids::fnv1a64(module.as_bytes()).max(1)
}

/// The CmpLog id of the `index`th branch comparison of `module`.
pub fn cmp_id(module: &str, index: u32) -> u32 {
    let h = crate::ids::fnv1a64_extend(module_key(module), &index.to_le_bytes());
    (h ^ (h >> 32)) as u32 & (CMP_IDS - 1)
}

/// Frame a module's branches for [`SECTION_BRANCHES`].
pub fn encode_module_branches(m: &ModuleBranches) -> Vec<u8> {
    encode_frame(BRANCHES_MAGIC, BRANCHES_VERSION, m)
}

/// Decode every module blob in a [`SECTION_BRANCHES`] image.
pub fn decode_branches_section(bytes: &[u8]) -> Result<Vec<ModuleBranches>, MetaError> {
    decode_frames(bytes, BRANCHES_MAGIC, BRANCHES_VERSION)
}

/// What [`ENV_BRANCH_DUMP`] writes: `(module key, slot, edge number)` per guard row.
pub fn encode_guard_numbers(rows: &[(u64, u64, u32)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + rows.len() * 20);
    out.extend_from_slice(&BRANCHES_MAGIC.to_le_bytes());
    out.extend_from_slice(&(rows.len() as u32).to_le_bytes());
    for (m, s, n) in rows {
        out.extend_from_slice(&m.to_le_bytes());
        out.extend_from_slice(&s.to_le_bytes());
        out.extend_from_slice(&n.to_le_bytes());
    }
    out
}

/// Read what [`encode_guard_numbers`] wrote.
pub fn decode_guard_numbers(bytes: &[u8]) -> Result<Vec<(u64, u64, u32)>, String> {
    if bytes.len() < 8 || bytes[0..4] != BRANCHES_MAGIC.to_le_bytes() {
        return Err("not a guard number dump (bad header)".into());
    }
    let n = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
    let body = &bytes[8..];
    if body.len() != n * 20 {
        return Err(format!(
            "guard number dump of {} bytes for {n} rows",
            bytes.len()
        ));
    }
    Ok(body
        .chunks_exact(20)
        .map(|r| {
            (
                u64::from_le_bytes(r[0..8].try_into().unwrap()),
                u64::from_le_bytes(r[8..16].try_into().unwrap()),
                u32::from_le_bytes(r[16..20].try_into().unwrap()),
            )
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blobs_and_dumps_round_trip() {
        let m = ModuleBranches {
            module: "a.c".into(),
            key: module_key("a.c"),
            files: vec!["/src/a.c".into()],
            branches: vec![Branch {
                function: 7,
                file: Some(0),
                line: 12,
                cmp: Some(cmp_id("a.c", 0)),
                directions: vec![
                    Direction {
                        guards: vec![1],
                        behind: 3,
                        case: None,
                        ends: false,
                    },
                    Direction::default(),
                ],
            }],
        };
        let mut sec = encode_module_branches(&m);
        sec.extend_from_slice(&[0; 5]);
        sec.extend(encode_module_branches(&ModuleBranches {
            module: "b.c".into(),
            ..m.clone()
        }));
        let back = decode_branches_section(&sec).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[0], m);
        assert_eq!(back[1].module, "b.c");
        let rows = vec![(5u64, 0u64, 17u32), (5, 1, 18)];
        assert_eq!(
            decode_guard_numbers(&encode_guard_numbers(&rows)).unwrap(),
            rows
        );
        assert!(decode_guard_numbers(&encode_guard_numbers(&rows)[..20]).is_err());
        assert!(cmp_id("a.c", 0) < CMP_IDS);
        assert_ne!(cmp_id("a.c", 0), cmp_id("a.c", 1));
    }
}

//! The lean build: the same objects as a `trestle-cc` program, linked with the lean
//! runtime instead of the recording one (`runtime/lean/lean.c`), for system-level
//! fuzzing only. `trestle-cc` writes it beside the program under [`sibling`]'s name
//! and gives it a GNU build id of [`BUILD_ID_LEN`] bytes, [`build_id`] of the
//! program's file: the host uses the lean build only while that still matches the
//! program it was given (a rebuilt or replaced program makes its old sibling stale).

use std::path::{Path, PathBuf};

/// The lean build's file name: `.NAME.trestle-lean` in the program's directory.
pub fn sibling(program: &Path) -> PathBuf {
    let name = program
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    program.with_file_name(format!(".{name}.trestle-lean"))
}

/// 64-bit words per comparison of the set of operand pairs the lean runtime notes
/// past LibAFL's CmpLog map (when the host's segment has room: it makes one of
/// AFL++'s size): a bit per pair, hashed, for every execution in the run, where the
/// map keeps 32. The set lies right after the map, one row per map entry.
pub const CMPLOG_SEEN_WORDS: usize = 4;

/// Bytes of the build id the lean build carries.
pub const BUILD_ID_LEN: usize = 16;

/// The build id that ties a lean build to the program linked beside it: FNV-1a of
/// the program's bytes, then of their length.
pub fn build_id(program_bytes: &[u8]) -> [u8; BUILD_ID_LEN] {
    let a = crate::ids::fnv1a64(program_bytes);
    let b = crate::ids::fnv1a64_extend(a, &(program_bytes.len() as u64).to_le_bytes());
    let mut id = [0u8; BUILD_ID_LEN];
    id[..8].copy_from_slice(&a.to_le_bytes());
    id[8..].copy_from_slice(&b.to_le_bytes());
    id
}

/// Environment variable: `0` makes `trestle-cc` link no lean build.
pub const ENV_CC_LEAN: &str = "TRESTLE_CC_LEAN";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sibling_is_hidden_beside_the_program_and_ids_follow_the_bytes() {
        assert_eq!(
            sibling(Path::new("/a/b/sed")),
            Path::new("/a/b/.sed.trestle-lean")
        );
        assert_eq!(sibling(Path::new("cut")), Path::new(".cut.trestle-lean"));
        assert_ne!(build_id(b"abc"), build_id(b"abd"));
        assert_eq!(build_id(b"abc"), build_id(b"abc"));
    }
}

//! The lean sibling of every program the wrapper links: the same link again, with the
//! lean runtime (`runtime/lean/lean.c`, carried in this binary) instead of the
//! recording one, written as `trestle_abi::lean::sibling` of the output, with the
//! output's `trestle_abi::lean::build_id` as its GNU build id. The system fuzzer runs
//! it; nothing else does.
//!
//! The user's build never depends on it: a lean link that fails leaves no sibling
//! (an older one is removed first), prints nothing unless `TRESTLE_CC_VERBOSE` is set,
//! and does not change the exit code. Set `TRESTLE_CC_LEAN=0` to skip it.

use std::ffi::OsString;
use std::path::Path;

use super::run::Runner;

/// `libtrestle_lean.a`, compiled by `build.rs`.
const ARCHIVE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libtrestle_lean.a"));

/// Link the lean sibling of `output`, which `link` (the user's link arguments,
/// without the runtime) just wrote; `tmp` holds the archive for the link.
pub(super) fn link(runner: &Runner, link: &[OsString], output: &Path, tmp: &Path) {
    let lean = trestle_abi::lean::sibling(output);
    let _ = std::fs::remove_file(&lean);
    if std::env::var_os(trestle_abi::lean::ENV_CC_LEAN).is_some_and(|v| v == "0") {
        return;
    }
    // Only a regular file has a sibling (not `-o /dev/null`).
    if !std::fs::metadata(output).is_ok_and(|m| m.is_file()) {
        return;
    }
    let Ok(bytes) = std::fs::read(output) else {
        return;
    };
    let id: String = trestle_abi::lean::build_id(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let archive = tmp.join("libtrestle_lean.a");
    if let Err(e) = std::fs::write(&archive, ARCHIVE) {
        runner.note(&format!(
            "no lean build: cannot write {}: {e}",
            archive.display()
        ));
        return;
    }
    let mut args = link.to_vec();
    args.push(archive.into());
    // The last `-o` and build id win.
    args.push("-o".into());
    args.push(lean.clone().into());
    args.push(format!("-Wl,--build-id=0x{id}").into());
    let verbose = runner.verbose();
    match runner.run_filtering_stderr(&args, |err| {
        if verbose {
            err.to_owned()
        } else {
            String::new()
        }
    }) {
        Ok(0) => {}
        Ok(code) => {
            runner.note(&format!("no lean build: its link failed ({code})"));
            let _ = std::fs::remove_file(&lean);
        }
        Err(e) => runner.note(&format!("no lean build: {e}")),
    }
}

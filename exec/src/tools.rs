//! Finding the programs the bridge runs besides the subject: installed tools (bubblewrap,
//! LLVM 19's) looked up as the shell would, with the `which` crate, and the files
//! trestle ships next to its own executables. Every lookup goes through here, so a
//! missing tool is reported one way: by name, with what installs it.

use anyhow::{bail, Context as _, Result};
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Where Debian's LLVM 19 packages put their tools under their plain names, for when
/// no `NAME-19` or `NAME` is on `PATH`.
const LLVM_BIN: &str = "/usr/lib/llvm-19/bin";

/// The first of `names` that is an executable on `PATH`, else in `also_in`; the error
/// names the tool (the last name, the plain one) and `installed_by`.
pub fn find_program(names: &[&str], also_in: Option<&Path>, installed_by: &str) -> Result<PathBuf> {
    for name in names {
        if let Ok(p) = which::which(name) {
            return Ok(p);
        }
    }
    if let Some(dir) = also_in {
        for name in names {
            if let Ok(p) = which::which_in(name, Some(dir), dir) {
                return Ok(p);
            }
        }
    }
    let name = names.last().copied().unwrap_or_default();
    bail!("{name} is not installed: {installed_by}")
}

/// An LLVM 19 tool: `NAME-19` or `NAME` on `PATH`, else LLVM 19's own folder.
pub fn llvm_tool(name: &str) -> Result<PathBuf> {
    find_program(
        &[&format!("{name}-19"), name],
        Some(Path::new(LLVM_BIN)),
        "it comes with LLVM 19, `apt-get install llvm-19`",
    )
}

/// The symboliser for crash stacks, `llvm-symbolizer`, if there is one (without it,
/// frames keep their addresses).
pub fn symbolizer() -> Option<PathBuf> {
    llvm_tool("llvm-symbolizer").ok()
}

/// Run a helper tool (the symboliser, `llvm-cov`) to its end and collect its output.
/// It runs in a process group of its own: a Ctrl-C at the terminal (or `timeout -s
/// INT`) signals the whole foreground group, and a helper cut off by it would look like
/// one that answered nothing; trestle alone takes the signal and stops at its own pace.
/// A helper that a signal ended anyway is an error that says so.
pub fn output(cmd: &mut Command) -> Result<Output> {
    let name = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd
        .process_group(0)
        .output()
        .with_context(|| format!("cannot run {name}"))?;
    if let Some(sig) = out.status.signal() {
        bail!("{name} was killed by signal {sig}");
    }
    Ok(out)
}

/// A file trestle ships next to its own executables (`trestle-exec`, the crash-stack
/// preload): in `$TRESTLE_BIN`, beside the running executable, or one folder up (test
/// binaries run from `target/<profile>/deps`). Not a `PATH` lookup: these must be the
/// build's own, and a preload is no program.
pub fn find_tool(name: &str) -> Result<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(d) = std::env::var_os("TRESTLE_BIN") {
        dirs.push(PathBuf::from(d));
    }
    if let Ok(exe) = std::env::current_exe() {
        if let Some(d) = exe.parent() {
            dirs.push(d.to_owned());
            if let Some(up) = d.parent() {
                dirs.push(up.to_owned());
            }
        }
    }
    for d in &dirs {
        let p = d.join(name);
        if p.exists() {
            return Ok(p);
        }
    }
    bail!(
        "cannot find {name} (looked in {}); build the workspace (cargo build --release) or set TRESTLE_BIN",
        dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn a_program_is_found_on_path_or_in_the_fallback_folder_and_a_missing_one_named() {
        let sh = find_program(&["trestle-no-such-sh", "sh"], None, "x").unwrap();
        assert!(sh.is_absolute() && sh.ends_with("sh"), "{}", sh.display());

        let dir = tempfile::tempdir().unwrap();
        let tool = dir.path().join("trestle-test-tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        // Not executable: not a program.
        assert!(find_program(&["trestle-test-tool"], Some(dir.path()), "x").is_err());
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(
            find_program(
                &["trestle-test-tool-19", "trestle-test-tool"],
                Some(dir.path()),
                "x"
            )
            .unwrap(),
            tool
        );

        let e = find_program(&["nope-19", "nope"], None, "`apt-get install nope`")
            .unwrap_err()
            .to_string();
        assert_eq!(e, "nope is not installed: `apt-get install nope`");
    }

    /// A helper is not in trestle's process group, so a signal to the group (a Ctrl-C)
    /// does not reach it; one a signal ended is an error naming the signal.
    #[test]
    fn a_helper_runs_in_its_own_process_group_and_a_killed_one_is_an_error() {
        let out = output(Command::new("sh").args(["-c", "ps -o pgid= -p $$"])).unwrap();
        let theirs: i32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        // SAFETY: getpgrp has no preconditions.
        let ours = unsafe { libc::getpgrp() };
        assert_ne!(theirs, ours);
        // SIGTERM: a shell started in the background ignores SIGINT from birth, and
        // cannot take it back.
        let e = output(Command::new("sh").args(["-c", "kill -TERM $$"])).unwrap_err();
        assert!(e.to_string().ends_with("sh was killed by signal 15"), "{e}");
    }
}

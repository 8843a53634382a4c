//! Which build the system fuzzer runs: the lean sibling `trestle-cc` links beside a
//! program (`trestle_abi::lean`), when it still belongs to that program, else the
//! program itself. The lean build carries a few kilobytes of runtime instead of the
//! recording runtime, so each forkserver child is cheaper to fork, fault in and end;
//! coverage and CmpLog mean the same on both, as both are linked from the same
//! objects (checked here: the guards must be numbered alike).

use anyhow::Result;
use object::Object as _;
use std::path::{Path, PathBuf};

/// The build the system fuzzer runs, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SystemBuild {
    /// The lean sibling, at this path.
    Lean(PathBuf),
    /// The program itself, for this reason.
    Program(String),
}

impl SystemBuild {
    /// The executable to run.
    pub fn path<'a>(&'a self, program: &'a Path) -> &'a Path {
        match self {
            SystemBuild::Lean(p) => p,
            SystemBuild::Program(_) => program,
        }
    }

    /// `lean` or `program`, for campaign files.
    pub fn kind(&self) -> &'static str {
        match self {
            SystemBuild::Lean(_) => "lean",
            SystemBuild::Program(_) => "program",
        }
    }
}

/// The build to fuzz `program` (resolved) with at system level; with `allow` false,
/// the program itself.
pub fn choose(program: &Path, allow: bool) -> SystemBuild {
    if !allow {
        return SystemBuild::Program("the lean build is turned off (--no-lean)".into());
    }
    match lean_sibling(program) {
        Ok(Some(lean)) => SystemBuild::Lean(lean),
        Ok(None) => SystemBuild::Program(format!(
            "no lean build beside it ({} missing: linked by an older trestle-cc, or with {}=0)",
            trestle_abi::lean::sibling(program).display(),
            trestle_abi::lean::ENV_CC_LEAN
        )),
        Err(e) => SystemBuild::Program(format!("{e:#}")),
    }
}

/// The lean sibling of `program` if there is one and it belongs to it; an error says
/// why one that is there does not.
fn lean_sibling(program: &Path) -> Result<Option<PathBuf>> {
    let lean = trestle_abi::lean::sibling(program);
    let Ok(lean_bytes) = std::fs::read(&lean) else {
        return Ok(None);
    };
    let bytes = std::fs::read(program)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", program.display()))?;
    let id = object::File::parse(&*lean_bytes)
        .ok()
        .and_then(|f| f.build_id().ok().flatten().map(<[u8]>::to_vec));
    if id.as_deref() != Some(&trestle_abi::lean::build_id(&bytes)[..]) {
        anyhow::bail!("the lean build {} is not the one linked with this program (a stale one from an earlier build)", lean.display());
    }
    let (ours, theirs) = (
        trestle_exec::binary::guard_numbers(program)?,
        trestle_exec::binary::guard_numbers(&lean)?,
    );
    if ours != theirs {
        anyhow::bail!(
            "the lean build {} numbers its edges unlike the program",
            lean.display()
        );
    }
    Ok(Some(lean))
}

//! System-level coverage from a clang source-based coverage build
//! (`-fprofile-instr-generate -fcoverage-mapping`): which lines and branches of the
//! program's own sources a set of runs reached, read with `llvm-profdata` and
//! `llvm-cov export -format=lcov`.

use anyhow::{bail, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A source file, by the hash of its path (the path is in [`CoverageSet::files`]).
type FileKey = u64;

/// A branch direction: file, line, block, branch (lcov's `BRDA` numbers).
type Direction = (FileKey, u32, u32, u32);

/// What a set of runs covered: lines run at least once and branch directions taken,
/// beside every line and direction the program has.
///
/// Kept as numbers, not as text: a campaign measures the whole program's coverage for
/// every lifted test and batch of new queue entries, and sets of `file:line` strings
/// (some 40,000 small allocations a measurement on sed) left the heap fragmented,
/// tens of megabytes resident that no trim could give back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CoverageSet {
    /// The source files, by key.
    files: BTreeMap<FileKey, String>,
    /// Lines run.
    lines: BTreeSet<(FileKey, u32)>,
    /// Branch directions taken.
    taken: BTreeSet<Direction>,
    /// Every instrumented line, run or not.
    lines_total: BTreeSet<(FileKey, u32)>,
    /// Every branch direction, taken or not.
    branches_all: BTreeSet<Direction>,
    /// Branch directions in the program, taken or not.
    pub branches_total: usize,
}

impl CoverageSet {
    /// Branch directions taken.
    pub fn branches(&self) -> usize {
        self.taken.len()
    }

    /// Lines and branch directions `other` covered and `self` did not.
    pub fn new_in(&self, other: &CoverageSet) -> usize {
        other.lines.difference(&self.lines).count() + other.taken.difference(&self.taken).count()
    }

    /// What is not covered yet, by file: the line of every instrumented line not run
    /// and of every branch direction not taken (a line may come more than once). A
    /// comparison whose outcome never changed (`n <= 65532` always true) shows only as
    /// a branch direction: its line ran.
    pub fn uncovered(&self) -> BTreeMap<String, Vec<u32>> {
        let mut out: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        let lines = self.lines_total.difference(&self.lines).copied();
        let directions = self
            .branches_all
            .difference(&self.taken)
            .map(|&(file, line, _, _)| (file, line));
        for (file, line) in lines.chain(directions) {
            if let Some(name) = self.files.get(&file) {
                out.entry(name.clone()).or_default().push(line);
            }
        }
        out
    }

    /// Add `other`'s lines and directions.
    pub fn extend(&mut self, other: &CoverageSet) {
        for (key, name) in &other.files {
            self.files.entry(*key).or_insert_with(|| name.clone());
        }
        self.lines.extend(other.lines.iter().copied());
        self.taken.extend(other.taken.iter().copied());
        self.lines_total.extend(other.lines_total.iter().copied());
        self.branches_all.extend(other.branches_all.iter().copied());
        self.branches_total = self.branches_total.max(other.branches_total);
    }
}

/// Whether `program` was built for source-based coverage.
pub fn is_coverage_build(program: &Path) -> bool {
    use object::{Object as _, ObjectSection as _};
    let Ok(data) = std::fs::read(program) else {
        return false;
    };
    let Ok(obj) = object::File::parse(&*data) else {
        return false;
    };
    obj.sections()
        .any(|s| s.name().is_ok_and(|n| n == "__llvm_covmap"))
}

/// The coverage of the runs that wrote `profiles` (raw profiles of `program`).
pub fn measure(program: &Path, profiles: &[PathBuf]) -> Result<CoverageSet> {
    if profiles.is_empty() {
        return Ok(CoverageSet::default());
    }
    let dir = tempfile::Builder::new().prefix("trestle-cov-").tempdir()?;
    let merged = dir.path().join("merged.profdata");
    let out = trestle_exec::tools::output(
        Command::new(trestle_exec::tools::llvm_tool("llvm-profdata")?)
            .args(["merge", "-sparse", "-o"])
            .arg(&merged)
            .args(profiles),
    )?;
    if !out.status.success() {
        bail!(
            "llvm-profdata merge failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let out = trestle_exec::tools::output(
        Command::new(trestle_exec::tools::llvm_tool("llvm-cov")?)
            .args(["export", "-format=lcov", "-instr-profile"])
            .arg(&merged)
            .arg(program),
    )?;
    if !out.status.success() {
        bail!(
            "llvm-cov export failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(parse_lcov(&String::from_utf8_lossy(&out.stdout)))
}

/// Read lcov text.
pub fn parse_lcov(text: &str) -> CoverageSet {
    let mut set = CoverageSet::default();
    let mut file: FileKey = 0;
    let number = |v: &str| v.parse::<u32>().ok();
    for line in text.lines() {
        if let Some(f) = line.strip_prefix("SF:") {
            file = trestle_abi::ids::fnv1a64(f.as_bytes());
            set.files.entry(file).or_insert_with(|| f.to_owned());
        } else if let Some(rest) = line.strip_prefix("DA:") {
            let mut p = rest.split(',');
            if let (Some(l), Some(c)) = (p.next().and_then(number), p.next()) {
                set.lines_total.insert((file, l));
                if c.parse::<u64>().is_ok_and(|c| c > 0) {
                    set.lines.insert((file, l));
                }
            }
        } else if let Some(rest) = line.strip_prefix("BRDA:") {
            let p: Vec<&str> = rest.split(',').collect();
            if p.len() == 4 {
                set.branches_total += 1;
                if let (Some(l), Some(block), Some(branch)) =
                    (number(p[0]), number(p[1]), number(p[2]))
                {
                    let direction = (file, l, block, branch);
                    if p[3].parse::<u64>().is_ok_and(|c| c > 0) {
                        set.taken.insert(direction);
                    }
                    set.branches_all.insert(direction);
                }
            }
        }
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lcov_lines_and_branches() {
        let text =
            "SF:/s/a.c\nDA:3,1\nDA:4,0\nBRDA:3,0,0,1\nBRDA:3,0,1,-\nBRDA:3,0,2,0\nend_of_record\n";
        let s = parse_lcov(text);
        assert_eq!(s.lines.len() + s.taken.len(), 2);
        assert_eq!(s.branches(), 1);
        assert_eq!(s.branches_total, 3);
        let more = parse_lcov(&text.replace("DA:4,0", "DA:4,2"));
        assert_eq!(s.new_in(&more), 1);
        assert_eq!(more.new_in(&s), 0);
        // Line 4 never ran; line 3 ran, but two of its branch directions were never taken.
        assert_eq!(s.uncovered()["/s/a.c"], vec![4, 3, 3]);
    }
}

//! System-level coverage from a clang source-based coverage build
//! (`-fprofile-instr-generate -fcoverage-mapping`): which lines and branches of the
//! program's own sources a set of runs reached, read with `llvm-profdata` and
//! `llvm-cov export -format=lcov`.

use anyhow::{bail, Context as _, Result};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Covered items: `L file:line` for a line run at least once, `B file:line:block:branch`
/// for a branch direction taken.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CoverageSet {
    /// The items.
    pub items: BTreeSet<String>,
    /// Branch directions in the program, taken or not.
    pub branches_total: usize,
    /// Every instrumented line, `file:line`, run or not.
    pub lines_total: BTreeSet<String>,
    /// Every branch direction, `file:line:block:branch`, taken or not.
    pub branches_all: BTreeSet<String>,
}

impl CoverageSet {
    /// Branch directions taken.
    pub fn branches(&self) -> usize {
        self.items.iter().filter(|i| i.starts_with("B ")).count()
    }

    /// Items of `other` not in `self`.
    pub fn new_in(&self, other: &CoverageSet) -> usize {
        other.items.difference(&self.items).count()
    }

    /// What is not covered yet, by file: the line of every instrumented line not run
    /// and of every branch direction not taken (a line may come more than once). A
    /// comparison whose outcome never changed (`n <= 65532` always true) shows only as
    /// a branch direction: its line ran.
    pub fn uncovered(&self) -> std::collections::BTreeMap<String, Vec<u32>> {
        let mut out: std::collections::BTreeMap<String, Vec<u32>> = Default::default();
        let mut add = |file_line: &str| {
            if let Some((file, n)) = file_line.rsplit_once(':') {
                if let Ok(n) = n.parse() {
                    out.entry(file.to_owned()).or_default().push(n);
                }
            }
        };
        for l in &self.lines_total {
            if !self.items.contains(&format!("L {l}")) {
                add(l);
            }
        }
        for b in &self.branches_all {
            if !self.items.contains(&format!("B {b}")) {
                // file:line:block:branch → file:line
                if let Some(file_line) = b.rsplitn(3, ':').nth(2) {
                    add(file_line);
                }
            }
        }
        out
    }

    /// Add `other`'s items.
    pub fn extend(&mut self, other: &CoverageSet) {
        self.items.extend(other.items.iter().cloned());
        self.lines_total.extend(other.lines_total.iter().cloned());
        self.branches_all.extend(other.branches_all.iter().cloned());
        self.branches_total = self.branches_total.max(other.branches_total);
    }
}

/// Whether `program` was built for source-based coverage.
pub fn is_coverage_build(program: &Path) -> bool {
    use object::{Object as _, ObjectSection as _};
    let Ok(data) = std::fs::read(program) else { return false };
    let Ok(obj) = object::File::parse(&*data) else { return false };
    obj.sections().any(|s| s.name().is_ok_and(|n| n == "__llvm_covmap"))
}

fn llvm_tool(name: &str) -> Result<PathBuf> {
    for n in [format!("{name}-19"), name.to_owned()] {
        if let Some(p) = crate::validate::signature::which(&n) {
            return Ok(p);
        }
    }
    let p = PathBuf::from(format!("/usr/lib/llvm-19/bin/{name}"));
    if p.exists() {
        return Ok(p);
    }
    bail!("{name} not found (it comes with LLVM 19: apt-get install llvm-19)")
}

/// The coverage of the runs that wrote `profiles` (raw profiles of `program`).
pub fn measure(program: &Path, profiles: &[PathBuf]) -> Result<CoverageSet> {
    if profiles.is_empty() {
        return Ok(CoverageSet::default());
    }
    let dir = tempfile::Builder::new().prefix("trestle-cov-").tempdir()?;
    let merged = dir.path().join("merged.profdata");
    let out = Command::new(llvm_tool("llvm-profdata")?)
        .args(["merge", "-sparse", "-o"])
        .arg(&merged)
        .args(profiles)
        .output()
        .context("cannot run llvm-profdata")?;
    if !out.status.success() {
        bail!("llvm-profdata merge failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    let out = Command::new(llvm_tool("llvm-cov")?)
        .args(["export", "-format=lcov", "-instr-profile"])
        .arg(&merged)
        .arg(program)
        .output()
        .context("cannot run llvm-cov")?;
    if !out.status.success() {
        bail!("llvm-cov export failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(parse_lcov(&String::from_utf8_lossy(&out.stdout)))
}

/// Read lcov text.
pub fn parse_lcov(text: &str) -> CoverageSet {
    let mut set = CoverageSet::default();
    let mut file = String::new();
    for line in text.lines() {
        if let Some(f) = line.strip_prefix("SF:") {
            file = f.to_owned();
        } else if let Some(rest) = line.strip_prefix("DA:") {
            let mut p = rest.split(',');
            if let (Some(l), Some(c)) = (p.next(), p.next()) {
                set.lines_total.insert(format!("{file}:{l}"));
                if c.parse::<u64>().is_ok_and(|c| c > 0) {
                    set.items.insert(format!("L {file}:{l}"));
                }
            }
        } else if let Some(rest) = line.strip_prefix("BRDA:") {
            let p: Vec<&str> = rest.split(',').collect();
            if p.len() == 4 {
                set.branches_total += 1;
                let direction = format!("{file}:{}:{}:{}", p[0], p[1], p[2]);
                if p[3].parse::<u64>().is_ok_and(|c| c > 0) {
                    set.items.insert(format!("B {direction}"));
                }
                set.branches_all.insert(direction);
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
        let text = "SF:/s/a.c\nDA:3,1\nDA:4,0\nBRDA:3,0,0,1\nBRDA:3,0,1,-\nBRDA:3,0,2,0\nend_of_record\n";
        let s = parse_lcov(text);
        assert_eq!(s.items.len(), 2);
        assert_eq!(s.branches(), 1);
        assert_eq!(s.branches_total, 3);
        let mut more = s.clone();
        more.items.insert("L /s/a.c:4".into());
        assert_eq!(s.new_in(&more), 1);
        // Line 4 never ran; line 3 ran, but two of its branch directions were never taken.
        assert_eq!(s.uncovered()["/s/a.c"], vec![4, 3, 3]);
    }
}

//! `--changed-since`: which instrumented functions a `git diff` touches, and the source
//! lines each function spans (for scoring by uncovered code).

use crate::binary::Binary;
use anyhow::{bail, Context as _, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Functions whose source lines changed since `rev` in the work tree `source`.
pub fn changed_functions(binary: &Binary, source: &Path, rev: &str) -> Result<Vec<String>> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(source)
        .args(["diff", "--no-color", "-U0", rev, "--", "."])
        .output()
        .context("cannot run git")?;
    if !out.status.success() {
        bail!("git diff {rev} in {} failed: {}", source.display(), String::from_utf8_lossy(&out.stderr).trim());
    }
    let top = std::process::Command::new("git").arg("-C").arg(source).args(["rev-parse", "--show-toplevel"]).output()?;
    let top = PathBuf::from(String::from_utf8_lossy(&top.stdout).trim());
    let mut changed: BTreeMap<PathBuf, Vec<u32>> = BTreeMap::new();
    let mut file: Option<PathBuf> = None;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some(f) = line.strip_prefix("+++ ") {
            file = f.strip_prefix("b/").map(|f| top.join(f));
        } else if let (Some(h), Some(f)) = (line.strip_prefix("@@ "), &file) {
            // @@ -a,b +c,d @@
            let Some(plus) = h.split_whitespace().find(|p| p.starts_with('+')) else { continue };
            let mut it = plus[1..].split(',');
            let start: u32 = it.next().and_then(|x| x.parse().ok()).unwrap_or(0);
            let len: u32 = it.next().and_then(|x| x.parse().ok()).unwrap_or(1);
            let lines = changed.entry(f.clone()).or_default();
            // A pure deletion changes the code around line `start`.
            lines.extend(start..start + len.max(1));
        }
    }
    Ok(functions_at(binary, &changed))
}

/// The functions (by display name) whose definitions contain the given lines: a
/// function runs from its first line to the next function's in the same file.
fn functions_at(binary: &Binary, lines: &BTreeMap<PathBuf, Vec<u32>>) -> Vec<String> {
    let mut by_file: BTreeMap<String, Vec<(u32, String)>> = BTreeMap::new();
    for f in binary.functions.values() {
        if let Some(file) = &f.file {
            if f.line > 0 {
                by_file.entry(file.clone()).or_default().push((f.line, f.display_name().to_owned()));
            }
        }
    }
    let mut out = BTreeSet::new();
    for (file, mut fns) in by_file {
        fns.sort();
        let Some(changed) = lines.iter().find(|(p, _)| same_source(p, &file)).map(|(_, l)| l) else { continue };
        for (i, (start, name)) in fns.iter().enumerate() {
            let end = fns.get(i + 1).map_or(u32::MAX, |n| n.0);
            if changed.iter().any(|l| (*start..end).contains(l)) {
                out.insert(name.clone());
            }
        }
    }
    out.into_iter().collect()
}

pub(super) fn same_source(a: &Path, debug_file: &str) -> bool {
    let b = Path::new(debug_file);
    if a == b {
        return true;
    }
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a.ends_with(b) || b.ends_with(a.strip_prefix("/").unwrap_or(a)),
    }
}

/// Each function's source file and the lines it spans (from its first line to the next
/// function's in the file), by function id.
pub(super) type FunctionLines = BTreeMap<u64, (String, u32, u32)>;

/// The lines each function spans, for scoring by uncovered code.
pub(super) fn function_lines(binary: &Binary) -> FunctionLines {
    let mut by_file: BTreeMap<String, Vec<(u32, u64)>> = BTreeMap::new();
    for f in binary.functions.values() {
        if let Some(file) = &f.file {
            by_file.entry(file.clone()).or_default().push((f.line, f.id));
        }
    }
    let mut out = BTreeMap::new();
    for (file, mut fns) in by_file {
        fns.sort();
        for (i, (start, id)) in fns.iter().enumerate() {
            let end = fns.get(i + 1).map_or(u32::MAX, |n| n.0);
            out.insert(*id, (file.clone(), *start, end));
        }
    }
    out
}

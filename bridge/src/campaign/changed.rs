//! `--changed-since`: which instrumented functions a `git diff` touches, and the source
//! lines each function spans (for scoring by uncovered code).

use anyhow::{bail, Context as _, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use trestle_exec::binary::Binary;

/// Functions whose source lines changed since `rev` in the work tree `source`.
pub fn changed_functions(binary: &Binary, source: &Path, rev: &str) -> Result<Vec<String>> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(source)
        .args(["diff", "--no-color", "-U0", rev, "--", "."])
        .output()
        .context("cannot run git")?;
    if !out.status.success() {
        bail!(
            "git diff {rev} in {} failed: {}",
            source.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let top = std::process::Command::new("git")
        .arg("-C")
        .arg(source)
        .args(["rev-parse", "--show-toplevel"])
        .output()?;
    let top = PathBuf::from(String::from_utf8_lossy(&top.stdout).trim());
    let mut changed: BTreeMap<PathBuf, Vec<u32>> = BTreeMap::new();
    let mut file: Option<PathBuf> = None;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some(f) = line.strip_prefix("+++ ") {
            file = f.strip_prefix("b/").map(|f| top.join(f));
        } else if let (Some(h), Some(f)) = (line.strip_prefix("@@ "), &file) {
            // @@ -a,b +c,d @@
            let Some(plus) = h.split_whitespace().find(|p| p.starts_with('+')) else {
                continue;
            };
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
                by_file
                    .entry(file.clone())
                    .or_default()
                    .push((f.line, f.display_name().to_owned()));
            }
        }
    }
    let mut out = BTreeSet::new();
    for (file, mut fns) in by_file {
        fns.sort();
        let Some(changed) = lines
            .iter()
            .find(|(p, _)| same_source(p, &file))
            .map(|(_, l)| l)
        else {
            continue;
        };
        for (i, (start, name)) in fns.iter().enumerate() {
            let end = fns.get(i + 1).map_or(u32::MAX, |n| n.0);
            if changed.iter().any(|l| (*start..end).contains(l)) {
                out.insert(name.clone());
            }
        }
    }
    out.into_iter().collect()
}

/// Whether path `a` (from git, or from a coverage report) and a function's debug-info
/// file name the same source file: the same path, or one path the tail of the other.
pub(super) fn same_source(a: &Path, debug_file: &str) -> bool {
    let b = Path::new(debug_file);
    if a == b {
        return true;
    }
    if let (Ok(x), Ok(y)) = (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        if x == y {
            return true;
        }
    }
    let (a, b) = (tidy(a), tidy(b));
    common_tail(a, b) == a.components().count().min(b.components().count())
}

/// `p` without a leading `./`.
fn tidy(p: &Path) -> &Path {
    p.strip_prefix("./").unwrap_or(p)
}

/// How many trailing path components `a` and `b` share (`./` aside).
fn common_tail(a: &Path, b: &Path) -> usize {
    tidy(a)
        .components()
        .rev()
        .zip(tidy(b).components().rev())
        .take_while(|(x, y)| x == y)
        .count()
}

/// Among a report's files, the one that is `debug_file`: the same file
/// ([`same_source`]), or else the one whose path shares the longest tail with it, if
/// only one does. The coverage build (`--validate-with`) is a second build of the
/// sources, usually in another directory: `/b/cov/sed-4.9/sed/execute.c` is the
/// fuzzed build's `/b/trestle/sed-4.9/sed/execute.c`, not `…/lib/execute.c`.
pub(super) fn matching_source<'a, V>(
    files: impl IntoIterator<Item = (&'a str, V)>,
    debug_file: &str,
) -> Option<V> {
    let debug = Path::new(debug_file);
    let mut best: Option<(usize, V)> = None;
    let mut tied = false;
    for (f, v) in files {
        let f = Path::new(f);
        if same_source(f, debug_file) {
            return Some(v);
        }
        let n = common_tail(f, debug);
        match &best {
            Some((m, _)) if n < *m => {}
            Some((m, _)) if n == *m => tied = true,
            _ if n > 0 => {
                best = Some((n, v));
                tied = false;
            }
            _ => {}
        }
    }
    best.filter(|_| !tied).map(|(_, v)| v)
}

/// Each function's source file and the lines it spans (from its first line to the next
/// function's in the file), by function id.
pub(super) type FunctionLines = BTreeMap<u64, (String, u32, u32)>;

/// The lines each function spans, for scoring by uncovered code.
pub(super) fn function_lines(binary: &Binary) -> FunctionLines {
    let mut by_file: BTreeMap<String, Vec<(u32, u64)>> = BTreeMap::new();
    for f in binary.functions.values() {
        if let Some(file) = &f.file {
            by_file
                .entry(file.clone())
                .or_default()
                .push((f.line, f.id));
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

#[cfg(test)]
mod tests {
    use super::{matching_source, same_source};
    use std::path::Path;

    #[test]
    fn a_source_file_is_found_in_another_build_and_relative_to_either() {
        let fuzzed = "/b/trestle/sed-4.9/sed/execute.c";
        // A path from git, relative to the work tree.
        assert!(same_source(Path::new("sed/execute.c"), fuzzed));
        assert!(same_source(Path::new("./sed/execute.c"), fuzzed));
        assert!(same_source(
            Path::new("/b/trestle/sed-4.9/sed/execute.c"),
            "sed/execute.c"
        ));
        assert!(!same_source(Path::new("lib/execute.c"), fuzzed));
        // The coverage build of the same sources elsewhere: the file sharing the longest
        // tail, if only one does.
        let cov = [
            "/b/cov/sed-4.9/lib/execute.c",
            "/b/cov/sed-4.9/sed/execute.c",
            "/b/cov/sed-4.9/sed/compile.c",
            "/b/cov/sed-4.9/basicdefs.h",
        ];
        let find = |debug: &str| matching_source(cov.iter().map(|f| (*f, *f)), debug);
        assert_eq!(find(fuzzed), Some("/b/cov/sed-4.9/sed/execute.c"));
        assert_eq!(
            find("/b/trestle/sed-4.9/basicdefs.h"),
            Some("/b/cov/sed-4.9/basicdefs.h")
        );
        assert_eq!(find("/b/trestle/sed-4.9/sed/debug.c"), None);
        // Two files as close as each other: neither.
        assert_eq!(find("/b/trestle/sed-4.9/src/execute.c"), None);
    }
}

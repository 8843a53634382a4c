//! System tests: loading their JSON format (docs/formats.md), laying out a test's working
//! directory, and running a program on it.

use anyhow::{bail, Context as _, Result};
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use trestle_abi::unit::SystemTest;

/// Content of a file or of stdin in the JSON form: text, or bytes in base64.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// UTF-8 text.
    Text(String),
    /// Arbitrary bytes.
    Base64 {
        /// The bytes, base64-encoded.
        base64: String,
    },
}

impl Content {
    /// Text if the bytes are UTF-8, base64 otherwise.
    pub fn from_bytes(b: &[u8]) -> Content {
        match std::str::from_utf8(b) {
            Ok(s) => Content::Text(s.to_owned()),
            Err(_) => Content::Base64 {
                base64: base64::engine::general_purpose::STANDARD.encode(b),
            },
        }
    }
}

/// A system test as written in JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonTest {
    /// Command-line arguments after the program name.
    #[serde(default)]
    pub args: Vec<String>,
    /// Standard input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<Content>,
    /// Files to create in the working directory.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, Content>,
    /// Environment variables.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// What the program did when the test was captured (`trestle capture`); running
    /// the test does not depend on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<Expect>,
}

/// How a captured test's run ended and what it wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// `exit N` or `signal N`.
    pub status: String,
    /// What went to stdout; absent when it was a terminal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<Output>,
    /// What went to stderr; absent when it was a terminal or went with stdout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<Output>,
    /// stdout and stderr went to one file or pipe: `stdout` is both.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub merged: bool,
    /// Files it opened for writing, as it named them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writes: Vec<String>,
}

/// Output of a captured run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Output {
    /// Bytes written.
    pub bytes: u64,
    /// SHA-256 of them, hex; absent when there were more than capturing kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// The JSON form of a test.
pub fn to_json(t: &SystemTest) -> JsonTest {
    JsonTest {
        args: t.args.clone(),
        stdin: t.stdin.as_deref().map(Content::from_bytes),
        files: t
            .files
            .iter()
            .map(|(k, v)| (k.clone(), Content::from_bytes(v)))
            .collect(),
        env: t.env.clone(),
        expect: None,
    }
}

/// Write a test as JSON.
pub fn save_test(t: &SystemTest, path: &Path) -> Result<()> {
    std::fs::write(path, serde_json::to_vec_pretty(&to_json(t))?)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// A system test and where it came from.
#[derive(Debug, Clone)]
pub struct NamedTest {
    /// Unique name (the file stem).
    pub name: String,
    /// The JSON file.
    pub path: PathBuf,
    /// The test.
    pub test: SystemTest,
}

/// Decode a content value.
pub fn content_bytes(c: &Content) -> Result<Vec<u8>> {
    match c {
        Content::Text(s) => Ok(s.as_bytes().to_vec()),
        Content::Base64 { base64 } => base64::engine::general_purpose::STANDARD
            .decode(base64)
            .context("invalid base64 content"),
    }
}

/// Parse and check one system test file.
pub fn load_test(path: &Path) -> Result<SystemTest> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read system test {}", path.display()))?;
    let json: JsonTest = serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("malformed system test {}: {e}", path.display()))?;
    from_json(&json).map_err(|e| anyhow::anyhow!("malformed system test {}: {e:#}", path.display()))
}

/// A test from its JSON form, checked: file names inside its directory and layable
/// out together, contents decoded.
pub fn from_json(json: &JsonTest) -> Result<SystemTest> {
    let mut test = SystemTest {
        args: json.args.clone(),
        env: json.env.clone(),
        ..Default::default()
    };
    for (name, content) in &json.files {
        let p = Path::new(name);
        if name.is_empty()
            || p.is_absolute()
            || p.components().any(|c| !matches!(c, Component::Normal(_)))
        {
            bail!("file name {name:?} must be a relative path inside the test directory");
        }
        let bytes = content_bytes(content).with_context(|| format!("file {name:?}"))?;
        test.files.insert(name.clone(), bytes);
    }
    if let Some((f, g)) = layout_conflict(test.files.keys().map(String::as_str)) {
        bail!("file {f:?} and {g:?} cannot both be made (one is inside the other)");
    }
    if let Some(stdin) = &json.stdin {
        test.stdin = Some(content_bytes(stdin).context("stdin")?);
    }
    Ok(test)
}

/// Load every `*.json` under `path` (or `path` itself if it is a file), sorted by name.
pub fn load_tests(path: &Path) -> Result<Vec<NamedTest>> {
    let mut files = Vec::new();
    if path.is_dir() {
        for entry in
            std::fs::read_dir(path).with_context(|| format!("cannot list {}", path.display()))?
        {
            let p = entry?.path();
            if p.extension().is_some_and(|e| e == "json") {
                files.push(p);
            }
        }
        files.sort();
        if files.is_empty() {
            bail!("no system tests (*.json) in {}", path.display());
        }
    } else if path.exists() {
        files.push(path.to_owned());
    } else {
        bail!("system tests not found: {}", path.display());
    }
    let mut out: Vec<NamedTest> = Vec::new();
    for f in files {
        let test = load_test(&f)?;
        let stem = f
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "test".into());
        let mut name = stem.clone();
        let mut k = 2;
        while out.iter().any(|t| t.name == name) {
            name = format!("{stem}-{k}");
            k += 1;
        }
        out.push(NamedTest {
            name,
            path: f,
            test,
        });
    }
    Ok(out)
}

/// Two of a test's file names that cannot both be laid out: a file and a name
/// inside it (`a` and `a/b`, or `a` and the directory `a/`).
pub fn layout_conflict<'a>(names: impl IntoIterator<Item = &'a str>) -> Option<(String, String)> {
    let names: Vec<&str> = names.into_iter().collect();
    for f in names.iter().filter(|n| !n.ends_with('/')) {
        let under = format!("{f}/");
        if let Some(g) = names.iter().find(|g| g.starts_with(&under)) {
            return Some((f.to_string(), g.to_string()));
        }
    }
    None
}

/// Create the test's files in `dir`.
pub fn materialise(test: &SystemTest, dir: &Path) -> Result<()> {
    for (name, content) in &test.files {
        create_file(dir, name, content)?;
    }
    Ok(())
}

/// Create one of a test's files, `name`, in `dir`, with the directories it is in; a
/// name ending in `/` is an empty directory (one the program writes into), whatever
/// its content.
pub fn create_file(dir: &Path, name: &str, content: &[u8]) -> Result<()> {
    let p = dir.join(name);
    if name.ends_with('/') {
        return std::fs::create_dir_all(&p)
            .with_context(|| format!("cannot create {}", p.display()));
    }
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    std::fs::write(&p, content).with_context(|| format!("cannot create {}", p.display()))
}

/// Where per-run files go when `TRESTLE_TMPDIR` is not set: memory, if the machine has
/// a writable `/dev/shm`.
const MEMORY_DIR: &str = "/dev/shm";

/// A fresh directory for one or many runs' files (working directories, stdin). It
/// lives in memory where it can (`TRESTLE_TMPDIR`, else `/dev/shm`, else the system's
/// temporary directory): on a disk, every input file truncated or deleted is a
/// filesystem operation, and on one mounted with `discard` a device request the
/// fuzzer waits for, thousands of times a second. Removed when dropped.
pub fn scratch_dir(prefix: &str) -> Result<tempfile::TempDir> {
    let builder = || {
        let mut b = tempfile::Builder::new();
        b.prefix(prefix);
        b
    };
    if let Some(root) = std::env::var_os("TRESTLE_TMPDIR") {
        return builder().tempdir_in(&root).with_context(|| {
            format!(
                "cannot create a directory in TRESTLE_TMPDIR={}",
                Path::new(&root).display()
            )
        });
    }
    if let Ok(d) = builder().tempdir_in(MEMORY_DIR) {
        return Ok(d);
    }
    builder()
        .tempdir()
        .context("cannot create a temporary directory")
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RunStatus {
    /// Exited with a status.
    Exited(i32),
    /// Killed by a signal.
    Signaled(i32),
    /// Did not finish in time (killed).
    TimedOut,
}

impl RunStatus {
    /// The status of a child that ended with wait status `w`.
    pub fn from_wait(w: i32) -> RunStatus {
        if libc::WIFSIGNALED(w) {
            RunStatus::Signaled(libc::WTERMSIG(w))
        } else {
            RunStatus::Exited(libc::WEXITSTATUS(w))
        }
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunStatus::Exited(c) => write!(f, "exit {c}"),
            RunStatus::Signaled(s) => write!(f, "signal {s}"),
            RunStatus::TimedOut => write!(f, "timeout"),
        }
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_file_and_a_name_inside_it_cannot_both_be_laid_out() {
        assert_eq!(
            layout_conflict(["a", "a/a"]),
            Some(("a".into(), "a/a".into()))
        );
        assert_eq!(
            layout_conflict(["out", "out/"]),
            Some(("out".into(), "out/".into()))
        );
        assert_eq!(layout_conflict(["a/", "a/b", "ab", "b"]), None);
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("t.json");
        std::fs::write(&t, r#"{"files": {"a": "x", "a/a": "y"}}"#).unwrap();
        let e = load_test(&t).unwrap_err().to_string();
        assert!(e.contains("cannot both be made"), "{e}");
    }

    use super::*;

    #[test]
    fn malformed_tests_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bad.json");
        std::fs::write(&p, r#"{"args": "not a list"}"#).unwrap();
        let e = load_test(&p).unwrap_err().to_string();
        assert!(e.contains("bad.json"), "{e}");
        std::fs::write(&p, r#"{"files": {"../escape": "x"}}"#).unwrap();
        let e = load_test(&p).unwrap_err().to_string();
        assert!(e.contains("relative path"), "{e}");
        std::fs::write(
            &p,
            r#"{"args": ["a"], "stdin": {"base64": "AAEC"}, "files": {"d/f": "x"}}"#,
        )
        .unwrap();
        let t = load_test(&p).unwrap();
        assert_eq!(t.stdin.unwrap(), vec![0, 1, 2]);
        assert_eq!(t.files["d/f"], b"x");
    }
}

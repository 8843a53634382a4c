//! Helpers for trestle's end-to-end tests: finding the built tools, compiling a
//! subject with `trestle-cc`, and running the `trestle` CLI.
//!
//! The tools must be built first (`cargo build --workspace`, which `tests/run.sh`
//! does); a missing tool fails the test with a message that says so.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The directory holding the built tools (`target/<profile>`).
pub fn tool_dir() -> PathBuf {
    if let Ok(d) = std::env::var("TRESTLE_TOOL_DIR") {
        return PathBuf::from(d);
    }
    // target/<profile>/deps/<test binary>
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .to_owned()
}

/// Path of a built tool, checked to exist.
pub fn tool(name: &str) -> PathBuf {
    let p = tool_dir().join(name);
    assert!(
        p.exists(),
        "{} is missing: run `cargo build --workspace` before the tests",
        p.display()
    );
    p
}

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is inside the repo")
        .to_owned()
}

/// A bundled subject's directory.
pub fn subject(name: &str) -> PathBuf {
    repo().join("tests/subjects").join(name)
}

/// Run a command, returning its output; panics with stderr if it cannot start.
pub fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

/// Run a command that must succeed; returns stdout.
pub fn ok(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Compile every C/C++ source of `src_dir` into `out` with trestle-cc / trestle-cxx
/// at optimisation level `opt` (e.g. "-O2").
pub fn build_subject(src_dir: &Path, opt: &str, out: &Path) {
    let mut sources: Vec<PathBuf> = std::fs::read_dir(src_dir)
        .expect("subject dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "c" || x == "cpp"))
        .collect();
    sources.sort();
    let cxx = sources
        .iter()
        .any(|p| p.extension().is_some_and(|x| x == "cpp"));
    let compiler = tool(if cxx { "trestle-cxx" } else { "trestle-cc" });
    ok(Command::new(compiler)
        .arg(opt)
        .args(&sources)
        .arg("-o")
        .arg(out));
}

/// Compile a single C source given as text.
pub fn build_c(dir: &Path, name: &str, source: &str, opt: &str) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).expect("write source");
    let out = dir.join(name);
    ok(Command::new(tool("trestle-cc"))
        .arg(opt)
        .arg(&src)
        .arg("-o")
        .arg(&out));
    out
}

/// `trestle replay UNITS --check --json`: the summary, after checking the exit status
/// against it (0 when every unit with an oracle replays faithfully, else 1).
pub fn check_replay(units: &Path) -> serde_json::Value {
    check_replay_with(units, &[])
}

/// [`check_replay`] with more options of `trestle replay`.
pub fn check_replay_with(units: &Path, more: &[&str]) -> serde_json::Value {
    let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&"replay", &units, &"--check", &"--json"];
    args.extend(more.iter().map(|a| a as &dyn AsRef<std::ffi::OsStr>));
    let out = run(&mut trestle(&args));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "replay --json prints JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let n = |k: &str| summary[k].as_u64().expect("a count");
    let all_faithful = n("faithful") + n("no_oracle") == n("units");
    assert_eq!(
        out.status.code(),
        Some(if all_faithful { 0 } else { 1 }),
        "replay --check exit status for {summary}"
    );
    summary
}

/// The alarms of a campaign or lift directory (`alarms.json`).
pub fn alarm_list(dir: &Path) -> Vec<serde_json::Value> {
    let path = dir.join("alarms.json");
    let v: serde_json::Value = serde_json::from_slice(
        &std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    v["alarms"]
        .as_array()
        .unwrap_or_else(|| panic!("{} has no alarm list: {v}", path.display()))
        .clone()
}

/// Run `trestle` with `args`.
pub fn trestle(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Command {
    let mut c = Command::new(tool("trestle"));
    for a in args {
        c.arg(a.as_ref());
    }
    c
}

/// Write a system test JSON file.
pub fn write_test(dir: &Path, name: &str, json: &serde_json::Value) -> PathBuf {
    std::fs::create_dir_all(dir).expect("test dir");
    let p = dir.join(format!("{name}.json"));
    std::fs::write(&p, serde_json::to_vec_pretty(json).expect("json")).expect("write test");
    p
}

/// The SARIF 2.1.0 JSON schema (OASIS), as shipped in the `serde-sarif` crate's
/// sources: cargo downloads that crate (without building it) into its registry for a
/// throwaway project, and `cargo metadata` says where it is.
pub fn sarif_schema() -> serde_json::Value {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join("src")).expect("src dir");
    std::fs::write(dir.path().join("src/lib.rs"), "").expect("lib.rs");
    std::fs::write(
        dir.path().join("Cargo.toml"),
        "[package]\nname = \"sarif-schema-probe\"\nversion = \"0.0.0\"\nedition = \"2021\"\n[dependencies]\nserde-sarif = \"=0.8.0\"\n",
    )
    .expect("Cargo.toml");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let meta = ok(Command::new(cargo)
        .args(["metadata", "--format-version", "1"])
        .current_dir(dir.path()));
    let meta: serde_json::Value = serde_json::from_str(&meta).expect("cargo metadata prints JSON");
    let manifest = meta["packages"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == "serde-sarif"))
        .and_then(|p| p["manifest_path"].as_str())
        .expect("serde-sarif in cargo metadata");
    let schema = Path::new(manifest)
        .parent()
        .expect("crate dir")
        .join("src/schema.json");
    let text = std::fs::read(&schema).unwrap_or_else(|e| panic!("{}: {e}", schema.display()));
    let v: serde_json::Value = serde_json::from_slice(&text).expect("the schema is JSON");
    assert_eq!(
        v["title"],
        "Static Analysis Results Format (SARIF) Version 2.1.0 JSON Schema",
        "{}",
        schema.display()
    );
    v
}

//! Bad input gets a one-line error that names the file, never a panic or a silent
//! wrong result: truncated and corrupted traces, a unit from another binary, a
//! missing program, a malformed system test.

use serde_json::json;
use std::path::Path;
use trestle_tests::*;

const SMALL: &str = r#"
#include <stdio.h>
#include <string.h>
static int len_plus(const char *s, int k) { return (int)strlen(s) + k; }
int main(int argc, char **argv) {
    int t = 0;
    for (int i = 1; i < argc; i++) t += len_plus(argv[i], i);
    printf("%d\n", t);
    return 0;
}
"#;

/// Build the small subject, record one test, return (program, traces dir).
fn recorded(dir: &Path, name: &str, source: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let prog = build_c(dir, name, source, "-O2");
    let seeds = dir.join(format!("{name}-seeds"));
    write_test(&seeds, "one", &json!({"args": ["abc", "de"]}));
    let traces = dir.join(format!("{name}-traces"));
    ok(&mut trestle(&[&"record", &"--program", &prog, &"--tests", &seeds, &"--out", &traces]));
    (prog, traces)
}

fn trace_file(traces: &Path) -> std::path::PathBuf {
    let d = traces.join("one");
    std::fs::read_dir(&d)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "trace"))
        .expect("a trace file")
}

fn fails_with(cmd: &mut std::process::Command, needles: &[&str]) -> String {
    let out = run(cmd);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{cmd:?} should fail; stderr:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    for n in needles {
        assert!(err.contains(n), "expected {n:?} in:\n{err}");
    }
    err
}

#[test]
fn a_truncated_trace_is_reported_with_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let (_, traces) = recorded(dir.path(), "small", SMALL);
    let tf = trace_file(&traces);
    let bytes = std::fs::read(&tf).unwrap();
    std::fs::write(&tf, &bytes[..bytes.len() - 5]).unwrap();
    let name = tf.file_name().unwrap().to_string_lossy().into_owned();
    fails_with(&mut trestle(&[&"carve", &traces, &"--out", &dir.path().join("u")]), &[&name, "byte offset", "truncated"]);
}

#[test]
fn a_corrupted_trace_is_reported_with_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let (_, traces) = recorded(dir.path(), "small", SMALL);
    let tf = trace_file(&traces);
    let mut bytes = std::fs::read(&tf).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&tf, &bytes).unwrap();
    let name = tf.file_name().unwrap().to_string_lossy().into_owned();
    fails_with(&mut trestle(&[&"carve", &traces, &"--out", &dir.path().join("u")]), &[&name, "byte offset"]);
}

#[test]
fn a_unit_from_another_binary_is_refused_naming_the_unit() {
    let dir = tempfile::tempdir().unwrap();
    let (_, traces) = recorded(dir.path(), "small", SMALL);
    let units = dir.path().join("units");
    ok(&mut trestle(&[&"carve", &traces, &"--out", &units]));
    let other_src = SMALL.replace("+ k;", "+ k + 1;").replace("len_plus", "len_plus2");
    let other = build_c(dir.path(), "other", &other_src, "-O2");
    fails_with(
        &mut trestle(&[&"replay", &units, &"--check", &"--program", &other]),
        &[".unit", "another binary"],
    );
}

#[test]
fn a_missing_program_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let seeds = dir.path().join("seeds");
    write_test(&seeds, "t", &json!({"args": []}));
    fails_with(
        &mut trestle(&[&"record", &"--program", &dir.path().join("no-such-prog"), &"--tests", &seeds, &"--out", &dir.path().join("o")]),
        &["no-such-prog"],
    );
}

#[test]
fn a_program_not_built_with_trestle_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let seeds = dir.path().join("seeds");
    write_test(&seeds, "t", &json!({"args": []}));
    fails_with(
        &mut trestle(&[&"record", &"--program", &"/bin/true", &"--tests", &seeds, &"--out", &dir.path().join("o")]),
        &["/bin/true", "trestle-cc"],
    );
}

#[test]
fn a_malformed_system_test_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let prog = build_c(dir.path(), "small", SMALL, "-O0");
    let seeds = dir.path().join("seeds");
    std::fs::create_dir_all(&seeds).unwrap();
    std::fs::write(seeds.join("broken.json"), r#"{"args": ["a", 3]}"#).unwrap();
    let err = fails_with(
        &mut trestle(&[&"record", &"--program", &prog, &"--tests", &seeds, &"--out", &dir.path().join("o")]),
        &["broken.json", "malformed system test"],
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}

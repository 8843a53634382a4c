//! Bad input gets a one-line error that names the file, never a panic or a silent
//! wrong result: truncated and corrupted traces, a trace or a unit from another
//! build, a unit whose extents overlap, a replay that wrecks its own process, a
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
    ok(&mut trestle(&[
        &"record",
        &"--program",
        &prog,
        &"--tests",
        &seeds,
        &"--out",
        &traces,
    ]));
    (prog, traces)
}

fn trace_file(traces: &Path) -> std::path::PathBuf {
    let d = traces.join("one");
    std::fs::read_dir(&d)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.extension()
                .is_some_and(|x| x == trestle_abi::trace::TRACE_EXT)
        })
        .expect("a trace file")
}

fn fails_with(cmd: &mut std::process::Command, needles: &[&str]) -> String {
    let out = run(cmd);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    // Bad input is exit status 2 (1 is for a negative finding).
    assert_eq!(
        out.status.code(),
        Some(2),
        "{cmd:?} should fail with status 2; stderr:\n{err}"
    );
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
    fails_with(
        &mut trestle(&[&"carve", &traces, &"--out", &dir.path().join("u")]),
        &[&name, "byte offset", "truncated"],
    );
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
    fails_with(
        &mut trestle(&[&"carve", &traces, &"--out", &dir.path().join("u")]),
        &[&name, "byte offset"],
    );
}

#[test]
fn a_unit_from_another_binary_is_refused_naming_the_unit() {
    let dir = tempfile::tempdir().unwrap();
    let (_, traces) = recorded(dir.path(), "small", SMALL);
    let units = dir.path().join("units");
    ok(&mut trestle(&[&"carve", &traces, &"--out", &units]));
    let other_src = SMALL
        .replace("+ k;", "+ k + 1;")
        .replace("len_plus", "len_plus2");
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
        &mut trestle(&[
            &"record",
            &"--program",
            &dir.path().join("no-such-prog"),
            &"--tests",
            &seeds,
            &"--out",
            &dir.path().join("o"),
        ]),
        &["no-such-prog"],
    );
}

#[test]
fn a_program_not_built_with_trestle_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let seeds = dir.path().join("seeds");
    write_test(&seeds, "t", &json!({"args": []}));
    fails_with(
        &mut trestle(&[
            &"record",
            &"--program",
            &"/bin/true",
            &"--tests",
            &seeds,
            &"--out",
            &dir.path().join("o"),
        ]),
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
        &mut trestle(&[
            &"record",
            &"--program",
            &prog,
            &"--tests",
            &seeds,
            &"--out",
            &dir.path().join("o"),
        ]),
        &["broken.json", "malformed system test"],
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}

#[test]
fn a_trace_from_another_build_is_refused_naming_the_trace() {
    let dir = tempfile::tempdir().unwrap();
    let (prog, traces) = recorded(dir.path(), "small", SMALL);
    // The program is rebuilt, changed, at the same path after recording.
    let changed = SMALL.replace("+ k;", "+ k + 1;");
    let src = dir.path().join("changed.c");
    std::fs::write(&src, changed).unwrap();
    ok(std::process::Command::new(tool("trestle-cc"))
        .arg("-O2")
        .arg(&src)
        .arg("-o")
        .arg(&prog));
    let name = trace_file(&traces)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    fails_with(
        &mut trestle(&[&"carve", &traces, &"--out", &dir.path().join("u")]),
        &[&name, "another binary"],
    );
}

/// Carve the small subject; returns the units directory and the unit files.
fn carved(dir: &Path, name: &str, source: &str) -> (std::path::PathBuf, Vec<std::path::PathBuf>) {
    let (_, traces) = recorded(dir, name, source);
    let units = dir.join(format!("{name}-units"));
    ok(&mut trestle(&[&"carve", &traces, &"--out", &units]));
    let mut files = Vec::new();
    let mut stack = vec![units.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "unit") {
                files.push(p);
            }
        }
    }
    files.sort();
    (units, files)
}

/// The small subject with a global its function reads and writes.
const COUNTED: &str = r#"
#include <stdio.h>
#include <string.h>
static int calls;
static int len_plus(const char *s, int k) { calls++; return (int)strlen(s) + k + calls; }
int main(int argc, char **argv) {
    int t = 0;
    for (int i = 1; i < argc; i++) t += len_plus(argv[i], i);
    printf("%d\n", t);
    return 0;
}
"#;

#[test]
fn a_unit_whose_extents_overlap_is_an_error_naming_the_unit() {
    use trestle_abi::ExtentKind;
    let dir = tempfile::tempdir().unwrap();
    let (units, files) = carved(dir.path(), "counted", COUNTED);
    // Give a unit a second copy of a global it holds: both would be restored at the
    // global's one address.
    let (path, mut unit) = files
        .iter()
        .map(|p| {
            (
                p.clone(),
                trestle_bridge::carve::units::read_unit(p).unwrap(),
            )
        })
        .find(|(_, u)| {
            u.context
                .graph
                .extents
                .iter()
                .any(|e| matches!(e.kind, ExtentKind::Global { .. }))
        })
        .expect("a unit of len_plus, with `calls` in its context");
    let global = unit
        .context
        .graph
        .extents
        .iter()
        .find(|e| matches!(e.kind, ExtentKind::Global { .. }))
        .unwrap()
        .clone();
    unit.context.graph.extents.push(global);
    std::fs::write(&path, unit.encode()).unwrap();
    let out = run(&mut trestle(&[&"replay", &units, &"--check", &"--json"]));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["errors"], 1, "{summary:#}");
    let failure = summary["failures"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["verdict"].get("Error").is_some())
        .unwrap();
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        failure["unit"].as_str().unwrap().contains(&name),
        "{failure:#}"
    );
    assert!(
        failure["verdict"]["Error"]
            .as_str()
            .unwrap()
            .contains("overlap"),
        "{failure:#}"
    );
}

/// Functions that, in a replay only, wreck the process that replays them: end it
/// behind the runtime's back, or overwrite the runtime's own memory.
const WRECKER: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
extern char __data_start[], _end[];
static int replaying(void) { return getenv("@ENV_REPLAY@") != NULL; }
static int quit_behind_its_back(const char *s) {
    if (replaying()) _exit(3);
    return (int)strlen(s);
}
static int scribble_over_everything(const char *s) {
    if (replaying()) memset(__data_start, 0xa5, (size_t)(_end - __data_start));
    return (int)strlen(s) * 2;
}
int main(int argc, char **argv) {
    int t = 0;
    for (int i = 1; i < argc; i++) t += quit_behind_its_back(argv[i]) + scribble_over_everything(argv[i]);
    printf("%d\n", t);
    return 0;
}
"#;

#[test]
fn a_replay_that_wrecks_its_process_is_counted_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let source = WRECKER.replace("@ENV_REPLAY@", trestle_abi::hooks::ENV_REPLAY);
    let (units, _) = carved(dir.path(), "wrecker", &source);
    let out = run(&mut trestle(&[
        &"replay",
        &units,
        &"--check",
        &"--json",
        &"--timeout",
        &"5s",
    ]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let failures = summary["failures"].as_array().unwrap();
    let reason = |f: &str| {
        failures
            .iter()
            .filter(|x| x["function"] == f)
            .map(|x| x["verdict"].to_string())
            .collect::<Vec<_>>()
    };
    let quit = reason("quit_behind_its_back");
    assert!(
        !quit.is_empty() && quit.iter().all(|r| r.contains("exited with status 3")),
        "{quit:?}"
    );
    // Its runtime's locks and tables overwritten, the replay hangs or dies: either
    // way the unit is counted with the reason, and the check goes on.
    let scribbled = reason("scribble_over_everything");
    assert!(
        !scribbled.is_empty()
            && scribbled
                .iter()
                .all(|r| ["timed out", "crashed", "without a replay result"]
                    .iter()
                    .any(|w| r.contains(w))),
        "{scribbled:?}"
    );
    // The rest replays as recorded, except what sees the replay (main calls both
    // wreckers; `replaying` answers differently by design).
    let wrecked = [
        "quit_behind_its_back",
        "scribble_over_everything",
        "main",
        "replaying",
    ];
    let others: Vec<_> = failures
        .iter()
        .filter(|f| !wrecked.iter().any(|w| f["function"] == *w))
        .collect();
    assert!(others.is_empty(), "{others:#?}");
}

#[test]
fn a_reader_that_goes_away_stops_trestle_quietly() {
    // `trestle exec … | head -1`: more lines than a pipe holds, and the reader closes
    // its end after the first. trestle stops as a C tool does on SIGPIPE (status
    // 141), without a panic.
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let prog = build_c(dir.path(), "small", SMALL, "-O0");
    let tests = dir.path().join("tests");
    for i in 0..3000 {
        write_test(
            &tests,
            &format!("t{i:05}"),
            &json!({"args": [format!("a{i}")]}),
        );
    }
    let mut child = trestle(&[&"exec", &"--program", &prog, &tests])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(
        first.contains("t00000"),
        "the first line names the first test: {first}"
    );
    // The reader (and with it the pipe's read end) is gone now.
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "no panic: {err}");
    assert_eq!(
        out.status.code(),
        Some(141),
        "the status of a SIGPIPE'd tool: {err}"
    );
}

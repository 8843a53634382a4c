//! Lift and validate end to end on the planted-bug subject `requests`: unit findings
//! of the magic integer and the magic user name become true alarms whose reduced
//! system tests crash the uninstrumented program; the unit-only crash of
//! `first_char_class` is a false positive, suppressed; nothing else is reported.
//! And the sandbox contains what a hostile system test tries.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use trestle_tests::*;

fn json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .unwrap()
}

/// Fuzz the first unit of `function` (with at least `min_params` parameters) until
/// its first crash; returns the fuzz directory.
fn fuzz_until_crash(
    units: &Path,
    index: &Value,
    function: &str,
    min_params: u64,
    out: &Path,
) -> PathBuf {
    let row = index["units"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["function"] == function && r["params"].as_u64().unwrap() >= min_params)
        .unwrap_or_else(|| panic!("no {function} unit with {min_params} parameter(s)"));
    let unit = units.join(row["file"].as_str().unwrap());
    ok(&mut trestle(&[
        &"fuzz",
        &unit,
        &"--time",
        &"60s",
        &"--out",
        &out,
        &"--stop-on-crash",
        &"--json",
    ]));
    let crashes = std::fs::read_dir(out.join("crashes")).unwrap().count();
    assert!(crashes > 0, "fuzzing {function} found no crash in 60 s");
    out.to_owned()
}

fn clang(args: &[&dyn AsRef<std::ffi::OsStr>]) {
    let mut c = Command::new("clang-19");
    for a in args {
        c.arg(a.as_ref());
    }
    ok(&mut c);
}

#[test]
fn planted_bugs_are_true_alarms_and_the_unit_only_crash_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = subject("requests").join("requests.c");
    let harness = d.join("requests-trestle");
    ok(Command::new(tool("trestle-cc"))
        .args(["-O2", "-g"])
        .arg(&src)
        .arg("-o")
        .arg(&harness));
    // Validation builds: for coverage (decides "effective"), and plain.
    let cov = d.join("requests-cov");
    clang(&[
        &"-O1",
        &"-g",
        &"-fprofile-instr-generate",
        &"-fcoverage-mapping",
        &src,
        &"-o",
        &cov,
    ]);
    let plain = d.join("requests-plain");
    clang(&[&"-O2", &"-g", &src, &"-o", &plain]);

    let seeds = subject("requests").join("seeds");
    ok(&mut trestle(&[
        &"record",
        &"--program",
        &harness,
        &"--tests",
        &seeds,
        &"--out",
        &d.join("traces"),
    ]));
    let units = d.join("units");
    ok(&mut trestle(&[
        &"carve",
        &d.join("traces"),
        &"--out",
        &units,
    ]));
    let index = json(&units.join("index.json"));

    let f_int = fuzz_until_crash(&units, &index, "store_value", 2, &d.join("f-store"));
    let f_str = fuzz_until_crash(&units, &index, "check_login", 2, &d.join("f-login"));
    let f_unit = fuzz_until_crash(&units, &index, "first_char_class", 1, &d.join("f-class"));

    let out = d.join("lift");
    let o = run(&mut trestle(&[
        &"lift",
        &f_int,
        &f_str,
        &f_unit,
        &"--program",
        &cov,
        &"--seeds",
        &seeds,
        &"--out",
        &out,
        &"--max-queue",
        &"30",
    ]));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "lift failed:\n{stderr}");

    let alarms = alarm_list(&out);
    let functions: Vec<&str> = alarms
        .iter()
        .map(|a| a["function"].as_str().unwrap())
        .collect();
    assert!(
        functions.contains(&"store_value"),
        "magic integer not a true alarm: {alarms:?}\n{stderr}"
    );
    assert!(
        functions.contains(&"check_login"),
        "magic string not a true alarm: {alarms:?}\n{stderr}"
    );
    assert!(
        !functions.contains(&"first_char_class"),
        "the unit-only crash was reported: {alarms:?}"
    );
    assert_eq!(
        alarms.len(),
        2,
        "exactly the two planted bugs, nothing else: {alarms:?}"
    );
    for a in alarms {
        assert_eq!(a["matches_unit"], true, "{a}");
        let id = a["id"].as_str().unwrap();
        let ad = out.join("alarms").join(id);
        for f in [
            "lifted.json",
            "reduced.json",
            "reproduce.sh",
            "provenance.json",
            "summary.md",
            "unit-input.bin",
            "unit.c",
            "build.sh",
        ] {
            assert!(ad.join(f).exists(), "{} missing in {}", f, ad.display());
        }
        assert!(
            a["size_reduced"].as_u64().unwrap() <= a["size_lifted"].as_u64().unwrap(),
            "reduced test larger than the lifted one: {a}"
        );
        // The reduced test crashes the plain, uninstrumented program.
        let r = run(Command::new("sh").arg(ad.join("reproduce.sh")).arg(&plain));
        assert_eq!(
            r.status.code(),
            Some(139),
            "reduced test of {id} does not crash {} with SIGSEGV: {r:?}",
            plain.display()
        );
        let prov = json(&ad.join("provenance.json"));
        assert_eq!(prov["carved_invocation"]["function"], a["function"]);
        assert!(prov["seed_test"].as_str().is_some_and(|s| !s.is_empty()));
        assert!(prov["lifted_test"]["substitutions"]
            .as_array()
            .is_some_and(|s| !s.is_empty()));
    }
    // The unit-only crash was lifted, did not reproduce, and is kept with its reason.
    let fps: Vec<Value> = std::fs::read_dir(out.join("false-positives"))
        .unwrap()
        .map(|e| json(&e.unwrap().path().join("reason.json")))
        .collect();
    assert!(
        fps.iter().any(|r| r["function"] == "first_char_class"
            && r["reason"].as_str().unwrap().contains("no crash")),
        "first_char_class not among the false positives: {fps:?}"
    );
    let stats = json(&out.join("lift.json"));
    assert!(stats["coverage_measured"] == true);
    assert!(stats["lifted_tests"].as_u64().unwrap() >= 3);
    assert_eq!(stats["alarms"], 2);
}

const HOSTILE: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc < 2) return 0;
    if (!strcmp(argv[1], "write")) {           /* write outside the working directory */
        FILE *f = fopen(argv[2], "w");
        if (!f) { perror(argv[2]); return 2; }
        fputs("escaped\n", f);
        fclose(f);
        return 0;
    }
    if (!strcmp(argv[1], "memory")) {          /* touch 16 GiB */
        for (int i = 0; i < 16384; i++) {
            char *p = malloc(1 << 20);
            if (!p) { fputs("out of memory\n", stderr); return 3; }
            memset(p, 1, 1 << 20);
        }
        return 0;
    }
    if (!strcmp(argv[1], "spin")) { for (;;) {} }
    if (!strcmp(argv[1], "sleep")) { if (fork() == 0) { for (;;) pause(); } for (;;) pause(); }
    if (!strcmp(argv[1], "crash")) { volatile int *p = 0; *p = 1; }
    return 0;
}
"#;

#[test]
fn the_sandbox_contains_hostile_tests() {
    // Started for every run.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hostile.c"), HOSTILE).unwrap();
    let prog = dir.path().join("hostile");
    clang(&[&"-O0", &"-g", &dir.path().join("hostile.c"), &"-o", &prog]);
    hostile_tests_are_contained(dir.path(), &prog, false);
}

#[test]
fn the_sandbox_contains_hostile_tests_run_by_a_forkserver() {
    // Built with trestle-cc: one server in the sandbox, each run a fork of it.
    let dir = tempfile::tempdir().unwrap();
    let prog = build_c(dir.path(), "hostile", HOSTILE, "-O0");
    hostile_tests_are_contained(dir.path(), &prog, true);
}

fn hostile_tests_are_contained(d: &Path, prog: &Path, forked: bool) {
    // Outside the working directory: on the machine (read-only in the sandbox), and
    // under /tmp (a private, discarded tmpfs in the sandbox).
    let outside =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("escaped-{}.txt", std::process::id()));
    let outside_tmp = d.join("escaped.txt");
    let tests = d.join("tests");
    write_test(
        &tests,
        "write",
        &serde_json::json!({"args": ["write", outside.to_str().unwrap()]}),
    );
    write_test(
        &tests,
        "write_tmp",
        &serde_json::json!({"args": ["write", outside_tmp.to_str().unwrap()]}),
    );
    write_test(&tests, "memory", &serde_json::json!({"args": ["memory"]}));
    write_test(&tests, "spin", &serde_json::json!({"args": ["spin"]}));
    write_test(&tests, "sleep", &serde_json::json!({"args": ["sleep"]}));
    write_test(&tests, "crash", &serde_json::json!({"args": ["crash"]}));
    // Each run's directories go here (in memory by default): all of them must be gone.
    let scratch = d.join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    let out = run(trestle(&[
        &"validate",
        &tests,
        &"--program",
        &prog,
        &"--timeout",
        &"3s",
        &"--memory-mb",
        &"512",
        &"--json",
    ])
    .env("TRESTLE_TMPDIR", &scratch));
    // Some tests do not crash: validation did not confirm them all, exit status 1.
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let by = |name: &str| {
        lines
            .iter()
            .find(|l| {
                l["test"]
                    .as_str()
                    .unwrap()
                    .ends_with(&format!("{name}.json"))
            })
            .unwrap()
            .clone()
    };
    assert_eq!(by("write")["sandboxed"], true);
    assert!(lines.iter().all(|l| l["forkserver"] == forked), "{lines:?}");
    assert!(
        !outside.exists(),
        "a sandboxed test wrote {}",
        outside.display()
    );
    assert_eq!(by("write")["status"], "exit 2");
    assert!(
        !outside_tmp.exists(),
        "a sandboxed test wrote {}",
        outside_tmp.display()
    );
    assert!(
        by("memory")["limit"]
            .as_str()
            .is_some_and(|l| l.starts_with("memory")),
        "{}",
        by("memory")
    );
    assert!(
        by("spin")["limit"]
            .as_str()
            .is_some_and(|l| l.contains("time")),
        "{}",
        by("spin")
    );
    assert!(
        by("sleep")["limit"]
            .as_str()
            .is_some_and(|l| l.contains("wall-clock")),
        "{}",
        by("sleep")
    );
    assert!(by("spin")["wall_ms"].as_u64().unwrap() < 8000);
    let crash = by("crash");
    assert!(
        crash["crash"]
            .as_str()
            .unwrap()
            .starts_with("SIGSEGV in main"),
        "{crash}"
    );
    // Where exactly: the innermost frame of the program's own code, with its line.
    let line = HOSTILE
        .lines()
        .position(|l| l.contains("volatile int *p = 0"))
        .unwrap()
        + 1;
    let own = crash["stack"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["own"] == true)
        .cloned()
        .unwrap_or_default();
    assert_eq!(own["function"], "main", "{crash}");
    assert!(
        own["file"]
            .as_str()
            .is_some_and(|f| f.ends_with("hostile.c")),
        "{crash}"
    );
    assert_eq!(own["line"], line as u64, "{crash}");
    // Nothing left behind: no process of the hostile program, no sandbox directory.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let ps = ok(Command::new("ps").args(["-eo", "args"]));
    assert!(
        !ps.lines().any(|l| l.contains(prog.to_str().unwrap())),
        "a sandboxed process survived:\n{ps}"
    );
    let after: Vec<_> = std::fs::read_dir(&scratch)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .collect();
    assert!(after.is_empty(), "run directories left behind: {after:?}");
}

const RECURSE: &str = r#"
#include <stdio.h>
#include <stdlib.h>

/* "deep N" on stdin recurses through two functions until the stack runs out; the
   frames' sizes depend on N, so runs with different N run out in different places. */
static int down_b(int n, int pad);

static int down_a(int n, int pad) {
    volatile char frame[200];
    frame[n % 200] = (char)n;
    return down_b(n + 1, pad) + frame[0];
}

static int down_b(int n, int pad) {
    volatile char frame[64 + pad % 512];
    frame[0] = (char)n;
    return down_a(n + 1, pad) + frame[0];
}

int main(void) {
    int pad;
    if (scanf("deep %d", &pad) == 1)
        printf("%d\n", down_a(0, pad));
    return 0;
}
"#;

/// A crash by running out of stack is a stack overflow, named by the functions that
/// recur rather than by wherever the stack happened to run out: two runs that run out
/// in different places are one crash.
#[test]
fn a_runaway_recursion_is_one_stack_overflow_wherever_it_runs_out() {
    let dir = tempfile::tempdir().unwrap();
    let prog = build_c(dir.path(), "recurse", RECURSE, "-O1");
    let tests = dir.path().join("tests");
    for pad in [1, 77, 300] {
        write_test(
            &tests,
            &format!("deep{pad}"),
            &serde_json::json!({"stdin": format!("deep {pad}\n")}),
        );
    }
    let out = run(&mut trestle(&[
        &"validate",
        &tests,
        &"--program",
        &prog,
        &"--json",
    ]));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    for l in &lines {
        assert_eq!(l["crash"], "stack-overflow in down_a < down_b", "{l}");
    }
}

/// A unit hang that is a crash at system level: `slowcmd`'s `main` reads a command
/// from stdin and closes it; `check` spins for a second, then crashes. The unit
/// fuzzer, whose limit is milliseconds, keeps it as a timeout; lifting runs it on
/// the program, which crashes.
#[test]
fn a_unit_hang_that_crashes_the_program_is_a_true_alarm() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = subject("slowcmd").join("slowcmd.c");
    let harness = d.join("slowcmd-trestle");
    ok(Command::new(tool("trestle-cc"))
        .args(["-O2", "-g"])
        .arg(&src)
        .arg("-o")
        .arg(&harness));
    let plain = d.join("slowcmd-plain");
    clang(&[&"-O2", &"-g", &src, &"-o", &plain]);
    ok(&mut trestle(&[
        &"record",
        &"--program",
        &harness,
        &"--tests",
        &subject("slowcmd").join("seeds"),
        &"--out",
        &d.join("traces"),
    ]));
    let units = d.join("units");
    ok(&mut trestle(&[
        &"carve",
        &d.join("traces"),
        &"--out",
        &units,
    ]));
    let index = json(&units.join("index.json"));
    // main closed stdin after reading it: the stream is its parameter all the same.
    let row = index["units"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["function"] == "main" && r["test"] == "hello")
        .unwrap_or_else(|| panic!("no main unit: {index}"));
    assert_eq!(row["param_kinds"], serde_json::json!(["stream"]), "{row}");
    let fz = d.join("fz");
    let out = ok(&mut trestle(&[
        &"fuzz",
        &units.join(row["file"].as_str().unwrap()),
        &"--in-process",
        &"--time",
        &"30s",
        &"--out",
        &fz,
        &"--json",
    ]));
    let report: Value = serde_json::from_str(&out).unwrap();
    // Many executions of main, each served a new stdin: closing it did not end them.
    assert!(report["executions"].as_u64().unwrap() > 100, "{report}");
    assert!(
        std::fs::read_dir(fz.join("timeouts"))
            .map(|d| d.count())
            .unwrap_or(0)
            > 0,
        "no unit timeout in 30 s: {report}"
    );
    assert_eq!(
        std::fs::read_dir(fz.join("crashes"))
            .map(|d| d.count())
            .unwrap_or(0),
        0,
        "the unit never runs long enough to crash"
    );
    let lifted = d.join("lift");
    ok(&mut trestle(&[
        &"lift",
        &"--program",
        &plain,
        &"--out",
        &lifted,
        &"--max-queue",
        &"0",
        &"--no-reduce",
        &fz,
    ]));
    let alarms = alarm_list(&lifted);
    assert_eq!(alarms.len(), 1, "{alarms:?}");
    assert_eq!(alarms[0]["function"], "run_command");
    let reduced = lifted
        .join("alarms")
        .join(alarms[0]["id"].as_str().unwrap())
        .join("reduced.json");
    let t = json(&reduced);
    assert!(t["stdin"].as_str().unwrap().starts_with("check"), "{t}");
}

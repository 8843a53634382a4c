//! `trestle triage` end to end: an AFL++ output directory of a small parser with
//! four bugs (two NULL writes on two lines of one function, the first reached from
//! two callers, a runaway recursion that runs out of stack at different depths, and
//! a loop that never ends), one input that does not crash, one hang input that does
//! not hang; the plain build confirms the crashes and the hang.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use trestle_tests::*;

fn json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .unwrap()
}

/// An AFL++ instance directory as afl-fuzz leaves it, with these crashes.
fn afl_dir(root: &Path, crashes: &[(&str, &[u8])]) -> std::path::PathBuf {
    let inst = root.join("default");
    std::fs::create_dir_all(inst.join("crashes")).unwrap();
    std::fs::create_dir_all(inst.join("hangs")).unwrap();
    std::fs::write(inst.join("fuzzer_stats"), "start_time        : 1\ncommand_line      : afl-fuzz -i in -o out -V 60 -- /elsewhere/parse-afl @@\n").unwrap();
    std::fs::write(
        inst.join("crashes/README.txt"),
        "Command line used to find this crash: ...\n",
    )
    .unwrap();
    for (i, (op, bytes)) in crashes.iter().enumerate() {
        std::fs::write(
            inst.join("crashes").join(format!(
                "id:{i:06},sig:11,src:000000,time:{},execs:{},op:{op}",
                100 * (i + 1),
                50 * (i + 1)
            )),
            bytes,
        )
        .unwrap();
    }
    std::fs::write(
        inst.join("hangs/id:000000,src:000000,time:700,execs:600,op:havoc,rep:2"),
        b"slow",
    )
    .unwrap();
    std::fs::write(
        inst.join("hangs/id:000001,src:000000,time:900,execs:700,op:havoc,rep:4"),
        b"Loop",
    )
    .unwrap();
    root.to_owned()
}

#[test]
fn crashes_from_another_fuzzer_are_sorted_into_bugs_and_what_does_not_reproduce_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let plain = d.join("parse");
    ok(Command::new("clang-19")
        .args(["-O2", "-g"])
        .arg(subject("triage").join("parse.c"))
        .arg("-o")
        .arg(&plain));
    let afl = afl_dir(
        &d.join("afl"),
        &[
            ("havoc", b"A1"),
            ("havoc", b"Bzz"),
            ("flip1", b"A2xx"),
            ("havoc", b"Rabc"),
            ("havoc", b"Rq"),
            ("havoc", b"ok"),
        ],
    );
    let (out, stdout, t) = triage(
        d,
        &plain,
        &afl,
        &["--reduce-time", "20s", "--hang-timeout", "1s"],
    );
    assert_eq!(t["inputs"], 8, "{t}");
    let groups = t["groups"].as_array().unwrap();
    // One bug per faulting line: A1 and B (another caller) are one; A2 another; the
    // two recursions, out of stack at different depths, one; the loop one.
    assert_eq!(groups.len(), 4, "{t}");
    let members = |g: &Value| -> Vec<String> {
        g["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| std::fs::read_to_string(m.as_str().unwrap()).unwrap())
            .collect()
    };
    let mut by_members: Vec<Vec<String>> = groups.iter().map(members).collect();
    by_members.iter_mut().for_each(|m| m.sort());
    by_members.sort();
    assert_eq!(
        by_members,
        vec![
            vec!["A1", "Bzz"],
            vec!["A2xx"],
            vec!["Loop"],
            vec!["Rabc", "Rq"]
        ],
        "{t}"
    );
    let overflow = groups
        .iter()
        .find(|g| g["key"].as_str().unwrap().starts_with("stack-overflow"))
        .expect("the recursion's group");
    assert_eq!(
        std::fs::read(overflow["smallest"].as_str().unwrap()).unwrap(),
        b"Rq"
    );
    // The hang is named by where it spins.
    let hang = groups
        .iter()
        .find(|g| g["key"].as_str().unwrap().starts_with("hang@"))
        .expect("the loop's group");
    assert!(
        hang["signature"]
            .as_str()
            .unwrap()
            .starts_with("hang in spin"),
        "{hang}"
    );
    // The input that exits normally and the hang input that ends are dropped, each
    // with why.
    let dropped = t["dropped"].as_array().unwrap();
    assert_eq!(dropped.len(), 2, "{t}");
    assert!(
        dropped.iter().any(|x| x["kind"] == "afl-crash"
            && x["reason"].as_str().unwrap().contains("does not crash")),
        "{t}"
    );
    assert!(
        dropped
            .iter()
            .any(|x| x["kind"] == "afl-hang"
                && x["reason"].as_str().unwrap().contains("does not hang")),
        "{t}"
    );
    assert!(
        stdout.contains("6 reproduce (crash, hang or run out of memory) as 4 bug(s), 2 dropped"),
        "{stdout}"
    );
    // Each bug is an alarm folder whose reduced reproducer crashes the program as
    // the AFL++ command line ran it (the input as the file `@@` named).
    let alarms = alarm_list(&out);
    assert_eq!(alarms.len(), 4);
    for a in &alarms {
        assert_eq!(a["source"], "triage");
        if a["signature"].as_str().unwrap().starts_with("hang") {
            let reduced = json(
                &out.join("alarms")
                    .join(a["id"].as_str().unwrap())
                    .join("reduced.json"),
            );
            assert_eq!(
                reduced["files"]["input"], "L",
                "the hang's input reduced to its one byte: {reduced}"
            );
            continue;
        }
        let reduced = out
            .join("alarms")
            .join(a["id"].as_str().unwrap())
            .join("reduced.json");
        let v = ok(&mut trestle(&[
            &"validate",
            &"--program",
            &plain,
            &reduced,
            &"--json",
        ]));
        assert!(
            v.contains("\"crash\":\"") || v.contains("\"crash\": \""),
            "{v}"
        );
        let summary = std::fs::read_to_string(reduced.with_file_name("summary.md")).unwrap();
        assert!(
            summary.starts_with("# Crash triaged from an AFL++ crash"),
            "{summary}"
        );
    }

    // Against that triage, the same crashes are nothing new; a new bug is. Checked
    // on a build without bug two as well, that bug alone is build-dependent.
    let fixed = d.join("parse-fixed");
    ok(Command::new("clang-19")
        .args(["-O2", "-g", "-DFIX_TWO"])
        .arg(subject("triage").join("parse.c"))
        .arg("-o")
        .arg(&fixed));
    let also = format!("fixed={}", fixed.display());
    let again = ok(&mut trestle(&[
        &"triage",
        &"--program",
        &plain,
        &"--out",
        &d.join("again"),
        &"--no-reduce",
        &"--also-on",
        &also,
        &"--fail-on-new",
        &out,
        &afl,
    ]));
    assert!(!again.contains("NEW "), "{again}");
    assert_eq!(
        again
            .matches("build-dependent: does not reproduce on the fixed build")
            .count(),
        1,
        "{again}"
    );
    let t = json(&d.join("again/triage.json"));
    for g in t["groups"].as_array().unwrap() {
        let two = std::fs::read(g["smallest"].as_str().unwrap()).unwrap() == b"A2xx";
        assert_eq!(g["not_on"] == serde_json::json!(["fixed"]), two, "{g}");
    }
    // On a build without bug two, A2B goes on to bug one: a crash of the same class
    // in the same function, on another line, is not bug two reproducing.
    let two_then_one = afl_dir(&d.join("afl-a2b"), &[("havoc", b"A2B")]);
    ok(&mut trestle(&[
        &"triage",
        &"--program",
        &plain,
        &"--out",
        &d.join("a2b"),
        &"--no-reduce",
        &"--also-on",
        &also,
        &two_then_one,
    ]));
    let alarms = alarm_list(&d.join("a2b"));
    let two = alarms
        .iter()
        .find(|a| a["signature"].as_str().unwrap().starts_with("SIGSEGV"))
        .expect("bug two's alarm");
    let fixed_run = two["builds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["role"] == "fixed")
        .expect("the fixed build's check")
        .clone();
    assert_eq!(fixed_run["reproduces"], false, "{two}");
    assert!(
        fixed_run["ended"]
            .as_str()
            .unwrap()
            .contains("store < via_b"),
        "how it ended there: {two}"
    );
    // A campaign's tests say nothing of whether they crash or hang: one that runs
    // into the crash check's CPU limit is tried as a hang.
    let tests = d.join("tests");
    write_test(&tests, "loops", &serde_json::json!({"stdin": "Lxx"}));
    write_test(&tests, "fine", &serde_json::json!({"stdin": "fine"}));
    let mixed = ok(&mut trestle(&[
        &"triage",
        &"--program",
        &plain,
        &"--out",
        &d.join("mixed"),
        &"--no-reduce",
        &"--hang-timeout",
        &"1s",
        &tests,
    ]));
    let t = json(&d.join("mixed/triage.json"));
    assert_eq!(t["groups"].as_array().unwrap().len(), 1, "{mixed}\n{t}");
    assert!(
        t["groups"][0]["signature"]
            .as_str()
            .unwrap()
            .starts_with("hang in spin"),
        "{t}"
    );
    assert_eq!(
        t["dropped"].as_array().unwrap().len(),
        1,
        "the test that ends: {t}"
    );
    let bad = run(&mut trestle(&[
        &"triage",
        &"--program",
        &plain,
        &"--out",
        &d.join("bad"),
        &"--also-on",
        &"nothing-here",
        &afl,
    ]));
    assert!(
        !bad.status.success()
            && String::from_utf8_lossy(&bad.stderr).contains("is not ROLE=PROGRAM"),
        "{bad:?}"
    );
    let only_a1 = afl_dir(&d.join("afl-a1"), &[("havoc", b"A1")]);
    let first = d.join("first");
    ok(&mut trestle(&[
        &"triage",
        &"--program",
        &plain,
        &"--out",
        &first,
        &"--no-reduce",
        &only_a1,
    ]));
    let r = run(&mut trestle(&[
        &"triage",
        &"--program",
        &plain,
        &"--out",
        &d.join("later"),
        &"--no-reduce",
        &"--fail-on-new",
        &first,
        &afl,
    ]));
    assert_eq!(
        r.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&r.stdout).matches("NEW ").count(),
        2,
        "A2 and the recursion are new (the loop hangs in both)"
    );
}

#[test]
fn inputs_of_the_wrong_kind_and_programs_that_do_not_start_are_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let empty = d.join("empty");
    std::fs::create_dir(&empty).unwrap();
    std::fs::write(empty.join("README.txt"), "nothing here").unwrap();
    let r = run(&mut trestle(&[
        &"triage",
        &"--program",
        &"/bin/true",
        &"--out",
        &d.join("o"),
        &empty,
    ]));
    assert_eq!(r.status.code(), Some(2));
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        err.contains("holds no inputs to triage") && err.lines().count() == 1,
        "{err}"
    );
    let input = d.join("crash-1");
    std::fs::write(&input, b"x").unwrap();
    let r = run(&mut trestle(&[
        &"triage",
        &"--program",
        &d.join("missing"),
        &"--out",
        &d.join("o"),
        &input,
    ]));
    assert_eq!(r.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&r.stderr).contains("missing"),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
}

/// `trestle triage --program PROGRAM --out D/triage ARGS INPUTS`: the output
/// directory, what it printed, and its `triage.json`.
fn triage(d: &Path, program: &Path, inputs: &Path, args: &[&str]) -> (PathBuf, String, Value) {
    let out = d.join("triage");
    let mut cmd = trestle(&[&"triage", &"--program", &program, &"--out", &out]);
    let stdout = ok(cmd.args(args).arg(inputs));
    let t = json(&out.join("triage.json"));
    (out, stdout, t)
}

/// The triage subject `name.c` built as shipped (clang-19 -O2 -g) in `d`, and `inputs`
/// (file name, bytes) written to `d/in`: the program and the input directory.
fn plain_build_and_inputs(d: &Path, name: &str, inputs: &[(&str, &[u8])]) -> (PathBuf, PathBuf) {
    let plain = d.join(name);
    ok(Command::new("clang-19")
        .args(["-O2", "-g"])
        .arg(subject("triage").join(format!("{name}.c")))
        .arg("-o")
        .arg(&plain));
    let dir = d.join("in");
    std::fs::create_dir(&dir).unwrap();
    for (file, bytes) in inputs {
        std::fs::write(dir.join(file), bytes).unwrap();
    }
    (plain, dir)
}

/// A reader that allocates until its memory runs out, and one that asks for far too
/// much once and goes on with less: the first, from libFuzzer's `oom-*` and as a
/// plain input file, is one out-of-memory finding named by where it allocates,
/// reduced to its byte; the second is no finding.
#[test]
fn a_program_that_runs_out_of_memory_is_one_finding_and_a_failed_allocation_it_handles_is_none() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (plain, inputs) = plain_build_and_inputs(
        d,
        "grow",
        &[("oom-1", b"Gxyz"), ("grows", b"Gq"), ("crash-2", b"S")],
    );
    let (out, stdout, t) = triage(
        d,
        &plain,
        &inputs,
        &["--reduce-time", "20s", "--hang-timeout", "1s"],
    );
    let groups = t["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{stdout}\n{t}");
    let g = &groups[0];
    assert!(
        g["key"]
            .as_str()
            .unwrap()
            .starts_with("out-of-memory@grow<main"),
        "{g}"
    );
    assert_eq!(g["members"].as_array().unwrap().len(), 2, "{g}");
    let dropped = t["dropped"].as_array().unwrap();
    assert_eq!(dropped.len(), 1, "{t}");
    assert!(
        dropped[0]["input"].as_str().unwrap().ends_with("crash-2"),
        "the handled failure: {t}"
    );
    let alarms = alarm_list(&out);
    assert_eq!(alarms.len(), 1);
    let alarm = out.join("alarms").join(alarms[0]["id"].as_str().unwrap());
    let reduced = json(&alarm.join("reduced.json"));
    assert_eq!(
        reduced["stdin"], "G",
        "reduced to the byte that makes it grow: {reduced}"
    );
    let summary = std::fs::read_to_string(alarm.join("summary.md")).unwrap();
    assert!(
        summary.starts_with("# Out of memory triaged from"),
        "{summary}"
    );
    // SARIF names the class as a rule of its own.
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        report.contains("`out-of-memory in grow < main` | 2 | "),
        "{report}"
    );
    let sarif = d.join("oom.sarif");
    ok(&mut trestle(&[
        &"triage",
        &"--program",
        &plain,
        &"--out",
        &d.join("again"),
        &"--no-reduce",
        &"--sarif",
        &sarif,
        &inputs,
    ]));
    let s = json(&sarif);
    let rules = &s["runs"][0]["tool"]["driver"]["rules"];
    assert!(
        rules
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["id"] == "out-of-memory" && r["name"] == "OutOfMemory"),
        "{rules}"
    );
}

/// A reader whose memory creeps up too slowly to reach the memory limit before the
/// time limit stops it is out of memory all the same (it had over half the limit
/// resident when stopped), named by where it was: not dropped as "hung once, then
/// timeout", not a hang.
#[test]
fn a_memory_blow_up_the_clock_stops_first_is_out_of_memory() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (plain, inputs) = plain_build_and_inputs(d, "creep", &[("oom-1", b"Cq"), ("fine", b"x")]);
    let (_, stdout, t) = triage(
        d,
        &plain,
        &inputs,
        &["--timeout", "3s", "--memory-mb", "512", "--no-reduce"],
    );
    let groups = t["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{stdout}\n{t}");
    assert!(
        groups[0]["key"]
            .as_str()
            .unwrap()
            .starts_with("out-of-memory@creep<main"),
        "{t}"
    );
    let dropped = t["dropped"].as_array().unwrap();
    assert_eq!(dropped.len(), 1, "{t}");
    assert!(
        dropped[0]["input"].as_str().unwrap().ends_with("fine"),
        "{t}"
    );
}

/// A crash that one build leaves without frames (it smashed its stack: the return
/// goes to address 0) is named by another build the triage checks it on, which
/// crashes the same way with them: the alarm is the function's, not `unknown`'s,
/// and says whose frames they are.
#[test]
fn a_crash_without_frames_is_named_by_another_build_that_has_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let smashed = d.join("parse-smashed");
    ok(Command::new("clang-19")
        .args(["-O2", "-g", "-DSMASH_FRAMES"])
        .arg(subject("triage").join("parse.c"))
        .arg("-o")
        .arg(&smashed));
    let framed = d.join("parse");
    ok(Command::new("clang-19")
        .args(["-O2", "-g"])
        .arg(subject("triage").join("parse.c"))
        .arg("-o")
        .arg(&framed));
    let afl = afl_dir(&d.join("afl"), &[("havoc", b"S"), ("havoc", b"Sxy")]);
    let segv = |out: &Path| -> Vec<Value> {
        alarm_list(out)
            .into_iter()
            .filter(|a| a["signature"].as_str().unwrap().starts_with("SIGSEGV"))
            .collect()
    };
    // Alone, the smashed build has nothing to name the crash by.
    let alone = d.join("alone");
    ok(&mut trestle(&[
        &"triage",
        &"--program",
        &smashed,
        &"--out",
        &alone,
        &"--no-reduce",
        &"--hang-timeout",
        &"1s",
        &afl,
    ]));
    let a = segv(&alone);
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(
        a[0]["signature"], "SIGSEGV (no frames)",
        "the smashed build must leave no frames: {a:?}"
    );
    // Checked on a build that has frames too: named by them.
    let named = d.join("named");
    let also = format!("framed={}", framed.display());
    ok(&mut trestle(&[
        &"triage",
        &"--program",
        &smashed,
        &"--out",
        &named,
        &"--no-reduce",
        &"--hang-timeout",
        &"1s",
        &"--also-on",
        &also,
        &afl,
    ]));
    let a = segv(&named);
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a[0]["function"], "smash", "{a:?}");
    assert!(
        a[0]["signature"]
            .as_str()
            .unwrap()
            .starts_with("SIGSEGV in smash"),
        "{a:?}"
    );
    let summary = std::fs::read_to_string(
        named
            .join("alarms")
            .join(a[0]["id"].as_str().unwrap())
            .join("summary.md"),
    )
    .unwrap();
    assert!(
        summary.contains("the frames above are the framed build's"),
        "{summary}"
    );
}

/// A crash that smashes its own return addresses (a field copied past its buffer,
/// the return jumping to address 0) leaves the unwinder nothing of the program: it
/// was `SIGSEGV (no frames)`, function `unknown`. The return addresses the stack
/// scan finds above the damage name it now, with a source line, marked as scanned,
/// and two inputs that smash it by different lengths are one bug.
#[test]
fn a_crash_that_smashes_its_return_addresses_is_named_by_a_stack_scan() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let source = subject("triage").join("smash.c");
    let plain = d.join("smash");
    ok(Command::new("clang-19")
        .args(["-O2", "-g", "-fno-stack-protector"])
        .arg(&source)
        .arg("-o")
        .arg(&plain));
    let inputs = d.join("in");
    std::fs::create_dir(&inputs).unwrap();
    std::fs::write(inputs.join("long"), b"\x40xyz").unwrap();
    std::fs::write(inputs.join("longer"), b"\x60abcdef").unwrap();
    std::fs::write(inputs.join("fine"), b"\x03ok").unwrap();
    let (out, stdout, t) = triage(d, &plain, &inputs, &["--no-reduce"]);
    let groups = t["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{stdout}\n{t}");
    assert_eq!(groups[0]["members"].as_array().unwrap().len(), 2, "{t}");
    let line = std::fs::read_to_string(&source)
        .unwrap()
        .lines()
        .position(|l| l.contains("the caller left above the damage"))
        .expect("the marked call")
        + 1;
    let key = groups[0]["key"].as_str().unwrap();
    assert!(
        key.starts_with(&format!("memory@process_input:smash.c:{line}|")),
        "{t}"
    );
    assert_eq!(
        groups[0]["signature"], "SIGSEGV in process_input < main (stack scan)",
        "{t}"
    );
    let alarms = alarm_list(&out);
    assert_eq!(alarms.len(), 1, "{alarms:?}");
    assert_eq!(alarms[0]["function"], "process_input", "{alarms:?}");
    let summary = std::fs::read_to_string(
        out.join("alarms")
            .join(alarms[0]["id"].as_str().unwrap())
            .join("summary.md"),
    )
    .unwrap();
    assert!(
        summary.contains(&format!("smash.c:{line}) [stack scan]")),
        "{summary}"
    );
}

/// A program that quotes the file name it cannot open in its error, as coreutils do,
/// and crashes on a name ending in `!`.
const QUOTES: &str = r#"
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
  const char *name = argc > 1 ? argv[1] : "";
  fprintf(stderr, "quotes: failed to open '%s' for reading\n", name);
  size_t n = strlen(name);
  if (n > 0 && name[n - 1] == '!')
    *(volatile int *)0 = 1;
  return 1;
}
"#;

/// Running out of memory is not read off an error message that only quotes the
/// input: a file name spelt `... memory exhausted` (tac's fuzzer made one) that the
/// program cannot open is an ordinary exit, and with the crash that follows, a
/// crash with its frames, not an out-of-memory finding without any.
#[test]
fn an_error_that_quotes_memory_exhausted_from_the_input_is_no_out_of_memory() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let prog = build_c(d, "quotes", QUOTES, "-O1");
    let tests = d.join("tests");
    write_test(
        &tests,
        "exits",
        &serde_json::json!({ "args": ["cfg memory exhausted"] }),
    );
    write_test(
        &tests,
        "crashes",
        &serde_json::json!({ "args": ["cfg.txt memory exhausted!"] }),
    );
    let out = run(&mut trestle(&[
        &"validate",
        &tests,
        &"--program",
        &prog,
        &"--json",
    ]));
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
    let exits = by("exits");
    assert_eq!(exits["status"], "exit 1", "{exits}");
    assert!(
        exits["limit"].is_null(),
        "an echoed phrase is no memory limit: {exits}"
    );
    let crashes = by("crashes");
    assert!(crashes["limit"].is_null(), "{crashes}");
    assert!(
        crashes["crash"]
            .as_str()
            .is_some_and(|c| c.starts_with("SIGSEGV in main")),
        "{crashes}"
    );
}

/// One NULL stored in a global and dereferenced on two lines (compared in one
/// function, written through `fwrite` in another) is one bug, named by the global it
/// was read from; a NULL read from another global is another bug, and so is reading
/// far past the end of the same global's good pointer.
#[test]
fn a_bad_pointer_read_from_one_global_is_one_bug_wherever_it_faults() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (plain, inputs) = plain_build_and_inputs(
        d,
        "shared",
        &[
            ("compared", b"Nx=;"),
            ("written", b"Nxy"),
            ("tally", b"T3"),
            ("wide", b"W"),
        ],
    );
    let (out, stdout, t) = triage(d, &plain, &inputs, &["--no-reduce"]);
    let groups = t["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 3, "{stdout}\n{t}");
    let group = |global: &str| {
        groups
            .iter()
            .find(|g| g["key"].as_str().unwrap().contains(&format!("~{global}|")))
            .unwrap_or_else(|| panic!("no group read from {global}: {t}"))
    };
    let members = |g: &Value| -> Vec<String> {
        let mut m: Vec<String> = g["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_str().unwrap().rsplit('/').next().unwrap().to_owned())
            .collect();
        m.sort();
        m
    };
    assert_eq!(members(group("sep")), ["compared", "written"], "{t}");
    assert_eq!(members(group("tallies")), ["tally"], "{t}");
    let wide = groups
        .iter()
        .find(|g| members(g) == ["wide"])
        .unwrap_or_else(|| panic!("the over-read is a group of its own: {t}"));
    assert!(!wide["key"].as_str().unwrap().contains('~'), "{wide}");
    let id = group("sep")["id"].as_str().unwrap();
    let summary = std::fs::read_to_string(out.join("alarms").join(id).join("summary.md")).unwrap();
    assert!(summary.contains("read from the global `sep`"), "{summary}");
}

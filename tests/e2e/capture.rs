//! `trestle capture` end to end: a small filter's own test suite (a shell script, as
//! projects have them) run under capture. Every run of the trestle-cc build becomes a
//! test holding its arguments, stdin (piped or redirected), the files it read (an
//! absolute path moved into the test and the argument naming it rewritten), the
//! variables it asked for, the directories it wrote into and how it ended; runs the
//! suite repeats are one test; the files a forked child or a program it started read
//! are in its test; a run that depended on what no capture sees (a file looked up
//! without opening it, a FIFO, a `timeout` in the suite) is flagged, with the
//! difference; a record of another trestle is refused by name.

use serde_json::Value;
use std::path::Path;
use std::process::Command;
use trestle_tests::*;

fn json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .unwrap()
}

/// The subject copied into `dir` with its data files, built with trestle-cc.
fn prepare(dir: &Path) {
    for f in ["tool.c", "suite.sh"] {
        std::fs::copy(subject("capture").join(f), dir.join(f)).unwrap();
    }
    std::fs::create_dir_all(dir.join("data")).unwrap();
    std::fs::write(dir.join("data/a.txt"), "hello\nworld\n").unwrap();
    std::fs::write(dir.join("data/b.txt"), "second file\n").unwrap();
    std::fs::write(dir.join("data/big.txt"), "x".repeat(1500)).unwrap();
    std::fs::write(dir.join("abs.txt"), "absolute\n").unwrap();
    ok(Command::new(tool("trestle-cc"))
        .args(["-O1", "-g", "tool.c", "-o", "tool"])
        .current_dir(dir));
}

fn capture(dir: &Path, out: &Path, extra: &[&str], command: &[&str]) -> String {
    let mut c = trestle(&[&"capture", &"--out", &out, &"--max-input", &"1024"]);
    c.args(extra)
        .arg("--")
        .args(command)
        .current_dir(dir)
        .env("ABS_INPUT", dir.join("abs.txt"));
    ok(&mut c)
}

/// A program's captured tests under `out`: each test file read, beside its entry in
/// `capture.json`.
fn captured_tests(out: &Path, program: &Value) -> Vec<(Value, Value)> {
    program["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (json(&out.join(t["file"].as_str().unwrap())), t.clone()))
        .collect()
}

/// The captured test whose arguments are `args`.
fn test_with<'a>(tests: &'a [(Value, Value)], args: &[&str]) -> &'a (Value, Value) {
    tests
        .iter()
        .find(|(t, _)| {
            t["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap())
                .eq(args.iter().copied())
        })
        .unwrap_or_else(|| panic!("no test with arguments {args:?}"))
}

#[test]
fn a_test_suite_becomes_system_tests_that_replay_as_it_ran_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    prepare(d);
    let out = d.join("captured");
    let stdout = capture(d, &out, &[], &["./suite.sh"]);
    let s = json(&out.join("capture.json"));
    assert_eq!(
        s["command_status"], "exit 0",
        "the suite passes under capture: {s}"
    );
    // 17 runs of the tool and the planted record of another trestle.
    assert_eq!(s["processes"], 18, "{s}");
    assert_eq!(s["unfinished"], 0, "{s}");
    assert!(
        s["other_format"]["/old/tool"]
            .as_str()
            .unwrap()
            .contains("9.9.9"),
        "{s}"
    );
    assert!(
        stdout.contains("/old/tool: built by another trestle"),
        "{stdout}"
    );
    let programs = s["programs"].as_array().unwrap();
    assert_eq!(programs.len(), 1, "{s}");
    let p = &programs[0];
    assert_eq!(p["name"], "tool");
    // `./tool data/a.txt > out1 2> err1` twice, and once more through --again: one test.
    assert_eq!(
        (
            p["processes"].as_u64(),
            p["unique"].as_u64(),
            p["written"].as_u64()
        ),
        (Some(17), Some(15), Some(15)),
        "{p}"
    );
    let tests = captured_tests(&out, p);

    let (t, info) = test_with(&tests, &["data/a.txt"]);
    assert_eq!(t["files"]["data/a.txt"], "hello\nworld\n");
    assert_eq!(t["expect"]["status"], "exit 0");
    assert_eq!(t["expect"]["stdout"]["bytes"], 12);
    assert_eq!(
        t["expect"]["stderr"]["bytes"], 9,
        "stderr redirected to a file is read back: {t}"
    );
    assert_eq!(info["runs"], 3, "{info}");
    assert_eq!(info["faithful"], true, "{info}");
    // Piped and redirected stdin.
    let piped = tests
        .iter()
        .find(|(t, _)| t["stdin"] == "piped input\n")
        .expect("the piped run");
    assert_eq!(piped.1["faithful"], true);
    assert!(
        tests.iter().any(
            |(t, _)| t["stdin"] == "hello\nworld\n" && t["args"].as_array().unwrap().is_empty()
        ),
        "stdin from a file"
    );
    // An absolute path moves into the test, and the argument follows; the variable
    // the program asked for is kept.
    let (t, info) = test_with(&tests, &["--file=files/abs.txt"]);
    assert_eq!(t["files"]["files/abs.txt"], "absolute\n", "{t}");
    assert_eq!(t["env"]["TOOL_MODE"], "upper", "{t}");
    assert_eq!(info["faithful"], true, "{info}");
    // An input over --max-input is cut, and the test says so; the run died of SIGABRT.
    let (t, info) = test_with(&tests, &["data/big.txt"]);
    assert_eq!(t["files"]["data/big.txt"].as_str().unwrap().len(), 1024);
    assert_eq!(t["expect"]["status"], "signal 6");
    assert!(
        info["notes"][0]
            .as_str()
            .unwrap()
            .contains("cut at 1024 of 1500 bytes"),
        "{info}"
    );
    // What a program started from a run (itself, through exec) or a forked child
    // read is in the run's test.
    let (t, info) = test_with(&tests, &["--again", "data/a.txt"]);
    assert_eq!(t["files"]["data/a.txt"], "hello\nworld\n", "{t}");
    assert_eq!(info["faithful"], true, "{info}");
    let (t, info) = test_with(&tests, &["--fork", "data/a.txt", "data/b.txt"]);
    assert_eq!(t["files"].as_object().unwrap().len(), 2, "{t}");
    assert_eq!(info["faithful"], true, "{info}");
    // What no capture can see is flagged, with what differs.
    let (_, info) = test_with(&tests, &["--flag"]);
    assert_eq!(info["faithful"], false);
    assert_eq!(
        info["differs"], "captured exit 3, replayed exit 0",
        "{info}"
    );
    // Output that changes from run to run (the time) is told apart from a cause
    // nobody knows: two replays a second apart differ too.
    let (_, info) = test_with(&tests, &["--now"]);
    assert_eq!(info["faithful"], false);
    assert!(
        info["differs"]
            .as_str()
            .unwrap()
            .contains("two replays a second apart differ too"),
        "{info}"
    );
    assert_eq!(
        p["unfaithful"]["stdout differs: it changes from run to run (the time, randomness)"], 1,
        "{p}"
    );
    let (t, info) = test_with(&tests, &["fifo"]);
    assert_eq!(info["faithful"], false);
    assert!(
        info["differs"]
            .as_str()
            .unwrap()
            .contains("reads the FIFO or socket fifo"),
        "{info}"
    );
    assert!(
        t.get("files").is_none(),
        "a FIFO's content is not made up: {t}"
    );
    // A run the suite stopped with `timeout` is one too, and says so.
    let stopped = tests
        .iter()
        .find(|(t, _)| t["expect"]["status"] == "signal 15")
        .expect("the run timeout stopped");
    assert_eq!(stopped.1["faithful"], false, "{}", stopped.1);
    assert_eq!(
        p["unfaithful"]["exit status differs: the suite stopped it with a signal"], 1,
        "{p}"
    );
    // The directory a run wrote into is part of its test.
    let (t, info) = test_with(&tests, &["--out=outdir/copy", "data/a.txt"]);
    assert_eq!(t["files"]["outdir/"], "", "{t}");
    assert_eq!(t["expect"]["writes"][0], "outdir/copy", "{t}");
    assert_eq!(info["faithful"], true, "{info}");
    // Output appended to a file that held something: only what this run wrote.
    let (t, info) = test_with(&tests, &["data/b.txt"]);
    assert_eq!(
        (
            t["expect"]["stdout"]["bytes"].as_u64(),
            t["expect"]["merged"].as_bool()
        ),
        (Some(12 + 9), Some(true)),
        "{t}"
    );
    assert_eq!(info["faithful"], true, "{info}");
    assert_eq!(p["faithful"], 11, "{p}");
    assert_eq!(
        p["unfaithful"]["exit status differs: cause unknown"], 1,
        "{p}"
    );
    assert_eq!(
        p["unfaithful"]["exit status differs: it reads a FIFO or socket"], 1,
        "{p}"
    );
    assert!(
        stdout.contains("11 of them (73.3%) replay with the same exit status and stdout"),
        "{stdout}"
    );

    // The captured folder is seeds as it is.
    let traces = d.join("traces");
    ok(&mut trestle(&[
        &"record",
        &"--program",
        &d.join("tool"),
        &"--tests",
        &out.join("tool"),
        &"--out",
        &traces,
    ]));
    assert!(
        std::fs::read_dir(&traces).unwrap().count() >= 14,
        "a trace per test"
    );
}

#[test]
fn max_keeps_the_most_diverse_tests_and_a_failing_command_loses_none() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    prepare(d);
    let all = d.join("all");
    capture(d, &all, &[], &["./suite.sh"]);
    let few = d.join("few");
    capture(
        d,
        &few,
        &["--max", "3"],
        &["sh", "-c", "./suite.sh && exit 7"],
    );
    let s = json(&few.join("capture.json"));
    assert_eq!(s["command_status"], "exit 7", "{s}");
    let p = &s["programs"][0];
    assert_eq!(
        (p["written"].as_u64(), p["left_out"].as_u64()),
        (Some(3), Some(12)),
        "{p}"
    );
    let a = &json(&all.join("capture.json"))["programs"][0];
    let best_single = a["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["edges"].as_u64().unwrap())
        .max()
        .unwrap();
    assert!(
        p["edges"].as_u64().unwrap() > best_single,
        "three tests chosen by coverage cover more than any one: {p}"
    );
    assert!(
        p["edges"].as_u64().unwrap() * 10 >= a["edges"].as_u64().unwrap() * 8,
        "and most of what all cover: {p} vs {a}"
    );
}

/// The ways a suite runs programs that the first test's suite does not: one run
/// forking a child that execs the program again, stdin from a socket, a program
/// started by a relative `../` path on a `../` argument, two instrumented programs,
/// a command that cannot start; and the captured folder seeding a campaign as it is.
#[test]
fn spawned_children_sockets_relative_paths_and_two_programs_are_captured_apart() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    prepare(d);
    std::fs::copy(d.join("tool"), d.join("other")).unwrap();
    std::fs::create_dir(d.join("sub")).unwrap();
    let socket = "import socket, subprocess\n\
        a, b = socket.socketpair()\n\
        p = subprocess.Popen(['./tool'], stdin=b)\n\
        b.close(); a.sendall(b'over a socket\\n'); a.close()\n\
        raise SystemExit(p.wait())\n";
    std::fs::write(d.join("feed_socket.py"), socket).unwrap();
    let suite = "set -e\n./tool --spawn data/a.txt > o1\n(cd sub && ../tool ../data/b.txt > o2)\n\
        python3 feed_socket.py > o3\n./other data/b.txt > o4\n";
    std::fs::write(d.join("suite2.sh"), suite).unwrap();
    let out = d.join("captured");
    let stdout = capture(d, &out, &[], &["sh", "suite2.sh"]);
    let s = json(&out.join("capture.json"));
    assert_eq!(s["command_status"], "exit 0", "{s}");
    assert_eq!(s["processes"], 5, "four runs and the spawned child: {s}");
    let programs = s["programs"].as_array().unwrap();
    assert_eq!(
        programs.len(),
        2,
        "each instrumented program is a program of its own: {s}"
    );
    let tests = |name: &str| -> Vec<(Value, Value)> {
        let p = programs
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("no program {name}: {s}"));
        captured_tests(&out, p)
    };
    let (other, tool) = (tests("other"), tests("tool"));
    assert_eq!(other.len(), 1);
    assert!(
        other[0].1["file"].as_str().unwrap().starts_with("other/"),
        "in a folder of its own: {}",
        other[0].1
    );
    assert_eq!(other[0].0["files"]["data/b.txt"], "second file\n");
    // The spawning run holds what its exec'd child read; the child is a test too, and
    // the summary says it was started by the program itself.
    let (t, info) = test_with(&tool, &["--spawn", "data/a.txt"]);
    assert_eq!(t["files"]["data/a.txt"], "hello\nworld\n", "{t}");
    assert_eq!(info["faithful"], true, "{info}");
    let (_, info) = test_with(&tool, &["data/a.txt"]);
    assert_eq!(info["faithful"], true, "{info}");
    assert!(
        stdout.contains("1 test(s) were started by tool itself"),
        "{stdout}"
    );
    // `../data/b.txt` from sub/ is moved into the test, the argument rewritten to it.
    let relative = tool.iter().find(|(t, _)| {
        t["files"]
            .as_object()
            .is_some_and(|f| f.values().any(|v| v == "second file\n"))
    });
    let (t, info) = relative.expect("the run from sub/");
    let arg = t["args"][0].as_str().unwrap();
    assert!(
        !arg.contains(".."),
        "the argument points into the test: {t}"
    );
    assert_eq!(t["files"][arg], "second file\n", "{t}");
    assert_eq!(info["faithful"], true, "{info}");
    // Stdin from a socket is read as from a pipe: its bytes are the test's stdin.
    let (t, info) = tool
        .iter()
        .find(|(t, _)| t["args"].as_array().unwrap().is_empty())
        .expect("the run on the socket");
    assert_eq!(t["stdin"], "over a socket\n", "{t}");
    assert_eq!(info["faithful"], true, "{info}");

    // The captured folder seeds a campaign as it is: each test is a root of its queue.
    let camp = d.join("camp");
    ok(&mut trestle(&[
        &"run",
        &"--program",
        &d.join("tool"),
        &"--seeds",
        &out.join("tool"),
        &"--time",
        &"3s",
        &"--system-only",
        &"--out",
        &camp,
    ]));
    let lineage = std::fs::read_to_string(camp.join("system/lineage.jsonl")).unwrap();
    let roots = lineage
        .lines()
        .filter(|l| !l.contains("\"parent\""))
        .count();
    assert_eq!(
        roots,
        tool.len(),
        "one queue root per captured test: {lineage}"
    );

    // A command that cannot start is said by name, and nothing is captured.
    let gone = d.join("gone");
    let o = run(trestle(&[&"capture", &"--out", &gone, &"--", &"./no-such-suite"]).current_dir(d));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("cannot start the command \"./no-such-suite\""),
        "{err}"
    );
    assert!(
        !gone.join("capture.json").exists(),
        "no summary of a capture that did not run"
    );
}

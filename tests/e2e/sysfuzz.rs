//! System-level fuzzing end to end (`trestle sysfuzz`): on the planted-bug subject
//! `requests`, 30 seconds from its seeds grow the queue and the edges covered, every
//! file written is a valid system test, and a second run resumes from the queue. On a
//! tiny subject that crashes on a stdin line starting with "boom", seeds holding
//! "boot" lead to that crash within 60 seconds, written under `crashes/`. Without
//! any dictionary, input-to-state replacement (CmpLog) spells two decimal numbers the
//! program compares, one in an argument and one in stdin.
//!
//! Whether the system fuzzer finds `requests`' magic integer is not asserted either
//! way: that is what a campaign compares against, not a property of this step.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use trestle_tests::*;

/// A content value of the system-test format: text or `{"base64": …}`.
fn is_content(v: &Value) -> bool {
    v.is_string()
        || v.as_object()
            .is_some_and(|o| o.len() == 1 && o.get("base64").is_some_and(Value::is_string))
}

/// The file is a system test in the JSON format of docs/formats.md, and nothing else.
fn assert_system_test(p: &Path) -> Value {
    let text = std::fs::read(p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()));
    let v: Value = serde_json::from_slice(&text)
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", p.display()));
    let o = v
        .as_object()
        .unwrap_or_else(|| panic!("{} is not an object", p.display()));
    for (k, x) in o {
        let ok = match k.as_str() {
            "args" => x.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
            "stdin" => is_content(x),
            "files" => x.as_object().is_some_and(|f| f.values().all(is_content)),
            "env" => x
                .as_object()
                .is_some_and(|e| e.values().all(Value::is_string)),
            _ => false,
        };
        assert!(ok, "{}: bad field {k:?}: {x}", p.display());
    }
    v
}

fn json_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect()
}

fn sysfuzz(program: &Path, seeds: &Path, out: &Path, time: &str, extra: &[&str]) -> Value {
    let mut cmd = trestle(&[
        &"sysfuzz",
        &"--program",
        &program,
        &"--seeds",
        &seeds,
        &"--out",
        &out,
        &"--time",
        &time,
        &"--json",
    ]);
    cmd.args(extra);
    let stdout = ok(&mut cmd);
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("report is not JSON ({e}):\n{stdout}"))
}

fn num(report: &Value, key: &str) -> u64 {
    report[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no {key} in {report}"))
}

#[test]
fn system_fuzzing_requests_grows_queue_and_edges_and_writes_only_system_tests() {
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("requests");
    build_subject(&subject("requests"), "-O2", &prog);
    let seeds = subject("requests").join("seeds");
    let n_seeds = json_files(&seeds).len() as u64;
    let out = dir.path().join("out");

    let report = sysfuzz(&prog, &seeds, &out, "30s", &[]);
    let rate = num(&report, "executions") as f64 / report["seconds"].as_f64().unwrap();
    eprintln!(
        "requests: {} executions ({rate:.0}/s overall, {:.0}/s fuzzing), queue {} -> {}, edges {} -> {}, {} crash(es)",
        num(&report, "executions"),
        report["execs_per_sec"].as_f64().unwrap(),
        num(&report, "initial_queue"),
        num(&report, "queue"),
        num(&report, "initial_edges"),
        num(&report, "edges"),
        report["crashes"].as_array().unwrap().len()
    );
    assert_eq!(num(&report, "seeds"), n_seeds);
    // Seeds are in the queue; every seed of requests covers something of its own.
    assert_eq!(num(&report, "initial_queue"), n_seeds, "{report}");
    assert!(num(&report, "initial_edges") > 0, "{report}");
    assert!(
        num(&report, "queue") > n_seeds,
        "the queue did not grow beyond the seeds: {report}"
    );
    assert!(
        num(&report, "edges") > num(&report, "initial_edges"),
        "no new edges: {report}"
    );
    assert!(
        num(&report, "executions") > 1000,
        "too few executions for 30 s: {report}"
    );

    let queue = json_files(&out.join("queue"));
    assert_eq!(
        queue.len() as u64,
        num(&report, "queue"),
        "queue/ and the report disagree"
    );
    for p in report["new_queue"].as_array().unwrap() {
        assert!(
            Path::new(p.as_str().unwrap()).exists(),
            "reported queue entry {p} is missing"
        );
    }
    let mut findings = json_files(&out.join("crashes"));
    findings.extend(json_files(&out.join("timeouts")));
    for p in queue.iter().chain(&findings) {
        assert_system_test(p);
    }
    // A crash written is a crash: it reproduces on a plain run of the build the fuzzer
    // ran (the lean sibling: requests' password overflow writes into a function
    // pointer, and where that jump lands depends on the build's layout).
    let ran = match report["build"].as_str() {
        Some("lean") => trestle_abi::lean::sibling(&prog),
        _ => prog.clone(),
    };
    for p in &findings {
        if p.parent().unwrap().ends_with("crashes") {
            let v = assert_system_test(p);
            assert!(
                v.get("files").is_none(),
                "requests reads no files: {}",
                p.display()
            );
            let args: Vec<&str> = v["args"]
                .as_array()
                .map(|a| a.iter().map(|x| x.as_str().unwrap()).collect())
                .unwrap_or_default();
            let stdin = match v.get("stdin") {
                None => "",
                Some(Value::String(s)) => s.as_str(),
                Some(_) => continue, // bytes in base64: not decoded here
            };
            let mut child = std::process::Command::new(&ran)
                .args(&args)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            use std::io::Write;
            let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
            let status = child.wait().unwrap();
            assert!(
                status.code().is_none(),
                "{} did not crash on a plain run of {} ({status})",
                p.display(),
                ran.display()
            );
        }
    }

    // Resume: the queue is reloaded (through the system-test loader) and covers what it did.
    let again = sysfuzz(&prog, &seeds, &out, "2s", &[]);
    assert!(
        num(&again, "initial_queue") >= num(&report, "queue"),
        "{again}"
    );
    assert!(
        num(&again, "initial_edges") >= num(&report, "edges"),
        "{again}"
    );
    assert!(again["crashes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| !report["crashes"].as_array().unwrap().contains(c)));
}

const BOOM: &str = r#"
#include <stdio.h>
#include <string.h>

/* Planted bug: a line starting with "boom" dereferences NULL. */
static int check(const char *line) {
    if (strncmp(line, "boom", 4) == 0) {
        volatile int *p = NULL;
        return *p;
    }
    return line[0] == 'b';
}

int main(void) {
    char line[256];
    int n = 0;
    while (fgets(line, sizeof line, stdin))
        n += check(line);
    printf("%d line(s) starting with b\n", n);
    return 0;
}
"#;

#[test]
fn system_fuzzing_finds_the_boom_line_from_a_boot_seed() {
    let dir = tempfile::tempdir().unwrap();
    let prog = build_c(dir.path(), "boom", BOOM, "-O2");
    let seeds = dir.path().join("seeds");
    write_test(
        &seeds,
        "boot",
        &serde_json::json!({ "stdin": "hello\nboot\nbye\n" }),
    );
    write_test(&seeds, "quiet", &serde_json::json!({ "stdin": "zzz\n" }));
    let out = dir.path().join("out");
    let start = Instant::now();
    let report = sysfuzz(&prog, &seeds, &out, "60s", &["--stop-on-crash"]);
    let took = start.elapsed();
    let crashes = report["crashes"].as_array().unwrap();
    assert!(!crashes.is_empty(), "no crash in 60 s: {report}");
    assert!(took < Duration::from_secs(90), "took {took:?}");
    let mut boom = false;
    for c in crashes {
        let p = Path::new(c.as_str().unwrap());
        assert!(
            p.starts_with(out.join("crashes")) || p.parent().unwrap().ends_with("crashes"),
            "{}",
            p.display()
        );
        let v = assert_system_test(p);
        let stdin = v["stdin"].as_str().unwrap_or("");
        boom |= stdin.lines().any(|l| l.starts_with("boom"));
    }
    assert!(boom, "no crash has a line starting with boom: {report}");
    eprintln!(
        "boom found after {:.1}s, {} executions",
        report["seconds"].as_f64().unwrap(),
        num(&report, "executions")
    );
}

const MAGIC: &str = r#"
#include <stdio.h>
#include <stdlib.h>

/* Planted bug: a quantity of exactly 48813 on a line of stdin, parsed with strtol,
   while the option given as the first argument parses to 3117. Seeds hold other
   numbers in both places, and the program has no string literal that spells them. */
static long limit;

static int take(const char *line) {
    long n = strtol(line, NULL, 10);
    if (n == 48813 && limit == 3117) {
        volatile int *p = NULL;
        return *p;
    }
    return n > limit;
}

int main(int argc, char **argv) {
    char line[128];
    int over = 0;
    limit = argc > 1 ? strtol(argv[1], NULL, 10) : 10;
    while (fgets(line, sizeof line, stdin))
        over += take(line);
    printf("%d over\n", over);
    return 0;
}
"#;

/// Input-to-state on the system input: without any dictionary, the operands the
/// program compares lead the fuzzer to both decimal numbers (one in an argument, one
/// in stdin, of other lengths than the seeds'), and `--no-cmplog` turns that off.
#[test]
fn cmplog_solves_decimal_numbers_in_arguments_and_stdin_without_a_dictionary() {
    let dir = tempfile::tempdir().unwrap();
    let prog = build_c(dir.path(), "magic", MAGIC, "-O2");
    let seeds = dir.path().join("seeds");
    write_test(
        &seeds,
        "small",
        &serde_json::json!({ "args": ["5"], "stdin": "1\n7\n12\n" }),
    );
    let out = dir.path().join("out");
    let report = sysfuzz(
        &prog,
        &seeds,
        &out,
        "60s",
        &["--stop-on-crash", "--no-dict"],
    );
    // On the lean build: its CmpLog hooks log what the recording runtime's would.
    assert_eq!(report["build"], "lean", "{report}");
    let crashes = report["crashes"].as_array().unwrap();
    assert!(!crashes.is_empty(), "no crash in 60 s: {report}");
    let crash = Path::new(crashes[0].as_str().unwrap());
    let v = assert_system_test(crash);
    // Stdin may hold bytes that are no UTF-8 around the line (then it is base64).
    let t = trestle_exec::systest::load_test(crash).unwrap();
    let spells = |b: &[u8], n: &[u8]| b.windows(n.len()).any(|w| w == n);
    let stdin = t.stdin.unwrap_or_default();
    assert!(
        spells(&stdin, b"48813") && t.args.iter().any(|a| a.contains("3117")),
        "the crash does not spell both numbers: {v}"
    );
    eprintln!(
        "magic found after {:.1}s, {} executions",
        report["seconds"].as_f64().unwrap(),
        num(&report, "executions")
    );

    // Without CmpLog (and without a dictionary) the numbers are out of reach in a
    // short run: the crash above is the mechanism's doing.
    let out2 = dir.path().join("out2");
    let blind = sysfuzz(
        &prog,
        &seeds,
        &out2,
        "10s",
        &["--stop-on-crash", "--no-dict", "--no-cmplog"],
    );
    assert!(
        blind["crashes"].as_array().unwrap().is_empty(),
        "found without CmpLog: {blind}"
    );
}

const WORDS: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    char line[128];
    if (argc < 2 || strcmp(argv[1], "--frobnicate") != 0) {
        puts("usage: words --frobnicate < input");
        return 0;
    }
    while (fgets(line, sizeof line, stdin))
        if (memcmp(line, "MAGIC7", 6) == 0 && strncmp(line + 6, ":unlock", 7) == 0)
            abort();
    return 0;
}
"#;

/// Input-to-state through comparison routines: what `strcmp`, `memcmp` and `strncmp`
/// compare is logged too, so without a dictionary the fuzzer writes the option (longer
/// than the seed's argument) and both parts of the magic line; `--no-cmplog` cannot.
#[test]
fn cmplog_solves_strings_compared_by_routines_without_a_dictionary() {
    let dir = tempfile::tempdir().unwrap();
    let prog = build_c(dir.path(), "words", WORDS, "-O2");
    let seeds = dir.path().join("seeds");
    write_test(
        &seeds,
        "small",
        &serde_json::json!({ "args": ["-x"], "stdin": "hello world, again\nline two\n" }),
    );
    let out = dir.path().join("out");
    let report = sysfuzz(
        &prog,
        &seeds,
        &out,
        "60s",
        &["--stop-on-crash", "--no-dict"],
    );
    assert_eq!(report["build"], "lean", "{report}");
    let crashes = report["crashes"].as_array().unwrap();
    assert!(!crashes.is_empty(), "no crash in 60 s: {report}");
    // Only a line starting with both parts after that option aborts (stdin may be
    // base64 here, with other bytes around the line).
    let v = assert_system_test(Path::new(crashes[0].as_str().unwrap()));
    assert_eq!(v["args"][0], "--frobnicate", "{v}");
    eprintln!(
        "words found after {:.1}s, {} executions",
        report["seconds"].as_f64().unwrap(),
        num(&report, "executions")
    );

    let out2 = dir.path().join("out2");
    let blind = sysfuzz(
        &prog,
        &seeds,
        &out2,
        "10s",
        &["--stop-on-crash", "--no-dict", "--no-cmplog"],
    );
    assert!(
        blind["crashes"].as_array().unwrap().is_empty(),
        "found without CmpLog: {blind}"
    );
}

const LINES: &str = r#"
#include <stdio.h>

int main(void) {
    char line[64];
    while (fgets(line, sizeof line, stdin))
        if (line[0] == 'b')
            puts("a line starting with b");
    return 0;
}
"#;

/// A queue entry is trimmed the first time it is picked: lines that change nothing the
/// program covers are removed (hit-count buckets included) and the queue file is
/// rewritten, so fuzzing goes on from the short input.
#[test]
fn queue_entries_are_trimmed_to_what_their_coverage_needs() {
    let dir = tempfile::tempdir().unwrap();
    let prog = build_c(dir.path(), "lines", LINES, "-O2");
    let seeds = dir.path().join("seeds");
    // 300 lines: the loop's hit-count bucket needs 128 of them, the b branch "boot".
    let long: String = "zzz\n".repeat(299) + "boot\n";
    write_test(&seeds, "long", &serde_json::json!({ "stdin": long }));
    let out = dir.path().join("out");
    let report = sysfuzz(&prog, &seeds, &out, "5s", &["--no-cmplog"]);
    assert!(num(&report, "executions") > 100, "{report}");
    let stdins: Vec<String> = json_files(&out.join("queue"))
        .iter()
        .map(|p| {
            assert_system_test(p)["stdin"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect();
    // The seed's entry was rewritten: the untrimmed input is no longer in the queue.
    assert!(
        !stdins.contains(&long),
        "the seed's queue entry was not trimmed"
    );
    let shortest = stdins
        .iter()
        .filter(|s| s.contains("boot"))
        .min_by_key(|s| s.len())
        .expect("an entry with the boot line");
    assert!(
        shortest.len() < long.len() * 3 / 4,
        "trimmed too little: {} of {} bytes",
        shortest.len(),
        long.len()
    );
}

/// Writes where its first argument says (a fuzzed input can make it write elsewhere),
/// but only under AWAY: unsandboxed, the mutants must not write all over the machine
/// (they once left files in `/`).
const WRITER: &str = r#"
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    const char *away = "AWAY/";
    if (argc > 1 && strncmp(argv[1], away, strlen(away)) == 0 && !strstr(argv[1], "..")) {
        FILE *f = fopen(argv[1], "w");
        if (f) { fputs("written\n", f); fclose(f); }
    }
    return 0;
}
"#;

#[test]
fn fuzzed_runs_are_sandboxed_unless_asked_not_to_be() {
    let dir = tempfile::tempdir().unwrap();
    // Outside every directory the fuzzer gives the program, and away from the source
    // tree: unsandboxed, the fuzzer mutates this path, and the program writes only
    // below it.
    let away = tempfile::tempdir().unwrap();
    let prog = build_c(
        dir.path(),
        "writer",
        &WRITER.replace("AWAY", away.path().to_str().unwrap()),
        "-O1",
    );
    for sandboxed in [true, false] {
        let outside = away.path().join(format!("written-{sandboxed}"));
        let _ = std::fs::remove_file(&outside);
        let seeds = dir.path().join(format!("seeds-{sandboxed}"));
        write_test(
            &seeds,
            "outside",
            &serde_json::json!({"args": [outside.to_str().unwrap()]}),
        );
        let out = dir.path().join(format!("out-{sandboxed}"));
        let mut cmd = trestle(&[
            &"sysfuzz",
            &"--program",
            &prog,
            &"--seeds",
            &seeds,
            &"--out",
            &out,
            &"--time",
            &"2s",
            &"--json",
        ]);
        if !sandboxed {
            cmd.arg("--no-sandbox");
        }
        let r = run(&mut cmd);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        assert_eq!(
            outside.exists(),
            !sandboxed,
            "sandboxed={sandboxed}: {}",
            outside.display()
        );
        let _ = std::fs::remove_file(&outside);
    }
}

const SPIN: &str = r#"
#include <stdio.h>
#include <string.h>
#include <time.h>

/* A stdin line starting with "spin" loops for ever; one starting with "slow" takes
   200 ms and the program goes on. The seeds hold "spix" and "slox". The endless loop
   has a branch inside, so its body has an edge of its own: SanitizerCoverage leaves
   a body without one uncounted, and a stopped "spin" run would then cover nothing a
   stopped "slow" run had not, so it would not run again to the hang limit. */
static volatile unsigned long sink;

static void busy(double seconds) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do {
        sink++;
        clock_gettime(CLOCK_MONOTONIC, &b);
    } while ((b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9 < seconds);
}

int main(void) {
    char line[128];
    while (fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "spin", 4) == 0)
            for (;;)
                if (++sink == 0)
                    puts("wrapped");
        if (strncmp(line, "slow", 4) == 0)
            busy(0.2);
    }
    puts("done");
    return 0;
}
"#;

/// Runs stop at a limit calibrated from the seeds (a few milliseconds here, not the
/// 5-second `--timeout`), so inputs that loop cost little; a run stopped there with
/// new edges runs again to `--timeout` before it is a timeout. So every timeout kept
/// is a real hang, and an input that is only slow (200 ms) is never one; nor does it
/// join the queue (as in AFL++), where every mutation of it would pay the limit.
/// The hang spins on the CPU: at a 5-second limit its CPU limit (4 s) ends it before
/// the wall clock does, and that too is a timeout (it once counted as an exit, and
/// no spinning hang was ever found past a `--timeout` of 4 s).
#[test]
fn runs_stop_at_a_calibrated_limit_and_only_real_hangs_are_timeouts() {
    let dir = tempfile::tempdir().unwrap();
    let prog = build_c(dir.path(), "spin", SPIN, "-O1");
    let seeds = dir.path().join("seeds");
    write_test(&seeds, "spix", &serde_json::json!({ "stdin": "spix\n" }));
    write_test(&seeds, "slox", &serde_json::json!({ "stdin": "slox\n" }));
    let out = dir.path().join("out");
    let report = sysfuzz(&prog, &seeds, &out, "45s", &["--timeout", "5s"]);
    let limit = num(&report, "run_limit_ms");
    assert!(
        (20..=200).contains(&limit),
        "runs stopped at {limit} ms with seeds that run in about a millisecond: {report}"
    );
    let stdin_of = |p: &Value| {
        assert_system_test(Path::new(p.as_str().unwrap()))["stdin"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    let timeouts = report["timeouts"].as_array().unwrap();
    assert!(!timeouts.is_empty(), "no hang found in 45 s: {report}");
    for t in timeouts {
        let stdin = stdin_of(t);
        assert!(
            stdin.lines().any(|l| l.starts_with("spin")),
            "a timeout that does not hang: {stdin:?}"
        );
    }
    // A run stopped at the short limit never joins the queue: no entry hangs, and
    // none is slow, though the fuzzer met slow inputs (the rerun of one with new
    // edges ended within the hang limit, so it is no timeout either).
    let mut entries = 0;
    for e in std::fs::read_dir(out.join("queue")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "json") {
            entries += 1;
            let stdin = assert_system_test(&p)["stdin"]
                .as_str()
                .unwrap_or("")
                .to_owned();
            assert!(
                !stdin.lines().any(|l| l.starts_with("spin")),
                "a hang in the queue: {} {stdin:?}",
                p.display()
            );
            assert!(
                !stdin.lines().any(|l| l.starts_with("slow")),
                "a slow input in the queue: {} {stdin:?}",
                p.display()
            );
        }
    }
    assert!(
        entries > 2,
        "the queue did not grow beyond the seeds: {report}"
    );
    assert!(
        num(&report, "slow_runs") > 0,
        "no run was stopped and ended within the hang limit: {report}"
    );
}

/// Every input starting with "L" loops for ever, after a switch over its bytes whose
/// 64 cases are each an edge of their own: stopped runs keep bringing new edges, as
/// dc's mutated programs did, and each would run again to the hang limit.
const LOOPS: &str = r#"
#include <stdio.h>
static volatile unsigned long sink, hits[64];
int main(void) {
    unsigned char buf[64];
    size_t n = fread(buf, 1, sizeof buf, stdin);
    for (size_t i = 0; i < n; i++) {
        switch (buf[i] & 63) {
@CASES@        }
    }
    if (n > 0 && buf[0] == 'L')
        for (;;)
            if (++sink == 0)
                puts("wrapped");
    return 0;
}
"#;

/// Runs again to the hang limit take at most a tenth of the time after the first two
/// (`trestle_sysfuzz::RERUN_SHARE`): on a program where most inputs loop, in new
/// places, they took over half of a dc campaign. Past the share a stopped run is left
/// stopped; hangs are still found, within the share.
#[test]
fn runs_again_to_the_hang_limit_take_a_bounded_share_of_the_time() {
    let dir = tempfile::tempdir().unwrap();
    let cases: String = (0..64)
        .map(|i| format!("        case {i}: hits[{i}]++; break;\n"))
        .collect();
    let src = LOOPS.replace("@CASES@", &cases);
    let prog = build_c(dir.path(), "loops", &src, "-O1");
    let seeds = dir.path().join("seeds");
    write_test(&seeds, "loop", &serde_json::json!({ "stdin": "Lab" }));
    write_test(&seeds, "ends", &serde_json::json!({ "stdin": "xyz" }));
    let out = dir.path().join("out");
    let report = sysfuzz(&prog, &seeds, &out, "20s", &["--timeout", "1s"]);
    let seconds = report["seconds"].as_f64().unwrap();
    let rerun = report["rerun_seconds"].as_f64().unwrap();
    // Two hang limits, a tenth of the time, and the one run that may start just
    // inside the share.
    assert!(
        rerun <= 2.0 + 0.1 * seconds + 1.5,
        "{rerun:.1} s of {seconds:.1} s went to runs again to the hang limit: {report}"
    );
    assert!(
        num(&report, "stopped_not_rerun") > 0,
        "no stopped run with new edges was left stopped: {report}"
    );
    assert!(
        !report["timeouts"].as_array().unwrap().is_empty(),
        "no hang kept within the share: {report}"
    );
}

/// Planted length condition: consecutive empty lines counted in a signed byte, which
/// wraps at 128.
const BLANK_RUN: &str = r#"
#include <stdio.h>
int main(void)
{
    char line[64];
    signed char run = 0;
    int lines = 0;
    while (fgets(line, sizeof line, stdin)) {
        lines++;
        run = line[0] == '\n' ? run + 1 : 0;
        if (run < 0) {
            volatile int *p = NULL;
            return *p;
        }
    }
    printf("%d lines\n", lines);
    return 0;
}
"#;

/// 128 empty lines in a row cover nothing new on the way there: the system fuzzer
/// meets the count by repeating a line an interesting number of times.
#[test]
fn a_run_of_128_empty_lines_is_reached_by_repeating_a_line_an_interesting_number_of_times() {
    let dir = tempfile::tempdir().unwrap();
    let prog = build_c(dir.path(), "blank_run", BLANK_RUN, "-O2");
    let seeds = dir.path().join("seeds");
    write_test(&seeds, "two", &serde_json::json!({ "stdin": "a\n\nb\n" }));
    let out = dir.path().join("out");
    let report = sysfuzz(&prog, &seeds, &out, "30s", &["--stop-on-crash"]);
    let crashes = report["crashes"].as_array().unwrap();
    assert!(!crashes.is_empty(), "no crash in 30 s: {report}");
    let v = assert_system_test(Path::new(crashes[0].as_str().unwrap()));
    let stdin = v["stdin"].as_str().unwrap_or("");
    assert!(
        stdin.contains(&"\n".repeat(128)),
        "the crash has no run of 128 empty lines"
    );
}

/// The edge numbers of every branch guard of `program` (its branch dump).
fn guard_dump(program: &Path) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("guards");
    let st = Command::new(program)
        .env("TRESTLE_BRANCH_DUMP", &out)
        .stdin(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(
        st.success(),
        "{} did not dump its guards",
        program.display()
    );
    std::fs::read(out).unwrap()
}

/// `trestle-cc` links a lean sibling beside each program: the same code (its guards
/// numbered alike), a runtime of kilobytes, tied to the program by its build id. The
/// system fuzzer runs it, finds the planted bug there, and runs the program itself
/// when the sibling is stale, missing or turned off, saying why.
/// Aborts when its own name is not the program's: what a program that dispatches on
/// `argv[0]` or prints it would get wrong.
const NAMED: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
    char line[64];
    if (strstr(argv[0], "trestle-lean")) abort();
    while (fgets(line, sizeof line, stdin)) fputs(line, stdout);
    return 0;
}
"#;

#[test]
fn the_system_fuzzer_runs_the_lean_sibling_only_while_it_belongs_to_the_program() {
    let dir = tempfile::tempdir().unwrap();
    let prog = build_c(dir.path(), "boom", BOOM, "-O2");
    let lean = dir.path().join(".boom.trestle-lean");
    let (big, small) = (
        std::fs::metadata(&prog).unwrap().len(),
        std::fs::metadata(&lean).expect("no lean sibling").len(),
    );
    assert!(
        small * 20 < big,
        "the lean build ({small} bytes) is not much smaller than the program ({big})"
    );
    assert_eq!(
        guard_dump(&prog),
        guard_dump(&lean),
        "the two builds number their guards differently"
    );
    let seeds = dir.path().join("seeds");
    write_test(&seeds, "boot", &serde_json::json!({ "stdin": "boot\n" }));
    let report = sysfuzz(
        &prog,
        &seeds,
        &dir.path().join("out"),
        "60s",
        &["--stop-on-crash"],
    );
    assert_eq!(report["build"], "lean", "{report}");
    assert!(
        !report["crashes"].as_array().unwrap().is_empty(),
        "no crash on the lean build in 60 s: {report}"
    );

    // --repeat-seeds runs the seed unmutated through the same executor: many runs,
    // nothing new, no crash.
    let rep = sysfuzz(
        &prog,
        &seeds,
        &dir.path().join("rep"),
        "2s",
        &["--repeat-seeds"],
    );
    assert!(
        num(&rep, "executions") > 100 && num(&rep, "queue") == 1,
        "{rep}"
    );
    assert!(rep["crashes"].as_array().unwrap().is_empty(), "{rep}");

    let off = sysfuzz(&prog, &seeds, &dir.path().join("off"), "1s", &["--no-lean"]);
    assert_eq!(off["build"], "program", "{off}");

    // Every run of the lean build is named as the program the user gave, in its
    // forkserver and, sandboxed or not, when it is started for every run.
    let named = build_c(dir.path(), "named", NAMED, "-O2");
    assert!(dir.path().join(".named.trestle-lean").exists());
    for extra in [
        &[][..],
        &["--no-forkserver"][..],
        &["--no-forkserver", "--no-sandbox"][..],
    ] {
        let r = sysfuzz(
            &named,
            &seeds,
            &dir.path().join(format!("named{}", extra.len())),
            "3s",
            extra,
        );
        assert_eq!(r["build"], "lean", "{extra:?}: {r}");
        assert!(num(&r, "executions") > 20, "{extra:?}: {r}");
        assert!(
            r["crashes"].as_array().unwrap().is_empty(),
            "{extra:?}: a run saw the sibling's name as argv[0]: {r}"
        );
    }

    // Rebuilt without a sibling, then the old one put back: stale.
    let stale = dir.path().join("stale");
    std::fs::rename(&lean, &stale).unwrap();
    let src = dir.path().join("boom.c");
    std::fs::write(&src, BOOM.replace("boom", "bang")).unwrap();
    ok(Command::new(tool("trestle-cc"))
        .env("TRESTLE_CC_LEAN", "0")
        .arg("-O2")
        .arg(&src)
        .arg("-o")
        .arg(&prog));
    assert!(!lean.exists(), "TRESTLE_CC_LEAN=0 linked a lean build");
    let none = sysfuzz(&prog, &seeds, &dir.path().join("none"), "1s", &[]);
    assert_eq!(none["build"], "program", "{none}");
    assert!(
        none["build_note"]
            .as_str()
            .unwrap()
            .contains("no lean build"),
        "{none}"
    );
    std::fs::rename(&stale, &lean).unwrap();
    let old = sysfuzz(&prog, &seeds, &dir.path().join("old"), "1s", &[]);
    assert_eq!(old["build"], "program", "{old}");
    assert!(
        old["build_note"].as_str().unwrap().contains("stale"),
        "{old}"
    );
}

/// A line protocol that reads stdin only when told to (`read`): the seed is not, so
/// its mutants never reach the lines; a lifted test is, one byte from the bug.
const GATED_BOOM: &str = r#"
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    char line[64];
    if (argc < 2 || strcmp(argv[1], "read") != 0) {
        puts("usage: gated read < lines");
        return 0;
    }
    while (fgets(line, sizeof line, stdin)) {
        if (line[0] == 'b' && line[1] == 'o' && line[2] == 'o') {
            if (line[3] == 'm') {
                volatile int *p = NULL;
                return *p;
            }
            puts("boo");
        }
    }
    return 0;
}
"#;

/// Lineage: a test the campaign lifted from a unit joins the queue as that unit's,
/// and what the fuzzer mutates from it descends from it, a crash included; read back
/// when the fuzzer starts again on the same directory (a seed's mutant that took the
/// lifted test's argument or lines by crossover descends from it too). A seed's own
/// mutants do not.
#[test]
fn a_crash_mutated_from_a_lifted_test_descends_from_its_unit_and_a_seeds_mutants_do_not() {
    use trestle_exec::systest::load_tests;
    use trestle_sysfuzz::{LiftedOrigin, SysFuzzConfig, SysFuzzer};
    let dir = tempfile::tempdir().unwrap();
    let prog = build_c(dir.path(), "gated", GATED_BOOM, "-O2");
    let seeds = dir.path().join("seeds");
    write_test(&seeds, "quiet", &serde_json::json!({ "stdin": "zzz\n" }));
    let lifted = write_test(
        &dir.path().join("lifted"),
        "boot",
        &serde_json::json!({ "args": ["read"], "stdin": "boot\n" }),
    );
    let cfg = SysFuzzConfig {
        program: prog.clone(),
        seeds: load_tests(&seeds).unwrap(),
        out: dir.path().join("out"),
        timeout: Duration::from_secs(2),
        seed: 1,
        // Neither tokens nor input-to-state: nothing spells `read` from the seed.
        dictionary: Vec::new(),
        no_forkserver: false,
        cmplog: false,
        memory: 0,
        sandbox: false,
        lean: false,
    };
    let mut f = SysFuzzer::new(cfg.clone()).unwrap();
    let origin = LiftedOrigin {
        unit: "parse".into(),
        roadblock: Some("gated.c:10".into()),
    };
    f.set_origin(Some(origin.clone()));
    let test = trestle_exec::systest::load_test(&lifted).unwrap();
    assert!(
        f.add_test(&test).unwrap(),
        "the lifted test reaches new code"
    );
    f.set_origin(None);
    let joined = f.take_report().unwrap().new_queue;
    assert_eq!(joined.len(), 1, "{joined:?}");
    let d = f
        .descent_of(&joined[0])
        .expect("the lifted test is the unit's");
    assert_eq!((d.origin.clone(), d.generations), (origin.clone(), 0));
    let start = Instant::now();
    let mut crashes = Vec::new();
    // 12-17 s alone; on a machine shared with two other fuzzing processes, over 60.
    while crashes.is_empty() && start.elapsed() < Duration::from_secs(180) {
        let rep = f.fuzz_for(Duration::from_secs(1)).unwrap();
        crashes.extend(rep.new_crashes);
    }
    assert!(!crashes.is_empty(), "no crash in 180 s");
    let d = f.descent_of(&crashes[0]).unwrap_or_else(|| {
        panic!(
            "the crash {} does not descend from the lifted test",
            crashes[0].display()
        )
    });
    assert_eq!(d.origin, origin);
    assert!(d.generations >= 1, "{d:?}");
    // Every line names an entry or finding once, each parent on an earlier line; the
    // seed is a root that descends from no unit.
    let text = std::fs::read_to_string(dir.path().join("out").join(trestle_sysfuzz::LINEAGE_FILE))
        .unwrap();
    let mut seen = std::collections::HashSet::new();
    let mut seed_roots = 0;
    for line in text.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let entry = v["entry"].as_str().unwrap().to_owned();
        if let Some(parent) = v["parent"].as_str() {
            assert!(seen.contains(parent), "{line}: parent not seen before");
        } else if v.get("lifted").is_none() {
            seed_roots += 1;
            assert_eq!(f.descent_of(Path::new(&entry)), None, "{line}");
        }
        assert!(seen.insert(entry), "{line}: named twice");
    }
    assert_eq!(seed_roots, 1, "{text}");
    let (entries, from_lifted) = f.lineage_counts();
    assert!(
        from_lifted >= 2 && entries > from_lifted,
        "{entries} entries, {from_lifted} from the lifted test"
    );
    drop(f);
    // Started again on the same directory (a resumed campaign): the lineage is read back.
    let f = SysFuzzer::new(cfg).unwrap();
    assert_eq!(f.descent_of(&crashes[0]), Some(d));
}

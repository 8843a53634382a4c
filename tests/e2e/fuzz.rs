//! Map and fuzz end to end on the planted-bug subject `requests`: from its seeds,
//! record → carve → fuzz must find the magic integer and the magic user name crashes
//! at unit level within 60 seconds each, find the unit-only crash too, and give the
//! hashed value no parameter. On two cores (LibAFL's launcher) the magic integer is
//! found too, and the campaign ends with no process left behind. In-process
//! (`--in-process`, the fuzzer inside the harness) finds the same three crashes,
//! goes on past a unit that calls `exit()` or crashes, and reports a hang as a
//! timeout.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use trestle_tests::*;

struct Carved {
    _dir: tempfile::TempDir,
    units: PathBuf,
    index: Value,
}

fn carve_requests() -> Carved {
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("requests");
    build_subject(&subject("requests"), "-O2", &prog);
    let traces = dir.path().join("traces");
    let units = dir.path().join("units");
    ok(&mut trestle(&[
        &"record",
        &"--program",
        &prog,
        &"--tests",
        &subject("requests").join("seeds"),
        &"--out",
        &traces,
    ]));
    ok(&mut trestle(&[&"carve", &traces, &"--out", &units]));
    let index = serde_json::from_slice(&std::fs::read(units.join("index.json")).unwrap()).unwrap();
    Carved {
        _dir: dir,
        units,
        index,
    }
}

fn rows<'a>(c: &'a Carved, function: &str) -> Vec<&'a Value> {
    c.index["units"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["function"] == function)
        .collect()
}

/// Fuzz `unit` until the first crash (at most 60 s); the decoded values of every crash.
fn crash_values(units: &Path, row: &Value, out: &Path) -> Vec<Vec<String>> {
    crash_values_with(units, row, out, &[])
}

/// [`crash_values`] with more `trestle fuzz` arguments.
fn crash_values_with(units: &Path, row: &Value, out: &Path, extra: &[&str]) -> Vec<Vec<String>> {
    let unit = units.join(row["file"].as_str().unwrap());
    let mut cmd = trestle(&[
        &"fuzz",
        &unit,
        &"--time",
        &"60s",
        &"--out",
        &out,
        &"--stop-on-crash",
        &"--json",
    ]);
    cmd.args(extra);
    ok(&mut cmd);
    found_crashes(out)
}

/// The decoded values of every crash in a campaign's output.
fn found_crashes(out: &Path) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for e in std::fs::read_dir(out.join("crashes")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "json") {
            let f: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
            assert_eq!(f["kind"], "crash");
            found.push(
                f["values"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap().to_owned())
                    .collect(),
            );
        }
    }
    found
}

#[test]
fn the_magic_integer_is_found_at_unit_level() {
    let c = carve_requests();
    let r = rows(&c, "store_value");
    let row = r
        .iter()
        .find(|r| r["params"].as_u64().unwrap() >= 2)
        .expect("a store_value unit with idx and value mapped");
    let out = tempfile::tempdir().unwrap();
    let crashes = crash_values(&c.units, row, out.path());
    assert!(
        crashes.iter().any(|v| v.iter().any(|x| x == "42342531")),
        "no crash with the magic value: {crashes:?}"
    );
}

#[test]
fn the_magic_user_name_is_found_at_unit_level() {
    assert_admin_found(&[]);
}

/// Some check_login unit whose user name is a parameter of its own (it fills its
/// extent) crashes with user "admin" under `trestle fuzz` with `extra` flags.
fn assert_admin_found(extra: &[&str]) {
    let c = carve_requests();
    let mut tried = 0;
    for row in rows(&c, "check_login")
        .iter()
        .filter(|r| r["params"].as_u64().unwrap() >= 2)
    {
        tried += 1;
        let out = tempfile::tempdir().unwrap();
        let crashes = crash_values_with(&c.units, row, out.path(), extra);
        if crashes.iter().any(|v| v.iter().any(|x| x == "\"admin\"")) {
            return;
        }
    }
    panic!("no check_login unit ({tried} tried, flags {extra:?}) crashed with user \"admin\"");
}

#[test]
fn the_unit_only_crash_is_found_and_the_hash_has_no_parameter() {
    let c = carve_requests();
    let r = rows(&c, "first_char_class");
    let row = r
        .iter()
        .find(|r| r["params"].as_u64().unwrap() >= 1)
        .expect("a mapped first_char_class unit");
    let out = tempfile::tempdir().unwrap();
    assert!(
        !crash_values(&c.units, row, out.path()).is_empty(),
        "first_char_class did not crash at unit level"
    );
    let tokens = rows(&c, "check_token");
    assert!(!tokens.is_empty());
    assert!(
        tokens.iter().all(|r| r["params"] == 0),
        "the hashed value must not be a parameter: {tokens:?}"
    );
}

#[test]
fn a_unit_without_parameters_is_refused_clearly() {
    let c = carve_requests();
    let row = rows(&c, "check_token")[0];
    let out = tempfile::tempdir().unwrap();
    let unit = c.units.join(row["file"].as_str().unwrap());
    let o = run(&mut trestle(&[
        &"fuzz",
        &unit,
        &"--time",
        &"5s",
        &"--out",
        &out.path(),
    ]));
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no parameters"), "{err}");
}

#[test]
fn a_parameter_that_no_longer_fits_is_a_clear_error() {
    let c = carve_requests();
    let row = rows(&c, "check_login")
        .into_iter()
        .find(|r| r["params"].as_u64().unwrap() >= 1)
        .unwrap();
    let path = c.units.join(row["file"].as_str().unwrap());
    let mut unit = trestle_bridge::carve::units::read_unit(&path).unwrap();
    // Point the first string parameter past the end of its extent.
    for p in &mut unit.params {
        if let trestle_abi::unit::ParamSite::Memory { offset, .. } = &mut p.site {
            *offset += 1 << 20;
            break;
        }
    }
    let broken = c.units.join("broken.unit");
    std::fs::write(&broken, unit.encode()).unwrap();
    let out = tempfile::tempdir().unwrap();
    let o = run(&mut trestle(&[
        &"fuzz",
        &broken,
        &"--time",
        &"5s",
        &"--out",
        &out.path(),
    ]));
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("cannot set up") && err.contains("no longer fits"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

/// Processes still running (not zombies) whose command line or environment names
/// `dir`: the launcher's forks carry `--out DIR`, the harnesses `TRESTLE_FUZZ=DIR/…`.
fn processes_naming(dir: &Path) -> Vec<String> {
    let needle = dir.to_string_lossy().into_owned().into_bytes();
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if !e
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        if stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        {
            continue;
        }
        for f in ["cmdline", "environ"] {
            let bytes = std::fs::read(e.path().join(f)).unwrap_or_default();
            if bytes.windows(needle.len()).any(|w| w == needle.as_slice()) {
                found.push(stat.clone());
                break;
            }
        }
    }
    found
}

#[test]
fn the_magic_integer_is_found_on_two_cores_and_nothing_is_left_running() {
    let c = carve_requests();
    let r = rows(&c, "store_value");
    let row = r
        .iter()
        .find(|r| r["params"].as_u64().unwrap() >= 2)
        .expect("a store_value unit with idx and value mapped");
    let unit = c.units.join(row["file"].as_str().unwrap());
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let started = Instant::now();
    let json = ok(&mut trestle(&[
        &"fuzz",
        &unit,
        &"--cores",
        &"2",
        &"--time",
        &"60s",
        &"--out",
        &out,
        &"--stop-on-crash",
        &"--json",
    ]));
    let took = started.elapsed();
    let report: Value = serde_json::from_str(&json).unwrap();
    let first = report["first_crash_after"]
        .as_f64()
        .expect("a crash, with its time");
    // Stopping on a crash ends every client, the broker and the launcher quickly:
    // nothing waits for the 60 s budget.
    assert!(
        took < Duration::from_secs(30),
        "took {took:?} (first crash after {first:.1}s)"
    );
    assert!(report["executions"].as_u64().unwrap() > 0, "{report}");
    let mut values = Vec::new();
    for e in std::fs::read_dir(out.join("crashes")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "json") {
            let f: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
            assert_eq!(f["kind"], "crash");
            assert!(Path::new(f["input"].as_str().unwrap()).exists(), "{f}");
            values.push(f["values"].clone());
        }
    }
    assert!(
        values
            .iter()
            .any(|v| v.as_array().unwrap().iter().any(|x| x == "42342531")),
        "no crash with the magic value: {values:?}"
    );
    assert_eq!(
        report["crashes"].as_array().unwrap().len(),
        values.len(),
        "{report}"
    );
    let left = processes_naming(&out);
    assert!(
        left.is_empty(),
        "processes left running after the campaign: {left:#?}"
    );
}

#[test]
fn a_core_count_the_machine_lacks_is_a_clear_error() {
    let out = tempfile::tempdir().unwrap();
    for cores in ["0", "100000"] {
        let o = run(&mut trestle(&[
            &"fuzz",
            &"missing.unit",
            &"--cores",
            &cores,
            &"--out",
            &out.path(),
        ]));
        assert!(!o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(&format!("--cores {cores}: choose 1 to")),
            "{err}"
        );
    }
}

#[test]
fn in_process_fuzzing_finds_the_magic_integer_and_leaves_nothing_running() {
    let c = carve_requests();
    let r = rows(&c, "store_value");
    let row = r
        .iter()
        .find(|r| r["params"].as_u64().unwrap() >= 2)
        .expect("a store_value unit with idx and value mapped");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let started = Instant::now();
    let crashes = crash_values_with(&c.units, row, &out, &["--in-process"]);
    assert!(
        crashes.iter().any(|v| v.iter().any(|x| x == "42342531")),
        "no crash with the magic value: {crashes:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
    let left = processes_naming(&out);
    assert!(
        left.is_empty(),
        "processes left running after the campaign: {left:#?}"
    );
}

#[test]
fn in_process_fuzzing_finds_the_magic_user_name() {
    assert_admin_found(&["--in-process"]);
}

#[test]
fn in_process_fuzzing_finds_the_unit_only_crash() {
    let c = carve_requests();
    let r = rows(&c, "first_char_class");
    let row = r
        .iter()
        .find(|r| r["params"].as_u64().unwrap() >= 1)
        .expect("a mapped first_char_class unit");
    let out = tempfile::tempdir().unwrap();
    assert!(
        !crash_values_with(&c.units, row, out.path(), &["--in-process"]).is_empty(),
        "first_char_class did not crash at unit level in-process"
    );
}

/// A unit that exits on its recorded input ("bye"; "err" through the C library's
/// `error`, whose `exit` is inside the C library), aborts for "XY…", hangs for 7777.
const EXITS_ABORTS_HANGS: &str = r#"
#include <error.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int check(const char *s, int n)
{
    if (strcmp(s, "bye") == 0)
        exit(3);
    if (strcmp(s, "err") == 0)
        error(4, 0, "no %s", s);
    if (n == 7777 && s[0] == 'z')
        for (;;) {}
    if (s[0] == 'X' && s[1] == 'Y')
        abort();
    return (int)strlen(s) + n;
}
int main(int argc, char **argv)
{
    if (argc < 3)
        return 1;
    printf("%d\n", check(argv[1], atoi(argv[2])));
    return 0;
}
"#;

/// `check` carved from a run where it called `exit(3)`.
fn carve_exiting_unit(dir: &Path) -> PathBuf {
    carve_unit_exiting_with(dir, "bye")
}

/// `check` carved from a run with `word` as its string.
fn carve_unit_exiting_with(dir: &Path, word: &str) -> PathBuf {
    carve_one(
        dir,
        "exits",
        EXITS_ABORTS_HANGS,
        &serde_json::json!({ "args": [word, "12"] }),
        "check",
        2,
    )
}

/// Build `source`, record it on the one system test `test` and carve it: the unit of
/// `function` with at least `params` parameters mapped.
fn carve_one(
    dir: &Path,
    name: &str,
    source: &str,
    test: &Value,
    function: &str,
    params: u64,
) -> PathBuf {
    let prog = build_c(dir, name, source, "-O2");
    let tests = dir.join("tests");
    write_test(&tests, "seed", test);
    let (traces, units) = (dir.join("traces"), dir.join("units"));
    ok(&mut trestle(&[
        &"record",
        &"--program",
        &prog,
        &"--tests",
        &tests,
        &"--out",
        &traces,
    ]));
    ok(&mut trestle(&[&"carve", &traces, &"--out", &units]));
    let index: Value =
        serde_json::from_slice(&std::fs::read(units.join("index.json")).unwrap()).unwrap();
    let row = index["units"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["function"] == function && r["params"].as_u64().unwrap() >= params)
        .unwrap_or_else(|| panic!("a {function} unit with {params} parameter(s) mapped"));
    units.join(row["file"].as_str().unwrap())
}

#[test]
fn in_process_fuzzing_goes_on_past_exit_and_an_abort() {
    let dir = tempfile::tempdir().unwrap();
    let unit = carve_exiting_unit(dir.path());
    let out = dir.path().join("out");
    // The recorded input exits: were exit() to end the fuzzer, the campaign would
    // not get far. Ten seconds, no stopping at the first crash: aborts are caught
    // and the fuzzing goes on in the same process. A short time limit, so that
    // finding the hang too does not eat the budget.
    let json = ok(&mut trestle(&[
        &"fuzz",
        &unit,
        &"--time",
        &"10s",
        &"--timeout",
        &"50ms",
        &"--out",
        &out,
        &"--in-process",
        &"--json",
    ]));
    let report: Value = serde_json::from_str(&json).unwrap();
    assert!(report["executions"].as_u64().unwrap() > 10_000, "{report}");
    let crashes = found_crashes(&out);
    assert!(
        crashes.iter().any(|v| v[0].starts_with("\"XY")),
        "no abort for \"XY…\": {crashes:?}"
    );
}

#[test]
fn in_process_fuzzing_goes_on_past_an_exit_inside_the_c_library() {
    // error(4, ...) exits inside the C library, out of reach of the renamed exit():
    // the call tells the runtime first. Without that, each fuzzer process ends at the
    // recorded input itself, and the unit gets no executions at all.
    let dir = tempfile::tempdir().unwrap();
    let unit = carve_unit_exiting_with(dir.path(), "err");
    let out = dir.path().join("out");
    let json = ok(&mut trestle(&[
        &"fuzz",
        &unit,
        &"--time",
        &"10s",
        &"--timeout",
        &"50ms",
        &"--out",
        &out,
        &"--in-process",
        &"--json",
    ]));
    let report: Value = serde_json::from_str(&json).unwrap();
    assert!(report["executions"].as_u64().unwrap() > 10_000, "{report}");
    let crashes = found_crashes(&out);
    assert!(
        crashes.iter().any(|v| v[0].starts_with("\"XY")),
        "no abort for \"XY…\": {crashes:?}"
    );
}

/// Counts the lines of a file and leaves it open, as a program that leaves closing
/// to its exit does.
const LEAVES_FILES_OPEN: &str = r#"
#include <stdio.h>
#include <stdlib.h>
int count_lines(const char *path, int max)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int n = 0, c;
    while ((c = getc(f)) != EOF && n < max)
        n += c == '\n';
    return n;
}
int main(int argc, char **argv)
{
    if (argc < 3)
        return 1;
    printf("%d\n", count_lines(argv[1], atoi(argv[2])));
    return 0;
}
"#;

#[test]
fn a_unit_that_leaves_files_open_is_fuzzed_without_running_out_of_descriptors() {
    // Each execution that opens the file would keep a descriptor: a process of
    // 100,000 executions runs out at 1,024 and then cannot even write its report.
    let dir = tempfile::tempdir().unwrap();
    let test = serde_json::json!({ "args": ["in.txt", "12"], "files": { "in.txt": "a\nb\nc\n" } });
    let unit = carve_one(
        dir.path(),
        "leaves_open",
        LEAVES_FILES_OPEN,
        &test,
        "count_lines",
        1,
    );
    for (k, mode) in [&["--in-process"][..], &[][..]].into_iter().enumerate() {
        let out = dir.path().join(format!("out{k}"));
        let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> =
            vec![&"fuzz", &unit, &"--time", &"10s", &"--out", &out, &"--json"];
        args.extend(mode.iter().map(|m| m as &dyn AsRef<std::ffi::OsStr>));
        let json = ok(&mut trestle(&args));
        let report: Value = serde_json::from_str(&json).unwrap();
        assert!(
            report["executions"].as_u64().unwrap() > 5_000,
            "{mode:?}: {report}"
        );
        if let Ok(log) = std::fs::read_to_string(out.join(".inproc").join("harness.log")) {
            // Without closing them, the fuzzer could no longer write its own files.
            assert!(!log.contains("Too many open files"), "{log}");
        }
    }
}

/// A unit that takes its whole process down, beyond any handler, unless its number
/// is the recorded one: in-process, every such execution ends a fuzzer process.
const KILLS_ITS_PROCESS: &str = r#"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
int guarded(int n)
{
    if (n != 12)
        raise(SIGKILL);
    return n * 2;
}
int main(int argc, char **argv)
{
    if (argc < 2)
        return 1;
    printf("%d\n", guarded(atoi(argv[1])));
    return 0;
}
"#;

#[test]
fn a_unit_that_keeps_killing_the_in_process_fuzzer_goes_on_in_the_forkserver_harness() {
    let dir = tempfile::tempdir().unwrap();
    let unit = carve_one(
        dir.path(),
        "kills",
        KILLS_ITS_PROCESS,
        &serde_json::json!({ "args": ["12"] }),
        "guarded",
        1,
    );
    let out = dir.path().join("out");
    let json = ok(&mut trestle(&[
        &"fuzz",
        &unit,
        &"--time",
        &"10s",
        &"--out",
        &out,
        &"--in-process",
        &"--json",
    ]));
    let report: Value = serde_json::from_str(&json).unwrap();
    let log = std::fs::read_to_string(out.join(".inproc").join("harness.log")).unwrap();
    assert!(
        log.contains("in-process fuzzing gives this unit up"),
        "{log}"
    );
    // The rest of the time ran in the forkserver harness: far more executions than the
    // handful of fuzzer processes in-process fuzzing lost.
    assert!(report["executions"].as_u64().unwrap() > 1_000, "{report}");
}

/// `trestle fuzz --in-process --stop-on-crash` on `unit` for up to a minute, with
/// `timeout` per execution; the JSON report.
fn fuzz_in_process_to_first_objective(unit: &Path, out: &Path, timeout: &str) -> Value {
    let json = ok(&mut trestle(&[
        &"fuzz",
        &unit,
        &"--time",
        &"60s",
        &"--timeout",
        &timeout,
        &"--out",
        &out,
        &"--in-process",
        &"--stop-on-crash",
        &"--json",
    ]));
    serde_json::from_str(&json).unwrap()
}

#[test]
fn in_process_fuzzing_reports_a_hang_as_a_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let unit = carve_exiting_unit(dir.path());
    let out = dir.path().join("out");
    let started = Instant::now();
    let report = fuzz_in_process_to_first_objective(&unit, &out, "100ms");
    let timeouts = report["timeouts"].as_array().unwrap();
    assert!(!timeouts.is_empty(), "no timeout: {report}");
    let finding: Value = serde_json::from_slice(
        &std::fs::read(Path::new(timeouts[0].as_str().unwrap()).with_extension("json")).unwrap(),
    )
    .unwrap();
    assert_eq!(finding["kind"], "timeout");
    assert_eq!(finding["values"][1], "7777", "{finding}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
    let left = processes_naming(&out);
    assert!(
        left.is_empty(),
        "processes left running after the campaign: {left:#?}"
    );
}

/// A hang is noticed by the time the recorded values take, not the per-execution
/// limit: with `--timeout 4s`, the first objective (the hang for 7777) is kept long
/// before that limit could have fired once, and the harness says the limit it used.
#[test]
fn in_process_fuzzing_notices_a_hang_by_the_recorded_calls_time() {
    let dir = tempfile::tempdir().unwrap();
    let unit = carve_exiting_unit(dir.path());
    let out = dir.path().join("out");
    let report = fuzz_in_process_to_first_objective(&unit, &out, "4s");
    let log = std::fs::read_to_string(out.join(".inproc").join("harness.log")).unwrap();
    assert!(log.contains("hang limit 10 ms"), "{log}");
    assert_eq!(report["hang_limit_ms"], 10, "{report}");
    let first = report["first_crash_after"].as_f64().expect("an objective");
    assert!(
        first < 4.0,
        "the hang waited for the 4 s limit: first objective after {first} s; {report}"
    );
    let timeouts = report["timeouts"].as_array().unwrap();
    assert!(
        !timeouts.is_empty(),
        "the hang, run alone at the full limit, is still a timeout: {report}"
    );
}

/// Planted length conditions: `shout` upper-cases its text in 4096-byte blocks and
/// goes wrong for a text longer than one block and not a whole number of them;
/// `blank_run` counts consecutive empty lines in a signed byte, which wraps at 128.
const LENGTHS: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int shout(char *text)
{
    size_t n = strlen(text);
    if (n > 4096 && n % 4096 != 0)
        abort();
    for (size_t i = 0; i < n; i++)
        if (text[i] >= 'a' && text[i] <= 'z')
            text[i] -= 'a' - 'A';
    return (int)n;
}
int blank_run(FILE *in)
{
    char line[64];
    signed char run = 0, longest = 0;
    while (fgets(line, sizeof line, in)) {
        run = line[0] == '\n' ? run + 1 : 0;
        if (run < 0)
            abort();
        if (run > longest)
            longest = run;
    }
    return longest;
}
int main(int argc, char **argv)
{
    if (argc < 2)
        return 1;
    printf("%d %d\n", shout(argv[1]), blank_run(stdin));
    return 0;
}
"#;

#[test]
fn length_conditions_past_a_4096_byte_block_and_a_byte_sized_count_are_found_at_unit_level() {
    // Neither length covers anything new on the way: only a mutation that stretches
    // a value to an interesting length (or repeats a line that many times) meets them.
    let dir = tempfile::tempdir().unwrap();
    let test = serde_json::json!({ "args": ["hello"], "stdin": "a\n\nb\n" });
    for (function, want) in [
        ("blank_run", "a run of 128 empty lines"),
        ("shout", "a text longer than 4096 bytes"),
    ] {
        let sub = dir.path().join(function);
        std::fs::create_dir_all(&sub).unwrap();
        let unit = carve_one(&sub, "lengths", LENGTHS, &test, function, 1);
        let out = sub.join("out");
        let json = ok(&mut trestle(&[
            &"fuzz",
            &unit,
            &"--time",
            &"20s",
            &"--out",
            &out,
            &"--in-process",
            &"--stop-on-crash",
            &"--json",
        ]));
        let report: Value = serde_json::from_str(&json).unwrap();
        assert!(
            !found_crashes(&out).is_empty(),
            "{function}: no crash from {want} in 20 s: {report}"
        );
    }
}

/// A separator and its length cached in a global of the same stem (cut's
/// `output_delimiter_string` and `output_delimiter_length`): the code past the first
/// field trusts the cached length, so only a separator whose length moves with it
/// reaches the planted fault (a cached length of 40 or more).
const CACHED_LENGTH: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static const char *sep_text;
static size_t sep_length;
__attribute__((noinline)) int emit(const char *field, int first)
{
    if (!first) {
        if (sep_length >= 40)
            abort();
        fwrite(sep_text, 1, sep_length, stdout);
    }
    return fputs(field, stdout);
}
int main(int argc, char **argv)
{
    if (argc < 3)
        return 1;
    sep_text = argv[1];
    sep_length = strlen(sep_text);
    for (int i = 2; i < argc; i++)
        emit(argv[i], i == 2);
    putchar('\n');
    return 0;
}
"#;

#[test]
fn a_length_cached_in_a_global_follows_its_string_and_the_fault_behind_it_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let test = serde_json::json!({ "args": ["<->", "alpha", "beta"] });
    let unit = carve_one(dir.path(), "cached", CACHED_LENGTH, &test, "emit", 1);
    let shown = ok(&mut trestle(&[&"show", &unit]));
    assert!(
        shown.contains("length companion: e"),
        "the cached length is no companion of \"<->\":\n{shown}"
    );
    let out = dir.path().join("out");
    let json = ok(&mut trestle(&[
        &"fuzz",
        &unit,
        &"--time",
        &"20s",
        &"--out",
        &out,
        &"--in-process",
        &"--stop-on-crash",
        &"--json",
    ]));
    let crashes = found_crashes(&out);
    assert!(
        crashes
            .iter()
            .any(|values| values.iter().any(|v| v.len() >= 40)),
        "no crash from a separator of 40 bytes or more in 20 s: {crashes:?} {json}"
    );
}

/// A gate on a weighted sum of the bytes of a line: no constant in the input to copy
/// (input-to-state has nothing to put where), only a distance to close. Measured: with
/// the operand distance every seed passed it within 0.2 s; without, none of three in
/// 40 s (11 million executions each).
const CLIMB: &str = r#"#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) int check(const char *s) {
    unsigned long acc = 0;
    for (size_t i = 0; s[i]; i++)
        acc += (unsigned char)s[i] * (i + 1);
    if (acc == 1234567) { /* the gate */
        abort();
    }
    return (int)(acc & 1);
}

int main(void) {
    char line[4096];
    if (!fgets(line, sizeof line, stdin)) return 1;
    line[strcspn(line, "\n")] = 0;
    printf("%d\n", check(line));
    return 0;
}
"#;

/// Build `source`, record `check` on one test with `stdin` for the branch on the line
/// marked `/* the gate */` and carve it: the unit, and the gate as `NAME.c:LINE`.
fn carve_check_reaching_gate(
    dir: &Path,
    name: &str,
    source: &str,
    stdin: &str,
) -> (PathBuf, String) {
    let prog = build_c(dir, name, source, "-O1");
    let tests = dir.join("tests");
    write_test(
        &tests,
        "seed",
        &serde_json::json!({"args": [], "stdin": stdin}),
    );
    let line = source
        .lines()
        .position(|l| l.contains("/* the gate */"))
        .unwrap()
        + 1;
    let goal = format!("{name}.c:{line}");
    let (traces, units) = (dir.join("traces"), dir.join("units"));
    ok(&mut trestle(&[
        &"record",
        &"--program",
        &prog,
        &"--tests",
        &tests,
        &"--out",
        &traces,
        &"--function",
        &"check",
        &"--reach",
        &goal,
    ]));
    ok(&mut trestle(&[&"carve", &traces, &"--out", &units]));
    let index: Value =
        serde_json::from_slice(&std::fs::read(units.join("index.json")).unwrap()).unwrap();
    (
        units.join(index["units"][0]["file"].as_str().unwrap()),
        goal,
    )
}

#[test]
fn fuzzing_for_a_branch_climbs_its_operand_distance_and_ends_when_it_flips() {
    let dir = tempfile::tempdir().unwrap();
    let (unit, goal) =
        carve_check_reaching_gate(dir.path(), "climb", CLIMB, "hello world, this is a seed\n");
    for seed in 1..=3 {
        let out = dir.path().join(format!("fuzz-{seed}"));
        let o = run(&mut trestle(&[
            &"fuzz",
            &unit,
            &"--in-process",
            &"--time",
            &"30s",
            &"--out",
            &out,
            &"--seed",
            &seed.to_string(),
            &"--goal",
            &goal,
            &"--json",
        ]));
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let report: Value = serde_json::from_slice(&o.stdout).unwrap();
        // The direction past the gate is taken (it aborts there: a crash), and the
        // campaign ends then rather than at its time.
        let after = report["goal_after"]
            .as_f64()
            .unwrap_or_else(|| panic!("seed {seed}: the gate was never passed: {report}"));
        assert!(
            report["crashes"].as_array().is_some_and(|c| !c.is_empty()),
            "seed {seed}: {report}"
        );
        assert!(
            report["seconds"].as_f64().unwrap() < after + 5.0,
            "seed {seed}: the campaign went on after the goal: {report}"
        );
    }
    // Without the distance as feedback the gate stands (what the test is for).
    let out = dir.path().join("plain");
    let o = run(&mut trestle(&[
        &"fuzz",
        &unit,
        &"--in-process",
        &"--time",
        &"5s",
        &"--out",
        &out,
        &"--goal",
        &goal,
        &"--no-distance",
        &"--json",
    ]));
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        report["goal_after"].is_null(),
        "the gate fell without the operand distance: {report}"
    );
    // A line the unit does not reach, and one without a branch, are errors that say so.
    let o = run(&mut trestle(&[
        &"fuzz",
        &unit,
        &"--in-process",
        &"--time",
        &"5s",
        &"--out",
        &dir.path().join("x"),
        &"--goal",
        &"climb.c:1",
    ]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err.contains("--goal climb.c:1")
            && err.contains(goal.rsplit(':').next().unwrap()),
        "{err}"
    );
}

/// A gate a comparison solves at once (`n == 4242`), and behind it a crash that takes
/// more mutations (a text longer than 200 bytes).
const BEHIND: &str = r#"#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) int check(long n, const char *text) {
    if (n == 4242) { /* the gate */
        if (strlen(text) > 200)
            abort();
        return 1;
    }
    return 0;
}

int main(void) {
    char line[4096], text[4096];
    long n;
    if (!fgets(line, sizeof line, stdin) || sscanf(line, "%ld %4095s", &n, text) != 2) return 1;
    printf("%d\n", check(n, text));
    return 0;
}
"#;

/// With `--after-goal`, fuzzing goes on past the flip and finds what lies behind the
/// branch; without, it ends at the flip, before the crash.
#[test]
fn fuzzing_for_a_branch_goes_on_behind_it_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let (unit, goal) = carve_check_reaching_gate(dir.path(), "behind", BEHIND, "17 hello\n");
    let fuzz = |name: &str, after: &str| -> Value {
        let out = dir.path().join(name);
        let o = run(&mut trestle(&[
            &"fuzz",
            &unit,
            &"--in-process",
            &"--time",
            &"40s",
            &"--out",
            &out,
            &"--goal",
            &goal,
            &"--after-goal",
            &after,
            &"--json",
        ]));
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let at_flip = fuzz("fuzz-at-flip", "0s");
    let flipped = at_flip["goal_after"]
        .as_f64()
        .unwrap_or_else(|| panic!("the gate was never passed: {at_flip}"));
    assert!(
        at_flip["seconds"].as_f64().unwrap() < flipped + 5.0,
        "{at_flip}"
    );
    assert!(
        at_flip["crashes"].as_array().is_some_and(|c| c.is_empty()),
        "the flip itself crashed: {at_flip}"
    );
    let behind = fuzz("fuzz-behind", "20s");
    let flipped = behind["goal_after"]
        .as_f64()
        .unwrap_or_else(|| panic!("the gate was never passed: {behind}"));
    assert!(
        behind["crashes"].as_array().is_some_and(|c| !c.is_empty()),
        "nothing behind the gate in 20 s: {behind}"
    );
    assert!(
        behind["seconds"].as_f64().unwrap() < flipped + 25.0,
        "went on past --after-goal: {behind}"
    );
}

/// An interpreter's evaluation of its whole program text, with a crash only one
/// program reaches (its 32-bit hash, which no mutation finds by chance).
const HASHED: &str = r#"#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) int eval(FILE *f) {
    unsigned long h = 5381;
    int c;
    size_t n = 0;
    while ((c = getc(f)) != EOF) {
        h = h * 33 + (unsigned char)c;
        n++;
    }
    if (n > 8 && (h & 0xffffffffUL) == 0x2a687697UL)
        abort();
    return (int)(h & 1);
}

int main(void) {
    printf("%d\n", eval(stdin));
    return 0;
}
"#;

/// `--start-from`: a unit's stream parameter starts from other system tests' same
/// input (the campaign gives it the system fuzzer's queue): the one program that
/// crashes is there, so the crash is found at once; without it, never. Tests that
/// cannot give the parameter a value are a clear error.
#[test]
fn a_units_stream_parameter_starts_from_system_tests_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let unit = carve_one(
        dir.path(),
        "hashed",
        HASHED,
        &serde_json::json!({ "stdin": "1 2 + p\n" }),
        "eval",
        1,
    );
    let queue = dir.path().join("queue");
    write_test(&queue, "a", &serde_json::json!({ "stdin": "3 4 * p\n" }));
    write_test(
        &queue,
        "b",
        &serde_json::json!({ "stdin": "dc program: 1 2 + p q\n" }),
    );
    let fuzz = |name: &str, extra: &[&dyn AsRef<std::ffi::OsStr>]| -> Value {
        let out = dir.path().join(name);
        let mut cmd = trestle(&[
            &"fuzz",
            &unit,
            &"--in-process",
            &"--time",
            &"5s",
            &"--out",
            &out,
            &"--stop-on-crash",
            &"--json",
        ]);
        cmd.args(extra.iter().map(|a| a.as_ref()));
        serde_json::from_str(&ok(&mut cmd)).unwrap()
    };
    let alone = fuzz("fuzz-alone", &[]);
    assert!(
        alone["crashes"].as_array().unwrap().is_empty(),
        "the hash was found by chance: {alone}"
    );
    let started = fuzz("fuzz-started", &[&"--start-from", &queue]);
    let crashes = started["crashes"].as_array().unwrap();
    assert!(
        !crashes.is_empty(),
        "the crashing program in the queue was not run: {started}"
    );
    let finding: Value = serde_json::from_slice(
        &std::fs::read(Path::new(crashes[0].as_str().unwrap()).with_extension("json")).unwrap(),
    )
    .unwrap();
    assert!(
        finding["values"][0]
            .as_str()
            .unwrap()
            .contains("dc program: 1 2 + p q"),
        "{finding}"
    );
    // Tests that give the parameter no other value give nothing to start from: said so.
    let other = dir.path().join("other");
    write_test(
        &other,
        "c",
        &serde_json::json!({ "args": ["-x"], "stdin": "1 2 + p\n" }),
    );
    let o = run(&mut trestle(&[
        &"fuzz",
        &unit,
        &"--in-process",
        &"--time",
        &"5s",
        &"--out",
        &dir.path().join("fuzz-other"),
        &"--start-from",
        &other,
    ]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("--start-from") && err.contains("stream parameter"),
        "{err}"
    );
}

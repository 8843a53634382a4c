//! Units that vary what the input decides, end to end on `kvshell` (a stdin line
//! protocol read with `fgets` and cut with `strtok_r`): the read loop's unread
//! input is a stream parameter, words of a line are resizable tokens, one-digit
//! counts are number parameters; fuzzing the read loop's stream finds a planted bug;
//! a campaign on one core reports both planted bugs (a magic decimal behind a long
//! key, a command no seed uses), each reduced to 1-minimal, and not the unit-only
//! crash; a stream the runtime cannot replace is no parameter, with the
//! reason counted.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use trestle_tests::*;

fn json_file(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .unwrap()
}

fn kvshell() -> PathBuf {
    subject("kvshell")
}

/// The trestle build and the plain build of kvshell.
fn builds(dir: &Path) -> (PathBuf, PathBuf) {
    let src = kvshell().join("kvshell.c");
    let harness = dir.join("kvshell");
    ok(Command::new(tool("trestle-cc"))
        .args(["-O2", "-g"])
        .arg(&src)
        .arg("-o")
        .arg(&harness));
    let plain = dir.join("kvshell-plain");
    ok(Command::new("clang-19")
        .args(["-O2", "-g"])
        .arg(&src)
        .arg("-o")
        .arg(&plain));
    (harness, plain)
}

/// True if `prog` dies of SIGSEGV on `stdin`.
fn crashes(prog: &Path, stdin: &[u8]) -> bool {
    use std::io::Write as _;
    use std::os::unix::process::ExitStatusExt as _;
    let mut child = Command::new(prog)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let _ = child.stdin.take().unwrap().write_all(stdin);
    child.wait().unwrap().signal() == Some(libc::SIGSEGV)
}

#[test]
fn streams_tokens_and_numbers_are_parameters_and_replay_faithfully() {
    let dir = tempfile::tempdir().unwrap();
    let (harness, _) = builds(dir.path());
    let traces = dir.path().join("traces");
    let units = dir.path().join("units");
    ok(&mut trestle(&[
        &"record",
        &"--program",
        &harness,
        &"--tests",
        &kvshell().join("seeds"),
        &"--out",
        &traces,
    ]));
    let o = run(&mut trestle(&[&"carve", &traces, &"--out", &units]));
    let log = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{log}");
    assert!(
        log.contains("units with a parameter of each kind:") && log.contains("stream "),
        "carve names the kinds: {log}"
    );
    let index = json_file(&units.join("index.json"));
    let rows = index["units"].as_array().unwrap();
    let kinds_of = |function: &str| -> Vec<Vec<String>> {
        rows.iter()
            .filter(|r| r["function"] == function)
            .map(|r| {
                r["param_kinds"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|k| k.as_str().unwrap().to_owned())
                    .collect()
            })
            .collect()
    };
    // Every seed's read loop gets the whole of its stdin as a stream parameter.
    let serve = kvshell().join("seeds").read_dir().unwrap().count();
    assert_eq!(
        kinds_of("serve")
            .iter()
            .filter(|k| k.contains(&"stream".to_owned()))
            .count(),
        serve
    );
    // A handler of `set KEY N` reads no input: its words are tokens, its one-digit
    // count a number.
    let set = kinds_of("cmd_set");
    assert!(!set.is_empty());
    assert!(
        set.iter()
            .all(|k| k.contains(&"token string".to_owned()) && k.contains(&"number".to_owned())),
        "{set:?}"
    );
    assert!(
        set.iter().all(|k| !k.contains(&"stream".to_owned())),
        "cmd_set does not read: {set:?}"
    );

    // `show` names each kind with its origin.
    let unit = rows.iter().find(|r| r["function"] == "serve").unwrap()["file"]
        .as_str()
        .unwrap()
        .to_owned();
    let shown = ok(&mut trestle(&[&"show", &units.join(&unit)]));
    assert!(
        shown.contains("unread input") && shown.contains("from stdin @0+"),
        "{shown}"
    );
    let unit = rows.iter().find(|r| r["function"] == "cmd_set").unwrap()["file"]
        .as_str()
        .unwrap()
        .to_owned();
    let shown = ok(&mut trestle(&[&"show", &units.join(&unit)]));
    assert!(
        shown.contains("number as decimal text, token (resizable)"),
        "{shown}"
    );

    // Every unit, those with stream parameters included, replays its seed faithfully.
    let out = ok(&mut trestle(&[&"replay", &units, &"--check", &"--json"]));
    let summary: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        summary["units"], summary["faithful"],
        "{:#}",
        summary["failures"]
    );
}

/// The read loop's stream parameter alone finds the command no seed uses: the unit
/// fuzzer sees the command table's comparisons and writes `swap` into the input.
#[test]
fn fuzzing_the_read_loop_finds_the_unused_command_and_lifting_keeps_the_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let (harness, plain) = builds(dir.path());
    let traces = dir.path().join("traces");
    let units = dir.path().join("units");
    ok(&mut trestle(&[
        &"record",
        &"--program",
        &harness,
        &"--tests",
        &kvshell().join("seeds"),
        &"--out",
        &traces,
    ]));
    ok(&mut trestle(&[&"carve", &traces, &"--out", &units]));
    let index = json_file(&units.join("index.json"));
    let serve: Vec<PathBuf> = index["units"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["function"] == "serve")
        .map(|r| units.join(r["file"].as_str().unwrap()))
        .collect();
    let mut found = false;
    for (k, unit) in serve.iter().enumerate().take(3) {
        let fz = dir.path().join(format!("fuzz-{k}"));
        ok(&mut trestle(&[
            &"fuzz",
            unit,
            &"--in-process",
            &"--time",
            &"30s",
            &"--out",
            &fz,
        ]));
        let lift = dir.path().join(format!("lift-{k}"));
        ok(&mut trestle(&[
            &"lift",
            &fz,
            &"--program",
            &plain,
            &"--seeds",
            &kvshell().join("seeds"),
            &"--out",
            &lift,
        ]));
        for a in &alarm_list(&lift) {
            assert!(
                a["function"] != "key_hash",
                "the unit-only crash was reported: {a}"
            );
            let lifted = json_file(
                &lift
                    .join("alarms")
                    .join(a["id"].as_str().unwrap())
                    .join("lifted.json"),
            );
            // The stream parameter starts at offset 0 of the read loop's input; the
            // lifted test is a whole new stdin that crashes the plain build.
            assert!(lifted["stdin"].is_string() || lifted["stdin"].is_object());
            found |= a["function"] == "swap_values" || a["function"] == "store_value";
        }
        if found {
            break;
        }
    }
    assert!(
        found,
        "no planted bug found through the read loop's stream parameter"
    );
}

#[test]
fn a_campaign_on_one_core_reports_both_planted_bugs_and_not_the_unit_only_crash() {
    let dir = tempfile::tempdir().unwrap();
    let (harness, plain) = builds(dir.path());
    let out = dir.path().join("camp");
    let o = run(&mut trestle(&[
        &"run",
        &"--program",
        &harness,
        &"--seeds",
        &kvshell().join("seeds"),
        &"--time",
        &"180s",
        &"--out",
        &out,
        &"--validate-with",
        &plain,
        &"--plain",
    ]));
    let log = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "trestle run failed:\n{log}");
    let alarms = alarm_list(&out);
    let mut functions: Vec<&str> = alarms
        .iter()
        .map(|a| a["function"].as_str().unwrap())
        .collect();
    functions.sort();
    assert_eq!(
        functions,
        vec!["store_value", "swap_values"],
        "exactly the two planted bugs:\n{log}"
    );
    for a in &alarms {
        let script = out
            .join("alarms")
            .join(a["id"].as_str().unwrap())
            .join("reproduce.sh");
        let r = run(Command::new("sh").arg(&script).arg(&plain));
        assert_eq!(
            r.status.code(),
            Some(139),
            "{} does not crash the plain program",
            script.display()
        );
    }
    // Every reduced test is 1-minimal: without any one of its bytes the plain build
    // no longer crashes.
    for a in &alarms {
        let reduced = json_file(
            &out.join("alarms")
                .join(a["id"].as_str().unwrap())
                .join("reduced.json"),
        );
        let stdin = reduced["stdin"]
            .as_str()
            .expect("kvshell alarms are stdin tests")
            .as_bytes()
            .to_vec();
        assert!(
            crashes(&plain, &stdin),
            "the reduced test crashes: {reduced}"
        );
        for i in 0..stdin.len() {
            let mut less = stdin.clone();
            less.remove(i);
            assert!(
                !crashes(&plain, &less),
                "byte {i} of {:?} can be removed",
                String::from_utf8_lossy(&stdin)
            );
        }
    }
    // Units with stream or number parameters were fuzzed (the system part is at full
    // strength and may find the bugs first: which side wins is not asserted), and the
    // report says why each fuzzed unit was chosen.
    let c = json_file(&out.join("campaign.json"));
    let fuzzed = c["fuzzed"].as_array().unwrap();
    assert!(c["unit_executions"].as_u64().unwrap() > 0);
    assert!(fuzzed
        .iter()
        .all(|f| !f["reason"].as_str().unwrap_or("").is_empty()));
    assert!(
        fuzzed.iter().any(|f| f["reason"]
            .as_str()
            .is_some_and(|r| r.contains("stream") || r.contains("number"))),
        "{fuzzed:#?}"
    );
    ok(&mut trestle(&[&"report", &out]));
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    // Whatever picked them (a roadblock or the static score), each fuzzed unit's reason
    // is in the report.
    assert!(md.contains("Why each unit was fuzzed"), "{md}");
    for f in fuzzed {
        let reason = f["reason"].as_str().unwrap();
        assert!(
            md.contains(&reason.replace('|', "\\|")),
            "the reason {reason:?} is not in the report:\n{md}"
        );
    }
}

/// A stream whose content lives outside the descriptor (a file mapped into
/// memory) or that cannot be repositioned (a pipe) is no parameter; `carve` counts
/// it with the reason.
#[test]
fn streams_that_cannot_be_replaced_are_counted_with_their_reason() {
    let dir = tempfile::tempdir().unwrap();
    let src = r#"
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
static int consume(int fd) { char b[4]; return (int)read(fd, b, sizeof b); }
static int first_line(FILE *in) { char b[64]; return fgets(b, sizeof b, in) ? (int)strlen(b) : -1; }
int main(int argc, char **argv) {
    if (argc > 1) {
        int fd = open(argv[1], O_RDONLY);
        void *m = mmap(0, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
        printf("%d %d\n", consume(fd), m != MAP_FAILED);
        return 0;
    }
    int p[2];
    if (pipe(p) != 0) return 1;
    if (write(p[1], "piped line\n", 11) != 11) return 1;
    close(p[1]);
    dup2(p[0], 0);
    printf("%d\n", first_line(stdin));
    return 0;
}
"#;
    let prog = build_c(dir.path(), "streams", src, "-O1");
    let seeds = dir.path().join("seeds");
    write_test(
        &seeds,
        "mapped",
        &json!({"args": ["in.txt"], "files": {"in.txt": "abcdefgh\n"}}),
    );
    write_test(&seeds, "piped", &json!({"stdin": "never read\n"}));
    let traces = dir.path().join("traces");
    let units = dir.path().join("units");
    ok(&mut trestle(&[
        &"record",
        &"--program",
        &prog,
        &"--tests",
        &seeds,
        &"--out",
        &traces,
    ]));
    let o = run(&mut trestle(&[&"carve", &traces, &"--out", &units]));
    let log = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{log}");
    let index = json_file(&units.join("index.json"));
    let unmapped = &index["unmapped_streams"];
    assert!(
        unmapped["mapped into memory with mmap"]
            .as_u64()
            .unwrap_or(0)
            >= 1,
        "{index:#}"
    );
    assert!(
        unmapped["not seekable (a pipe, socket or terminal)"]
            .as_u64()
            .unwrap_or(0)
            >= 1,
        "{index:#}"
    );
    assert!(
        log.contains("stream(s) read but not mapped: mapped into memory with mmap"),
        "{log}"
    );
    // The functions that read them have no stream parameter.
    for r in index["units"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["function"] != "main")
    {
        assert!(
            !r["param_kinds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k == "stream"),
            "no stream parameter: {r}"
        );
    }
}

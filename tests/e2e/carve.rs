//! Carving end to end: every bundled subject, built with trestle-cc at -O0 and -O2,
//! is recorded on its seeds, carved and replayed; replays must be faithful and every
//! called function carved. A crashing subject keeps what it recorded.

use serde_json::{json, Value};
use trestle_tests::*;

/// Record → carve → replay --check --json; returns (replay summary, unit index).
fn pipeline(program: &std::path::Path, seeds: &std::path::Path, work: &std::path::Path) -> (Value, Value) {
    let traces = work.join("traces");
    let units = work.join("units");
    ok(&mut trestle(&[&"record", &"--program", &program, &"--tests", &seeds, &"--out", &traces]));
    ok(&mut trestle(&[&"carve", &traces, &"--out", &units]));
    let out = ok(&mut trestle(&[&"replay", &units, &"--check", &"--json"]));
    let summary: Value = serde_json::from_str(&out).expect("replay --json prints JSON");
    let index: Value =
        serde_json::from_slice(&std::fs::read(units.join("index.json")).expect("index.json")).expect("index is JSON");
    (summary, index)
}

fn check_subject(name: &str, opt: &str) {
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join(name);
    build_subject(&subject(name), opt, &prog);
    let (summary, index) = pipeline(&prog, &subject(name).join("seeds"), dir.path());
    let units = summary["units"].as_u64().unwrap();
    let faithful = summary["faithful"].as_u64().unwrap();
    let fidelity = summary["fidelity"].as_f64().unwrap();
    assert!(units >= 10, "{name} {opt}: only {units} units carved");
    assert!(summary["functions"].as_array().is_some_and(|f| !f.is_empty()));
    assert!(
        fidelity >= 0.95,
        "{name} {opt}: fidelity {fidelity:.3} ({faithful}/{units}); failures: {:#}",
        summary["failures"]
    );
    let not_carved = index["not_carved"].as_array().unwrap();
    assert!(not_carved.is_empty(), "{name} {opt}: called but not carved: {not_carved:?}");
    assert!(index["called_functions"].as_u64().unwrap() >= 10);
}

#[test]
fn strproc_o0() {
    check_subject("strproc", "-O0");
}

#[test]
fn strproc_o2() {
    check_subject("strproc", "-O2");
}

#[test]
fn linked_o0() {
    check_subject("linked", "-O0");
}

#[test]
fn linked_o2() {
    check_subject("linked", "-O2");
}

#[test]
fn dispatch_o0() {
    check_subject("dispatch", "-O0");
}

#[test]
fn dispatch_o2() {
    check_subject("dispatch", "-O2");
}

#[test]
fn shapes_cpp_o0() {
    check_subject("shapes", "-O0");
}

#[test]
fn shapes_cpp_o2() {
    check_subject("shapes", "-O2");
}

const CRASHER: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
struct rec { char *name; int n; };
static int count_vowels(const char *s) {
    int n = 0;
    for (; *s; s++) n += strchr("aeiou", *s) != NULL;
    return n;
}
static struct rec *make(const char *s) {
    struct rec *r = malloc(sizeof *r);
    r->name = strdup(s);
    r->n = count_vowels(s);
    return r;
}
static int boom(struct rec *r) {
    if (strcmp(r->name, "crash") == 0) {
        int *volatile p = NULL;     /* volatile: the optimiser must keep the fault */
        return *p + r->n;           /* the planted crash */
    }
    return r->n;
}
int main(int argc, char **argv) {
    int total = 0;
    for (int i = 1; i < argc; i++) total += boom(make(argv[i]));
    printf("%d\n", total);
    return 0;
}
"#;

#[test]
fn a_crashing_subject_keeps_every_record_written_before_the_crash() {
    let dir = tempfile::tempdir().unwrap();
    let prog = build_c(dir.path(), "crasher", CRASHER, "-O1");
    let seeds = dir.path().join("seeds");
    write_test(&seeds, "crash", &json!({"args": ["banana", "kiwi", "crash"]}));
    let traces = dir.path().join("traces");
    ok(&mut trestle(&[&"record", &"--program", &prog, &"--tests", &seeds, &"--out", &traces]));
    let record: Value = serde_json::from_slice(&std::fs::read(traces.join("record.json")).unwrap()).unwrap();
    assert_eq!(record["tests"][0]["status"], json!({"Signaled": 11}), "the subject must really crash");
    let units = dir.path().join("units");
    ok(&mut trestle(&[&"carve", &traces, &"--out", &units]));
    let index: Value = serde_json::from_slice(&std::fs::read(units.join("index.json")).unwrap()).unwrap();
    let rows = index["units"].as_array().unwrap();
    let count = |f: &str| rows.iter().filter(|r| r["function"] == f).count();
    // Three calls each of make and count_vowels happened before the crash.
    assert_eq!(count("make"), 3, "{rows:#?}");
    assert_eq!(count("count_vowels"), 3);
    assert_eq!(count("boom"), 3);
    // The crashing invocation's outcome was recorded by the crash handler, and its
    // replay crashes the same way: that counts as faithful.
    let out = ok(&mut trestle(&[&"replay", &units, &"--check", &"--json"]));
    let summary: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["faithful"], summary["units"], "{summary:#}");
    let shown: Vec<String> = rows
        .iter()
        .filter(|r| r["function"] == "boom")
        .map(|r| ok(&mut trestle(&[&"show", &units.join(r["file"].as_str().unwrap())])))
        .collect();
    assert_eq!(
        shown.iter().filter(|s| s.contains("expected  crashed with signal 11")).count(),
        1,
        "exactly the call on \"crash\" crashed: {shown:#?}"
    );
}

//! `--time` is a promise: a unit that hangs on its recorded values is refused by the
//! dry run, in either harness, within seconds of the budget; a campaign whose every
//! unit hangs ends within its budget and says why no unit was fuzzed.

use serde_json::json;
use std::process::Command;
use std::time::{Duration, Instant};
use trestle_tests::*;

/// `spin` hangs as a unit (in the harness, TRESTLE_FUZZ is set) when SPIN is set: a
/// stand-in for a unit whose context does not restore well enough to return. The
/// program itself never hangs.
const PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static int spin(const char *word) {
    if (getenv("SPIN") && getenv("@ENV_FUZZ@"))
        for (volatile unsigned long i = 0;; i++) ;
    return (int)strlen(word);
}
int main(int argc, char **argv) {
    int total = 0;
    for (int i = 1; i < argc; i++) total += spin(argv[i]);
    printf("%d\n", total);
    return 0;
}
"#;

fn carve(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let prog = build_c(
        dir,
        "spin",
        &PROGRAM.replace("@ENV_FUZZ@", trestle_abi::fuzz::ENV_FUZZ),
        "-O1",
    );
    let seeds = dir.join("seeds");
    write_test(&seeds, "words", &json!({"args": ["alpha", "beta"]}));
    let traces = dir.join("traces");
    let units = dir.join("units");
    ok(&mut trestle(&[
        &"record",
        &"--program",
        &prog,
        &"--tests",
        &seeds,
        &"--out",
        &traces,
    ]));
    ok(&mut trestle(&[&"carve", &traces, &"--out", &units]));
    let unit = std::fs::read_dir(units.join("spin"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "unit"))
        .unwrap();
    (prog, unit)
}

#[test]
fn a_unit_that_hangs_is_refused_within_seconds_in_both_harnesses() {
    let dir = tempfile::tempdir().unwrap();
    let (_, unit) = carve(dir.path());
    for (k, mode) in [&["--in-process"][..], &[][..]].into_iter().enumerate() {
        let out = dir.path().join(format!("fz-{k}"));
        let t = Instant::now();
        let mut cmd = trestle(&[&"fuzz", &unit, &"--time", &"3s", &"--out", &out]);
        cmd.args(mode).env("SPIN", "1");
        let o = run(&mut cmd);
        let took = t.elapsed();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(took < Duration::from_secs(10), "{mode:?}: took {took:?}");
        assert!(!o.status.success(), "{mode:?}: a hanging unit is an error");
        assert!(
            err.contains("does not finish on its recorded values"),
            "{mode:?}: {err}"
        );
    }
}

#[test]
fn a_campaign_whose_units_all_hang_ends_within_its_budget() {
    let dir = tempfile::tempdir().unwrap();
    let (prog, _) = carve(dir.path());
    let out = dir.path().join("camp");
    let t = Instant::now();
    let o = run(Command::new(tool("trestle"))
        .args([
            "run",
            "--plain",
            "--fail-on-alarm",
            "--time",
            "25s",
            "--out",
        ])
        .arg(&out)
        .arg("--program")
        .arg(&prog)
        .arg("--seeds")
        .arg(dir.path().join("seeds"))
        .env("SPIN", "1"));
    let took = t.elapsed();
    // No alarm: exit status 0 even with --fail-on-alarm.
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        took < Duration::from_secs(35),
        "a 25 s campaign took {took:?}"
    );
    let c: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("campaign.json")).unwrap()).unwrap();
    let fuzzed = c["fuzzed"].as_array().unwrap();
    assert!(!fuzzed.is_empty());
    assert!(
        fuzzed.iter().all(|f| f["error"]
            .as_str()
            .is_some_and(|e| e.contains("does not finish"))),
        "{fuzzed:#?}"
    );
    assert!(fuzzed.iter().all(|f| f["executions"] == 0));
}

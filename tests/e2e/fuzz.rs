//! Map and fuzz end to end on the planted-bug subject `requests`: from its seeds,
//! record → carve → fuzz must find the magic integer and the magic user name crashes
//! at unit level within 60 seconds each, find the unit-only crash too, and give the
//! hashed value no parameter. On two cores (LibAFL's launcher) the magic integer is
//! found too, and the campaign ends with no process left behind.

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
    ok(&mut trestle(&[&"record", &"--program", &prog, &"--tests", &subject("requests").join("seeds"), &"--out", &traces]));
    ok(&mut trestle(&[&"carve", &traces, &"--out", &units]));
    let index = serde_json::from_slice(&std::fs::read(units.join("index.json")).unwrap()).unwrap();
    Carved { _dir: dir, units, index }
}

fn rows<'a>(c: &'a Carved, function: &str) -> Vec<&'a Value> {
    c.index["units"].as_array().unwrap().iter().filter(|r| r["function"] == function).collect()
}

/// Fuzz `unit` until the first crash (at most 60 s); the decoded values of every crash.
fn crash_values(units: &Path, row: &Value, out: &Path) -> Vec<Vec<String>> {
    let unit = units.join(row["file"].as_str().unwrap());
    ok(&mut trestle(&[&"fuzz", &unit, &"--time", &"60s", &"--out", &out, &"--stop-on-crash", &"--json"]));
    let mut found = Vec::new();
    for e in std::fs::read_dir(out.join("crashes")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "json") {
            let f: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
            assert_eq!(f["kind"], "crash");
            found.push(f["values"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect());
        }
    }
    found
}

#[test]
fn the_magic_integer_is_found_at_unit_level() {
    let c = carve_requests();
    let r = rows(&c, "store_value");
    let row = r.iter().find(|r| r["params"].as_u64().unwrap() >= 2).expect("a store_value unit with idx and value mapped");
    let out = tempfile::tempdir().unwrap();
    let crashes = crash_values(&c.units, row, out.path());
    assert!(
        crashes.iter().any(|v| v.iter().any(|x| x == "42342531")),
        "no crash with the magic value: {crashes:?}"
    );
}

#[test]
fn the_magic_user_name_is_found_at_unit_level() {
    let c = carve_requests();
    // A unit whose user name is a parameter of its own (it fills its extent).
    let r = rows(&c, "check_login");
    let mut tried = 0;
    for row in r.iter().filter(|r| r["params"].as_u64().unwrap() >= 2) {
        tried += 1;
        let out = tempfile::tempdir().unwrap();
        let crashes = crash_values(&c.units, row, out.path());
        if crashes.iter().any(|v| v.iter().any(|x| x == "\"admin\"")) {
            return;
        }
    }
    panic!("no check_login unit ({tried} tried) crashed with user \"admin\"");
}

#[test]
fn the_unit_only_crash_is_found_and_the_hash_has_no_parameter() {
    let c = carve_requests();
    let r = rows(&c, "first_char_class");
    let row = r.iter().find(|r| r["params"].as_u64().unwrap() >= 1).expect("a mapped first_char_class unit");
    let out = tempfile::tempdir().unwrap();
    assert!(!crash_values(&c.units, row, out.path()).is_empty(), "first_char_class did not crash at unit level");
    let tokens = rows(&c, "check_token");
    assert!(!tokens.is_empty());
    assert!(tokens.iter().all(|r| r["params"] == 0), "the hashed value must not be a parameter: {tokens:?}");
}

#[test]
fn a_unit_without_parameters_is_refused_clearly() {
    let c = carve_requests();
    let row = rows(&c, "check_token")[0];
    let out = tempfile::tempdir().unwrap();
    let unit = c.units.join(row["file"].as_str().unwrap());
    let o = run(&mut trestle(&[&"fuzz", &unit, &"--time", &"5s", &"--out", &out.path()]));
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no parameters"), "{err}");
}

#[test]
fn a_parameter_that_no_longer_fits_is_a_clear_error() {
    let c = carve_requests();
    let row = rows(&c, "check_login").into_iter().find(|r| r["params"].as_u64().unwrap() >= 1).unwrap();
    let path = c.units.join(row["file"].as_str().unwrap());
    let mut unit = trestle_abi::unit::Unit::decode(&std::fs::read(&path).unwrap()).unwrap();
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
    let o = run(&mut trestle(&[&"fuzz", &broken, &"--time", &"5s", &"--out", &out.path()]));
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("cannot set up") && err.contains("no longer fits"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// Processes still running (not zombies) whose command line or environment names
/// `dir`: the launcher's forks carry `--out DIR`, the harnesses `TRESTLE_FUZZ=DIR/…`.
fn processes_naming(dir: &Path) -> Vec<String> {
    let needle = dir.to_string_lossy().into_owned().into_bytes();
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if !e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        if stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')) {
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
    let row = r.iter().find(|r| r["params"].as_u64().unwrap() >= 2).expect("a store_value unit with idx and value mapped");
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
    let first = report["first_crash_after"].as_f64().expect("a crash, with its time");
    // Stopping on a crash ends every client, the broker and the launcher quickly:
    // nothing waits for the 60 s budget.
    assert!(took < Duration::from_secs(30), "took {took:?} (first crash after {first:.1}s)");
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
        values.iter().any(|v| v.as_array().unwrap().iter().any(|x| x == "42342531")),
        "no crash with the magic value: {values:?}"
    );
    assert_eq!(report["crashes"].as_array().unwrap().len(), values.len(), "{report}");
    let left = processes_naming(&out);
    assert!(left.is_empty(), "processes left running after the campaign: {left:#?}");
}

#[test]
fn a_core_count_the_machine_lacks_is_a_clear_error() {
    let out = tempfile::tempdir().unwrap();
    for cores in ["0", "100000"] {
        let o = run(&mut trestle(&[&"fuzz", &"missing.unit", &"--cores", &cores, &"--out", &out.path()]));
        assert!(!o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(&format!("--cores {cores}: choose 1 to")), "{err}");
    }
}

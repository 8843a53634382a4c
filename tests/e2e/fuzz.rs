//! Map and fuzz end to end on the planted-bug subject `requests`: from its seeds,
//! record → carve → fuzz must find the magic integer and the magic user name crashes
//! at unit level within 60 seconds each, find the unit-only crash too, and give the
//! hashed value no parameter.

use serde_json::Value;
use std::path::{Path, PathBuf};
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

//! `trestle export` end to end on the planted-bug subject `requests`: units carved
//! from its seeds, exported as C and built with `build.sh` against a plain
//! `clang-19 -O0 -g -c requests.c` object, run as recorded (exit 0, return value
//! checked); with the values of planted bug 1 (`store_value` with 42342531) and bug 2
//! (`check_login` as admin with a 30-character password) they are killed by SIGSEGV.
//! A unit from another binary is refused with an error that names it.

use serde_json::Value;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use trestle_abi::fuzz::{encode_values, original_value, ParamValue};
use trestle_abi::unit::{ParamKind, ParamSite, Unit};
use trestle_abi::Value as CtxValue;
use trestle_tests::*;

const SIGSEGV: i32 = 11;

struct Carved {
    dir: tempfile::TempDir,
    program: PathBuf,
    units: PathBuf,
    index: Value,
    /// `requests.c` compiled by plain clang, without trestle.
    object: PathBuf,
}

fn carve_requests() -> Carved {
    let dir = tempfile::tempdir().unwrap();
    let src = subject("requests").join("requests.c");
    let program = dir.path().join("requests");
    ok(Command::new(tool("trestle-cc"))
        .args(["-O0", "-g"])
        .arg(&src)
        .arg("-o")
        .arg(&program));
    let traces = dir.path().join("traces");
    let units = dir.path().join("units");
    ok(&mut trestle(&[
        &"record",
        &"--program",
        &program,
        &"--tests",
        &subject("requests").join("seeds"),
        &"--out",
        &traces,
    ]));
    ok(&mut trestle(&[&"carve", &traces, &"--out", &units]));
    let index = serde_json::from_slice(&std::fs::read(units.join("index.json")).unwrap()).unwrap();
    let object = dir.path().join("requests.o");
    ok(Command::new("clang-19")
        .args(["-O0", "-g", "-c"])
        .arg(&src)
        .arg("-o")
        .arg(&object));
    Carved {
        dir,
        program,
        units,
        index,
        object,
    }
}

impl Carved {
    /// The unit files of `function`, in index order.
    fn units_of(&self, function: &str) -> Vec<PathBuf> {
        self.index["units"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["function"] == function)
            .map(|r| self.units.join(r["file"].as_str().unwrap()))
            .collect()
    }

    /// Export `unit` (with the raw fuzzer input `input`, if any) to `name.c` in a
    /// directory of its own.
    fn export(&self, unit: &Path, input: Option<&Path>, name: &str) -> PathBuf {
        let out = self.dir.path().join("exported").join(format!("{name}.c"));
        std::fs::create_dir_all(out.parent().unwrap()).unwrap();
        let mut cmd = trestle(&[&"export", &unit, &"--out", &out]);
        if let Some(i) = input {
            cmd.arg("--input").arg(i);
        }
        ok(&mut cmd);
        out
    }

    /// Build exported tests with the `build.sh` written next to them, against the
    /// plain object; returns the executables.
    fn build(&self, tests: &[PathBuf]) -> Vec<PathBuf> {
        let script = tests[0].parent().unwrap().join("build.sh");
        ok(Command::new(&script).args(tests).arg(&self.object));
        tests.iter().map(|t| t.with_extension("")).collect()
    }
}

/// Run an exported test with empty stdin.
fn run_test(exe: &Path) -> (ExitStatus, String) {
    let out = run(Command::new(exe).stdin(Stdio::null()));
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn read(unit: &Path) -> Unit {
    trestle_bridge::carve::units::read_unit(unit).unwrap()
}

/// A raw fuzzer input giving each parameter `pick(parameter index)`, or its
/// recorded value.
fn input_file(
    dir: &Path,
    name: &str,
    unit: &Unit,
    pick: impl Fn(usize) -> Option<ParamValue>,
) -> PathBuf {
    let values: Vec<ParamValue> = unit
        .params
        .iter()
        .enumerate()
        .map(|(i, p)| pick(i).unwrap_or_else(|| original_value(p)))
        .collect();
    let path = dir.join(format!("{name}.input"));
    std::fs::write(&path, encode_values(&values)).unwrap();
    path
}

#[test]
fn exported_units_build_against_a_plain_object_and_run_as_recorded() {
    let c = carve_requests();
    let mut tests = Vec::new();
    for function in [
        "store_value",
        "check_login",
        "parse_long",
        "describe_word",
        "main",
    ] {
        let units = c.units_of(function);
        assert!(!units.is_empty(), "no {function} unit carved");
        // The first two of each, so units from different tests are covered.
        for (k, unit) in units.iter().take(2).enumerate() {
            tests.push(c.export(unit, None, &format!("{function}_{k}")));
        }
    }
    // A unit exported as recorded checks the return value the recording saw.
    let store = std::fs::read_to_string(&tests[0]).unwrap();
    assert!(
        store.contains("the recording"),
        "no return value check in:\n{store}"
    );
    assert!(
        store.contains("symbol store_value function - local"),
        "{store}"
    );
    for exe in c.build(&tests) {
        let (status, stderr) = run_test(&exe);
        assert!(
            status.success(),
            "{} ended with {status}: {stderr}",
            exe.display()
        );
    }
}

#[test]
fn exported_units_build_against_the_trestle_cc_objects_they_were_recorded_from() {
    // The program as a build system makes it: objects by trestle-cc at -O2, linked.
    let dir = tempfile::tempdir().unwrap();
    let src = subject("requests").join("requests.c");
    let (object, program) = (dir.path().join("requests.o"), dir.path().join("requests"));
    ok(Command::new(tool("trestle-cc"))
        .args(["-O2", "-g", "-c"])
        .arg(&src)
        .arg("-o")
        .arg(&object));
    ok(Command::new(tool("trestle-cc"))
        .arg(&object)
        .arg("-o")
        .arg(&program));
    let (traces, units) = (dir.path().join("traces"), dir.path().join("units"));
    ok(&mut trestle(&[
        &"record",
        &"--program",
        &program,
        &"--tests",
        &subject("requests").join("seeds"),
        &"--out",
        &traces,
    ]));
    ok(&mut trestle(&[&"carve", &traces, &"--out", &units]));
    let exported = dir.path().join("exported");
    std::fs::create_dir_all(&exported).unwrap();
    let mut tests = Vec::new();
    for function in ["store_value", "check_login", "main"] {
        let unit = std::fs::read_dir(units.join(function))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let out = exported.join(format!("{function}.c"));
        ok(&mut trestle(&[&"export", &unit, &"--out", &out]));
        tests.push(out);
    }
    // Its objects call the carving runtime: build.sh links them with trestle-cc.
    ok(Command::new(exported.join("build.sh"))
        .args(&tests)
        .arg(&object));
    for t in &tests {
        let (status, stderr) = run_test(&t.with_extension(""));
        assert!(
            status.success(),
            "{} ended with {status}: {stderr}",
            t.display()
        );
    }
}

#[test]
fn the_magic_integer_exported_from_a_unit_crashes_the_test() {
    let c = carve_requests();
    let unit_path = c
        .units_of("store_value")
        .into_iter()
        .find(|u| read(u).params.len() >= 2)
        .expect("a store_value unit with idx and value mapped");
    let unit = read(&unit_path);
    let input = input_file(c.dir.path(), "bug1", &unit, |i| match unit.params[i].site {
        ParamSite::Arg(0) => Some(ParamValue::Int(7)),
        ParamSite::Arg(1) => Some(ParamValue::Int(42342531)),
        _ => None,
    });
    let test = c.export(&unit_path, Some(&input), "store_value_bug1");
    let text = std::fs::read_to_string(&test).unwrap();
    assert!(
        text.contains("= 42342531 (recorded"),
        "the header does not show the value used:\n{text}"
    );
    let (status, stderr) = run_test(&c.build(&[test])[0]);
    assert_eq!(
        status.signal(),
        Some(SIGSEGV),
        "expected SIGSEGV, got {status}: {stderr}"
    );
}

#[test]
fn the_admin_login_with_a_long_password_crashes_the_test() {
    let c = carve_requests();
    // A unit whose user and password are each a parameter filling its own extent, so
    // a password of a new length gets a fresh extent.
    let (unit_path, unit, user, password) = c
        .units_of("check_login")
        .into_iter()
        .find_map(|path| {
            let unit = read(&path);
            let param_at = |arg: usize| {
                let CtxValue::Ptr { extent, offset: 0 } = unit.context.args[arg] else {
                    return None;
                };
                unit.params.iter().position(|p| {
                    matches!(p.site, ParamSite::Memory { extent: e, offset: 0, .. } if e == extent)
                        && matches!(
                            p.kind,
                            ParamKind::Bytes {
                                resize: trestle_abi::unit::Resize::Extent,
                                ..
                            }
                        )
                })
            };
            let (u, p) = (param_at(0)?, param_at(1)?);
            (unit.params[p].original.len() != 30).then_some((path, unit, u, p))
        })
        .expect("a check_login unit with resizable user and password parameters");
    let input = input_file(c.dir.path(), "bug2", &unit, |i| {
        if i == user {
            Some(ParamValue::Bytes(b"admin".to_vec()))
        } else if i == password {
            Some(ParamValue::Bytes(vec![b'a'; 30]))
        } else {
            None
        }
    });
    let test = c.export(&unit_path, Some(&input), "check_login_bug2");
    let (status, stderr) = run_test(&c.build(&[test])[0]);
    assert_eq!(
        status.signal(),
        Some(SIGSEGV),
        "expected SIGSEGV, got {status}: {stderr}"
    );
}

#[test]
fn a_unit_from_another_binary_is_refused_clearly() {
    let c = carve_requests();
    let unit = &c.units_of("store_value")[0];
    let other = build_c(
        c.dir.path(),
        "other",
        "int main(void) { return 0; }\n",
        "-O0",
    );
    let out = c.dir.path().join("x.c");
    let o = run(&mut trestle(&[
        &"export",
        unit,
        &"--out",
        &out,
        &"--program",
        &other,
    ]));
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("carved from another binary") && err.contains(&*unit.to_string_lossy()),
        "{err}"
    );
    assert!(!out.exists(), "nothing is written for a refused unit");

    let missing = c.dir.path().join("no-such-program");
    let o = run(&mut trestle(&[
        &"export",
        unit,
        &"--out",
        &out,
        &"--program",
        &missing,
    ]));
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&*missing.to_string_lossy()) && !err.contains("panicked"),
        "{err}"
    );
    // The program the unit names is still there: the export works without --program.
    assert!(c.program.exists());
}

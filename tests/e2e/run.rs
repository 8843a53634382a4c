//! The campaign end to end on the planted-bug subject `requests`: `trestle run` finds
//! the magic integer and the magic string as true alarms and nothing else, a
//! system-only run with the same budget reports only real bugs and runs no unit, a changed
//! function is fuzzed first, a campaign killed with SIGKILL resumes without losing an
//! alarm or a unit, the report renders with both coverage curves, and the alarms come
//! out as SARIF 2.1.0 that the OASIS schema accepts. And a lifted test that hangs stops
//! at the campaign's hang limit.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use trestle_tests::*;

fn json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .unwrap()
}

struct Builds {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    harness: PathBuf,
    plain: PathBuf,
}

fn builds(src: &Path) -> Builds {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_owned();
    let harness = d.join("requests");
    ok(Command::new(tool("trestle-cc"))
        .args(["-O2", "-g"])
        .arg(src)
        .arg("-o")
        .arg(&harness));
    let plain = d.join("requests-plain");
    ok(Command::new("clang-19")
        .args(["-O2", "-g"])
        .arg(src)
        .arg("-o")
        .arg(&plain));
    Builds {
        _dir: dir,
        dir: d,
        harness,
        plain,
    }
}

fn seeds() -> PathBuf {
    subject("requests").join("seeds")
}

fn alarm_functions(out: &Path) -> Vec<String> {
    alarm_list(out)
        .iter()
        .map(|x| x["function"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_bridge_finds_both_planted_bugs_and_the_baseline_runs_no_unit() {
    let b = builds(&subject("requests").join("requests.c"));
    let out = b.dir.join("bridge");
    let sarif = b.dir.join("alarms.sarif");
    // From the repository's root, as a CI job runs from its checkout.
    let o = run(trestle(&[
        &"run",
        &"--program",
        &b.harness,
        &"--seeds",
        &seeds(),
        &"--time",
        &"240s",
        &"--out",
        &out,
        &"--validate-with",
        &b.plain,
        &"--plain",
        &"--fail-on-alarm",
        &"--sarif",
        &sarif,
    ])
    .current_dir(repo()));
    let log = String::from_utf8_lossy(&o.stderr);
    // It found true alarms: with --fail-on-alarm that is exit status 1.
    assert_eq!(
        o.status.code(),
        Some(1),
        "trestle run --fail-on-alarm:\n{log}"
    );
    let functions = alarm_functions(&out);
    assert!(
        functions.iter().any(|f| f == "store_value"),
        "magic integer not reported: {functions:?}\n{log}"
    );
    assert!(
        functions.iter().any(|f| f == "check_login"),
        "magic string not reported: {functions:?}\n{log}"
    );
    // No false alarm: every alarm is one of the two planted bugs, and its reduced test
    // crashes the plain program.
    assert_eq!(
        functions.len(),
        2,
        "only the two planted bugs: {functions:?}"
    );
    for a in &alarm_list(&out) {
        let script = out
            .join("alarms")
            .join(a["id"].as_str().unwrap())
            .join("reproduce.sh");
        let r = run(Command::new("sh").arg(&script).arg(&b.plain));
        assert_eq!(
            r.status.code(),
            Some(139),
            "{} does not crash the plain program",
            script.display()
        );
    }
    check_sarif(&json(&sarif), &b.plain);
    let c = json(&out.join("campaign.json"));
    assert!(c["finished"] == true);
    assert!(
        c["unit_executions"].as_u64().unwrap() > 0 && c["system_executions"].as_u64().unwrap() > 0
    );
    // Alarms were published as found and reduced once the budget was spent: none is
    // left pending, and each reduction ran candidates.
    assert!(
        c["reduction_seconds"].as_f64().unwrap() > 0.0,
        "no reduction after the budget: {c}"
    );
    for a in &alarm_list(&out) {
        assert!(
            a.get("reduction_pending").is_none(),
            "alarm left unreduced: {a}"
        );
        let p = json(
            &out.join("alarms")
                .join(a["id"].as_str().unwrap())
                .join("provenance.json"),
        );
        let r = &p["reduced_test"]["reduction"];
        assert!(
            r["runs"].as_u64().unwrap() > 0 && r.get("pending").is_none(),
            "{p}"
        );
    }
    // Where the time went: the phases account for it, and the system fuzzer (with the
    // crashes it found) had at least about half of it whatever the rest cost.
    let phases = c["phase_seconds"]
        .as_object()
        .expect("phase_seconds in campaign.json");
    let secs = |k: &str| phases.get(k).and_then(Value::as_f64).unwrap_or(0.0);
    let elapsed = c["elapsed"].as_f64().unwrap();
    let counted: f64 = phases.values().filter_map(Value::as_f64).sum();
    assert!(
        counted > 0.9 * elapsed && counted <= elapsed + 1.0,
        "phases {phases:?} vs elapsed {elapsed}"
    );
    let system = secs("system fuzzing") + secs("system crashes (validating)");
    assert!(
        system >= 0.45 * elapsed,
        "the system fuzzer had {system:.0} s of {elapsed:.0} s: {phases:?}"
    );
    assert!(
        secs("unit fuzzing") > 0.0 && secs("recording") > 0.0 && secs("lifting") > 0.0,
        "{phases:?}"
    );

    // The baseline: same budget, system-level fuzzing only.
    let base = b.dir.join("system-only");
    let o = run(&mut trestle(&[
        &"run",
        &"--program",
        &b.harness,
        &"--seeds",
        &seeds(),
        &"--time",
        &"240s",
        &"--out",
        &base,
        &"--validate-with",
        &b.plain,
        &"--system-only",
        &"--plain",
    ]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The baseline is the same system fuzzer at full strength (its dictionary holds
    // the compared constants too): what it finds is real, and it runs no unit.
    for a in &alarm_list(&base) {
        assert!(
            ["store_value", "check_login"].contains(&a["function"].as_str().unwrap()),
            "system-only reported {a}"
        );
    }
    assert_eq!(json(&base.join("campaign.json"))["unit_executions"], 0);

    // The report renders, with both curves.
    ok(&mut trestle(&[&"report", &out, &"--baseline", &base]));
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    // The plot's curves are its wide lines (plotters' SVG; axes and ticks are thin).
    assert_eq!(
        html.lines()
            .filter(|l| l.starts_with("<polyline") && l.contains("stroke-width=\"2\""))
            .count(),
        2,
        "two curves in the plot"
    );
    assert!(
        html.contains("\nsystem only\n</text>"),
        "the baseline in the legend"
    );
    assert!(html.contains("store_value") && html.contains("check_login"));
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("Provenance") && md.contains("reduced"), "{md}");
    let r: Value = serde_json::from_str(&ok(&mut trestle(&[
        &"report",
        &out,
        &"--baseline",
        &base,
        &"--json",
    ])))
    .unwrap();
    assert_eq!(r["alarms"].as_array().unwrap().len(), 2);
    screenshot(&out.join("report.html"), &b.dir.join("report.png"));
    // `trestle report --sarif` writes the same alarms.
    let again = b.dir.join("again.sarif");
    ok(trestle(&[&"report", &out, &"--sarif", &again]).current_dir(repo()));
    let keys = |v: &Value| -> Vec<Value> {
        v["runs"][0]["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["partialFingerprints"].clone())
            .collect()
    };
    assert_eq!(keys(&json(&again)), keys(&json(&sarif)));
}

/// The schema check is no formality: it rejects a log without runs and a result
/// without a message.
#[test]
fn the_sarif_schema_rejects_what_is_not_sarif() {
    let validator = jsonschema::validator_for(&sarif_schema()).expect("the SARIF schema compiles");
    let driver = json!({ "driver": { "name": "trestle" } });
    assert!(validator
        .is_valid(&json!({ "version": "2.1.0", "runs": [{ "tool": driver, "results": [] }] })));
    assert!(!validator.is_valid(&json!({ "version": "2.1.0" })));
    assert!(!validator.is_valid(
        &json!({ "version": "2.1.0", "runs": [{ "tool": driver, "results": [{ "ruleId": "r" }] }] })
    ));
}

/// The SARIF log of the two planted bugs: valid SARIF 2.1.0 (against the OASIS
/// schema), one result per alarm, ruled by the crash kind, located at the crashing
/// line of `requests.c` relative to the checkout, the callers as related locations,
/// and a reproducer that crashes the plain program.
fn check_sarif(log: &Value, plain: &Path) {
    let schema = sarif_schema();
    let validator = jsonschema::validator_for(&schema).expect("the SARIF schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(log)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect();
    assert!(
        errors.is_empty(),
        "not valid SARIF 2.1.0: {errors:#?}\n{log:#}"
    );
    let run0 = &log["runs"][0];
    let rules: Vec<&str> = run0["tool"]["driver"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    let results = run0["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "one result per alarm: {log:#}");
    let source = std::fs::read_to_string(subject("requests").join("requests.c")).unwrap();
    let lines: Vec<&str> = source.lines().collect();
    let mut functions = Vec::new();
    for r in results {
        assert_eq!(r["ruleId"], "SIGSEGV", "{r:#}");
        assert_eq!(rules[r["ruleIndex"].as_u64().unwrap() as usize], "SIGSEGV");
        let loc = &r["locations"][0];
        let artifact = &loc["physicalLocation"]["artifactLocation"];
        assert_eq!(
            artifact["uri"], "tests/subjects/requests/requests.c",
            "{r:#}"
        );
        assert_eq!(artifact["uriBaseId"], "%SRCROOT%");
        let function = loc["logicalLocations"][0]["name"]
            .as_str()
            .unwrap()
            .to_owned();
        // The line is inside the function: the nearest definition above it is its own.
        let line = loc["physicalLocation"]["region"]["startLine"]
            .as_u64()
            .unwrap() as usize;
        assert!(line >= 1 && line <= lines.len(), "{r:#}");
        let definition = lines[..line]
            .iter()
            .rev()
            .find(|l| l.starts_with("static ") || l.starts_with("int ") || l.starts_with("void "))
            .unwrap();
        assert!(
            definition.contains(&format!("{function}(")),
            "line {line} is not in {function}: {definition}"
        );
        assert!(
            !r["relatedLocations"].as_array().unwrap().is_empty(),
            "no caller as a related location: {r:#}"
        );
        let command = r["properties"]["reproducer"]["command"].as_str().unwrap();
        let script = command.strip_prefix("sh ").unwrap();
        let crashed = run(Command::new("sh")
            .arg(script)
            .arg(plain)
            .current_dir(repo()));
        assert_eq!(
            crashed.status.code(),
            Some(139),
            "{command} does not crash the plain program"
        );
        assert!(r["attachments"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["artifactLocation"]["uri"]
                .as_str()
                .unwrap()
                .ends_with("reduced.json")));
        functions.push(function);
    }
    functions.sort();
    assert_eq!(functions, ["check_login", "store_value"]);
}

fn find_chromium() -> Option<PathBuf> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// Render the page in headless Chromium (installed here if missing: the check must
/// not pass by being skipped) and check the screenshot is a real image.
fn screenshot(page: &Path, png: &Path) {
    let chromium = find_chromium().unwrap_or_else(|| {
        let sudo = if unsafe { libc_geteuid() } == 0 { vec![] } else { vec!["sudo"] };
        let install = |args: &[&str]| {
            Command::new(sudo.first().copied().unwrap_or("apt-get"))
                .args(sudo.first().map(|_| "apt-get"))
                .args(args)
                .env("DEBIAN_FRONTEND", "noninteractive")
                .status()
                .is_ok_and(|s| s.success())
        };
        if !install(&["install", "-y", "-qq", "chromium"]) {
            install(&["update", "-qq"]);
            install(&["install", "-y", "-qq", "chromium"]);
        }
        find_chromium().expect("chromium is needed for the report screenshot and could not be installed (apt-get install chromium)")
    });
    let profile = tempfile::tempdir().unwrap();
    let o = run(Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1000,1400",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", page.display())));
    assert!(
        png.exists(),
        "no screenshot: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let bytes = std::fs::read(png).unwrap();
    assert_eq!(&bytes[1..4], b"PNG");
    assert!(
        bytes.len() > 20_000,
        "screenshot suspiciously small ({} bytes)",
        bytes.len()
    );
    if let Ok(keep) = std::env::var("TRESTLE_KEEP_SCREENSHOT") {
        let _ = std::fs::copy(png, keep);
    }
}

#[test]
fn a_changed_function_is_fuzzed_first() {
    // A work tree with the subject at revision A, then a change to describe_word.
    let repo_dir = tempfile::tempdir().unwrap();
    let r = repo_dir.path();
    let src = r.join("requests.c");
    std::fs::copy(subject("requests").join("requests.c"), &src).unwrap();
    let git = |args: &[&str]| {
        ok(Command::new("git")
            .arg("-C")
            .arg(r)
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args))
    };
    git(&["init", "-q"]);
    git(&["add", "requests.c"]);
    git(&["commit", "-qm", "A"]);
    let text = std::fs::read_to_string(&src).unwrap();
    let changed = text.replacen(
        "static void describe_word(const char *w)\n{",
        "static void describe_word(const char *w)\n{\n    if (w[0] == '~') { puts(\"tilde\"); }",
        1,
    );
    assert_ne!(
        changed, text,
        "the subject's describe_word no longer has the expected shape"
    );
    std::fs::write(&src, changed).unwrap();
    let b = builds(&src);
    let out = b.dir.join("changed");
    let o = run(&mut trestle(&[
        &"run",
        &"--program",
        &b.harness,
        &"--seeds",
        &seeds(),
        &"--time",
        &"30s",
        &"--out",
        &out,
        &"--validate-with",
        &b.plain,
        &"--changed-since",
        &"HEAD",
        &"--source",
        &r,
        &"--plain",
        &"--unit-slice",
        &"5s",
    ]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let c = json(&out.join("campaign.json"));
    assert_eq!(
        c["settings"]["changed"],
        serde_json::json!(["describe_word"]),
        "{}",
        c["settings"]
    );
    assert_eq!(
        c["fuzzed"][0]["function"], "describe_word",
        "fuzzed first: {}",
        c["fuzzed"][0]
    );
    // One core: units are fuzzed in-process.
    assert_eq!(c["settings"]["in_process"], true);
    assert!(c["unit_executions"].as_u64().unwrap() > 0);

    // --forkserver: the same campaign through the persistent forkserver harness.
    let fs = b.dir.join("forkserver");
    let o = run(&mut trestle(&[
        &"run",
        &"--program",
        &b.harness,
        &"--seeds",
        &seeds(),
        &"--time",
        &"20s",
        &"--out",
        &fs,
        &"--validate-with",
        &b.plain,
        &"--forkserver",
        &"--plain",
        &"--unit-slice",
        &"5s",
    ]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let c = json(&fs.join("campaign.json"));
    assert_eq!(c["settings"]["in_process"], false);
    assert!(c["unit_executions"].as_u64().unwrap() > 0, "{c}");
}

#[test]
fn a_killed_campaign_resumes_without_losing_alarms_or_units() {
    let b = builds(&subject("requests").join("requests.c"));
    let out = b.dir.join("killed");
    let mut child = trestle(&[
        &"run",
        &"--program",
        &b.harness,
        &"--seeds",
        &seeds(),
        &"--time",
        &"300s",
        &"--out",
        &out,
        &"--validate-with",
        &b.plain,
        &"--plain",
        &"--focus",
        &"store_value",
        &"--unit-slice",
        &"5s",
    ])
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    // Wait for the first alarm and the first fuzzed unit (the system fuzzer may
    // report an alarm before any unit is fuzzed), then kill -9 in the middle of
    // whatever comes next.
    let start = Instant::now();
    let count = |file: &str, key: Option<&str>| {
        std::fs::read(out.join(file))
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .map_or(0, |v| {
                key.map_or(&v, |k| &v[k]).as_array().map_or(0, |a| a.len())
            })
    };
    loop {
        if count("alarms.json", Some("alarms")) > 0 && count("campaign.json", Some("fuzzed")) > 0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(200),
            "no alarm and fuzzed unit within 200 s"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the campaign ended early"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(Duration::from_secs(3));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let alarms_before: Vec<String> = alarm_list(&out)
        .iter()
        .map(|a| a["id"].as_str().unwrap().to_owned())
        .collect();
    // Alarms are published before they are reduced (the fuzzers never wait for a
    // reduction): each is pending, its "reduced" test the one found.
    for a in &alarm_list(&out) {
        let dir = out.join("alarms").join(a["id"].as_str().unwrap());
        assert_eq!(a["reduction_pending"], true, "{a}");
        assert_eq!(
            json(&dir.join("reduced.json")),
            json(&dir.join("lifted.json"))
        );
    }
    let c = json(&out.join("campaign.json"));
    let units_before: Vec<String> = c["fuzzed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["unit"].as_str().unwrap().to_owned())
        .collect();
    let elapsed_before = c["elapsed"].as_f64().unwrap();
    assert!(!units_before.is_empty());

    // Resume; after a while, interrupt it with SIGINT (Ctrl-C) rather than wait for
    // the rest of the budget.
    let resumed = trestle(&[&"run", &"--resume", &out, &"--plain"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(20));
    // SAFETY: signalling our own child.
    unsafe { libc_kill(resumed.id() as i32, 2) };
    let o = resumed.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "resume failed:\n{log}");
    assert!(
        log.contains("--resume"),
        "an interrupted campaign says how to go on:\n{log}"
    );
    assert!(
        log.contains("not reduced yet"),
        "an interrupted campaign says which alarms wait for reduction:\n{log}"
    );
    let after: Vec<String> = alarm_list(&out)
        .iter()
        .map(|a| a["id"].as_str().unwrap().to_owned())
        .collect();
    for a in &alarms_before {
        assert!(after.contains(a), "alarm {a} lost on resume");
        assert!(out.join("alarms").join(a).join("reduced.json").exists());
    }
    let c = json(&out.join("campaign.json"));
    let units_after: Vec<String> = c["fuzzed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["unit"].as_str().unwrap().to_owned())
        .collect();
    for u in &units_before {
        assert!(units_after.contains(u), "unit {u} lost on resume");
        assert!(Path::new(u).exists());
    }
    assert!(c["fuzzed"]
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["lifted"] == true || f == c["fuzzed"].as_array().unwrap().last().unwrap()));
    assert!(
        c["elapsed"].as_f64().unwrap() > elapsed_before,
        "time goes on from where it stopped"
    );
    each_corrupt_file_is_a_one_line_error(&out);
}

/// A campaign over `--max-disk` evicts the corpora of lifted unit slices and the
/// batches of units carved after the seeds', says so (status, summary, report,
/// `campaign.json`), and keeps what a resume, the alarms and the report need: the
/// system queue, every alarm with its reduced test, each fuzzed unit and its crashes.
#[test]
fn a_campaign_over_its_disk_budget_evicts_corpora_and_later_units_but_keeps_the_rest() {
    let b = builds(&subject("requests").join("requests.c"));
    let out = b.dir.join("small-disk");
    // Less than the system queue and the seeds' units need alone (270-500 kB, by how
    // the fuzzing goes): everything that may go goes, and the campaign goes on.
    let o = run(&mut trestle(&[
        &"run",
        &"--program",
        &b.harness,
        &"--seeds",
        &seeds(),
        &"--time",
        &"60s",
        &"--out",
        &out,
        &"--validate-with",
        &b.plain,
        &"--plain",
        &"--unit-slice",
        &"5s",
        &"--system-slice",
        &"5s",
        &"--max-disk",
        &"150K",
    ]));
    let log = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{log}");
    let c = json(&out.join("campaign.json"));
    let d = &c["disk"];
    let fuzzed = c["fuzzed"].as_array().unwrap();
    assert!(
        fuzzed.len() >= 2,
        "a few unit slices in 60 s: {}\n{log}",
        fuzzed.len()
    );
    // Every lifted slice's corpus went, its unit and crashes stayed.
    for f in fuzzed.iter().filter(|f| f["lifted"] == true) {
        let dir = Path::new(f["dir"].as_str().unwrap());
        assert_eq!(f["corpus_evicted"], true, "{f}");
        assert!(
            !dir.join("queue").exists(),
            "{} keeps its corpus",
            dir.display()
        );
        assert!(
            dir.join("unit.unit").is_file() && dir.join("crashes").is_dir(),
            "{} lost its unit or crashes",
            dir.display()
        );
    }
    assert_eq!(
        d["corpora_evicted"].as_u64().unwrap(),
        fuzzed
            .iter()
            .filter(|f| f["corpus_evicted"] == true)
            .count() as u64
    );
    // Every batch but the seeds' went (carved at roadblocks), and nothing fails for it.
    let dirs: Vec<&str> = c["unit_dirs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        Path::new(dirs[0]).join("index.json").is_file(),
        "the seeds' units are kept"
    );
    let evicted: Vec<&str> = d["batches_evicted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(evicted, dirs[1..].to_vec(), "{d}");
    assert!(evicted.iter().all(|e| !Path::new(e).exists()));
    assert!(
        d["bytes_evicted"].as_u64().unwrap() > 0 && d["peak"].as_u64().unwrap() > 150_000,
        "{d}"
    );
    // What may not go alone is over the budget: said once, in one line.
    assert_eq!(d["over"], true, "{d}");
    assert_eq!(log.matches("over --max-disk").count(), 1, "{log}");
    assert!(log.contains("evicted") && log.contains("disk:"), "{log}");
    // The system queue, the alarms and their reduced tests are all there.
    assert!(std::fs::read_dir(out.join("system/queue")).unwrap().count() > 0);
    let alarms = alarm_list(&out);
    assert!(
        !alarms.is_empty(),
        "the planted bugs are found on a small disk too:\n{log}"
    );
    for a in &alarms {
        assert!(
            out.join("alarms")
                .join(a["id"].as_str().unwrap())
                .join("reduced.json")
                .is_file(),
            "{a}"
        );
    }
    ok(&mut trestle(&[&"report", &out]));
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.lines()
            .any(|l| l.starts_with("| disk |") && l.contains("evicted")),
        "{md}"
    );
}

/// What a campaign has found: alarm ids, system queue entries, fuzzed units.
fn found(out: &Path) -> (Vec<String>, Vec<String>, Vec<String>) {
    let alarms = alarm_list(out)
        .iter()
        .map(|a| a["id"].as_str().unwrap().to_owned())
        .collect();
    let queue = std::fs::read_dir(out.join("system/queue")).map_or(Vec::new(), |d| {
        d.flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".json"))
            .collect()
    });
    let units = std::fs::read(out.join("campaign.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .map_or(Vec::new(), |c| {
            c["fuzzed"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f["dir"].as_str().unwrap().to_owned())
                .collect()
        });
    (alarms, queue, units)
}

/// `kill -9` of the campaign in each phase in turn (`TRESTLE_FAULT` kills it from
/// within, at a set moment of the phase), then `--resume`: every alarm, queue entry
/// and fuzzed unit there was before the kill is there after, no file is half
/// written, a unit slice a kill cut short is lifted, and a kill while reducing
/// leaves alarms the resume reduces.
#[test]
fn a_campaign_killed_in_any_phase_resumes_with_all_it_had() {
    use std::os::unix::process::ExitStatusExt as _;
    let b = builds(&subject("requests").join("requests.c"));
    for (phase, ms) in [
        ("recording", 300),
        ("carving", 0),
        ("unit fuzzing", 2000),
        ("lifting", 200),
        ("reducing", 300),
    ] {
        let out = b.dir.join(format!("fault-{}", phase.replace(' ', "-")));
        let o = run(trestle(&[
            &"run",
            &"--program",
            &b.harness,
            &"--seeds",
            &seeds(),
            &"--time",
            &"40s",
            &"--out",
            &out,
            &"--validate-with",
            &b.plain,
            &"--plain",
            &"--unit-slice",
            &"5s",
            &"--system-slice",
            &"5s",
        ])
        .env("TRESTLE_FAULT", format!("{phase}:{ms}")));
        let log = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            o.status.signal(),
            Some(9),
            "{phase}: the campaign was not killed there:\n{log}"
        );
        let (alarms, queue, units) = found(&out);
        assert!(!queue.is_empty(), "{phase}: no queue before the kill");
        if phase == "reducing" {
            assert!(!alarms.is_empty(), "{phase}: nothing to reduce:\n{log}");
        }
        // Go on; stop it with Ctrl-C after a while, unless it ends first.
        let mut resumed = trestle(&[&"run", &"--resume", &out, &"--plain"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while resumed.try_wait().unwrap().is_none() && start.elapsed() < Duration::from_secs(15) {
            std::thread::sleep(Duration::from_millis(200));
        }
        // SAFETY: signalling our own child (or nobody, if it ended).
        unsafe { libc_kill(resumed.id() as i32, 2) };
        let o = resumed.wait_with_output().unwrap();
        let log = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{phase}: the resume failed:\n{log}");
        let (alarms_after, queue_after, units_after) = found(&out);
        for (what, before, after) in [
            ("alarm", &alarms, &alarms_after),
            ("queue entry", &queue, &queue_after),
            ("fuzzed unit", &units, &units_after),
        ] {
            for x in before {
                assert!(after.contains(x), "{phase}: {what} {x} lost on resume");
            }
        }
        let c = json(&out.join("campaign.json"));
        let fuzzed = c["fuzzed"].as_array().unwrap();
        assert!(
            fuzzed.iter().rev().skip(1).all(|f| f["lifted"] == true),
            "{phase}: a unit slice was left unlifted: {c}"
        );
        for a in &alarm_list(&out) {
            let dir = out.join("alarms").join(a["id"].as_str().unwrap());
            for f in ["lifted.json", "reduced.json", "provenance.json"] {
                let text = std::fs::read_to_string(dir.join(f))
                    .unwrap_or_else(|e| panic!("{phase}: {}: {e}", dir.join(f).display()));
                serde_json::from_str::<Value>(&text).unwrap_or_else(|e| {
                    panic!("{phase}: {} is half written: {e}", dir.join(f).display())
                });
            }
        }
        if phase == "reducing" {
            assert!(
                log.contains("reducing the"),
                "{phase}: the resume does not say it reduces:\n{log}"
            );
            assert!(
                alarm_list(&out)
                    .iter()
                    .all(|a| a.get("reduction_pending").is_none()),
                "{phase}: alarms left unreduced"
            );
        }
    }
}

/// A campaign on a file system that fills up (a 600 KB tmpfs, mounted in a user and
/// mount namespace of its own) stops with one line saying so, and once there is room
/// again `--resume` goes on with every alarm and queue entry it had.
#[test]
fn a_full_disk_stops_the_campaign_with_one_line_and_it_resumes_when_there_is_room() {
    let b = builds(&subject("requests").join("requests.c"));
    let mnt = b.dir.join("small");
    std::fs::create_dir(&mnt).unwrap();
    let out = mnt.join("camp");
    let (err1, err2, between) = (
        b.dir.join("first.err"),
        b.dir.join("resumed.err"),
        b.dir.join("between.txt"),
    );
    let trestle = tool("trestle");
    let script = format!(
        "set -u\n\
         mount -t tmpfs -o size=600k none '{mnt}' || exit 90\n\
         '{t}' run --program '{prog}' --seeds '{seeds}' --validate-with '{plain}' --time 60s --out '{out}' --plain --unit-slice 5s --system-slice 5s 2> '{err1}'\n\
         echo \"exit $?\" > '{between}'\n\
         (cd '{out}' && ls alarms system/queue) >> '{between}' 2>/dev/null\n\
         mount -o remount,size=50m '{mnt}' || exit 91\n\
         timeout -s INT 20 '{t}' run --resume '{out}' --plain 2> '{err2}'\n\
         (cd '{out}' && ls alarms system/queue)\n",
        mnt = mnt.display(),
        t = trestle.display(),
        prog = b.harness.display(),
        seeds = seeds().display(),
        plain = b.plain.display(),
        out = out.display(),
        err1 = err1.display(),
        err2 = err2.display(),
        between = between.display(),
    );
    let o = run(Command::new("unshare").args([
        "--user",
        "--map-root-user",
        "--mount",
        "sh",
        "-c",
        &script,
    ]));
    let after = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success() || o.status.code() == Some(124),
        "the namespace script failed ({:?}): {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    let first = std::fs::read_to_string(&err1).unwrap();
    let before = std::fs::read_to_string(&between).unwrap();
    assert!(
        before.starts_with("exit 2\n"),
        "a full disk is an error (status 2): {before}\n{first}"
    );
    // One line says so, and nothing else went wrong on the way (no backtrace, no
    // other error).
    let errors: Vec<&str> = first.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(errors.len(), 1, "{first}");
    assert!(
        errors[0].starts_with("trestle: error: the disk holding") && errors[0].contains("--resume"),
        "{first}"
    );
    assert!(
        !first.contains("Backtrace") && !first.contains("panicked"),
        "{first}"
    );
    // What was there before is there after the resume.
    // (Temporary files of writes the full disk cut short are not entries: they go.)
    for name in before
        .lines()
        .skip(1)
        .filter(|l| !l.is_empty() && !l.ends_with(':') && !l.ends_with(".tmp"))
    {
        assert!(
            after.lines().any(|l| l == name),
            "{name} lost on resume: before {before}, after {after}"
        );
    }
    let resumed = std::fs::read_to_string(&err2).unwrap();
    assert!(
        !resumed.contains("error") && resumed.contains("go on with `trestle run --resume"),
        "the resume failed:\n{resumed}"
    );
}

/// The descendants of `pid`, each with its command line.
fn descendants(pid: u32) -> Vec<(u32, String)> {
    family(pid)
        .into_iter()
        .map(|(p, _, cmd)| (p, cmd))
        .collect()
}

/// The descendants of `pid`, each with its parent and its command line.
fn family(pid: u32) -> Vec<(u32, u32, String)> {
    let mut parent = std::collections::HashMap::new();
    let mut cmdline = std::collections::HashMap::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            continue;
        };
        let Some(pp) = rest.split(' ').nth(1).and_then(|v| v.parse::<u32>().ok()) else {
            continue;
        };
        parent.insert(p, pp);
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        cmdline.insert(p, String::from_utf8_lossy(&cmd).replace('\0', " "));
    }
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        for (c, pp) in &parent {
            if *pp == p {
                out.push((*c, p, cmdline.get(c).cloned().unwrap_or_default()));
                todo.push(*c);
            }
        }
    }
    out
}

/// `kill -9` of the system fuzzer's forkserver (the program under bubblewrap), then
/// of the sandbox around it, in the middle of a campaign: each is started again, and
/// the campaign goes on fuzzing and ends as usual.
#[test]
fn a_killed_forkserver_or_sandbox_is_started_again() {
    let b = builds(&subject("requests").join("requests.c"));
    let out = b.dir.join("forkserver-kill");
    let log_path = b.dir.join("forkserver-kill.log");
    let mut child = trestle(&[
        &"run",
        &"--program",
        &b.harness,
        &"--seeds",
        &seeds(),
        &"--time",
        &"40s",
        &"--out",
        &out,
        &"--validate-with",
        &b.plain,
        &"--plain",
        &"--system-only",
    ])
    .stderr(std::fs::File::create(&log_path).unwrap())
    .spawn()
    .unwrap();
    for (what, pick) in [("forkserver", "the program"), ("sandbox", "bwrap")] {
        let start = Instant::now();
        let victim = loop {
            let procs = descendants(child.id());
            let program = b.harness.to_string_lossy();
            let found = procs.iter().find(|(_, cmd)| {
                let argv0 = cmd.split(' ').next().unwrap_or("");
                if pick == "bwrap" {
                    argv0.ends_with("bwrap") && cmd.contains(program.as_ref())
                } else {
                    argv0 == program
                }
            });
            if let Some((pid, _)) = found {
                break *pid;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "no {what} under the campaign: {procs:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        };
        std::thread::sleep(Duration::from_secs(3));
        // SAFETY: signalling a process of our own.
        unsafe { libc_kill(victim as i32, 9) };
        std::thread::sleep(Duration::from_secs(6));
        assert!(
            child.try_wait().unwrap().is_none(),
            "the campaign ended when its {what} was killed: {}",
            std::fs::read_to_string(&log_path).unwrap()
        );
    }
    // The executions the status lines counted by the last kill, and at the end.
    let execs = |text: &str| -> u64 {
        text.lines()
            .filter_map(|l| l.split("| system ").nth(1)?.split(' ').next()?.parse().ok())
            .max()
            .unwrap_or(0)
    };
    let at_kills = execs(&std::fs::read_to_string(&log_path).unwrap());
    let status = child.wait().unwrap();
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(status.success(), "{log}");
    let c = json(&out.join("campaign.json"));
    assert_eq!(c["finished"], true, "{log}");
    assert!(
        at_kills > 0 && c["system_executions"].as_u64().unwrap() > at_kills,
        "no executions after the kills ({at_kills}): {log}"
    );
}

/// `kill -9` of one of the unit fuzzers `--cores 2` runs (a client of the launcher,
/// with the harness processes it forked), then of the launcher itself, each in a unit
/// round: the round ends with what the rest found, and the campaign goes on fuzzing
/// units and ends as usual with every unit slice lifted.
#[test]
fn a_killed_unit_fuzzing_client_or_launcher_costs_no_more_than_its_round() {
    let b = builds(&subject("requests").join("requests.c"));
    let out = b.dir.join("launcher-kill");
    let log_path = b.dir.join("launcher-kill.log");
    let mut child = trestle(&[
        &"run",
        &"--program",
        &b.harness,
        &"--seeds",
        &seeds(),
        &"--time",
        &"90s",
        &"--out",
        &out,
        &"--validate-with",
        &b.plain,
        &"--plain",
        &"--cores",
        &"2",
        &"--unit-slice",
        &"8s",
        &"--system-slice",
        &"4s",
    ])
    .stderr(std::fs::File::create(&log_path).unwrap())
    .spawn()
    .unwrap();
    let log = || std::fs::read_to_string(&log_path).unwrap();
    let unit_execs = || -> u64 {
        log()
            .lines()
            .filter_map(|l| {
                l.split(" fuzzed (")
                    .nth(1)?
                    .split("), ")
                    .nth(1)?
                    .split(' ')
                    .next()?
                    .parse()
                    .ok()
            })
            .max()
            .unwrap_or(0)
    };
    for what in ["client", "launcher"] {
        let start = Instant::now();
        let victim = loop {
            let procs = family(child.id());
            let launcher = |pid: u32| {
                procs.iter().any(|(p, _, cmd)| {
                    *p == pid
                        && cmd
                            .split(' ')
                            .next()
                            .unwrap_or("")
                            .ends_with("trestle-fuzz-launcher")
                })
            };
            // A client: a launcher process with a harness process below it; the
            // launcher: the one whose parent is the campaign.
            let found = if what == "client" {
                procs
                    .iter()
                    .find(|(_, pp, cmd)| launcher(*pp) && !cmd.contains("trestle-fuzz-launcher"))
                    .map(|(_, pp, _)| *pp)
            } else {
                procs
                    .iter()
                    .find(|(p, pp, _)| launcher(*p) && *pp == child.id())
                    .map(|(p, _, _)| *p)
            };
            if let Some(pid) = found {
                break pid;
            }
            assert!(
                child.try_wait().unwrap().is_none(),
                "the campaign ended before a unit round to kill a {what} in:\n{}",
                log()
            );
            assert!(
                start.elapsed() < Duration::from_secs(50),
                "no unit fuzzing {what} under the campaign: {procs:?}\n{}",
                log()
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        std::thread::sleep(Duration::from_millis(1500));
        // SAFETY: signalling a process of our own.
        unsafe { libc_kill(victim as i32, 9) };
        std::thread::sleep(Duration::from_secs(3));
        assert!(
            child.try_wait().unwrap().is_none(),
            "the campaign ended when a unit fuzzing {what} was killed:\n{}",
            log()
        );
        // Wait for the round to end before looking for the next victim.
        let round = Instant::now();
        while family(child.id())
            .iter()
            .any(|(_, _, cmd)| cmd.contains("trestle-fuzz-launcher"))
            && round.elapsed() < Duration::from_secs(30)
        {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let at_kills = unit_execs();
    let status = child.wait().unwrap();
    let text = log();
    assert!(status.success(), "{text}");
    assert!(!text.contains("panicked"), "{text}");
    let c = json(&out.join("campaign.json"));
    assert_eq!(c["finished"], true, "{text}");
    assert!(
        c["unit_executions"].as_u64().unwrap() > at_kills,
        "no unit executions after the kills ({at_kills}):\n{text}"
    );
    let fuzzed = c["fuzzed"].as_array().unwrap();
    // One slice per kill at least, each lifted.
    assert!(fuzzed.len() >= 2, "unit slices: {fuzzed:?}");
    // Nothing of the killed launcher's is left running (its clients were orphans).
    let mine = out.to_string_lossy().into_owned();
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&mine))
        .collect();
    assert!(left.is_empty(), "left running after the campaign: {left:?}");
    assert!(
        fuzzed.iter().all(|f| f["lifted"] == true),
        "a unit slice was left unlifted: {fuzzed:?}"
    );
}

/// Crashes of a little line reader: `!A` crashes every build, `!B` only builds
/// without `CHECKED`, `!C` only builds without `SHIPPED`, `!D` only builds with
/// `FUZZING_ONLY` (as optimisation or instrumentation can make undefined behaviour
/// crash one build and not another), `!E` every build, the `CHECKED` one with no
/// frames left to read.
const BUILDS_SOURCE: &str = r#"
#include <stdio.h>
#include <string.h>

static volatile int sink;
static volatile size_t overrun = 512;

__attribute__((noinline)) static void everywhere(const char *line) {
    if (line[0] == '!' && line[1] == 'A')
        *(volatile int *)0 = 1;
}

__attribute__((noinline)) static void somewhere(const char *line) {
#ifndef CHECKED
    if (line[0] == '!' && line[1] == 'B')
        *(volatile int *)0 = 2;
#endif
    sink = line[0];
}

__attribute__((noinline)) static void elsewhere(const char *line) {
#ifndef SHIPPED
    if (line[0] == '!' && line[1] == 'C')
        *(volatile int *)0 = 3;
#endif
    sink += line[1];
}

__attribute__((noinline)) static void fuzzing_only(const char *line) {
#ifdef FUZZING_ONLY
    if (line[0] == '!' && line[1] == 'D')
        *(volatile int *)0 = 4;
#endif
    sink += line[0];
}

/* The same crash on every build, but the checked build overruns its stack first and
   faults returning to address 0: no frame to read there. */
__attribute__((noinline)) static void unread(const char *line) {
    if (line[0] == '!' && line[1] == 'E') {
#ifdef CHECKED
        char buf[16];
        memset(buf, 0, overrun);
        sink = buf[3];
        return;
#else
        *(volatile int *)0 = 5;
#endif
    }
    sink += line[1];
}

int main(void) {
    char line[256];
    while (fgets(line, sizeof line, stdin)) {
        everywhere(line);
        somewhere(line);
        elsewhere(line);
        fuzzing_only(line);
        unread(line);
    }
    return 0;
}
"#;

/// Every alarm says on which builds of the program it reproduces: the validation
/// build (`--validate-with`, the build as shipped), the build the fuzzers ran and the
/// coverage build (`--coverage-with`, which decides what is effective). A crash one
/// of them does not have is flagged build-dependent in `alarms.json`, the last lines,
/// the report and SARIF; one all of them have is not. One the shipped build does not
/// have but the coverage build does is reported so flagged, reduced and reproduced on
/// the coverage build; one that only trestle's fuzzing build has is not reported. A
/// crash of the same kind whose stack a build leaves unreadable reproduces there.
#[test]
fn an_alarm_names_the_builds_it_reproduces_on_and_one_some_lack_is_build_dependent() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = d.join("lines.c");
    std::fs::write(&src, BUILDS_SOURCE).unwrap();
    let (fuzzed, plain, cov) = (d.join("lines"), d.join("lines-plain"), d.join("lines-cov"));
    ok(Command::new(tool("trestle-cc"))
        .args(["-O1", "-g", "-DFUZZING_ONLY"])
        .arg(&src)
        .arg("-o")
        .arg(&fuzzed));
    ok(Command::new("clang-19")
        .args(["-O2", "-g", "-DSHIPPED"])
        .arg(&src)
        .arg("-o")
        .arg(&plain));
    ok(Command::new("clang-19")
        .args([
            "-O1",
            "-g",
            "-fprofile-instr-generate",
            "-fcoverage-mapping",
            "-fno-stack-protector",
            "-DCHECKED",
        ])
        .arg(&src)
        .arg("-o")
        .arg(&cov));
    let seeds = d.join("seeds");
    std::fs::create_dir(&seeds).unwrap();
    std::fs::write(seeds.join("hello.json"), r#"{"stdin": "hello\nworld\n"}"#).unwrap();
    // A seed with two bugs: the fuzzing build stops at `fuzzing_only`'s first, so only
    // its reduction (to the `!C` line) reproduces `elsewhere`'s on that build, and the
    // builds are checked again once the alarm is reduced.
    std::fs::write(seeds.join("two.json"), r#"{"stdin": "hello\n!D\n!C\n"}"#).unwrap();
    // A coverage build given where none is expected is refused with one line.
    let o = run(&mut trestle(&[
        &"run",
        &"--program",
        &fuzzed,
        &"--seeds",
        &seeds,
        &"--time",
        &"5s",
        &"--out",
        &d.join("no"),
        &"--coverage-with",
        &plain,
    ]));
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no coverage build"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    let out = d.join("camp");
    let sarif = d.join("alarms.sarif");
    let o = run(&mut trestle(&[
        &"run",
        &"--program",
        &fuzzed,
        &"--seeds",
        &seeds,
        &"--time",
        &"45s",
        &"--out",
        &out,
        &"--validate-with",
        &plain,
        &"--coverage-with",
        &cov,
        &"--system-only",
        &"--plain",
        &"--sarif",
        &sarif,
    ]));
    let log = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{log}");
    let alarms = alarm_list(&out);
    let by_function = |f: &str| {
        alarms
            .iter()
            .find(|a| a["function"] == f)
            .unwrap_or_else(|| panic!("no alarm in {f}: {alarms:?}\n{log}"))
            .clone()
    };
    let role = |a: &Value, r: &str| {
        a["builds"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["role"] == r)
            .unwrap_or_else(|| panic!("no {r} build in {a}"))
            .clone()
    };
    let every = by_function("everywhere");
    for r in ["validation", "fuzzing", "coverage"] {
        assert_eq!(role(&every, r)["reproduces"], true, "{every}");
    }
    let unread = by_function("unread");
    for r in ["validation", "fuzzing", "coverage"] {
        assert_eq!(role(&unread, r)["reproduces"], true, "{unread}");
    }
    assert!(
        role(&unread, "coverage")["ended"]
            .as_str()
            .unwrap()
            .contains("no frames"),
        "{unread}"
    );
    let some = by_function("somewhere");
    assert_eq!(role(&some, "validation")["reproduces"], true, "{some}");
    assert_eq!(role(&some, "fuzzing")["reproduces"], true, "{some}");
    assert_eq!(role(&some, "coverage")["reproduces"], false, "{some}");
    assert!(
        role(&some, "coverage")["ended"]
            .as_str()
            .unwrap()
            .contains("exit"),
        "how it ended there: {some}"
    );
    let away = by_function("elsewhere");
    assert_eq!(role(&away, "validation")["reproduces"], false, "{away}");
    assert!(
        role(&away, "validation")["ended"]
            .as_str()
            .unwrap()
            .contains("exit"),
        "{away}"
    );
    assert_eq!(role(&away, "coverage")["reproduces"], true, "{away}");
    assert_eq!(role(&away, "fuzzing")["reproduces"], true, "{away}");
    let away_dir = out.join("alarms").join(away["id"].as_str().unwrap());
    let script = std::fs::read_to_string(away_dir.join("reproduce.sh")).unwrap();
    assert!(
        script.contains(cov.to_str().unwrap()),
        "reproduced on the coverage build: {script}"
    );
    let r = run(Command::new("sh")
        .arg(away_dir.join("reproduce.sh"))
        .arg(&cov));
    assert_eq!(
        r.status.code(),
        Some(139),
        "the reduced test does not crash the coverage build"
    );
    assert!(
        alarms.iter().all(|a| a["function"] != "fuzzing_only"),
        "a crash of the fuzzing build alone was reported: {alarms:?}"
    );
    // The last lines, the alarm's summary, the report and SARIF say so, for that one only.
    let line = |f: &str| {
        log.lines()
            .find(|l| l.contains(&format!("SIGSEGV in {f}")))
            .unwrap_or_else(|| panic!("no line for {f}:\n{log}"))
            .to_owned()
    };
    assert!(
        line("somewhere").ends_with("[build-dependent: not on the coverage build]"),
        "{log}"
    );
    assert!(
        line("elsewhere").ends_with("[build-dependent: not on the validation build]"),
        "{log}"
    );
    assert!(!line("everywhere").contains("build-dependent"), "{log}");
    assert!(!line("unread").contains("build-dependent"), "{log}");
    let summary = std::fs::read_to_string(
        out.join("alarms")
            .join(some["id"].as_str().unwrap())
            .join("summary.md"),
    )
    .unwrap();
    assert!(
        summary.contains("## Build-dependent") && summary.contains(cov.to_str().unwrap()),
        "{summary}"
    );
    ok(&mut trestle(&[&"report", &out]));
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert_eq!(
        html.matches("Build-dependent").count(),
        2,
        "two alarms flagged in the report"
    );
    let results = json(&sarif)["runs"][0]["results"]
        .as_array()
        .unwrap()
        .clone();
    let flagged: Vec<bool> = results
        .iter()
        .map(|r| r["properties"]["buildDependent"] == true)
        .collect();
    assert_eq!(flagged.iter().filter(|f| **f).count(), 2, "{results:?}");
}

/// Each file of the campaign `camp`, damaged in a copy, makes `report` (or `run
/// --resume`, for what only it reads) fail with status 2 and one line naming the
/// file and, where a field is wrong, the field.
fn each_corrupt_file_is_a_one_line_error(camp: &Path) {
    let alarm = alarm_list(camp)[0]["id"].as_str().unwrap().to_owned();
    let set = |path: &Path, pointer: &str, value: Value| {
        let mut v = json(path);
        *v.pointer_mut(pointer)
            .unwrap_or_else(|| panic!("{pointer} in {}", path.display())) = value;
        std::fs::write(path, serde_json::to_vec(&v).unwrap()).unwrap();
    };
    let cut = |path: &Path| {
        let b = std::fs::read(path).unwrap();
        std::fs::write(path, &b[..b.len() / 2]).unwrap();
    };
    // The campaign names its unit directories by absolute path: a copy still reads the
    // original's, so that one is damaged (and put back afterwards).
    let index = json(&camp.join("campaign.json"))["unit_dirs"][0]
        .as_str()
        .unwrap()
        .to_owned()
        + "/index.json";
    let index_backup = std::fs::read(&index).unwrap();
    type Damage<'a> = Box<dyn Fn(&Path) + 'a>;
    let cases: Vec<(String, Damage, &str, Vec<&str>)> = vec![
        (
            "campaign.json".into(),
            Box::new(|p: &Path| set(p, "/elapsed", json!("soon"))),
            "report",
            vec!["campaign.json", "elapsed"],
        ),
        (
            "campaign.json".into(),
            Box::new(|p: &Path| set(p, "/format", json!(99))),
            "report",
            vec!["campaign.json", "format 99"],
        ),
        (
            "campaign.json".into(),
            Box::new(cut),
            "resume",
            vec!["campaign.json", "not JSON"],
        ),
        (
            "timeline.csv".into(),
            Box::new(|p: &Path| {
                let text = std::fs::read_to_string(p).unwrap();
                let mut lines: Vec<&str> = text.lines().collect();
                assert!(lines.len() > 3, "{text}");
                lines[1] = "not,a,sample";
                std::fs::write(p, lines.join("\n") + "\n").unwrap();
            }),
            "report",
            vec!["timeline.csv", "line 2"],
        ),
        (
            "alarms.json".into(),
            Box::new(|p: &Path| set(p, "/alarms/0/size_reduced", json!("big"))),
            "report",
            vec!["alarms.json", "size_reduced"],
        ),
        (
            "lift.json".into(),
            Box::new(cut),
            "report",
            vec!["lift.json"],
        ),
        (
            format!("alarms/{alarm}/provenance.json"),
            Box::new(|p: &Path| set(p, "/found_by", json!("magic"))),
            "report",
            vec!["provenance.json"],
        ),
        (
            format!("alarms/{alarm}/reduced.json"),
            Box::new(cut),
            "report",
            vec!["reduced.json"],
        ),
        (
            index,
            Box::new(|p: &Path| set(p, "/units", json!(3))),
            "resume",
            vec!["index.json", "units"],
        ),
    ];
    for (k, (file, damage, command, needles)) in cases.into_iter().enumerate() {
        let copy = camp.with_file_name(format!("damaged-{k}"));
        ok(Command::new("cp").arg("-a").arg(camp).arg(&copy));
        // (`file` is relative to the campaign, or absolute.)
        damage(&copy.join(&file));
        let o = match command {
            "report" => run(&mut trestle(&[&"report", &copy, &"--json"])),
            _ => run(&mut trestle(&[&"run", &"--resume", &copy, &"--plain"])),
        };
        let err = String::from_utf8_lossy(&o.stderr);
        let lines: Vec<&str> = err
            .lines()
            .filter(|l| l.starts_with("trestle: error"))
            .collect();
        assert_eq!(o.status.code(), Some(2), "{file} ({command}): {err}");
        assert_eq!(lines.len(), 1, "{file} ({command}): one error line: {err}");
        for n in needles {
            assert!(
                lines[0].contains(n),
                "{file} ({command}): {n:?} not in {:?}",
                lines[0]
            );
        }
        std::fs::remove_dir_all(&copy).unwrap();
        if Path::new(&file).is_absolute() {
            std::fs::write(&file, &index_backup).unwrap();
        }
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

const LOOPS: &str = r#"
#include <stdio.h>

/* check() crashes on a value above 1000, which main never passes it: main loops on
   such a value first. A unit finding of check() lifts to a system test that hangs. */
__attribute__((noinline)) int check(int n) {
    if (n > 1000) { volatile int *p = 0; *p = n; }
    return n + 1;
}

int main(void) {
    int n = 0;
    if (scanf("%d", &n) != 1) return 1;
    if (n > 1000) for (;;) {}
    printf("%d\n", check(n));
    return 0;
}
"#;

/// A lifted test that hangs at system level stops at the campaign's hang limit
/// (`--timeout`), not at the sandbox's five times that limit (which cost dc campaigns
/// most of their lifting time): the false positive it makes names the shorter limit,
/// and it is no crash alarm. The hang itself, which the system fuzzer finds, is one
/// finding: confirmed on the plain build, named by where it spins, reduced.
#[test]
fn a_lifted_test_that_hangs_stops_at_the_hang_limit() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = d.join("loops.c");
    std::fs::write(&src, LOOPS).unwrap();
    let prog = d.join("loops");
    ok(Command::new(tool("trestle-cc"))
        .args(["-O1", "-g"])
        .arg(&src)
        .arg("-o")
        .arg(&prog));
    let plain = d.join("loops-plain");
    ok(Command::new("clang-19")
        .args(["-O1", "-g"])
        .arg(&src)
        .arg("-o")
        .arg(&plain));
    let seeds = d.join("seeds");
    write_test(&seeds, "five", &json!({ "stdin": "5\n" }));
    let out = d.join("camp");
    let o = run(&mut trestle(&[
        &"run",
        &"--program",
        &prog,
        &"--seeds",
        &seeds,
        &"--validate-with",
        &plain,
        &"--time",
        &"40s",
        &"--timeout",
        &"1s",
        &"--focus",
        &"check",
        &"--out",
        &out,
        &"--plain",
        &"--unit-slice",
        &"5s",
    ]));
    let log = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{log}");
    let alarms = alarm_list(&out);
    assert_eq!(alarms.len(), 1, "one finding, the hang: {alarms:?}\n{log}");
    let hang = &alarms[0];
    assert!(
        hang["signature"]
            .as_str()
            .unwrap()
            .starts_with("hang in main"),
        "{hang}"
    );
    assert_eq!(hang["source"], "system");
    let reduced = json(
        &out.join("alarms")
            .join(hang["id"].as_str().unwrap())
            .join("reduced.json"),
    );
    let stdin = reduced["stdin"].as_str().unwrap_or_default();
    assert!(
        stdin.trim().parse::<i64>().is_ok_and(|n| n > 1000) && stdin.len() <= 8,
        "not reduced to the number: {reduced}"
    );
    let summary = std::fs::read_to_string(
        out.join("alarms")
            .join(hang["id"].as_str().unwrap())
            .join("summary.md"),
    )
    .unwrap();
    assert!(
        summary.starts_with("# Hang found by system-level fuzzing"),
        "{summary}"
    );
    assert!(log.contains("hangs: "), "{log}");
    let mut reasons = Vec::new();
    for e in std::fs::read_dir(out.join("false-positives"))
        .expect("no false positive: check()'s crash was not lifted")
    {
        let r = json(&e.unwrap().path().join("reason.json"));
        reasons.push(r["reason"].as_str().unwrap_or_default().to_owned());
    }
    let limited: Vec<&String> = reasons.iter().filter(|r| r.contains("limit")).collect();
    assert!(
        !limited.is_empty(),
        "no lifted test of check() ran into a limit: {reasons:?}"
    );
    for r in limited {
        assert!(
            r.contains("(1s)") || r.contains("(1.0s)"),
            "a lifted test ran past the 1 s hang limit: {r}"
        );
    }
}

/// A program that hangs asleep (input `Z`), never spending the CPU time its limit
/// counts.
const NAP: &str = r#"
#include <stdio.h>
#include <unistd.h>
static __attribute__((noinline)) void nap(void) { for (;;) pause(); }
int main(void) {
  char buf[8] = {0};
  if (fread(buf, 1, 1, stdin) == 1 && buf[0] == 'Z') nap();
  puts("ok");
  return 0;
}
"#;

/// A hang that sleeps or waits on the kernel is stopped by the wall clock, not by its
/// CPU limit; stopped with SIGXCPU first, it is named by where it waits on a
/// validation build served by its forkserver (a `trestle-cc` build, what a campaign
/// validates on without `--validate-with`). Before, it said `hang (no frames)`.
#[test]
fn a_hang_that_sleeps_is_named_by_where_it_waits() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = d.join("nap.c");
    std::fs::write(&src, NAP).unwrap();
    let prog = d.join("nap");
    ok(Command::new(tool("trestle-cc"))
        .args(["-O1", "-g"])
        .arg(&src)
        .arg("-o")
        .arg(&prog));
    let seeds = d.join("seeds");
    write_test(&seeds, "a", &json!({ "stdin": "a" }));
    let out = d.join("camp");
    let o = run(&mut trestle(&[
        &"run",
        &"--system-only",
        &"--program",
        &prog,
        &"--seeds",
        &seeds,
        &"--time",
        &"30s",
        &"--timeout",
        &"1s",
        &"--out",
        &out,
        &"--plain",
    ]));
    let log = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{log}");
    let alarms = alarm_list(&out);
    let hang = alarms
        .iter()
        .find(|a| a["signature"].as_str().unwrap().starts_with("hang"))
        .unwrap_or_else(|| panic!("no hang alarm: {alarms:?}\n{log}"));
    assert!(
        hang["signature"]
            .as_str()
            .unwrap()
            .starts_with("hang in nap"),
        "{hang}"
    );
}

/// A program whose loop (`churn`, on input `H` or `J`) spends its time in two
/// functions it calls by turns: a stack taken at one moment lands in either. It
/// blocks SIGALRM, as a program guarding a critical section might.
const CHURN: &str = r#"
#include <signal.h>
#include <stdio.h>
static volatile unsigned sink;
static __attribute__((noinline)) void mix_a(void) { for (unsigned i = 0; i < 2000000; i++) sink += i * 3; }
static __attribute__((noinline)) void mix_b(void) { for (unsigned i = 0; i < 3000000; i++) sink ^= i + 7; }
static __attribute__((noinline)) void churn(int n) { for (;;) { if (n & 1) mix_a(); else mix_b(); n++; } }
int main(void) {
  char buf[8] = {0};
  sigset_t alarm;
  sigemptyset(&alarm);
  sigaddset(&alarm, SIGALRM);
  sigprocmask(SIG_BLOCK, &alarm, 0);
  if (fread(buf, 1, 1, stdin) == 1 && (buf[0] == 'H' || buf[0] == 'J')) churn(buf[0]);
  puts("ok");
  return 0;
}
"#;

/// A hang is named by where it spins, the frames every stack sampled from it shares
/// (the preload samples it a few times before it ends), not by the function its loop
/// happened to be in when the limit struck: one alarm, `hang in churn`, however many
/// tests reach the loop. Named by its first stack alone, it was `mix_a` or `mix_b`;
/// so it was too when the preload's sampling signal stayed blocked. Confirming it
/// waits for the system fuzzer's first quarter of the budget.
#[test]
fn a_hang_is_named_by_the_loop_every_sample_of_it_is_in() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = d.join("churn.c");
    std::fs::write(&src, CHURN).unwrap();
    let prog = d.join("churn");
    ok(Command::new(tool("trestle-cc"))
        .args(["-O1", "-g"])
        .arg(&src)
        .arg("-o")
        .arg(&prog));
    let plain = d.join("churn-plain");
    ok(Command::new("clang-19")
        .args(["-O1", "-g"])
        .arg(&src)
        .arg("-o")
        .arg(&plain));
    let seeds = d.join("seeds");
    write_test(&seeds, "a", &json!({ "stdin": "a" }));
    let out = d.join("camp");
    let o = run(&mut trestle(&[
        &"run",
        &"--system-only",
        &"--program",
        &prog,
        &"--seeds",
        &seeds,
        &"--validate-with",
        &plain,
        &"--time",
        &"30s",
        &"--timeout",
        &"1s",
        &"--out",
        &out,
        &"--plain",
    ]));
    let log = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{log}");
    let alarms = alarm_list(&out);
    let hangs: Vec<&Value> = alarms
        .iter()
        .filter(|a| a["signature"].as_str().unwrap().starts_with("hang"))
        .collect();
    assert_eq!(
        hangs.len(),
        1,
        "one loop, one hang alarm: {alarms:?}\n{log}"
    );
    assert!(
        hangs[0]["signature"]
            .as_str()
            .unwrap()
            .starts_with("hang in churn"),
        "{}",
        hangs[0]
    );
    // Found in the first seconds, it is confirmed once the system fuzzer has had its
    // first quarter of the budget (or stalled, which takes 10 s of no new edge).
    let at = hangs[0]["found_at"].as_f64().unwrap();
    assert!(
        at >= 7.5,
        "a hang was confirmed at {at:.1} s, in the system fuzzer's first quarter of 30 s"
    );
}

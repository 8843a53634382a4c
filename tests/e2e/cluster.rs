//! A campaign across machines, as separate processes on 127.0.0.1: a main node
//! (`trestle run --listen --delegate`, so every find is a worker's) and two workers
//! (`trestle join`, one of them on two cores). Every node reports executions, a worker's bug is reported by the
//! main node as a true alarm naming the worker, a worker killed with SIGKILL loses
//! none of what it had sent, a worker with another build or without the campaign's
//! key (and random bytes sent to the port) is refused on both sides, and
//! a worker whose main node goes away stops with a message.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};
use trestle_tests::*;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn spawn(args: &[&dyn AsRef<std::ffi::OsStr>], log: &Path) -> Child {
    let f = std::fs::File::create(log).unwrap();
    trestle(args)
        .stdout(Stdio::null())
        .stderr(f)
        .spawn()
        .unwrap()
}

fn names(dir: &Path) -> Vec<String> {
    match std::fs::read_dir(dir) {
        Ok(d) => d
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with('.'))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// The queue entries a worker's `sent.log` lists as sent at least `age` before `at`.
fn sent_before(log: &Path, at: SystemTime, age: Duration) -> Vec<String> {
    let at = at
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        - age.as_secs_f64();
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut v = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() == 3 && f[1] == "queue" && f[0].parse::<f64>().unwrap() < at {
            v.push(f[2].to_owned());
        }
    }
    v
}

struct Subject {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    program: PathBuf,
    plain: PathBuf,
}

fn requests() -> Subject {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_owned();
    let src = subject("requests").join("requests.c");
    let program = d.join("requests");
    ok(Command::new(tool("trestle-cc"))
        .args(["-O2", "-g"])
        .arg(&src)
        .arg("-o")
        .arg(&program));
    let plain = d.join("requests-plain");
    ok(Command::new("clang-19")
        .args(["-O2", "-g"])
        .arg(&src)
        .arg("-o")
        .arg(&plain));
    Subject {
        _dir: dir,
        dir: d,
        program,
        plain,
    }
}

#[test]
fn a_main_node_and_two_workers_report_the_workers_bug_and_lose_nothing_to_a_kill() {
    let s = requests();
    let addr = format!("127.0.0.1:{}", free_port());
    let camp = s.dir.join("camp");
    let seeds = subject("requests").join("seeds");
    let mut main = spawn(
        &[
            &"run",
            &"--program",
            &s.program,
            &"--seeds",
            &seeds,
            &"--validate-with",
            &s.plain,
            &"--time",
            &"150s",
            &"--out",
            &camp,
            &"--plain",
            &"--no-pin",
            &"--listen",
            &addr,
            &"--delegate",
            &"--key",
            &s.dir.join("cluster.key"),
        ],
        &s.dir.join("main.log"),
    );
    std::thread::sleep(Duration::from_secs(2));
    let (wa, wb) = (s.dir.join("wa"), s.dir.join("wb"));
    // a works on two cores: two single-core workers, a-c1 and a-c2.
    let mut a = spawn(
        &[
            &"join",
            &addr,
            &"--key",
            &s.dir.join("cluster.key"),
            &"--program",
            &s.program,
            &"--name",
            &"a",
            &"--cores",
            &"2",
            &"--out",
            &wa,
        ],
        &s.dir.join("a.log"),
    );
    let mut b = spawn(
        &[
            &"join",
            &addr,
            &"--key",
            &s.dir.join("cluster.key"),
            &"--program",
            &s.program,
            &"--name",
            &"b",
            &"--out",
            &wb,
        ],
        &s.dir.join("b.log"),
    );

    // Another build of the program is turned away, in one line on both sides.
    let other = s.dir.join("requests-o1");
    ok(Command::new(tool("trestle-cc"))
        .args(["-O1", "-g"])
        .arg(subject("requests").join("requests.c"))
        .arg("-o")
        .arg(&other));
    let refused = run(&mut trestle(&[
        &"join",
        &addr,
        &"--key",
        &s.dir.join("cluster.key"),
        &"--program",
        &other,
        &"--name",
        &"other",
    ]));
    let why = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{why}");
    assert!(
        why.trim().lines().count() == 1 && why.contains("another build"),
        "{why}"
    );

    // A worker without the campaign's key is refused before any message, in one line
    // on both sides; so are random bytes sent to the port.
    let wrong = s.dir.join("wrong.key");
    std::fs::write(&wrong, format!("{}\n", "ab".repeat(32))).unwrap();
    let refused = run(&mut trestle(&[
        &"join",
        &addr,
        &"--key",
        &wrong,
        &"--program",
        &s.program,
        &"--name",
        &"intruder",
    ]));
    let why = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{why}");
    assert!(
        why.trim().lines().count() == 1
            && why.contains("refused this worker")
            && why.contains("--key"),
        "{why}"
    );
    {
        use std::io::{Read as _, Write as _};
        let mut t = std::net::TcpStream::connect(&addr).unwrap();
        let mut hello = [0u8; 40];
        t.read_exact(&mut hello).unwrap();
        t.write_all(&[0xa5u8; 72]).unwrap();
        let mut answer = Vec::new();
        let _ = t.read_to_end(&mut answer);
        assert_eq!(answer, b"REFUSED!", "random bytes are refused");
    }

    // Once worker b has sent queue entries for a while, kill it.
    let sent_by_b = camp.join("nodes").join("b").join("queue");
    let t = Instant::now();
    while names(&sent_by_b).len() < 3 && t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(Duration::from_secs(10));
    b.kill().unwrap();
    let killed_at = SystemTime::now();
    b.wait().unwrap();
    // What b wrote to its queue well before the kill (the way from broker to broker
    // takes a few seconds), the main node has.
    let had = sent_before(&wb.join("sent.log"), killed_at, Duration::from_secs(8));
    assert!(
        !had.is_empty(),
        "worker b found nothing to send in its time"
    );

    let status = main.wait().unwrap();
    let log = std::fs::read_to_string(s.dir.join("main.log")).unwrap();
    assert!(status.success(), "main node: {log}");
    assert!(log.contains("refused worker other"), "{log}");
    assert_eq!(
        log.matches("refused a connection from").count(),
        2,
        "the wrong key and the random bytes, one line each: {log}"
    );
    assert!(
        log.contains("its key is not this campaign's") && !log.contains("intruder joined"),
        "{log}"
    );
    let a_status = a.wait().unwrap();
    let a_log = std::fs::read_to_string(s.dir.join("a.log")).unwrap();
    assert!(
        a_status.success() && a_log.contains("the campaign is over"),
        "worker a: {a_log}"
    );
    for w in ["a-c1", "a-c2"] {
        assert!(
            a_log.contains(&format!("{w} stopped (the campaign is over")),
            "worker {w}: {a_log}"
        );
    }

    let got = names(&sent_by_b);
    let lost: Vec<&String> = had.iter().filter(|n| !got.contains(n)).collect();
    assert!(
        lost.is_empty(),
        "the kill lost {} of b's {} sent queue entries: {lost:?}",
        lost.len(),
        had.len()
    );

    // Every node reports executions; the alarms are the workers', true, and named.
    let report: Value =
        serde_json::from_str(&ok(&mut trestle(&[&"report", &camp, &"--json"]))).unwrap();
    let nodes = report["nodes"].as_array().unwrap();
    let mut node_names: Vec<&str> = nodes.iter().map(|n| n["name"].as_str().unwrap()).collect();
    assert_eq!(node_names[0], "main", "{nodes:?}");
    node_names.sort();
    assert_eq!(node_names, ["a-c1", "a-c2", "b", "main"], "{nodes:?}");
    for n in nodes {
        assert!(
            n["execs"].as_u64().unwrap() > 0,
            "a node without executions: {n}"
        );
    }
    let alarms = alarm_list(&camp);
    assert!(
        !alarms.is_empty(),
        "no alarm in 150 s from two workers: {log}"
    );
    for al in &alarms {
        let on = al["found_on"].as_str().unwrap_or_else(|| {
            panic!("an alarm of a campaign that only workers fuzzed names no worker: {al}")
        });
        assert!(["a-c1", "a-c2", "b"].contains(&on), "{al}");
        let script = camp
            .join("alarms")
            .join(al["id"].as_str().unwrap())
            .join("reproduce.sh");
        let r = run(Command::new("sh").arg(&script).arg(&s.plain));
        assert_eq!(
            r.status.code(),
            Some(139),
            "{} does not crash the plain program",
            script.display()
        );
    }
    ok(&mut trestle(&[&"report", &camp]));
    let md = std::fs::read_to_string(camp.join("report.md")).unwrap();
    assert!(
        md.contains("## Nodes") && md.contains("| `a-c1` |") && md.contains("| `a-c2` |"),
        "{md}"
    );
}

#[test]
fn a_worker_whose_main_node_goes_away_stops_with_a_message() {
    let s = requests();
    let addr = format!("127.0.0.1:{}", free_port());
    let seeds = subject("requests").join("seeds");
    let mut main = spawn(
        &[
            &"run",
            &"--program",
            &s.program,
            &"--seeds",
            &seeds,
            &"--validate-with",
            &s.plain,
            &"--time",
            &"300s",
            &"--out",
            &s.dir.join("camp"),
            &"--plain",
            &"--no-pin",
            &"--listen",
            &addr,
            &"--delegate",
            &"--key",
            &s.dir.join("cluster.key"),
        ],
        &s.dir.join("main.log"),
    );
    std::thread::sleep(Duration::from_secs(2));
    let log = s.dir.join("w.log");
    let mut w = spawn(
        &[
            &"join",
            &addr,
            &"--key",
            &s.dir.join("cluster.key"),
            &"--program",
            &s.program,
            &"--name",
            &"w",
        ],
        &log,
    );
    let t = Instant::now();
    while !std::fs::read_to_string(&log).unwrap().contains("joined")
        && t.elapsed() < Duration::from_secs(60)
    {
        std::thread::sleep(Duration::from_millis(200));
    }
    main.kill().unwrap();
    main.wait().unwrap();
    let killed = Instant::now();
    let status = w.wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        killed.elapsed() < Duration::from_secs(60),
        "the worker went on for {:?}: {text}",
        killed.elapsed()
    );
    assert!(status.success(), "{text}");
    assert!(text.contains("went away"), "{text}");
}

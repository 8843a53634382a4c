//! `trestle capture`: system tests from a test suite a project already has.
//!
//! The command (`make check`, a test script, a CI job) runs with capturing on in its
//! environment; every process of a program built with `trestle-cc` that it starts
//! leaves a raw record ([`record`]; the runtime's side is `runtime/src/capture.rs`).
//! Afterwards each record becomes a system test with what the program did as its
//! expectation, identical tests are kept once, and each is run once through the
//! executor: a test that does not end the same way outside the suite (exit status,
//! stdout) is flagged with what differs and the likely cause. With `--max`, the tests
//! kept are the most diverse by the edges each covered in that run.

pub mod record;

use anyhow::{bail, Context as _, Result};
use libafl_bolts::shmem::{ShMem, ShMemProvider, UnixShMemProvider};
use record::{Captured, Record, Unusable};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use trestle_abi::capture::{ENV_CAPTURE_DIR, ENV_CAPTURE_MAX_INPUT};
use trestle_abi::hooks;
use trestle_exec::sandbox::{cpu_limit, Limits, Sandbox};
use trestle_exec::signature::FrameFilter;
use trestle_exec::systest::JsonTest;

/// Version of `capture.json`.
pub const SUMMARY_FORMAT: u32 = 1;
/// The summary's file in the output directory.
pub const SUMMARY_FILE: &str = "capture.json";
/// Where the records go while the command runs.
const RAW_DIR: &str = ".raw";

/// Options of `trestle capture`.
#[derive(Debug, Clone)]
pub struct Options {
    /// Output directory: one folder of tests per program, and `capture.json`.
    pub out: PathBuf,
    /// The command to run, and its arguments.
    pub command: Vec<String>,
    /// Keep at most this many tests per program (the most diverse by coverage).
    pub max_tests: Option<usize>,
    /// Bytes kept at most of any one input or output.
    pub max_input: u64,
    /// Wall-clock limit for each test's check run.
    pub timeout: Duration,
    /// Keep the raw records (`.raw/`) afterwards.
    pub keep_raw: bool,
    /// Print progress on stderr.
    pub progress: bool,
}

/// One test written.
#[derive(Debug, Clone, Serialize)]
pub struct TestSummary {
    /// Its file, relative to the output directory.
    pub file: String,
    /// Runs of the suite that were this same test.
    pub runs: usize,
    /// It ended the same way through trestle's executor (exit status, stdout).
    pub faithful: bool,
    /// What differed, if it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub differs: Option<String>,
    /// What of the run the test does not hold (likely causes of a difference).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Edges it covered in the check run.
    pub edges: usize,
    /// Started by the same program (its run is also inside its parent's test).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub started_by_itself: bool,
}

/// One program's tests.
#[derive(Debug, Clone, Serialize)]
pub struct ProgramSummary {
    /// Its folder in the output directory.
    pub name: String,
    /// Its executable.
    pub program: PathBuf,
    /// Processes of it captured.
    pub processes: usize,
    /// Different tests among them.
    pub unique: usize,
    /// Tests written.
    pub written: usize,
    /// Different tests left out by `--max`.
    pub left_out: usize,
    /// Written tests that replay the same way.
    pub faithful: usize,
    /// Written tests whose stdout went to a terminal or a device: only their exit
    /// status is compared.
    pub status_only: usize,
    /// Processes whose run cannot be written as a test, by why.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub not_tests: BTreeMap<String, usize>,
    /// Written tests that do not replay the same way, by what differs.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub unfaithful: BTreeMap<String, usize>,
    /// Edges the written tests cover together.
    pub edges: usize,
    /// Every test written.
    pub tests: Vec<TestSummary>,
}

/// What `trestle capture` did.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// [`SUMMARY_FORMAT`].
    pub format: u32,
    /// The command run.
    pub command: Vec<String>,
    /// How it ended (`exit 0`, `signal 9`).
    pub command_status: String,
    /// Seconds the command ran.
    pub command_seconds: f64,
    /// Records the runtime left.
    pub processes: usize,
    /// Processes killed before they ended (no test).
    pub unfinished: usize,
    /// Programs whose runtime writes another record layout, with its version.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub other_format: BTreeMap<String, String>,
    /// Per program.
    pub programs: Vec<ProgramSummary>,
}

/// Run `trestle capture`.
pub fn run(opts: &Options) -> Result<Summary> {
    if opts.command.is_empty() {
        bail!("no command to capture (give it after --)");
    }
    prepare_out(&opts.out)?;
    let raw = opts.out.join(RAW_DIR);
    std::fs::create_dir_all(&raw).with_context(|| format!("cannot create {}", raw.display()))?;
    let raw = std::fs::canonicalize(&raw)?;
    let (command_status, command_seconds) = match run_command(opts, &raw) {
        Ok(r) => r,
        Err(e) => {
            // Nothing ran: leave no half-made capture behind.
            let _ = std::fs::remove_dir_all(&raw);
            return Err(e);
        }
    };
    let mut summary = Summary {
        format: SUMMARY_FORMAT,
        command: opts.command.clone(),
        command_status,
        command_seconds,
        processes: 0,
        unfinished: 0,
        other_format: BTreeMap::new(),
        programs: Vec::new(),
    };
    let records = read_records(&raw, &mut summary)?;
    let mut by_program: BTreeMap<PathBuf, Vec<Record>> = BTreeMap::new();
    for r in records {
        by_program.entry(r.exe.clone()).or_default().push(r);
    }
    let mut names: HashSet<String> = HashSet::new();
    for (exe, records) in by_program {
        let base = exe
            .file_name()
            .map_or("program".into(), |n| n.to_string_lossy().into_owned());
        let mut name = base.clone();
        let mut n = 2;
        while !names.insert(name.clone()) {
            name = format!("{base}-{n}");
            n += 1;
        }
        let p = capture_program(opts, &name, &exe, &records)?;
        summary.programs.push(p);
    }
    let text = serde_json::to_vec_pretty(&summary)?;
    let file = opts.out.join(SUMMARY_FILE);
    std::fs::write(&file, text).with_context(|| format!("cannot write {}", file.display()))?;
    if !opts.keep_raw {
        let _ = std::fs::remove_dir_all(&raw);
    }
    Ok(summary)
}

/// The output directory must be new or empty: a capture never mixes with another.
fn prepare_out(out: &Path) -> Result<()> {
    if out.exists() {
        let mut entries = std::fs::read_dir(out)
            .with_context(|| format!("--out {} is not a directory", out.display()))?;
        if entries.next().is_some() {
            bail!(
                "--out {} is not empty; give a new directory (nothing there was touched)",
                out.display()
            );
        }
    }
    std::fs::create_dir_all(out).with_context(|| format!("cannot create --out {}", out.display()))
}

/// Run the command with capturing on: how it ended, and how long it took.
fn run_command(opts: &Options, raw: &Path) -> Result<(String, f64)> {
    let start = Instant::now();
    let mut child = std::process::Command::new(&opts.command[0])
        .args(&opts.command[1..])
        .env(ENV_CAPTURE_DIR, raw)
        .env(ENV_CAPTURE_MAX_INPUT, opts.max_input.to_string())
        .spawn()
        .with_context(|| format!("cannot start the command {:?}", opts.command[0]))?;
    let mut last_shown = 0;
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        std::thread::sleep(Duration::from_millis(200));
        if opts.progress && start.elapsed().as_secs() >= last_shown + 10 {
            last_shown = start.elapsed().as_secs();
            let n = std::fs::read_dir(raw).map(|d| d.count()).unwrap_or(0);
            log::info!("capture: {n} process(es) of instrumented programs so far ({last_shown} s)");
        }
    };
    let ended = match (
        status.code(),
        std::os::unix::process::ExitStatusExt::signal(&status),
    ) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => "unknown".into(),
    };
    if opts.progress && !status.success() {
        log::info!(
            "capture: the command ended with {ended}; the tests it ran are captured all the same"
        );
    }
    Ok((ended, start.elapsed().as_secs_f64()))
}

/// The finished records, in the order their processes started.
fn read_records(raw: &Path, summary: &mut Summary) -> Result<Vec<Record>> {
    let mut dirs: Vec<(u128, PathBuf)> = Vec::new();
    for e in std::fs::read_dir(raw).with_context(|| format!("cannot list {}", raw.display()))? {
        let p = e?.path();
        let started = p
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.split_once('-'))
            .and_then(|(_, t)| t.parse().ok())
            .unwrap_or(0);
        dirs.push((started, p));
    }
    dirs.sort();
    summary.processes = dirs.len();
    let mut out = Vec::new();
    for (_, d) in dirs {
        match record::read_record(&d)? {
            Ok(r) => out.push(r),
            Err(Unusable::Unfinished) => summary.unfinished += 1,
            Err(Unusable::OtherFormat(format, version)) => {
                let exe = std::fs::read(d.join(trestle_abi::capture::EXE))
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .unwrap_or_default();
                summary
                    .other_format
                    .insert(exe, format!("trestle {version}, record format {format}"));
            }
        }
    }
    Ok(out)
}

/// The test's identity: everything but the expectation.
fn identity(t: &JsonTest) -> String {
    let mut bare = t.clone();
    bare.expect = None;
    serde_json::to_string(&bare).expect("a test serialises")
}

/// One program's records into tests under `out/name`.
fn capture_program(
    opts: &Options,
    name: &str,
    exe: &Path,
    records: &[Record],
) -> Result<ProgramSummary> {
    let mut summary = ProgramSummary {
        name: name.to_owned(),
        program: exe.to_owned(),
        processes: records.len(),
        unique: 0,
        written: 0,
        left_out: 0,
        faithful: 0,
        status_only: 0,
        not_tests: BTreeMap::new(),
        unfaithful: BTreeMap::new(),
        edges: 0,
        tests: Vec::new(),
    };
    // Unique tests in the order first seen, with how often each ran.
    let mut unique: Vec<(Captured, usize, bool)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for r in records {
        match record::to_test(r) {
            Ok(c) => {
                let key = identity(&c.test);
                match index.get(&key) {
                    Some(&i) => unique[i].1 += 1,
                    None => {
                        index.insert(key, unique.len());
                        unique.push((c, 1, r.parent_exe == r.exe));
                    }
                }
            }
            Err(e) => *summary.not_tests.entry(format!("{e:#}")).or_default() += 1,
        }
    }
    summary.unique = unique.len();
    if opts.progress {
        log::info!("capture: {name}: {} process(es), {} different test(s); checking each outside the suite", records.len(), unique.len());
    }
    let checks = check_all(opts, exe, &unique)?;
    let chosen = choose(&checks, opts.max_tests);
    summary.left_out = unique.len() - chosen.len();
    let dir = opts.out.join(name);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut covered: HashSet<u32> = HashSet::new();
    for (n, &i) in chosen.iter().enumerate() {
        let (c, runs, by_itself) = &unique[i];
        let check = &checks[i];
        let file = format!("{name}/{name}-{:04}.json", n + 1);
        let path = opts.out.join(&file);
        std::fs::write(&path, serde_json::to_vec_pretty(&c.test)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
        covered.extend(check.edges.iter().copied());
        summary.status_only +=
            usize::from(c.test.expect.as_ref().is_some_and(|e| e.stdout.is_none()));
        match &check.differs {
            None => summary.faithful += 1,
            Some(d) => *summary.unfaithful.entry(d.class.clone()).or_default() += 1,
        }
        summary.tests.push(TestSummary {
            file,
            runs: *runs,
            faithful: check.differs.is_none(),
            differs: check.differs.as_ref().map(|d| d.text.clone()),
            notes: c.notes.clone(),
            edges: check.edges.len(),
            started_by_itself: *by_itself,
        });
    }
    summary.written = chosen.len();
    summary.edges = covered.len();
    Ok(summary)
}

/// What a test's check run showed.
struct Check {
    /// What differed from the captured run: a class to count by and the details.
    differs: Option<Difference>,
    /// Edges covered.
    edges: Vec<u32>,
}

struct Difference {
    class: String,
    text: String,
    /// What differs ("exit status", "stdout"), when no capture note explains it.
    unexplained: Option<&'static str>,
}

/// How long a test's second replay waits after its first: programs that print the
/// time print it in seconds (a gzip header's modification time).
const RERUN_AFTER: Duration = Duration::from_millis(1100);

/// What a replay showed that two replays of a deterministic test share.
fn outcome(run: &trestle_exec::sandbox::SandboxRun) -> (String, u64, u64, String) {
    (
        run.status.to_string(),
        run.stdout_bytes,
        run.stderr_bytes,
        record::sha256_hex(&run.stdout),
    )
}

/// Run every test once through the executor, with an edge map.
fn check_all(opts: &Options, exe: &Path, tests: &[(Captured, usize, bool)]) -> Result<Vec<Check>> {
    let map_size = trestle_unit_fuzz::MAP_SIZE;
    let mut provider = UnixShMemProvider::new()
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("cannot use shared memory")?;
    let mut map = provider
        .new_shmem(map_size)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("cannot create the edge map")?;
    let env = vec![
        (hooks::ENV_AFL_SHM_ID.to_string(), map.id().to_string()),
        (hooks::ENV_AFL_MAP_SIZE.to_string(), map_size.to_string()),
    ];
    let limits = Limits {
        wall: opts.timeout,
        cpu_secs: cpu_limit(opts.timeout),
        ..Limits::default()
    };
    // Spawned, not served: the check is of the test as any run of it would go.
    let sandbox = Sandbox::new(limits, false)?.without_forkserver();
    let filter = FrameFilter {
        program: Some(exe.to_owned()),
        stop_after: None,
    };
    let mut out = Vec::with_capacity(tests.len());
    // (test, when its replay ran, what it showed) for each difference no note explains.
    let mut unexplained = Vec::new();
    let started = Instant::now();
    let mut last_shown = 0;
    for (i, (c, _, _)) in tests.iter().enumerate() {
        if opts.progress && started.elapsed().as_secs() >= last_shown + 10 {
            last_shown = started.elapsed().as_secs();
            log::info!("capture: checked {i} of {} test(s)", tests.len());
        }
        let test = trestle_exec::systest::from_json(&c.test)?;
        map.fill(0);
        let run = sandbox.run(exe, &test, &env, &filter, None);
        let edges: Vec<u32> = map
            .iter()
            .enumerate()
            .filter(|(_, &b)| b != 0)
            .map(|(i, _)| i as u32)
            .collect();
        let ran_at = Instant::now();
        let differs = match run {
            Ok(run) => {
                // A program that prints its own name prints its path when the executor
                // runs it, the name the suite used when the suite did.
                let mut notes = c.notes.clone();
                let path = exe.to_string_lossy();
                let shows_path = |b: &[u8]| String::from_utf8_lossy(b).contains(path.as_ref());
                if c.name != path && (shows_path(&run.stdout) || shows_path(&run.stderr)) {
                    notes.push(format!(
                        "it prints its own name: {} in the suite, its path here",
                        c.name
                    ));
                }
                let differs = compare(&c.test, &run, &notes);
                if differs.as_ref().is_some_and(|d| d.unexplained.is_some()) {
                    unexplained.push((i, ran_at, outcome(&run)));
                }
                differs
            }
            Err(e) => Some(Difference {
                class: "could not be run".into(),
                text: format!("{e:#}"),
                unexplained: None,
            }),
        };
        out.push(Check { differs, edges });
    }
    // A difference nothing explains: replay the test once more, a second later; if
    // the two replays differ as well, the program's output is not a function of its
    // input (it prints the time, a random number, an address).
    for (i, first_at, first) in unexplained {
        std::thread::sleep(RERUN_AFTER.saturating_sub(first_at.elapsed()));
        let test = trestle_exec::systest::from_json(&tests[i].0.test)?;
        let Ok(again) = sandbox.run(exe, &test, &env, &filter, None) else {
            continue;
        };
        if outcome(&again) != first {
            if let Some(d) = &mut out[i].differs {
                let what = d.unexplained.unwrap_or("output");
                d.class =
                    format!("{what} differs: it changes from run to run (the time, randomness)");
                d.text.push_str(" (two replays a second apart differ too)");
            }
        }
    }
    Ok(out)
}

/// A short name for the likely cause a note gives, to count differences by.
fn cause(note: &str) -> &'static str {
    const CAUSES: [(&str, &str); 6] = [
        ("stopped from outside", "the suite stopped it with a signal"),
        ("prints its own name", "the program prints its own name"),
        ("FIFO or socket", "it reads a FIFO or socket"),
        (" cut at ", "an input was cut"),
        ("symbolic link", "it opens a symbolic link"),
        ("was a terminal", "stdin was a terminal"),
    ];
    CAUSES
        .iter()
        .find(|(k, _)| note.contains(k))
        .map_or("other", |(_, c)| c)
}

/// What differs between the captured run and this one (exit status, stdout).
fn compare(
    t: &JsonTest,
    run: &trestle_exec::sandbox::SandboxRun,
    notes: &[String],
) -> Option<Difference> {
    let expect = t.expect.as_ref()?;
    let because = if notes.is_empty() {
        String::new()
    } else {
        format!(" ({})", notes.join("; "))
    };
    let differs = |what: &'static str, text: String| {
        let why = notes.first().map_or("cause unknown", |n| cause(n));
        Some(Difference {
            class: format!("{what} differs: {why}"),
            text: format!("{text}{because}"),
            unexplained: notes.is_empty().then_some(what),
        })
    };
    let status = run.status.to_string();
    if status != expect.status {
        return differs(
            "exit status",
            format!("captured {}, replayed {status}", expect.status),
        );
    }
    let out = expect.stdout.as_ref()?;
    let bytes = if expect.merged {
        run.stdout_bytes + run.stderr_bytes
    } else {
        run.stdout_bytes
    };
    if bytes != out.bytes {
        return differs(
            "stdout",
            format!("captured {} bytes of stdout, replayed {bytes}", out.bytes),
        );
    }
    // The executor keeps the end of stdout: whole when it is short.
    if !expect.merged && bytes == run.stdout.len() as u64 {
        if let Some(sha) = &out.sha256 {
            if *sha != record::sha256_hex(&run.stdout) {
                return differs("stdout", "stdout has the same length, other bytes".into());
            }
        }
    }
    None
}

/// The tests to write, in capture order: all of them, or `max` chosen greedily by the
/// edges each adds to those chosen before (then by how many it covers).
fn choose(checks: &[Check], max: Option<usize>) -> Vec<usize> {
    let Some(max) = max.filter(|&m| m < checks.len()) else {
        return (0..checks.len()).collect();
    };
    let mut covered: HashSet<u32> = HashSet::new();
    let mut left: Vec<usize> = (0..checks.len()).collect();
    let mut chosen = Vec::new();
    while chosen.len() < max && !left.is_empty() {
        let best = left
            .iter()
            .enumerate()
            .max_by_key(|(_, &i)| {
                let new = checks[i]
                    .edges
                    .iter()
                    .filter(|e| !covered.contains(e))
                    .count();
                // Faithful tests first among equals, then the earlier one.
                (
                    new,
                    checks[i].edges.len(),
                    checks[i].differs.is_none(),
                    std::cmp::Reverse(i),
                )
            })
            .map(|(pos, _)| pos)
            .expect("not empty");
        let i = left.swap_remove(best);
        covered.extend(checks[i].edges.iter().copied());
        chosen.push(i);
    }
    chosen.sort_unstable();
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(edges: &[u32]) -> Check {
        Check {
            differs: None,
            edges: edges.to_vec(),
        }
    }

    #[test]
    fn max_keeps_the_tests_that_add_the_most_coverage() {
        let checks = [check(&[1, 2]), check(&[1, 2, 3]), check(&[7]), check(&[1])];
        assert_eq!(choose(&checks, Some(2)), vec![1, 2]);
        assert_eq!(choose(&checks, None), vec![0, 1, 2, 3]);
        assert_eq!(choose(&checks, Some(9)), vec![0, 1, 2, 3]);
    }
}

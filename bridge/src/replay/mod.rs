//! `trestle replay`: run carved units in fresh processes and check them against what
//! the system run recorded.

mod layouts;

use crate::carve::units::{read_unit, unit_files};
use anyhow::{Context as _, Result};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use trestle_abi::context::{
    diff_graphs, diff_outcomes_after, diff_outcomes_named, GlobalNames, Unstable,
};
use trestle_abi::hooks;
use trestle_abi::trace::ReplayResult;
use trestle_abi::unit::Unit;
use trestle_abi::Outcome;
use trestle_exec::binary::Binary;
use trestle_exec::forkserver::{test_argv_env, ForkServer, Request, RunEnd};
use trestle_exec::launch::{no_randomization_for_children, run_test, RunOptions};
use trestle_exec::systest::{scratch_dir, RunStatus};

/// What `trestle replay` replays and how (the command line's flags, as values:
/// `trestle replay --help` has the user's view).
#[derive(Debug)]
pub struct Options {
    /// One unit file or a directory of them.
    pub units: PathBuf,
    /// Compare each replay with its recorded outcome ([`Verdict`]); a unit that
    /// differs runs once more with the clock shifted, and the words that differ
    /// between its two replays are not compared.
    pub check: bool,
    /// Say how far the replays are, every 50 units.
    pub progress: bool,
    /// The build to replay in; `None` for the one each unit was carved from.
    pub program: Option<PathBuf>,
    /// Parallel replays (default: one more than the number of cores).
    pub jobs: Option<usize>,
    /// Upper bound of one replay.
    pub timeout: Duration,
    /// Where the recorded and replayed outcomes of unfaithful units are written.
    pub dump: Option<PathBuf>,
    /// Units carved from a second recording of the same system tests: what the two
    /// recordings of a call disagree on (a process id, a salt from `getrandom`, the
    /// time) is left out of that unit's oracle and counted as such.
    pub twin: Option<PathBuf>,
    /// Replay each unit in a fork of the program started once in replay mode
    /// ([`ReplayServer`]); false: a process started for each.
    pub forkserver: bool,
}

/// How one replay went.
#[derive(Debug, Clone, Serialize)]
pub enum Verdict {
    /// Same outcome and post-state as recorded.
    Faithful,
    /// Same outcome and post-state as recorded but for this many words of memory, in
    /// which a second replay differed from the first (see [`Unstable`]): what the call
    /// took from the clock or the process id. Counted as faithful.
    FaithfulWhereStable(usize),
    /// Same outcome and post-state as recorded but for what two recordings of the call
    /// disagree on (named here). Counted as faithful.
    FaithfulWhereRecordingsAgree(String),
    /// Different; the first difference.
    Unfaithful(String),
    /// The recorded outcome is unknown: nothing to compare.
    NoOracle(String),
    /// The unit could not be replayed at all.
    Error(String),
}

/// One unit's replay.
#[derive(Debug, Clone, Serialize)]
pub struct UnitReplay {
    /// The unit file.
    pub unit: String,
    /// Its function.
    pub function: String,
    /// What happened in the replay.
    pub observed: String,
    /// The verdict.
    pub verdict: Verdict,
}

/// Per-function figures.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FunctionFidelity {
    /// Function name.
    pub name: String,
    /// Units replayed.
    pub units: usize,
    /// Of those, faithful.
    pub faithful: usize,
}

/// The `--json` summary.
#[derive(Debug, Clone, Serialize)]
pub struct ReplaySummary {
    /// Units replayed.
    pub units: usize,
    /// Faithful replays (those faithful but for words two replays disagree on too).
    pub faithful: usize,
    /// Of the faithful, those faithful only with words two replays disagree on left out.
    pub unstable: usize,
    /// Units paired with the same call from the same context in the twin recording
    /// (`--twin`).
    pub twinned: usize,
    /// Of the faithful, those faithful only with what the two recordings of the call
    /// disagree on left out: listed in `nondeterministic_units`, with what.
    pub nondeterministic: usize,
    /// Units without a recorded outcome (not counted in `fidelity`).
    pub no_oracle: usize,
    /// Units that could not be replayed.
    pub errors: usize,
    /// faithful / (units − no_oracle).
    pub fidelity: f64,
    /// Per function.
    pub functions: Vec<FunctionFidelity>,
    /// Every unit that was not faithful, with why.
    pub failures: Vec<UnitReplay>,
    /// Every unit without a recorded outcome to compare with, with why.
    pub unchecked: Vec<UnitReplay>,
    /// Every unit faithful only where its two recordings agree, with what was left out.
    pub nondeterministic_units: Vec<UnitReplay>,
}

/// Replay one unit in `program` and return what it did.
pub fn replay_unit(program: &Path, unit: &Unit, timeout: Duration) -> Result<Outcome, String> {
    replay_unit_with_stderr(program, unit, timeout).map(|(o, _)| o)
}

/// Like [`replay_unit`], also returning the last line the program wrote to stderr.
pub fn replay_unit_with_stderr(
    program: &Path,
    unit: &Unit,
    timeout: Duration,
) -> Result<(Outcome, String), String> {
    replay_unit_with_clock(program, unit, timeout, 0)
}

/// Seconds the clock is shifted by in the second replay of a unit that differs from
/// its recording (see [`judge_unstable`]): days and an odd second, so that a time in
/// seconds changes in its low bytes, one in microseconds in its high ones.
const CLOCK_SHIFT: i64 = 11 * 86_400 + 3_607;

/// [`replay_unit_with_stderr`] with the program's clock `clock_shift` seconds ahead.
fn replay_unit_with_clock(
    program: &Path,
    unit: &Unit,
    timeout: Duration,
    clock_shift: i64,
) -> Result<(Outcome, String), String> {
    // In the system's temporary directory, as the recordings' tests compare with:
    // the two paths are in the environment, and where the stack starts moves with it.
    let dir = tempfile::Builder::new()
        .prefix("trestle-replay-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let req_path = dir.path().join("request.bin");
    let out_path = dir.path().join("result.bin");
    write_request(&req_path, unit)?;
    let mut env = vec![
        (hooks::ENV_REPLAY.into(), req_path.display().to_string()),
        (hooks::ENV_REPLAY_OUT.into(), out_path.display().to_string()),
    ];
    // Only when shifting: every variable moves the stack, and a context may hold a
    // stack address the recording did not capture (read as it lies).
    if clock_shift != 0 {
        env.push((hooks::ENV_CLOCK_SHIFT.into(), clock_shift.to_string()));
    }
    let opts = RunOptions {
        timeout,
        env,
        capture_stdout: false,
    };
    let r = run_test(program, &unit.system_test, &opts).map_err(|e| format!("{e:#}"))?;
    read_result(&out_path, r.status, &r.stderr, timeout)
}

/// Write the replay request for `unit` to `path`.
fn write_request(path: &Path, unit: &Unit) -> Result<(), String> {
    /// [`trestle_abi::trace::ReplayRequest`] borrowing the unit's context: encoded the same, no copy.
    #[derive(Serialize)]
    struct Borrowed<'a> {
        binary_id: u64,
        context: &'a trestle_abi::context::Context,
    }
    let req = Borrowed {
        binary_id: unit.binary_id,
        context: &unit.context,
    };
    let bytes = bincode::serialize(&req).map_err(|e| e.to_string())?;
    std::fs::write(path, bytes)
        .map_err(|e| format!("cannot write the replay request {}: {e}", path.display()))
}

/// What a replay that ended with `status` (and wrote `stderr`) did: the result it
/// wrote to `out_path`, or, without one, how the process ended.
fn read_result(
    out_path: &Path,
    status: RunStatus,
    stderr: &[u8],
    timeout: Duration,
) -> Result<(Outcome, String), String> {
    let last_err = String::from_utf8_lossy(stderr)
        .lines()
        .last()
        .unwrap_or("")
        .trim()
        .to_owned();
    match std::fs::read(out_path) {
        Ok(bytes) => match bincode::deserialize::<ReplayResult>(&bytes) {
            Ok(ReplayResult::Ran(o)) => Ok((o, last_err)),
            Ok(ReplayResult::Refused(why)) => Err(why),
            Err(e) => Err(format!("corrupted replay result: {e}")),
        },
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(format!(
            "cannot read the replay result {}: {e}",
            out_path.display()
        )),
        Err(_) => match status {
            RunStatus::Signaled(sig) => Ok((Outcome::Crashed { signal: sig }, last_err)),
            RunStatus::TimedOut => Err(format!("timed out after {timeout:?}")),
            RunStatus::Exited(c) => Err(format!(
                "the program exited with status {c} without a replay result{}",
                if last_err.is_empty() {
                    String::new()
                } else {
                    format!(" ({last_err})")
                }
            )),
        },
    }
}

/// Times a thread's replay server may die before its units are spawned one by one.
const SERVER_DEATHS: usize = 3;

/// One replay thread's forkserver: the program started once in replay mode (its
/// metadata loaded, its globals' extents made), each unit replayed in a fork of it
/// (`runtime/src/sysserver.rs`). Starting a process for each unit cost lua's 27,000
/// units about half of `replay --check`'s time. A program that does not serve (built
/// by another trestle), or a server that keeps dying, leaves the units to
/// [`replay_unit_with_clock`], a process each; so does every unit whose served replay
/// is not faithful outright ([`replay_one`]).
struct ReplayServer {
    program: PathBuf,
    dir: tempfile::TempDir,
    server: Option<ForkServer>,
    deaths: usize,
    /// The program does not serve: spawn each unit.
    spawn_only: bool,
    /// Test layouts kept for the next replay of the same test.
    layouts: layouts::Layouts,
}

/// How a replay in the server's fork ended, and what it did (the outcome and its
/// output) or why it could not say.
type ServedReplay = (RunStatus, Result<(Outcome, String), String>);

impl ReplayServer {
    fn new(program: &Path) -> Result<ReplayServer, String> {
        let dir = scratch_dir("trestle-replay-").map_err(|e| format!("{e:#}"))?;
        Ok(ReplayServer {
            program: program.to_owned(),
            dir,
            server: None,
            deaths: 0,
            spawn_only: false,
            layouts: layouts::Layouts::default(),
        })
    }

    /// Replay `unit` in a fork of the server (its clock `clock_shift` seconds ahead),
    /// starting the server first if need be: how the fork ended and what it did;
    /// `None` when there is no server to replay in (the caller spawns the program).
    fn replay(&mut self, unit: &Unit, timeout: Duration, clock_shift: i64) -> Option<ServedReplay> {
        if self.spawn_only || self.deaths >= SERVER_DEATHS {
            return None;
        }
        let (req_path, out_path, err_path) = (
            self.dir.path().join("request.bin"),
            self.dir.path().join("result.bin"),
            self.dir.path().join("stderr"),
        );
        if self.server.is_none() {
            let mut cmd = std::process::Command::new(&self.program);
            cmd.env(hooks::ENV_REPLAY, &req_path)
                .env(hooks::ENV_REPLAY_OUT, &out_path)
                .current_dir(self.dir.path());
            cmd.stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null());
            no_randomization_for_children();
            match ForkServer::start(cmd) {
                Ok(Some(server)) => self.server = Some(server),
                Ok(None) | Err(_) => {
                    self.spawn_only = true;
                    return None;
                }
            }
        }
        let server = self.server.as_mut().expect("started above");
        if let Err(e) = write_request(&req_path, unit) {
            return Some((RunStatus::Exited(0), Err(e)));
        }
        let _ = std::fs::remove_file(&out_path);
        let kept = match self.layouts.take(&unit.system_test) {
            Ok(k) => k,
            Err(e) => return Some((RunStatus::Exited(0), Err(format!("{e:#}")))),
        };
        let layout = &kept.layout;
        let (argv, mut env) = test_argv_env(&self.program, &unit.system_test);
        let shift = clock_shift.to_string();
        if clock_shift != 0 {
            env.push((hooks::ENV_CLOCK_SHIFT.as_bytes(), shift.as_bytes()));
        }
        let req = Request {
            argv: &argv,
            env: &env,
            cwd: &layout.cwd,
            stdin: &layout.stdin,
            stdout: None,
            stderr: Some(&err_path),
            limits: Default::default(),
        };
        let status = match server.run(&req, timeout) {
            RunEnd::Ended(e) => RunStatus::from_wait(e.status as i32),
            RunEnd::Timeout(_) => RunStatus::TimedOut,
            RunEnd::ServerDied => {
                self.server = None;
                self.deaths += 1;
                return None;
            }
        };
        self.layouts.give_back(kept);
        let stderr = read_tail(&err_path);
        let result = read_result(&out_path, status.clone(), &stderr, timeout);
        Some((status, result))
    }
}

/// The end of a file's bytes (a replay's stderr), as much as a run keeps.
fn read_tail(path: &Path) -> Vec<u8> {
    let mut b = std::fs::read(path).unwrap_or_default();
    if b.len() > trestle_exec::launch::OUTPUT_TAIL {
        b.drain(..b.len() - trestle_exec::launch::OUTPUT_TAIL);
    }
    b
}

/// Run `trestle replay`. Returns the summary (printed too).
///
/// Units are read by the replay threads as they go, never held together: a
/// captured testsuite's 120,000 units took 5 GiB and a serial 23 s to read up
/// front.
pub fn run(opts: &Options) -> Result<ReplaySummary> {
    // A replay runs in a directory of its own: a relative `--program` is made
    // absolute here, or every replay outside the forkserver failed to start it.
    let absolute;
    let opts = match &opts.program {
        Some(p) if p.is_relative() => {
            absolute = Options {
                program: Some(std::path::absolute(p).with_context(|| {
                    format!("cannot make the program path {} absolute", p.display())
                })?),
                units: opts.units.clone(),
                twin: opts.twin.clone(),
                dump: opts.dump.clone(),
                ..*opts
            };
            &absolute
        }
        _ => opts,
    };
    let files = unit_files(&opts.units)?;
    // A replay thread spends part of each unit reading and judging it, its core
    // idle but for another thread's replay: one thread more than cores keeps them
    // busy (sed's captured testsuite on 2 cores: 2 threads 167% CPU, 3 threads 187%).
    let jobs = opts
        .jobs
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get() + 1)
                .unwrap_or(1)
        })
        .max(1);
    let twins = match &opts.twin {
        Some(dir) => Some(twin_files(&opts.units, dir, &files, jobs)?),
        None => None,
    };
    let (results, twinned) = replay_all(opts, &files, jobs, twins.as_deref())?;
    if let (Some(dir), 0) = (&opts.twin, twinned) {
        log::info!("trestle replay: --twin {}: no unit was paired with the same call there (recorded from other tests?)", dir.display());
    }
    let summary = summarize(results, twinned);
    Ok(summary)
}

/// The program a unit is replayed in.
fn program_of(opts: &Options, u: &Unit) -> PathBuf {
    opts.program
        .clone()
        .unwrap_or_else(|| PathBuf::from(&u.provenance.program))
}

/// The programs the units replay in, each loaded once, when the first unit names
/// it.
#[derive(Default)]
struct Programs(Mutex<HashMap<PathBuf, Arc<Binary>>>);

impl Programs {
    /// The program `u` (read from `f`) replays in, once it is checked to be the
    /// binary `u` was carved from: a unit from another binary is an error naming the
    /// unit, not a failed replay.
    fn of(&self, opts: &Options, f: &Path, u: &Unit) -> Result<Arc<Binary>> {
        let prog = program_of(opts, u);
        let mut loaded = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let b = match loaded.get(&prog) {
            Some(b) => b.clone(),
            None => {
                let b = Arc::new(
                    Binary::load(&prog).with_context(|| format!("replaying {}", f.display()))?,
                );
                loaded.insert(prog, b.clone());
                b
            }
        };
        drop(loaded);
        b.check_unit(u, f)?;
        Ok(b)
    }
}

/// `f` applied to every file on `jobs` threads, the results in the files' order;
/// the error of the first file (in that order) that fails, if any does. `f` is
/// given the thread's number (below `jobs`), the file's index and the file.
fn map_files<T: Send>(
    files: &[PathBuf],
    jobs: usize,
    f: impl Fn(usize, usize, &Path) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<Option<Result<T>>>> = Mutex::new((0..files.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for worker in 0..jobs {
            let (f, next, out) = (&f, &next, &out);
            s.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(file) = files.get(i) else { break };
                let r = f(worker, i, file);
                let failed = r.is_err();
                out.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(r);
                if failed {
                    // Later files are not needed: the first failure is reported.
                    next.fetch_max(files.len(), Ordering::SeqCst);
                }
            });
        }
    });
    let mut done = Vec::with_capacity(files.len());
    for r in out.into_inner().unwrap_or_else(|e| e.into_inner()) {
        match r {
            Some(r) => done.push(r?),
            None => unreachable!("a file is left only after an earlier one failed"),
        }
    }
    Ok(done)
}

/// What pairs a unit with the same call in a second recording: the system test, the
/// process (by its rank among the test's processes, pids differ), the function and
/// how many calls of it came before.
type CallKey = (String, usize, String, u64);

/// Where a unit's call was recorded: test, pid, function, calls of it before.
type CallSite = (String, u32, String, u64);

fn call_site(u: &Unit) -> CallSite {
    (
        u.provenance.test.clone(),
        u.provenance.pid,
        u.function.clone(),
        u.provenance.call_index,
    )
}

/// The key of every call site; `None` for one whose key another site of the same
/// set has too (it cannot be paired for sure).
fn call_keys(sites: &[CallSite]) -> Vec<Option<CallKey>> {
    let mut pids: HashMap<&str, Vec<u32>> = HashMap::new();
    for (test, pid, ..) in sites {
        pids.entry(test.as_str()).or_default().push(*pid);
    }
    for p in pids.values_mut() {
        p.sort_unstable();
        p.dedup();
    }
    let keys: Vec<CallKey> = sites
        .iter()
        .map(|(test, pid, function, calls)| {
            let rank = pids[test.as_str()].binary_search(pid).unwrap_or(0);
            (test.clone(), rank, function.clone(), *calls)
        })
        .collect();
    let mut count: HashMap<&CallKey, usize> = HashMap::new();
    for k in &keys {
        *count.entry(k).or_default() += 1;
    }
    keys.iter()
        .map(|k| (count[k] == 1).then(|| k.clone()))
        .collect()
}

/// True if two recordings of a call started from the same context: arguments,
/// memory (by structure, as [`diff_graphs`] compares it), locale, stream modes, files.
fn same_context(a: &trestle_abi::context::Context, b: &trestle_abi::context::Context) -> bool {
    a.fn_id == b.fn_id
        && a.args == b.args
        && a.locale == b.locale
        && a.stdio_modes == b.stdio_modes
        && a.fds == b.fds
        && diff_graphs(&a.graph, &b.graph).is_none()
}

/// The binary id and call site of each of `files` (units under `root`): from the
/// unit directory's index where it names them all, or else from each unit, read on
/// `jobs` threads (a captured testsuite's 123,000 units: a quarter of `replay --check
/// --twin`'s time, read twice).
fn call_sites(root: &Path, files: &[PathBuf], jobs: usize) -> Result<Vec<(u64, CallSite)>> {
    let from_index = || -> Option<Vec<(u64, CallSite)>> {
        let bytes = std::fs::read(root.join(crate::carve::units::UNIT_INDEX)).ok()?;
        let index: crate::carve::units::UnitIndex = serde_json::from_slice(&bytes).ok()?;
        let id = u64::from_str_radix(&index.binary_id, 16).ok()?;
        let rows: HashMap<PathBuf, &crate::carve::units::UnitRow> = index
            .units
            .iter()
            .map(|r| (root.join(&r.file), r))
            .collect();
        files
            .iter()
            .map(|f| {
                let r = rows.get(f)?;
                Some((
                    id,
                    (r.test.clone(), r.pid?, r.function.clone(), r.call_index),
                ))
            })
            .collect()
    };
    match from_index() {
        Some(sites) => Ok(sites),
        None => map_files(files, jobs, |_, _, f| {
            read_unit(f).map(|u| (u.binary_id, call_site(&u)))
        }),
    }
}

/// For each unit file, the unit of the twin set (`dir`) recorded at the same call
/// site, if one is. The call sites of both sets are taken from their indexes (or
/// read from the units); the pairs are compared as they are replayed
/// ([`twin_of`]).
fn twin_files(
    root: &Path,
    dir: &Path,
    files: &[PathBuf],
    jobs: usize,
) -> Result<Vec<Option<PathBuf>>> {
    let twins = unit_files(dir).with_context(|| format!("--twin {}", dir.display()))?;
    let own = call_sites(root, files, jobs)?;
    let theirs =
        call_sites(dir, &twins, jobs).with_context(|| format!("--twin {}", dir.display()))?;
    if let (Some((id, _)), Some(first)) = (own.first(), files.first()) {
        if let Some(i) = theirs.iter().position(|(t, _)| t != id) {
            anyhow::bail!(
                "--twin {}: {} was carved from another binary than {}",
                dir.display(),
                twins[i].display(),
                first.display()
            );
        }
    }
    let own: Vec<CallSite> = own.into_iter().map(|(_, s)| s).collect();
    let theirs: Vec<CallSite> = theirs.into_iter().map(|(_, s)| s).collect();
    let by_key: HashMap<CallKey, usize> = call_keys(&own)
        .into_iter()
        .enumerate()
        .filter_map(|(i, k)| Some((k?, i)))
        .collect();
    let mut out = vec![None; files.len()];
    for (f, k) in twins.iter().zip(call_keys(&theirs)) {
        if let Some(&i) = k.as_ref().and_then(|k| by_key.get(k)) {
            out[i] = Some(f.clone());
        }
    }
    Ok(out)
}

/// What the recording of `u` and its twin (the unit file `twin`, of the set `dir`)
/// disagree on (`Err`: they ended differently); `None` when the twin started from
/// another context.
fn twin_of(dir: &Path, twin: &Path, u: &Unit) -> Result<Option<Result<Unstable, String>>> {
    let t = read_unit(twin).with_context(|| format!("--twin {}", dir.display()))?;
    // From another context (a salt an earlier call drew, say) the call may differ
    // by that alone: no evidence of what it takes from outside.
    if !same_context(&u.context, &t.context) {
        return Ok(None);
    }
    Ok(Some(match (&u.expected, &t.expected) {
        (Some(a), Some(b)) => Unstable::between_recordings(a, b),
        _ => Ok(Unstable::default()),
    }))
}

/// Replay the unit `files` on `jobs` threads (each replay is a process of its
/// own), each paired with its twin where `twins` names one. Returns the replays, in
/// the files' order, and how many were compared with a twin; or the first error
/// that stops the run (a unit that cannot be read, or is of another binary).
fn replay_all(
    opts: &Options,
    files: &[PathBuf],
    jobs: usize,
    twins: Option<&[Option<PathBuf>]>,
) -> Result<(Vec<UnitReplay>, usize)> {
    let programs = Programs::default();
    let done = AtomicUsize::new(0);
    let twinned = AtomicUsize::new(0);
    let total = files.len();
    let servers: Vec<Mutex<Option<ReplayServer>>> = (0..jobs).map(|_| Mutex::new(None)).collect();
    let retries = FreshRetries::default();
    let results = map_files(files, jobs, |worker, i, f| {
        let u = read_unit(f)?;
        let binary = programs.of(opts, f, &u)?;
        let twin = match (&opts.twin, twins.and_then(|t| t[i].as_ref())) {
            (Some(dir), Some(t)) => twin_of(dir, t, &u)?,
            _ => None,
        };
        twinned.fetch_add(usize::from(twin.is_some()), Ordering::SeqCst);
        // Each thread keeps the forkserver of the program it replayed in last.
        let mut server = servers[worker].lock().unwrap_or_else(|e| e.into_inner());
        if opts.forkserver && server.as_ref().is_none_or(|s| s.program != binary.path) {
            *server = ReplayServer::new(&binary.path)
                .map_err(|e| log::info!("trestle replay: no forkserver: {e}"))
                .ok();
        }
        let r = replay_one(
            opts,
            f,
            &u,
            server.as_mut(),
            &retries,
            &binary.global_names,
            twin.as_ref(),
        );
        let d = done.fetch_add(1, Ordering::SeqCst) + 1;
        if opts.progress && (d.is_multiple_of(50) || d == total) {
            log::info!("replayed {d}/{total}");
        }
        Ok(r)
    })?;
    Ok((results, twinned.into_inner()))
}

/// Fresh-process retries in a row, of a function's units whose fork differed, that
/// changed no verdict, before the function's units are judged on their forks alone.
const FRESH_MISSES: u32 = 3;

/// Per function, how many fresh-process retries in a row changed no verdict.
#[derive(Default)]
struct FreshRetries(Mutex<HashMap<String, u32>>);

impl FreshRetries {
    /// Whether a unit of `function` whose fork differed is still worth a fresh
    /// process.
    fn worth_it(&self, function: &str) -> bool {
        let misses = self.0.lock().unwrap_or_else(|e| e.into_inner());
        misses.get(function).is_none_or(|&n| n < FRESH_MISSES)
    }

    /// A fresh retry of a unit of `function` changed its verdict (`rescued`) or not.
    fn tried(&self, function: &str, rescued: bool) {
        let mut misses = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = misses.entry(function.to_owned()).or_default();
        *n = if rescued { 0 } else { *n + 1 };
    }
}

/// Replay one unit and judge it against its recorded outcome, leaving out what
/// `twin` says the two recordings of the call disagree on; differences name globals
/// as `names` says.
fn replay_one(
    opts: &Options,
    f: &Path,
    u: &Unit,
    mut server: Option<&mut ReplayServer>,
    retries: &FreshRetries,
    names: &GlobalNames,
    twin: Option<&Result<Unstable, String>>,
) -> UnitReplay {
    let judged = |observed: String, verdict: Verdict| UnitReplay {
        unit: f.display().to_string(),
        function: u.function.clone(),
        observed,
        verdict,
    };
    let mut served = true;
    let observed = match server
        .as_deref_mut()
        .and_then(|s| s.replay(u, opts.timeout, 0))
    {
        Some((_, Ok(replayed))) => Ok(replayed),
        // Past the limit in a fork, a unit ran past it in a fresh process too (GNU
        // diff's 12 hanging units, either way): a second try would cost the limit
        // twice.
        Some((RunStatus::TimedOut, hung @ Err(_))) => hung,
        // The fork said nothing (it died before writing its result, the server
        // went away): the unit gets a process of its own.
        _ => {
            served = false;
            replay_unit_with_stderr(&program_of(opts, u), u, opts.timeout)
        }
    };
    let (mut o, mut last_err) = match observed {
        Ok(observed) => observed,
        Err(e) => return judged("error".to_owned(), Verdict::Error(e)),
    };
    let mut verdict = settled(u, &o, names, twin);
    // A fork of the server is no fresh process: its heap holds what the server
    // allocated and freed, its stack mapping is the server's. A unit whose fork
    // differs is replayed in a freshly started process too, and judged on that, while
    // that changes verdicts of its function: after FRESH_MISSES retries in a row that
    // changed none, the function's units are judged on their forks alone. (Retrying
    // every such unit was a quarter of `replay --check`'s time and rescued none of
    // 1,186 units of sed's captured testsuite and 4 to 6 of lua's 1,307, different
    // ones from run to run; it does rescue a C++ `std::string` temporary and a
    // `va_list`'s stack arguments whose forks differ now and then.)
    if verdict.is_none() && served && retries.worth_it(&u.function) {
        if let Ok((fresh, err)) = replay_unit_with_stderr(&program_of(opts, u), u, opts.timeout) {
            let fresh_verdict = settled(u, &fresh, names, twin);
            retries.tried(&u.function, fresh_verdict.is_some());
            (o, last_err, verdict, served) = (fresh, err, fresh_verdict, false);
        }
    }
    dump_if_different(opts, f, u, &o);
    let verdict = match verdict {
        Some(verdict) => verdict,
        None => {
            let exp = u
                .expected
                .as_ref()
                .expect("a unit without an oracle is settled");
            let stderr_note = if matches!(o, Outcome::Crashed { .. }) && !last_err.is_empty() {
                format!("; stderr: {last_err}")
            } else {
                String::new()
            };
            let nothing = Unstable::default();
            let recorded = match twin {
                Some(Ok(left_out)) => left_out,
                _ => &nothing,
            };
            let d = diff_outcomes_named(&u.context.graph, exp, &o, recorded, names)
                .expect("an unsettled unit differs");
            // The second replay is of the same kind as the first.
            let server = if served { server } else { None };
            judge_unstable(opts, u, server, exp, &o, names, recorded)
                .unwrap_or(Verdict::Unfaithful(d + &stderr_note))
        }
    };
    judged(o.summary(), verdict)
}

/// With `--dump`, the recorded and the replayed outcome of `u` where they differ.
fn dump_if_different(opts: &Options, f: &Path, u: &Unit, observed: &Outcome) {
    if let (Some(dir), Some(exp)) = (&opts.dump, &u.expected) {
        if diff_outcomes_after(&u.context.graph, exp, observed).is_some() {
            let stem = f
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            if let Err(e) = dump(dir, &stem, exp, observed) {
                log::info!("trestle replay: --dump: {e:#}");
            }
        }
    }
}

/// The verdict on `observed` where it needs no second look: the unit has no oracle,
/// its replay is faithful to it (but for what `twin` says the two recordings disagree
/// on), or the two recordings ended differently. `None`: it differs.
fn settled(
    u: &Unit,
    observed: &Outcome,
    names: &GlobalNames,
    twin: Option<&Result<Unstable, String>>,
) -> Option<Verdict> {
    let Some(exp) = &u.expected else {
        return Some(Verdict::NoOracle("the recording saw no end of the call (the process ended inside it, or longjmp left it)".into()));
    };
    if exp.state().is_some_and(|st| st.graph.partial) {
        return Some(Verdict::NoOracle(
            "the memory after the recorded call was over the snapshot size bound".into(),
        ));
    }
    let same_but_for = |left_out: &Unstable| {
        diff_outcomes_named(&u.context.graph, exp, observed, left_out, names).is_none()
    };
    if same_but_for(&Unstable::default()) {
        return Some(Verdict::Faithful);
    }
    match twin {
        Some(Err(how)) => Some(Verdict::NoOracle(format!(
            "the two recordings of the call ended differently: {how}"
        ))),
        Some(Ok(left_out)) if !left_out.is_empty() && same_but_for(left_out) => {
            Some(Verdict::FaithfulWhereRecordingsAgree(left_out.describe()))
        }
        _ => None,
    }
}

/// The verdict on a unit whose replay `observed` differs from the recording, once a
/// second replay (another process, the clock shifted by [`CLOCK_SHIFT`]) shows which
/// words of memory no recording can predict: faithful where the two replays agree,
/// or the first difference there. `None` when the second replay agrees with the
/// first in all memory (or fails): the difference stands as it was. What two
/// recordings disagree on, `recorded`, is left out as well.
fn judge_unstable(
    opts: &Options,
    u: &Unit,
    server: Option<&mut ReplayServer>,
    expected: &Outcome,
    observed: &Outcome,
    names: &GlobalNames,
    recorded: &Unstable,
) -> Option<Verdict> {
    // Leaving out words of memory cannot mend a difference in anything else (the
    // return value, the extents reachable, a pointer): then no second replay is run.
    let mut every_byte = recorded.clone();
    every_byte.merge(Unstable::between(expected, observed));
    diff_outcomes_named(&u.context.graph, expected, observed, &every_byte, names)
        .is_none()
        .then_some(())?;
    // Served from a fork where there is a server: another process as much as a fresh
    // one (its own pid, the clock read anew, `main` called deeper in the stack as a
    // fresh process's one more environment variable puts it), at a fraction of the
    // cost.
    let again = match server.and_then(|s| s.replay(u, opts.timeout, CLOCK_SHIFT)) {
        Some((_, served)) => served,
        None => replay_unit_with_clock(&program_of(opts, u), u, opts.timeout, CLOCK_SHIFT),
    };
    let (again, _) = again.ok()?;
    let unstable = Unstable::between(observed, &again);
    if unstable.is_empty() {
        return None;
    }
    let words = unstable.len();
    let mut left_out = recorded.clone();
    left_out.merge(unstable);
    Some(
        match diff_outcomes_named(&u.context.graph, expected, observed, &left_out, names) {
            None => Verdict::FaithfulWhereStable(words),
            Some(d) => Verdict::Unfaithful(d),
        },
    )
}

/// Fidelity over all replays and per function.
fn summarize(results: Vec<UnitReplay>, twinned: usize) -> ReplaySummary {
    let mut per_fn: BTreeMap<String, FunctionFidelity> = BTreeMap::new();
    let (mut faithful, mut unstable, mut no_oracle, mut errors) = (0, 0, 0, 0);
    let (mut failures, mut unchecked, mut nondeterministic_units) =
        (Vec::new(), Vec::new(), Vec::new());
    for r in &results {
        let e = per_fn
            .entry(r.function.clone())
            .or_insert_with(|| FunctionFidelity {
                name: r.function.clone(),
                ..Default::default()
            });
        match &r.verdict {
            Verdict::Faithful
            | Verdict::FaithfulWhereStable(_)
            | Verdict::FaithfulWhereRecordingsAgree(_) => {
                faithful += 1;
                unstable += usize::from(matches!(r.verdict, Verdict::FaithfulWhereStable(_)));
                if matches!(r.verdict, Verdict::FaithfulWhereRecordingsAgree(_)) {
                    nondeterministic_units.push(r.clone());
                }
                e.units += 1;
                e.faithful += 1;
            }
            Verdict::NoOracle(_) => {
                no_oracle += 1;
                unchecked.push(r.clone());
            }
            Verdict::Unfaithful(_) | Verdict::Error(_) => {
                errors += usize::from(matches!(r.verdict, Verdict::Error(_)));
                e.units += 1;
                failures.push(r.clone());
            }
        }
    }
    let checked = results.len() - no_oracle;
    ReplaySummary {
        units: results.len(),
        faithful,
        unstable,
        twinned,
        nondeterministic: nondeterministic_units.len(),
        no_oracle,
        errors,
        fidelity: if checked == 0 {
            0.0
        } else {
            faithful as f64 / checked as f64
        },
        functions: per_fn.into_values().collect(),
        failures,
        unchecked,
        nondeterministic_units,
    }
}

/// Write the recorded and the replayed outcome of a unit for `--dump`.
fn dump(dir: &Path, stem: &str, recorded: &Outcome, replayed: &Outcome) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for (which, o) in [("recorded", recorded), ("replayed", replayed)] {
        let path = dir.join(format!("{stem}.{which}.json"));
        std::fs::write(&path, serde_json::to_vec_pretty(o)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// The summary as a table: per function, then the totals; with `verbose`, every unit
/// that is not faithful (and why) below it.
pub fn table(s: &ReplaySummary, verbose: bool) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let width = s
        .functions
        .iter()
        .map(|f| f.name.len())
        .max()
        .unwrap_or(8)
        .clamp(8, 60);
    let _ = writeln!(
        out,
        "{:<width$}  {:>6}  {:>8}  {:>8}",
        "function", "units", "faithful", "fidelity"
    );
    for f in &s.functions {
        let pct = if f.units == 0 {
            100.0
        } else {
            100.0 * f.faithful as f64 / f.units as f64
        };
        let name: String = f.name.chars().take(width).collect();
        let _ = writeln!(
            out,
            "{name:<width$}  {:>6}  {:>8}  {:>7.1}%",
            f.units, f.faithful, pct
        );
    }
    let mut but = Vec::new();
    if s.unstable > 0 {
        but.push(format!(
            "{} but for words two replays disagree on",
            s.unstable
        ));
    }
    if s.nondeterministic > 0 {
        but.push(format!(
            "{} but for what two recordings disagree on",
            s.nondeterministic
        ));
    }
    let unstable = if but.is_empty() {
        String::new()
    } else {
        format!(" ({})", but.join("; "))
    };
    let _ = writeln!(
            out,
        "total: {} unit(s), {} faithful{unstable}, {} without a recorded outcome, {} error(s): fidelity {:.1}%",
        s.units,
        s.faithful,
        s.no_oracle,
        s.errors,
        100.0 * s.fidelity
    );
    if s.twinned > 0 {
        let _ = writeln!(
            out,
            "twin recording: {} of {} unit(s) paired with the same call from the same context",
            s.twinned, s.units
        );
    }
    if verbose {
        for f in &s.failures {
            let why = match &f.verdict {
                Verdict::Unfaithful(d) | Verdict::Error(d) | Verdict::NoOracle(d) => d.as_str(),
                Verdict::Faithful
                | Verdict::FaithfulWhereStable(_)
                | Verdict::FaithfulWhereRecordingsAgree(_) => "",
            };
            let _ = writeln!(out, "  {}: {} ({})", f.unit, why, f.observed);
        }
        for u in &s.nondeterministic_units {
            if let Verdict::FaithfulWhereRecordingsAgree(what) = &u.verdict {
                let _ = writeln!(
                    out,
                    "  {}: faithful but for what its two recordings disagree on: {what}",
                    u.unit
                );
            }
        }
        for u in &s.unchecked {
            if let Verdict::NoOracle(why) = &u.verdict {
                let _ = writeln!(out, "  {}: not checked: {why} ({})", u.unit, u.observed);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(n: usize) -> Vec<PathBuf> {
        (0..n).map(|i| PathBuf::from(format!("u{i:03}"))).collect()
    }

    #[test]
    fn files_are_mapped_in_their_order_on_every_thread() {
        let fs = files(200);
        let out = map_files(&fs, 3, |worker, i, f| {
            assert!(worker < 3);
            Ok((i, f.to_owned()))
        })
        .unwrap();
        let want: Vec<(usize, PathBuf)> = fs.iter().cloned().enumerate().collect();
        assert_eq!(out, want);
    }

    #[test]
    fn the_first_failing_file_in_order_is_the_error() {
        let fs = files(100);
        let err = map_files(&fs, 2, |_, i, f| {
            if i == 40 || i == 41 || i == 90 {
                anyhow::bail!("cannot read {}", f.display())
            }
            Ok(i)
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "cannot read u040");
    }
}

//! trestle's unit fuzzer: LibAFL over the parameters of one carved unit.
//!
//! The instrumented program itself is the harness (`TRESTLE_FUZZ`): it restores the
//! unit's context once and serves executions through the AFL++ forkserver protocol,
//! one fork per execution. This crate drives it from the host with LibAFL's
//! `ForkserverExecutor`: edge coverage from SanitizerCoverage in shared memory
//! (hit counts), CmpLog from `trace-cmp` through a second, tracing executor and an
//! input-to-state stage, havoc plus dictionary mutations (strings and compared
//! constants the binary describes) plus the paper's value mutations per parameter
//! ([`mutators`]), and crash and timeout objectives.
//!
//! On several cores ([`FuzzConfig::cores`] > 1) LibAFL's `Launcher` runs one such
//! fuzzer per core, each with its own harness processes, sharing finds over LLMP,
//! in a launcher process of its own ([`LAUNCHER`], see [`launcher_main`]).
//!
//! In-process ([`fuzz_in_process`]) the same fuzzer runs inside the harness instead,
//! loaded as a library (`unit-fuzz/inproc`), and calls the unit directly: no round
//! trip per execution ([`inprocess`]).
//!
//! Output follows AFL's layout: `queue/`, `crashes/`, `timeouts/`, with the unit in
//! `unit.unit` and, for every crash, the decoded parameter values next to it.
//! It owns the fuzzing loop and nothing else: no carving, no lifting.

pub mod affinity;
mod forkserver;
pub mod inprocess;
pub mod mutators;
mod pace;
mod parallel;
pub mod probe;
pub mod schedule;

pub use parallel::{launcher_main, LAUNCHER};
pub use probe::{probe, recorded_edges, Influence};

use libafl::mutators::Tokens;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use trestle_abi::fuzz::{
    decode_values, encode_values, original_value, FuzzRequest, ParamValue, ENV_FUZZ, ENV_FUZZ_INPUT,
};
use trestle_abi::hooks;
use trestle_abi::unit::Unit;

/// Edge map size offered to the harness.
pub const MAP_SIZE: usize = hooks::EDGE_MAP_SIZE;

/// The file in a fuzz directory holding the recorded values as an input (the dry
/// run's; the queue's first entry has the same bytes).
pub const DRY_RUN_INPUT: &str = ".dry-run-input";

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum FuzzError {
    /// A file could not be read or written.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// LibAFL refused (the harness did not start, say).
    #[error("{0}")]
    Libafl(String),
    /// The harness could not set the unit up (its context cannot be restored here).
    #[error("the harness cannot set up this unit: {0}")]
    Harness(String),
    /// The unit has nothing to fuzz.
    #[error("unit of {0} has no parameters: none of its context values occur in the system input")]
    NoParams(String),
    /// More cores asked for than this process may run on (or none).
    #[error("cannot fuzz on {cores} core(s): choose 1 to {available}, the cores this process may run on")]
    Cores {
        /// Cores asked for.
        cores: usize,
        /// Cores available.
        available: usize,
    },
    /// In-process fuzzing asked for on several cores.
    #[error("in-process fuzzing runs on one core; --cores {0} needs the forkserver harness")]
    InProcessCores(usize),
    /// The in-process fuzzer library is not where it should be.
    #[error("cannot find the in-process fuzzer library {}: build the workspace (cargo build --workspace) or set TRESTLE_INPROC_LIB", .0.display())]
    NoInProcessLibrary(PathBuf),
    /// The multi-core launcher program is not where it should be.
    #[error("cannot find the multi-core launcher {}: build the workspace (cargo build --workspace) or set TRESTLE_FUZZ_LAUNCHER", .0.display())]
    NoLauncher(PathBuf),
}

fn lib(e: libafl::Error) -> FuzzError {
    FuzzError::Libafl(e.to_string())
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> FuzzError + 'a {
    move |source| FuzzError::Io {
        what,
        path: path.to_owned(),
        source,
    }
}

/// Words and integers the mutators may insert.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Dictionary {
    /// Byte strings (string literals of the program).
    pub words: Vec<Vec<u8>>,
    /// Integers (constants the program compares against).
    pub ints: Vec<i64>,
}

impl Dictionary {
    /// The token mutators' dictionary: the words, and each integer as 8 (and, if it
    /// fits, 4) little-endian bytes.
    pub fn tokens(&self) -> Tokens {
        let mut tokens = Tokens::new();
        tokens.add_tokens(self.words.iter());
        for i in &self.ints {
            tokens.add_token(&i.to_le_bytes().to_vec());
            if let Ok(v) = i32::try_from(*i) {
                tokens.add_token(&v.to_le_bytes().to_vec());
            }
        }
        tokens
    }
}

/// One fuzzing campaign over one unit.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct FuzzConfig {
    /// The instrumented program the unit was carved from.
    pub program: PathBuf,
    /// The unit.
    pub unit: Unit,
    /// Output directory.
    pub out: PathBuf,
    /// How long to fuzz.
    pub time: Duration,
    /// Time limit per execution.
    pub timeout: Duration,
    /// Random seed.
    pub seed: u64,
    /// Use CmpLog (input-to-state).
    pub cmplog: bool,
    /// Dictionary.
    pub dictionary: Dictionary,
    /// Print a status line every second.
    pub progress: bool,
    /// Stop at the first crash.
    pub stop_on_crash: bool,
    /// Let one harness process serve many executions, resetting the context in
    /// between (faster; state outside the context may carry over, so findings are
    /// re-checked alone before they are reported).
    pub persistent: bool,
    /// Pin the fuzzer and the harness to this core (they hand each execution back
    /// and forth; on one core that costs a third of what it costs across two).
    /// Single-core only: with several cores, client i runs on the i-th core.
    pub pin_core: Option<usize>,
    /// Fuzzers to run, one per core (1: in this process; more: LibAFL's launcher).
    pub cores: usize,
    /// In-process only: end early once this long has passed with neither a new queue
    /// entry nor a new objective (a unit that has given what it has; a campaign then
    /// moves on to the next one).
    pub plateau: Option<Duration>,
    /// Edges of which any hit ends the campaign (a branch direction to take: the
    /// campaign's roadblock); empty for none. One core only (the launcher's clients
    /// ignore it).
    #[serde(default)]
    pub goal: Vec<u32>,
    /// The CmpLog id of the comparison deciding the goal's branch: in-process, how
    /// close its operands came is coverage too ([`trestle_abi::fuzz::ENV_FUZZ_GOAL_CMP`]).
    #[serde(default)]
    pub goal_cmp: Option<u32>,
    /// How long fuzzing goes on once an input took the goal's direction (within
    /// [`FuzzConfig::time`]): what lies behind the branch, a crash a few mutations
    /// past the flip above all. Zero ends the campaign at the flip.
    #[serde(default)]
    pub after_goal: Duration,
    /// Inputs to start from besides the recorded values (encoded values, one per
    /// parameter): a system fuzzer's queue entries seen through the unit's stream
    /// parameters, say. Each runs once when fuzzing starts and stays if it covers
    /// something new (or is an objective).
    #[serde(default)]
    pub seeds: Vec<Vec<u8>>,
}

/// What a campaign did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct FuzzReport {
    /// Executions.
    pub executions: u64,
    /// Wall time.
    pub seconds: f64,
    /// Inputs in the queue.
    pub corpus: usize,
    /// Inputs that crash the unit.
    pub crashes: Vec<PathBuf>,
    /// Inputs that time out.
    pub timeouts: Vec<PathBuf>,
    /// Seconds until the first crash.
    pub first_crash_after: Option<f64>,
    /// Seconds until an input first hit one of [`FuzzConfig::goal`]'s edges.
    pub goal_after: Option<f64>,
    /// In-process: the time after which an execution counted as a hang, measured on
    /// the recorded values (at most [`FuzzConfig::timeout`]), in milliseconds.
    pub hang_limit_ms: Option<u64>,
}

/// Whether an input of the campaign behind `state` hit one of the edges of `goal`:
/// the coverage feedback's history (named after the edge observer, `edges`) has it,
/// or the objective's (`objective_edges`), for an input that took the goal's
/// direction and crashed there (a planted bug behind a roadblock does).
pub fn goal_reached<S: libafl::HasNamedMetadata>(state: &S, goal: &[u32]) -> bool {
    ["edges", "objective_edges"].iter().any(|name| {
        state
            .named_metadata::<libafl::feedbacks::MapFeedbackMetadata<u8>>(name)
            .is_ok_and(|m| {
                goal.iter()
                    .any(|&e| m.history_map.get(e as usize).is_some_and(|&v| v != 0))
            })
    })
}

/// A crash or timeout, described for people and for lifting.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Finding {
    /// "crash" or "timeout".
    pub kind: String,
    /// Signal that ended the execution, for a crash.
    pub signal: Option<i32>,
    /// The input file (raw encoding).
    pub input: PathBuf,
    /// Decoded values, one per parameter: strings as text where printable.
    pub values: Vec<String>,
}

/// A value as the function sees it: integers cut to their width.
pub fn describe(p: &trestle_abi::unit::Param, v: &ParamValue) -> String {
    match (v, p.kind) {
        (ParamValue::Int(i), trestle_abi::unit::ParamKind::Int { bits }) if bits < 64 => {
            let shift = 64 - bits as u32;
            ((i << shift) >> shift).to_string()
        }
        (ParamValue::Int(i), _) => i.to_string(),
        (ParamValue::Bytes(b), _) if b.len() > 80 => format!(
            "{:?}… ({} bytes)",
            String::from_utf8_lossy(&b[..64]),
            b.len()
        ),
        (ParamValue::Bytes(b), _) => format!("{:?}", String::from_utf8_lossy(b)),
    }
}

/// The harness running `input` once, in `cwd`, without address randomisation.
pub fn harness_command(
    program: &Path,
    request: &Path,
    input: &Path,
    cwd: &Path,
) -> std::process::Command {
    let mut cmd = harness(program, request, cwd);
    cmd.env(ENV_FUZZ_INPUT, input);
    cmd
}

/// The harness of `request` in `cwd`, without address randomisation (recorded
/// addresses of C library objects hold only so), its output discarded.
fn harness(program: &Path, request: &Path, cwd: &Path) -> std::process::Command {
    let mut cmd = std::process::Command::new(program);
    cmd.env(ENV_FUZZ, request)
        .current_dir(cwd)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    trestle_exec::spawn::without_aslr(&mut cmd);
    cmd
}

/// How one harness run ended (a bounded run's end, [`trestle_exec::spawn::End`]).
pub use trestle_exec::spawn::End as HarnessEnd;

/// Run `cmd` until it ends or `limit` passes (then kill it and what it started).
fn wait_bounded(
    cmd: &mut std::process::Command,
    program: &Path,
    limit: Duration,
) -> Result<HarnessEnd, FuzzError> {
    let waited = trestle_exec::spawn::run_bounded(cmd, limit)
        .map_err(io("cannot run the harness", program))?;
    Ok(waited.end())
}

/// Run one input through the harness in a fresh process.
pub fn run_input(
    program: &Path,
    request: &Path,
    input: &Path,
    cwd: &Path,
    timeout: Duration,
) -> Result<HarnessEnd, FuzzError> {
    wait_bounded(
        &mut harness_command(program, request, input, cwd),
        program,
        timeout,
    )
}

/// Run the harness once on `input` (the recorded values): the unit works if it
/// returns within `timeout` (or calls `exit`). Otherwise why not: the harness's own
/// set-up failure (its set-up exit status, with its message if it gave one), a
/// crash on the recorded values, or a hang, which is killed. Failing to run the
/// harness at all is an error.
fn dry_run(
    program: &Path,
    request: &Path,
    input: &Path,
    cwd: &Path,
    timeout: Duration,
) -> Result<Option<String>, FuzzError> {
    let log_path = input.with_extension("log");
    let log = std::fs::File::create(&log_path).map_err(io("cannot create", &log_path))?;
    let mut cmd = harness_command(program, request, input, cwd);
    cmd.stderr(log);
    // Setting the context up costs more than one execution: allow for it.
    let limit = timeout * 2 + Duration::from_secs(2);
    let end = wait_bounded(&mut cmd, program, limit)?;
    let err = {
        use std::io::Read as _;
        // The unit's own stderr may be any bytes (and the cut may split a character).
        let mut bytes = Vec::new();
        std::fs::File::open(&log_path)
            .and_then(|f| f.take(1 << 16).read_to_end(&mut bytes))
            .map_err(io("cannot read the harness log", &log_path))?;
        String::from_utf8_lossy(&bytes).into_owned()
    };
    let msg = err
        .lines()
        .find_map(|l| l.strip_prefix(trestle_abi::fuzz::HARNESS_MSG_PREFIX))
        .map(str::to_owned);
    Ok(match (end, msg) {
        (HarnessEnd::TimedOut, _) => Some(format!(
            "does not finish on its recorded values within {:.1}s (a hang)",
            limit.as_secs_f64()
        )),
        (HarnessEnd::Exited(trestle_abi::fuzz::EXIT_SETUP_FAILED), Some(m)) => Some(m),
        // The set-up failure status without its message (past the first 64 KiB of
        // the unit's own output, say) is still a unit that does not work.
        (HarnessEnd::Exited(code @ trestle_abi::fuzz::EXIT_SETUP_FAILED), None) => Some(format!(
            "the harness exited with status {code} (set-up failed) without saying why; see {}",
            log_path.display()
        )),
        (HarnessEnd::Signaled(sig), _) => {
            Some(format!("crashes on its recorded values (signal {sig})"))
        }
        _ => None,
    })
}

fn pin_to_core(core: usize) {
    // A core that cannot be bound to (gone offline) leaves the fuzzer unbound.
    let _ = affinity::pin(core);
}

fn libc_personality() {
    extern "C" {
        fn personality(persona: std::os::raw::c_ulong) -> std::os::raw::c_int;
    }
    const ADDR_NO_RANDOMIZE: std::os::raw::c_ulong = 0x0040000;
    // SAFETY: sets a flag on the calling process.
    unsafe {
        personality(ADDR_NO_RANDOMIZE);
    }
}

/// Fuzz one unit, the harness serving executions through the forkserver (one
/// fuzzer per core with [`FuzzConfig::cores`] > 1).
pub fn fuzz(cfg: &FuzzConfig) -> Result<FuzzReport, FuzzError> {
    fuzz_with(cfg, false)
}

/// Fuzz one unit in-process: the fuzzer runs inside the harness and calls the unit
/// directly ([`inprocess`]); [`FuzzConfig::persistent`] and [`FuzzConfig::cores`]
/// (which must be 1) do not apply. Output and report are those of [`fuzz`].
pub fn fuzz_in_process(cfg: &FuzzConfig) -> Result<FuzzReport, FuzzError> {
    fuzz_with(cfg, true)
}

fn fuzz_with(cfg: &FuzzConfig, in_process: bool) -> Result<FuzzReport, FuzzError> {
    check_config(cfg, in_process)?;
    let FuzzDir { out, request, cwd } = prepare_fuzz_dir(cfg)?;
    // A dry run with the recorded values: a unit the harness cannot set up is an
    // error that says why, before any fuzzing.
    let original: Vec<ParamValue> = cfg.unit.params.iter().map(original_value).collect();
    let dry = out.join(DRY_RUN_INPUT);
    std::fs::write(&dry, encode_values(&original)).map_err(io("cannot write", &dry))?;
    if let Some(why) = dry_run(&cfg.program, &request, &dry, &cwd, cfg.timeout)? {
        return Err(FuzzError::Harness(why));
    }
    let mut report = if in_process {
        inprocess::campaign(cfg, &out, &request, &cwd)?
    } else if cfg.cores > 1 {
        parallel::campaign(cfg, &out, &request, &cwd)?
    } else {
        single_core_campaign(cfg, &out, &request, &cwd)?
    };
    sort_solutions(cfg, &out, &request, &cwd, &mut report)?;
    goal_in_crashes(cfg, &out, &mut report);
    Ok(report)
}

/// An input that takes the goal's direction and then crashes is an objective, whose
/// coverage never reaches the feedback that [`goal_reached`] reads: run the crashes
/// once more, through the probe, to see whether one took it. (The gate of a planted
/// bug is crossed by the very input that crashes behind it.) A probe that fails
/// leaves the report as it was.
fn goal_in_crashes(cfg: &FuzzConfig, out: &Path, report: &mut FuzzReport) {
    if cfg.goal.is_empty() || report.goal_after.is_some() || report.crashes.is_empty() {
        return;
    }
    let inputs: Vec<Vec<u8>> = report
        .crashes
        .iter()
        .take(8)
        .filter_map(|p| std::fs::read(p).ok())
        .collect();
    if let Ok(runs) = probe::run_probe(&cfg.program, out, None, &cfg.goal, inputs, cfg.timeout) {
        if runs.iter().any(|r| !r.edges.is_empty()) {
            report.goal_after = Some(report.first_crash_after.unwrap_or(report.seconds));
        }
    }
}

/// Refuse a campaign that cannot run: nothing to fuzz, or cores it cannot have.
fn check_config(cfg: &FuzzConfig, in_process: bool) -> Result<(), FuzzError> {
    if cfg.unit.params.is_empty() {
        return Err(FuzzError::NoParams(cfg.unit.function.clone()));
    }
    let available = available_cores();
    if cfg.cores == 0 || cfg.cores > available {
        return Err(FuzzError::Cores {
            cores: cfg.cores,
            available,
        });
    }
    if in_process && cfg.cores > 1 {
        return Err(FuzzError::InProcessCores(cfg.cores));
    }
    Ok(())
}

/// The paths of a prepared fuzz directory.
struct FuzzDir {
    /// The output directory, absolute.
    out: PathBuf,
    /// The harness's request (`request.bin`).
    request: PathBuf,
    /// The unit's working directory, holding the system test's files.
    cwd: PathBuf,
}

/// Lay the output directory out: AFL's folders, the unit, the harness's request,
/// and a working directory with the system test's files.
fn prepare_fuzz_dir(cfg: &FuzzConfig) -> Result<FuzzDir, FuzzError> {
    let out = lay_out(&cfg.unit, &cfg.out)?;
    Ok(FuzzDir {
        request: out.join("request.bin"),
        cwd: out.join("cwd"),
        out,
    })
}

/// Lay out `out` as a fuzz directory of `unit` (AFL's folders, `unit.unit`, the
/// harness's `request.bin`, `cwd/` with the system test's files), as fuzzing does and
/// lifting needs: for findings made elsewhere (a worker's). Returns `out`, absolute.
pub fn lay_out(unit: &Unit, out: &Path) -> Result<PathBuf, FuzzError> {
    for d in ["queue", "crashes", "timeouts", ".solutions", "cwd"] {
        std::fs::create_dir_all(out.join(d)).map_err(io("cannot create", &out.join(d)))?;
    }
    let out = std::fs::canonicalize(out).map_err(io("cannot resolve", out))?;
    std::fs::write(out.join("unit.unit"), unit.encode())
        .map_err(io("cannot write", &out.join("unit.unit")))?;
    let request = out.join("request.bin");
    let req = FuzzRequest {
        binary_id: unit.binary_id,
        context: unit.context.clone(),
        params: unit.params.clone(),
        stdin: unit.system_test.stdin.clone(),
    };
    std::fs::write(
        &request,
        bincode::serialize(&req).map_err(|e| FuzzError::Libafl(e.to_string()))?,
    )
    .map_err(io("cannot write", &request))?;
    // The unit may reopen the system test's files: give it their working directory.
    let cwd = out.join("cwd");
    for (name, bytes) in &unit.system_test.files {
        let p = cwd.join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(io("cannot create", parent))?;
        }
        std::fs::write(&p, bytes).map_err(io("cannot write", &p))?;
    }
    Ok(out)
}

/// The single-core forkserver campaign, run from the unit's working directory
/// (which the harness inherits) and then back.
pub(crate) fn single_core_campaign(
    cfg: &FuzzConfig,
    out: &Path,
    request: &Path,
    cwd: &Path,
) -> Result<FuzzReport, FuzzError> {
    // Without a current directory (removed under us) there is nothing to go back to.
    let previous_dir = std::env::current_dir().ok();
    std::env::set_current_dir(cwd).map_err(io("cannot enter", cwd))?;
    // Recorded addresses of C library objects stay valid only without ASLR; the
    // harness inherits this, and the core pinning.
    libc_personality();
    if let Some(core) = cfg.pin_core {
        pin_to_core(core);
    }
    let result = forkserver::campaign(cfg, out, request);
    let back = match &previous_dir {
        Some(d) => std::env::set_current_dir(d).map_err(io("cannot go back to", d)),
        None => Ok(()),
    };
    let report = result?;
    back?;
    Ok(report)
}

/// Sort the objective's finds into crashes and timeouts by running each alone,
/// within a bound of its own: many hangs must not hold the caller past its time
/// (what is left stays in `.solutions`). Each runs for twice the limit the fuzzer
/// judged it by: the timeout, or in-process the hang limit measured on the recorded
/// values (half a second at least, for the harness to start): a crash shows within
/// that, and a hang is a hang by the same measure the fuzzer used. (With twice the
/// timeout for each, a dc slice's dozen hangs were mostly left unsorted, and lifting
/// then waited for each as a crash that might be.)
fn sort_solutions(
    cfg: &FuzzConfig,
    out: &Path,
    request: &Path,
    cwd: &Path,
    report: &mut FuzzReport,
) -> Result<(), FuzzError> {
    let limit = match report.hang_limit_ms {
        Some(ms) => (Duration::from_millis(ms) * 2)
            .max(Duration::from_millis(500))
            .min(cfg.timeout * 2),
        None => cfg.timeout * 2,
    };
    // Two hangs' worth and a little: a campaign's unit slice is 10 s, and sorting
    // once took twice that on dc (hangs reading a stream at its end).
    let sort_end = Instant::now() + Duration::from_secs(2) + limit * 2;
    let solutions = out.join(".solutions");
    for entry in std::fs::read_dir(&solutions).map_err(io("cannot list", &solutions))? {
        let entry = entry.map_err(io("cannot list", &solutions))?;
        if Instant::now() > sort_end {
            break;
        }
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.')
            || path
                .extension()
                .is_some_and(|e| e == "json" || e == "metadata")
        {
            continue;
        }
        let (kind, dir, signal) = match run_input(&cfg.program, request, &path, cwd, limit)? {
            HarnessEnd::TimedOut => ("timeout", "timeouts", None),
            HarnessEnd::Signaled(sig) => ("crash", "crashes", Some(sig)),
            HarnessEnd::Exited(_) => continue, // did not reproduce alone
        };
        let dest = out.join(dir).join(&name);
        std::fs::rename(&path, &dest).map_err(io("cannot move a finding to", &dest))?;
        write_finding(&cfg.unit, kind, signal, &dest)?;
        if kind == "crash" {
            report.crashes.push(dest);
        } else {
            report.timeouts.push(dest);
        }
    }
    Ok(())
}

/// Describe the finding `input` next to it (`<input>.json`), with its decoded values.
fn write_finding(
    unit: &Unit,
    kind: &str,
    signal: Option<i32>,
    input: &Path,
) -> Result<(), FuzzError> {
    let bytes = std::fs::read(input).map_err(io("cannot read", input))?;
    let values = unit
        .params
        .iter()
        .zip(decode_values(&unit.params, &bytes))
        .map(|(p, v)| describe(p, &v))
        .collect();
    let finding = Finding {
        kind: kind.into(),
        signal,
        input: input.to_owned(),
        values,
    };
    let json = input.with_extension("json");
    let text = serde_json::to_vec_pretty(&finding)
        .map_err(|e| FuzzError::Libafl(format!("cannot encode {}: {e}", json.display())))?;
    std::fs::write(&json, text).map_err(io("cannot write", &json))
}

/// A file built with the workspace: the path in `env` if set, else `name` next to the
/// running executable or one directory up (test binaries run from
/// `target/<profile>/deps`). The error is the path that was expected.
fn find_next_to_exe(name: &str, env: &str) -> Result<PathBuf, PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        let p = PathBuf::from(p);
        return if p.is_file() { Ok(p) } else { Err(p) };
    }
    let exe = std::env::current_exe().unwrap_or_default();
    let here = exe
        .parent()
        .map(|d| d.join(name))
        .unwrap_or_else(|| PathBuf::from(name));
    let up = exe.parent().and_then(Path::parent).map(|d| d.join(name));
    [Some(here.clone()), up]
        .into_iter()
        .flatten()
        .find(|p| p.is_file())
        .ok_or(here)
}

/// The cores this process may run on.
fn available_cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

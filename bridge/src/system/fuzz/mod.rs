//! System-level fuzzing: LibAFL over structured system tests (arguments, stdin, file
//! contents), running the instrumented program once per execution in a fresh working
//! directory.
//!
//! This is the first step of a campaign and, alone, its `--system-only` baseline. The
//! program needs no harness: in the runtime's passive mode it attaches its
//! SanitizerCoverage counters to the shared map named by `__AFL_SHM_ID`, so a plain
//! spawned run reports its edges ([`SysExecutor`] spawns it, a hit-count map observer
//! reads them). Inputs are [`SysInput`]s — the JSON system test, held as bytes — and
//! [`SysMutator`]'s structured mutations (byte level, the Radamsa-like line and number
//! mutations the bridge paper used, dictionary tokens, argument lists, crossover
//! between tests) stack a few per execution.
//!
//! Output, written as soon as found: `queue/<hash>.json` for every input that reached
//! new coverage (seeds included), `crashes/<hash>.json` and `timeouts/<hash>.json` for
//! inputs that crash or hang with coverage no earlier finding had — all standard system
//! tests. A fuzzer started on an existing output directory reloads its queue.
//!
//! It owns the system-level fuzzing loop only: no recording, carving or lifting, and no
//! progress output (the caller reports; errors are returned).

mod i2s;
mod trim;

use crate::binary::Binary;
use crate::system::forkserver::ForkServer;
use trestle_abi::hooks;
use trestle_abi::sysserver::ChildLimits;
use crate::validate::sandbox::is_crash_signal;
use crate::system::systest::{self, NamedTest};
use anyhow::{bail, Context as _, Result};
use libafl::corpus::{Corpus, CorpusId, InMemoryCorpus, InMemoryOnDiskCorpus, Testcase};
use libafl::events::SimpleEventManager;
use libafl::executors::{Executor, ExitKind, HasObservers};
use libafl::feedbacks::{Feedback, MapFeedbackMetadata, MaxMapFeedback, StateInitializer, TimeFeedback};
use libafl::fuzzer::{BloomInputFilter, Evaluator, ExecuteInputResult, Fuzzer, StdFuzzer};
use libafl::inputs::Input;
use libafl::monitors::NopMonitor;
use libafl::mutators::{HavocScheduledMutator, MutationResult, Mutator};
use libafl::observers::{CanTrack, HitcountsMapObserver, StdMapObserver, TimeObserver};
use libafl::schedulers::{IndexesLenTimeMinimizerScheduler, QueueScheduler};
use libafl::stages::{StdMutationalStage, TracingStage};
use libafl::state::{HasCorpus, HasExecutions, HasRand, StdState};
use libafl::{feedback_and_fast, feedback_or, HasNamedMetadata};
use libafl_bolts::rands::{Rand, StdRand};
use libafl_bolts::shmem::{ShMem, ShMemProvider, UnixShMem, UnixShMemProvider};
use libafl_bolts::tuples::{tuple_list, RefIndexable};
use libafl_bolts::{HasLen, Named};
use libafl_targets::{AflppCmpLogMap, CmpLogMap, CmpLogObserver};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::ffi::OsStr;
use std::num::NonZeroUsize;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use trestle_abi::unit::SystemTest;

/// Longest stdin or file content a mutation makes.
pub const MAX_CONTENT: usize = 64 << 10;
/// Most arguments a mutation makes.
pub const MAX_ARGS: usize = 64;
/// Longest argument a mutation makes.
pub const MAX_ARG_LEN: usize = 4096;
/// Edge map size offered to the program (the unit fuzzer's, so one build serves both).
const MAP_SIZE: usize = trestle_unit_fuzz::MAP_SIZE;
/// Largest file a fuzzed program may write (RLIMIT_FSIZE).
const MAX_WRITE: u64 = 64 << 20;
/// Executions per corpus entry each time it is picked (bounds how far a slice overruns).
const EXECS_PER_PICK: usize = 32;

/// Executions at most for trimming one queue entry.
const MAX_TRIM_RUNS: usize = 256;

// ---------------------------------------------------------------------------------
// Input
// ---------------------------------------------------------------------------------

/// A system test as the fuzzer sees it: arguments, stdin and file contents as bytes;
/// the environment fixed from the seed it descends from.
///
/// Always normalised ([`SysInput::from_test`]), so that it and the JSON file written for
/// it run the same: arguments are UTF-8 without NUL bytes, and sizes are bounded.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SysInput {
    /// Command-line arguments after the program name.
    pub args: Vec<Vec<u8>>,
    /// Standard input (empty: none).
    pub stdin: Vec<u8>,
    /// Files created in the working directory, by relative path (names come from seeds).
    pub files: BTreeMap<String, Vec<u8>>,
    /// Environment variables.
    pub env: BTreeMap<String, String>,
}

impl SysInput {
    /// The input for a system test.
    pub fn from_test(t: &SystemTest) -> SysInput {
        let mut input = SysInput {
            args: t.args.iter().map(|a| a.as_bytes().to_vec()).collect(),
            stdin: t.stdin.clone().unwrap_or_default(),
            files: t.files.clone(),
            env: t.env.clone(),
        };
        input.normalise();
        input
    }

    /// The system test this input is.
    pub fn to_test(&self) -> SystemTest {
        SystemTest {
            args: self.args.iter().map(|a| String::from_utf8_lossy(a).into_owned()).collect(),
            stdin: (!self.stdin.is_empty()).then(|| self.stdin.clone()),
            files: self.files.clone(),
            env: self.env.clone(),
        }
    }

    /// The JSON system test.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(&systest::to_json(&self.to_test())).unwrap_or_default()
    }

    /// Its file name: a stable hash of its JSON form.
    pub fn file_name(&self) -> String {
        format!("{:016x}.json", trestle_abi::ids::fnv1a64(&self.to_json()))
    }

    /// A test whose files would land outside its working directory is refused (the
    /// loader refuses such files too; tests made in memory are checked here).
    fn check(t: &SystemTest) -> Result<()> {
        for name in t.files.keys() {
            let p = Path::new(name);
            if name.is_empty() || p.is_absolute() || p.components().any(|c| !matches!(c, std::path::Component::Normal(_))) {
                bail!("file name {name:?} must be a relative path inside the test directory");
            }
        }
        Ok(())
    }

    /// Bound the sizes; make arguments what a command line can carry and JSON can hold.
    fn normalise(&mut self) {
        self.args.truncate(MAX_ARGS);
        for a in &mut self.args {
            a.retain(|&b| b != 0);
            a.truncate(MAX_ARG_LEN);
            if std::str::from_utf8(a).is_err() {
                *a = String::from_utf8_lossy(a).into_owned().into_bytes();
            }
        }
        self.stdin.truncate(MAX_CONTENT);
        for v in self.files.values_mut() {
            v.truncate(MAX_CONTENT);
        }
    }
}

impl Input for SysInput {
    fn to_file<P: AsRef<Path>>(&self, path: P) -> Result<(), libafl::Error> {
        libafl_bolts::fs::write_file_atomic(path, &self.to_json())
    }

    fn from_file<P: AsRef<Path>>(path: P) -> Result<Self, libafl::Error> {
        systest::load_test(path.as_ref())
            .map(|t| SysInput::from_test(&t))
            .map_err(|e| libafl::Error::illegal_argument(format!("{e:#}")))
    }

    fn generate_name(&self, _id: Option<CorpusId>) -> String {
        self.file_name()
    }
}

impl HasLen for SysInput {
    fn len(&self) -> usize {
        self.args.iter().map(|a| a.len() + 1).sum::<usize>() + self.stdin.len() + self.files.values().map(Vec::len).sum::<usize>()
    }
}

// ---------------------------------------------------------------------------------
// Executor
// ---------------------------------------------------------------------------------

/// Runs the program on one input: the test's files in a fresh working directory, stdin
/// from a file, stdout and stderr discarded, its own process group (killed whole on
/// timeout), no core dumps, bounded file writes. A program built with `trestle-cc`
/// runs as a forkserver ([`ForkServer`]): started once, it forks a child per input
/// at the start of `main`; any other program is spawned per input (said once). A
/// death by a crash signal is a crash; exceeding the wall limit is a timeout; any exit
/// status is a normal end.
pub struct SysExecutor<OT> {
    program: PathBuf,
    /// Working directories and the stdin file, in memory where possible; removed
    /// with the executor.
    work: tempfile::TempDir,
    timeout: Duration,
    /// Set for every run, after the test's own environment.
    env: Vec<(String, String)>,
    observers: OT,
    /// Suffix of the working directory; moves on when one cannot be removed.
    slot: u64,
    /// The forkserver, once started.
    server: Option<ForkServer>,
    /// How the program runs: `None` until the first run decides.
    serving: Option<bool>,
    /// Forkservers started after the first (one died).
    pub restarts: u64,
    /// What the stdin file holds now.
    last_stdin: Option<Vec<u8>>,
    /// Say so when the program cannot serve (the main executor does; a second one
    /// for the same program need not).
    notice: bool,
    /// Limits of every run (a forkserver child sets them on itself).
    limits: ChildLimits,
    /// bubblewrap, to run the program (its forkserver) isolated; `None`: not.
    bwrap: Option<PathBuf>,
}

impl<OT> SysExecutor<OT> {
    fn new(program: &Path, cfg: &SysFuzzConfig, timeout: Duration, env: Vec<(String, String)>, observers: OT, bwrap: Option<PathBuf>) -> Result<Self> {
        let limits = ChildLimits { cpu_secs: crate::validate::sandbox::cpu_limit(timeout), address_space: cfg.memory, open_files: 0 };
        let no_forkserver = cfg.no_forkserver;
        Ok(SysExecutor {
            limits,
            bwrap,
            program: program.to_path_buf(),
            work: systest::scratch_dir("trestle-sysfuzz-")?,
            timeout,
            env,
            observers,
            slot: 0,
            server: None,
            serving: if no_forkserver { Some(false) } else { None },
            restarts: 0,
            last_stdin: None,
            notice: true,
        })
    }

    /// The program with its environment and limits, for one run or for a server;
    /// inside bubblewrap when sandboxed (writing only to its working directories,
    /// sharing trestle's System V IPC for the coverage map).
    fn command(&self) -> Command {
        let mut cmd = match &self.bwrap {
            Some(bwrap) => crate::validate::sandbox::bwrap_command(bwrap, &self.program, &[], &[self.work.path()], true),
            None => Command::new(&self.program),
        };
        // A fuzzed run is a plain run: never recording, replaying or serving units.
        cmd.env_remove(trestle_abi::hooks::ENV_TRACE_DIR)
            .env_remove(trestle_abi::hooks::ENV_REPLAY)
            .env_remove(trestle_abi::fuzz::ENV_FUZZ)
            .env_remove(trestle_abi::sysserver::ENV_SYS_FORKSERVER)
            .env("ASAN_OPTIONS", "abort_on_error=1:detect_leaks=0:symbolize=0")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        // SAFETY: setrlimit is async-signal-safe and touches only the child (and,
        // for a server, the children it forks).
        unsafe {
            cmd.pre_exec(|| {
                let core = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
                libc::setrlimit(libc::RLIMIT_CORE, &core);
                let fsize = libc::rlimit { rlim_cur: MAX_WRITE, rlim_max: MAX_WRITE };
                libc::setrlimit(libc::RLIMIT_FSIZE, &fsize);
                Ok(())
            });
        }
        cmd
    }

    fn run(&mut self, input: &SysInput) -> Result<ExitKind, libafl::Error> {
        let mut dir = self.work.path().join(format!("cwd-{}", self.slot));
        // An empty directory left by the last run is as fresh as a new one.
        let reusable = std::fs::read_dir(&dir).is_ok_and(|mut d| d.next().is_none());
        if !reusable {
            while dir.exists() && std::fs::remove_dir_all(&dir).is_err() {
                self.slot += 1;
                dir = self.work.path().join(format!("cwd-{}", self.slot));
            }
            std::fs::create_dir(&dir)?;
        }
        for (name, bytes) in &input.files {
            let p = dir.join(name);
            if let Some(parent) = p.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&p, bytes)?;
        }
        // Outside the working directory, as in `run_test`; written only when it
        // changed (the program opens it afresh every run).
        let stdin_path = self.work.path().join("stdin");
        if self.last_stdin.as_deref() != Some(&input.stdin[..]) {
            std::fs::write(&stdin_path, &input.stdin)?;
            self.last_stdin = Some(input.stdin.clone());
        }
        let kind = match self.serve(input, &dir, &stdin_path)? {
            Some(kind) => kind,
            None => self.spawn(input, &dir, &stdin_path)?,
        };
        let empty = std::fs::read_dir(&dir).is_ok_and(|mut d| d.next().is_none());
        if !empty && std::fs::remove_dir_all(&dir).is_err() {
            self.slot += 1;
        }
        Ok(kind)
    }

    /// Start the forkserver if the program can serve (deciding on the first try);
    /// false if it cannot (then it is spawned per test).
    fn start_server(&mut self) -> Result<bool, libafl::Error> {
        if self.serving == Some(false) {
            return Ok(false);
        }
        let mut cmd = self.command();
        // Resolve every symbol once in the server, not lazily in every child
        // (AFL++ does the same).
        cmd.env("LD_BIND_NOW", "1");
        let started = ForkServer::start(cmd)
            .map_err(|e| libafl::Error::unknown(format!("cannot run program {}: {e}", self.program.display())))?;
        match (started, self.serving) {
            (Some(s), first) => {
                self.restarts += u64::from(first.is_some());
                self.server = Some(s);
                self.serving = Some(true);
                Ok(true)
            }
            (None, None) => {
                if self.notice {
                    eprintln!(
                        "trestle: {} does not serve system tests (not built with trestle-cc, or it never reaches main): starting it for every test",
                        self.program.display()
                    );
                }
                self.serving = Some(false);
                Ok(false)
            }
            (None, Some(_)) => Ok(false),
        }
    }

    /// The coverage-map entries the program uses, if it serves (started here if
    /// not yet): the observers need not look at more.
    fn map_len(&mut self) -> Result<Option<usize>, libafl::Error> {
        if self.server.is_none() && !self.start_server()? {
            return Ok(None);
        }
        Ok(self.server.as_ref().map(|s| s.edges))
    }

    /// The same executor observing with `observers`.
    fn with_observers<OT2>(self, observers: OT2) -> SysExecutor<OT2> {
        SysExecutor {
            program: self.program,
            work: self.work,
            timeout: self.timeout,
            env: self.env,
            observers,
            slot: self.slot,
            server: self.server,
            serving: self.serving,
            restarts: self.restarts,
            last_stdin: self.last_stdin,
            notice: self.notice,
            limits: self.limits,
            bwrap: self.bwrap,
        }
    }

    /// Run through the forkserver; `None` if the program is no server (or the
    /// server died during this run: the next run starts a new one).
    fn serve(&mut self, input: &SysInput, dir: &Path, stdin: &Path) -> Result<Option<ExitKind>, libafl::Error> {
        if self.serving == Some(false) {
            return Ok(None);
        }
        if self.server.is_none() && !self.start_server()? {
            return Ok(None);
        }
        let server = self.server.as_mut().expect("started above");
        let mut argv: Vec<&[u8]> = vec![self.program.as_os_str().as_bytes()];
        argv.extend(input.args.iter().map(Vec::as_slice));
        let env: Vec<(&[u8], &[u8])> = input.env.iter().map(|(k, v)| (k.as_bytes(), v.as_bytes())).collect();
        let cwd = std::path::absolute(dir)?;
        let stdin = std::path::absolute(stdin)?;
        let req = crate::system::forkserver::Request { argv: &argv, env: &env, cwd: &cwd, stdin: &stdin, stdout: None, stderr: None, limits: self.limits };
        Ok(match server.run(&req, self.timeout) {
            crate::system::forkserver::RunEnd::Ended(e) => {
                let status = e.status as i32;
                Some(if libc::WIFSIGNALED(status) && is_crash_signal(libc::WTERMSIG(status)) { ExitKind::Crash } else { ExitKind::Ok })
            }
            crate::system::forkserver::RunEnd::Timeout => Some(ExitKind::Timeout),
            crate::system::forkserver::RunEnd::ServerDied => {
                self.server = None;
                None
            }
        })
    }

    /// Start the program for this input alone.
    fn spawn(&mut self, input: &SysInput, dir: &Path, stdin_path: &Path) -> Result<ExitKind, libafl::Error> {
        let mut cmd = self.command();
        cmd.args(input.args.iter().map(|a| OsStr::from_bytes(a))).current_dir(dir).envs(&input.env).envs(self.env.iter().map(|(k, v)| (k, v)));
        let limits = self.limits;
        // SAFETY: setrlimit is async-signal-safe and touches only the child.
        unsafe {
            cmd.pre_exec(move || {
                for (resource, value) in [(libc::RLIMIT_CPU, limits.cpu_secs), (libc::RLIMIT_AS, limits.address_space)] {
                    if value > 0 {
                        libc::setrlimit(resource, &libc::rlimit { rlim_cur: value, rlim_max: value });
                    }
                }
                Ok(())
            });
        }
        let quiet = crate::system::launch::Capture { stdout: false, stderr: false };
        let ended = crate::system::launch::run_to_end(&mut cmd, stdin_path, quiet, self.timeout)
            .map_err(|e| libafl::Error::unknown(format!("cannot run program {}: {e:#}", self.program.display())))?;
        Ok(match ended.status {
            systest::RunStatus::Signaled(sig) if is_crash_signal(sig) => ExitKind::Crash,
            systest::RunStatus::TimedOut => ExitKind::Timeout,
            _ => ExitKind::Ok,
        })
    }
}

impl<EM, S, Z, OT> Executor<EM, SysInput, S, Z> for SysExecutor<OT>
where
    S: HasExecutions,
{
    fn run_target(&mut self, _fuzzer: &mut Z, state: &mut S, _mgr: &mut EM, input: &SysInput) -> Result<ExitKind, libafl::Error> {
        *state.executions_mut() += 1;
        self.run(input)
    }
}

impl<OT> HasObservers for SysExecutor<OT> {
    type Observers = OT;

    fn observers(&self) -> RefIndexable<&Self::Observers, Self::Observers> {
        RefIndexable::from(&self.observers)
    }

    fn observers_mut(&mut self) -> RefIndexable<&mut Self::Observers, Self::Observers> {
        RefIndexable::from(&mut self.observers)
    }
}

// ---------------------------------------------------------------------------------
// Findings
// ---------------------------------------------------------------------------------

/// Findings written since the last slice report.
#[derive(Debug, Default)]
struct Found {
    crashes: Vec<PathBuf>,
    timeouts: Vec<PathBuf>,
}

/// The objective's first half: a crash or a timeout. When the whole objective holds
/// (with new coverage among findings), writes the input to `crashes/` or `timeouts/`
/// at once, so that a killed fuzzer loses nothing it found.
pub struct FindingFeedback {
    crashes: PathBuf,
    timeouts: PathBuf,
    last: ExitKind,
    found: Arc<Mutex<Found>>,
}

impl Named for FindingFeedback {
    fn name(&self) -> &Cow<'static, str> {
        static NAME: Cow<'static, str> = Cow::Borrowed("FindingFeedback");
        &NAME
    }
}

impl<S> StateInitializer<S> for FindingFeedback {}

impl<EM, OT, S> Feedback<EM, SysInput, OT, S> for FindingFeedback {
    fn is_interesting(
        &mut self,
        _state: &mut S,
        _manager: &mut EM,
        _input: &SysInput,
        _observers: &OT,
        exit_kind: &ExitKind,
    ) -> Result<bool, libafl::Error> {
        self.last = *exit_kind;
        Ok(matches!(exit_kind, ExitKind::Crash | ExitKind::Timeout))
    }

    fn append_metadata(
        &mut self,
        _state: &mut S,
        _manager: &mut EM,
        _observers: &OT,
        testcase: &mut Testcase<SysInput>,
    ) -> Result<(), libafl::Error> {
        let Some(input) = testcase.input() else { return Ok(()) };
        let timeout = self.last == ExitKind::Timeout;
        let path = if timeout { &self.timeouts } else { &self.crashes }.join(input.file_name());
        input.to_file(&path)?;
        let mut found = self.found.lock().unwrap_or_else(|p| p.into_inner());
        if timeout {
            found.timeouts.push(path);
        } else {
            found.crashes.push(path);
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------
// Mutations
// ---------------------------------------------------------------------------------

/// One component of an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Arg(usize),
    Stdin,
    File(usize),
}

fn below<R: Rand>(rand: &mut R, n: usize) -> usize {
    match NonZeroUsize::new(n) {
        Some(n) if n.get() > 1 => rand.below(n),
        _ => 0,
    }
}

/// A length from 1 to `max`, small ones likelier.
fn small_len<R: Rand>(rand: &mut R, max: usize) -> usize {
    let bound = 1 + below(rand, max.max(1));
    1 + below(rand, bound)
}

fn part_mut(input: &mut SysInput, p: Part) -> &mut Vec<u8> {
    match p {
        Part::Arg(i) => &mut input.args[i],
        Part::Stdin => &mut input.stdin,
        Part::File(k) => input.files.values_mut().nth(k).expect("a file part names an existing file"),
    }
}

fn part_limit(p: Part) -> usize {
    match p {
        Part::Arg(_) => MAX_ARG_LEN,
        _ => MAX_CONTENT,
    }
}

/// A component to mutate: non-empty ones three times likelier; stdin always a
/// candidate (a program may read it although the seed gave none). With `content`,
/// stdin and files only.
fn pick_part<R: Rand>(rand: &mut R, input: &SysInput, content: bool) -> Part {
    let mut parts = vec![(Part::Stdin, if input.stdin.is_empty() { 1 } else { 3 })];
    for (k, v) in input.files.values().enumerate() {
        parts.push((Part::File(k), if v.is_empty() { 1 } else { 3 }));
    }
    if !content {
        for (i, a) in input.args.iter().enumerate() {
            parts.push((Part::Arg(i), if a.is_empty() { 1 } else { 3 }));
        }
    }
    let total: usize = parts.iter().map(|p| p.1).sum();
    let mut r = below(rand, total);
    for (p, w) in &parts {
        if r < *w {
            return *p;
        }
        r -= w;
    }
    Part::Stdin
}

/// Lines of `b`, each with its terminating newline (the last may have none).
fn lines(b: &[u8]) -> Vec<&[u8]> {
    b.split_inclusive(|&c| c == b'\n').collect()
}

fn with_newline(mut line: Vec<u8>) -> Vec<u8> {
    if line.last() != Some(&b'\n') {
        line.push(b'\n');
    }
    line
}

/// A random corpus entry's input (the one being mutated when it is drawn: `None`).
fn other_input<S: HasRand + HasCorpus<SysInput>>(state: &mut S) -> Option<SysInput> {
    let n = state.corpus().count();
    if n == 0 {
        return None;
    }
    let k = below(state.rand_mut(), n);
    let corpus = state.corpus();
    let id = corpus.nth(k);
    let mut tc = corpus.get(id).ok()?.try_borrow_mut().ok()?;
    tc.load_input(corpus).ok().cloned()
}

/// A random non-empty component of `input`, as bytes.
fn some_component<R: Rand>(rand: &mut R, input: &SysInput) -> Option<Vec<u8>> {
    let mut parts: Vec<&[u8]> = Vec::new();
    if !input.stdin.is_empty() {
        parts.push(&input.stdin);
    }
    parts.extend(input.files.values().filter(|v| !v.is_empty()).map(Vec::as_slice));
    if parts.is_empty() {
        parts.extend(input.args.iter().filter(|a| !a.is_empty()).map(Vec::as_slice));
    }
    if parts.is_empty() {
        return None;
    }
    Some(parts[below(rand, parts.len())].to_vec())
}

/// Byte-level mutations of one component: bit flip, random byte, interesting byte
/// (0, 0xff, 0x7f, 0x80), random printable byte, insert / delete / duplicate a range.
pub struct ByteMutator;

impl<S: HasRand> Mutator<SysInput, S> for ByteMutator {
    fn mutate(&mut self, state: &mut S, input: &mut SysInput) -> Result<MutationResult, libafl::Error> {
        let rand = state.rand_mut();
        let part = pick_part(rand, input, false);
        let max = part_limit(part);
        let buf = part_mut(input, part);
        let len = buf.len();
        // Deleting is twice as likely as inserting or duplicating (as in AFL's havoc):
        // inputs stay small, and small inputs run fast.
        let op = if len == 0 { 4 } else { below(rand, 8) };
        match op {
            0 => {
                let i = below(rand, len);
                buf[i] ^= 1 << below(rand, 8);
            }
            1 => {
                let i = below(rand, len);
                buf[i] = rand.next() as u8;
            }
            2 => {
                let i = below(rand, len);
                buf[i] = [0u8, 0xff, 0x7f, 0x80][below(rand, 4)];
            }
            3 => {
                let i = below(rand, len);
                buf[i] = 0x20 + below(rand, 0x5f) as u8;
            }
            4 => {
                // Insert random bytes, printable ones or a copy of a range.
                let pos = below(rand, len + 1);
                let n = small_len(rand, 32);
                let bytes: Vec<u8> = match (len, below(rand, 3)) {
                    (l, 0) if l > 0 => {
                        let start = below(rand, l);
                        buf[start..(start + n).min(l)].to_vec()
                    }
                    (_, 1) => (0..n).map(|_| 0x20 + below(rand, 0x5f) as u8).collect(),
                    _ => (0..n).map(|_| rand.next() as u8).collect(),
                };
                buf.splice(pos..pos, bytes);
            }
            5 | 6 => {
                let start = below(rand, len);
                let n = small_len(rand, len - start);
                buf.drain(start..start + n);
            }
            _ => {
                let start = below(rand, len);
                let n = small_len(rand, (len - start).min(256));
                let copy = buf[start..start + n].to_vec();
                for _ in 0..small_len(rand, 4) {
                    buf.splice(start + n..start + n, copy.iter().copied());
                }
            }
        }
        buf.truncate(max);
        input.normalise();
        Ok(MutationResult::Mutated)
    }
    fn post_exec(&mut self, _state: &mut S, _new: Option<CorpusId>) -> Result<(), libafl::Error> {
        Ok(())
    }
}

impl Named for ByteMutator {
    fn name(&self) -> &Cow<'static, str> {
        static NAME: Cow<'static, str> = Cow::Borrowed("ByteMutator");
        &NAME
    }
}

/// Radamsa-like line mutations of stdin or a file: repeat a line, delete one, swap
/// two, insert or replace one with a line from elsewhere (any test in the corpus).
pub struct LineMutator;

impl<S: HasRand + HasCorpus<SysInput>> Mutator<SysInput, S> for LineMutator {
    fn mutate(&mut self, state: &mut S, input: &mut SysInput) -> Result<MutationResult, libafl::Error> {
        // Op 5 deletes, like op 1: deleting twice as likely as repeating or inserting.
        let op = below(state.rand_mut(), 6);
        // A line from elsewhere, for ops 3 and 4.
        let foreign = if op == 3 || op == 4 {
            let source = if state.rand_mut().coinflip(0.5) { other_input(state) } else { None };
            let source = source.as_ref().unwrap_or(input);
            let rand = state.rand_mut();
            let Some(comp) = some_component(rand, source) else { return Ok(MutationResult::Skipped) };
            let ls = lines(&comp);
            Some(with_newline(ls[below(rand, ls.len())].to_vec()))
        } else {
            None
        };
        let rand = state.rand_mut();
        let part = pick_part(rand, input, true);
        let buf = part_mut(input, part);
        let mut ls: Vec<Vec<u8>> = lines(buf).into_iter().map(<[u8]>::to_vec).collect();
        if let Some(last) = ls.last_mut() {
            // Lines move around: each needs its newline.
            if last.last() != Some(&b'\n') {
                last.push(b'\n');
            }
        }
        let n = ls.len();
        match (op, foreign) {
            (0, _) if n > 0 => {
                let i = below(rand, n);
                let line = ls[i].clone();
                let times = small_len(rand, 16);
                ls.splice(i..i, std::iter::repeat_n(line, times));
            }
            (1 | 5, _) if n > 0 => {
                ls.remove(below(rand, n));
            }
            (2, _) if n > 1 => {
                let (i, j) = (below(rand, n), below(rand, n));
                ls.swap(i, j);
            }
            (3, Some(line)) => {
                ls.insert(below(rand, n + 1), line);
            }
            (4, Some(line)) if n > 0 => {
                ls[below(rand, n)] = line;
            }
            _ => return Ok(MutationResult::Skipped),
        }
        *buf = ls.concat();
        buf.truncate(MAX_CONTENT);
        Ok(MutationResult::Mutated)
    }
    fn post_exec(&mut self, _state: &mut S, _new: Option<CorpusId>) -> Result<(), libafl::Error> {
        Ok(())
    }
}

impl Named for LineMutator {
    fn name(&self) -> &Cow<'static, str> {
        static NAME: Cow<'static, str> = Cow::Borrowed("LineMutator");
        &NAME
    }
}

/// Decimal numbers in `b`: (start, end) of each, with a leading minus sign when it
/// does not follow a letter or digit.
fn numbers(b: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            let mut start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            if start > 0 && b[start - 1] == b'-' && (start < 2 || !b[start - 2].is_ascii_alphanumeric()) {
                start -= 1;
            }
            out.push((start, i));
        } else {
            i += 1;
        }
    }
    out
}

/// Values at the edges of integer types.
const BOUNDARIES: &[i128] = &[
    0,
    -1,
    1,
    2,
    7,
    8,
    16,
    32,
    64,
    100,
    127,
    128,
    -128,
    255,
    256,
    1000,
    1024,
    4096,
    32767,
    -32768,
    65535,
    65536,
    i32::MAX as i128,
    i32::MIN as i128,
    1 << 31,
    u32::MAX as i128,
    1 << 32,
    i64::MAX as i128,
    i64::MIN as i128,
    1 << 63,
    u64::MAX as i128,
];

/// Numbers in text: a decimal token becomes itself ± a small delta, a boundary value,
/// a compared constant of the program, its negation, double or half, or a random
/// number.
pub struct NumberMutator {
    ints: Vec<i128>,
}

impl<S: HasRand> Mutator<SysInput, S> for NumberMutator {
    fn mutate(&mut self, state: &mut S, input: &mut SysInput) -> Result<MutationResult, libafl::Error> {
        let rand = state.rand_mut();
        let part = pick_part(rand, input, false);
        let buf = part_mut(input, part);
        let nums = numbers(buf);
        if nums.is_empty() {
            return Ok(MutationResult::Skipped);
        }
        let (start, end) = nums[below(rand, nums.len())];
        let old: i128 = std::str::from_utf8(&buf[start..end]).ok().and_then(|s| s.parse().ok()).unwrap_or(0);
        let new = match below(rand, 7) {
            0 | 1 => {
                let d = small_len(rand, 16) as i128;
                if rand.coinflip(0.5) {
                    old.saturating_add(d)
                } else {
                    old.saturating_sub(d)
                }
            }
            2 | 3 => BOUNDARIES[below(rand, BOUNDARIES.len())],
            4 if !self.ints.is_empty() => self.ints[below(rand, self.ints.len())],
            5 => match below(rand, 3) {
                0 => old.saturating_neg(),
                1 => old.saturating_mul(2),
                _ => old / 2,
            },
            _ => (rand.next() >> below(rand, 64)) as i128,
        };
        buf.splice(start..end, new.to_string().into_bytes());
        input.normalise();
        Ok(MutationResult::Mutated)
    }
    fn post_exec(&mut self, _state: &mut S, _new: Option<CorpusId>) -> Result<(), libafl::Error> {
        Ok(())
    }
}

impl Named for NumberMutator {
    fn name(&self) -> &Cow<'static, str> {
        static NAME: Cow<'static, str> = Cow::Borrowed("NumberMutator");
        &NAME
    }
}

/// Whitespace-separated words of `b`: (start, end) of each.
fn words(b: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !b[i].is_ascii_whitespace() {
            i += 1;
        }
        out.push((start, i));
    }
    out
}

/// Dictionary tokens (string literals of the program, its compared constants in
/// decimal): replace a word, insert at a word boundary or anywhere, overwrite.
pub struct TokenMutator {
    tokens: Vec<Vec<u8>>,
}

impl<S: HasRand> Mutator<SysInput, S> for TokenMutator {
    fn mutate(&mut self, state: &mut S, input: &mut SysInput) -> Result<MutationResult, libafl::Error> {
        if self.tokens.is_empty() {
            return Ok(MutationResult::Skipped);
        }
        let rand = state.rand_mut();
        let token = self.tokens[below(rand, self.tokens.len())].clone();
        let part = pick_part(rand, input, false);
        let buf = part_mut(input, part);
        let ws = words(buf);
        match below(rand, 4) {
            0 | 1 if !ws.is_empty() => {
                let (s, e) = ws[below(rand, ws.len())];
                buf.splice(s..e, token);
            }
            2 => {
                // At a word boundary, with a separating space.
                let mut bounds = vec![0, buf.len()];
                bounds.extend(ws.iter().flat_map(|&(s, e)| [s, e]));
                let pos = bounds[below(rand, bounds.len())];
                let mut t = token;
                if pos > 0 && !buf[pos - 1].is_ascii_whitespace() {
                    t.insert(0, b' ');
                }
                if pos < buf.len() && !buf[pos].is_ascii_whitespace() {
                    t.push(b' ');
                }
                buf.splice(pos..pos, t);
            }
            _ => {
                let pos = below(rand, buf.len() + 1);
                let end = (pos + token.len()).min(buf.len());
                if rand.coinflip(0.5) {
                    buf.splice(pos..end, token);
                } else {
                    buf.splice(pos..pos, token);
                }
            }
        }
        input.normalise();
        Ok(MutationResult::Mutated)
    }
    fn post_exec(&mut self, _state: &mut S, _new: Option<CorpusId>) -> Result<(), libafl::Error> {
        Ok(())
    }
}

impl Named for TokenMutator {
    fn name(&self) -> &Cow<'static, str> {
        static NAME: Cow<'static, str> = Cow::Borrowed("TokenMutator");
        &NAME
    }
}

/// The argument list: replace an argument by another test's (or a dictionary token),
/// insert one (another test's, a token, a copy), delete one (never one that names a
/// file of the test), swap two, repeat a run of them.
pub struct ArgListMutator {
    tokens: Vec<Vec<u8>>,
}

impl<S: HasRand + HasCorpus<SysInput>> Mutator<SysInput, S> for ArgListMutator {
    fn mutate(&mut self, state: &mut S, input: &mut SysInput) -> Result<MutationResult, libafl::Error> {
        let op = below(state.rand_mut(), 5);
        let n = input.args.len();
        // A new argument, for ops 0 and 1.
        let fresh = if op <= 1 {
            let other = if state.rand_mut().coinflip(0.6) { other_input(state) } else { None };
            let rand = state.rand_mut();
            match other.filter(|o| !o.args.is_empty()) {
                Some(o) => Some(o.args[below(rand, o.args.len())].clone()),
                None if !self.tokens.is_empty() && rand.coinflip(0.5) => Some(self.tokens[below(rand, self.tokens.len())].clone()),
                None if n > 0 => Some(input.args[below(rand, n)].clone()),
                None => None,
            }
        } else {
            None
        };
        let rand = state.rand_mut();
        match (op, fresh) {
            (0, Some(a)) if n > 0 => input.args[below(rand, n)] = a,
            (1, Some(a)) if n < MAX_ARGS => input.args.insert(below(rand, n + 1), a),
            (2, _) => {
                let deletable: Vec<usize> =
                    (0..n).filter(|&i| !input.files.contains_key(&*String::from_utf8_lossy(&input.args[i]))).collect();
                if deletable.is_empty() {
                    return Ok(MutationResult::Skipped);
                }
                input.args.remove(deletable[below(rand, deletable.len())]);
            }
            (3, _) if n > 1 => {
                let (i, j) = (below(rand, n), below(rand, n));
                input.args.swap(i, j);
            }
            (4, _) if n > 0 => {
                let start = below(rand, n);
                let len = small_len(rand, (n - start).min(8));
                let run = input.args[start..start + len].to_vec();
                for _ in 0..small_len(rand, 4) {
                    input.args.splice(start + len..start + len, run.iter().cloned());
                }
            }
            _ => return Ok(MutationResult::Skipped),
        }
        input.normalise();
        Ok(MutationResult::Mutated)
    }
    fn post_exec(&mut self, _state: &mut S, _new: Option<CorpusId>) -> Result<(), libafl::Error> {
        Ok(())
    }
}

impl Named for ArgListMutator {
    fn name(&self) -> &Cow<'static, str> {
        static NAME: Cow<'static, str> = Cow::Borrowed("ArgListMutator");
        &NAME
    }
}

/// Crossover with another corpus entry: take its stdin, a file's content (the same
/// file's if it has one), its whole argument list (with the files its arguments name),
/// or splice: the head of one of our components and the tail of one of its.
pub struct CrossoverMutator;

impl<S: HasRand + HasCorpus<SysInput>> Mutator<SysInput, S> for CrossoverMutator {
    fn mutate(&mut self, state: &mut S, input: &mut SysInput) -> Result<MutationResult, libafl::Error> {
        let Some(other) = other_input(state) else { return Ok(MutationResult::Skipped) };
        if other == *input {
            return Ok(MutationResult::Skipped);
        }
        let rand = state.rand_mut();
        match below(rand, 4) {
            0 => {
                // Whole arguments, and the files they name.
                if other.args == input.args {
                    return Ok(MutationResult::Skipped);
                }
                for a in &other.args {
                    let name = String::from_utf8_lossy(a);
                    if let Some(content) = other.files.get(&*name) {
                        input.files.entry(name.into_owned()).or_insert_with(|| content.clone());
                    }
                }
                input.args = other.args;
            }
            1 => {
                let part = pick_part(rand, input, true);
                let same = match part {
                    Part::File(k) => input.files.keys().nth(k).and_then(|name| other.files.get(name)).cloned(),
                    _ => (!other.stdin.is_empty()).then(|| other.stdin.clone()),
                };
                let Some(content) = same.or_else(|| some_component(rand, &other)) else {
                    return Ok(MutationResult::Skipped);
                };
                *part_mut(input, part) = content;
            }
            _ => {
                let Some(tail_src) = some_component(rand, &other) else { return Ok(MutationResult::Skipped) };
                let part = pick_part(rand, input, true);
                let buf = part_mut(input, part);
                // Cut at line starts half the time: records stay whole.
                let cut = |rand: &mut _, b: &[u8], lines_only: bool| -> usize {
                    if lines_only {
                        let starts: Vec<usize> =
                            std::iter::once(0).chain(b.iter().enumerate().filter(|(_, &c)| c == b'\n').map(|(i, _)| i + 1)).collect();
                        starts[below(rand, starts.len())]
                    } else {
                        below(rand, b.len() + 1)
                    }
                };
                let lines_only = rand.coinflip(0.5);
                let a = cut(rand, buf, lines_only);
                let b = cut(rand, &tail_src, lines_only);
                buf.truncate(a);
                buf.extend_from_slice(&tail_src[b..]);
            }
        }
        input.normalise();
        Ok(MutationResult::Mutated)
    }
    fn post_exec(&mut self, _state: &mut S, _new: Option<CorpusId>) -> Result<(), libafl::Error> {
        Ok(())
    }
}

impl Named for CrossoverMutator {
    fn name(&self) -> &Cow<'static, str> {
        static NAME: Cow<'static, str> = Cow::Borrowed("CrossoverMutator");
        &NAME
    }
}

/// The system-level mutations, two to eight stacked per execution.
pub type SysMutator = HavocScheduledMutator<(
    ByteMutator,
    (LineMutator, (NumberMutator, (TokenMutator, (ArgListMutator, (CrossoverMutator, ()))))),
)>;

/// The system-level mutator over a dictionary of tokens.
pub fn sys_mutator(dictionary: &[Vec<u8>]) -> SysMutator {
    let tokens: Vec<Vec<u8>> = dictionary.iter().filter(|t| !t.is_empty() && t.len() <= 256).cloned().collect();
    let ints: Vec<i128> =
        tokens.iter().filter_map(|t| std::str::from_utf8(t).ok()).filter_map(|s| s.parse::<i128>().ok()).collect();
    HavocScheduledMutator::with_max_stack_pow(
        tuple_list!(
            ByteMutator,
            LineMutator,
            NumberMutator { ints },
            TokenMutator { tokens: tokens.clone() },
            ArgListMutator { tokens },
            CrossoverMutator
        ),
        3,
    )
}

/// A dictionary for system-level fuzzing of `binary`: its short string literals, and
/// the constants it compares against in decimal (and, for printable ASCII codes, as
/// the character).
pub fn dictionary(binary: &Binary) -> Vec<Vec<u8>> {
    let mut words: BTreeSet<Vec<u8>> = binary.strings.values().filter(|s| !s.is_empty() && s.len() <= 64).cloned().collect();
    let mut ints = BTreeSet::new();
    for f in binary.functions.values() {
        ints.extend(f.cmp_constants.iter().copied());
    }
    for i in ints {
        words.insert(i.to_string().into_bytes());
        if (0x21..0x7f).contains(&i) {
            words.insert(vec![i as u8]);
        }
    }
    words.into_iter().take(4000).collect()
}

// ---------------------------------------------------------------------------------
// The fuzzer
// ---------------------------------------------------------------------------------

type SysState = StdState<InMemoryOnDiskCorpus<SysInput>, SysInput, StdRand, InMemoryCorpus<SysInput>>;
type SysManager = SimpleEventManager<SysInput, NopMonitor, SysState>;

/// The fuzzer, executor and stages, whatever their (long) types: what a slice needs.
trait Engine {
    fn fuzz_one(&mut self, state: &mut SysState, mgr: &mut SysManager) -> Result<(), libafl::Error>;
    /// Run `input` and keep it in the queue whatever it covers (a seed).
    fn add(&mut self, state: &mut SysState, mgr: &mut SysManager, input: SysInput) -> Result<(), libafl::Error>;
    /// Run `input`; keep it if it is interesting.
    fn evaluate(&mut self, state: &mut SysState, mgr: &mut SysManager, input: &SysInput) -> Result<ExecuteInputResult, libafl::Error>;
}

struct Parts<Z, E, ST> {
    fuzzer: Z,
    executor: E,
    stages: ST,
}

impl<Z, E, ST> Engine for Parts<Z, E, ST>
where
    Z: Fuzzer<E, SysManager, SysInput, SysState, ST> + Evaluator<E, SysManager, SysInput, SysState>,
{
    fn fuzz_one(&mut self, state: &mut SysState, mgr: &mut SysManager) -> Result<(), libafl::Error> {
        self.fuzzer.fuzz_one(&mut self.stages, &mut self.executor, state, mgr).map(|_| ())
    }

    fn add(&mut self, state: &mut SysState, mgr: &mut SysManager, input: SysInput) -> Result<(), libafl::Error> {
        self.fuzzer.add_input(state, &mut self.executor, mgr, input).map(|_| ())
    }

    fn evaluate(&mut self, state: &mut SysState, mgr: &mut SysManager, input: &SysInput) -> Result<ExecuteInputResult, libafl::Error> {
        self.fuzzer.evaluate_input(state, &mut self.executor, mgr, input).map(|(r, _)| r)
    }
}

fn lib(e: libafl::Error) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}

/// A system-level fuzzing campaign's settings.
#[derive(Debug, Clone)]
pub struct SysFuzzConfig {
    /// The instrumented program.
    pub program: PathBuf,
    /// Seed system tests: the initial queue.
    pub seeds: Vec<NamedTest>,
    /// Output directory (`queue/`, `crashes/`, `timeouts/`); reloaded if it exists.
    pub out: PathBuf,
    /// Wall-clock limit per execution.
    pub timeout: Duration,
    /// Random seed.
    pub seed: u64,
    /// Tokens to insert ([`dictionary`]).
    pub dictionary: Vec<Vec<u8>>,
    /// Start the program for every execution even if it could serve them
    /// (measuring what the forkserver saves).
    pub no_forkserver: bool,
    /// Input-to-state replacement from the operands of the program's comparisons
    /// (one extra, tracing execution per picked queue entry).
    pub cmplog: bool,
    /// Address-space limit of each run in bytes (0: none; sanitizer builds reserve
    /// terabytes of shadow memory and take none). Each run also gets a CPU limit a
    /// little under its time limit.
    pub memory: u64,
    /// Run the program inside bubblewrap: the machine read-only, no network (fuzzed
    /// inputs can make a program do anything it can do).
    pub sandbox: bool,
}

/// What one slice of fuzzing did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SliceReport {
    /// Executions in the slice.
    pub executions: u64,
    /// Queue entries added since the last report (`queue/<hash>.json`).
    pub new_queue: Vec<PathBuf>,
    /// Crashes found since the last report (`crashes/<hash>.json`).
    pub new_crashes: Vec<PathBuf>,
    /// Timeouts found since the last report (`timeouts/<hash>.json`).
    pub new_timeouts: Vec<PathBuf>,
}

/// A system-level fuzzer that keeps its LibAFL state between slices, so a campaign can
/// interleave it with other steps.
pub struct SysFuzzer {
    // Declared before the map it observes, so it is dropped first.
    engine: Box<dyn Engine>,
    state: SysState,
    mgr: SysManager,
    _edges_map: UnixShMem,
    _cmp_map: Option<UnixShMem>,
    out: PathBuf,
    found: Arc<Mutex<Found>>,
    /// Corpus ids from here on are not reported yet.
    next_id: usize,
}

fn json_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "json")).collect())
        .unwrap_or_default();
    v.sort();
    v
}

impl SysFuzzer {
    /// Set up, and run the initial corpus: on an existing output directory, its queue
    /// (a resumed campaign), then the seeds it does not hold yet. Crashes and timeouts
    /// found before are re-run (so they count as known) but not reported again.
    pub fn new(cfg: SysFuzzConfig) -> Result<SysFuzzer> {
        let out = &cfg.out;
        for d in ["queue", "crashes", "timeouts"] {
            std::fs::create_dir_all(out.join(d)).with_context(|| format!("cannot create {}", out.join(d).display()))?;
        }
        let out = std::fs::canonicalize(out).with_context(|| format!("cannot resolve {}", out.display()))?;
        let program =
            std::fs::canonicalize(&cfg.program).with_context(|| format!("program not found: {}", cfg.program.display()))?;
        let resumed = json_files(&out.join("queue"));
        if cfg.seeds.is_empty() && resumed.is_empty() {
            bail!("no seed system tests to start from");
        }

        let mut provider = UnixShMemProvider::new().map_err(lib).context("cannot use shared memory")?;
        let mut edges_map = provider.new_shmem(MAP_SIZE).map_err(lib).context("cannot create the edge map")?;
        let coverage_env = vec![
            (hooks::ENV_AFL_SHM_ID.to_string(), edges_map.id().to_string()),
            (hooks::ENV_AFL_MAP_SIZE.to_string(), MAP_SIZE.to_string()),
        ];
        let bwrap = if cfg.sandbox { Some(crate::validate::sandbox::find_bwrap("fuzz")?) } else { None };
        let mut executor = SysExecutor::new(&program, &cfg, cfg.timeout, coverage_env.clone(), (), bwrap.clone())?;
        // Look at as much of the map as the program uses (the server says; AFL++ does
        // the same): classifying, comparing and clearing it is work on every run.
        let map_len = match executor.map_len().map_err(lib)? {
            Some(edges) => edges.next_multiple_of(64).clamp(64, MAP_SIZE),
            None => MAP_SIZE,
        };
        // SAFETY: the map outlives the observer: both live in the SysFuzzer, the map
        // declared after the engine that holds the observer, so it is dropped last.
        let edges_observer = unsafe {
            HitcountsMapObserver::new(StdMapObserver::from_mut_ptr("edges", edges_map.as_mut_ptr(), map_len))
        }
        .track_indices();
        let time_observer = TimeObserver::new("time");
        let found = Arc::new(Mutex::new(Found::default()));
        let mut feedback = feedback_or!(MaxMapFeedback::new(&edges_observer), TimeFeedback::new(&time_observer));
        let findings = FindingFeedback {
            crashes: out.join("crashes"),
            timeouts: out.join("timeouts"),
            last: ExitKind::Ok,
            found: found.clone(),
        };
        // Only findings with coverage no earlier finding had: one file per way to fail.
        let mut objective = feedback_and_fast!(findings, MaxMapFeedback::with_name("finding_edges", &edges_observer));
        let queue = InMemoryOnDiskCorpus::with_meta_format_and_prefix(out.join("queue"), None, None, false).map_err(lib)?;
        let mut state =
            StdState::new(StdRand::with_seed(cfg.seed), queue, InMemoryCorpus::new(), &mut feedback, &mut objective).map_err(lib)?;
        let scheduler = IndexesLenTimeMinimizerScheduler::new(&edges_observer, QueueScheduler::new());
        let fuzzer = StdFuzzer::builder()
            .scheduler(scheduler)
            .feedback(feedback)
            .objective(objective)
            // Structured mutations often repeat an input; running it again says nothing.
            .input_filter(BloomInputFilter::new(1 << 20, 1e-4))
            .build();
        let executor = executor.with_observers(tuple_list!(edges_observer, time_observer));
        let stage = StdMutationalStage::with_max_iterations(
            sys_mutator(&cfg.dictionary),
            NonZeroUsize::new(EXECS_PER_PICK).expect("non-zero"),
        );
        // SAFETY: the edge map lives in the SysFuzzer, dropped after the engine.
        let trim = unsafe { trim::TrimStage::new(edges_map.as_ptr(), map_len) };
        let mut cmp_map = None;
        let mut engine: Box<dyn Engine> = if cfg.cmplog {
            // Input-to-state: each picked entry runs once more with the trace-cmp
            // hooks logging into this map (a second server, its own environment).
            let mut map = provider.uninit_on_shmem::<AflppCmpLogMap>().map_err(lib).context("cannot create the CmpLog map")?;
            let mut env = coverage_env;
            env.push((hooks::ENV_AFL_CMPLOG_SHM_ID.to_string(), map.id().to_string()));
            // SAFETY: the map outlives the observer (dropped after the engine, like the
            // edge map); the hooks write LibAFL's CmpLogMap layout into the (larger)
            // AFL++-sized segment.
            let observer = unsafe { CmpLogObserver::with_map_ptr("cmplog", map.as_mut_ptr() as *mut CmpLogMap, true) };
            cmp_map = Some(map);
            let mut tracer = SysExecutor::new(&program, &cfg, cfg.timeout * 2, env, tuple_list!(observer), bwrap)?;
            tracer.notice = false;
            let i2s = StdMutationalStage::with_max_iterations(
                // One to four replacements at a time (each scans the input).
                HavocScheduledMutator::with_max_stack_pow(tuple_list!(i2s::I2SMutator), 2),
                NonZeroUsize::new(EXECS_PER_PICK).expect("non-zero"),
            );
            Box::new(Parts { fuzzer, executor, stages: tuple_list!(trim, TracingStage::new(tracer), i2s, stage) })
        } else {
            Box::new(Parts { fuzzer, executor, stages: tuple_list!(trim, stage) })
        };
        let mut mgr = SimpleEventManager::new(NopMonitor::new());

        let mut seen = HashSet::new();
        for p in &resumed {
            let input = SysInput::from_file(p).map_err(|e| anyhow::anyhow!("cannot resume from {}: {e}", p.display()))?;
            if seen.insert(input.file_name()) {
                engine.add(&mut state, &mut mgr, input).map_err(lib)?;
            }
        }
        for dir in ["crashes", "timeouts"] {
            for p in json_files(&out.join(dir)) {
                if let Ok(input) = SysInput::from_file(&p) {
                    engine.evaluate(&mut state, &mut mgr, &input).map_err(lib)?;
                }
            }
        }
        *found.lock().unwrap_or_else(|p| p.into_inner()) = Found::default();
        for seed in &cfg.seeds {
            SysInput::check(&seed.test).with_context(|| format!("seed {}", seed.path.display()))?;
            let input = SysInput::from_test(&seed.test);
            if seen.insert(input.file_name()) {
                engine.add(&mut state, &mut mgr, input).map_err(lib)?;
            }
        }
        let mut f = SysFuzzer { engine, state, mgr, _edges_map: edges_map, _cmp_map: cmp_map, out, found, next_id: 0 };
        f.next_id = f.state.corpus().ids().map(|id| id.0 + 1).max().unwrap_or(0);
        if f.state.corpus().count() == 0 {
            bail!("every seed crashes or times out: nothing to fuzz from (see {})", f.out.display());
        }
        if f.edges() == 0 {
            bail!(
                "{} reported no edge coverage: build it with trestle-cc (a runtime that reports coverage to {})",
                cfg.program.display(),
                hooks::ENV_AFL_SHM_ID
            );
        }
        Ok(f)
    }

    /// Fuzz for about `d` (a corpus entry's round of executions is finished first).
    pub fn fuzz_for(&mut self, d: Duration) -> Result<SliceReport> {
        let before = self.executions();
        let end = Instant::now() + d;
        while Instant::now() < end {
            self.engine.fuzz_one(&mut self.state, &mut self.mgr).map_err(lib)?;
        }
        self.report(before)
    }

    fn report(&mut self, executions_before: u64) -> Result<SliceReport> {
        let mut new_queue = Vec::new();
        let mut next = self.next_id;
        for id in self.state.corpus().ids() {
            if id.0 >= self.next_id {
                next = next.max(id.0 + 1);
                if let Ok(tc) = self.state.corpus().get(id) {
                    if let Some(p) = tc.borrow().file_path() {
                        // LibAFL only logs a failed write: say it here.
                        if !p.exists() {
                            bail!("cannot write queue entry {}", p.display());
                        }
                        new_queue.push(p.clone());
                    }
                }
            }
        }
        self.next_id = next;
        let found = std::mem::take(&mut *self.found.lock().unwrap_or_else(|p| p.into_inner()));
        Ok(SliceReport {
            executions: self.executions() - executions_before,
            new_queue,
            new_crashes: found.crashes,
            new_timeouts: found.timeouts,
        })
    }

    /// Executions so far (the initial corpus included).
    pub fn executions(&self) -> u64 {
        *self.state.executions()
    }

    /// Map entries (edges) any queue entry ever covered.
    pub fn edges(&self) -> usize {
        self.state
            .named_metadata_map()
            .get::<MapFeedbackMetadata<u8>>("edges")
            .map_or(0, |m| m.num_covered_map_indexes)
    }

    /// Which map entries (edges) any queue entry ever covered: `covered[i]`.
    pub fn covered_edges(&self) -> Vec<bool> {
        self.state
            .named_metadata_map()
            .get::<MapFeedbackMetadata<u8>>("edges")
            .map_or_else(Vec::new, |m| m.history_map.iter().map(|&v| v > 0).collect())
    }

    /// Entries in the queue.
    pub fn queue_len(&self) -> usize {
        self.state.corpus().count()
    }

    /// The output directory.
    pub fn out(&self) -> &Path {
        &self.out
    }

    /// Run an external test (a lifted one, say); true if it reached new coverage and
    /// joined the queue. A crash or timeout it causes is reported by the next slice.
    pub fn add_test(&mut self, t: &SystemTest) -> Result<bool> {
        SysInput::check(t)?;
        let input = SysInput::from_test(t);
        let r = self.engine.evaluate(&mut self.state, &mut self.mgr, &input).map_err(lib)?;
        Ok(r == ExecuteInputResult::Corpus)
    }

    /// Report what happened since the last report without fuzzing (after [`Self::add_test`]).
    pub fn take_report(&mut self) -> Result<SliceReport> {
        let e = self.executions();
        self.report(e)
    }
}

// ---------------------------------------------------------------------------------
// trestle sysfuzz
// ---------------------------------------------------------------------------------

/// Options of `trestle sysfuzz`.
#[derive(Debug)]
pub struct Options {
    /// The instrumented program (built with trestle-cc).
    pub program: PathBuf,
    /// Seed system tests: a JSON file or a directory of them.
    pub seeds: PathBuf,
    /// How long to fuzz.
    pub time: Duration,
    /// Output directory (queue/, crashes/, timeouts/); an existing one is resumed.
    pub out: PathBuf,
    /// Time limit per execution.
    pub timeout: Duration,
    /// Random seed.
    pub seed: u64,
    /// Stop at the first crash.
    pub stop_on_crash: bool,
    /// Do not insert the program's string literals and compared constants (a blind
    /// baseline).
    pub no_dict: bool,
    /// Print the report as JSON on stdout: seeds, initial_queue, initial_edges, queue,
    /// edges, executions, seconds, execs_per_sec, new_queue, crashes and timeouts (lists
    /// of system-test files).
    pub json: bool,
    /// Start the program anew for every execution instead of forking it from a
    /// server at the start of `main` (slower; for comparison and debugging).
    pub no_forkserver: bool,
    /// No input-to-state replacement (CmpLog): do not run each picked input once more
    /// to log the operands of the program's comparisons.
    pub no_cmplog: bool,
    /// Address-space limit per execution, MiB (0: none; not applied to sanitizer
    /// builds). Each execution also gets a CPU-time limit just under --timeout.
    pub memory_mb: u64,
    /// Run the fuzzer and the program on this core (default: a free one, that no
    /// other fuzzer is bound to; none if all are taken).
    pub pin: Option<usize>,
    /// Do not bind to a core.
    pub no_pin: bool,
    /// Run the program without bubblewrap (by default it sees the machine read-only,
    /// a private /tmp and no network, and writes only in its working directory).
    pub no_sandbox: bool,
}

/// What `trestle sysfuzz` did.
#[derive(Debug, Clone, Serialize)]
pub struct SysFuzzReport {
    /// Seed tests given.
    pub seeds: usize,
    /// Queue entries after the initial corpus ran.
    pub initial_queue: usize,
    /// Edges the initial corpus covered.
    pub initial_edges: usize,
    /// Queue entries at the end.
    pub queue: usize,
    /// Edges covered at the end.
    pub edges: usize,
    /// Executions, the initial corpus included.
    pub executions: u64,
    /// Fuzzing time (after the initial corpus), seconds.
    pub seconds: f64,
    /// Executions per second while fuzzing.
    pub execs_per_sec: f64,
    /// Queue entries found while fuzzing.
    pub new_queue: Vec<PathBuf>,
    /// Crashes found.
    pub crashes: Vec<PathBuf>,
    /// Timeouts found.
    pub timeouts: Vec<PathBuf>,
}

/// Run `trestle sysfuzz`.
pub fn run(args: &Options) -> Result<SysFuzzReport> {
    let seeds = systest::load_tests(&args.seeds)?;
    let binary = Binary::load(&args.program)?;
    let cfg = SysFuzzConfig {
        program: binary.path.clone(),
        seeds,
        out: args.out.clone(),
        timeout: args.timeout,
        seed: args.seed,
        dictionary: if args.no_dict { Vec::new() } else { dictionary(&binary) },
        no_forkserver: args.no_forkserver,
        cmplog: !args.no_cmplog,
        memory: if crate::validate::sandbox::is_sanitizer_build(&binary.path) { 0 } else { args.memory_mb << 20 },
        sandbox: !args.no_sandbox,
    };
    let n_seeds = cfg.seeds.len();
    crate::fuzz::bind_core(args.pin, args.no_pin)?;
    let mut f = SysFuzzer::new(cfg)?;
    let initial = f.take_report()?;
    let (initial_queue, initial_edges, initial_execs) = (f.queue_len(), f.edges(), f.executions());
    let mut report = SysFuzzReport {
        seeds: n_seeds,
        initial_queue,
        initial_edges,
        queue: 0,
        edges: 0,
        executions: 0,
        seconds: 0.0,
        execs_per_sec: 0.0,
        new_queue: Vec::new(),
        crashes: initial.new_crashes,
        timeouts: initial.new_timeouts,
    };
    let start = Instant::now();
    let end = start + args.time;
    loop {
        let now = Instant::now();
        if now >= end || (args.stop_on_crash && !report.crashes.is_empty()) {
            break;
        }
        let slice = f.fuzz_for((end - now).min(Duration::from_secs(1)))?;
        report.new_queue.extend(slice.new_queue);
        report.crashes.extend(slice.new_crashes);
        report.timeouts.extend(slice.new_timeouts);
    }
    report.seconds = start.elapsed().as_secs_f64();
    report.queue = f.queue_len();
    report.edges = f.edges();
    report.executions = f.executions();
    report.execs_per_sec = (report.executions - initial_execs) as f64 / report.seconds.max(1e-9);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{} executions in {:.1}s ({:.0}/s); queue {} -> {}, edges {} -> {}; {} crash(es), {} timeout(s) in {}",
            report.executions,
            report.seconds,
            report.execs_per_sec,
            report.initial_queue,
            report.queue,
            report.initial_edges,
            report.edges,
            report.crashes.len(),
            report.timeouts.len(),
            f.out().display()
        );
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(args: &[&str], stdin: &str) -> SysInput {
        SysInput::from_test(&SystemTest {
            args: args.iter().map(|s| s.to_string()).collect(),
            stdin: Some(stdin.as_bytes().to_vec()),
            ..Default::default()
        })
    }

    #[test]
    fn inputs_round_trip_through_their_json_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut i = input(&["-n", "in.txt"], "a\nb\n");
        i.files.insert("in.txt".into(), vec![0, 1, 2, 0xff]);
        i.env.insert("LC_ALL".into(), "C".into());
        let p = dir.path().join(i.file_name());
        i.to_file(&p).unwrap();
        assert_eq!(SysInput::from_file(&p).unwrap(), i);
        assert_eq!(systest::load_test(&p).unwrap(), i.to_test());
    }

    #[test]
    fn arguments_are_normalised_to_what_a_command_line_carries() {
        let mut i = input(&[], "");
        i.args = vec![b"a\0b".to_vec(), vec![0xff, b'x'], vec![b'y'; MAX_ARG_LEN + 10]];
        i.args.extend((0..100).map(|_| b"z".to_vec()));
        i.normalise();
        assert_eq!(i.args[0], b"ab");
        assert!(std::str::from_utf8(&i.args[1]).is_ok());
        assert_eq!(i.args[2].len(), MAX_ARG_LEN);
        assert_eq!(i.args.len(), MAX_ARGS);
    }

    #[test]
    fn tests_with_files_outside_their_directory_are_refused() {
        let mut t = SystemTest::default();
        t.files.insert("d/in.txt".into(), vec![]);
        assert!(SysInput::check(&t).is_ok());
        for bad in ["/etc/passwd", "../x", "a/../../x", ""] {
            let mut t = SystemTest::default();
            t.files.insert(bad.into(), vec![]);
            assert!(SysInput::check(&t).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn numbers_and_words_are_found() {
        assert_eq!(numbers(b"set 7 -12 a-3 x99"), vec![(4, 5), (6, 9), (12, 13), (15, 17)]);
        assert_eq!(words(b" ab  c\nd"), vec![(1, 3), (5, 6), (7, 8)]);
        assert_eq!(lines(b"a\nb"), vec![&b"a\n"[..], &b"b"[..]]);
    }

    /// A state with a corpus, enough for every mutator (and the queue directory it writes to).
    fn state() -> (tempfile::TempDir, SysState) {
        let dir = tempfile::tempdir().unwrap();
        let mut feedback = ();
        let mut objective = ();
        let mut s = StdState::new(
            StdRand::with_seed(7),
            InMemoryOnDiskCorpus::with_meta_format_and_prefix(dir.path(), None, None, false).unwrap(),
            InMemoryCorpus::new(),
            &mut feedback,
            &mut objective,
        )
        .unwrap();
        let mut other = input(&["login", "guest", "pw"], "set 1 2\nhelp\n");
        other.files.insert("f.txt".into(), b"x 1\ny 2\n".to_vec());
        s.corpus_mut().add(Testcase::from(other)).unwrap();
        (dir, s)
    }

    #[test]
    fn mutations_stay_within_bounds_and_valid() {
        let (_dir, mut s) = state();
        let mut m = sys_mutator(&[b"admin".to_vec(), b"42342531".to_vec()]);
        let mut changed = 0;
        for k in 0..3000 {
            let mut i = input(&["set", "7", "12"], "boot\nset 3 4\n");
            if k % 2 == 0 {
                i.files.insert("in.txt".into(), b"1 2 3\n".to_vec());
                i.args.push(b"in.txt".to_vec());
            }
            let before = i.clone();
            for _ in 0..8 {
                let _ = m.mutate(&mut s, &mut i).unwrap();
            }
            changed += usize::from(i != before);
            assert!(i.args.len() <= MAX_ARGS);
            assert!(i.args.iter().all(|a| a.len() <= MAX_ARG_LEN + 3 && !a.contains(&0) && std::str::from_utf8(a).is_ok()));
            assert!(i.stdin.len() <= MAX_CONTENT && i.files.values().all(|v| v.len() <= MAX_CONTENT));
            // The round trip through JSON is exact: what runs is what is saved.
            assert_eq!(SysInput::from_test(&i.to_test()), i);
        }
        assert!(changed > 2900, "only {changed} of 3000 inputs changed");
    }

    #[test]
    fn line_and_number_mutations_do_what_they_say() {
        let (_dir, mut s) = state();
        let mut seen_repeat = false;
        let mut seen_boundary = false;
        for _ in 0..400 {
            let mut i = input(&[], "aa\nbb\ncc\n");
            if LineMutator.mutate(&mut s, &mut i).unwrap() == MutationResult::Mutated {
                let text = String::from_utf8(i.stdin.clone()).unwrap();
                seen_repeat |= text.matches("bb\n").count() > 1;
            }
            let mut j = input(&[], "set 7 12\n");
            let mut nm = NumberMutator { ints: vec![42342531] };
            nm.mutate(&mut s, &mut j).unwrap();
            let text = String::from_utf8(j.stdin.clone()).unwrap();
            seen_boundary |= text.contains("2147483647") || text.contains("42342531");
        }
        assert!(seen_repeat && seen_boundary);
    }
}

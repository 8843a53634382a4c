//! Running the program on one input ([`SysExecutor`]): through the forkserver when
//! it was built with `trestle-cc`, spawned per input otherwise, in a fresh working
//! directory with the test's files, inside bubblewrap unless told not to.
//!
//! It owns how an input becomes a run and how the run's end becomes an [`ExitKind`];
//! it does not judge runs (the feedbacks do) nor keep anything.

use crate::config::SysFuzzConfig;
use crate::input::SysInput;
use anyhow::Result;
use libafl::executors::{Executor, ExitKind, HasObservers};
use libafl::state::HasExecutions;
use libafl_bolts::tuples::RefIndexable;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use trestle_abi::sysserver::ChildLimits;
use trestle_exec::forkserver::{ForkServer, Request, RunEnd, ServeError};
use trestle_exec::sandbox::is_crash_signal;
use trestle_exec::systest;

/// Largest file a fuzzed program may write (RLIMIT_FSIZE).
const MAX_WRITE: u64 = 64 << 20;

/// Runs the program on one input: the test's files in a fresh working directory, stdin
/// from a file, stdout and stderr discarded, its own process group (killed whole on
/// timeout), no core dumps, bounded file writes. A program built with `trestle-cc`
/// runs as a forkserver ([`ForkServer`]): started once, it forks a child per input
/// at the start of `main`; any other program is spawned per input (said once). A
/// death by a crash signal is a crash; exceeding the wall limit is a timeout; any exit
/// status is a normal end.
///
/// Runs stop at a per-run limit calibrated from the seeds ([`SysExecutor::set_limit`]),
/// far below the user's hang limit, as AFL++ does: a program that loops on many inputs
/// would otherwise spend most of a campaign waiting. A run stopped there that covered
/// an edge no earlier stopped run covered runs again up to the hang limit before it
/// counts as a timeout, so a slow input that finishes is not lost, and a loop in a
/// known place costs only the short limit. Those runs to the hang limit take at most
/// [`RERUN_SHARE`] of the executor's time (after a first [`RERUN_ALLOWANCE`] of them):
/// past it, a stopped run is left stopped, and its new edges are not remembered, so
/// the next run that stops in them is run again once there is time.
pub struct SysExecutor<OT> {
    program: PathBuf,
    /// `argv[0]` of every run: the program the user gave, also when `program` is its
    /// lean sibling (a program may print or dispatch on its own name).
    argv0: PathBuf,
    /// Working directories and the stdin file, in memory where possible; removed
    /// with the executor.
    work: tempfile::TempDir,
    /// Where a run is stopped (calibrated; at most `hang`).
    limit: Duration,
    /// Where a run is a timeout (the user's limit).
    hang: Duration,
    /// The edge map, to tell a stopped run's new edges, and which edges stopped runs
    /// have covered; `None`: every stopped run runs again.
    slow_edges: Option<SlowEdges>,
    /// Set when the last run was a timeout at the hang limit (not only stopped at the
    /// short one): only those are findings.
    hung: Arc<AtomicBool>,
    /// Set when the last run was stopped at the short limit, whatever its run at the
    /// hang limit then did: such an input is slow, and never a queue entry.
    stopped: Arc<AtomicBool>,
    /// Set for every run, after the test's own environment.
    env: Vec<(String, String)>,
    observers: OT,
    /// Suffix of the working directory; moves on when one cannot be removed.
    slot: u64,
    /// Whether the working directory exists and the last run left it empty (then
    /// the next run takes it as it is, without looking).
    cwd_empty: bool,
    /// The forkserver, once started.
    server: Option<ForkServer>,
    /// How the program runs: `None` until the first run decides.
    serving: Option<bool>,
    /// Forkservers started after the first (one died).
    pub restarts: u64,
    /// Runs stopped at the short limit, and what became of them.
    pub stopped_runs: StoppedRuns,
    /// When the executor was made ([`RERUN_SHARE`] is of the time since).
    born: Instant,
    /// Whether the last run ended by itself, within the short limit, without a crash.
    pub last_ended_well: bool,
    /// The stdin file every run reads.
    stdin: StdinFile,
    /// Whether the working directories are on a tmpfs (where a directory's size
    /// says whether it is empty).
    on_tmpfs: bool,
    /// The working directory, open, on a tmpfs (see [`is_empty_dir`]).
    cwd_handle: Option<std::fs::File>,
    /// Say so when the program cannot serve (the main executor does; a second one
    /// for the same program need not).
    pub(super) notice: bool,
    /// Limits of every run (a forkserver child sets them on itself).
    limits: ChildLimits,
    /// bubblewrap, to run the program (its forkserver) isolated; `None`: not.
    bwrap: Option<PathBuf>,
}

/// The share of an executor's time that runs again to the hang limit may take. A
/// program that loops on many inputs made them most of a campaign: dc's mutated
/// programs, each loop with an edge no earlier loop covered, ran 2 s more every 2-3 s,
/// 66 s of a 120-s campaign (AFL++, whose hang limit is 1 s, spent about 37 s on as
/// many).
pub const RERUN_SHARE: f64 = 0.1;

/// Runs to the hang limit allowed before [`RERUN_SHARE`] applies.
pub const RERUN_ALLOWANCE: u32 = 2;

/// Runs stopped at the short limit, and what became of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoppedRuns {
    /// Runs stopped at the short limit.
    pub stopped: u64,
    /// Of those, the runs that ran again to end within the hang limit (slow inputs:
    /// neither queue entries nor timeouts).
    pub slow: u64,
    /// Of those with new edges, the runs not run again: runs to the hang limit had
    /// taken their share of the time ([`RERUN_SHARE`]).
    pub not_rerun: u64,
    /// The time runs again to the hang limit took.
    pub rerun_time: Duration,
}

/// The edge map the program writes and the edges runs stopped at the short limit
/// have covered.
struct SlowEdges {
    map: *mut u8,
    len: usize,
    seen: Vec<bool>,
}

impl SlowEdges {
    /// Whether the run just stopped covered an edge no stopped run covered before.
    fn new_edges(&self) -> bool {
        // SAFETY: `watch_edges`' caller keeps the map alive and `len` long.
        let map = unsafe { std::slice::from_raw_parts(self.map, self.len) };
        self.seen
            .iter()
            .zip(map)
            .any(|(&seen, &hit)| hit != 0 && !seen)
    }

    /// Remember the edges of the run just stopped as covered by a stopped run.
    fn remember(&mut self) {
        // SAFETY: as in `new_edges`.
        let map = unsafe { std::slice::from_raw_parts(self.map, self.len) };
        for (seen, &hit) in self.seen.iter_mut().zip(map) {
            *seen |= hit != 0;
        }
    }

    /// Clear the map for a second run of the same input (its counts must not add up).
    fn clear(&mut self) {
        // SAFETY: as in `new_edges`.
        unsafe { std::ptr::write_bytes(self.map, 0, self.len) };
    }
}

impl<OT> SysExecutor<OT> {
    pub(super) fn new(
        program: &Path,
        cfg: &SysFuzzConfig,
        timeout: Duration,
        env: Vec<(String, String)>,
        observers: OT,
        bwrap: Option<PathBuf>,
    ) -> Result<Self> {
        let limits = ChildLimits {
            cpu_secs: trestle_exec::sandbox::cpu_limit(timeout),
            address_space: cfg.memory,
            open_files: 0,
        };
        let no_forkserver = cfg.no_forkserver;
        let work = systest::scratch_dir("trestle-sysfuzz-")?;
        let on_tmpfs = is_tmpfs(work.path());
        Ok(SysExecutor {
            limits,
            bwrap,
            program: program.to_path_buf(),
            argv0: std::fs::canonicalize(&cfg.program).unwrap_or_else(|_| program.to_path_buf()),
            work,
            limit: timeout,
            hang: timeout,
            slow_edges: None,
            hung: Arc::new(AtomicBool::new(false)),
            stopped: Arc::new(AtomicBool::new(false)),
            env,
            observers,
            slot: 0,
            cwd_empty: false,
            server: None,
            serving: if no_forkserver { Some(false) } else { None },
            restarts: 0,
            stopped_runs: StoppedRuns::default(),
            born: Instant::now(),
            last_ended_well: false,
            stdin: StdinFile::default(),
            on_tmpfs,
            cwd_handle: None,
            notice: true,
        })
    }

    /// The program with its environment and limits, for one run or for a server;
    /// inside bubblewrap when sandboxed (writing only to its working directories,
    /// sharing trestle's System V IPC for the coverage map).
    fn command(&self) -> Command {
        let mut cmd = match &self.bwrap {
            // The lean sibling mounted at the program's path, so it runs under that name.
            Some(bwrap) => trestle_exec::sandbox::bwrap_command_as(
                bwrap,
                &self.program,
                &self.argv0,
                &[],
                &[self.work.path()],
                true,
            ),
            None => {
                let mut c = Command::new(&self.program);
                c.arg0(&self.argv0);
                c
            }
        };
        // A fuzzed run is a plain run: never recording, replaying or serving units.
        cmd.env_remove(trestle_abi::hooks::ENV_TRACE_DIR)
            .env_remove(trestle_abi::hooks::ENV_REPLAY)
            .env_remove(trestle_abi::fuzz::ENV_FUZZ)
            .env_remove(trestle_abi::sysserver::ENV_SYS_FORKSERVER)
            .env(
                "ASAN_OPTIONS",
                "abort_on_error=1:detect_leaks=0:symbolize=0",
            )
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        // SAFETY: setrlimit is async-signal-safe and touches only the child (and,
        // for a server, the children it forks).
        unsafe {
            cmd.pre_exec(|| {
                let core = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                libc::setrlimit(libc::RLIMIT_CORE, &core);
                let fsize = libc::rlimit {
                    rlim_cur: MAX_WRITE,
                    rlim_max: MAX_WRITE,
                };
                libc::setrlimit(libc::RLIMIT_FSIZE, &fsize);
                Ok(())
            });
        }
        cmd
    }

    /// Stop runs at `limit` (at most the hang limit) from now on.
    pub(super) fn set_limit(&mut self, limit: Duration) {
        self.limit = limit.min(self.hang);
    }

    /// Where runs stop now.
    pub(super) fn limit(&self) -> Duration {
        self.limit
    }

    /// Tell a stopped run's new edges from the first `len` entries of `map`.
    ///
    /// # Safety
    /// `map` must stay valid for `len` bytes as long as this executor runs.
    pub(super) unsafe fn watch_edges(&mut self, map: *mut u8, len: usize) {
        self.slow_edges = Some(SlowEdges {
            map,
            len,
            seen: vec![false; len],
        });
    }

    /// Run once at the short limit; a run stopped there with new edges again at the
    /// hang limit.
    fn run(&mut self, input: &SysInput) -> Result<ExitKind, libafl::Error> {
        self.hung.store(false, Ordering::Relaxed);
        let mut kind = self.run_within(input, self.limit)?;
        self.last_ended_well = kind == ExitKind::Ok;
        self.stopped
            .store(kind == ExitKind::Timeout, Ordering::Relaxed);
        if kind == ExitKind::Timeout && self.limit < self.hang {
            self.stopped_runs.stopped += 1;
            if let Some(edges) = self.slow_edges.as_mut() {
                if !edges.new_edges() {
                    return Ok(kind);
                }
            }
            if !self.may_rerun() {
                // Left stopped, its edges not remembered: a later run that stops in
                // them runs again when there is time.
                self.stopped_runs.not_rerun += 1;
                return Ok(kind);
            }
            if let Some(edges) = self.slow_edges.as_mut() {
                edges.remember();
                edges.clear();
            }
            let start = Instant::now();
            kind = self.run_within(input, self.hang)?;
            self.stopped_runs.rerun_time += start.elapsed();
            self.stopped_runs.slow += u64::from(kind != ExitKind::Timeout);
        }
        self.hung
            .store(kind == ExitKind::Timeout, Ordering::Relaxed);
        Ok(kind)
    }

    /// Whether a stopped run may run again to the hang limit: runs to it have taken
    /// less than [`RERUN_SHARE`] of the executor's time, past a first
    /// [`RERUN_ALLOWANCE`] of them.
    fn may_rerun(&self) -> bool {
        let allowance = self.hang * RERUN_ALLOWANCE;
        self.stopped_runs.rerun_time < allowance + self.born.elapsed().mul_f64(RERUN_SHARE)
    }

    /// Run `input` once within `limit`, outside any fuzzing loop.
    pub(super) fn run_once(
        &mut self,
        input: &SysInput,
        limit: Duration,
    ) -> Result<ExitKind, libafl::Error> {
        self.run_within(input, limit)
    }

    /// Set after each run that was a timeout at the hang limit.
    pub(super) fn hung(&self) -> Arc<AtomicBool> {
        self.hung.clone()
    }

    /// Set after each run stopped at the short limit (also when it then ended within
    /// the hang limit).
    pub(super) fn stopped(&self) -> Arc<AtomicBool> {
        self.stopped.clone()
    }

    fn run_within(&mut self, input: &SysInput, limit: Duration) -> Result<ExitKind, libafl::Error> {
        let mut dir = self.work.path().join(format!("cwd-{}", self.slot));
        // An empty directory left by the last run is as fresh as a new one.
        let reusable = self.cwd_empty || is_empty_dir(&dir, None);
        if !reusable {
            while dir.exists() && std::fs::remove_dir_all(&dir).is_err() {
                self.slot += 1;
                dir = self.work.path().join(format!("cwd-{}", self.slot));
            }
            std::fs::create_dir(&dir)?;
            self.cwd_handle = None;
        }
        if self.on_tmpfs && self.cwd_handle.is_none() {
            self.cwd_handle = std::fs::File::open(&dir).ok();
        }
        // Unknown until this run has ended (an error below leaves it unknown).
        self.cwd_empty = false;
        for (name, bytes) in &input.files {
            trestle_exec::systest::create_file(&dir, name, bytes)
                .map_err(|e| libafl::Error::unknown(format!("{e:#}")))?;
        }
        // Outside the working directory, as in `run_test` (the program opens it
        // afresh every run).
        self.stdin.set(self.work.path(), &input.stdin)?;
        let stdin_path = self.stdin.path.clone();
        let kind = match self.serve(input, &dir, &stdin_path, limit)? {
            Some(kind) => kind,
            None => self.spawn(input, &dir, &stdin_path, limit)?,
        };
        self.cwd_empty = is_empty_dir(&dir, self.cwd_handle.as_ref());
        if !self.cwd_empty {
            self.cwd_handle = None;
            if std::fs::remove_dir_all(&dir).is_err() {
                self.slot += 1;
            }
        }
        Ok(kind)
    }

    /// Start the forkserver if the program can serve (deciding on the first try);
    /// false if it cannot (then it is spawned per test).
    ///
    /// A program of another protocol version is an error, as in AFL++: it was built
    /// with another trestle's `trestle-cc`, and fuzzing it at a fraction of the speed
    /// without a word would waste the campaign (`no_forkserver` is the way to fuzz it
    /// anyway). So is a status pipe that cannot be read.
    fn start_server(&mut self) -> Result<bool, libafl::Error> {
        if self.serving == Some(false) {
            return Ok(false);
        }
        let mut cmd = self.command();
        // Resolve every symbol once in the server, not lazily in every child
        // (AFL++ does the same).
        cmd.env("LD_BIND_NOW", "1");
        let program = self.program.display();
        match (ForkServer::launch(cmd), self.serving) {
            (Ok(s), first) => {
                self.restarts += u64::from(first.is_some());
                self.server = Some(s);
                self.serving = Some(true);
                Ok(true)
            }
            (Err(e @ (ServeError::Spawn(_) | ServeError::Io(_))), _) => {
                Err(libafl::Error::unknown(format!("cannot run program {program}: {e}")))
            }
            (Err(e @ ServeError::VersionMismatch { .. }), _) => Err(libafl::Error::unknown(format!(
                "{program} cannot serve system tests: {e} (or fuzz without the forkserver: trestle sysfuzz --no-forkserver)"
            ))),
            (Err(e), None) => {
                if self.notice {
                    eprintln!("trestle: {program} does not serve system tests ({e}): starting it for every test");
                }
                self.serving = Some(false);
                Ok(false)
            }
            // A restart that failed: this run spawns, the next tries again.
            (Err(_), Some(_)) => Ok(false),
        }
    }

    /// The coverage-map entries the program uses, if it serves (started here if
    /// not yet): the observers need not look at more.
    pub(super) fn map_len(&mut self) -> Result<Option<usize>, libafl::Error> {
        if self.server.is_none() && !self.start_server()? {
            return Ok(None);
        }
        Ok(self.server.as_ref().map(|s| s.edges))
    }

    /// The same executor observing with `observers`.
    pub(super) fn with_observers<OT2>(self, observers: OT2) -> SysExecutor<OT2> {
        SysExecutor {
            program: self.program,
            argv0: self.argv0,
            work: self.work,
            limit: self.limit,
            hang: self.hang,
            slow_edges: self.slow_edges,
            hung: self.hung,
            stopped: self.stopped,
            env: self.env,
            observers,
            slot: self.slot,
            cwd_empty: self.cwd_empty,
            server: self.server,
            serving: self.serving,
            restarts: self.restarts,
            stopped_runs: self.stopped_runs,
            born: self.born,
            last_ended_well: self.last_ended_well,
            stdin: self.stdin,
            on_tmpfs: self.on_tmpfs,
            cwd_handle: self.cwd_handle,
            notice: self.notice,
            limits: self.limits,
            bwrap: self.bwrap,
        }
    }

    /// Run through the forkserver; `None` if the program is no server (or the
    /// server died during this run: the next run starts a new one).
    fn serve(
        &mut self,
        input: &SysInput,
        dir: &Path,
        stdin: &Path,
        limit: Duration,
    ) -> Result<Option<ExitKind>, libafl::Error> {
        if self.serving == Some(false) {
            return Ok(None);
        }
        if self.server.is_none() && !self.start_server()? {
            return Ok(None);
        }
        let server = self.server.as_mut().expect("started above");
        let mut argv: Vec<&[u8]> = vec![self.argv0.as_os_str().as_bytes()];
        argv.extend(input.args.iter().map(Vec::as_slice));
        let env: Vec<(&[u8], &[u8])> = input
            .env
            .iter()
            .map(|(k, v)| (k.as_bytes(), v.as_bytes()))
            .collect();
        let cwd = std::path::absolute(dir)?;
        let req = Request {
            argv: &argv,
            env: &env,
            cwd: &cwd,
            stdin,
            stdout: None,
            stderr: None,
            limits: self.limits,
        };
        Ok(match server.run(&req, limit) {
            RunEnd::Ended(e) => {
                let status = e.status as i32;
                Some(if libc::WIFSIGNALED(status) {
                    killed_by(libc::WTERMSIG(status))
                } else {
                    ExitKind::Ok
                })
            }
            RunEnd::Timeout(_) => Some(ExitKind::Timeout),
            RunEnd::ServerDied => {
                self.server = None;
                None
            }
        })
    }

    /// Start the program for this input alone.
    fn spawn(
        &mut self,
        input: &SysInput,
        dir: &Path,
        stdin_path: &Path,
        limit: Duration,
    ) -> Result<ExitKind, libafl::Error> {
        let mut cmd = self.command();
        cmd.args(input.args.iter().map(|a| OsStr::from_bytes(a)))
            .current_dir(dir)
            .envs(&input.env)
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        let limits = self.limits;
        // SAFETY: setrlimit is async-signal-safe and touches only the child.
        unsafe {
            cmd.pre_exec(move || {
                for (resource, value) in [
                    (libc::RLIMIT_CPU, limits.cpu_secs),
                    (libc::RLIMIT_AS, limits.address_space),
                ] {
                    if value > 0 {
                        libc::setrlimit(
                            resource,
                            &libc::rlimit {
                                rlim_cur: value,
                                rlim_max: value,
                            },
                        );
                    }
                }
                Ok(())
            });
        }
        let quiet = trestle_exec::launch::Capture {
            stdout: false,
            stderr: false,
        };
        let ended =
            trestle_exec::launch::run_to_end(&mut cmd, stdin_path, quiet, limit).map_err(|e| {
                libafl::Error::unknown(format!(
                    "cannot run program {}: {e:#}",
                    self.program.display()
                ))
            })?;
        Ok(match ended.status {
            systest::RunStatus::Signaled(sig) => killed_by(sig),
            systest::RunStatus::TimedOut => ExitKind::Timeout,
            _ => ExitKind::Ok,
        })
    }
}

impl<EM, S, Z, OT> Executor<EM, SysInput, S, Z> for SysExecutor<OT>
where
    S: HasExecutions,
{
    fn run_target(
        &mut self,
        _fuzzer: &mut Z,
        state: &mut S,
        _mgr: &mut EM,
        input: &SysInput,
    ) -> Result<ExitKind, libafl::Error> {
        *state.executions_mut() += 1;
        self.run(input)
    }
}

/// The stdin file every run reads (absolute), kept open: a changed input is written
/// over the last one in place and the file cut to its length, with no path lookup
/// and, where the lengths are alike, no pages freed and taken again (opening it
/// truncated every run was a fifth of the fuzzer's own time on a fast program).
#[derive(Default)]
struct StdinFile {
    path: PathBuf,
    file: Option<std::fs::File>,
    /// What the file holds (when `file` is open).
    content: Vec<u8>,
}

impl StdinFile {
    /// Make the file in `dir` hold `bytes`.
    fn set(&mut self, dir: &Path, bytes: &[u8]) -> std::io::Result<()> {
        if self.file.is_some() && self.content == bytes {
            return Ok(());
        }
        let result = self.write(dir, bytes);
        if result.is_err() {
            // Unknown contents: the next run opens it afresh and writes it whole.
            self.file = None;
        }
        result
    }

    fn write(&mut self, dir: &Path, bytes: &[u8]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt as _;
        let file = match &self.file {
            Some(f) => f,
            None => {
                self.path = std::path::absolute(dir.join("stdin"))?;
                self.content.clear();
                self.file.insert(std::fs::File::create(&self.path)?)
            }
        };
        file.write_all_at(bytes, 0)?;
        // Cut to length also when it grew: what else wrote to the file may have made
        // it longer still.
        file.set_len(bytes.len() as u64)?;
        self.content.clear();
        self.content.extend_from_slice(bytes);
        Ok(())
    }
}

/// Whether `dir` is on a tmpfs.
fn is_tmpfs(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt as _;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a NUL-terminated path and a statfs buffer of the right type.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    unsafe { libc::statfs(c.as_ptr(), &mut fs) == 0 && fs.f_type == libc::TMPFS_MAGIC }
}

/// Whether the directory `dir` exists and is empty. With `open`, the same directory
/// opened on a tmpfs, its size says so without a path lookup: 40 bytes (its `.` and
/// `..`; each entry adds 20), and two links (none once removed). Elsewhere it is read.
fn is_empty_dir(dir: &Path, open: Option<&std::fs::File>) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    if let Some(f) = open {
        return f
            .metadata()
            .is_ok_and(|m| m.is_dir() && m.nlink() == 2 && m.len() == 40);
    }
    std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_none())
}

/// How a run that a signal ended counts: a crash signal is a crash. A run the kernel
/// ended at its CPU limit (a little below the hang limit, `cpu_limit`, so a program
/// spinning on the CPU meets it before the wall clock) is a timeout: with the soft
/// limit at the hard one, as the lean server and `spawn` set it, that is SIGKILL,
/// not SIGXCPU. Any other signal ends the run like an exit.
fn killed_by(sig: i32) -> ExitKind {
    if is_crash_signal(sig) {
        ExitKind::Crash
    } else if sig == libc::SIGXCPU || sig == libc::SIGKILL {
        ExitKind::Timeout
    } else {
        ExitKind::Ok
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The kept-open stdin file holds exactly the last input, shorter or longer than
    /// the one before, and is opened again after an error.
    #[test]
    fn the_stdin_file_holds_exactly_the_last_input() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = StdinFile::default();
        for content in [
            &b"a longer first input\n"[..],
            b"short",
            b"",
            b"grown again, longer\n",
        ] {
            f.set(dir.path(), content).unwrap();
            assert_eq!(std::fs::read(&f.path).unwrap(), content);
        }
        // Written behind its back (a program that writes to it): the next change is
        // written whole over it.
        std::fs::write(&f.path, b"scribbled over by someone else, at length").unwrap();
        f.set(dir.path(), b"the next input, longer than the last")
            .unwrap();
        assert_eq!(
            std::fs::read(&f.path).unwrap(),
            b"the next input, longer than the last"
        );
        let gone = tempfile::tempdir().unwrap();
        let mut g = StdinFile::default();
        let missing = gone.path().join("no-such-dir");
        assert!(g.set(&missing, b"x").is_err());
        assert!(g.file.is_none());
        g.set(gone.path(), b"x").unwrap();
        assert_eq!(std::fs::read(&g.path).unwrap(), b"x");
    }

    /// An open working directory on a tmpfs says whether it is empty by its size; one
    /// removed is not empty (it must be made again); elsewhere it is read.
    #[test]
    fn an_empty_working_directory_is_told_apart_without_reading_it() {
        let root = systest::scratch_dir("trestle-test-").unwrap();
        let dir = root.path().join("cwd");
        std::fs::create_dir(&dir).unwrap();
        let open = std::fs::File::open(&dir).unwrap();
        let handle = is_tmpfs(root.path()).then_some(&open);
        assert!(is_empty_dir(&dir, handle));
        std::fs::write(dir.join("out.txt"), b"x").unwrap();
        assert!(!is_empty_dir(&dir, handle));
        std::fs::create_dir(dir.join("sub")).unwrap();
        std::fs::remove_file(dir.join("out.txt")).unwrap();
        assert!(!is_empty_dir(&dir, handle));
        std::fs::remove_dir(dir.join("sub")).unwrap();
        assert!(is_empty_dir(&dir, handle));
        std::fs::remove_dir(&dir).unwrap();
        assert!(!is_empty_dir(&dir, handle));
    }
}

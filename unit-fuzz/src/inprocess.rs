//! In-process unit fuzzing, the host side: start the harness with a plan, wait, read
//! what it did.
//!
//! A forkserver execution is a round trip between the fuzzer and the harness, which
//! costs far more than most units. In-process, the fuzzer runs inside the harness:
//! the program restores the unit's context once, loads the fuzzer library
//! (`libtrestle_inproc.so`, crate `unit-fuzz/inproc`) and calls its entry point with
//! a callback that runs one execution (`trestle_abi::fuzz::InProcessTarget`). The
//! library's LibAFL fuzzer (the feedbacks, objectives, mutators and stages of the
//! forkserver campaign) sees a crash of the unit as the end of one execution, and
//! restarts itself from a fork of that process after a hang: the campaign goes on.
//!
//! ```text
//! caller ── writes the plan, waits until the deadline, prints the status line
//!  └─ program (TRESTLE_FUZZ + TRESTLE_FUZZ_INPROC): restores the context, dlopens
//!      │  the library, which forks
//!      └─ fuzzer i (a fork; the next one after a hang or a periodic fresh start)
//! ```
//!
//! The library writes its [`InProcessReport`] every second and when it stops; the
//! caller turns it into the [`FuzzReport`] and sorts `.solutions` as for any campaign.

use crate::{io, Dictionary, FuzzConfig, FuzzError, FuzzReport};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};
use trestle_abi::fuzz::{ENV_FUZZ, ENV_FUZZ_INPROC, ENV_FUZZ_INPROC_LIB};
use trestle_abi::unit::Param;

/// Fuzzer processes a unit may take down with it (see [`InProcessReport::lost`])
/// before in-process fuzzing gives it up and the forkserver harness, where the unit
/// runs in a process of its own, fuzzes it for the rest of the time. (paste's
/// `put_delim_run` writes past a static buffer: in-process, 49 fuzzer processes died
/// in ten seconds for 327 executions.)
pub const MAX_LOST_PROCESSES: u64 = 5;

/// The fuzzer library's file name (found next to the running executable).
pub const LIBRARY: &str = "libtrestle_inproc.so";

/// What the in-process fuzzer needs, handed over in a file (bincode).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct InProcessPlan {
    /// Output directory: `queue/` and `.solutions/` are written here.
    pub out: PathBuf,
    /// Where to write the [`InProcessReport`].
    pub report: PathBuf,
    /// The unit's parameters (for the value mutator and the recorded input).
    pub params: Vec<Param>,
    /// Dictionary.
    pub dictionary: Dictionary,
    /// Random seed.
    pub seed: u64,
    /// Time limit per execution.
    pub timeout: Duration,
    /// Use CmpLog (input-to-state).
    pub cmplog: bool,
    /// Stop at the first crash.
    pub stop_on_crash: bool,
    /// Campaign start and deadline, wall-clock (they cross an `exec`).
    pub start: SystemTime,
    /// The deadline.
    pub end: SystemTime,
    /// [`FuzzConfig::goal`].
    #[serde(default)]
    pub goal: Vec<u32>,
    /// [`FuzzConfig::after_goal`].
    #[serde(default)]
    pub after_goal: Duration,
    /// [`FuzzConfig::seeds`].
    #[serde(default)]
    pub seeds: Vec<Vec<u8>>,
}

/// What the in-process fuzzer did, written by it every second and when it stops.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct InProcessReport {
    /// Executions, over all its restarts.
    pub executions: u64,
    /// Inputs in the queue.
    pub corpus: usize,
    /// Objectives kept (crashes and timeouts, still to be sorted).
    pub objectives: usize,
    /// Seconds from the campaign start to the first objective.
    pub first_crash_after: Option<f64>,
    /// Seconds from the campaign start until an input hit a goal edge.
    #[serde(default)]
    pub goal_after: Option<f64>,
    /// Fuzzer processes started after the first (hangs, periodic fresh starts).
    pub restarts: u64,
    /// Fuzzer processes that died without saving their state: a crash outside the
    /// unit call, most likely a unit that corrupts memory the fuzzer lives in.
    #[serde(default)]
    pub lost: u64,
    /// The hang limit in milliseconds, once the first fuzzer process measured it.
    #[serde(default)]
    pub hang_limit_ms: Option<u64>,
    /// Set when the fuzzer stopped by itself (deadline, or a crash with
    /// `stop_on_crash`, or [`MAX_LOST_PROCESSES`] lost).
    pub done: bool,
    /// Why it could not fuzz.
    pub error: Option<String>,
}

/// [`LIBRARY`]: `TRESTLE_INPROC_LIB`, or next to the running executable (or one
/// directory up, for test binaries in `target/<profile>/deps`).
pub fn library_path() -> Result<PathBuf, FuzzError> {
    crate::find_next_to_exe(LIBRARY, "TRESTLE_INPROC_LIB").map_err(FuzzError::NoInProcessLibrary)
}

/// Run the in-process campaign until its deadline; crashes and timeouts are left in
/// `.solutions` for the caller to sort.
pub(crate) fn campaign(
    cfg: &FuzzConfig,
    out: &Path,
    request: &Path,
    cwd: &Path,
) -> Result<FuzzReport, FuzzError> {
    let library = library_path()?;
    let dir = out.join(".inproc");
    // A previous campaign's plan, report and log; none is the usual case.
    match std::fs::remove_dir_all(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(io("cannot remove", &dir)(e))
        }
        _ => {}
    }
    std::fs::create_dir_all(&dir).map_err(io("cannot create", &dir))?;
    let report_file = dir.join("report.json");
    let start = Instant::now();
    let plan_file = write_plan(cfg, out, &dir, &report_file)?;
    // The harness's own stderr (set-up errors, the library's diagnostics); the unit's
    // output goes to /dev/null inside the library.
    let log_file = dir.join("harness.log");
    let log = std::fs::File::create(&log_file).map_err(io("cannot create", &log_file))?;
    let mut child = trestle_exec::spawn::start(&mut harness_command(
        cfg, request, cwd, &plan_file, &library, log,
    ))
    .map_err(io("cannot start", &cfg.program))?
    .child;
    // The fuzzer stops at the deadline after its current round: give it that (a
    // tracing run, a restart), then end whatever is left.
    let grace = Duration::from_secs(5) + cfg.timeout * 4;
    let finished = supervise(
        cfg,
        &mut child,
        &report_file,
        start,
        start + cfg.time + grace,
    )?;
    let seconds = start.elapsed().as_secs_f64();
    let r = match read_report(&report_file)? {
        Some(InProcessReport { error: Some(e), .. }) => {
            return Err(FuzzError::Libafl(format!("in-process fuzzing failed: {e}")));
        }
        Some(r) => r,
        None => {
            let why = if finished {
                log_tail(&log_file)
            } else {
                format!(
                    "did not stop within {:.0}s of the deadline",
                    grace.as_secs_f64()
                )
            };
            return Err(FuzzError::Libafl(format!(
                "in-process fuzzing failed: the harness reported nothing ({why}); see {}",
                log_file.display()
            )));
        }
    };
    if !r.done && r.executions == 0 {
        return Err(FuzzError::Libafl(format!(
            "in-process fuzzing failed: {}; see {}",
            log_tail(&log_file),
            log_file.display()
        )));
    }
    let report = FuzzReport {
        executions: r.executions,
        seconds,
        corpus: r.corpus,
        first_crash_after: r.first_crash_after,
        goal_after: r.goal_after,
        hang_limit_ms: r.hang_limit_ms,
        ..FuzzReport::default()
    };
    let left = cfg.time.saturating_sub(start.elapsed());
    if r.lost < MAX_LOST_PROCESSES || left < Duration::from_secs(1) || r.goal_after.is_some() {
        return Ok(report);
    }
    // The unit keeps taking the fuzzer down: the rest of the time in the forkserver
    // harness, each execution in a process of its own.
    let rest = crate::single_core_campaign(
        &FuzzConfig {
            time: left,
            ..cfg.clone()
        },
        out,
        request,
        cwd,
    )?;
    Ok(FuzzReport {
        executions: report.executions + rest.executions,
        seconds: start.elapsed().as_secs_f64(),
        corpus: report.corpus.max(rest.corpus),
        first_crash_after: report.first_crash_after.or(rest
            .first_crash_after
            .map(|t| t + (cfg.time - left).as_secs_f64())),
        crashes: rest.crashes,
        timeouts: rest.timeouts,
        goal_after: rest.goal_after.map(|t| t + (cfg.time - left).as_secs_f64()),
        // The forkserver's timeouts are by the full limit: sort them by it.
        hang_limit_ms: None,
    })
}

/// Write the [`InProcessPlan`] into `dir`; returns its path.
fn write_plan(
    cfg: &FuzzConfig,
    out: &Path,
    dir: &Path,
    report_file: &Path,
) -> Result<PathBuf, FuzzError> {
    let now = SystemTime::now();
    let plan = InProcessPlan {
        out: out.to_owned(),
        report: report_file.to_owned(),
        params: cfg.unit.params.clone(),
        dictionary: cfg.dictionary.clone(),
        seed: cfg.seed,
        timeout: cfg.timeout,
        cmplog: cfg.cmplog,
        stop_on_crash: cfg.stop_on_crash,
        start: now,
        end: now + cfg.time,
        goal: cfg.goal.clone(),
        after_goal: cfg.after_goal,
        seeds: cfg.seeds.clone(),
    };
    let plan_file = dir.join("plan.bin");
    std::fs::write(
        &plan_file,
        bincode::serialize(&plan).map_err(|e| FuzzError::Libafl(e.to_string()))?,
    )
    .map_err(io("cannot write", &plan_file))?;
    Ok(plan_file)
}

/// The harness loading the fuzzer `library` with `plan_file`, its stderr to `log`,
/// in a process group of its own that dies with the caller.
fn harness_command(
    cfg: &FuzzConfig,
    request: &Path,
    cwd: &Path,
    plan_file: &Path,
    library: &Path,
    log: std::fs::File,
) -> std::process::Command {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(&cfg.program);
    cmd.env(ENV_FUZZ, request)
        .env(ENV_FUZZ_INPROC, plan_file)
        .env(ENV_FUZZ_INPROC_LIB, library)
        .current_dir(cwd)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log);
    if let Some(id) = cfg.goal_cmp {
        cmd.env(trestle_abi::fuzz::ENV_FUZZ_GOAL_CMP, id.to_string());
    }
    let pin = cfg.pin_core;
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            // Recorded addresses of C library objects stay valid only without
            // ASLR. It leads a process group of its own (`spawn::start`), so
            // that everything the harness forks can be ended together.
            crate::libc_personality();
            // Out of the caller's process group, Ctrl-C no longer reaches it:
            // it ends with the caller instead (and its fuzzers with it).
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            if let Some(core) = pin {
                crate::pin_to_core(core);
            }
            Ok(())
        });
    }
    cmd
}

/// Wait for the harness until `hard_end` (then end its process group), printing
/// the status line and stopping it at a plateau as asked. Returns whether it
/// stopped by itself (or at a plateau) rather than being ended at `hard_end`.
fn supervise(
    cfg: &FuzzConfig,
    child: &mut std::process::Child,
    report_file: &Path,
    start: Instant,
    hard_end: Instant,
) -> Result<bool, FuzzError> {
    let pgid = Pid::from_raw(child.id() as i32);
    let end_group = |child: &mut std::process::Child| {
        // The group may be gone already; the wait reaps the harness either way.
        let _ = killpg(pgid, Signal::SIGKILL);
        child
            .wait()
            .map_err(io("cannot wait for the harness", &cfg.program))
    };
    let mut last = Instant::now();
    // Progress as (queue, objectives) and when it last moved, for `plateau`.
    let mut progress = (0usize, 0usize);
    let mut moved = Instant::now();
    let mut checked = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return Ok(true),
            Ok(None) => {}
            Err(e) => {
                end_group(child)?;
                return Err(io("cannot wait for the harness", &cfg.program)(e));
            }
        }
        if Instant::now() > hard_end {
            end_group(child)?;
            return Ok(false);
        }
        if let Some(plateau) = cfg
            .plateau
            .filter(|_| checked.elapsed() >= Duration::from_millis(500))
        {
            checked = Instant::now();
            if let Some(r) = poll_report(report_file) {
                if (r.corpus, r.objectives) != progress {
                    progress = (r.corpus, r.objectives);
                    moved = Instant::now();
                } else if moved.elapsed() >= plateau && r.executions > 0 {
                    // Nothing new for a while: stop here. The report is at most a
                    // second old; what the fuzzer kept is on disk already.
                    end_group(child)?;
                    return Ok(true);
                }
            }
        }
        if cfg.progress && last.elapsed() >= Duration::from_secs(1) {
            last = Instant::now();
            if let Some(r) = poll_report(report_file) {
                let el = start.elapsed().as_secs_f64();
                eprintln!(
                    "[fuzz {:>4.0}s] {} execs ({:.0}/s), corpus {}, objectives {}",
                    el,
                    r.executions,
                    r.executions as f64 / el.max(1e-9),
                    r.corpus,
                    r.objectives
                );
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The last few lines of the harness's stderr, for an error message.
fn log_tail(log_file: &Path) -> String {
    match std::fs::read_to_string(log_file) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
            lines[lines.len().saturating_sub(5)..].join("; ")
        }
        Err(e) => format!("cannot read {}: {e}", log_file.display()),
    }
}

/// The library's report: `None` if it has written none; an error if it cannot be
/// read or does not parse (the library writes it whole, through a rename).
fn read_report(path: &Path) -> Result<Option<InProcessReport>, FuzzError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io("cannot read the in-process report", path)(e)),
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        FuzzError::Libafl(format!("corrupt in-process report {}: {e}", path.display()))
    })
}

/// The report while the campaign runs, for the status line and the plateau: one
/// that cannot be read now is read again on the next check, and the final
/// [`read_report`] says what is wrong with it.
fn poll_report(path: &Path) -> Option<InProcessReport> {
    read_report(path).ok().flatten()
}

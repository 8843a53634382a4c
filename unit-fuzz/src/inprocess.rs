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
use nix::unistd::{setpgid, Pid};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};
use trestle_abi::fuzz::{ENV_FUZZ, ENV_FUZZ_INPROC, ENV_FUZZ_INPROC_LIB};
use trestle_abi::unit::Param;

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
    /// Fuzzer processes started after the first (hangs, periodic fresh starts).
    pub restarts: u64,
    /// Set when the fuzzer stopped by itself (deadline, or a crash with
    /// `stop_on_crash`).
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
pub(crate) fn campaign(cfg: &FuzzConfig, out: &Path, request: &Path, cwd: &Path) -> Result<FuzzReport, FuzzError> {
    let library = library_path()?;
    let dir = out.join(".inproc");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(io("cannot create", &dir))?;
    let report_file = dir.join("report.json");
    let start = Instant::now();
    let now = SystemTime::now();
    let plan = InProcessPlan {
        out: out.to_owned(),
        report: report_file.clone(),
        params: cfg.unit.params.clone(),
        dictionary: cfg.dictionary.clone(),
        seed: cfg.seed,
        timeout: cfg.timeout,
        cmplog: cfg.cmplog,
        stop_on_crash: cfg.stop_on_crash,
        start: now,
        end: now + cfg.time,
    };
    let plan_file = dir.join("plan.bin");
    std::fs::write(&plan_file, bincode::serialize(&plan).map_err(|e| FuzzError::Libafl(e.to_string()))?)
        .map_err(io("cannot write", &plan_file))?;
    // The harness's own stderr (set-up errors, the library's diagnostics); the unit's
    // output goes to /dev/null inside the library.
    let log_file = dir.join("harness.log");
    let log = std::fs::File::create(&log_file).map_err(io("cannot create", &log_file))?;

    let mut cmd = std::process::Command::new(&cfg.program);
    cmd.env(ENV_FUZZ, request)
        .env(ENV_FUZZ_INPROC, &plan_file)
        .env(ENV_FUZZ_INPROC_LIB, &library)
        .current_dir(cwd)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log);
    let pin = cfg.pin_core;
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                // Recorded addresses of C library objects stay valid only without
                // ASLR; a process group of its own, so that everything the harness
                // forks can be ended together.
                crate::libc_personality();
                let _ = setpgid(Pid::from_raw(0), Pid::from_raw(0));
                // Out of the caller's process group, Ctrl-C no longer reaches it:
                // it ends with the caller instead (and its fuzzers with it).
                let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
                if let Some(core) = pin {
                    crate::pin_to_core(core);
                }
                Ok(())
            });
        }
    }
    let mut child = cmd.spawn().map_err(io("cannot start", &cfg.program))?;
    let pgid = child.id() as i32;
    // The fuzzer stops at the deadline after its current round: give it that (a
    // tracing run, a restart), then end whatever is left.
    let grace = Duration::from_secs(5) + cfg.timeout * 4;
    let hard_end = start + cfg.time + grace;
    let mut last = Instant::now();
    // Progress as (queue, objectives) and when it last moved, for `plateau`.
    let mut progress = (0usize, 0usize);
    let mut moved = Instant::now();
    let mut checked = Instant::now();
    let finished = loop {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => break true,
            Ok(None) => {}
        }
        if Instant::now() > hard_end {
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
            let _ = child.wait();
            break false;
        }
        if let Some(plateau) = cfg.plateau.filter(|_| checked.elapsed() >= Duration::from_millis(500)) {
            checked = Instant::now();
            if let Some(r) = read_report(&report_file) {
                if (r.corpus, r.objectives) != progress {
                    progress = (r.corpus, r.objectives);
                    moved = Instant::now();
                } else if moved.elapsed() >= plateau && r.executions > 0 {
                    // Nothing new for a while: stop here. The report is at most a
                    // second old; what the fuzzer kept is on disk already.
                    let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
                    let _ = child.wait();
                    break true;
                }
            }
        }
        if cfg.progress && last.elapsed() >= Duration::from_secs(1) {
            last = Instant::now();
            if let Some(r) = read_report(&report_file) {
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
    };

    let seconds = start.elapsed().as_secs_f64();
    let report = read_report(&report_file);
    let log_tail = || {
        let text = std::fs::read_to_string(&log_file).unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        lines[lines.len().saturating_sub(5)..].join("; ")
    };
    let r = match report {
        Some(InProcessReport { error: Some(e), .. }) => {
            return Err(FuzzError::Libafl(format!("in-process fuzzing failed: {e}")));
        }
        Some(r) => r,
        None => {
            let why = if finished { log_tail() } else { format!("did not stop within {:.0}s of the deadline", grace.as_secs_f64()) };
            return Err(FuzzError::Libafl(format!(
                "in-process fuzzing failed: the harness reported nothing ({why}); see {}",
                log_file.display()
            )));
        }
    };
    if !r.done && r.executions == 0 {
        return Err(FuzzError::Libafl(format!("in-process fuzzing failed: {}; see {}", log_tail(), log_file.display())));
    }
    Ok(FuzzReport {
        executions: r.executions,
        seconds,
        corpus: r.corpus,
        first_crash_after: r.first_crash_after,
        ..FuzzReport::default()
    })
}

fn read_report(path: &Path) -> Option<InProcessReport> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

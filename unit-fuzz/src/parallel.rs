//! Multi-core unit fuzzing: LibAFL's `Launcher` runs one fuzzer per core, each the
//! single-core campaign (`run_fuzzer`) with its own harness processes and shared
//! memory, and its LLMP broker passes new queue entries between them.
//!
//! The processes:
//!
//! ```text
//! caller ── waits, enforces the time limit, reads the clients' reports
//!  └─ trestle-fuzz-launcher (spawned: a fresh single-threaded process, so the
//!      │  launcher's forks are safe whatever threads the caller runs)
//!      ├─ broker (forked by its restarting manager; prints the status line)
//!      └─ respawner i, pinned to core i ── fuzzer i ── harness processes
//! ```
//!
//! Every fuzzer stops at one shared deadline (wall-clock time in the launch plan,
//! turned into an `Instant` before the forks, so a respawned fuzzer does not start a
//! fresh budget), when another client found a crash and `stop_on_crash` is set (a
//! marker file in the output directory), or when the caller is gone. Queue and
//! solutions directories are shared: LibAFL names entries by content hash and counts
//! writers in lock files, so nothing is clobbered. Each fuzzer writes a small report
//! every second and when it stops; the caller sums them.

use crate::forkserver::{run_fuzzer, ReportedProgress, UnitState};
use crate::pace::{ClientPace, ClientReport};
use crate::{io, lib, FuzzConfig, FuzzError, FuzzReport};
use libafl::events::launcher::{ClientDescription, Launcher};
use libafl::events::{EventConfig, LlmpRestartingEventManager, SendExiting, ShouldSaveState};
use libafl::inputs::BytesInput;
use libafl::monitors::stats::ClientStatsManager;
use libafl::monitors::Monitor;
use libafl_bolts::core_affinity::{get_core_ids, Cores};
use libafl_bolts::shmem::{ShMemProvider, UnixShMem, UnixShMemProvider};
use libafl_bolts::ClientId;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{getpid, Pid};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

/// The launcher's monitor: one compact status line a second, summed over clients.
struct StatusLineMonitor {
    start: Instant,
    last: Option<Instant>,
    quiet: bool,
}

impl Monitor for StatusLineMonitor {
    fn display(
        &mut self,
        stats: &mut ClientStatsManager,
        _event: &str,
        _sender: ClientId,
    ) -> Result<(), libafl::Error> {
        if self.quiet
            || self
                .last
                .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            return Ok(());
        }
        self.last = Some(Instant::now());
        let clients: Vec<_> = stats
            .client_stats()
            .values()
            .filter(|c| c.enabled())
            .collect();
        let execs: u64 = clients.iter().map(|c| c.executions()).sum();
        // Clients share their queue entries: the largest queue is the campaign's.
        let corpus = clients.iter().map(|c| c.corpus_size()).max().unwrap_or(0);
        let objectives: u64 = clients.iter().map(|c| c.objective_size()).sum();
        let el = self.start.elapsed().as_secs_f64();
        eprintln!(
            "[fuzz {:>4.0}s] {} execs ({:.0}/s), corpus {}, objectives {}, clients {}",
            el,
            execs,
            execs as f64 / el.max(1e-9),
            corpus,
            objectives,
            clients.len()
        );
        Ok(())
    }
}

/// The program that runs the launcher (found next to the running executable).
pub const LAUNCHER: &str = "trestle-fuzz-launcher";

/// What the launcher process needs, handed over in a file.
#[derive(serde::Serialize, serde::Deserialize)]
struct LaunchPlan {
    cfg: FuzzConfig,
    out: PathBuf,
    request: PathBuf,
    cwd: PathBuf,
    /// Core ids, client i on the i-th.
    cores: Vec<usize>,
    port: u16,
    /// Campaign start and deadline, wall-clock (they cross an `exec`).
    start: SystemTime,
    end: SystemTime,
    caller: i32,
}

/// Run `cfg.cores` fuzzers until the deadline; returns the summed report (crashes
/// and timeouts are left in `.solutions` for the caller to sort).
pub(crate) fn campaign(
    cfg: &FuzzConfig,
    out: &Path,
    request: &Path,
    cwd: &Path,
) -> Result<FuzzReport, FuzzError> {
    // Client i runs on the i-th core this process may use (core i, usually).
    let allowed = get_core_ids().map_err(lib)?;
    if cfg.cores > allowed.len() {
        return Err(FuzzError::Cores {
            cores: cfg.cores,
            available: allowed.len(),
        });
    }
    let program = launcher_path()?;
    let port = free_port().map_err(io(
        "cannot find a free port for the broker on",
        Path::new("127.0.0.1"),
    ))?;
    let reports = out.join(".clients");
    remove_if_present(&reports)?;
    std::fs::create_dir_all(&reports).map_err(io("cannot create", &reports))?;
    let stop_file = out.join(".stop");
    remove_if_present(&stop_file)?;

    let start = Instant::now();
    let now = SystemTime::now();
    let plan = LaunchPlan {
        cfg: cfg.clone(),
        out: out.to_owned(),
        request: request.to_owned(),
        cwd: cwd.to_owned(),
        cores: allowed[..cfg.cores].iter().map(|c| c.0).collect(),
        port,
        start: now,
        end: now + cfg.time,
        caller: getpid().as_raw(),
    };
    let plan_file = reports.join("plan.bin");
    let bytes = bincode::serialize(&plan).map_err(|e| FuzzError::Libafl(e.to_string()))?;
    std::fs::write(&plan_file, bytes).map_err(io("cannot write", &plan_file))?;
    let mut child = std::process::Command::new(&program)
        .arg(&plan_file)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .map_err(io("cannot start", &program))?;
    // Clients stop at the deadline after their current round; give them that and
    // the broker's goodbye, then end whatever is left.
    let grace = Duration::from_secs(5) + cfg.timeout * 4;
    let finished = supervise(&mut child, start + cfg.time + grace)
        .map_err(io("cannot wait for the launcher", &program))?;
    // Best effort: the findings are in, and the next campaign removes a marker
    // left here (or says why it cannot).
    let _ = std::fs::remove_file(&stop_file);

    let mut report = FuzzReport {
        seconds: start.elapsed().as_secs_f64(),
        ..FuzzReport::default()
    };
    let (reported, mut errors) = sum_client_reports(&reports, &mut report)?;
    report.corpus = std::fs::read_dir(out.join("queue"))
        .map(|d| {
            d.flatten()
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .count()
        })
        .unwrap_or(0);
    if !finished {
        errors.push(format!(
            "the fuzzers did not stop within {:.0}s of the deadline",
            grace.as_secs_f64()
        ));
    }
    errors.dedup();
    if reported == 0 {
        let why = if errors.is_empty() {
            "no fuzzer reported".to_owned()
        } else {
            errors.join("; ")
        };
        return Err(FuzzError::Libafl(format!(
            "multi-core fuzzing failed: {why}"
        )));
    }
    if !errors.is_empty() {
        // The campaign counts with what the others reported; its finds are kept.
        eprintln!("trestle fuzz: multi-core fuzzing: {}", errors.join("; "));
    }
    Ok(report)
}

/// Remove a file or directory tree that a previous campaign may have left.
fn remove_if_present(path: &Path) -> Result<(), FuzzError> {
    let removed = if path.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    };
    match removed {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("cannot remove", path)(e)),
        _ => Ok(()),
    }
}

/// Add the clients' reports in `reports` to `report`: returns how many fuzzers
/// reported without an error, and the errors (a client's own, a launch failure, a
/// report that cannot be read or parsed).
fn sum_client_reports(
    reports: &Path,
    report: &mut FuzzReport,
) -> Result<(usize, Vec<String>), FuzzError> {
    let mut errors = Vec::new();
    let mut reported = 0;
    for entry in std::fs::read_dir(reports).map_err(io("cannot list", reports))? {
        let path = entry.map_err(io("cannot list", reports))?.path();
        let kind = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or_default();
        if kind != "json" && kind != "err" {
            continue;
        }
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) => {
                errors.push(format!("cannot read {}: {e}", path.display()));
                continue;
            }
        };
        if kind == "err" {
            errors.push(String::from_utf8_lossy(&bytes).into_owned());
            continue;
        }
        let r = match serde_json::from_slice::<ClientReport>(&bytes) {
            Ok(r) => r,
            Err(e) => {
                errors.push(format!("corrupt client report {}: {e}", path.display()));
                continue;
            }
        };
        report.executions += r.executions;
        if let Some(t) = r.first_crash_after {
            report.first_crash_after = Some(report.first_crash_after.map_or(t, |u: f64| u.min(t)));
        }
        match r.error {
            Some(e) => errors.push(e),
            None => reported += 1,
        }
    }
    Ok((reported, errors))
}

/// [`LAUNCHER`]: `TRESTLE_FUZZ_LAUNCHER`, or next to the running executable (or one
/// directory up, for test binaries in `target/<profile>/deps`).
fn launcher_path() -> Result<PathBuf, FuzzError> {
    crate::find_next_to_exe(LAUNCHER, "TRESTLE_FUZZ_LAUNCHER").map_err(FuzzError::NoLauncher)
}

/// The launcher program's body: read the plan, start the broker and one client per
/// core, wait for them, clean up. Returns the exit status. Every process the
/// launcher forks comes back through here when its part is over, and exits with
/// what this returns.
pub fn launcher_main(plan_file: &Path) -> i32 {
    let reports = plan_file.parent().unwrap_or(Path::new(".")).to_owned();
    let plan: LaunchPlan = match std::fs::read(plan_file)
        .map_err(|e| e.to_string())
        .and_then(|b| bincode::deserialize(&b).map_err(|e| e.to_string()))
    {
        Ok(p) => p,
        Err(e) => {
            return launch_failed(
                &reports,
                &format!("cannot read the launch plan {}: {e}", plan_file.display()),
            )
        }
    };
    // Wall-clock times become this process's `Instant`s, which its forks share.
    let now = (Instant::now(), SystemTime::now());
    let start = now.0 - now.1.duration_since(plan.start).unwrap_or_default();
    let end = now.0 + plan.end.duration_since(now.1).unwrap_or_default();
    let pace = ClientPace {
        start,
        end,
        stop_file: plan.out.join(".stop"),
        caller: Pid::from_raw(plan.caller),
        reports,
        client: 0,
    };
    launch(&plan, &pace)
}

fn launch(plan: &LaunchPlan, pace: &ClientPace) -> i32 {
    let launcher_pid = getpid();
    let cfg = &plan.cfg;
    if let Err(e) = std::env::set_current_dir(&plan.cwd) {
        return launch_failed(
            &pace.reports,
            &format!("cannot enter {}: {e}", plan.cwd.display()),
        );
    }
    // As in the single-core path: the harness processes inherit this.
    crate::libc_personality();
    // Clients' own output (a panic, say) goes to a log, not the terminal.
    let log = pace.reports.join("clients.log");
    let log = log.to_str().unwrap_or_else(|| {
        eprintln!(
            "trestle fuzz: LibAFL takes a UTF-8 log path, not {}; the fuzzers' output is discarded",
            log.display()
        );
        "/dev/null"
    });
    let run_client = |restored: Option<UnitState>,
                      mut mgr: LlmpRestartingEventManager<
        (),
        BytesInput,
        UnitState,
        UnixShMem,
        UnixShMemProvider,
    >,
                      client: ClientDescription|
     -> Result<(), libafl::Error> {
        let pace = ClientPace {
            client: client.id(),
            ..pace.clone()
        };
        let seed = cfg.seed.wrapping_add(client.id() as u64);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_fuzzer(
                cfg,
                &plan.out,
                &plan.request,
                seed,
                &mut mgr,
                restored,
                Some(&pace),
            )
        }));
        let panicked = result.is_err();
        pace.write(&match result {
            Ok(Ok(r)) => ClientReport {
                executions: r.executions,
                first_crash_after: r.first_crash_after,
                error: None,
            },
            Ok(Err(e)) => ClientReport {
                error: Some(e.to_string()),
                ..ClientReport::default()
            },
            Err(_) => ClientReport {
                error: Some("the fuzzer panicked (see clients.log)".to_owned()),
                ..ClientReport::default()
            },
        });
        if panicked {
            // The panic is in clients.log. Respawning would most likely panic again,
            // at once and over and over: this core is done for the round (and its
            // connection may be what panicked, so nothing more goes through it).
            mgr.staterestorer.send_exiting();
            return Ok(());
        }
        // Tell the broker (it ends after the last client) and the respawner (it
        // must not start this fuzzer again) that this client is done.
        mgr.on_shutdown()?;
        // The broker maps a client's pages when it reads them: wait for that before
        // the pages go, but not forever (the broker may be gone).
        let waited = Instant::now();
        while !mgr.inner.llmp.safe_to_unmap() && waited.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    };
    let shmem = match UnixShMemProvider::new() {
        Ok(s) => s,
        Err(e) => return launch_failed(&pace.reports, &e.to_string()),
    };
    let cores = Cores::from(plan.cores.clone());
    let launcher = Launcher::builder()
        .shmem_provider(shmem)
        // Clients re-run received entries rather than trust another's observers.
        .configuration(EventConfig::AlwaysUnique)
        .monitor(StatusLineMonitor {
            start: pace.start,
            last: None,
            quiet: !cfg.progress,
        })
        .run_client(run_client)
        .cores(&cores)
        .broker_port(plan.port)
        .stdout_file(Some(log))
        // Keep the LLMP connection description current, so a fuzzer that dies
        // (out of memory, say) is respawned; its state starts afresh.
        .serialize_state(ShouldSaveState::OOMSafeNever)
        .build();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        launcher.launch::<BytesInput, UnitState>()
    }));
    let code = match result {
        Ok(Ok(())) | Ok(Err(libafl::Error::ShuttingDown)) => 0,
        Ok(Err(e)) => launch_failed(&pace.reports, &e.to_string()),
        Err(_) => launch_failed(
            &pace.reports,
            "a fuzzer process panicked (see .clients/clients.log)",
        ),
    };
    if getpid() == launcher_pid {
        // The broker and every client have ended; end what they may have left.
        kill_tree(launcher_pid, false);
        while let Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) =
            waitpid(None, Some(WaitPidFlag::WNOHANG))
        {}
    }
    code
}

/// The client's manager saves its connection's description as it does after the
/// events it fires (no state: a respawned fuzzer starts afresh).
impl ReportedProgress
    for LlmpRestartingEventManager<(), BytesInput, UnitState, UnixShMem, UnixShMemProvider>
{
    fn reported_progress(&mut self) -> Result<(), libafl::Error> {
        let connection = self.inner.llmp.describe()?;
        self.staterestorer.reset();
        self.staterestorer.save(&(None::<UnitState>, &connection))
    }
}

/// Leave `why` for the caller (a `.err` file in the reports; on stderr if that cannot
/// be written); returns the exit status.
fn launch_failed(reports: &Path, why: &str) -> i32 {
    let path = reports.join(format!("{}.err", getpid()));
    if let Err(e) = std::fs::write(&path, why) {
        eprintln!(
            "trestle fuzz: {why} (and cannot write {}: {e})",
            path.display()
        );
    }
    1
}

/// Wait for the launcher until `hard_end`; then end it and everything under it.
/// Returns whether it ended by itself; a launcher that cannot be waited for is
/// ended likewise, and the error returned.
fn supervise(launcher: &mut std::process::Child, hard_end: Instant) -> std::io::Result<bool> {
    let root = Pid::from_raw(launcher.id() as i32);
    // The launcher's processes as last seen: if it dies before them (killed), they
    // fuzz on as orphans, writing finds into the corpus; the round waits for them.
    let mut known: HashMap<Pid, u64> = HashMap::new();
    let mut looked = Instant::now() - Duration::from_secs(1);
    loop {
        if looked.elapsed() >= Duration::from_millis(500) {
            for p in descendants(root) {
                if let Some(started) = started_at(p) {
                    known.insert(p, started);
                }
            }
            looked = Instant::now();
        }
        let waited = launcher.try_wait();
        if let Ok(Some(_)) = waited {
            outlive(&known, hard_end);
            return Ok(true);
        }
        if waited.is_err() || Instant::now() > hard_end {
            kill_tree(root, true);
            // Killed above: the wait only reaps it.
            let _ = launcher.wait();
            return waited.map(|_| false);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// When process `p` started (clock ticks after boot), unless it is gone or a zombie:
/// with the pid, it names the process even after the pid is used again.
fn started_at(p: Pid) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
    // pid (comm) state ppid ...: field 22 is the start time, the 20th after the ')'.
    let rest: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    if rest.first() == Some(&"Z") {
        return None;
    }
    rest.get(19)?.parse().ok()
}

/// Wait until none of `pids` (with when each started) runs any more (they end at
/// the deadline), and stop and kill those left at `hard_end`.
fn outlive(pids: &HashMap<Pid, u64>, hard_end: Instant) {
    loop {
        let left: Vec<Pid> = pids
            .iter()
            .filter(|(p, t)| started_at(**p) == Some(**t))
            .map(|(p, _)| *p)
            .collect();
        if left.is_empty() {
            return;
        }
        if Instant::now() > hard_end {
            for p in &left {
                let _ = kill(*p, Signal::SIGSTOP);
            }
            for p in &left {
                let _ = kill(*p, Signal::SIGKILL);
            }
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Stop, then kill, every descendant of `root` (and `root` itself if asked).
/// Stopping first keeps the tree still (a respawner cannot fork a new fuzzer)
/// while it is walked again for late arrivals.
fn kill_tree(root: Pid, with_root: bool) {
    let mut seen: HashSet<Pid> = HashSet::new();
    if with_root {
        let _ = kill(root, Signal::SIGSTOP);
        seen.insert(root);
    }
    loop {
        let fresh: Vec<Pid> = descendants(root)
            .into_iter()
            .filter(|p| !seen.contains(p))
            .collect();
        if fresh.is_empty() {
            break;
        }
        for p in fresh {
            let _ = kill(p, Signal::SIGSTOP);
            seen.insert(p);
        }
    }
    for p in seen {
        let _ = kill(p, Signal::SIGKILL);
    }
}

/// Every process below `root`, from `/proc`.
fn descendants(root: Pid) -> Vec<Pid> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...; comm may hold spaces and parentheses.
        let Some(ppid) = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok())
        else {
            continue;
        };
        children.entry(ppid).or_default().push(pid);
    }
    let mut found = Vec::new();
    let mut todo = vec![root.as_raw()];
    while let Some(p) = todo.pop() {
        for &c in children.get(&p).into_iter().flatten() {
            found.push(Pid::from_raw(c));
            todo.push(c);
        }
    }
    found
}

/// A TCP port on localhost nobody listens on right now.
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind(("127.0.0.1", 0))?
        .local_addr()?
        .port())
}

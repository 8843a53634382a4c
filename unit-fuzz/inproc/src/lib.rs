//! trestle's in-process unit fuzzer: a LibAFL fuzzer that runs inside the unit harness.
//!
//! The runtime restores the unit's context, loads this library with `dlopen` and
//! calls [`trestle_inproc_fuzz`] with a `trestle_abi::fuzz::InProcessTarget`: a
//! callback that runs one execution (write the values, call the function, reset the
//! context) and the edge and CmpLog maps the program's hooks write. The fuzzer here
//! reads those maps in place and calls the unit through the callback: no process
//! boundary per execution.
//!
//! It is the fuzzer of `trestle_unit_fuzz::run_fuzzer` with an `InProcessExecutor`:
//! edge hit counts and execution time as feedback; crash and timeout objectives kept
//! only when they cover new edges; havoc and dictionary mutations plus the
//! parameter-aware value mutations; CmpLog through a shadow tracing run that switches
//! the runtime's `trace-cmp` hooks on, and input-to-state replacement.
//!
//! A crash inside the unit ends just that execution: the runtime's crash handlers,
//! put in front of LibAFL's, jump back to the callback, which puts the context back
//! and reports the crash, and the crash objective judges it like any other
//! execution. Everything else that ends a fuzzer process — a hang (LibAFL's timeout
//! handler), a crash outside the unit, a fuzzer process killed — must not end the
//! campaign either. The process that restored the context (the *respawner*, the
//! caller of [`trestle_inproc_fuzz`]) never fuzzes: it forks the fuzzer and waits.
//! LibAFL's handlers save the input as an objective and the fuzzer's state into
//! shared memory before the process ends, and the respawner forks the next fuzzer,
//! which takes the state up (from the restored context again, not from what the
//! hang left). A fuzzer also hands over every [`FRESH_PROCESS_EVERY`] executions, for
//! the reason a persistent forkserver harness does (the C library's own state would
//! drift), and one that dies without saving its state is followed by one that starts
//! from the queue on disk. The respawner ends a fuzzer that stops executing or
//! outlives the deadline.
//!
//! The plan and the report are `trestle_unit_fuzz::inprocess`'s; this library owns
//! the fuzzing loop inside the harness and nothing else.

mod respawner;
mod stages;

use libafl::corpus::{Corpus, InMemoryOnDiskCorpus, OnDiskCorpus};
use libafl::events::{EventRestarter, RestartingEventManager, Restorable, SimpleEventManager};
use libafl::executors::hooks::inprocess::HasTimeout;
use libafl::executors::hooks::timer::TimerStruct;
use libafl::executors::inprocess::HasInProcessHooks;
use libafl::executors::{Executor, ExitKind, HasObservers, InProcessExecutor, ShadowExecutor};
use libafl::feedbacks::MapIndexesMetadata;
use libafl::feedbacks::{CrashFeedback, MaxMapFeedback, TimeFeedback, TimeoutFeedback};
use libafl::fuzzer::{Evaluator, Fuzzer, StdFuzzer};
use libafl::inputs::{BytesInput, HasTargetBytes};
use libafl::monitors::NopMonitor;
use libafl::mutators::{havoc_mutations, tokens_mutations, HavocScheduledMutator, I2SRandReplace};
use libafl::observers::{CanTrack, HitcountsMapObserver, StdMapObserver, TimeObserver};
use libafl::schedulers::QueueScheduler;
use libafl::stages::{ShadowTracingStage, StdMutationalStage};
use libafl::state::{HasCorpus, HasExecutions, HasSolutions, StdState};
use libafl::{feedback_and_fast, feedback_or, feedback_or_fast, Error, HasMetadata};
use libafl_bolts::rands::StdRand;
use libafl_bolts::shmem::UnixShMemProvider;
use libafl_bolts::tuples::{tuple_list, Merge};
use libafl_targets::{CmpLogMap, CmpLogObserver};
use respawner::{respawn, Restorer};
use stages::{HarnessCmpLogObserver, RetryAlways, TraceOnceEach};
use std::ffi::CStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};
use trestle_abi::fuzz::{
    encode_values, original_value, InProcessTarget, EXEC_CRASHED, INPROC_ABI_VERSION,
};
use trestle_unit_fuzz::inprocess::{InProcessPlan, InProcessReport};
use trestle_unit_fuzz::mutators::ParamValueMutator;
use trestle_unit_fuzz::schedule::small_fast;

/// Executions one fuzzer process runs before it hands its state to a fresh fork of
/// the respawner (see the crate docs); a hand-over costs about a millisecond.
pub const FRESH_PROCESS_EVERY: u64 = 100_000;

/// The hang limit is this many times the recorded values' execution time ...
const HANG_FACTOR: u32 = 20;
/// ... and at least this, and at most the plan's timeout. Half the system fuzzer's
/// least run limit (20 ms), which pays for a process start: at 100 ms, a dc
/// `dc_evalfile` unit whose mutated programs loop one execution in fifteen waited for
/// hangs most of its slice (63 executions a second at 100 ms with a batch-mode timer;
/// 500-550 at 20 ms, 780-890 at 10 ms with the timer below).
const HANG_FLOOR: Duration = Duration::from_millis(10);
/// Runs of the recorded values that measure it (the slowest counts).
const CALIBRATION_RUNS: usize = 3;

type UnitState =
    StdState<InMemoryOnDiskCorpus<BytesInput>, BytesInput, StdRand, OnDiskCorpus<BytesInput>>;
type Inner = SimpleEventManager<BytesInput, NopMonitor, UnitState>;
type Manager = RestartingEventManager<Inner, UnixShMemProvider>;
type RestartState = <Inner as Restorable<UnitState, UnixShMemProvider>>::RestartState;

/// What the respawner and its fuzzer processes share (an anonymous shared mapping
/// made before the first fork).
#[repr(C)]
struct Shared {
    /// A fuzzer stopped by itself: the campaign is over.
    done: AtomicBool,
    /// The next fuzzer starts without a saved state: reload the queue from disk.
    afresh: AtomicBool,
    /// Executions so far (kept current by the fuzzer, for one that dies unsaved).
    executions: AtomicU64,
    /// Milliseconds from the start to the first objective; `u64::MAX` before.
    first_objective_ms: AtomicU64,
    /// Milliseconds from the start until an input hit a goal edge; `u64::MAX` before.
    goal_ms: AtomicU64,
    /// Fuzzer processes started after the first.
    restarts: AtomicU64,
    /// Fuzzer processes that died without saving their state.
    lost: AtomicU64,
    /// Executions started, counted by the harness callback (the respawner's sign
    /// of life: a fuzzer stuck outside the target does not move it).
    beats: AtomicU64,
    /// The hang limit the first fuzzer process measured ([`hang_limit`]), in
    /// microseconds; 0 before.
    hang_us: AtomicU64,
    /// Hangs kept as objectives ([`HangBudget`]).
    hangs: AtomicU64,
}

impl Shared {
    fn map() -> Result<&'static Shared, String> {
        // SAFETY: a fresh anonymous mapping, zeroed, never unmapped: it lives as long
        // as the process and is inherited by every fork.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                std::mem::size_of::<Shared>(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if p == libc::MAP_FAILED {
                return Err(format!(
                    "cannot map shared memory: {}",
                    std::io::Error::last_os_error()
                ));
            }
            let shared = &*(p as *const Shared);
            shared.first_objective_ms.store(u64::MAX, Ordering::Relaxed);
            shared.goal_ms.store(u64::MAX, Ordering::Relaxed);
            Ok(shared)
        }
    }
}

/// The campaign's clock and where to report, as this process sees them.
struct Campaign<'a> {
    plan: &'a InProcessPlan,
    target: &'a InProcessTarget,
    shared: &'static Shared,
    start: Instant,
    end: Instant,
    /// Our diagnostics channel: the harness's original stderr (`harness.log`), the
    /// unit's being /dev/null.
    diag: std::fs::File,
}

impl Campaign<'_> {
    fn report(
        &self,
        executions: u64,
        corpus: usize,
        objectives: usize,
        done: bool,
        error: Option<String>,
    ) {
        let first = self.shared.first_objective_ms.load(Ordering::Relaxed);
        let goal = self.shared.goal_ms.load(Ordering::Relaxed);
        let r = InProcessReport {
            goal_after: (goal != u64::MAX).then(|| goal as f64 / 1000.0),
            executions,
            corpus,
            objectives,
            first_crash_after: (first != u64::MAX).then(|| first as f64 / 1000.0),
            restarts: self.shared.restarts.load(Ordering::Relaxed),
            lost: self.shared.lost.load(Ordering::Relaxed),
            hang_limit_ms: match self.shared.hang_us.load(Ordering::Relaxed) {
                0 => None,
                us => Some(us.div_ceil(1000)),
            },
            done,
            error,
        };
        if let Err(e) = write_report(&self.plan.report, &r) {
            self.say(&e);
        }
    }

    /// The campaign is over, ended from outside its fuzzer: its last report, with the
    /// executions the shared count has seen since.
    fn report_done(&self) {
        let last = self.last_report();
        let executions = self
            .shared
            .executions
            .load(Ordering::Relaxed)
            .max(last.executions);
        self.report(executions, last.corpus, last.objectives, true, None);
    }

    fn failed(&self, why: String) {
        self.report(
            self.shared.executions.load(Ordering::Relaxed),
            0,
            0,
            false,
            Some(why),
        );
    }

    /// One line on the diagnostics channel.
    fn say(&self, msg: &str) {
        // Nowhere left to say that this failed.
        let _ = writeln!(&self.diag, "trestle in-process fuzzer: {msg}");
    }

    /// The last report written, for the campaign's end when its fuzzer had to be
    /// ended: none yet is the default report; one that cannot be read is said, and
    /// the default too.
    fn last_report(&self) -> InProcessReport {
        let path = &self.plan.report;
        let read = match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| format!("corrupt report {}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(InProcessReport::default()),
            Err(e) => Err(format!("cannot read the report {}: {e}", path.display())),
        };
        read.unwrap_or_else(|e| {
            self.say(&format!("{e}; the campaign ends with the shared counts"));
            InProcessReport::default()
        })
    }
}

/// Write the report the host waits for, whole (through a rename).
fn write_report(path: &Path, r: &InProcessReport) -> Result<(), String> {
    let tmp = path.with_extension("tmp");
    let bytes = serde_json::to_vec(r).map_err(|e| format!("cannot encode the report: {e}"))?;
    std::fs::write(&tmp, bytes).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path)
        .map_err(|e| format!("cannot rename {} to {}: {e}", tmp.display(), path.display()))
}

/// The in-process fuzzer's entry point (`trestle_abi::fuzz::INPROC_ENTRY`): fuzz the
/// unit behind `target` as its plan says, until the deadline (or the first crash,
/// if asked). Returns the exit status for the harness process.
///
/// # Safety
/// `target` must point to a valid [`InProcessTarget`] whose callback and maps stay
/// valid while this runs, in a single-threaded process.
#[no_mangle]
pub unsafe extern "C" fn trestle_inproc_fuzz(target: *const InProcessTarget) -> i32 {
    // SAFETY: as the contract says.
    let target = unsafe { &*target };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(target))) {
        Ok(code) => code,
        Err(_) => {
            eprintln!("trestle in-process fuzzer: internal error");
            trestle_abi::fuzz::EXIT_SETUP_FAILED
        }
    }
}

fn run(target: &InProcessTarget) -> i32 {
    if target.abi_version != INPROC_ABI_VERSION {
        eprintln!(
            "trestle in-process fuzzer: the harness speaks version {} of the interface, this library {INPROC_ABI_VERSION}; rebuild both",
            target.abi_version
        );
        return trestle_abi::fuzz::EXIT_SETUP_FAILED;
    }
    // SAFETY: a NUL-terminated path, per the interface.
    let plan_file = PathBuf::from(std::ffi::OsStr::from_bytes(
        unsafe { CStr::from_ptr(target.plan) }.to_bytes(),
    ));
    let plan: InProcessPlan = match std::fs::read(&plan_file)
        .map_err(|e| e.to_string())
        .and_then(|b| bincode::deserialize(&b).map_err(|e| e.to_string()))
    {
        Ok(p) => p,
        Err(e) => {
            eprintln!(
                "trestle in-process fuzzer: cannot read the plan {}: {e}",
                plan_file.display()
            );
            return trestle_abi::fuzz::EXIT_SETUP_FAILED;
        }
    };
    // LibAFL's errors capture a backtrace when backtraces are on, and in a crash
    // handler the stack to walk is the crashed unit's, which can be anything.
    std::env::set_var("RUST_LIB_BACKTRACE", "0");
    let shared = match Shared::map() {
        Ok(s) => s,
        Err(e) => {
            if let Err(w) = write_report(
                &plan.report,
                &InProcessReport {
                    error: Some(e.clone()),
                    ..InProcessReport::default()
                },
            ) {
                eprintln!("trestle in-process fuzzer: {e}; {w}");
            }
            return 1;
        }
    };
    // Wall-clock times become this process's `Instant`s, which its forks share.
    let (now, wall) = (Instant::now(), SystemTime::now());
    let start = now - wall.duration_since(plan.start).unwrap_or_default();
    let end = now + plan.end.duration_since(wall).unwrap_or_default();
    let diag = silence_the_unit();
    let campaign = Campaign {
        plan: &plan,
        target,
        shared,
        start,
        end,
        diag,
    };
    match respawn(&campaign) {
        Ok(()) => 0,
        Err(e) => {
            campaign.failed(e);
            1
        }
    }
}

/// The unit writes to standard output and error as it likes (usage messages on every
/// execution, say): send both to /dev/null. Returns our own diagnostics channel, the
/// original standard error.
fn silence_the_unit() -> std::fs::File {
    use std::os::fd::FromRawFd;
    // SAFETY: plain descriptor juggling on this process's own descriptors.
    unsafe {
        let diag = libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 3);
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if null >= 0 {
            libc::dup2(null, 1);
            libc::dup2(null, 2);
            libc::close(null);
        }
        std::fs::File::from_raw_fd(if diag >= 0 { diag } else { libc::dup(2) })
    }
}

/// The havoc stage, with dictionary tokens. A macro: the mutational stages are
/// typed by their executor, which differs with and without CmpLog.
macro_rules! havoc_stage {
    () => {
        RetryAlways(StdMutationalStage::new(HavocScheduledMutator::new(
            havoc_mutations().merge(tokens_mutations()),
        )))
    };
}

/// The parameter-aware value stage over `plan`'s parameters and dictionary (a macro
/// for the reason `havoc_stage` is).
macro_rules! value_stage {
    ($plan:expr) => {
        RetryAlways(StdMutationalStage::new(
            HavocScheduledMutator::with_max_stack_pow(
                tuple_list!(ParamValueMutator::new(
                    $plan.params.clone(),
                    $plan.dictionary.words.clone(),
                    $plan.dictionary.ints.clone()
                )),
                2,
            ),
        ))
    };
}

/// One fuzzer process: take the saved state up (or start one), fuzz until the
/// deadline, the first crash (if asked) or [`FRESH_PROCESS_EVERY`] executions.
fn fuzz(c: &Campaign, mut restorer: Restorer) -> Result<(), Error> {
    let plan = c.plan;
    let t = c.target;
    let saved = restorer.restore::<(Option<UnitState>, RestartState)>()?;
    restorer.reset();
    let saved = saved.and_then(|(s, _)| s);
    let afresh = c.shared.afresh.swap(false, Ordering::SeqCst);
    let mut mgr: Manager =
        RestartingEventManager::new(SimpleEventManager::new(NopMonitor::new()), restorer);

    // SAFETY: the runtime's edge counters, `edges_len` long, live as long as the
    // process; the observer only reads and clears them between executions.
    let edges_observer = unsafe {
        HitcountsMapObserver::new(StdMapObserver::from_mut_ptr(
            "edges",
            t.edges,
            t.edges_len.max(1),
        ))
        .track_indices()
    };
    let time_observer = TimeObserver::new("time");
    let mut feedback = feedback_or!(
        MaxMapFeedback::new(&edges_observer),
        TimeFeedback::new(&time_observer)
    );
    // As in run_fuzzer: one objective per way to crash, not copies of one crash; and
    // a few hangs at most.
    let mut objective = feedback_and_fast!(
        feedback_or_fast!(CrashFeedback::new(), TimeoutFeedback::new()),
        MaxMapFeedback::with_name("objective_edges", &edges_observer),
        HangBudget(&c.shared.hangs)
    );
    let mut state = match saved {
        Some(state) => state,
        None => fresh_state(c, afresh, &mut feedback, &mut objective)?,
    };
    let scheduler =
        small_fast::<_, _, MapIndexesMetadata, _>(&edges_observer, QueueScheduler::new());
    let mut fuzzer = StdFuzzer::new(scheduler, feedback, objective);

    let mut harness = unit_harness(c)?;
    let mut executor = InProcessExecutor::builder()
        .harness(&mut harness)
        .observers(tuple_list!(edges_observer, time_observer))
        .fuzzer(&mut fuzzer)
        .state(&mut state)
        .event_mgr(&mut mgr)
        .timeout(plan.timeout)
        // A crash report would symbolise a backtrace (tens of milliseconds per crash,
        // and crashing units crash often); the host reruns each objective instead.
        .crashdump(false)
        .build()?;
    catch_unit_crashes(t)?;
    // The hang limit is the harness's CPU timer's; LibAFL's timer, armed and disarmed
    // around every execution (no slower on a 30 µs sed unit than its batch mode, which
    // after hangs in a row sometimes stayed disarmed: a dc unit's fuzzer then ran one
    // looping program until the respawner gave it up), ends an execution blocked
    // past the plan's timeout.
    hang_limit(c);
    *executor.inprocess_hooks_mut().timer_mut() = TimerStruct::new(c.plan.timeout);

    if plan.cmplog {
        // SAFETY: the runtime's CmpLog map and switch, valid for the process's life.
        let cmplog = HarnessCmpLogObserver::new(
            unsafe { CmpLogObserver::with_map_ptr("cmplog", t.cmplog_map as *mut CmpLogMap, true) },
            t.cmplog_enabled,
        );
        let mut executor = ShadowExecutor::new(executor, tuple_list!(cmplog));
        let i2s = RetryAlways(StdMutationalStage::new(HavocScheduledMutator::new(
            tuple_list!(I2SRandReplace::new()),
        )));
        let tracing = TraceOnceEach::new(ShadowTracingStage::new());
        let mut stages = tuple_list!(tracing, i2s, value_stage!(plan), havoc_stage!());
        fuzz_loop(
            c,
            afresh,
            &mut fuzzer,
            &mut stages,
            &mut executor,
            &mut state,
            &mut mgr,
        )
    } else {
        let mut executor = executor;
        let mut stages = tuple_list!(value_stage!(plan), havoc_stage!());
        fuzz_loop(
            c,
            afresh,
            &mut fuzzer,
            &mut stages,
            &mut executor,
            &mut state,
            &mut mgr,
        )
    }
}

/// How long an execution may run before it counts as a hang: [`HANG_FACTOR`] times
/// the slowest of [`CALIBRATION_RUNS`] runs of the recorded values, within
/// [`HANG_FLOOR`] and the plan's timeout; measured by the first fuzzer process, the
/// later ones (after a hang) take it over. With the plan's timeout alone, every hang
/// cost one to two seconds: a dc `dc_evalfile` unit (its recorded input runs in 5 ms)
/// whose mutated programs often loop made 9 executions a second, most of the slice
/// spent waiting for hangs to be noticed. Needs the unit's crash handlers in place
/// (a unit carved from a crashing run crashes here too).
fn hang_limit(c: &Campaign) -> Duration {
    let known = c.shared.hang_us.load(Ordering::Relaxed);
    if known > 0 {
        return Duration::from_micros(known);
    }
    let t = c.target;
    let original = encode_values(&c.plan.params.iter().map(original_value).collect::<Vec<_>>());
    let mut slowest = Duration::ZERO;
    for _ in 0..CALIBRATION_RUNS {
        let started = Instant::now();
        // SAFETY: the runtime's callback with its session, on `len` readable bytes.
        unsafe { (t.run)(t.session, original.as_ptr(), original.len()) };
        slowest = slowest.max(started.elapsed());
    }
    let limit = (slowest * HANG_FACTOR).max(HANG_FLOOR).min(c.plan.timeout);
    c.shared
        .hang_us
        .store(limit.as_micros().max(1) as u64, Ordering::Relaxed);
    c.say(&format!(
        "hang limit {} ms (the recorded values ran in {:.2} ms at most)",
        limit.as_millis(),
        slowest.as_secs_f64() * 1000.0
    ));
    limit
}

/// A new fuzzer state: the queue under the plan's `queue/`, the objectives under
/// `.solutions/`, the dictionary as tokens; after a fuzzer that died unsaved, the
/// executions counted so far.
fn fresh_state<F, O>(
    c: &Campaign,
    afresh: bool,
    feedback: &mut F,
    objective: &mut O,
) -> Result<UnitState, Error>
where
    F: libafl::feedbacks::StateInitializer<UnitState>,
    O: libafl::feedbacks::StateInitializer<UnitState>,
{
    let plan = c.plan;
    let mut state = StdState::new(
        StdRand::with_seed(plan.seed),
        InMemoryOnDiskCorpus::<BytesInput>::new(plan.out.join("queue"))?,
        OnDiskCorpus::new(plan.out.join(".solutions"))?,
        feedback,
        objective,
    )?;
    state.add_metadata(plan.dictionary.tokens());
    if afresh {
        *state.executions_mut() = c.shared.executions.load(Ordering::Relaxed);
    }
    Ok(state)
}

/// One execution through the runtime's callback, counted as a sign of life, with the
/// [`CpuTimer`] armed at the hang limit once it is measured.
fn unit_harness<'a>(c: &'a Campaign) -> Result<impl FnMut(&BytesInput) -> ExitKind + 'a, Error> {
    let t = c.target;
    let (beats, hang_us) = (&c.shared.beats, &c.shared.hang_us);
    let timer = CpuTimer::new()?;
    Ok(move |input: &BytesInput| {
        // One writer (this process): a plain add, no locked instruction.
        beats.store(beats.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        let bytes = input.target_bytes();
        timer.arm(hang_us.load(Ordering::Relaxed));
        // SAFETY: the runtime's callback with its session, on `len` readable bytes.
        let r = unsafe { (t.run)(t.session, bytes.as_ptr(), bytes.len()) };
        timer.arm(0);
        if r >= EXEC_CRASHED {
            ExitKind::Crash
        } else {
            ExitKind::Ok
        }
    })
}

/// Hangs kept as objectives, at most, in one campaign.
const MAX_HANGS: u64 = 4;

/// Keeps at most [`MAX_HANGS`] hangs as objectives. A hang is cut at the limit
/// wherever the unit is, so its edges are new almost every time: a 10 s slice of a dc
/// unit whose programs often loop kept 29, each confirmed by running to a longer
/// limit, and those the slice had no time to sort waited for a limit again in
/// lifting (61 s of a 300 s campaign).
struct HangBudget(&'static AtomicU64);

impl libafl_bolts::Named for HangBudget {
    fn name(&self) -> &std::borrow::Cow<'static, str> {
        static NAME: std::borrow::Cow<'static, str> = std::borrow::Cow::Borrowed("hang_budget");
        &NAME
    }
}

impl<S> libafl::feedbacks::StateInitializer<S> for HangBudget {}

impl<EM, I, OT, S> libafl::feedbacks::Feedback<EM, I, OT, S> for HangBudget {
    fn is_interesting(
        &mut self,
        _: &mut S,
        _: &mut EM,
        _: &I,
        _: &OT,
        exit: &ExitKind,
    ) -> Result<bool, Error> {
        if *exit != ExitKind::Timeout {
            return Ok(true);
        }
        Ok(self.0.fetch_add(1, Ordering::Relaxed) < MAX_HANGS)
    }
}

/// A timer on this thread's CPU time that raises `SIGALRM`, LibAFL's timeout signal:
/// an execution is a hang once it has computed for the hang limit, however long it
/// waited for the CPU. By the wall clock, a 10 ms limit made hangs of executions
/// that were only preempted (tests running side by side on two cores): each cost a
/// restart, and with `--stop-on-crash` ended the campaign. LibAFL's own timer, by the
/// wall clock at the plan's timeout, still ends an execution blocked in a system call.
struct CpuTimer(libc::timer_t);

impl CpuTimer {
    fn new() -> Result<CpuTimer, Error> {
        // SAFETY: a zeroed sigevent is valid; the fields set are the ones SIGEV_SIGNAL reads.
        unsafe {
            let mut event: libc::sigevent = std::mem::zeroed();
            event.sigev_notify = libc::SIGEV_SIGNAL;
            event.sigev_signo = libc::SIGALRM;
            let mut id: libc::timer_t = std::ptr::null_mut();
            if libc::timer_create(libc::CLOCK_THREAD_CPUTIME_ID, &mut event, &mut id) != 0 {
                return Err(Error::unknown(format!(
                    "cannot create a CPU-time timer: {}",
                    std::io::Error::last_os_error()
                )));
            }
            Ok(CpuTimer(id))
        }
    }

    /// Fire after `us` microseconds of CPU time; 0 disarms.
    fn arm(&self, us: u64) {
        let value = libc::timespec {
            tv_sec: (us / 1_000_000) as libc::time_t,
            tv_nsec: ((us % 1_000_000) * 1000) as libc::c_long,
        };
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: value,
        };
        // SAFETY: our timer, a valid itimerspec.
        unsafe { libc::timer_settime(self.0, 0, &spec, std::ptr::null_mut()) };
    }
}

impl Drop for CpuTimer {
    fn drop(&mut self) {
        // SAFETY: our timer, deleted once.
        unsafe { libc::timer_delete(self.0) };
    }
}

/// Put the harness's crash handlers in front of LibAFL's (which the executor has
/// just installed), so a crash inside the unit ends just that execution (reported
/// as a crash, to the same objective) instead of this process.
fn catch_unit_crashes(t: &InProcessTarget) -> Result<(), Error> {
    // SAFETY: the runtime's function, called once the fuzzer's handlers exist.
    let err = unsafe { (t.catch_crashes)() };
    if err != 0 {
        return Err(Error::unknown(format!(
            "cannot install the crash handlers: {}",
            std::io::Error::from_raw_os_error(err)
        )));
    }
    Ok(())
}

fn fuzz_loop<Z, ST, E>(
    c: &Campaign,
    afresh: bool,
    fuzzer: &mut Z,
    stages: &mut ST,
    executor: &mut E,
    state: &mut UnitState,
    mgr: &mut Manager,
) -> Result<(), Error>
where
    Z: Fuzzer<E, Manager, BytesInput, UnitState, ST> + Evaluator<E, Manager, BytesInput, UnitState>,
    E: Executor<Manager, BytesInput, UnitState, Z> + HasObservers,
{
    let plan = c.plan;
    if state.corpus().count() == 0 {
        let queue = plan.out.join("queue");
        if afresh {
            // The previous fuzzer died with its state: take its queue up from disk.
            state.load_initial_inputs(fuzzer, executor, mgr, &[queue])?;
        }
        let original = plan.params.iter().map(original_value).collect::<Vec<_>>();
        fuzzer.add_input(
            state,
            executor,
            mgr,
            BytesInput::new(encode_values(&original)),
        )?;
        if !afresh {
            // A hang among them ends this process; the next takes the state up as
            // it was, with the seeds not run yet left out.
            for seed in &plan.seeds {
                fuzzer.evaluate_input(state, executor, mgr, &BytesInput::new(seed.clone()))?;
            }
        }
    }
    let first = *state.executions();
    let mut last = Instant::now();
    loop {
        let executions = *state.executions();
        c.shared.executions.store(executions, Ordering::Relaxed);
        let objectives = state.solutions().count();
        if objectives > 0 && c.shared.first_objective_ms.load(Ordering::Relaxed) == u64::MAX {
            c.shared
                .first_objective_ms
                .store(c.start.elapsed().as_millis() as u64, Ordering::Relaxed);
        }
        if !plan.goal.is_empty()
            && c.shared.goal_ms.load(Ordering::Relaxed) == u64::MAX
            && trestle_unit_fuzz::goal_reached(state, &plan.goal)
        {
            c.shared
                .goal_ms
                .store(c.start.elapsed().as_millis() as u64, Ordering::Relaxed);
        }
        // Once the goal's direction is taken, what lies behind it gets `after_goal`.
        let goal_ms = c.shared.goal_ms.load(Ordering::Relaxed);
        let goal = goal_ms != u64::MAX
            && c.start.elapsed() >= Duration::from_millis(goal_ms) + plan.after_goal;
        if Instant::now() >= c.end || (plan.stop_on_crash && objectives > 0) || goal {
            c.report(executions, state.corpus().count(), objectives, true, None);
            c.shared.done.store(true, Ordering::SeqCst);
            return Ok(());
        }
        if executions - first >= FRESH_PROCESS_EVERY {
            c.report(executions, state.corpus().count(), objectives, false, None);
            // Hand the state to the next fuzzer process (the respawner sees it saved).
            mgr.on_restart(state)?;
            return Ok(());
        }
        if last.elapsed() >= Duration::from_secs(1) {
            last = Instant::now();
            c.report(executions, state.corpus().count(), objectives, false, None);
        }
        fuzzer.fuzz_one(stages, executor, state, mgr)?;
    }
}

//! The single-core campaign through the forkserver: one LibAFL fuzzer in this
//! process, the instrumented program as its harness (one fork per execution, or
//! many with [`FuzzConfig::persistent`]). Multi-core clients ([`crate::parallel`])
//! run the same fuzzer, [`run_fuzzer`], each in its own process.

use crate::schedule::small_fast;
use crate::{lib, mutators, FuzzConfig, FuzzError, FuzzReport, MAP_SIZE};
use libafl::corpus::{Corpus, InMemoryOnDiskCorpus, OnDiskCorpus};
use libafl::events::{ProgressReporter, SimpleEventManager};
use libafl::executors::forkserver::ForkserverExecutor;
use libafl::executors::StdChildArgs;
use libafl::feedbacks::MapIndexesMetadata;
use libafl::feedbacks::{CrashFeedback, MaxMapFeedback, TimeFeedback, TimeoutFeedback};
use libafl::fuzzer::{Evaluator, Fuzzer, StdFuzzer};
use libafl::inputs::BytesInput;
use libafl::monitors::SimpleMonitor;
use libafl::mutators::{havoc_mutations, tokens_mutations, HavocScheduledMutator, I2SRandReplace};
use libafl::observers::{
    CanTrack, ExplicitTracking, HitcountsMapObserver, StdMapObserver, TimeObserver,
};
use libafl::schedulers::QueueScheduler;
use libafl::stages::{StdMutationalStage, TracingStage};
use libafl::state::{HasCorpus, HasExecutions, HasSolutions, StdState};
use libafl::{feedback_and_fast, feedback_or, feedback_or_fast, HasMetadata};
use libafl_bolts::rands::StdRand;
use libafl_bolts::shmem::{ShMem, ShMemProvider, UnixShMem, UnixShMemProvider};
use libafl_bolts::tuples::{tuple_list, Merge};
use libafl_bolts::StdTargetArgs;
use libafl_targets::{AflppCmpLogMap, CmpLogMap, CmpLogObserver};
use nix::sys::signal::Signal;
use std::path::Path;
use std::time::{Duration, Instant};
use trestle_abi::fuzz::{encode_values, original_value, ParamValue, ENV_FUZZ};
use trestle_abi::hooks;

/// A fuzzer's state: the queue in memory and on disk, the solutions on disk.
pub(crate) type UnitState =
    StdState<InMemoryOnDiskCorpus<BytesInput>, BytesInput, StdRand, OnDiskCorpus<BytesInput>>;

/// The single-core campaign: one fuzzer in this process.
pub(crate) fn campaign(
    cfg: &FuzzConfig,
    out: &Path,
    request: &Path,
) -> Result<FuzzReport, FuzzError> {
    let mut mgr = SimpleEventManager::new(SimpleMonitor::new(|_| {}));
    run_fuzzer(cfg, out, request, cfg.seed, &mut mgr, None, None)
}

/// What an event manager does after the fuzzer reported its progress. LibAFL's
/// respawning manager saves where its connection to the broker stands after each
/// event it fires itself, but not after a progress report, which goes out through
/// the connection too: a fuzzer killed after one is respawned on a message it
/// already sent, and LLMP panics. So a multi-core client saves it here as well.
pub(crate) trait ReportedProgress {
    fn reported_progress(&mut self) -> Result<(), libafl::Error>;
}

impl<I, MT, S> ReportedProgress for SimpleEventManager<I, MT, S> {
    fn reported_progress(&mut self) -> Result<(), libafl::Error> {
        Ok(())
    }
}

/// The edge observer over the shared map: hit counts, with the indices it saw.
type EdgesObserver<'a> =
    ExplicitTracking<HitcountsMapObserver<StdMapObserver<'a, u8, false>>, true, false>;

/// The harness behind the forkserver, with the edge and time observers.
type HarnessExecutor<'a> =
    ForkserverExecutor<BytesInput, (EdgesObserver<'a>, (TimeObserver, ())), UnitState, UnixShMem>;

/// The tracing harness behind the forkserver, with the CmpLog observer.
type TracingExecutor = ForkserverExecutor<BytesInput, (CmpLogObserver, ()), UnitState, UnixShMem>;

/// One fuzzer over the unit, reporting through `mgr` until its time is up (or it
/// finds a crash and should stop). A multi-core client passes its `client` pace
/// (shared start and deadline, stop marker) and, after a restart, its old `state`.
pub(crate) fn run_fuzzer<EM>(
    cfg: &FuzzConfig,
    out: &Path,
    request: &Path,
    seed: u64,
    mgr: &mut EM,
    restored: Option<UnitState>,
    client: Option<&crate::pace::ClientPace>,
) -> Result<FuzzReport, FuzzError>
where
    EM: libafl::events::EventFirer<BytesInput, UnitState>
        + libafl::events::EventReceiver<BytesInput, UnitState>
        + libafl::events::SendExiting
        + ProgressReporter<UnitState>
        + ReportedProgress,
{
    let unit = &cfg.unit;
    let mut sp = UnixShMemProvider::new().map_err(lib)?;
    let mut edges_shmem = shared_edge_map(&mut sp)?;
    // SAFETY: the map lives as long as the observer (both are dropped at the end).
    let edges_observer = unsafe {
        HitcountsMapObserver::new(StdMapObserver::new("edges", &mut edges_shmem[..]))
            .track_indices()
    };
    let time_observer = TimeObserver::new("time");
    let mut feedback = feedback_or!(
        MaxMapFeedback::new(&edges_observer),
        TimeFeedback::new(&time_observer)
    );
    // A crash or timeout is kept only when its path covers something no earlier one
    // did: one input per way to crash, not thousands of copies of the same crash.
    let mut objective = feedback_and_fast!(
        feedback_or_fast!(CrashFeedback::new(), TimeoutFeedback::new()),
        MaxMapFeedback::with_name("objective_edges", &edges_observer)
    );
    let mut state = match restored {
        Some(state) => state,
        None => fresh_state(cfg, out, seed, &mut feedback, &mut objective)?,
    };

    let scheduler =
        small_fast::<_, _, MapIndexesMetadata, _>(&edges_observer, QueueScheduler::new());
    let mut fuzzer = StdFuzzer::new(scheduler, feedback, objective);
    let mut executor = harness_executor(cfg, request, edges_observer, time_observer)?;

    if state.corpus().count() == 0 {
        let original: Vec<ParamValue> = unit.params.iter().map(original_value).collect();
        fuzzer
            .add_input(
                &mut state,
                &mut executor,
                mgr,
                BytesInput::new(encode_values(&original)),
            )
            .map_err(lib)?;
        for seed in &cfg.seeds {
            fuzzer
                .evaluate_input(
                    &mut state,
                    &mut executor,
                    mgr,
                    &BytesInput::new(seed.clone()),
                )
                .map_err(lib)?;
        }
    }

    let mutations = havoc_mutations().merge(tokens_mutations());
    let havoc = StdMutationalStage::new(HavocScheduledMutator::new(mutations));
    let values = StdMutationalStage::new(HavocScheduledMutator::with_max_stack_pow(
        tuple_list!(mutators::ParamValueMutator::new(
            unit.params.clone(),
            cfg.dictionary.words.clone(),
            cfg.dictionary.ints.clone()
        )),
        2,
    ));
    let (start, end) = campaign_clock(cfg, client);
    let mut report = FuzzReport::default();
    if cfg.cmplog {
        let mut cmp_shmem = sp.uninit_on_shmem::<AflppCmpLogMap>().map_err(lib)?;
        let tracing = TracingStage::new(tracing_executor(cfg, request, &mut cmp_shmem)?);
        let i2s = StdMutationalStage::new(HavocScheduledMutator::new(tuple_list!(
            I2SRandReplace::new()
        )));
        let mut stages = tuple_list!(tracing, i2s, values, havoc);
        run_loop(
            cfg,
            (start, end),
            client,
            &mut report,
            &mut fuzzer,
            &mut stages,
            &mut executor,
            &mut state,
            mgr,
        )?;
    } else {
        let mut stages = tuple_list!(values, havoc);
        run_loop(
            cfg,
            (start, end),
            client,
            &mut report,
            &mut fuzzer,
            &mut stages,
            &mut executor,
            &mut state,
            mgr,
        )?;
    }
    report.executions = *state.executions();
    report.seconds = start.elapsed().as_secs_f64();
    report.corpus = state.corpus().count();
    Ok(report)
}

/// The edge map the harness writes, its id in this process's environment (which
/// the harness inherits).
fn shared_edge_map(sp: &mut UnixShMemProvider) -> Result<UnixShMem, FuzzError> {
    let edges_shmem = sp.new_shmem(MAP_SIZE).map_err(lib)?;
    // SAFETY: writes the shared memory id to this process's environment before any
    // thread is spawned; the harness reads it from its own environment.
    unsafe {
        edges_shmem
            .write_to_env(hooks::ENV_AFL_SHM_ID)
            .map_err(lib)?
    };
    Ok(edges_shmem)
}

/// A new fuzzer state: the queue under `out/queue`, the objectives under
/// `out/.solutions`, the dictionary as tokens.
fn fresh_state<F, O>(
    cfg: &FuzzConfig,
    out: &Path,
    seed: u64,
    feedback: &mut F,
    objective: &mut O,
) -> Result<UnitState, FuzzError>
where
    F: libafl::feedbacks::StateInitializer<UnitState>,
    O: libafl::feedbacks::StateInitializer<UnitState>,
{
    let mut state = StdState::new(
        StdRand::with_seed(seed),
        InMemoryOnDiskCorpus::<BytesInput>::new(out.join("queue")).map_err(lib)?,
        OnDiskCorpus::new(out.join(".solutions")).map_err(lib)?,
        feedback,
        objective,
    )
    .map_err(lib)?;
    state.add_metadata(cfg.dictionary.tokens());
    Ok(state)
}

/// Start the harness behind a forkserver, observing its edges and time.
fn harness_executor<'a>(
    cfg: &FuzzConfig,
    request: &Path,
    edges_observer: EdgesObserver<'a>,
    time_observer: TimeObserver,
) -> Result<HarnessExecutor<'a>, FuzzError> {
    let program = cfg.program.display().to_string();
    let mut in_sp = UnixShMemProvider::new().map_err(lib)?;
    ForkserverExecutor::builder()
        .program(program.clone())
        .env(ENV_FUZZ, request.display().to_string())
        .env(hooks::ENV_AFL_MAP_SIZE, MAP_SIZE.to_string())
        .coverage_map_size(MAP_SIZE)
        .timeout(cfg.timeout)
        .is_persistent(cfg.persistent)
        .kill_signal(Signal::SIGKILL)
        .shmem_provider(&mut in_sp)
        .build_dynamic_map(edges_observer, tuple_list!(time_observer))
        .map_err(|e| FuzzError::Libafl(format!("cannot start the harness {program}: {e}")))
}

/// Start a second harness whose `trace-cmp` hooks log comparisons into `cmp_shmem`
/// (for the input-to-state stage); it gets ten times the time of an execution.
fn tracing_executor(
    cfg: &FuzzConfig,
    request: &Path,
    cmp_shmem: &mut UnixShMem,
) -> Result<TracingExecutor, FuzzError> {
    let program = cfg.program.display().to_string();
    let cmp_id = cmp_shmem.id().to_string();
    // SAFETY: the caller keeps the map alive as long as the executor; the hooks write
    // LibAFL's CmpLogMap layout into the (larger) AFL++-sized segment.
    let cmplog_observer = unsafe {
        CmpLogObserver::with_map_ptr("cmplog", cmp_shmem.as_mut_ptr() as *mut CmpLogMap, true)
    };
    let mut cmp_in_sp = UnixShMemProvider::new().map_err(lib)?;
    ForkserverExecutor::builder()
        .program(program.clone())
        .env(ENV_FUZZ, request.display().to_string())
        .env(hooks::ENV_AFL_MAP_SIZE, MAP_SIZE.to_string())
        .env(hooks::ENV_AFL_CMPLOG_SHM_ID, cmp_id)
        .coverage_map_size(MAP_SIZE)
        .timeout(cfg.timeout * 10)
        .is_persistent(cfg.persistent)
        .kill_signal(Signal::SIGKILL)
        .shmem_provider(&mut cmp_in_sp)
        .build(tuple_list!(cmplog_observer))
        .map_err(|e| FuzzError::Libafl(format!("cannot start the tracing harness {program}: {e}")))
}

/// When the campaign started and when it ends. A single-core campaign starts its
/// clock now, with the harness up; clients share the clock of the process that
/// launched them.
fn campaign_clock(
    cfg: &FuzzConfig,
    client: Option<&crate::pace::ClientPace>,
) -> (Instant, Instant) {
    match client {
        Some(c) => (c.start, c.end),
        None => {
            let start = Instant::now();
            (start, start + cfg.time)
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn run_loop<Z, ST, E, S, EM>(
    cfg: &FuzzConfig,
    (start, end): (Instant, Instant),
    client: Option<&crate::pace::ClientPace>,
    report: &mut FuzzReport,
    fuzzer: &mut Z,
    stages: &mut ST,
    executor: &mut E,
    state: &mut S,
    mgr: &mut EM,
) -> Result<(), FuzzError>
where
    Z: Fuzzer<E, EM, BytesInput, S, ST>,
    S: HasExecutions + HasSolutions<BytesInput> + HasCorpus<BytesInput> + libafl::HasNamedMetadata,
    EM: ProgressReporter<S> + ReportedProgress,
{
    let mut last = Instant::now();
    let mut end = end;
    while Instant::now() < end {
        fuzzer.fuzz_one(stages, executor, state, mgr).map_err(lib)?;
        let solutions = state.solutions().count();
        if client.is_none()
            && !cfg.goal.is_empty()
            && report.goal_after.is_none()
            && crate::goal_reached(state, &cfg.goal)
        {
            // The direction was taken: what lies behind it gets `after_goal`, the
            // rest of the slice is the campaign's.
            report.goal_after = Some(start.elapsed().as_secs_f64());
            end = end.min(Instant::now() + cfg.after_goal);
        }
        if solutions > 0 && report.first_crash_after.is_none() {
            report.first_crash_after = Some(start.elapsed().as_secs_f64());
            if cfg.stop_on_crash {
                if let Some(c) = client {
                    c.stop_all();
                }
                break;
            }
        }
        if let Some(c) = client {
            if last.elapsed() >= Duration::from_secs(1) {
                last = Instant::now();
                // The launcher's monitor prints the status line from these reports.
                mgr.report_progress(state).map_err(lib)?;
                mgr.reported_progress().map_err(lib)?;
                c.checkpoint(*state.executions(), report.first_crash_after);
            }
            if c.should_stop() {
                break;
            }
        } else if cfg.progress && last.elapsed() >= Duration::from_secs(1) {
            last = Instant::now();
            let el = start.elapsed().as_secs_f64();
            let execs = *state.executions();
            eprintln!(
                "[fuzz {:>4.0}s] {} execs ({:.0}/s), corpus {}, objectives {}",
                el,
                execs,
                execs as f64 / el.max(1e-9),
                state.corpus().count(),
                solutions
            );
        }
    }
    Ok(())
}

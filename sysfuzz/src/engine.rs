//! The fuzzing loop ([`SysFuzzer`]): LibAFL's state, fuzzer and stages over the
//! [`SysExecutor`], kept between slices so that a campaign can interleave system
//! fuzzing with its other steps; its settings ([`SysFuzzConfig`]) and what a slice
//! did ([`SliceReport`]).
//!
//! It owns the output directory: the queue (LibAFL's on-disk corpus, reloaded when a
//! campaign resumes) and the finding files ([`super::findings`]). Errors are
//! returned; on stderr it says only what it passes over: a program that cannot serve
//! (the executor's notice), a damaged finding file on resume.

use crate::config::SysFuzzConfig;
use crate::energy::{Energy, RateStage};
use crate::executor::{StoppedRuns, SysExecutor};
use crate::findings::{CompletedRun, FindingFeedback, Found};
use crate::indexes::{CompactIndexes, Compacting};
use crate::input::SysInput;
use crate::lean::SystemBuild;
use crate::lineage::{Descent, LiftedOrigin, Lineage};
use crate::mutators::{sys_mutator, Donors, I2SMutator};
use crate::operands::{OperandSample, OperandVariation, OperandWatch};
use crate::trim::TrimStage;
use anyhow::{bail, Context as _, Result};
use libafl::corpus::{CachedOnDiskCorpus, Corpus, CorpusId, InMemoryCorpus};
use libafl::events::SimpleEventManager;
use libafl::feedbacks::{MapFeedbackMetadata, MaxMapFeedback, TimeFeedback};
use libafl::fuzzer::{
    BloomInputFilter, Evaluator, ExecuteInputResult, Fuzzer, InputFilter, StdFuzzer,
};
use libafl::inputs::Input;
use libafl::monitors::NopMonitor;
use libafl::mutators::HavocScheduledMutator;
use libafl::observers::{CanTrack, HitcountsMapObserver, StdMapObserver, TimeObserver};
use libafl::schedulers::minimizer::TopRatedsMetadata;
use libafl::schedulers::powersched::PowerSchedule;
use libafl::schedulers::PowerQueueScheduler;
use libafl::stages::{PowerMutationalStage, StdMutationalStage, TracingStage};
use libafl::state::{HasCorpus, HasExecutions, HasSolutions, StdState};
use libafl::{feedback_and_fast, feedback_or, HasMetadata, HasNamedMetadata};
use libafl_bolts::rands::StdRand;
use libafl_bolts::shmem::{ShMem, ShMemProvider, UnixShMem, UnixShMemProvider};
use libafl_bolts::tuples::tuple_list;
use libafl_targets::{AflppCmpLogMap, CmpLogMap, CmpLogObserver};
use serde::Serialize;
use std::collections::HashSet;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use trestle_abi::hooks;
use trestle_abi::unit::SystemTest;
use trestle_exec::systest::NamedTest;
use trestle_unit_fuzz::schedule::small_fast;

/// Edge map size offered to the program (the ABI's, which the unit fuzzer offers too,
/// so one build serves both).
const MAP_SIZE: usize = trestle_abi::hooks::EDGE_MAP_SIZE;
/// Input-to-state executions per corpus entry each time it is picked, at most (the
/// havoc stage's count is the entry's energy, [`super::energy`]).
const EXECS_PER_PICK: usize = 32;

pub(super) type SysState =
    StdState<CachedOnDiskCorpus<SysInput>, SysInput, StdRand, InMemoryCorpus<SysInput>>;

/// LibAFL's Bloom filter of the inputs already run, made anew after as many inputs as
/// it was sized for. Filled past that it takes ever more new inputs for ones it has
/// seen (at five times its size about two in three) and the fuzzer runs ever fewer.
/// The likeliest cause of a 2-hour sed campaign falling from 1,000 to 120 executions
/// a second after five million, through a filter sized for a million.
pub(super) struct RenewedBloom {
    filter: BloomInputFilter,
    items: usize,
    seen: usize,
}

impl RenewedBloom {
    pub(super) fn new(items: usize) -> Self {
        RenewedBloom {
            filter: BloomInputFilter::new(items, 1e-4),
            items,
            seen: 0,
        }
    }
}

impl<EM, I: std::hash::Hash, S> InputFilter<EM, I, S> for RenewedBloom {
    fn should_execute(
        &mut self,
        input: &I,
        state: &mut S,
        manager: &mut EM,
    ) -> Result<bool, libafl::Error> {
        if self.seen >= self.items {
            *self = RenewedBloom::new(self.items);
        }
        self.seen += 1;
        self.filter.should_execute(input, state, manager)
    }
}

/// Queue entries whose inputs are kept in memory, the most recently loaded; the rest
/// are read back from the queue directory when picked. Kept all, the queue's inputs
/// grew the campaign's memory with the queue for as long as it ran (a sed campaign:
/// 3.5 of the 8 MB its live heap grew between minutes 4 and 17).
pub(super) const QUEUE_INPUTS_IN_MEMORY: usize = 512;
type SysManager = SimpleEventManager<SysInput, NopMonitor, SysState>;

/// The fuzzer, executor and stages, whatever their (long) types: what a slice needs.
trait Engine {
    /// Fuzz the entry the scheduler picks: its id.
    fn fuzz_one(
        &mut self,
        state: &mut SysState,
        mgr: &mut SysManager,
    ) -> Result<CorpusId, libafl::Error>;
    /// Run `input` and keep it in the queue whatever it covers (a seed).
    fn add(
        &mut self,
        state: &mut SysState,
        mgr: &mut SysManager,
        input: SysInput,
    ) -> Result<(), libafl::Error>;
    /// Run `input`; keep it if it is interesting.
    fn evaluate(
        &mut self,
        state: &mut SysState,
        mgr: &mut SysManager,
        input: &SysInput,
    ) -> Result<ExecuteInputResult, libafl::Error>;
    /// The executor's per-run limit ([`SysExecutor::set_limit`]).
    fn set_limit(&mut self, limit: Duration);
    fn limit(&self) -> Duration;
    /// Runs stopped at the short limit, and what became of them.
    fn stopped_runs(&self) -> StoppedRuns;
    /// Whether the last run ended by itself within the short limit, without a crash.
    fn last_ended_well(&self) -> bool;
}

struct Parts<Z, E, ST> {
    fuzzer: Z,
    executor: E,
    stages: ST,
}

impl<Z, OT, ST> Engine for Parts<Z, SysExecutor<OT>, ST>
where
    Z: Fuzzer<SysExecutor<OT>, SysManager, SysInput, SysState, ST>
        + Evaluator<SysExecutor<OT>, SysManager, SysInput, SysState>,
{
    fn fuzz_one(
        &mut self,
        state: &mut SysState,
        mgr: &mut SysManager,
    ) -> Result<CorpusId, libafl::Error> {
        self.fuzzer
            .fuzz_one(&mut self.stages, &mut self.executor, state, mgr)
    }

    fn add(
        &mut self,
        state: &mut SysState,
        mgr: &mut SysManager,
        input: SysInput,
    ) -> Result<(), libafl::Error> {
        self.fuzzer
            .add_input(state, &mut self.executor, mgr, input)
            .map(|_| ())
    }

    fn evaluate(
        &mut self,
        state: &mut SysState,
        mgr: &mut SysManager,
        input: &SysInput,
    ) -> Result<ExecuteInputResult, libafl::Error> {
        self.fuzzer
            .evaluate_input(state, &mut self.executor, mgr, input)
            .map(|(r, _)| r)
    }

    fn set_limit(&mut self, limit: Duration) {
        self.executor.set_limit(limit);
    }

    fn limit(&self) -> Duration {
        self.executor.limit()
    }

    fn stopped_runs(&self) -> StoppedRuns {
        self.executor.stopped_runs
    }

    fn last_ended_well(&self) -> bool {
        self.executor.last_ended_well
    }
}

/// The per-run limit while fuzzing, from how long the initial corpus ran, the way
/// AFL++ calibrates its own: five times the mean run (three times past 10 ms, twice
/// past 50 ms), at least the slowest run, rounded up to 20 ms; never above `hang`
/// (the user's limit, where a run counts as a timeout).
pub(super) fn calibrated_limit(times: &[Duration], hang: Duration) -> Duration {
    let Some(slowest) = times.iter().max() else {
        return hang;
    };
    let mean = times.iter().sum::<Duration>() / times.len() as u32;
    let factor = match mean.as_millis() {
        0..=10 => 5,
        11..=50 => 3,
        _ => 2,
    };
    let ms = (mean * factor).max(*slowest).as_millis() as u64;
    Duration::from_millis(ms.div_ceil(20).max(1) * 20).min(hang)
}

fn lib(e: libafl::Error) -> anyhow::Error {
    anyhow::anyhow!("{e}")
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
    /// The build it runs.
    build: SystemBuild,
    /// How to start the operand probe (CmpLog on), and the probe once started.
    probe_setup: Option<OperandProbeSetup>,
    probe: Option<OperandProbe>,
    /// Where each entry and finding came from.
    lineage: Lineage,
    /// Where the external tests run now come from ([`SysFuzzer::set_origin`]).
    origin: Option<LiftedOrigin>,
}

/// The `.json` files in `dir`, sorted; none if it does not exist. An unreadable
/// directory is an error: resuming from an empty queue would silently start over.
fn json_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", dir.display())),
    };
    let mut v = Vec::new();
    for e in entries {
        let p = e
            .with_context(|| format!("cannot read {}", dir.display()))?
            .path();
        if p.extension().is_some_and(|x| x == "json") {
            v.push(p);
        }
    }
    v.sort();
    Ok(v)
}

/// The output directory (made, with its subdirectories, and resolved), the program
/// (resolved) and the queue entries to resume from.
fn prepare(cfg: &SysFuzzConfig) -> Result<(PathBuf, PathBuf, Vec<PathBuf>)> {
    let out = &cfg.out;
    for d in ["queue", "crashes", "timeouts"] {
        std::fs::create_dir_all(out.join(d))
            .with_context(|| format!("cannot create {}", out.join(d).display()))?;
        // Temporary files of writes a kill or a full disk cut short: never read, and
        // in the way of the next write of the same name.
        for e in std::fs::read_dir(out.join(d))
            .with_context(|| format!("cannot list {}", out.join(d).display()))?
            .flatten()
        {
            if e.file_name().to_string_lossy().ends_with(".tmp") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    let out =
        std::fs::canonicalize(out).with_context(|| format!("cannot resolve {}", out.display()))?;
    let program = std::fs::canonicalize(&cfg.program)
        .with_context(|| format!("program not found: {}", cfg.program.display()))?;
    let resumed = json_files(&out.join("queue"))?;
    if cfg.seeds.is_empty() && resumed.is_empty() {
        bail!("no seed system tests to start from");
    }
    Ok((out, program, resumed))
}

/// A server of the program whose trace-cmp hooks log into a map of its own,
/// returned with it.
fn cmplog_server(
    provider: &mut UnixShMemProvider,
    program: &Path,
    cfg: &SysFuzzConfig,
    mut env: Vec<(String, String)>,
    bwrap: Option<PathBuf>,
) -> Result<(SysExecutor<()>, UnixShMem)> {
    let map = provider
        .uninit_on_shmem::<AflppCmpLogMap>()
        .map_err(lib)
        .context("cannot create the CmpLog map")?;
    env.push((
        hooks::ENV_AFL_CMPLOG_SHM_ID.to_string(),
        map.id().to_string(),
    ));
    let mut server = SysExecutor::new(program, cfg, cfg.timeout * 2, env, (), bwrap)?;
    server.notice = false;
    Ok((server, map))
}

/// The executor of the tracing (CmpLog) runs: a [`cmplog_server`] observing its map.
fn cmplog_tracer(
    provider: &mut UnixShMemProvider,
    program: &Path,
    cfg: &SysFuzzConfig,
    env: Vec<(String, String)>,
    bwrap: Option<PathBuf>,
) -> Result<(SysExecutor<(CmpLogObserver, ())>, UnixShMem)> {
    let (server, mut map) = cmplog_server(provider, program, cfg, env, bwrap)?;
    // SAFETY: the map outlives the observer (the SysFuzzer drops it after the engine,
    // like the edge map); the hooks write LibAFL's CmpLogMap layout into the (larger)
    // AFL++-sized segment.
    let observer =
        unsafe { CmpLogObserver::with_map_ptr("cmplog", map.as_mut_ptr() as *mut CmpLogMap, true) };
    Ok((server.with_observers(tuple_list!(observer)), map))
}

/// What starts the server of [`SysFuzzer::operands_at`] when it is first needed.
struct OperandProbeSetup {
    program: PathBuf,
    cfg: SysFuzzConfig,
    env: Vec<(String, String)>,
    bwrap: Option<PathBuf>,
}

/// The server of [`SysFuzzer::operands_at`] (declared before its map: dropped first).
struct OperandProbe {
    server: SysExecutor<()>,
    map: UnixShMem,
}

impl SysFuzzer {
    /// Set up, and run the initial corpus: on an existing output directory, its queue
    /// (a resumed campaign), then the seeds it does not hold yet. Crashes and timeouts
    /// found before are re-run (so they count as known) but not reported again.
    pub fn new(cfg: SysFuzzConfig) -> Result<SysFuzzer> {
        let (out, program, resumed) = prepare(&cfg)?;
        let build = crate::lean::choose(&program, cfg.lean);
        let program = build.path(&program).to_path_buf();
        let mut provider = UnixShMemProvider::new()
            .map_err(lib)
            .context("cannot use shared memory")?;
        let mut edges_map = provider
            .new_shmem(MAP_SIZE)
            .map_err(lib)
            .context("cannot create the edge map")?;
        let coverage_env = vec![
            (
                hooks::ENV_AFL_SHM_ID.to_string(),
                edges_map.id().to_string(),
            ),
            (hooks::ENV_AFL_MAP_SIZE.to_string(), MAP_SIZE.to_string()),
        ];
        let bwrap = if cfg.sandbox {
            Some(trestle_exec::sandbox::find_bwrap("fuzz")?)
        } else {
            None
        };
        let mut executor = SysExecutor::new(
            &program,
            &cfg,
            cfg.timeout,
            coverage_env.clone(),
            (),
            bwrap.clone(),
        )?;
        // Look at as much of the map as the program uses (the server says; AFL++ does
        // the same): classifying, comparing and clearing it is work on every run.
        let map_len = match executor.map_len().map_err(lib)? {
            Some(edges) => edges.next_multiple_of(64).clamp(64, MAP_SIZE),
            None => MAP_SIZE,
        };
        // SAFETY: the map outlives the observer: both live in the SysFuzzer, the map
        // declared after the engine that holds the observer, so it is dropped last.
        let edges_observer = unsafe {
            HitcountsMapObserver::new(StdMapObserver::from_mut_ptr(
                "edges",
                edges_map.as_mut_ptr(),
                map_len,
            ))
        }
        .track_indices();
        let time_observer = TimeObserver::new("time");
        let found = Arc::new(Mutex::new(Found::default()));
        // New coverage (or time) of a run that ended by itself within the short limit:
        // a run stopped there is a timeout finding or nothing, never a queue entry.
        // The edges each entry reached are kept compact (see `indexes`).
        let mut feedback = Compacting::new(feedback_and_fast!(
            CompletedRun::new(executor.stopped()),
            feedback_or!(
                MaxMapFeedback::new(&edges_observer),
                TimeFeedback::new(&time_observer)
            )
        ));
        // Only findings with coverage no earlier finding had: one file per way to fail.
        let mut objective = feedback_and_fast!(
            FindingFeedback::new(&out, found.clone(), executor.hung()),
            MaxMapFeedback::with_name("finding_edges", &edges_observer)
        );
        let queue = CachedOnDiskCorpus::with_meta_format_and_prefix(
            out.join("queue"),
            QUEUE_INPUTS_IN_MEMORY,
            None,
            None,
            false,
        )
        .map_err(lib)?;
        let mut state = StdState::new(
            StdRand::with_seed(cfg.seed),
            queue,
            InMemoryCorpus::new(),
            &mut feedback,
            &mut objective,
        )
        .map_err(lib)?;
        // The queue in order, favoured entries first, each getting AFL++'s energy.
        let power = PowerQueueScheduler::new(&mut state, &edges_observer, PowerSchedule::fast());
        let fuzzer = StdFuzzer::builder()
            .scheduler(small_fast::<_, _, CompactIndexes, _>(
                &edges_observer,
                power,
            ))
            .feedback(feedback)
            .objective(objective)
            // Structured mutations often repeat an input; running it again says nothing.
            .input_filter(RenewedBloom::new(1 << 20))
            .build();
        // SAFETY: as for the observer: the map outlives the executor.
        unsafe { executor.watch_edges(edges_map.as_mut_ptr(), map_len) };
        let executor = executor.with_observers(tuple_list!(edges_observer, time_observer));
        let per_pick = NonZeroUsize::new(EXECS_PER_PICK).expect("non-zero");
        let stage =
            PowerMutationalStage::<_, Energy, _, _, _, _, _>::new(sys_mutator(&cfg.dictionary));
        // SAFETY: the edge map lives in the SysFuzzer, dropped after the engine.
        let trim = unsafe { TrimStage::new(edges_map.as_ptr(), map_len) };
        let (engine, cmp_map): (Box<dyn Engine>, _) = if cfg.cmplog {
            // Input-to-state: each picked entry runs once more with the trace-cmp
            // hooks logging (a second server, its own environment).
            let (tracer, map) = cmplog_tracer(
                &mut provider,
                &program,
                &cfg,
                coverage_env.clone(),
                bwrap.clone(),
            )?;
            // One to four replacements at a time (each scans the input).
            let i2s = StdMutationalStage::with_max_iterations(
                HavocScheduledMutator::with_max_stack_pow(tuple_list!(I2SMutator), 2),
                per_pick,
            );
            // SAFETY: the CmpLog map lives in the SysFuzzer, dropped after the engine.
            let watch = unsafe { OperandWatch::new(map.as_ptr() as *const CmpLogMap) };
            (
                Box::new(Parts {
                    fuzzer,
                    executor,
                    stages: tuple_list!(
                        trim,
                        TracingStage::new(tracer),
                        watch,
                        i2s,
                        RateStage,
                        stage
                    ),
                }),
                Some(map),
            )
        } else {
            (
                Box::new(Parts {
                    fuzzer,
                    executor,
                    stages: tuple_list!(trim, RateStage, stage),
                }),
                None,
            )
        };
        let mgr = SimpleEventManager::new(NopMonitor::new());
        let lineage = Lineage::open(&out)?;
        let probe_setup = cfg.cmplog.then(|| OperandProbeSetup {
            program: program.clone(),
            cfg: cfg.clone(),
            env: coverage_env,
            bwrap,
        });
        let mut f = SysFuzzer {
            engine,
            state,
            mgr,
            _edges_map: edges_map,
            _cmp_map: cmp_map,
            out,
            found,
            next_id: 0,
            build,
            probe_setup,
            probe: None,
            lineage,
            origin: None,
        };
        f.run_initial_corpus(&cfg, &resumed)?;
        f.check_started(&cfg.program)?;
        let limit = calibrated_limit(&f.corpus_times()?, cfg.timeout);
        f.engine.set_limit(limit);
        Ok(f)
    }

    /// Run the queue being resumed, the known findings and the new seeds.
    fn run_initial_corpus(&mut self, cfg: &SysFuzzConfig, resumed: &[PathBuf]) -> Result<()> {
        let (state, mgr) = (&mut self.state, &mut self.mgr);
        let mut seen = HashSet::new();
        for p in resumed {
            let input = SysInput::from_file(p)
                .map_err(|e| anyhow::anyhow!("cannot resume from {}: {e}", p.display()))?;
            if seen.insert(input.file_name()) {
                self.engine.add(state, mgr, input).map_err(lib)?;
                // A trimmed entry reads back under the name of what it is now.
                if let (Some(old), Some(new)) = (p.file_name(), newest_name(state)) {
                    self.lineage.alias(&old.to_string_lossy(), &new)?;
                }
            }
        }
        for dir in ["crashes", "timeouts"] {
            for p in json_files(&self.out.join(dir))? {
                // Only a finding that reloads counts as known: a damaged one is said
                // and passed over, as it was never a queue entry to resume from.
                match SysInput::from_file(&p) {
                    Ok(input) => {
                        self.engine.evaluate(state, mgr, &input).map_err(lib)?;
                    }
                    Err(e) => eprintln!("trestle: skipping {}: {e}", p.display()),
                }
            }
        }
        *self.found.lock().unwrap_or_else(|p| p.into_inner()) = Found::default();
        for seed in &cfg.seeds {
            SysInput::check(&seed.test).with_context(|| format!("seed {}", seed.path.display()))?;
            let input = SysInput::from_test(&seed.test);
            if seen.insert(input.file_name()) {
                self.engine.add(state, mgr, input).map_err(lib)?;
                if let Some(name) = newest_name(state) {
                    self.lineage.root(&name, None)?;
                }
            }
        }
        self.next_id = self
            .state
            .corpus()
            .ids()
            .map(|id| id.0 + 1)
            .max()
            .unwrap_or(0);
        Ok(())
    }

    /// How long each queue entry's run took.
    fn corpus_times(&self) -> Result<Vec<Duration>> {
        let corpus = self.state.corpus();
        let mut times = Vec::new();
        for id in corpus.ids() {
            if let Some(t) = *corpus.get(id).map_err(lib)?.borrow().exec_time() {
                times.push(t);
            }
        }
        Ok(times)
    }

    /// The build it runs: the program's lean sibling, or the program and why.
    pub fn build(&self) -> &SystemBuild {
        &self.build
    }

    /// Where fuzzed runs stop (calibrated from the initial corpus; a run stopped
    /// with new edges runs again to the hang limit, `--timeout`).
    pub fn run_limit(&self) -> Duration {
        self.engine.limit()
    }

    /// Runs stopped at the run limit: how many of them ran again to end within the
    /// hang limit (slow inputs, kept neither in the queue nor as timeouts), and how
    /// many were not run again for lack of time.
    pub fn stopped_runs(&self) -> StoppedRuns {
        self.engine.stopped_runs()
    }

    /// Fail early on a start that cannot fuzz: nothing in the queue, or no coverage.
    fn check_started(&self, program: &Path) -> Result<()> {
        if self.state.corpus().count() == 0 {
            bail!(
                "every seed crashes or times out: nothing to fuzz from (see {})",
                self.out.display()
            );
        }
        if self.edges() == 0 {
            bail!(
                "{} reported no edge coverage: build it with trestle-cc (a runtime that reports coverage to {})",
                program.display(),
                hooks::ENV_AFL_SHM_ID
            );
        }
        Ok(())
    }

    /// Fuzz for about `d` (a corpus entry's round of executions is finished first).
    pub fn fuzz_for(&mut self, d: Duration) -> Result<SliceReport> {
        let before = self.executions();
        let end = Instant::now() + d;
        while Instant::now() < end {
            let mark = self.mark();
            let parent = self
                .engine
                .fuzz_one(&mut self.state, &mut self.mgr)
                .map_err(lib)?;
            match entry_name(&self.state, parent) {
                Some(parent) => {
                    self.note_since(mark, |l, name, donors| l.child(name, &parent, donors))?
                }
                None => self.note_since(mark, |l, name, _| l.root(name, None))?,
            }
        }
        self.report(before)
    }

    /// Where the queue and the findings are now, for [`Self::note_since`].
    fn mark(&self) -> Mark {
        let found = self.found.lock().unwrap_or_else(|p| p.into_inner());
        Mark {
            last: self.state.corpus().last(),
            crashes: found.crashes.len(),
            timeouts: found.timeouts.len(),
        }
    }

    /// Put every queue entry and finding kept since `mark` in the lineage with `note`
    /// (given the entries it took material from besides its parent).
    fn note_since(
        &mut self,
        mark: Mark,
        mut note: impl FnMut(&mut Lineage, &str, &[String]) -> Result<()>,
    ) -> Result<()> {
        let corpus = self.state.corpus();
        let mut next = match mark.last {
            Some(id) => corpus.next(id),
            None => corpus.first(),
        };
        while let Some(id) = next {
            if let Some(name) = entry_name(&self.state, id) {
                let donors = corpus
                    .get(id)
                    .ok()
                    .and_then(|tc| tc.borrow().metadata::<Donors>().ok().map(|d| d.0.clone()));
                note(
                    &mut self.lineage,
                    &name,
                    donors.as_deref().unwrap_or_default(),
                )?;
            }
            next = self.state.corpus().next(id);
        }
        let found = self.found.lock().unwrap_or_else(|p| p.into_inner());
        let kept = found
            .crashes
            .iter()
            .skip(mark.crashes)
            .chain(found.timeouts.iter().skip(mark.timeouts));
        for path in kept {
            if let Some(name) = path.file_name() {
                note(
                    &mut self.lineage,
                    &name.to_string_lossy(),
                    found
                        .donors
                        .get(path)
                        .map(Vec::as_slice)
                        .unwrap_or_default(),
                )?;
            }
        }
        Ok(())
    }

    /// Say where the external tests run from now on ([`Self::add_test`], the lifting
    /// probe) come from: a unit's lifted tests (`None`: elsewhere). What they add to
    /// the queue, and what the fuzzer mutates from it, descends from that unit.
    pub fn set_origin(&mut self, origin: Option<LiftedOrigin>) {
        self.origin = origin;
    }

    /// How the finding or queue entry in `path` descends from a lifted test, if it does.
    pub fn descent_of(&self, path: &Path) -> Option<Descent> {
        self.lineage.descent(&path.file_name()?.to_string_lossy())
    }

    /// Queue entries and findings in the lineage, and how many of them descend from
    /// a lifted test.
    pub fn lineage_counts(&self) -> (usize, usize) {
        self.lineage.counts()
    }

    /// Run an external test as the fuzzer runs its own, and note what it kept as
    /// coming from [`Self::set_origin`]'s origin.
    fn evaluate_external(&mut self, input: &SysInput) -> Result<ExecuteInputResult> {
        let mark = self.mark();
        let r = self
            .engine
            .evaluate(&mut self.state, &mut self.mgr, input)
            .map_err(lib)?;
        let origin = self.origin.clone();
        self.note_since(mark, |l, name, _| l.root(name, origin.clone()))?;
        Ok(r)
    }

    /// Run `tests` round-robin, unmutated, for about `d`, each as a fuzzed input runs
    /// (the executor, the observers, the feedbacks): what an execution costs the
    /// fuzzer apart from mutating. The executions it made.
    pub fn repeat_for(&mut self, tests: &[NamedTest], d: Duration) -> Result<u64> {
        let inputs: Vec<SysInput> = tests.iter().map(|t| SysInput::from_test(&t.test)).collect();
        let (before, end) = (self.executions(), Instant::now() + d);
        if inputs.is_empty() {
            return Ok(0);
        }
        'outer: loop {
            for input in &inputs {
                self.engine
                    .evaluate(&mut self.state, &mut self.mgr, input)
                    .map_err(lib)?;
                if Instant::now() >= end {
                    break 'outer;
                }
            }
        }
        Ok(self.executions() - before)
    }

    fn report(&mut self, executions_before: u64) -> Result<SliceReport> {
        let mut new_queue = Vec::new();
        let mut next = self.next_id;
        for id in self.state.corpus().ids() {
            if id.0 >= self.next_id {
                next = next.max(id.0 + 1);
                let tc = self.state.corpus().get(id).map_err(lib)?;
                if let Some(p) = tc.borrow().file_path() {
                    // LibAFL only logs a failed write: say it here.
                    if !p.exists() {
                        bail!("cannot write queue entry {}", p.display());
                    }
                    new_queue.push(p.clone());
                }
            }
        }
        self.next_id = next;
        // FindingFeedback wrote each finding to its folder already; LibAFL's copy in
        // the solutions would only grow with every crash and timeout found.
        let solutions: Vec<_> = self.state.solutions().ids().collect();
        for id in solutions {
            self.state.solutions_mut().remove(id).map_err(lib)?;
        }
        let found = std::mem::take(&mut *self.found.lock().unwrap_or_else(|p| p.into_inner()));
        self.lineage.flush()?;
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

    /// Whether the operands of the comparison logged under CmpLog id `cmp` changed
    /// across the traced runs so far (the input decides them), or never did (a
    /// setting); `None` if no traced run logged it (or CmpLog is off).
    pub fn operands_vary(&self, cmp: u32) -> Option<bool> {
        self.state.metadata::<OperandVariation>().ok()?.varies(cmp)
    }

    /// Run `test` once with the trace-cmp hooks logging (a server of its own, started
    /// on first use) and say what comparison `cmp` saw: whether the system input moves
    /// a comparison, tried by changing the input. `None` when CmpLog is off, or the run
    /// did not end within the fuzzer's run limit (a changed number can make a
    /// calculator run for seconds; on dc, such runs took a pick's probing time). The
    /// run is not the fuzzer's: nothing joins the queue, no finding is kept.
    pub fn operands_at(&mut self, test: &SystemTest, cmp: u32) -> Result<Option<OperandSample>> {
        SysInput::check(test)?;
        let Some(setup) = &self.probe_setup else {
            return Ok(None);
        };
        if self.probe.is_none() {
            let mut provider = UnixShMemProvider::new()
                .map_err(lib)
                .context("cannot use shared memory")?;
            let (server, map) = cmplog_server(
                &mut provider,
                &setup.program,
                &setup.cfg,
                setup.env.clone(),
                setup.bwrap.clone(),
            )?;
            self.probe = Some(OperandProbe { server, map });
        }
        let probe = self.probe.as_mut().expect("started above");
        let row = super::operands::seen_row(cmp, probe.map.len());
        if let Some(r) = &row {
            probe.map[r.clone()].fill(0);
        }
        // SAFETY: the segment holds a CmpLogMap (see `cmplog_tracer`) and lives as
        // long as the probe; no run is writing it between runs.
        let map = unsafe { &mut *(probe.map.as_mut_ptr() as *mut CmpLogMap) };
        libafl::observers::cmp::CmpMap::reset(map).map_err(lib)?;
        if probe
            .server
            .run_once(&SysInput::from_test(test), self.engine.limit())
            .map_err(lib)?
            == libafl::executors::ExitKind::Timeout
        {
            return Ok(None);
        }
        let mut seen = [0u64; trestle_abi::lean::CMPLOG_SEEN_WORDS];
        if let Some(r) = row {
            for (w, bytes) in seen.iter_mut().zip(probe.map[r].chunks_exact(8)) {
                *w = u64::from_ne_bytes(bytes.try_into().expect("8 bytes"));
            }
        }
        Ok(Some(super::operands::sample(map, cmp, seen)))
    }

    /// The queue entry the scheduler rates best (smallest and fastest) among those
    /// that cover one of `edges`, as a test, with its file name in the queue: the
    /// entry to record for a roadblock whose taken direction these edges are.
    pub fn entry_reaching(&self, edges: &[u32]) -> Option<(String, SystemTest)> {
        let top = self.state.metadata::<TopRatedsMetadata>().ok()?;
        let id = edges.iter().find_map(|&e| top.map.get(&(e as usize)))?;
        let input = self.state.corpus().cloned_input_for_id(*id).ok()?;
        Some((input.file_name(), input.to_test()))
    }

    /// The newest `max` queue entries, as tests, newest first.
    pub fn queue_tests(&self, max: usize) -> Vec<SystemTest> {
        let mut ids: Vec<_> = self.state.corpus().ids().collect();
        ids.sort_by_key(|id| std::cmp::Reverse(id.0));
        ids.into_iter()
            .filter_map(|id| {
                self.state
                    .corpus()
                    .cloned_input_for_id(id)
                    .ok()
                    .as_ref()
                    .map(SysInput::to_test)
            })
            .take(max)
            .collect()
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
        Ok(self.evaluate_external(&input)? == ExecuteInputResult::Corpus)
    }

    /// Report what happened since the last report without fuzzing (after [`Self::add_test`]).
    pub fn take_report(&mut self) -> Result<SliceReport> {
        let e = self.executions();
        self.report(e)
    }
}

/// Where the queue and the findings stood ([`SysFuzzer::mark`]).
struct Mark {
    last: Option<CorpusId>,
    crashes: usize,
    timeouts: usize,
}

/// The file name of queue entry `id`.
fn entry_name(state: &SysState, id: CorpusId) -> Option<String> {
    let tc = state.corpus().get(id).ok()?;
    let tc = tc.borrow();
    Some(
        tc.file_path()
            .as_ref()?
            .file_name()?
            .to_string_lossy()
            .into_owned(),
    )
}

/// The file name of the newest queue entry.
fn newest_name(state: &SysState) -> Option<String> {
    entry_name(state, state.corpus().last()?)
}

/// A campaign's lifted tests run here first, through the forkserver, as
/// [`SysFuzzer::add_test`] runs them.
impl crate::Probe for SysFuzzer {
    fn probe(&mut self, t: &SystemTest) -> Result<crate::Probed> {
        SysInput::check(t)?;
        if !SysInput::fits(t) {
            return Ok(crate::Probed::Unfit);
        }
        let input = SysInput::from_test(t);
        let kept = self.evaluate_external(&input)?;
        // Whatever the feedback made of it (a crash along edges an earlier finding
        // took is no new finding here), a run that crashed, hung or was stopped at
        // the short limit goes to the validation build.
        Ok(if !self.engine.last_ended_well() {
            crate::Probed::Objective
        } else if kept == ExecuteInputResult::Corpus {
            crate::Probed::NewCoverage
        } else {
            crate::Probed::Nothing
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_limit_follows_the_seeds_and_never_passes_the_hang_limit() {
        let ms = Duration::from_millis;
        let hang = Duration::from_secs(2);
        // Fast seeds: five times the mean, rounded up to 20 ms.
        assert_eq!(calibrated_limit(&[ms(1), ms(2), ms(3)], hang), ms(20));
        assert_eq!(calibrated_limit(&[ms(5), ms(5)], hang), ms(40));
        // One slow seed: at least the slowest run.
        assert_eq!(
            calibrated_limit(&[ms(1), ms(1), ms(1), ms(150)], hang),
            ms(160)
        );
        // Slow programs get a smaller factor, and never more than the hang limit.
        assert_eq!(calibrated_limit(&[ms(100)], hang), ms(200));
        assert_eq!(calibrated_limit(&[ms(1500)], hang), hang);
        // Nothing to calibrate from: the hang limit.
        assert_eq!(calibrated_limit(&[], hang), hang);
    }

    #[test]
    fn an_unreadable_queue_is_an_error_and_a_missing_one_empty() {
        let dir = tempfile::tempdir().unwrap();
        assert!(json_files(&dir.path().join("absent")).unwrap().is_empty());
        std::fs::write(dir.path().join("b.json"), "{}").unwrap();
        std::fs::write(dir.path().join("a.json"), "{}").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "").unwrap();
        let names: Vec<_> = json_files(dir.path())
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_owned())
            .collect();
        assert_eq!(names, ["a.json", "b.json"]);
        // A queue that is not a directory cannot be resumed: that is said, not read as empty.
        let e = json_files(&dir.path().join("a.json")).unwrap_err();
        assert!(format!("{e:#}").contains("a.json"), "{e:#}");
    }

    #[test]
    fn the_filter_of_inputs_run_before_is_renewed_before_it_takes_new_ones_for_old() {
        let count_refused =
            |f: &mut dyn FnMut(u64) -> bool| (0..20_000u64).filter(|&k| !f(k)).count();
        // Twenty thousand different inputs through a filter sized for a thousand.
        let mut plain = BloomInputFilter::new(1000, 1e-4);
        let refused_plain = count_refused(&mut |k| {
            InputFilter::<(), u64, ()>::should_execute(&mut plain, &k, &mut (), &mut ()).unwrap()
        });
        let mut renewed = RenewedBloom::new(1000);
        let refused_renewed = count_refused(&mut |k| {
            InputFilter::<(), u64, ()>::should_execute(&mut renewed, &k, &mut (), &mut ()).unwrap()
        });
        assert!(
            refused_plain > 10_000,
            "{refused_plain} refused by the full filter"
        );
        assert!(
            refused_renewed < 100,
            "{refused_renewed} refused by the renewed one"
        );
        // What it has seen since it was made it still refuses.
        let mut f = RenewedBloom::new(1000);
        assert!(InputFilter::<(), u64, ()>::should_execute(&mut f, &7, &mut (), &mut ()).unwrap());
        assert!(!InputFilter::<(), u64, ()>::should_execute(&mut f, &7, &mut (), &mut ()).unwrap());
    }

    #[test]
    fn the_queue_keeps_a_bounded_number_of_inputs_in_memory_and_loses_none() {
        use crate::input::tests::input;
        use libafl::corpus::Testcase;
        let (_dir, mut state) = crate::mutators::tests::state();
        let n = QUEUE_INPUTS_IN_MEMORY + 100;
        for k in 0..n {
            state
                .corpus_mut()
                .add(Testcase::from(input(&["set", &k.to_string()], "x\n")))
                .unwrap();
        }
        // Every entry picked once, as the scheduler would: read back from its file.
        let ids: Vec<_> = state.corpus().ids().collect();
        let mut args = std::collections::BTreeSet::new();
        for &id in &ids {
            let input = state.corpus().cloned_input_for_id(id).unwrap();
            if input.args[0] == b"set" {
                args.insert(input.args[1].clone());
            }
        }
        assert_eq!(args.len(), n, "every entry reads back as itself");
        let in_memory = ids
            .iter()
            .filter(|&&id| state.corpus().get(id).unwrap().borrow().input().is_some())
            .count();
        assert!(
            in_memory <= QUEUE_INPUTS_IN_MEMORY,
            "{in_memory} inputs in memory"
        );
    }
}

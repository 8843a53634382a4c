//! The lifting state of one output directory: the validation program and its
//! sandbox, the system coverage reached so far, the alarms and figures, and the
//! index files (`alarms.json`, `lift.json`) that record them.

use super::store::AlarmStore;
use super::{AlarmEntry, LiftStats};
use crate::system::coverage::{is_coverage_build, measure, CoverageSet};
use anyhow::{Context as _, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use trestle_abi::unit::{SystemTest, Unit};
use trestle_exec::binary::Binary;
use trestle_exec::sandbox::{Sandbox, SandboxRun};
use trestle_exec::signature::FrameFilter;

/// How a lifter validates, measures, reduces and reports: set once, before it
/// starts ([`Lifter::new`]). [`LiftConfig::new`] gives the defaults of `trestle lift`.
#[derive(Debug, Clone)]
pub struct LiftConfig {
    /// The build that confirms findings (plain, as shipped; or a sanitizer build).
    pub program: PathBuf,
    /// The sandbox system runs go through, with its limits.
    pub sandbox: Sandbox,
    /// Say what is being lifted and reduced, as it happens.
    pub progress: bool,
    /// A coverage build of the same program that measures what is effective, when
    /// the validation build is not one itself (its alarms also say whether they
    /// reproduce on it).
    pub coverage_build: Option<PathBuf>,
    /// Other builds each new alarm's test also runs on, by role (`fuzzing`,
    /// `coverage`): the alarm lists where it reproduces.
    pub also_on: Vec<(String, PathBuf)>,
    /// Runs allowed for reducing each alarm; `None`: no reduction.
    pub reduce_budget: Option<usize>,
    /// Time allowed for reducing each alarm.
    pub reduce_time: Duration,
    /// Publish alarms as soon as they are confirmed, with the test as found, and
    /// reduce them when [`Lifter::reduce_pending`] is called: a campaign does not stop
    /// fuzzing for a reduction (dc's runaway recursion took its full 30 s in every
    /// campaign).
    pub defer_reduction: bool,
    /// Read unit crash signatures in this program instead of the units' own.
    pub harness: Option<PathBuf>,
    /// Stop a unit harness run (re-reading a unit crash, trying which values it
    /// needs) after this instead of the sandbox's limit. A campaign passes the unit
    /// fuzzer's hang limit: a trial that hangs says all it can by then.
    pub harness_limit: Option<Duration>,
    /// Stop a lifted test's run after this (its CPU time a little before) instead of
    /// the sandbox's limit. A campaign passes its hang limit: a lifted test that runs
    /// on past it crashes no sooner for the wait (on dc, such tests took 19 runs to
    /// the 10 s limit, most of a 181 s lifting phase). System crashes being confirmed
    /// and reduced keep the sandbox's limit.
    pub lifted_limit: Option<Duration>,
    /// Confirm hangs with this much CPU time (whole seconds, at least one) instead of
    /// the sandbox's limits; the wall-clock limit is three times that and a second, so
    /// that on a loaded machine a spinning program still reaches its CPU limit first,
    /// which leaves the stack of where it spins.
    pub hang_limit: Option<Duration>,
    /// The seed system tests by name, so provenance can tell a seed from a system test
    /// that system-level fuzzing made of one.
    pub seeds: Vec<(String, SystemTest)>,
    /// When the work this lifter serves started: alarm times (`found_at`) count from
    /// it (a campaign's start, earlier sessions included).
    pub epoch: Instant,
}

impl LiftConfig {
    /// Validation on `program` in `sandbox`, with `trestle lift`'s defaults: reduction
    /// at once, 100,000 runs or two minutes per alarm, no other build.
    pub fn new(program: &Path, sandbox: Sandbox) -> LiftConfig {
        LiftConfig {
            program: program.to_owned(),
            sandbox,
            progress: false,
            coverage_build: None,
            also_on: Vec::new(),
            reduce_budget: Some(100_000),
            reduce_time: Duration::from_secs(120),
            defer_reduction: false,
            harness: None,
            harness_limit: None,
            lifted_limit: None,
            hang_limit: None,
            seeds: Vec::new(),
            epoch: Instant::now(),
        }
    }
}

/// The lifting state of one output directory; `trestle run` keeps one across rounds.
pub struct Lifter {
    pub(super) program: PathBuf,
    pub(super) out: PathBuf,
    pub(super) sandbox: Sandbox,
    pub(super) filter: FrameFilter,
    pub(super) coverage: Option<CoverageSet>,
    /// The figures so far.
    pub stats: LiftStats,
    /// The alarms and false positives on disk.
    pub(super) store: AlarmStore,
    pub(super) reduce_budget: Option<usize>,
    pub(super) reduce_time: Duration,
    /// Whether alarms are published as found and reduced later
    /// ([`Lifter::reduce_pending`]) instead of at once.
    pub(super) defer_reduction: bool,
    pub(super) harness: Option<PathBuf>,
    /// Wall-clock limit of a unit harness run (default: the sandbox's).
    pub(super) harness_wall: Option<Duration>,
    /// The sandbox for lifted tests when they stop sooner than system crashes being
    /// confirmed ([`Lifter::set_lifted_limit`]); `None`: the sandbox.
    lifted_sandbox: Option<Sandbox>,
    /// The sandbox that confirms hangs ([`Lifter::set_hang_limit`]); `None`: the
    /// sandbox.
    pub(super) hang_sandbox: Option<Sandbox>,
    pub(super) progress: bool,
    pub(super) binaries: BTreeMap<PathBuf, Binary>,
    pub(super) effective_tests: Vec<SystemTest>,
    pub(super) deadline: Option<Instant>,
    /// The edges (indices of the trestle build's coverage map) system-level runs have
    /// reached; set by a campaign, whose system fuzzer runs the same build.
    pub(super) system_edges: Option<Vec<bool>>,
    pub(super) seeds: Vec<(String, SystemTest)>,
    /// Whether unreadable queue metadata was reported (once per lifter).
    pub(super) metadata_warned: bool,
    /// When the work this lifter serves started: an alarm's `found_at` counts from it.
    pub(super) epoch: Instant,
    /// Inputs of the current [`Lifter::lift_dir`] lifted, and how many it has, for a
    /// status shown from another thread meanwhile.
    pub(super) lifting: std::sync::Arc<LiftProgress>,
    /// Other builds of the program each new alarm's test also runs on, by role
    /// ([`Lifter::also_check_on`]).
    pub(super) other_builds: Vec<(String, PathBuf)>,
    /// The build that measures coverage when it is not the validation program
    /// ([`Lifter::use_coverage_build`]).
    pub(super) coverage_program: Option<PathBuf>,
}

/// How far a [`Lifter::lift_dir`] is.
#[derive(Debug, Default)]
pub struct LiftProgress {
    /// Inputs done.
    pub done: std::sync::atomic::AtomicUsize,
    /// Inputs to lift.
    pub total: std::sync::atomic::AtomicUsize,
}

impl Lifter {
    /// How far the current [`Lifter::lift_dir`] is, readable while it runs.
    pub fn lift_progress(&self) -> std::sync::Arc<LiftProgress> {
        self.lifting.clone()
    }

    /// A lifter configured by `config`, writing to `out`. `baseline` are the tests
    /// whose coverage counts as already reached.
    pub fn new(config: LiftConfig, out: &Path, baseline: &[SystemTest]) -> Result<Lifter> {
        let program = std::fs::canonicalize(&config.program)
            .with_context(|| format!("validation program {}", config.program.display()))?;
        let (store, stats) = AlarmStore::open(out)?;
        let filter = FrameFilter::of(&program);
        let mut lifter = Lifter {
            program,
            out: out.to_owned(),
            sandbox: config.sandbox.clone(),
            filter,
            coverage: None,
            stats: stats.unwrap_or_default(),
            store,
            reduce_budget: config.reduce_budget,
            reduce_time: config.reduce_time,
            defer_reduction: config.defer_reduction,
            harness: config.harness.clone(),
            harness_wall: config.harness_limit,
            lifted_sandbox: None,
            hang_sandbox: None,
            progress: config.progress,
            binaries: BTreeMap::new(),
            effective_tests: Vec::new(),
            deadline: None,
            system_edges: None,
            seeds: config.seeds.clone(),
            metadata_warned: false,
            epoch: config.epoch,
            lifting: Default::default(),
            other_builds: Vec::new(),
            coverage_program: None,
        };
        if let Some(wall) = config.lifted_limit {
            lifter.set_lifted_limit(wall);
        }
        if let Some(cpu) = config.hang_limit {
            lifter.set_hang_limit(cpu);
        }
        if is_coverage_build(&lifter.program) {
            let base = lifter.coverage_of(baseline)?;
            lifter.stats.coverage_measured = true;
            lifter.stats.branches_covered = base.branches();
            lifter.stats.branches_total = base.branches_total;
            lifter.coverage = Some(base);
        }
        if let Some(cov) = &config.coverage_build {
            lifter.use_coverage_build(cov, baseline)?;
        }
        for (role, build) in &config.also_on {
            lifter.also_check_on(role, build)?;
        }
        // Readers find the lists even when nothing is ever found.
        lifter.write_index()?;
        Ok(lifter)
    }

    /// Measure coverage (what makes a lifted test effective, and what is not covered
    /// yet) on `program`, a coverage build of the same program, instead of on the
    /// validation program; `baseline` are the tests whose coverage counts as reached.
    /// Lifted tests then run on the validation program, and on the coverage build only
    /// when they did not crash there. Its alarms also say whether they reproduce on it.
    fn use_coverage_build(&mut self, program: &Path, baseline: &[SystemTest]) -> Result<()> {
        let program = std::fs::canonicalize(program)
            .with_context(|| format!("coverage build {}", program.display()))?;
        if !is_coverage_build(&program) {
            anyhow::bail!(
                "{} is no coverage build (build it with clang-19 -g -fprofile-instr-generate -fcoverage-mapping)",
                program.display()
            );
        }
        if program == self.program {
            return Ok(());
        }
        self.coverage_program = Some(program.clone());
        let base = self.coverage_of(baseline)?;
        self.stats.coverage_measured = true;
        self.stats.branches_covered = base.branches();
        self.stats.branches_total = base.branches_total;
        self.coverage = Some(base);
        self.also_check_on("coverage", &program)
    }

    /// The program coverage is measured on.
    fn coverage_build(&self) -> &Path {
        self.coverage_program.as_deref().unwrap_or(&self.program)
    }

    /// Run each new alarm's test on `program` too, a build of the same program in the
    /// role `role` (`fuzzing`, `coverage`), and say in the alarm whether it reproduces
    /// there. The validation program itself, or a build given twice, is not run twice.
    fn also_check_on(&mut self, role: &str, program: &Path) -> Result<()> {
        let program = std::fs::canonicalize(program)
            .with_context(|| format!("{role} build {}", program.display()))?;
        if program != self.program && !self.other_builds.iter().any(|(_, p)| *p == program) {
            self.other_builds.push((role.to_owned(), program));
        }
        Ok(())
    }

    /// Where a unit's system test came from, in words.
    pub(super) fn origin_of(&self, unit: &Unit) -> (String, Option<String>) {
        match self.seeds.iter().find(|(_, t)| *t == unit.system_test) {
            Some((name, _)) => (name.clone(), None),
            None if self.seeds.is_empty() => (unit.provenance.test.clone(), None),
            None => ("(a seed)".into(), Some(unit.provenance.test.clone())),
        }
    }

    /// Stop lifting (what is left stays on disk, counted as not lifted) at `deadline`.
    pub fn set_deadline(&mut self, deadline: Option<Instant>) {
        self.deadline = deadline;
    }

    /// The edges of the units' program that system-level runs have reached
    /// (`covered[i]`: edge `i`). With it, a queue entry is lifted only if it reaches an
    /// edge outside that set, those reaching more such edges first.
    pub fn set_system_edges(&mut self, covered: Option<Vec<bool>>) {
        self.system_edges = covered;
    }

    /// Stop a lifted test's run after `wall` (and its CPU time a little before)
    /// instead of the sandbox's limit. A campaign passes its hang limit: a lifted test
    /// that runs on past it crashes no sooner for the wait, and on dc such tests (unit
    /// findings of the evaluator that loop at system level) took 19 runs to the 10 s
    /// limit, most of a 181 s lifting phase. System crashes being confirmed and
    /// reduced keep the sandbox's limit.
    fn set_lifted_limit(&mut self, wall: Duration) {
        let mut sandbox = self.sandbox.clone();
        sandbox.limits.wall = wall;
        sandbox.limits.cpu_secs = trestle_exec::sandbox::cpu_limit(wall);
        self.lifted_sandbox = Some(sandbox);
    }

    /// Confirm hangs with `cpu` of CPU time (whole seconds, at least one), instead of
    /// the sandbox's limits: each confirmation and each step of a hang's reduction
    /// that still hangs runs that long. The wall-clock limit is three times that and a
    /// second: on a loaded machine a spinning program must still reach its CPU limit
    /// first, which leaves the stack of where it spins (a wall-clock kill leaves none).
    fn set_hang_limit(&mut self, cpu: Duration) {
        let mut sandbox = self.sandbox.clone();
        sandbox.limits.cpu_secs = cpu.as_secs_f64().ceil().max(1.0) as u64;
        sandbox.limits.wall = Duration::from_secs(3 * sandbox.limits.cpu_secs + 1);
        self.hang_sandbox = Some(sandbox);
    }

    /// The effective lifted tests found since the last call (a campaign hands them to
    /// its system-level fuzzer).
    pub fn take_effective(&mut self) -> Vec<SystemTest> {
        std::mem::take(&mut self.effective_tests)
    }

    /// Whether "effective" is measured (the validation program is a coverage build).
    pub fn measures_coverage(&self) -> bool {
        self.coverage.is_some()
    }

    /// What `tests` cover together, run on the coverage build (one llvm-cov call).
    fn coverage_of(&self, tests: &[SystemTest]) -> Result<CoverageSet> {
        let dir = tempfile::tempdir()?;
        let mut profiles = Vec::new();
        let program = self.coverage_build();
        let filter = FrameFilter::of(program);
        for (i, t) in tests.iter().enumerate() {
            let p = dir.path().join(format!("{i}.profraw"));
            self.sandbox.run(program, t, &[], &filter, Some(&p))?;
            if p.exists() {
                profiles.push(p);
            }
        }
        measure(program, &profiles)
    }

    /// Run `tests` (system tests the campaign made) on the coverage build, so that
    /// what they cover no longer counts as new for lifted tests and no longer draws
    /// the campaign to the functions it is in.
    pub fn observe(&mut self, tests: &[SystemTest]) -> Result<()> {
        if self.coverage.is_none() || tests.is_empty() {
            return Ok(());
        }
        let set = self.coverage_of(tests)?;
        let cov = self.coverage.as_mut().expect("checked above");
        cov.extend(&set);
        self.stats.branches_covered = cov.branches();
        Ok(())
    }

    /// What is not covered so far, by file: a line per line not run and per branch
    /// direction not taken ([`crate::system::coverage::CoverageSet::uncovered`]);
    /// `None` without coverage.
    pub fn uncovered(&self) -> Option<BTreeMap<String, Vec<u32>>> {
        self.coverage.as_ref().map(|c| c.uncovered())
    }

    /// The alarms so far.
    pub fn alarms(&self) -> Vec<AlarmEntry> {
        self.store.alarms().cloned().collect()
    }

    /// Run a lifted test: how it ended, and the coverage items it added (`None`
    /// without a coverage build).
    pub(super) fn run_system(&mut self, test: &SystemTest) -> Result<(SandboxRun, Option<usize>)> {
        let sandbox = self.lifted_sandbox.as_ref().unwrap_or(&self.sandbox);
        if self.coverage.is_none() {
            return Ok((
                sandbox.run(&self.program, test, &[], &self.filter, None)?,
                None,
            ));
        }
        let dir = tempfile::tempdir()?;
        let prof = dir.path().join("run.profraw");
        let run = match &self.coverage_program {
            None => sandbox.run(&self.program, test, &[], &self.filter, Some(&prof))?,
            Some(cov) => {
                // The validation program decides whether it crashes; only a test that
                // does not is run again for its coverage.
                let run = sandbox.run(&self.program, test, &[], &self.filter, None)?;
                if run.crash.is_some() {
                    return Ok((run, Some(0)));
                }
                let filter = FrameFilter::of(cov);
                sandbox.run(cov, test, &[], &filter, Some(&prof))?;
                run
            }
        };
        if !prof.exists() {
            return Ok((run, Some(0)));
        }
        let set = measure(self.coverage_build(), &[prof])?;
        let cov = self.coverage.as_mut().expect("checked above");
        let new = cov.new_in(&set);
        cov.extend(&set);
        self.stats.branches_covered = cov.branches();
        Ok((run, Some(new)))
    }

    /// Write `alarms.json` and `lift.json` (atomically: a reader never sees half).
    pub fn write_index(&self) -> Result<()> {
        self.store.write_index(&self.stats)
    }
}

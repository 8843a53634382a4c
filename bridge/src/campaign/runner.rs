//! One campaign session: the rounds of system fuzzing, carving, unit fuzzing and
//! lifting, with the campaign's state saved after each step.

use super::pick::Pick;
use super::program::Program;
use super::status::{Live, Status, STOP};
use super::{Campaign, FuzzedUnit, Settings};
use crate::carve;
use crate::carve::units::{read_unit, UnitIndex, UNIT_INDEX};
use crate::lift::{LiftConfig, Lifter, Origin};
use crate::record;
use crate::roadblocks::{roadblocks, Roadblock};
use anyhow::{bail, Context as _, Result};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use trestle_exec::binary::Binary;
use trestle_exec::files;
use trestle_exec::sandbox::{cpu_limit, Limits, Sandbox};
use trestle_exec::systest::{load_test, load_tests, NamedTest};
use trestle_sysfuzz::lean::SystemBuild;
use trestle_sysfuzz::{LiftedOrigin, SysFuzzConfig, SysFuzzer};

/// The phases `phase_seconds` counts.
pub(super) const PHASE_SYSTEM: &str = "system fuzzing";
/// Confirming the system fuzzer's crashes and hangs.
pub(super) const PHASE_SYSTEM_CRASHES: &str = "system crashes (validating)";
pub(super) const PHASE_WORKERS: &str = "workers";
pub(super) const PHASE_RECORD: &str = "recording";
pub(super) const PHASE_CARVE: &str = "carving";
pub(super) const PHASE_COVERAGE: &str = "coverage of new system tests";
pub(super) const PHASE_UNIT: &str = "unit fuzzing";
pub(super) const PHASE_LIFT: &str = "lifting";

/// The share of a campaign's time that confirming hangs may take.
pub(crate) const HANG_SHARE: f64 = 0.05;

/// Seconds of hang confirmation a campaign may take beyond [`HANG_SHARE`].
const HANG_ALLOWANCE: f64 = 10.0;

/// New queue entries recorded and carved in a round after the first. A round fuzzes
/// one unit: a sed campaign that recorded 40 a round carved 260,807 units (5.9 GB) to
/// fuzz 14, and recording, carving and measuring them took 123 s of its 600.
const RECORD_PER_ROUND: usize = 16;

/// Roadblocks a round records a queue entry for (those never recorded for first, the
/// best first). Recording an entry for the few functions at a roadblock is cheap (on
/// dc, 0.3 s for all rounds of a 150 s campaign); with four a round, a campaign
/// recorded the same few top-scored roadblocks again and again while dc's had 58,
/// most with a score alike, and the one whose comparison a parameter decides
/// (`dc_array_get`'s cache index) never came up.
const ROADBLOCKS_PER_ROUND: usize = 16;

/// How long a roadblock slice goes on once its unit took the missing direction. Ended
/// at the flip, a sed `str_append_modified` unit flipped `ascii_only`'s branch in 8 ms
/// and its slice was over; fuzzed on, the same unit crashed on a replacement longer
/// than a case-conversion block (a planted bug) within a tenth of a second.
const AFTER_FLIP: Duration = Duration::from_secs(3);

/// System queue entries, newest first, a unit's stream parameters may start from: run
/// once each when its slice begins (a dc queue entry runs in a millisecond).
const QUEUE_SEEDS: usize = 256;

/// How long, as a share of the time it took to find the system fuzzer's last new
/// edge, it must find none for the first unit round to begin
/// ([`Runner::system_stalled`]).
const STALL_SHARE: f64 = 0.2;

/// The longest the first unit round waits for the system fuzzer to stall, in campaign
/// time: a quarter of the budget, but in a campaign of a day that would leave the
/// roadblocks of its first six hours to the system fuzzer alone.
const MAX_FIRST_WAIT: Duration = Duration::from_secs(600);

/// What reducing the alarms may take, at least, once the fuzzing budget is spent.
const REDUCTION_TIME: Duration = Duration::from_secs(120);

/// How often a long system slice gives the memory it freed back to the system.
const TRIM_EVERY: Duration = Duration::from_secs(30);

pub(super) struct Runner {
    pub(super) out: PathBuf,
    pub(super) c: Campaign,
    /// The index of each of `c.unit_dirs`, in the same order.
    pub(super) unit_indexes: Vec<UnitIndex>,
    /// What the campaign knows of the program, read once.
    pub(super) program: Program,
    pub(super) sys: SysFuzzer,
    pub(super) lifter: Option<Lifter>,
    pub(super) live: Live,
    /// The campaign's time.
    pub(super) clock: Clock,
    /// This session's executions and the time they took, by side.
    pub(super) pace: Pace,
    /// The cluster's main node, with `--listen` ([`super::nodes`]).
    pub(super) cluster: Option<super::nodes::MainNode>,
    /// Seconds the last unit round (carving, fuzzing, lifting) took.
    pub(super) last_unit_round: Option<f64>,
    /// The campaign's time when the system fuzzer last found a new edge (this
    /// session's start after a resume).
    pub(super) last_new_edge: f64,
    /// Whether hangs may be confirmed yet ([`Runner::system_hangs`]).
    pub(super) hangs_open: bool,
}

/// A campaign's time: seconds of all its sessions, stopped once fuzzing ended.
pub(super) struct Clock {
    /// When this session started.
    started: Instant,
    /// Seconds of the sessions before.
    before: f64,
    /// The campaign's time when fuzzing ended (what follows, reducing the alarms, is
    /// not part of the budget).
    ended: Option<f64>,
}

impl Clock {
    /// The clock of a session that starts now, `before` seconds into the campaign.
    fn starting_at(before: f64) -> Clock {
        Clock {
            started: Instant::now(),
            before,
            ended: None,
        }
    }

    /// The campaign's seconds now.
    fn now(&self) -> f64 {
        self.ended
            .unwrap_or_else(|| self.before + self.started.elapsed().as_secs_f64())
    }

    /// Stop the clock: fuzzing is over.
    fn stop(&mut self) {
        self.ended = Some(self.now());
    }
}

/// A session's executions, and the seconds they took, on each side.
#[derive(Default)]
pub(super) struct Pace {
    system_execs: u64,
    system_secs: f64,
    unit_execs: u64,
    unit_secs: f64,
}

impl Pace {
    /// System and unit executions per second.
    fn rates(&self) -> (f64, f64) {
        (
            self.system_execs as f64 / self.system_secs.max(1e-3),
            self.unit_execs as f64 / self.unit_secs.max(1e-3),
        )
    }
}

impl Runner {
    /// The campaign's time: seconds of all its sessions, stopped once fuzzing ended.
    fn clock(&self) -> f64 {
        self.clock.now()
    }

    pub(super) fn save(&mut self) -> Result<()> {
        self.c.elapsed = self.clock();
        let (entries, from_lifted) = self.sys.lineage_counts();
        self.c.lineage = super::QueueLineage {
            entries,
            from_lifted,
        };
        files::write(&self.out.join(files::CAMPAIGN), &self.c)
    }

    /// Add the time since `since` to `phase`'s total (campaign.json's `phase_seconds`).
    pub(super) fn spent(&mut self, phase: &str, since: Instant) {
        *self.c.phase_seconds.entry(phase.to_owned()).or_default() += since.elapsed().as_secs_f64();
    }

    pub(super) fn remaining(&self) -> f64 {
        self.c.settings.budget.as_secs_f64() - self.clock()
    }

    /// The campaign time until which the system fuzzer has it to itself, unless it
    /// stalls first ([`MAX_FIRST_WAIT`]), seconds.
    fn first_wait(&self) -> f64 {
        (self.c.settings.budget / 4)
            .min(MAX_FIRST_WAIT)
            .as_secs_f64()
    }

    pub(super) fn sample(&mut self) -> Result<()> {
        self.c.elapsed = self.clock();
        let (candidates, alarms) = self.findings();
        let line = format!(
            "{:.1},{},{},{},{},{},{},{}\n",
            self.c.elapsed,
            self.c.system_executions,
            self.c.unit_executions,
            self.sys.edges(),
            self.c.units_carved,
            self.c.fuzzed.len(),
            candidates,
            alarms
        );
        let path = self.out.join("timeline.csv");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&path)?;
        f.write_all(line.as_bytes())?;
        Ok(())
    }

    pub(super) fn findings(&self) -> (usize, usize) {
        match &self.lifter {
            Some(l) => (l.stats.unit_crashes, l.alarms().len()),
            None => (0, 0),
        }
    }

    pub(super) fn status(&mut self, phase: &str) {
        super::status::fault_point(phase);
        self.c.elapsed = self.clock();
        let (candidates, alarms) = self.findings();
        let (fps, eff) = self
            .lifter
            .as_ref()
            .map_or((0, 0), |l| (l.stats.false_positives, l.stats.effective));
        let (sys_rate, unit_rate) = self.pace.rates();
        let s = Status {
            c: &self.c,
            elapsed: self.c.elapsed,
            edges: self.sys.edges(),
            phase: phase.to_owned(),
            alarms,
            candidates,
            false_positives: fps,
            effective: eff,
            sys_rate,
            unit_rate,
        };
        self.live.show(&s);
    }

    /// System fuzzing for `d`, in short chunks so the status stays live.
    pub(super) fn system_slice(&mut self, d: Duration) -> Result<()> {
        let end = Instant::now() + d;
        let mut trimmed = Instant::now();
        while Instant::now() < end && !STOP.load(Ordering::SeqCst) && self.remaining() > 0.0 {
            let chunk = (end - Instant::now())
                .min(Duration::from_secs(2))
                .min(Duration::from_secs_f64(self.remaining().max(0.1)));
            let (t, edges) = (Instant::now(), self.sys.edges());
            let rep = self.sys.fuzz_for(chunk)?;
            if self.sys.edges() > edges {
                self.last_new_edge = self.clock();
            }
            self.pace.system_secs += t.elapsed().as_secs_f64();
            self.spent(PHASE_SYSTEM, t);
            self.pace.system_execs += rep.executions;
            self.c.system_executions += rep.executions;
            self.c.main_finds += (rep.new_queue.len() + rep.new_crashes.len()) as u64;
            let t = Instant::now();
            for crash in &rep.new_crashes {
                self.system_crash(crash, None)?;
            }
            self.c
                .hangs
                .pending
                .extend(rep.new_timeouts.iter().cloned());
            self.system_hangs()?;
            self.spent(PHASE_SYSTEM_CRASHES, t);
            let t = Instant::now();
            self.share_queue(&rep.new_queue)?;
            self.serve_workers()?;
            self.spent(PHASE_WORKERS, t);
            // A slice lasts minutes where units find nothing, and validating a crash
            // or hang (a sandboxed run, its stack symbolized) leaves megabytes freed
            // but resident: on sed 42 MB of a 121 MB campaign, given back by one trim.
            let validated = !rep.new_crashes.is_empty() || !rep.new_timeouts.is_empty();
            if validated || trimmed.elapsed() >= TRIM_EVERY {
                crate::memory::give_back_free_memory();
                trimmed = Instant::now();
            }
            self.status("system fuzzing");
            self.sample()?;
        }
        self.save()
    }

    /// Confirm a crash of a system fuzzer: this node's, or the worker `node`'s.
    pub(super) fn system_crash(&mut self, path: &Path, node: Option<String>) -> Result<()> {
        let Some(lifter) = self.lifter.as_mut() else {
            return Ok(());
        };
        let test = load_test(path)?;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let origin = Origin {
            node,
            descent: self.sys.descent_of(path),
            ..Origin::default()
        };
        lifter.system_crash(&test, &name, path, &origin)?;
        self.c.system_crashes += 1;
        Ok(())
    }

    /// Confirm the hangs the system fuzzer kept, oldest first, while that has taken
    /// at most [`HANG_SHARE`] of the campaign's time (and a first [`HANG_ALLOWANCE`]):
    /// each runs to the hang limit, and a program that hangs on many inputs must not
    /// stop the fuzzers (mawk's campaigns kept 57 and 88). What is left waits in
    /// `campaign.json` for time.
    ///
    /// Not before the system fuzzer first stalls, or a quarter of the budget is spent
    /// (as the first unit round waits): its first seconds are its most productive, and
    /// confirming one hang takes several runs at the hang limit (a sed regex hang
    /// kept in the first second of a benchmark run took 20 s, and the run made 1,213
    /// executions in its first 27).
    pub(super) fn system_hangs(&mut self) -> Result<()> {
        if !self.hangs_open {
            self.hangs_open = self.system_stalled() || self.clock() >= self.first_wait();
            if !self.hangs_open {
                return Ok(());
            }
        }
        while !self.c.hangs.pending.is_empty()
            && self.c.hangs.seconds <= HANG_SHARE * self.clock() + HANG_ALLOWANCE
        {
            let Some(lifter) = self.lifter.as_mut() else {
                return Ok(());
            };
            let path = self.c.hangs.pending.remove(0);
            let t = Instant::now();
            let test = load_test(&path)?;
            let name = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let origin = Origin {
                descent: self.sys.descent_of(&path),
                ..Origin::default()
            };
            lifter.confirm_hang(&test, &name, &path, &origin)?;
            self.c.hangs.validated += 1;
            self.c.hangs.seconds += t.elapsed().as_secs_f64();
        }
        Ok(())
    }

    /// Whether the system fuzzer is stuck: no new edge for a fifth of the time it took
    /// to find the last one, and for a system slice at least. Until it first is, the
    /// bridge fuzzes as `--system-only` does: units are carved where it is stuck, and
    /// bugs it finds in its first minute must not wait for unit rounds.
    pub(super) fn system_stalled(&self) -> bool {
        let quiet = self.clock() - self.last_new_edge;
        quiet
            >= self
                .c
                .settings
                .system_slice
                .as_secs_f64()
                .max(STALL_SHARE * self.last_new_edge)
    }

    /// Record and carve what the next unit round needs: for the best roadblocks not
    /// recorded for yet, the queue entry that reaches each, for the functions at it
    /// only ([`Runner::carve_at_roadblocks`]); with --changed-since or --focus, the
    /// seeds (in the first round) and then the newest queue entries, for the changed
    /// or focused functions only. Every function of every entry is not carved: on sed
    /// that took 37 s of a 300 s campaign for 18,598 units of which two were fuzzed. The entries' coverage
    /// of the validation build is measured either way (what makes a lifted test
    /// effective).
    pub(super) fn carve_new(&mut self) -> Result<()> {
        if self.c.rounds > 0 {
            self.carve_at_roadblocks()?;
        }
        let queue = self.out.join("system").join("queue");
        let fresh: Vec<PathBuf> = std::fs::read_dir(&queue)
            .with_context(|| format!("cannot list {}", queue.display()))?
            .map(|e| e.map(|e| e.path()))
            .collect::<std::io::Result<Vec<_>>>()
            .with_context(|| format!("cannot list {}", queue.display()))?
            .into_iter()
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .filter(|p| {
                !self.c.recorded.contains(
                    &p.file_name()
                        .unwrap_or_default()
                        .to_string_lossy()
                        .into_owned(),
                )
            })
            .collect();
        let fresh = to_record(fresh, self.c.schedule.units.rounds == 0);
        if fresh.is_empty() {
            return Ok(());
        }
        let tests = fresh
            .iter()
            .map(|p| {
                load_test(p).map(|t| {
                    (
                        p.file_name()
                            .unwrap_or_default()
                            .to_string_lossy()
                            .into_owned(),
                        t,
                    )
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let changed: Vec<u64> = self
            .program
            .binary
            .functions
            .values()
            .filter(|f| {
                self.c
                    .settings
                    .changed
                    .iter()
                    .chain(&self.c.settings.focus)
                    .any(|c| *c == f.name || *c == f.display_name())
            })
            .map(|f| f.id)
            .collect();
        if !changed.is_empty() {
            self.record_and_carve(&tests, &changed, &Default::default())?;
        }
        if self.lifter.as_ref().is_some_and(|l| l.measures_coverage()) {
            self.status("measuring coverage");
        }
        let t = Instant::now();
        if let Some(lifter) = self.lifter.as_mut().filter(|l| l.measures_coverage()) {
            let tests: Vec<_> = tests.iter().map(|(_, t)| t.clone()).collect();
            lifter.observe(&tests)?;
        }
        self.spent(PHASE_COVERAGE, t);
        for (name, _) in &tests {
            self.c.recorded.insert(name.clone());
        }
        self.save()
    }

    /// Units where the system fuzzer is stuck: for each of the best
    /// [`ROADBLOCKS_PER_ROUND`] roadblocks not recorded for yet, the queue entry the
    /// scheduler rates best among those taking its reached direction, recorded for
    /// the function holding it and its callers one and two calls up only (a sed
    /// entry recorded for every function carved thousands of units of which a round
    /// fuzzes one).
    fn carve_at_roadblocks(&mut self) -> Result<()> {
        let mut tests: Vec<(String, trestle_abi::unit::SystemTest)> = Vec::new();
        let mut only: std::collections::BTreeSet<u64> = std::collections::BTreeSet::new();
        // Each recording's branch's edges, both directions: a call that evaluated the
        // branch it was chosen for. An entry chosen for two roadblocks is recorded once
        // for each, under a name of its own: with the edges of both in one recording,
        // dc's `dc_func` units carved for `dc_numlen`'s branch were probed at
        // `dc_register_pop`'s, failed there ("does not reach"), and the failures left
        // that roadblock, the one with a bug behind it, to the system fuzzer.
        let mut reach: std::collections::HashMap<String, Vec<u32>> =
            std::collections::HashMap::new();
        // Those never recorded for first, then by the promise the pick sees.
        let recorded_for = |rb: &Roadblock| {
            let prefix = format!("{}@", rb.key(&self.program.branches));
            self.c
                .roadblocks
                .recorded
                .iter()
                .any(|m| m.starts_with(&prefix))
        };
        let mut order: Vec<(bool, f64, Roadblock)> = self
            .current_roadblocks()
            .into_iter()
            .map(|rb| (recorded_for(&rb), self.promise(&rb), rb))
            .collect();
        order.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.total_cmp(&a.1)));
        let order: Vec<Roadblock> = order.into_iter().map(|(_, _, rb)| rb).collect();
        for rb in order {
            if tests.len() == ROADBLOCKS_PER_ROUND {
                break;
            }
            let key = rb.key(&self.program.branches);
            if self.c.roadblocks.left_to_system(&key) {
                continue;
            }
            let b = &self.program.branches.branches[rb.branch];
            let reached: Vec<u32> = b
                .directions
                .iter()
                .enumerate()
                .filter(|(k, _)| *k != rb.missing)
                .flat_map(|(_, d)| d.edges.iter().copied())
                .collect();
            let Some((name, test)) = self.sys.entry_reaching(&reached) else {
                continue;
            };
            let stem = format!(
                "{}~b{}.{}",
                name.trim_end_matches(".json"),
                rb.branch,
                rb.missing
            );
            let name = format!("{stem}.json");
            let mark = format!("{key}@{name}");
            if !self.c.roadblocks.recorded.insert(mark) {
                continue; // recorded for this roadblock already, from this very entry
            }
            reach.insert(
                stem,
                b.directions
                    .iter()
                    .flat_map(|d| d.edges.iter().copied())
                    .collect(),
            );
            // The source function and the one whose code holds the branch (they
            // differ where it was inlined), and their callers two calls up.
            for f in [self.program.branch_functions[rb.branch], b.function] {
                only.insert(f);
                for caller in self.program.callers.get(&f).into_iter().flatten() {
                    only.insert(*caller);
                    only.extend(
                        self.program
                            .callers
                            .get(caller)
                            .into_iter()
                            .flatten()
                            .copied(),
                    );
                }
            }
            tests.push((name, test));
        }
        if tests.is_empty() {
            return Ok(());
        }
        // `main` stays among them when it is a caller: its unit is the whole run, its
        // arguments and stdin the parameters, fuzzed in process several times as fast
        // as the system fuzzer runs the program.
        if only.is_empty() {
            return Ok(());
        }
        self.record_and_carve(&tests, &only.into_iter().collect::<Vec<_>>(), &reach)?;
        self.save()
    }

    /// Record `tests` (for the functions `only`, all when empty) into a batch of its
    /// own and carve it; the units join the campaign's.
    /// With `reach` (by test, the edges of the roadblock it is recorded for), only the
    /// invocations that reach them are carved.
    fn record_and_carve(
        &mut self,
        tests: &[(String, trestle_abi::unit::SystemTest)],
        only: &[u64],
        reach: &std::collections::HashMap<String, Vec<u32>>,
    ) -> Result<()> {
        self.status(&format!(
            "recording {} system test(s){}",
            tests.len(),
            if only.is_empty() {
                ""
            } else {
                " at roadblocks"
            }
        ));
        let round = self.c.unit_dirs.len();
        let batch = self.out.join("traces").join(format!("batch-{round:04}"));
        let tests_dir = batch.join("tests");
        trestle_exec::files::remove_dir_if_present(&batch)?;
        std::fs::create_dir_all(&tests_dir)?;
        // The batch's tests are kept, to record again on resume; recording takes
        // them as they are here.
        // In the order (and, a name given twice, the last) of loading them back.
        let mut named = std::collections::BTreeMap::new();
        for (name, t) in tests {
            let path = tests_dir.join(name);
            trestle_exec::systest::save_test(t, &path)?;
            let stem = Path::new(name).file_stem().unwrap_or_default();
            let test = trestle_exec::systest::NamedTest {
                name: stem.to_string_lossy().into_owned(),
                path: path.clone(),
                test: t.clone(),
            };
            named.insert(path, test);
        }
        let named: Vec<_> = named.into_values().collect();
        let traces = batch.join("traces");
        let t = Instant::now();
        let plan = record::Plan {
            // Within what is left of the budget.
            timeout: (self.c.settings.timeout * 5)
                .min(Duration::from_secs_f64(self.remaining().max(1.0))),
            // At a roadblock, few functions are recorded, and the call that reaches
            // the branch may come late in the run.
            max_per_fn: if only.is_empty() { 5 } else { 20 },
            only: only.to_vec(),
            reach: Vec::new(),
            reach_by_test: reach.clone(),
            // The traces live until carving has read them: together at most half of
            // what the disk budget has left (a megabyte per test at least).
            max_trace_bytes: Some(
                (self.c.settings.max_disk.saturating_sub(self.c.disk.bytes)
                    / 2
                    / tests.len().max(1) as u64)
                    .max(1 << 20),
            ),
            progress: false,
        };
        let recorded = record::record(&self.program.binary, &named, &plan, &traces)?;
        self.spent(PHASE_RECORD, t);
        // The campaign's peak on disk counts the traces too, though they go soon.
        let traces_bytes = super::disk::dir_bytes(&traces);
        self.c.disk.peak = self.c.disk.peak.max(self.c.disk.bytes + traces_bytes);
        let units = self.out.join("units").join(format!("batch-{round:04}"));
        trestle_exec::files::remove_dir_if_present(&units)?;
        self.status("carving");
        let t = Instant::now();
        let summary = carve::carve(&self.program.binary, &traces, &recorded, &units)
            .with_context(|| format!("carving batch {round} into {}", units.display()))?;
        // The traces served only this carving: gigabytes on a program like sed (a 10
        // minute campaign recorded 2.6 GB), which a long campaign must not pile up.
        // The batch's tests stay, to record again.
        trestle_exec::files::remove_dir_if_present(&traces)?;
        // Carving held the traces' memory (hundreds of MB on sed) and freed it; give
        // it back to the system, or the campaign's resident size stays at its peak
        // for the rest of a day.
        crate::memory::give_back_free_memory();
        self.spent(PHASE_CARVE, t);
        let index = summary.index;
        if summary.bad_traces > 0 {
            // Nothing carved from the seeds is no campaign: the program and this
            // trestle disagree (another trestle's runtime, say). Later batches keep
            // the units of their readable traces.
            if round == 0 && index.units.is_empty() {
                bail!("carving the seeds failed ({} unreadable trace file(s)), so the bridge would have no unit to fuzz", summary.bad_traces);
            }
            log::info!(
                "trestle run: carving batch {round}: {} trace file(s) could not be read",
                summary.bad_traces
            );
        }
        self.c.units_carved += index.units.len();
        self.c.units_parameterized += index.units.iter().filter(|u| u.params > 0).count();
        self.share_units(&units, &index)?;
        self.c.unit_dirs.push(units);
        self.unit_indexes.push(index);
        Ok(())
    }

    /// The roadblocks in the program's own code now, best first.
    pub(super) fn current_roadblocks(&self) -> Vec<Roadblock> {
        if self.program.branches.branches.is_empty() {
            return Vec::new();
        }
        let covered = self.sys.covered_edges();
        // A unit of `main` is the whole program run again: its roadblocks are the
        // system fuzzer's own work.
        let main = self
            .program
            .binary
            .functions
            .values()
            .find(|f| f.name == "main")
            .map(|f| f.id);
        roadblocks(&self.program.branches, &covered, |_| 1.0)
            .into_iter()
            .filter(|r| {
                let f = self.program.branch_functions[r.branch];
                self.program.weights.get(&f).copied().unwrap_or(1.0) >= 1.0 && Some(f) != main
            })
            .collect()
    }

    /// `roadblocks.json`: the best roadblocks now, for the user and the report.
    fn write_roadblocks(&self, found: &[Roadblock]) -> Result<()> {
        let rows: Vec<serde_json::Value> = found
            .iter()
            .take(100)
            .map(|r| {
                let b = &self.program.branches.branches[r.branch];
                let key = r.key(&self.program.branches);
                serde_json::json!({
                    "file": b.file,
                    "line": b.line,
                    "function": self.program.binary.function_name(self.program.branch_functions[r.branch]),
                    "direction": r.missing,
                    "case": b.directions[r.missing].case,
                    "behind": b.directions[r.missing].behind,
                    "score": r.score,
                    "operands": match b.cmp.map(|id| self.sys.operands_vary(id)) {
                        None => "no comparison",
                        Some(None) => "not logged yet",
                        Some(Some(true)) => "vary",
                        Some(Some(false)) => "constant",
                    },
                    "attempts": self.c.roadblocks.attempts.iter().filter(|a| a.key == key).count(),
                })
            })
            .collect();
        files::write(
            &self.out.join(files::ROADBLOCKS),
            &serde_json::json!({ "roadblocks": rows }),
        )
    }

    pub(super) fn unit_round(&mut self) -> Result<bool> {
        let found = self.current_roadblocks();
        self.c.roadblocks.seen = found.len();
        self.write_roadblocks(&found)?;
        let Some(Pick {
            path: unit_path,
            function,
            reason,
            value_hashes,
            param_kinds,
            roadblock,
        }) = self.pick(&found)
        else {
            return Ok(false);
        };
        let unit = read_unit(&unit_path)?;
        let k = self
            .c
            .fuzzed
            .iter()
            .filter(|f| f.function == function)
            .count();
        let dir = self
            .out
            .join("fuzz")
            .join(format!("{}-{k}", crate::carve::units::safe_name(&function)));
        trestle_exec::files::remove_dir_if_present(&dir)?;
        let slice = self
            .c
            .settings
            .unit_slice
            .min(Duration::from_secs_f64(self.remaining().max(1.0)));
        let mut cfg = crate::fuzz::unit_fuzz_config(
            &self.program.binary,
            unit,
            dir.clone(),
            slice,
            self.sys.run_limit(),
            self.c.settings.timeout,
            self.c
                .settings
                .seed
                .wrapping_add(self.c.fuzzed.len() as u64),
            self.c.settings.cores,
        );
        // A stream parameter starts from what the system fuzzer found too.
        cfg.seeds =
            crate::fuzz::stream_seeds(&cfg.unit, || self.sys.queue_tests(QUEUE_SEEDS), QUEUE_SEEDS);
        self.c.fuzzed.push(FuzzedUnit {
            unit: unit_path.clone(),
            function: function.clone(),
            dir: dir.clone(),
            executions: 0,
            crashes: 0,
            lifted: false,
            new_alarms: 0,
            effective: 0,
            error: None,
            reason,
            value_hashes,
            param_kinds,
            node: None,
            started_from: cfg.seeds.len(),
            corpus_evicted: false,
        });
        let mut phase = format!("unit fuzzing {function}");
        if let Some(rb) = &roadblock {
            // The slice ends a little after the unit takes the missing direction
            // ([`AFTER_FLIP`]: a crash a few mutations behind the branch), or at its
            // end: a gate (a digest, a checksum) shows no progress on the way, so no
            // plateau ends it before.
            cfg.goal = self.program.branches.branches[rb.branch].directions[rb.missing]
                .edges
                .clone();
            cfg.goal_cmp = self.program.branches.branches[rb.branch].cmp;
            cfg.after_goal = AFTER_FLIP;
            cfg.plateau = None;
            let b = &self.program.branches.branches[rb.branch];
            let location = format!(
                "{}:{}",
                b.file.as_deref().map(short_path).unwrap_or("?"),
                b.line
            );
            phase = format!("unit fuzzing {function} at the roadblock {location}");
            self.c.roadblocks.attempts.push(super::RoadblockAttempt {
                key: rb.key(&self.program.branches),
                location,
                function: self
                    .program
                    .binary
                    .function_name(self.program.branch_functions[rb.branch]),
                behind: b.directions[rb.missing].behind,
                fuzzed: self.c.fuzzed.len() - 1,
                at: self.clock(),
                flipped_at: None,
                solved_at: None,
            });
        }
        self.save()?;
        let in_process = self.c.settings.in_process;
        let t = Instant::now();
        // Workers are answered meanwhile; what they found waits for the next step.
        let mut polled = Ok(());
        let result = std::thread::scope(|scope| {
            let h = scope.spawn(|| {
                if in_process {
                    trestle_unit_fuzz::fuzz_in_process(&cfg)
                } else {
                    trestle_unit_fuzz::fuzz(&cfg)
                }
            });
            while !h.is_finished() {
                std::thread::sleep(Duration::from_millis(500));
                self.status(&phase);
                if polled.is_ok() {
                    polled = self.poll_workers();
                }
            }
            h.join()
        });
        let spent = t.elapsed().as_secs_f64();
        self.spent(PHASE_UNIT, t);
        let last = self.c.fuzzed.last_mut().expect("pushed above");
        match result {
            Ok(Ok(rep)) => {
                if let (Some(after), Some(_)) = (rep.goal_after, &roadblock) {
                    if let Some(a) = self.c.roadblocks.attempts.last_mut() {
                        a.flipped_at = Some(a.at + after);
                    }
                }
                last.executions = rep.executions;
                last.crashes = rep.crashes.len();
                self.c.main_finds += rep.crashes.len() as u64;
                self.c.unit_executions += rep.executions;
                self.pace.unit_execs += rep.executions;
                self.pace.unit_secs += spent;
            }
            Ok(Err(e)) => last.error = Some(format!("{e:#}")),
            Err(_) => last.error = Some("the unit fuzzer panicked".into()),
        }
        polled?;
        self.save()?;
        // Its findings are lifted at once, with the unit as it was fuzzed.
        let fuzzed = self.c.fuzzed.len() - 1;
        let t = Instant::now();
        let lifted = self.lift_untimed(Some((fuzzed, &cfg.unit)));
        self.spent(PHASE_LIFT, t);
        lifted?;
        if let Some(rb) = roadblock {
            // Solved when the lifted tests made the system fuzzer take the direction, or
            // one of them crashed the program with the unit's crash (a crashing test
            // joins no queue, so its edges are not the system fuzzer's).
            let alarmed = self.c.fuzzed.last().is_some_and(|f| f.new_alarms > 0);
            if alarmed
                || self.program.branches.branches[rb.branch].directions[rb.missing]
                    .taken(&self.sys.covered_edges())
            {
                let now = self.clock();
                if let Some(a) = self.c.roadblocks.attempts.last_mut() {
                    a.solved_at = Some(now);
                }
                self.save()?;
            }
        }
        Ok(true)
    }

    /// Lift every fuzzed unit not lifted yet (after a resume, those a kill cut short).
    pub(super) fn lift_pending(&mut self) -> Result<()> {
        let t = Instant::now();
        let result = self.lift_untimed(None);
        self.spent(PHASE_LIFT, t);
        result
    }

    /// Lift every fuzzed unit not lifted yet; `fresh` is the one just fuzzed here (by
    /// its index in `fuzzed`), as it was fuzzed: the others' units are read from their
    /// fuzz directories.
    fn lift_untimed(&mut self, fresh: Option<(usize, &trestle_abi::unit::Unit)>) -> Result<()> {
        let Some(mut lifter) = self.lifter.take() else {
            return Ok(());
        };
        let pending: Vec<usize> = (0..self.c.fuzzed.len())
            .filter(|&i| !self.c.fuzzed[i].lifted)
            .collect();
        // Lifting gets a slice of its own: at most a minute, at least 5 s even when
        // the budget is spent (what is left stays in the fuzz directory, counted).
        let slice = self.remaining().clamp(5.0, 60.0);
        lifter.set_deadline(Some(Instant::now() + Duration::from_secs_f64(slice)));
        let mut result = Ok(());
        for i in pending {
            let f = self.c.fuzzed[i].clone();
            if f.dir.join("unit.unit").exists() {
                self.status(&format!("lifting {}", f.function));
                let before = lifter.alarms().len();
                let eff_before = lifter.stats.effective;
                // The system fuzzer runs the very build the units were carved from:
                // its edges and the units' are the same map.
                lifter.set_system_edges(Some(self.sys.covered_edges()));
                let roadblock = self
                    .c
                    .roadblocks
                    .attempts
                    .iter()
                    .find(|a| a.fuzzed == i)
                    .map(|a| a.location.clone());
                let origin = Origin {
                    node: f.node.clone(),
                    roadblock: roadblock.clone(),
                    ..Origin::default()
                };
                // What the lifted tests add to the queue descends from this unit.
                self.sys.set_origin(Some(LiftedOrigin {
                    unit: f.function.clone(),
                    roadblock,
                }));
                // Each lifted test runs on the fuzzing build first, through the
                // system fuzzer's forkserver; the validation build sees only what
                // crashes or hangs there.
                // The status goes on meanwhile (lifting 50 inputs of a slow program
                // takes half a minute), from a thread of its own.
                let progress = lifter.lift_progress();
                let (edges, clock) = (self.sys.edges(), self.clock());
                let (sys_rate, unit_rate) = self.pace.rates();
                let started = Instant::now();
                let finished = std::sync::atomic::AtomicBool::new(false);
                let (live, sys) = (&mut self.live, &mut self.sys);
                let view = Status {
                    c: &self.c,
                    elapsed: clock,
                    edges,
                    phase: String::new(),
                    alarms: lifter.alarms().len(),
                    candidates: lifter.stats.unit_crashes,
                    false_positives: lifter.stats.false_positives,
                    effective: lifter.stats.effective,
                    sys_rate,
                    unit_rate,
                };
                let lifted = std::thread::scope(|scope| {
                    scope.spawn(|| {
                        let mut view = view;
                        while !finished.load(Ordering::Relaxed) {
                            std::thread::sleep(Duration::from_millis(500));
                            let (done, total) = (
                                progress.done.load(Ordering::Relaxed),
                                progress.total.load(Ordering::Relaxed),
                            );
                            view.phase =
                                format!("lifting {}: {done} of {total} input(s)", f.function);
                            view.elapsed = clock + started.elapsed().as_secs_f64();
                            live.show(&view);
                        }
                    });
                    let lifted = match fresh.filter(|(k, _)| *k == i) {
                        Some((_, unit)) => {
                            lifter.lift_findings(unit, &f.dir, 50, &origin, Some(sys))
                        }
                        None => lifter.lift_dir(&f.dir, 50, &origin, Some(sys)),
                    };
                    finished.store(true, Ordering::Relaxed);
                    lifted
                });
                if let Err(e) = lifted {
                    // A unit the harness cannot set up again is that unit's problem,
                    // not the campaign's.
                    self.c.fuzzed[i].error = Some(format!("lifting: {e:#}"));
                }
                self.c.fuzzed[i].new_alarms = lifter.alarms().len() - before;
                self.c.fuzzed[i].effective = lifter.stats.effective - eff_before;
            }
            self.c.fuzzed[i].lifted = true;
            for t in lifter.take_effective() {
                if let Err(e) = self.sys.add_test(&t) {
                    result = Err(e);
                }
            }
            self.sys.set_origin(None);
            self.save()?;
        }
        self.lifter = Some(lifter);
        result
    }
}

impl Runner {
    /// The session's machinery for `campaign` in `out`: the system fuzzer (at full
    /// strength in both modes) and the lifter, which validates in both modes too: a
    /// system crash is reported only once the validation program confirms it.
    pub(super) fn new(
        out: PathBuf,
        mut campaign: Campaign,
        binary: Binary,
        live: Live,
    ) -> Result<Runner> {
        let s = &campaign.settings;
        let seeds: Vec<NamedTest> = load_tests(&s.seeds)?;
        let sys = system_fuzzer(s, &binary, &seeds, &out)?;
        campaign.system_build = match sys.build() {
            SystemBuild::Lean(p) => format!("lean: {}", p.display()),
            SystemBuild::Program(why) => {
                if !s.no_lean {
                    log::info!("trestle run: system fuzzing runs the program itself: {why}");
                }
                format!("program: {why}")
            }
        };
        let s = &campaign.settings;
        let lifter = lifter(s, &seeds, &out, campaign.elapsed)?;
        // A resumed campaign's unit directories, as carving left them.
        // Those evicted under --max-disk have no units left.
        let unit_indexes = campaign
            .unit_dirs
            .iter()
            .map(|d| {
                if campaign.disk.batches_evicted.contains(d) {
                    Ok(UnitIndex::default())
                } else {
                    files::read::<UnitIndex>(&d.join(UNIT_INDEX))
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let program = Program::new(binary, &campaign.settings);
        let elapsed_before = campaign.elapsed;
        Ok(Runner {
            out,
            unit_indexes,
            c: campaign,
            program,
            sys,
            lifter: Some(lifter),
            live,
            clock: Clock::starting_at(elapsed_before),
            pace: Pace::default(),
            cluster: None,
            last_unit_round: None,
            last_new_edge: elapsed_before,
            hangs_open: false,
        })
    }

    /// Rounds until the budget is spent or the user stops the campaign.
    pub(super) fn rounds(&mut self) -> Result<()> {
        let s = self.c.settings.clone();
        let system_slice = s.system_slice;
        while self.remaining() > 0.0 && !STOP.load(Ordering::SeqCst) {
            if self.cluster.as_ref().is_some_and(|m| m.delegate) {
                // The workers fuzz; this node takes what they find and carves it.
                self.wait_for_workers(system_slice)?;
                self.carve_new()?;
            } else if s.system_only {
                self.system_slice(Duration::from_secs_f64(self.remaining().max(0.0)))?;
            } else {
                // The first round lets the seeds be carved at once; the changed functions
                // and the seeds' units go first. Later the system fuzzer gets the time
                // the schedule gives it after the last unit round: most of it where
                // units find nothing, less where they solve what it cannot.
                // Until the system fuzzer first stalls, it keeps the time (the changed
                // functions' units, with --changed-since, go first at once).
                let waiting = self.c.schedule.units.rounds == 0
                    && self.c.settings.changed.is_empty()
                    && self.c.settings.focus.is_empty();
                let slice = match self.last_unit_round {
                    _ if waiting => system_slice / 4,
                    _ if self.c.rounds == 0 => system_slice / 4,
                    Some(unit_secs) => Duration::from_secs_f64(
                        self.c
                            .schedule
                            .system_slice(unit_secs, system_slice.as_secs_f64()),
                    ),
                    None => system_slice,
                };
                let (edges, alarms, t) = (self.sys.edges(), self.findings().1, Instant::now());
                self.system_slice(slice)?;
                let found = self.sys.edges().saturating_sub(edges) as f64;
                self.c.schedule.system_found(
                    found,
                    self.findings().1.saturating_sub(alarms) as f64,
                    t.elapsed().as_secs_f64(),
                );
                if STOP.load(Ordering::SeqCst) || self.remaining() <= 0.0 {
                    break;
                }
                // ... or at the latest once a quarter of the budget (10 minutes at most)
                // is spent: on sed the system fuzzer still found an edge every half
                // minute at 300 s, and units must get their floor somewhere.
                if waiting && !self.system_stalled() && self.clock() < self.first_wait() {
                    self.c.rounds += 1;
                    self.sample()?;
                    self.save()?;
                    continue;
                }
                // Carving pays only with time left to fuzz what it carves: near the
                // end, the system fuzzer keeps the rest of the budget.
                if self.remaining() > s.unit_slice.as_secs_f64().min(10.0) {
                    let (edges, alarms, t) = (self.sys.edges(), self.findings().1, Instant::now());
                    self.carve_new()?;
                    if self.remaining() > 1.0
                        && !STOP.load(Ordering::SeqCst)
                        && !self.unit_round()?
                    {
                        self.status("no unit to fuzz yet: system fuzzing");
                    }
                    let secs = t.elapsed().as_secs_f64();
                    let found = self.sys.edges().saturating_sub(edges) as f64;
                    self.c.schedule.units_found(
                        found,
                        self.findings().1.saturating_sub(alarms) as f64,
                        secs,
                    );
                    self.last_unit_round = Some(secs);
                }
            }
            self.keep_within_disk()?;
            // What a round allocates and frees (the system fuzzer's inputs and
            // metadata, lifting, the coverage of new entries) stays with the
            // allocator otherwise: on sed the resident size grew 5 MB a minute and
            // fell back by 30 MB whenever carving trimmed it.
            crate::memory::give_back_free_memory();
            self.c.rounds += 1;
            self.sample()?;
            self.save()?;
        }
        Ok(())
    }

    /// Reduce the alarms published unreduced while fuzzing, first found first: each
    /// for at most the lifter's reduce time (30 s), all of them within
    /// [`REDUCTION_TIME`] or a tenth of the budget, whichever is longer. What is left
    /// stays pending, said so. The campaign's clock stands still meanwhile.
    fn reduce_alarms(&mut self) -> Result<()> {
        let pending = self
            .lifter
            .as_ref()
            .map(|l| l.pending_reductions())
            .unwrap_or_default();
        if pending.is_empty() {
            return Ok(());
        }
        self.clock.stop();
        let t = Instant::now();
        let deadline = t + REDUCTION_TIME.max(self.c.settings.budget / 10);
        for (k, id) in pending.iter().enumerate() {
            if STOP.load(Ordering::SeqCst) {
                break; // Ctrl-C: the rest stay pending, said so below
            }
            self.status(&format!(
                "reducing alarm {} of {} ({id})",
                k + 1,
                pending.len()
            ));
            let Some(lifter) = self.lifter.as_mut() else {
                break;
            };
            match lifter.reduce_pending(id, deadline) {
                Ok(true) => {}
                Ok(false) => break, // out of time: the rest stay pending
                // The alarm stands with its test as found; the others get their turn.
                Err(e) => log::info!("trestle run: reducing alarm {id}: {e:#}"),
            }
        }
        self.c.reduction_seconds += t.elapsed().as_secs_f64();
        self.save()
    }

    /// Save the campaign's end and print what it found; returns the number of alarms.
    pub(super) fn finish(&mut self, interrupted: bool) -> Result<Vec<crate::lift::AlarmEntry>> {
        self.c.finished = !interrupted && self.remaining() <= 0.0;
        self.close_cluster(if interrupted {
            "the main node was interrupted"
        } else {
            "its time is up"
        })?;
        self.sample()?;
        self.save()?;
        if !interrupted {
            self.reduce_alarms()?;
        }
        self.status(if interrupted { "interrupted" } else { "done" });
        let out = &self.out;
        if interrupted {
            log::info!(
                "trestle run: interrupted; go on with `trestle run --resume {}`",
                out.display()
            );
        }
        let alarms = self.lifter.as_ref().map(|l| l.alarms()).unwrap_or_default();
        let pending = self
            .lifter
            .as_ref()
            .map_or(0, |l| l.pending_reductions().len());
        if pending > 0 {
            log::info!(
                "trestle run: {pending} alarm(s) not reduced yet (their reduced.json is the test as found){}",
                if interrupted { "; `trestle run --resume` reduces them when the campaign ends" } else { "" }
            );
        }
        log::info!(
            "trestle run: {:.0}s, {} system and {} unit executions, {} edges; {} alarm(s){}",
            self.c.elapsed,
            self.c.system_executions,
            self.c.unit_executions,
            self.sys.edges(),
            alarms.len(),
            if alarms.is_empty() { "" } else { ":" }
        );
        for a in &alarms {
            let caveat = if a.build_dependent() {
                format!(
                    " [build-dependent: not on the {} build]",
                    a.builds_without().join(", ")
                )
            } else {
                String::new()
            };
            log::info!(
                "  {}: {}{caveat}",
                out.join("alarms").join(&a.id).display(),
                a.signature
            );
        }
        let h = &self.c.hangs;
        if h.validated + h.pending.len() > 0 {
            log::info!(
                "hangs: {} kept by the system fuzzer, {} run on the validation program{}",
                h.validated + h.pending.len(),
                h.validated,
                if h.pending.is_empty() {
                    String::new()
                } else {
                    format!(
                        ", {} left for lack of time (in {})",
                        h.pending.len(),
                        out.join("system/timeouts").display()
                    )
                }
            );
        }
        if !self.c.settings.system_only {
            let r = &self.c.roadblocks;
            log::info!(
                "roadblocks: {} in the program's own code, {} unit(s) fuzzed at one, {} solved; the schedule ended giving units {:.0}% of the time",
                r.seen,
                r.attempts.len(),
                r.solved(),
                100.0 * self.c.schedule.unit_share()
            );
        }
        let d = &self.c.disk;
        if d.corpora_evicted + d.batches_evicted.len() > 0 || d.over {
            log::info!(
                "disk: {} at the last look (peak {}, --max-disk {}); evicted {} unit corpora and {} batch(es) of carved units, {}",
                super::disk::human(d.bytes),
                super::disk::human(d.peak),
                super::disk::human(self.c.settings.max_disk),
                d.corpora_evicted,
                d.batches_evicted.len(),
                super::disk::human(d.bytes_evicted)
            );
        }
        if self.c.elapsed > 0.0 && !self.c.phase_seconds.is_empty() {
            let mut phases: Vec<_> = self.c.phase_seconds.iter().collect();
            phases.sort_by(|a, b| b.1.total_cmp(a.1));
            let shares: Vec<String> = phases
                .iter()
                .filter(|(_, v)| **v >= 0.005 * self.c.elapsed)
                .map(|(k, v)| format!("{k} {:.0}%", 100.0 * *v / self.c.elapsed))
                .collect();
            log::info!("time: {}", shares.join(", "));
        }
        log::info!("report: trestle report {}", out.display());
        Ok(alarms)
    }
}

/// The last two components of a path, for the status line.
fn short_path(p: &str) -> &str {
    match p.rmatch_indices('/').nth(1) {
        Some((i, _)) => &p[i + 1..],
        None => p,
    }
}

/// Which of the queue entries not recorded yet a round records: in the first round
/// the seeds, all of them (up to 40); later the newest [`RECORD_PER_ROUND`], which
/// build on the older ones and reach furthest.
fn to_record(mut fresh: Vec<PathBuf>, first_round: bool) -> Vec<PathBuf> {
    fresh.sort();
    if first_round {
        fresh.truncate(40);
    } else {
        fresh.reverse();
        fresh.truncate(RECORD_PER_ROUND);
    }
    fresh
}

/// The system fuzzer of a campaign: what a user of a system fuzzer would give it, in
/// both modes, so that the baseline is at full strength.
fn system_fuzzer(
    s: &Settings,
    binary: &Binary,
    seeds: &[NamedTest],
    out: &Path,
) -> Result<SysFuzzer> {
    SysFuzzer::new(SysFuzzConfig {
        program: s.program.clone(),
        seeds: seeds.to_vec(),
        out: out.join("system"),
        timeout: s.timeout,
        seed: s.seed,
        // As AFL++'s compile-time dictionary: the program's string literals and the
        // constants it compares against.
        dictionary: trestle_sysfuzz::dictionary(binary),
        no_forkserver: false,
        // Input-to-state on the system input, as AFL++'s -c.
        cmplog: true,
        memory: if trestle_exec::sandbox::is_sanitizer_build(&s.program) {
            0
        } else {
            Limits::default().memory
        },
        sandbox: !s.no_sandbox,
        lean: !s.no_lean,
    })
    .context("starting the system-level fuzzer")
}

/// The lifter of a campaign: validates in the sandbox and publishes alarms at once;
/// they are reduced to 1-minimal once the fuzzing budget is spent (bounded in time,
/// not in runs), so that no reduction stops the fuzzers.
fn lifter(s: &Settings, seeds: &[NamedTest], out: &Path, elapsed: f64) -> Result<Lifter> {
    let wall = s.timeout * 5;
    let limits = Limits {
        wall,
        cpu_secs: cpu_limit(wall),
        ..Limits::default()
    };
    let sandbox = Sandbox::new(limits, !s.no_sandbox)?;
    let baseline: Vec<_> = seeds.iter().map(|n| n.test.clone()).collect();
    let config = LiftConfig {
        coverage_build: s.coverage_with.clone(),
        // Every alarm also says whether the build the fuzzers ran crashes on it.
        also_on: vec![("fuzzing".into(), s.program.clone())],
        reduce_budget: Some(100_000),
        reduce_time: Duration::from_secs(30),
        defer_reduction: true,
        harness: Some(s.program.clone()),
        // Unit harness runs stop where the unit fuzzer's would count as hangs.
        harness_limit: Some(s.timeout),
        // Lifted tests too: one that runs past the hang limit is no crash found.
        lifted_limit: Some(s.timeout),
        // A hang is confirmed at the system fuzzer's own limit (whole CPU seconds).
        hang_limit: Some(s.timeout),
        seeds: seeds
            .iter()
            .map(|n| (n.name.clone(), n.test.clone()))
            .collect(),
        epoch: Instant::now() - Duration::from_secs_f64(elapsed.max(0.0)),
        ..LiftConfig::new(&s.validate_with, sandbox)
    };
    let lifter = Lifter::new(config, out, &baseline)?;
    Ok(lifter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_records_the_seeds_then_the_newest_entries() {
        let queue: Vec<PathBuf> = (0..100)
            .rev()
            .map(|i| PathBuf::from(format!("queue/{i:06}.json")))
            .collect();
        let first = to_record(queue.clone(), true);
        assert_eq!(first.len(), 40);
        assert_eq!(
            first[0],
            PathBuf::from("queue/000000.json"),
            "the seeds come first"
        );
        let later = to_record(queue, false);
        assert_eq!(later.len(), RECORD_PER_ROUND);
        assert_eq!(
            later[0],
            PathBuf::from("queue/000099.json"),
            "then the newest"
        );
        assert!(later
            .iter()
            .all(|p| p >= &PathBuf::from(format!("queue/{:06}.json", 100 - RECORD_PER_ROUND))));
    }
}

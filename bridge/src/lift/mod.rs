//! `trestle lift`: turn unit findings into system tests and report only what the real
//! program confirms.
//!
//! For each input a unit fuzzer saved (crashes first, then queue entries), the new
//! parameter values are written back into the unit's system test at the places the
//! mapping found them (each place alone and all together, when a value occurred more
//! than once), and the program — built without trestle — runs on each lifted test in
//! the sandbox. A lifted test is a *true alarm* when the program crashes with the
//! unit's crash signature, *effective* when it reaches system coverage nothing before
//! it reached (coverage builds only), and otherwise the unit finding was a *false
//! positive*: kept under `false-positives/` with the reason, never reported.
//! True alarms are deduplicated by signature, reduced by delta debugging, exported as
//! a C unit test, and written with their provenance under `alarms/<id>/`.

mod records;

pub use records::{AlarmList, FalsePositive, Provenance};
use crate::binary::Binary;
use crate::files;
use crate::system::coverage::{is_coverage_build, measure, CoverageSet};
use crate::validate::reduce::{reduce, test_size, ReduceStats};
use crate::validate::sandbox::{cpu_limit, find_tool, Limits, Sandbox, SandboxRun};
use crate::validate::signature::{parse_stack, signal_name, signal_number, symbolise, CrashSignature, FrameFilter};
use crate::system::systest::{load_tests, save_test, to_json};
use crate::carve::units::{read_unit, safe_name};
use anyhow::{bail, Context as _, Result};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use trestle_abi::fuzz::{decode_values, encode_values, original_value, ParamValue, ENV_FUZZ, ENV_FUZZ_INPUT};
use trestle_abi::unit::{InputRef, Origin, ParamKind, SystemTest, Unit};

/// Options of `trestle lift`.
#[derive(Debug, Clone)]
pub struct Options {
    /// Output directories of `trestle fuzz` (each holds unit.unit, crashes/, queue/).
    pub fuzz_dirs: Vec<PathBuf>,
    /// The program to validate with, built without trestle-cc: plain, with
    /// AddressSanitizer, or for source-based coverage (-fprofile-instr-generate
    /// -fcoverage-mapping, which also decides "effective"). Build it with -g: crash
    /// signatures compare function names, inlined ones included.
    pub program: PathBuf,
    /// Output directory: alarms/, false-positives/, alarms.json, lift.json.
    pub out: PathBuf,
    /// Seed system tests (file or directory): with a coverage build, what they cover is
    /// the baseline a lifted test must add to in order to count as effective (default:
    /// the units' own system tests).
    pub seeds: Option<PathBuf>,
    /// The instrumented program the units run in, to read crash signatures of unit
    /// findings (default: the program each unit was carved from).
    pub harness: Option<PathBuf>,
    /// Wall-clock limit per system run.
    pub timeout: Duration,
    /// Address-space limit per system run, MiB (not applied to sanitizer builds).
    pub memory_mb: u64,
    /// Lift at most this many queue entries per fuzz directory (0: crashes only).
    pub max_queue: usize,
    /// Runs allowed for reducing each alarm (the time bound usually ends it first).
    pub reduce_budget: usize,
    /// Time allowed for reducing each alarm to 1-minimal.
    pub reduce_time: std::time::Duration,
    /// Do not reduce alarms.
    pub no_reduce: bool,
    /// Run lifted tests without bubblewrap (still in a fresh directory, with rlimits).
    pub no_sandbox: bool,
    /// Print the summary as JSON on stdout.
    pub json: bool,
}

/// What lifting found, as in the paper's tables 4 and 5.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct LiftStats {
    /// Unit inputs that crashed the unit.
    pub unit_crashes: usize,
    /// Unit inputs from the queues (new unit coverage).
    pub unit_queue: usize,
    /// System tests made by lifting and run.
    pub lifted_tests: usize,
    /// Lifted tests that reached new system coverage without crashing.
    pub effective: usize,
    /// Lifted tests that crashed the program with the unit's signature.
    pub true_alarm_tests: usize,
    /// Distinct true alarms (by signature).
    pub alarms: usize,
    /// Lifted tests that crashed the program differently from the unit.
    pub other_crash_tests: usize,
    /// Unit crashes no lifted test reproduced.
    pub false_positives: usize,
    /// Lifted tests that ran into a resource limit.
    pub limited: usize,
    /// Unit crashes not lifted because others with the same unit crash signature
    /// already were (confirmed, or tried often enough).
    #[serde(default)]
    pub same_signature_skipped: usize,
    /// Unit inputs left unlifted when the time for lifting ran out (still on disk).
    #[serde(default)]
    pub not_lifted_for_time: usize,
    /// Queue entries not lifted because every edge they reach in the unit, the
    /// system fuzzer (or the unit's recorded values) had reached already, or
    /// [`LIFTS_PER_NEW_EDGES`] entries reaching the same new edges were lifted.
    #[serde(default)]
    pub queue_already_covered: usize,
    /// Whether coverage was measured (coverage build).
    pub coverage_measured: bool,
    /// Branch directions covered by the baseline and everything lifted.
    pub branches_covered: usize,
    /// Branch directions in the program.
    pub branches_total: usize,
}

impl LiftStats {
    /// Share of lifted tests that were effective or true alarms.
    pub fn productive_share(&self) -> f64 {
        (self.effective + self.true_alarm_tests) as f64 / self.lifted_tests.max(1) as f64
    }
}

/// One entry of `alarms.json`.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct AlarmEntry {
    /// Directory name under `alarms/`.
    pub id: String,
    /// Where it crashes: the innermost function of the subject on the stack.
    pub function: String,
    /// The function of the unit whose finding lifted to it (none for system-level
    /// finds).
    #[serde(default)]
    pub unit_function: Option<String>,
    /// The system-level crash.
    pub signature: String,
    /// Deduplication key.
    pub key: String,
    /// Whether the system crash is the unit's (else: the program crashed another way).
    /// True for crashes system-level fuzzing found directly (nothing to compare).
    pub matches_unit: bool,
    /// `unit` (a lifted unit finding) or `system` (found by system-level fuzzing).
    #[serde(default = "unit_source")]
    pub source: String,
    /// Unit findings that lifted to this crash.
    pub candidates: usize,
    /// Bytes of the lifted and the reduced test.
    pub size_lifted: usize,
    /// Bytes of the reduced test.
    pub size_reduced: usize,
    /// Seconds from the start of the campaign (of `trestle lift`, run alone) until
    /// the alarm was confirmed.
    #[serde(default)]
    pub found_at: Option<f64>,
}

fn unit_source() -> String {
    "unit".into()
}

/// A substitution made by lifting.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Substitution {
    /// Parameter index in the unit.
    pub param: usize,
    /// Where in the system test.
    pub input: String,
    /// Byte offset.
    pub offset: u64,
    /// Old bytes (text).
    pub old: String,
    /// New bytes (text).
    pub new: String,
}

/// A unit finding to lift.
#[derive(Debug, Clone)]
struct Candidate {
    input: PathBuf,
    crash: bool,
    /// For a queue entry, when the system fuzzer's edges are known: the edges it
    /// reaches that the system had not (at the time the unit's lifting began).
    new_edges: Option<Vec<usize>>,
}

/// The lifting state of one output directory; `trestle run` keeps one across rounds.
pub struct Lifter {
    program: PathBuf,
    out: PathBuf,
    sandbox: Sandbox,
    filter: FrameFilter,
    coverage: Option<CoverageSet>,
    /// The figures so far.
    pub stats: LiftStats,
    alarms: BTreeMap<String, AlarmEntry>,
    fp_count: usize,
    reduce_budget: Option<usize>,
    reduce_time: Duration,
    harness: Option<PathBuf>,
    progress: bool,
    binaries: BTreeMap<PathBuf, Binary>,
    effective_tests: Vec<SystemTest>,
    deadline: Option<Instant>,
    /// The edges (indices of the trestle build's coverage map) system-level runs have
    /// reached; set by a campaign, whose system fuzzer runs the same build.
    system_edges: Option<Vec<bool>>,
    seeds: Vec<(String, SystemTest)>,
    /// When the work this lifter serves started: an alarm's `found_at` counts from it.
    epoch: Instant,
}

/// Unit crashes of one unit with the same crash signature lifted at most this often
/// unless one of them is confirmed (then the rest are duplicates of that alarm).
pub const LIFTS_PER_UNIT_SIGNATURE: usize = 4;

/// Queue entries of one unit lifted at most for the same set of edges new to the
/// system (when the system fuzzer's edges are known).
pub const LIFTS_PER_NEW_EDGES: usize = 2;

/// What became of the unit crashes of one signature in one fuzz directory.
#[derive(Default)]
struct SignatureTally {
    tried: usize,
    confirmed: bool,
}

/// How a lifted test went at system level.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct SystemOutcome {
    /// Exit status or signal, in words.
    pub status: String,
    /// The crash, if it crashed.
    pub crash: Option<CrashSignature>,
    /// The resource limit it hit, if any.
    pub limit: Option<String>,
    /// Edges new to the system fuzzer it reached, when measured.
    pub new_coverage: Option<usize>,
    /// The end of its stderr.
    pub stderr_tail: String,
}

fn outcome_of(run: &SandboxRun, new_coverage: Option<usize>) -> SystemOutcome {
    let err = String::from_utf8_lossy(&run.stderr);
    let tail: String = err.lines().rev().take(12).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
    SystemOutcome {
        status: run.status.to_string(),
        crash: run.crash.clone(),
        limit: run.limit.clone(),
        new_coverage,
        stderr_tail: tail,
    }
}

impl Lifter {
    /// A lifter writing to `out`. `baseline` are the tests whose coverage counts as
    /// already reached.
    pub fn new(program: &Path, out: &Path, sandbox: Sandbox, baseline: &[SystemTest], progress: bool) -> Result<Lifter> {
        let program = std::fs::canonicalize(program).with_context(|| format!("validation program {}", program.display()))?;
        for d in ["alarms", "false-positives"] {
            std::fs::create_dir_all(out.join(d)).with_context(|| format!("cannot create {}", out.join(d).display()))?;
        }
        let filter = FrameFilter { program: Some(program.clone()), stop_after: None };
        let mut lifter = Lifter {
            program,
            out: out.to_owned(),
            sandbox,
            filter,
            coverage: None,
            stats: LiftStats::default(),
            alarms: BTreeMap::new(),
            fp_count: 0,
            reduce_budget: Some(100_000),
            reduce_time: Duration::from_secs(120),
            harness: None,
            progress,
            binaries: BTreeMap::new(),
            effective_tests: Vec::new(),
            deadline: None,
            system_edges: None,
            seeds: Vec::new(),
            epoch: Instant::now(),
        };
        lifter.load_existing()?;
        if is_coverage_build(&lifter.program) {
            let base = lifter.coverage_of(baseline)?;
            lifter.stats.coverage_measured = true;
            lifter.stats.branches_covered = base.branches();
            lifter.stats.branches_total = base.branches_total;
            lifter.coverage = Some(base);
        }
        // Readers find the lists even when nothing is ever found.
        lifter.write_index()?;
        Ok(lifter)
    }

    /// Alarms already in the output directory (a resumed campaign keeps them).
    fn load_existing(&mut self) -> Result<()> {
        if let Some(list) = files::read_if_present::<AlarmList>(&self.out.join(files::ALARMS))? {
            for a in list.alarms {
                self.alarms.insert(a.key.clone(), a);
            }
        }
        if let Some(stats) = files::read_if_present::<LiftStats>(&self.out.join(files::LIFT))? {
            self.stats = stats;
        }
        let fps = self.out.join(files::FALSE_POSITIVES_DIR);
        self.fp_count = match std::fs::read_dir(&fps) {
            Ok(d) => d.count(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e).with_context(|| format!("cannot list {}", fps.display())),
        };
        Ok(())
    }

    /// Count alarm times (`found_at`) from `epoch` (a campaign's start, earlier
    /// sessions included).
    pub fn set_epoch(&mut self, epoch: Instant) {
        self.epoch = epoch;
    }

    /// Reduce alarms with at most `budget` runs each; `None` turns reduction off.
    pub fn set_reduce_budget(&mut self, budget: Option<usize>) {
        self.reduce_budget = budget;
    }

    /// Reduce each alarm for at most `time`.
    pub fn set_reduce_time(&mut self, time: Duration) {
        self.reduce_time = time;
    }

    /// The seed system tests by name, so provenance can tell a seed from a system test
    /// that system-level fuzzing made of one.
    pub fn set_seeds(&mut self, seeds: Vec<(String, SystemTest)>) {
        self.seeds = seeds;
    }

    /// Where a unit's system test came from, in words.
    fn origin_of(&self, unit: &Unit) -> (String, Option<String>) {
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

    /// Read unit crash signatures in this program instead of the units' own.
    pub fn set_harness(&mut self, harness: Option<PathBuf>) {
        self.harness = harness;
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
        for (i, t) in tests.iter().enumerate() {
            let p = dir.path().join(format!("{i}.profraw"));
            self.sandbox.run(&self.program, t, &[], &self.filter, Some(&p))?;
            if p.exists() {
                profiles.push(p);
            }
        }
        measure(&self.program, &profiles)
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

    /// Lines of each source file not covered so far, by file; `None` without coverage.
    pub fn uncovered_lines(&self) -> Option<BTreeMap<String, Vec<u32>>> {
        self.coverage.as_ref().map(|c| c.uncovered_lines())
    }

    /// A crash system-level fuzzing found (`name`, in `source`): validated with the
    /// validation program like a lifted test, and reported if it reproduces. Returns
    /// whether it did.
    pub fn system_crash(&mut self, test: &SystemTest, name: &str, source: &Path) -> Result<bool> {
        let run = self.sandbox.run(&self.program, test, &[], &self.filter, None)?;
        let Some(sys) = run.crash else { return Ok(false) };
        let key = sys.key();
        if let Some(a) = self.alarms.values_mut().find(|a| CrashSignature::keys_match(&a.key, &key)) {
            a.candidates += 1;
            self.write_index()?;
            return Ok(true);
        }
        let function = sys.frames.first().cloned().unwrap_or_else(|| "unknown".into());
        let id = format!("{}-{:08x}", safe_name(&function), fnv32(&key));
        let tmp = self.out.join("alarms").join(format!(".tmp-{id}"));
        crate::files::remove_dir_if_present(&tmp)?;
        std::fs::create_dir_all(&tmp)?;
        save_test(test, &tmp.join("lifted.json"))?;
        let (reduced, rstats) = self.reduce_alarm(test, &key)?;
        save_test(&reduced, &tmp.join("reduced.json"))?;
        write_script(&tmp.join("reproduce.sh"), &self.program, &reduced)?;
        let provenance = Provenance::System(Box::new(records::SystemFind {
            system_test: records::FoundTest { name: name.to_owned(), file: source.to_owned(), test: to_json(test) },
            signature: sys.to_string(),
            stack: records::stack_lines(&sys),
            reduced_test: records::ReducedTest { file: files::REDUCED.into(), reduction: rstats.clone() },
            validated_with: self.program.clone(),
            sandboxed: self.sandbox.isolated(),
        }));
        files::write(&tmp.join(files::PROVENANCE), &provenance)?;
        let mut md = format!("# Crash found by system-level fuzzing\n\n**{sys}** when running `{}`.\n\n## Stack\n\n", self.program.display());
        for f in sys.stack.iter().take(12) {
            md += &format!("- {f}\n");
        }
        md += "\n## Reduced reproducer (`reduced.json`, run `./reproduce.sh`)\n\n";
        md += &show_test(&reduced);
        md += &format!("\nReduced from {} to {} bytes in {} runs. Found as `{}` ({}).\n", rstats.size_before, rstats.size_after, rstats.runs, name, source.display());
        std::fs::write(tmp.join("summary.md"), md)?;
        let final_dir = self.out.join("alarms").join(&id);
        crate::files::remove_dir_if_present(&final_dir)?;
        std::fs::rename(&tmp, &final_dir)?;
        self.alarms.insert(
            key.clone(),
            AlarmEntry {
                id,
                function,
                unit_function: None,
                signature: sys.to_string(),
                key,
                matches_unit: true,
                source: "system".into(),
                candidates: 1,
                size_lifted: test_size(test),
                size_reduced: test_size(&reduced),
                found_at: Some(self.epoch.elapsed().as_secs_f64()),
            },
        );
        self.stats.alarms = self.alarms.len();
        self.write_index()?;
        Ok(true)
    }

    fn reduce_alarm(&self, test: &SystemTest, key: &str) -> Result<(SystemTest, ReduceStats)> {
        match self.reduce_budget {
            Some(budget) => {
                let mut keep = |t: &SystemTest| -> Result<bool> {
                    let run = self.sandbox.run(&self.program, t, &[], &self.filter, None)?;
                    Ok(run.crash.is_some_and(|s| s.key() == key))
                };
                reduce(test, budget, Some(Instant::now() + self.reduce_time), &mut keep)
            }
            None => Ok((
                test.clone(),
                ReduceStats { runs: 0, budget_exhausted: false, size_before: test_size(test), size_after: test_size(test) },
            )),
        }
    }

    /// The alarms so far.
    pub fn alarms(&self) -> Vec<AlarmEntry> {
        self.alarms.values().cloned().collect()
    }

    /// Lift everything one fuzz directory holds: its crashes, then up to
    /// `max_queue` queue entries.
    pub fn lift_dir(&mut self, dir: &Path, max_queue: usize) -> Result<()> {
        let dir = &std::fs::canonicalize(dir).with_context(|| format!("fuzz directory {}", dir.display()))?;
        let unit_path = dir.join("unit.unit");
        let unit = read_unit(&unit_path).with_context(|| format!("{} is not a trestle fuzz directory", dir.display()))?;
        // An interrupted fuzz run leaves its objectives unsorted in .solutions.
        let mut candidates: Vec<Candidate> = inputs_in(&dir.join("crashes"))?
            .into_iter()
            .chain(inputs_in(&dir.join(".solutions"))?)
            .map(|input| Candidate { input, crash: true, new_edges: None })
            .collect();
        let queue = inputs_in(&dir.join("queue"))?;
        let queue: Vec<(PathBuf, Option<Vec<usize>>)> = match &self.system_edges {
            Some(covered) => {
                let before = queue.len();
                let seed_path = dir.join(trestle_unit_fuzz::DRY_RUN_INPUT);
                let seed = match std::fs::read(&seed_path) {
                    Ok(bytes) => Some(bytes),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                    Err(e) => return Err(e).with_context(|| format!("cannot read {}", seed_path.display())),
                };
                let ranked = beyond_system_edges(queue, covered, seed.as_deref());
                self.stats.queue_already_covered += before - ranked.len();
                ranked
            }
            None => queue.into_iter().map(|p| (p, None)).collect(),
        };
        candidates.extend(queue.into_iter().take(max_queue).map(|(input, new_edges)| Candidate { input, crash: false, new_edges }));
        let started = Instant::now();
        let total = candidates.len();
        let mut tally: BTreeMap<String, SignatureTally> = BTreeMap::new();
        for (k, c) in candidates.iter().enumerate() {
            if self.deadline.is_some_and(|d| Instant::now() >= d) {
                self.stats.not_lifted_for_time += total - k;
                break;
            }
            // An entry whose new edges a test lifted before it reached already (one
            // that was effective) adds nothing now.
            if let (Some(new), Some(covered)) = (&c.new_edges, &self.system_edges) {
                if new.iter().all(|&i| covered.get(i).copied().unwrap_or(false)) {
                    self.stats.queue_already_covered += 1;
                    continue;
                }
            }
            let effective_before = self.stats.effective;
            self.lift_one(dir, &unit, c, &mut tally).with_context(|| format!("lifting {}", c.input.display()))?;
            if let (true, Some(new), Some(covered)) = (self.stats.effective > effective_before, &c.new_edges, &mut self.system_edges) {
                for &i in new {
                    if let Some(e) = covered.get_mut(i) {
                        *e = true;
                    }
                }
            }
            if self.progress && (k + 1 == total || (k + 1) % 20 == 0) {
                eprintln!(
                    "[lift {:>4.0}s] {}: {}/{} inputs, {} lifted tests, {} alarm(s), {} effective, {} false positive(s)",
                    started.elapsed().as_secs_f64(),
                    unit.function,
                    k + 1,
                    total,
                    self.stats.lifted_tests,
                    self.alarms.len(),
                    self.stats.effective,
                    self.stats.false_positives
                );
            }
        }
        self.write_index()
    }

    fn harness_for(&self, unit: &Unit) -> PathBuf {
        self.harness.clone().unwrap_or_else(|| PathBuf::from(&unit.provenance.program))
    }

    fn binary(&mut self, path: &Path) -> Result<&Binary> {
        if !self.binaries.contains_key(path) {
            self.binaries.insert(path.to_owned(), Binary::load(path)?);
        }
        Ok(&self.binaries[path])
    }

    fn lift_one(&mut self, dir: &Path, unit: &Unit, c: &Candidate, tally: &mut BTreeMap<String, SignatureTally>) -> Result<()> {
        let bytes = std::fs::read(&c.input).with_context(|| format!("cannot read {}", c.input.display()))?;
        let values = decode_values(&unit.params, &bytes);
        let unit_sig = if c.crash {
            self.stats.unit_crashes += 1;
            let sig = self.unit_signature(dir, unit, &c.input)?;
            let t = tally.entry(sig.key()).or_default();
            if t.confirmed || t.tried >= LIFTS_PER_UNIT_SIGNATURE {
                self.stats.same_signature_skipped += 1;
                return Ok(());
            }
            t.tried += 1;
            Some(sig)
        } else {
            self.stats.unit_queue += 1;
            None
        };
        // A crash lifts only the values it needs (when the harness can tell).
        let values = match unit_sig.as_ref().and_then(|s| signal_number(&s.kind)) {
            Some(signal) => self.essential_values(dir, unit, &values, signal)?,
            None => values,
        };
        let variants = lift_variants(unit, &values);
        if variants.is_empty() {
            if c.crash {
                self.false_positive(unit, c, &values, unit_sig.as_ref(), None, "the parameter values equal the recorded ones: nothing to lift")?;
            }
            return Ok(());
        }
        // Queue entries: the all-places variant only (they are many).
        let variants = if c.crash { variants } else { variants.into_iter().take(1).collect() };
        let mut last: Option<(SystemTest, SystemOutcome, Vec<Substitution>)> = None;
        for (test, subs) in variants {
            self.stats.lifted_tests += 1;
            let (run, new_cov) = self.run_system(&test)?;
            if run.limit.is_some() {
                self.stats.limited += 1;
            }
            let outcome = outcome_of(&run, new_cov);
            if let Some(sys) = &run.crash {
                // A unit crash whose stack could not be read (a handler of the
                // program's own took the signal) still names its function.
                let same = unit_sig.as_ref().is_some_and(|u| {
                    u.matches(sys)
                        || (u.frames.is_empty()
                            && u.class() == sys.class()
                            && sys.frames.first().is_some_and(|f| *f == unit.function))
                });
                if same {
                    self.stats.true_alarm_tests += 1;
                    if let Some(u) = &unit_sig {
                        tally.entry(u.key()).or_default().confirmed = true;
                    }
                } else {
                    self.stats.other_crash_tests += 1;
                }
                self.alarm(dir, unit, c, &values, unit_sig.as_ref(), &test, &subs, sys, same)?;
                return Ok(());
            }
            if new_cov.is_some_and(|n| n > 0) {
                self.stats.effective += 1;
                // Kept on disk: the system tests a campaign produced are its queue,
                // its crashes and these.
                let eff_dir = self.out.join("effective");
                std::fs::create_dir_all(&eff_dir).with_context(|| format!("cannot create {}", eff_dir.display()))?;
                save_test(&test, &eff_dir.join(format!("{:06}.json", self.stats.effective)))?;
                self.effective_tests.push(test.clone());
                if c.crash {
                    // Real coverage, but not the unit's crash.
                    self.false_positive(unit, c, &values, unit_sig.as_ref(), Some((&test, &outcome)), "no crash at system level (the lifted test is effective: new coverage)")?;
                }
                return Ok(());
            }
            last = Some((test, outcome, subs));
        }
        if c.crash {
            let reason = match &last {
                Some((_, o, _)) if o.limit.is_some() => format!("no crash at system level: ran into the {} limit", o.limit.as_deref().unwrap_or("")),
                Some((_, o, _)) => format!("no crash at system level ({})", o.status),
                None => "nothing lifted".into(),
            };
            let lifted = last.as_ref().map(|(t, o, _)| (t, o));
            self.false_positive(unit, c, &values, unit_sig.as_ref(), lifted, &reason)?;
        }
        Ok(())
    }

    fn run_system(&mut self, test: &SystemTest) -> Result<(SandboxRun, Option<usize>)> {
        if self.coverage.is_none() {
            return Ok((self.sandbox.run(&self.program, test, &[], &self.filter, None)?, None));
        }
        let dir = tempfile::tempdir()?;
        let prof = dir.path().join("run.profraw");
        let run = self.sandbox.run(&self.program, test, &[], &self.filter, Some(&prof))?;
        if !prof.exists() {
            return Ok((run, Some(0)));
        }
        let set = measure(&self.program, &[prof])?;
        let cov = self.coverage.as_mut().expect("checked above");
        let new = cov.new_in(&set);
        cov.extend(&set);
        self.stats.branches_covered = cov.branches();
        Ok((run, Some(new)))
    }

    /// The unit's crash, read by running the input once more in the harness with the
    /// crash-stack library preloaded.
    /// The unit harness running `input` once (no output, no address randomisation).
    fn harness_command(&self, dir: &Path, unit: &Unit, input: &Path) -> Result<std::process::Command> {
        let harness = self.harness_for(unit);
        if !harness.exists() {
            bail!("the unit harness {} is missing (pass --harness)", harness.display());
        }
        let cwd = dir.join("cwd");
        let mut cmd = std::process::Command::new(&harness);
        cmd.env(ENV_FUZZ, dir.join("request.bin"))
            .env(ENV_FUZZ_INPUT, input)
            .current_dir(if cwd.is_dir() { cwd } else { dir.to_owned() })
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        use std::os::unix::process::CommandExt as _;
        // SAFETY: personality() only affects the child: recorded addresses of libc
        // objects need the layout of the recording.
        unsafe {
            cmd.pre_exec(|| {
                libc::personality(libc::ADDR_NO_RANDOMIZE as libc::c_ulong);
                Ok(())
            });
        }
        Ok(cmd)
    }

    fn wait_harness(&self, mut cmd: std::process::Command, harness: &Path) -> Result<std::process::ExitStatus> {
        let mut child = cmd.spawn().with_context(|| format!("cannot run the unit harness {}", harness.display()))?;
        use wait_timeout::ChildExt as _;
        Ok(match child.wait_timeout(self.sandbox.limits.wall)? {
            Some(s) => s,
            None => {
                let _ = child.kill();
                child.wait()?
            }
        })
    }

    /// The parameter values of a unit crash that it needs: each changed value is put
    /// back to the recorded one while the unit still dies of the same signal. Values
    /// the crash does not depend on (a verb the function never looks at, mutated
    /// freely) would otherwise be lifted too and steer the system test off the path.
    fn essential_values(&self, dir: &Path, unit: &Unit, values: &[ParamValue], signal: i32) -> Result<Vec<ParamValue>> {
        use std::os::unix::process::ExitStatusExt as _;
        let harness = self.harness_for(unit);
        let side = tempfile::tempdir()?;
        let input = side.path().join("input");
        let mut cur = values.to_vec();
        for (i, p) in unit.params.iter().enumerate().take(32) {
            let original = original_value(p);
            if cur[i] == original {
                continue;
            }
            let mut trial = cur.clone();
            trial[i] = original;
            std::fs::write(&input, encode_values(&trial)).with_context(|| format!("cannot write {}", input.display()))?;
            let status = self.wait_harness(self.harness_command(dir, unit, &input)?, &harness)?;
            if status.signal() == Some(signal) {
                cur = trial;
            }
        }
        Ok(cur)
    }

    fn unit_signature(&mut self, dir: &Path, unit: &Unit, input: &Path) -> Result<CrashSignature> {
        let harness = self.harness_for(unit);
        let preload = find_tool("libtrestle_crashstack.so")?;
        let side = tempfile::tempdir()?;
        let stack = side.path().join("stack");
        let mut cmd = self.harness_command(dir, unit, input)?;
        cmd.env(trestle_abi::fuzz::ENV_CRASH_STACK_LIB, &preload).env(trestle_abi::fuzz::ENV_CRASH_STACK, &stack);
        let status = self.wait_harness(cmd, &harness)?;
        use std::os::unix::process::ExitStatusExt as _;
        let filter = FrameFilter { program: Some(std::fs::canonicalize(&harness).unwrap_or(harness.clone())), stop_after: Some(unit.function.clone()) };
        let frames = match std::fs::read_to_string(&stack) {
            Ok(text) => symbolise(&parse_stack(&text)?, filter.program.as_deref())?,
            // No stack file: the harness did not crash (or died before it could write).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e).with_context(|| format!("cannot read the crash stack {}", stack.display())),
        };
        match (status.signal(), status.code()) {
            (Some(s), _) => Ok(filter.signature(signal_name(s), frames)),
            (None, Some(trestle_abi::fuzz::EXIT_SETUP_FAILED)) => {
                bail!("the unit harness {} cannot set this unit up again (exit status {})", harness.display(), trestle_abi::fuzz::EXIT_SETUP_FAILED)
            }
            (None, code) => Ok(CrashSignature {
                kind: format!("no crash (exit {}) when run alone", code.unwrap_or(-1)),
                frames: Vec::new(),
                stack: Vec::new(),
            }),
        }
    }

    fn false_positive(
        &mut self,
        unit: &Unit,
        c: &Candidate,
        values: &[ParamValue],
        unit_sig: Option<&CrashSignature>,
        lifted: Option<(&SystemTest, &SystemOutcome)>,
        reason: &str,
    ) -> Result<()> {
        self.stats.false_positives += 1;
        self.fp_count += 1;
        let id = format!("{:04}-{}", self.fp_count, safe_name(&unit.function));
        let tmp = self.out.join("false-positives").join(format!(".tmp-{id}"));
        std::fs::create_dir_all(&tmp)?;
        if let Some((t, _)) = lifted {
            save_test(t, &tmp.join("lifted.json"))?;
        }
        let record = FalsePositive {
            function: unit.function.clone(),
            reason: reason.to_owned(),
            unit_input: c.input.clone(),
            values: describe_values(unit, values),
            unit_signature: unit_sig.map(|s| s.to_string()),
            system: lifted.map(|(_, o)| o.clone()),
            seed_test: self.origin_of(unit).0,
        };
        files::write(&tmp.join(files::REASON), &record)?;
        std::fs::rename(&tmp, self.out.join("false-positives").join(&id))?;
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn alarm(
        &mut self,
        dir: &Path,
        unit: &Unit,
        c: &Candidate,
        values: &[ParamValue],
        unit_sig: Option<&CrashSignature>,
        lifted: &SystemTest,
        subs: &[Substitution],
        sys: &CrashSignature,
        matches_unit: bool,
    ) -> Result<()> {
        let key = sys.key();
        if let Some(a) = self.alarms.values_mut().find(|a| CrashSignature::keys_match(&a.key, &key)) {
            a.candidates += 1;
            return self.write_index();
        }
        let crash_fn = sys.frames.first().cloned().unwrap_or_else(|| unit.function.clone());
        let id = format!("{}-{:08x}", safe_name(&crash_fn), fnv32(&key));
        let final_dir = self.out.join("alarms").join(&id);
        let tmp = self.out.join("alarms").join(format!(".tmp-{id}"));
        crate::files::remove_dir_if_present(&tmp)?;
        std::fs::create_dir_all(&tmp)?;
        save_test(lifted, &tmp.join("lifted.json"))?;
        std::fs::copy(&c.input, tmp.join("unit-input.bin"))?;
        let (reduced, rstats) = self.reduce_alarm(lifted, &key)?;
        save_test(&reduced, &tmp.join("reduced.json"))?;
        write_script(&tmp.join("reproduce.sh"), &self.program, &reduced)?;
        // The unit itself, as C, with the crashing values.
        let harness = self.harness_for(unit);
        let binary = Some(self.binary(&harness)?.clone());
        let source = binary
            .as_ref()
            .and_then(|b| b.functions.get(&unit.context.fn_id))
            .and_then(|f| f.file.as_deref().map(|file| format!("{file}:{}", f.line)));
        match crate::export::export_c(unit, binary.as_ref(), Some(values)) {
            Ok(c_src) => {
                std::fs::write(tmp.join("unit.c"), c_src)?;
                let script = tmp.join("build.sh");
                std::fs::write(&script, crate::export::build_script("unit.c"))?;
                use std::os::unix::fs::PermissionsExt as _;
                std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
            }
            Err(e) => std::fs::write(tmp.join("unit-export-error.txt"), format!("{e:#}\n"))?,
        }
        let (seed, mutation) = self.origin_of(unit);
        let provenance = Provenance::Lifted(Box::new(records::LiftedFind {
            seed_test: seed.clone(),
            system_mutation: mutation.clone(),
            system_test: records::CarvedFrom {
                name: unit.provenance.test.clone(),
                test: to_json(&unit.system_test),
                trace: unit.provenance.trace.clone(),
                pid: unit.provenance.pid,
            },
            carved_invocation: records::CarvedInvocation {
                function: unit.function.clone(),
                call_index: unit.provenance.call_index,
                carve_sequence: unit.provenance.seq,
                source: source.clone(),
                program: unit.provenance.program.clone(),
            },
            unit_input: records::UnitInput {
                fuzz_dir: dir.to_owned(),
                file: c.input.clone(),
                values: describe_values(unit, values),
                signature: unit_sig.map(|s| s.to_string()),
                stack: unit_sig.map(records::stack_lines),
            },
            lifted_test: records::LiftedTest {
                file: files::LIFTED.into(),
                substitutions: subs.to_vec(),
                signature: sys.to_string(),
                stack: records::stack_lines(sys),
            },
            reduced_test: records::ReducedTest { file: files::REDUCED.into(), reduction: rstats.clone() },
            validated_with: self.program.clone(),
            sandboxed: self.sandbox.isolated(),
        }));
        files::write(&tmp.join(files::PROVENANCE), &provenance)?;
        let origin = match &mutation {
            Some(m) => format!("system test `{m}`, made from the seeds by system-level fuzzing"),
            None => format!("seed system test `{seed}`"),
        };
        let summary = summary_md(unit, values, unit_sig, sys, matches_unit, lifted, &reduced, &rstats, subs, source.as_deref(), &self.program, &origin);
        std::fs::write(tmp.join("summary.md"), summary)?;
        crate::files::remove_dir_if_present(&final_dir)?;
        std::fs::rename(&tmp, &final_dir)?;
        self.alarms.insert(
            key.clone(),
            AlarmEntry {
                id,
                function: crash_fn,
                unit_function: Some(unit.function.clone()),
                signature: sys.to_string(),
                key,
                matches_unit,
                source: unit_source(),
                candidates: 1,
                size_lifted: test_size(lifted),
                size_reduced: test_size(&reduced),
                found_at: Some(self.epoch.elapsed().as_secs_f64()),
            },
        );
        self.stats.alarms = self.alarms.len();
        self.write_index()
    }

    /// Write `alarms.json` and `lift.json` (atomically: a reader never sees half).
    pub fn write_index(&self) -> Result<()> {
        files::write(&self.out.join(files::ALARMS), &AlarmList { alarms: self.alarms.values().cloned().collect() })?;
        files::write(&self.out.join(files::LIFT), &self.stats)
    }
}

fn fnv32(s: &str) -> u32 {
    let mut h: u32 = 0x811c9dc5;
    for b in s.bytes() {
        h ^= b as u32;
        h = h.wrapping_mul(0x01000193);
    }
    h
}

/// Raw fuzzer inputs in `dir` (not hidden files, not the JSON descriptions).
fn inputs_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Ok(Vec::new()) };
    let mut out: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            p.is_file() && !name.starts_with('.') && !name.ends_with(".json") && !name.ends_with(".metadata") && !name.ends_with(".lafl_lock")
        })
        .collect();
    out.sort();
    Ok(out)
}

/// The edge indices a unit fuzzer's queue entry reached, from the metadata LibAFL
/// keeps beside it (`.NAME_N.metadata`, MapIndexesMetadata); `None` if there is none.
/// `metadata` lists the metadata files of the entry's directory (read once per queue).
fn entry_edges(input: &Path, metadata: &[PathBuf]) -> Option<Vec<usize>> {
    let name = input.file_name()?.to_str()?;
    let meta = metadata.iter().find(|p| {
        p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.strip_prefix('.').and_then(|n| n.strip_prefix(name)).is_some_and(|r| r.starts_with(['_', '.'])))
    })?;
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(meta).ok()?).ok()?;
    // The map's keys are type ids; the entry with a `list` and a `tcref` is the
    // indexes metadata.
    v.get("metadata")?.get("map")?.as_object()?.values().find_map(|e| {
        let m = e.get(1)?;
        m.get("tcref")?;
        m.get("list")?.as_array()?.iter().map(|i| i.as_u64().map(|i| i as usize)).collect()
    })
}

/// The queue entries that reach an edge neither `covered` (the system fuzzer's) nor
/// the unit's own starting point holds, those reaching more of them first; entries
/// whose edges are unknown are kept, after those. The starting point is what the
/// recorded values reach (the queue entry equal to the dry run's input, `seed`) and
/// what every entry reaches: edges a replayed context takes whatever the values
/// (the harness's own way into the function) say nothing about the system.
fn beyond_system_edges(queue: Vec<PathBuf>, covered: &[bool], seed: Option<&[u8]>) -> Vec<(PathBuf, Option<Vec<usize>>)> {
    let mut known: Vec<(PathBuf, Vec<usize>)> = Vec::new();
    let mut unknown = Vec::new();
    let metadata: Vec<PathBuf> = match queue.first().and_then(|p| p.parent()).and_then(|d| std::fs::read_dir(d).ok()) {
        Some(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with('.') && n.ends_with(".metadata")))
            .collect(),
        None => Vec::new(),
    };
    for input in queue {
        match entry_edges(&input, &metadata) {
            Some(edges) => known.push((input, edges)),
            None => unknown.push(input),
        }
    }
    let mut start: BTreeSet<usize> = match known.split_first() {
        Some(((_, first), rest)) => {
            let mut all: BTreeSet<usize> = first.iter().copied().collect();
            for (_, e) in rest {
                let e: BTreeSet<usize> = e.iter().copied().collect();
                all.retain(|i| e.contains(i));
            }
            all
        }
        None => BTreeSet::new(),
    };
    if let Some(seed) = seed {
        if let Some((_, e)) = known.iter().find(|(p, _)| std::fs::read(p).is_ok_and(|b| b == seed)) {
            start.extend(e.iter().copied());
        }
    }
    let mut ranked: Vec<(Vec<usize>, PathBuf)> = known
        .into_iter()
        .filter_map(|(input, edges)| {
            let new: Vec<usize> =
                edges.into_iter().filter(|&i| !covered.get(i).copied().unwrap_or(false) && !start.contains(&i)).collect();
            (!new.is_empty()).then_some((new, input))
        })
        .collect();
    ranked.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.1.cmp(&b.1)));
    // Entries that reach the same new edges mostly lift to the same system
    // behaviour: a few of each kind.
    let mut per_kind: BTreeMap<Vec<usize>, usize> = BTreeMap::new();
    ranked
        .into_iter()
        .filter(|(new, _)| {
            let n = per_kind.entry(new.clone()).or_default();
            *n += 1;
            *n <= LIFTS_PER_NEW_EDGES
        })
        .map(|(new, p)| (p, Some(new)))
        .chain(unknown.into_iter().map(|p| (p, None)))
        .collect()
}

fn describe_values(unit: &Unit, values: &[ParamValue]) -> Vec<String> {
    unit.params.iter().zip(values).map(|(p, v)| trestle_unit_fuzz::describe(p, v)).collect()
}

/// The text a value takes in the system input: bytes as they are, integers in
/// decimal, cut to the width the function sees.
fn value_text(kind: ParamKind, v: &ParamValue) -> Vec<u8> {
    match (v, kind) {
        (ParamValue::Bytes(b), _) => b.clone(),
        (ParamValue::Int(i), ParamKind::Int { bits }) if bits < 64 => {
            let shift = 64 - bits as u32;
            ((i << shift) >> shift).to_string().into_bytes()
        }
        (ParamValue::Int(i), _) => i.to_string().into_bytes(),
    }
}

/// The lifted system tests for `values`: every changed parameter at all its places,
/// then, for a parameter found at several places, each place alone. At most 16.
pub fn lift_variants(unit: &Unit, values: &[ParamValue]) -> Vec<(SystemTest, Vec<Substitution>)> {
    let changed: Vec<(usize, Vec<u8>)> = unit
        .params
        .iter()
        .zip(values)
        .enumerate()
        .filter(|(_, (p, v))| **v != original_value(p))
        .map(|(i, (p, v))| (i, value_text(p.kind, v)))
        .filter(|(i, text)| *text != unit.params[*i].original)
        .collect();
    if changed.is_empty() {
        return Vec::new();
    }
    let all: Vec<(usize, Origin, Vec<u8>)> = changed
        .iter()
        .flat_map(|(i, text)| unit.params[*i].origins.iter().map(move |o| (*i, o.clone(), text.clone())))
        .collect();
    let mut plans = vec![all.clone()];
    for (i, _) in &changed {
        let origins = &unit.params[*i].origins;
        if origins.len() > 1 {
            for keep in origins {
                plans.push(all.iter().filter(|(j, o, _)| j != i || o == keep).cloned().collect());
            }
        }
    }
    // A value of bytes the recorded text never had (a key of 0xff bytes, say) often
    // crashed the unit for another property (its length) that text keeps: try it
    // with those bytes made letters too.
    let printable = |b: &u8| b.is_ascii_graphic() || *b == b' ' || *b == b'\n' || *b == b'\t';
    let texty: Vec<(usize, Origin, Vec<u8>)> = all
        .iter()
        .map(|(i, o, text)| {
            let recorded_text = unit.params[*i].original.iter().all(printable);
            let t = if recorded_text { text.iter().map(|b| if printable(b) { *b } else { b'a' }).collect() } else { text.clone() };
            (*i, o.clone(), t)
        })
        .collect();
    if texty != all {
        plans.insert(1, texty);
    }
    let mut out: Vec<(SystemTest, Vec<Substitution>)> = Vec::new();
    for plan in plans {
        let (t, subs) = apply(&unit.system_test, &plan);
        if !out.iter().any(|(u, _)| *u == t) {
            out.push((t, subs));
        }
        if out.len() >= 16 {
            break;
        }
    }
    out
}

/// One planned write: the parameter's index, where its value came from in the
/// system input, and the new bytes.
type PlannedWrite = (usize, Origin, Vec<u8>);

/// Write each value over its origin; later (higher) offsets first so earlier ones stay
/// valid; an origin overlapping one already written is skipped.
fn apply(test: &SystemTest, plan: &[PlannedWrite]) -> (SystemTest, Vec<Substitution>) {
    let mut by_input: BTreeMap<InputRef, Vec<&PlannedWrite>> = BTreeMap::new();
    for s in plan {
        by_input.entry(s.1.input.clone()).or_default().push(s);
    }
    let mut t = test.clone();
    let mut subs = Vec::new();
    for (input, mut list) in by_input {
        list.sort_by(|a, b| b.1.offset.cmp(&a.1.offset).then(b.1.len.cmp(&a.1.len)));
        let mut bytes: Vec<u8> = match &input {
            InputRef::Arg(i) => t.args.get(*i as usize).map(|a| a.as_bytes().to_vec()).unwrap_or_default(),
            InputRef::Stdin => t.stdin.clone().unwrap_or_default(),
            InputRef::File(n) => t.files.get(n).cloned().unwrap_or_default(),
        };
        let mut floor = u64::MAX;
        for (param, o, text) in list {
            let end = o.offset + o.len;
            if end > bytes.len() as u64 || end > floor {
                continue;
            }
            let old = bytes[o.offset as usize..end as usize].to_vec();
            bytes.splice(o.offset as usize..end as usize, text.iter().copied());
            floor = o.offset;
            subs.push(Substitution {
                param: *param,
                input: input.to_string(),
                offset: o.offset,
                old: String::from_utf8_lossy(&old).into_owned(),
                new: String::from_utf8_lossy(text).into_owned(),
            });
        }
        match &input {
            InputRef::Arg(i) => {
                // An argument is a C string: it ends at the first NUL.
                let cut = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
                if let Some(a) = t.args.get_mut(*i as usize) {
                    *a = String::from_utf8_lossy(&bytes[..cut]).into_owned();
                }
            }
            InputRef::Stdin => t.stdin = Some(bytes),
            InputRef::File(n) => {
                t.files.insert(n.clone(), bytes);
            }
        }
    }
    (t, subs)
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A shell script that recreates the test's files and runs the program on it.
fn write_script(path: &Path, program: &Path, t: &SystemTest) -> Result<()> {
    use base64::Engine as _;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let mut s = String::from("#!/bin/sh\n# Reproduce this alarm: runs the program on the reduced system test in a fresh directory.\n");
    s += &format!("PROGRAM=\"${{1:-{}}}\"\n", program.display());
    s += "W=$(mktemp -d)\ntrap 'rm -rf \"$W\"' EXIT\n";
    for (name, bytes) in &t.files {
        if let Some(parent) = Path::new(name).parent().filter(|p| !p.as_os_str().is_empty()) {
            s += &format!("mkdir -p \"$W\"/{}\n", shell_quote(&parent.display().to_string()));
        }
        s += &format!("printf '%s' {} | base64 -d > \"$W\"/{}\n", shell_quote(&b64(bytes)), shell_quote(name));
    }
    s += &format!("printf '%s' {} | base64 -d > \"$W/.stdin\"\n", shell_quote(&b64(t.stdin.as_deref().unwrap_or_default())));
    s += "cd \"$W\" && env";
    for (k, v) in &t.env {
        s += &format!(" {}", shell_quote(&format!("{k}={v}")));
    }
    s += " \"$PROGRAM\"";
    for a in &t.args {
        s += &format!(" {}", shell_quote(a));
    }
    s += " < .stdin\nstatus=$?\necho \"exit status $status\" >&2\nexit $status\n";
    std::fs::write(path, s).with_context(|| format!("cannot write {}", path.display()))?;
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

fn show_test(t: &SystemTest) -> String {
    let mut s = String::new();
    s += &format!("- args: `{}`\n", t.args.iter().map(|a| shell_quote(a)).collect::<Vec<_>>().join(" "));
    if let Some(stdin) = t.stdin.as_ref().filter(|s| !s.is_empty()) {
        let text = String::from_utf8_lossy(stdin);
        let shown: String = text.chars().take(400).collect();
        s += &format!("- stdin ({} bytes):\n\n```\n{}{}\n```\n", stdin.len(), shown, if text.chars().count() > 400 { "…" } else { "" });
    }
    for (k, v) in &t.files {
        s += &format!("- file `{k}`: {} bytes\n", v.len());
    }
    for (k, v) in &t.env {
        s += &format!("- env `{k}={v}`\n");
    }
    s
}

#[allow(clippy::too_many_arguments)]
fn summary_md(
    unit: &Unit,
    values: &[ParamValue],
    unit_sig: Option<&CrashSignature>,
    sys: &CrashSignature,
    matches_unit: bool,
    lifted: &SystemTest,
    reduced: &SystemTest,
    rstats: &ReduceStats,
    subs: &[Substitution],
    source: Option<&str>,
    program: &Path,
    origin: &str,
) -> String {
    let place = sys.frames.first().map_or(unit.function.as_str(), String::as_str);
    let mut s = if place == unit.function {
        format!("# Alarm in `{place}`\n\n")
    } else {
        format!("# Alarm in `{place}` (found through a unit of `{}`)\n\n", unit.function)
    };
    s += &format!("**{}** when running `{}`", sys, program.display());
    s += if matches_unit { " — the same crash as the unit's (a true alarm).\n\n" } else { " — a real crash, but not the one the unit showed.\n\n" };
    s += "## Stack (system level)\n\n";
    for f in sys.stack.iter().take(12) {
        s += &format!("- {f}\n");
    }
    s += "\n## Reduced reproducer (`reduced.json`, run `./reproduce.sh`)\n\n";
    s += &show_test(reduced);
    s += &format!("\nReduced from {} to {} bytes in {} runs.\n\n", rstats.size_before, rstats.size_after, rstats.runs);
    s += "## Provenance\n\n";
    s += &format!("1. {origin}\n");
    s += &format!(
        "2. carved invocation: `{}` (call #{} in that run{})\n",
        unit.function,
        unit.provenance.call_index,
        source.map(|x| format!(", defined at {x}")).unwrap_or_default()
    );
    s += &format!(
        "3. unit input: {}{}\n",
        describe_values(unit, values).join(", "),
        unit_sig.map(|u| format!(" — crashed the unit: {u}")).unwrap_or_default()
    );
    s += "4. lifted system test (`lifted.json`):";
    for sub in subs {
        s += &format!(" {} at byte {}: {:?} → {:?};", sub.input, sub.offset, sub.old, sub.new);
    }
    s += "\n\n";
    s += &show_test(lifted);
    s += "5. reduced system test (`reduced.json`), above.\n\n";
    s += "The unit as a standalone C test: `unit.c`; `./build.sh SUBJECT.c` (or the subject's .o files) builds it.\n";
    s
}

/// Run `trestle lift`.
pub fn run(args: &Options) -> Result<LiftStats> {
    let limits = Limits { wall: args.timeout, cpu_secs: cpu_limit(args.timeout), memory: args.memory_mb << 20, ..Limits::default() };
    let sandbox = Sandbox::new(limits, !args.no_sandbox)?;
    if Binary::load(&args.program).is_ok() {
        eprintln!(
            "trestle lift: warning: {} was built with trestle-cc; validate with a build without it (plain, sanitizer or coverage)",
            args.program.display()
        );
    }
    let mut baseline = Vec::new();
    if let Some(seeds) = &args.seeds {
        baseline.extend(load_tests(seeds)?.into_iter().map(|n| n.test));
    } else {
        for d in &args.fuzz_dirs {
            if let Ok(u) = read_unit(&d.join("unit.unit")) {
                baseline.push(u.system_test);
            }
        }
    }
    let mut lifter = Lifter::new(&args.program, &args.out, sandbox, &baseline, !args.json)?;
    lifter.set_reduce_budget((!args.no_reduce).then_some(args.reduce_budget));
    lifter.set_reduce_time(args.reduce_time);
    lifter.set_harness(args.harness.clone());
    for d in &args.fuzz_dirs {
        lifter.lift_dir(d, args.max_queue)?;
    }
    let s = lifter.stats.clone();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({"stats": s, "alarms": lifter.alarms()}))?);
    } else {
        eprintln!(
            "lifted {} unit crash(es) and {} queue input(s) into {} system test(s): {} true alarm(s) ({} distinct), {} effective ({:.1}% productive), {} false positive(s) suppressed{}",
            s.unit_crashes,
            s.unit_queue,
            s.lifted_tests,
            s.true_alarm_tests,
            lifter.alarms().iter().filter(|a| a.matches_unit).count(),
            s.effective,
            100.0 * s.productive_share(),
            s.false_positives,
            if s.coverage_measured { String::new() } else { " (coverage not measured: not a coverage build)".into() }
        );
        for a in lifter.alarms() {
            eprintln!("  alarm {}: {}", args.out.join("alarms").join(&a.id).display(), a.signature);
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use trestle_abi::unit::{Param, ParamSite};

    /// A queue entry as LibAFL leaves it: the input, and beside it a metadata file
    /// whose indexes entry lists the edges the input reached.
    fn entry(dir: &Path, name: &str, bytes: &[u8], edges: &[usize]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        let meta = serde_json::json!({"metadata": {"map": {"1234": [1234, {"list": edges, "tcref": 0}]}}, "executions": 0});
        std::fs::write(dir.join(format!(".{name}_1.metadata")), meta.to_string()).unwrap();
        p
    }

    #[test]
    fn only_queue_entries_reaching_edges_new_to_the_system_are_lifted_richest_first() {
        let d = tempfile::tempdir().unwrap();
        let seed = entry(d.path(), "seed", b"s", &[1, 2, 9]);
        // 9: every entry reaches it (the harness's way in); 7: the system reached it.
        let old = entry(d.path(), "old", b"o", &[1, 7, 9]);
        let one = entry(d.path(), "one", b"a", &[1, 3, 9]);
        let two = entry(d.path(), "two", b"b", &[3, 4, 9]);
        let same = [entry(d.path(), "same1", b"c", &[3, 9]), entry(d.path(), "same2", b"d", &[3, 9])];
        let unknown = d.path().join("unknown");
        std::fs::write(&unknown, b"u").unwrap();
        let mut covered = vec![false; 16];
        covered[7] = true;
        let all = vec![seed, old, one.clone(), two.clone(), same[0].clone(), same[1].clone(), unknown.clone()];
        let picked: Vec<PathBuf> = beyond_system_edges(all, &covered, Some(b"s")).into_iter().map(|(p, _)| p).collect();
        // two reaches 3 and 4; one, same1 and same2 reach only 3: two of those.
        assert_eq!(picked, vec![two, one, same[0].clone(), unknown]);
    }


    fn unit_with(params: Vec<Param>, test: SystemTest) -> Unit {
        Unit {
            magic: trestle_abi::unit::UNIT_MAGIC,
            version: trestle_abi::unit::UNIT_VERSION,
            binary_id: 1,
            function: "f".into(),
            context: trestle_abi::Context { fn_id: 1, args: vec![], graph: Default::default(), locale: vec![], stdio_modes: vec![], fds: vec![], streams: vec![] },
            expected: None,
            provenance: trestle_abi::unit::Provenance {
                program: "/p".into(),
                test: "seed".into(),
                trace: "t".into(),
                pid: 1,
                seq: 0,
                call_index: 0,
            },
            system_test: test,
            params,
        }
    }

    fn origin(input: InputRef, offset: u64, len: u64) -> Origin {
        Origin { input, offset, len }
    }

    #[test]
    fn a_stream_value_replaces_the_unread_rest_and_keeps_the_consumed_prefix() {
        let input = b"set ab 5\nget ab\nlist\n".to_vec();
        let test = SystemTest { stdin: Some(input.clone()), ..Default::default() };
        let number = Param {
            site: ParamSite::Memory { extent: 0, offset: 7, len: 1 },
            kind: ParamKind::Decimal { nul: true, resize: trestle_abi::unit::Resize::Token },
            original: b"5".to_vec(),
            origins: vec![origin(InputRef::Stdin, 7, 1)],
            companions: vec![],
        };
        let stream = Param {
            site: ParamSite::Stream { fd: 0, file: None, buffered: true },
            kind: ParamKind::Stream { cut: 0 },
            original: input[9..].to_vec(),
            origins: vec![origin(InputRef::Stdin, 9, 12)],
            companions: vec![],
        };
        let unit = unit_with(vec![number, stream], test);
        let v = lift_variants(&unit, &[ParamValue::Int(90210), ParamValue::Bytes(b"swap ab zz\n".to_vec())]);
        // The number is written in decimal, the consumed prefix is kept byte for
        // byte, and the new rest follows it.
        assert_eq!(v[0].0.stdin.as_deref().unwrap(), b"set ab 90210\nswap ab zz\n");
        let only_stream = lift_variants(&unit, &[ParamValue::Int(5), ParamValue::Bytes(b"".to_vec())]);
        assert_eq!(only_stream[0].0.stdin.as_deref().unwrap(), &input[..9]);
    }

    #[test]
    fn values_go_back_where_they_came_from() {
        let test = SystemTest {
            args: vec!["set".into(), "7".into(), "12".into()],
            stdin: Some(b"login guest pw\nlogin guest x\n".to_vec()),
            ..Default::default()
        };
        let int = Param {
            site: ParamSite::Arg(1),
            kind: ParamKind::Int { bits: 64 },
            original: b"12".to_vec(),
            origins: vec![origin(InputRef::Arg(2), 0, 2)],
            companions: vec![],
        };
        let user = Param {
            site: ParamSite::Arg(0),
            kind: ParamKind::Bytes { nul: true, resize: trestle_abi::unit::Resize::Extent },
            original: b"guest".to_vec(),
            origins: vec![origin(InputRef::Stdin, 6, 5), origin(InputRef::Stdin, 21, 5)],
            companions: vec![],
        };
        let unit = unit_with(vec![int, user], test);
        let v = lift_variants(&unit, &[ParamValue::Int(42342531), ParamValue::Bytes(b"admin".to_vec())]);
        // All places, then each place of the ambiguous user name alone.
        assert_eq!(v.len(), 3);
        assert_eq!(v[0].0.args, vec!["set", "7", "42342531"]);
        assert_eq!(v[0].0.stdin.as_deref().unwrap(), b"login admin pw\nlogin admin x\n");
        assert_eq!(v[1].0.stdin.as_deref().unwrap(), b"login admin pw\nlogin guest x\n");
        assert_eq!(v[2].0.stdin.as_deref().unwrap(), b"login guest pw\nlogin admin x\n");
        assert!(v.iter().all(|(t, _)| t.args[2] == "42342531"));
        // Unchanged values lift to nothing.
        assert!(lift_variants(&unit, &[ParamValue::Int(12), ParamValue::Bytes(b"guest".to_vec())]).is_empty());
    }

    #[test]
    fn integers_are_written_as_the_function_sees_them() {
        let p = Param {
            site: ParamSite::Arg(0),
            kind: ParamKind::Int { bits: 32 },
            original: b"5".to_vec(),
            origins: vec![origin(InputRef::Arg(0), 0, 1)],
            companions: vec![],
        };
        let unit = unit_with(vec![p], SystemTest { args: vec!["5".into()], ..Default::default() });
        let v = lift_variants(&unit, &[ParamValue::Int(0xffff_ffff)]);
        assert_eq!(v[0].0.args, vec!["-1"]);
    }
}

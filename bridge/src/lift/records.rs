//! What lifting writes about each finding: its figures (`lift.json`), the alarm list,
//! an alarm's provenance and a false positive's reason, as typed values (written and
//! read with [`trestle_exec::files`]).

use crate::validate::reduce::ReduceStats;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use trestle_exec::signature::{CrashSignature, Frame};
use trestle_exec::systest::JsonTest;

/// What lifting found, as in the paper's tables 4 and 5.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LiftStats {
    /// Unit inputs that crashed the unit.
    pub unit_crashes: usize,
    /// Unit inputs that ran past the unit's time limit (its `timeouts/`, lifted
    /// like queue entries, a few per unit: at system level such a run often
    /// crashes), and objectives among the crashes that hang when run alone (not
    /// lifted).
    #[serde(default)]
    pub unit_hangs: usize,
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
    /// [`super::LIFTS_PER_NEW_EDGES`] entries reaching the same new edges were lifted.
    #[serde(default)]
    pub queue_already_covered: usize,
    /// Queue entries whose LibAFL metadata was there but could not be read, so
    /// they were lifted without ranking (a LibAFL format change shows here).
    #[serde(default)]
    pub queue_metadata_unreadable: usize,
    /// Lifted tests a run on the fuzzing build settled ([`super::Probe`]): no crash
    /// there, so no run on the validation build.
    #[serde(default)]
    pub settled_by_probe: usize,
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
#[derive(Debug, Clone, Serialize, Deserialize)]
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
    /// Whether its reduction is still to come (`reduced.json` is then the test as
    /// found): a campaign reduces alarms once its fuzzing budget is spent.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reduction_pending: bool,
    /// The worker that found it, in a campaign across machines (`None`: the main
    /// node, or a campaign on one machine).
    #[serde(default)]
    pub found_on: Option<String>,
    /// The roadblock (`file:line`) whose unit slice found it; `None` for the system
    /// fuzzer's finds and for units fuzzed elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roadblock: Option<String>,
    /// For a find of the system fuzzer: the lifted test its test descends from by
    /// mutation (the unit, its roadblock, how many mutations on); `None` for one
    /// that descends from the seeds alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub descends_from: Option<trestle_sysfuzz::Descent>,
    /// How its test ran on each build of the program the campaign knows, the one that
    /// confirmed it first ([`AlarmEntry::build_dependent`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub builds: Vec<BuildCheck>,
}

impl AlarmEntry {
    /// Whether some build of the program does not crash (or hang) on the alarm's test
    /// the way the validation build does: the crash depends on how the program was
    /// built (optimisation, instrumentation), as undefined behaviour often does.
    pub fn build_dependent(&self) -> bool {
        self.builds.iter().any(|b| !b.reproduces)
    }

    /// The build it was confirmed (and is reduced) on: the validation build, or the
    /// coverage build where the validation build did not reproduce it; `None` when
    /// no build was checked.
    pub fn confirmed_on(&self) -> Option<&std::path::Path> {
        ["validation", "coverage"]
            .iter()
            .find_map(|role| self.builds.iter().find(|b| b.role == *role && b.reproduces))
            .map(|b| b.program.as_path())
    }

    /// The builds it does not reproduce on, by role (`fuzzing`, `coverage`), for people.
    pub fn builds_without(&self) -> Vec<&str> {
        self.builds
            .iter()
            .filter(|b| !b.reproduces)
            .map(|b| b.role.as_str())
            .collect()
    }
}

/// How an alarm's test ran on one build of the program.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BuildCheck {
    /// The build's role: `validation` (it confirmed the alarm), `fuzzing` (the
    /// trestle-cc build the fuzzers ran), `coverage` (the build that measures
    /// coverage), or a name the user gave.
    pub role: String,
    /// The program file.
    pub program: PathBuf,
    /// Whether it crashed there the same way (same crash class), or hung.
    pub reproduces: bool,
    /// How it ended there: the crash, or the exit status.
    pub ended: String,
}

pub(super) fn unit_source() -> String {
    "unit".into()
}

/// A substitution made by lifting.
#[derive(Debug, Clone, Serialize, Deserialize)]
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

/// How a lifted test went at system level.
#[derive(Debug, Clone, Serialize, Deserialize)]
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

/// `alarms.json`: the distinct true alarms, by id.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AlarmList {
    /// The alarms.
    pub alarms: Vec<AlarmEntry>,
}

/// `provenance.json` of an alarm: the chain from a seed to the crash, so that a user
/// can see why it is real.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "found_by")]
pub enum Provenance {
    /// Found by the system fuzzer directly.
    #[serde(rename = "system-level fuzzing")]
    System(Box<SystemFind>),
    /// Found by fuzzing a carved unit and lifted into a system test.
    #[serde(rename = "unit fuzzing, lifted")]
    Lifted(Box<LiftedFind>),
}

impl Provenance {
    /// The reduced reproducer's record.
    pub fn reduced_test_mut(&mut self) -> &mut ReducedTest {
        match self {
            Provenance::System(f) => &mut f.reduced_test,
            Provenance::Lifted(f) => &mut f.reduced_test,
        }
    }
}

/// A crash the system fuzzer found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SystemFind {
    /// The system test that crashed.
    pub system_test: FoundTest,
    /// The system-level crash.
    pub signature: String,
    /// Its stack, innermost first.
    pub stack: Vec<String>,
    /// The same stack as frames (function, file, line, module, whether the subject's
    /// own); empty in alarms written before trestle recorded it.
    #[serde(default)]
    pub frames: Vec<Frame>,
    /// The reduced reproducer.
    pub reduced_test: ReducedTest,
    /// The program that confirmed it.
    pub validated_with: PathBuf,
    /// Whether it ran in the sandbox.
    pub sandboxed: bool,
    /// The worker whose system fuzzer found it (`None`: this machine's).
    #[serde(default)]
    pub found_on: Option<String>,
    /// Where it came from when not from trestle's system fuzzer (`trestle triage`
    /// of another fuzzer's crashes: "an AFL++ crash", ...). Not named `found_by`:
    /// that key says which kind of provenance this is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triaged_from: Option<String>,
}

/// A system test the system fuzzer wrote.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FoundTest {
    /// Its name in the fuzzer's output.
    pub name: String,
    /// Its file.
    pub file: PathBuf,
    /// The test.
    pub test: JsonTest,
}

/// A unit finding lifted into a system test that crashed the program.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LiftedFind {
    /// The seed system test the unit's context comes from (or that the system test
    /// was made from).
    pub seed_test: String,
    /// The system fuzzer's test the unit was carved from, when not a seed.
    pub system_mutation: Option<String>,
    /// The system test the unit was carved from.
    pub system_test: CarvedFrom,
    /// The carved invocation.
    pub carved_invocation: CarvedInvocation,
    /// The unit fuzzer's input.
    pub unit_input: UnitInput,
    /// The lifted system test.
    pub lifted_test: LiftedTest,
    /// The reduced reproducer.
    pub reduced_test: ReducedTest,
    /// The program that confirmed it.
    pub validated_with: PathBuf,
    /// Whether it ran in the sandbox.
    pub sandboxed: bool,
    /// The worker that fuzzed the unit (`None`: this machine).
    #[serde(default)]
    pub found_on: Option<String>,
}

/// Where a unit was carved.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CarvedFrom {
    /// The system test's name.
    pub name: String,
    /// The test.
    pub test: JsonTest,
    /// The trace file.
    pub trace: String,
    /// The recording process.
    pub pid: u32,
}

/// The invocation a unit replays.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CarvedInvocation {
    /// The function.
    pub function: String,
    /// Which call of it in the recording process.
    pub call_index: u64,
    /// Which carved invocation of the process.
    pub carve_sequence: u64,
    /// `file:line` of the function, when known.
    pub source: Option<String>,
    /// The program it was recorded in.
    pub program: String,
}

/// The unit input that crashed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UnitInput {
    /// The unit fuzzer's output directory.
    pub fuzz_dir: PathBuf,
    /// The input file.
    pub file: PathBuf,
    /// The parameters' values, described.
    pub values: Vec<String>,
    /// The unit-level crash, if it crashed.
    pub signature: Option<String>,
    /// Its stack.
    pub stack: Option<Vec<String>>,
}

/// The lifted system test.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LiftedTest {
    /// Its file in the alarm's directory.
    pub file: String,
    /// What lifting wrote where.
    pub substitutions: Vec<Substitution>,
    /// The system-level crash.
    pub signature: String,
    /// Its stack.
    pub stack: Vec<String>,
    /// The same stack as frames, as in [`SystemFind::frames`].
    #[serde(default)]
    pub frames: Vec<Frame>,
}

/// The reduced reproducer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReducedTest {
    /// Its file in the alarm's directory.
    pub file: String,
    /// What the reduction did.
    pub reduction: ReduceStats,
}

/// `reason.json` of a unit finding that did not hold at system level.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FalsePositive {
    /// The unit's function.
    pub function: String,
    /// Why it is not an alarm.
    pub reason: String,
    /// The unit input.
    pub unit_input: PathBuf,
    /// The parameters' values, described.
    pub values: Vec<String>,
    /// The unit-level crash.
    pub unit_signature: Option<String>,
    /// How the lifted test went, when there was one.
    pub system: Option<SystemOutcome>,
    /// The seed system test behind the unit.
    pub seed_test: String,
}

/// The crash stack as lines.
pub fn stack_lines(sig: &CrashSignature) -> Vec<String> {
    sig.stack.iter().map(|f| f.to_string()).collect()
}

impl Provenance {
    /// The system-level crash's stack as frames, innermost first.
    pub fn frames(&self) -> &[Frame] {
        match self {
            Provenance::System(f) => &f.frames,
            Provenance::Lifted(f) => &f.lifted_test.frames,
        }
    }
}

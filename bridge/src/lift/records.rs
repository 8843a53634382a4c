//! What lifting writes about each finding: the alarm list, an alarm's provenance and
//! a false positive's reason, as typed values (written and read with
//! [`crate::files`]).

use crate::validate::reduce::ReduceStats;
use crate::validate::signature::CrashSignature;
use crate::system::systest::JsonTest;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// `alarms.json`: the distinct true alarms, by id.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AlarmList {
    /// The alarms.
    pub alarms: Vec<super::AlarmEntry>,
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

/// A crash the system fuzzer found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SystemFind {
    /// The system test that crashed.
    pub system_test: FoundTest,
    /// The system-level crash.
    pub signature: String,
    /// Its stack, innermost first.
    pub stack: Vec<String>,
    /// The reduced reproducer.
    pub reduced_test: ReducedTest,
    /// The program that confirmed it.
    pub validated_with: PathBuf,
    /// Whether it ran in the sandbox.
    pub sandboxed: bool,
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
    pub substitutions: Vec<super::Substitution>,
    /// The system-level crash.
    pub signature: String,
    /// Its stack.
    pub stack: Vec<String>,
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
    pub system: Option<super::SystemOutcome>,
    /// The seed system test behind the unit.
    pub seed_test: String,
}

/// The crash stack as lines.
pub fn stack_lines(sig: &CrashSignature) -> Vec<String> {
    sig.stack.iter().map(|f| f.to_string()).collect()
}

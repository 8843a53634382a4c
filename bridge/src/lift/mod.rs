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
//! a C unit test, and written with their provenance under `alarms/<id>/`. A campaign
//! runs each lifted test on its fuzzing build first ([`Probe`]) and reduces its alarms
//! after the fuzzing budget ([`Lifter::reduce_pending`]), so lifting costs the
//! fuzzers as little as it can.
//!
//! The parts: [`Lifter`] (`lifter`) holds the state of one output directory and
//! the system coverage so far; `queue` picks which unit findings to lift and in what
//! order; `substitute` writes values back into a system test; `judge` runs each
//! lifted test and decides what it is; `harness` re-runs a unit finding in the unit
//! harness (its crash signature, the values it needs); `alarms` records alarms and
//! false positives, `summary` the human-readable files of an alarm, `records` the
//! typed files; `run` is the `trestle lift` command.

mod alarms;
mod harness;
mod judge;
mod lifter;
mod queue;
mod records;
mod run;
mod substitute;
mod summary;

pub use judge::LIFTS_PER_UNIT_SIGNATURE;

/// What a lifted test did on the fuzzing build (a campaign's system fuzzer runs it
/// through its forkserver, in about a millisecond, before any run on the
/// validation build).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probed {
    /// It reached coverage new to the system fuzzer, which keeps it.
    NewCoverage,
    /// It crashed, hung or ran past the short limit: the validation build decides.
    Objective,
    /// It ended by itself in time, without a crash, reaching nothing new.
    Nothing,
    /// It is over the fuzzer's bounds (an argument longer than it makes, say): it
    /// would run cut there, as another test. The validation build decides.
    Unfit,
}

/// Runs lifted tests on the fuzzing build first: only one that crashes or hangs
/// there goes on to the validation build (in the sandbox, with coverage measured:
/// a few hundred milliseconds), and one that reaches new coverage is effective at
/// once. A dc campaign spent 18% of its time lifting, almost all of it in those
/// validation runs.
pub trait Probe {
    /// Run `test` on the fuzzing build.
    fn probe(&mut self, test: &trestle_abi::unit::SystemTest) -> anyhow::Result<Probed>;
}
pub use alarms::Confirmed;
pub use lifter::{LiftProgress, Lifter};
pub use queue::LIFTS_PER_NEW_EDGES;
pub use records::{
    AlarmEntry, AlarmList, BuildCheck, FalsePositive, LiftStats, Provenance, Substitution,
    SystemOutcome,
};
pub use run::{run, Options};
pub use substitute::lift_variants;

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
mod store;
mod substitute;
mod summary;

pub use judge::LIFTS_PER_UNIT_SIGNATURE;

/// Where a finding being confirmed or lifted came from, as its alarm tells it.
#[derive(Debug, Clone, Default)]
pub struct Origin {
    /// Another fuzzer's find being triaged, in words; `None`: this campaign's.
    pub found_by: Option<String>,
    /// The worker of a campaign across machines whose find it is; `None`: this
    /// machine's (`found_on`).
    pub node: Option<String>,
    /// The roadblock (`file:line`) the unit lifted was fuzzed at (`roadblock`).
    pub roadblock: Option<String>,
    /// How a system find descends from a test lifted from a unit, as the system
    /// fuzzer's lineage says (`descends_from`).
    pub descent: Option<trestle_sysfuzz::Descent>,
}

pub use alarms::Confirmed;
pub use lifter::{LiftConfig, LiftProgress, Lifter};
pub use queue::LIFTS_PER_NEW_EDGES;
pub use records::{
    AlarmEntry, AlarmList, BuildCheck, FalsePositive, LiftStats, Provenance, Substitution,
    SystemOutcome,
};
pub use run::{run, Lifted, Options};
pub use substitute::lift_variants;
pub use trestle_sysfuzz::{Probe, Probed};

//! Running a lifted test on the fuzzing build before the validation build sees it.

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

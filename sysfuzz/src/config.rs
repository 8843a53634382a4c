//! A system fuzzing campaign's settings.

use std::path::PathBuf;
use std::time::Duration;
use trestle_exec::systest::NamedTest;

/// A system-level fuzzing campaign's settings.
#[derive(Debug, Clone)]
pub struct SysFuzzConfig {
    /// The instrumented program.
    pub program: PathBuf,
    /// Seed system tests: the initial queue.
    pub seeds: Vec<NamedTest>,
    /// Output directory (`queue/`, `crashes/`, `timeouts/`); reloaded if it exists.
    pub out: PathBuf,
    /// Wall-clock limit per execution.
    pub timeout: Duration,
    /// Random seed.
    pub seed: u64,
    /// Tokens to insert ([`crate::dictionary()`]).
    pub dictionary: Vec<Vec<u8>>,
    /// Start the program for every execution even if it could serve them
    /// (measuring what the forkserver saves).
    pub no_forkserver: bool,
    /// Input-to-state replacement from the operands of the program's comparisons
    /// (one extra, tracing execution per picked queue entry).
    pub cmplog: bool,
    /// Address-space limit of each run in bytes (0: none; sanitizer builds reserve
    /// terabytes of shadow memory and take none). Each run also gets a CPU limit a
    /// little under its time limit.
    pub memory: u64,
    /// Run the program inside bubblewrap: the machine read-only, no network (fuzzed
    /// inputs can make a program do anything it can do).
    pub sandbox: bool,
    /// Run the program's lean sibling when `trestle-cc` linked one that belongs to it
    /// ([`crate::lean`]).
    pub lean: bool,
}

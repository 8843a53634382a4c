//! `trestle lift` as a command: its options, and the run that lifts each fuzz
//! directory and prints the summary.

use super::{AlarmEntry, LiftConfig, LiftStats, Lifter};
use crate::carve::units::read_unit;
use anyhow::Result;
use std::path::PathBuf;
use std::time::Duration;
use trestle_exec::binary::Binary;
use trestle_exec::sandbox::{cpu_limit, Limits, Sandbox};
use trestle_exec::systest::load_tests;

/// What one lift runs on and how (the command line's flags, as values: `trestle lift
/// --help` has the user's view).
#[derive(Debug, Clone)]
pub struct Options {
    /// Fuzz directories to lift, each with its `unit.unit`.
    pub fuzz_dirs: Vec<PathBuf>,
    /// The validation build (not trestle-cc's): lifted tests run on it.
    pub program: PathBuf,
    /// Where alarms, false positives and the summaries go.
    pub out: PathBuf,
    /// Tests whose coverage is the baseline for "effective"; `None` for the units'
    /// own system tests.
    pub seeds: Option<PathBuf>,
    /// The trestle-cc build unit findings are signed in; `None` for each unit's own.
    pub harness: Option<PathBuf>,
    /// Upper bound of one system run's wall clock.
    pub timeout: Duration,
    /// Address-space limit of a system run in MiB; ignored for sanitizer builds.
    pub memory_mb: u64,
    /// Queue entries lifted per fuzz directory besides its crashes.
    pub max_queue: usize,
    /// Runs one reduction may take.
    pub reduce_budget: usize,
    /// Time one reduction may take.
    pub reduce_time: std::time::Duration,
    /// Keep alarms as found, unreduced.
    pub no_reduce: bool,
    /// Run outside bubblewrap.
    pub no_sandbox: bool,
    /// Say what is being lifted and reduced, as it happens.
    pub progress: bool,
}

/// What `trestle lift` did: its figures and the distinct true alarms.
#[derive(Debug)]
pub struct Lifted {
    /// Lifting figures.
    pub stats: LiftStats,
    /// The distinct true alarms.
    pub alarms: Vec<AlarmEntry>,
}

/// Run `trestle lift`.
pub fn run(args: &Options) -> Result<Lifted> {
    let limits = Limits {
        wall: args.timeout,
        cpu_secs: cpu_limit(args.timeout),
        memory: args.memory_mb << 20,
        ..Limits::default()
    };
    let sandbox = Sandbox::new(limits, !args.no_sandbox)?;
    if Binary::load(&args.program).is_ok() {
        log::info!(
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
    let config = LiftConfig {
        progress: args.progress,
        reduce_budget: (!args.no_reduce).then_some(args.reduce_budget),
        reduce_time: args.reduce_time,
        harness: args.harness.clone(),
        ..LiftConfig::new(&args.program, sandbox)
    };
    let mut lifter = Lifter::new(config, &args.out, &baseline)?;
    for d in &args.fuzz_dirs {
        lifter.lift_dir(d, args.max_queue, &super::Origin::default(), None)?;
    }
    Ok(Lifted {
        stats: lifter.stats.clone(),
        alarms: lifter.alarms(),
    })
}

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

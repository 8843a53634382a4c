//! `trestle sysfuzz`: its options ([`Options`]), one campaign of system fuzzing alone
//! ([`run`]) and what it did ([`SysFuzzReport`]), for the command line to print.

use anyhow::Result;
use serde::Serialize;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use trestle_exec::binary::Binary;
use trestle_exec::systest;
use trestle_sysfuzz::{dictionary, SysFuzzConfig, SysFuzzer};

/// What one system-fuzzing campaign runs on and how (the command line's flags, as
/// values: see `trestle sysfuzz --help` for the user's view).
#[derive(Debug)]
pub struct Options {
    /// The trestle-cc build; its lean sibling is run unless `no_lean`.
    pub program: PathBuf,
    /// Where the seed tests are read from (one file or a directory).
    pub seeds: PathBuf,
    /// Fuzzing time after the initial corpus.
    pub time: Duration,
    /// The fuzzer's directory; one that exists is resumed.
    pub out: PathBuf,
    /// Upper bound of one run's wall clock (the calibrated limit stays under it).
    pub timeout: Duration,
    /// Seed of the fuzzer's random numbers.
    pub seed: u64,
    /// Return at the first crash.
    pub stop_on_crash: bool,
    /// Leave the dictionary (the binary's literals and constants) empty.
    pub no_dict: bool,
    /// Spawn per run instead of the forkserver.
    pub no_forkserver: bool,
    /// Turn off the CmpLog stage.
    pub no_cmplog: bool,
    /// Address-space limit of a run in MiB, 0 for none; ignored for sanitizer builds.
    pub memory_mb: u64,
    /// Core to bind to; `None` picks a free one.
    pub pin: Option<usize>,
    /// Bind to no core.
    pub no_pin: bool,
    /// Run outside bubblewrap.
    pub no_sandbox: bool,
    /// Run the program itself, not its lean sibling.
    pub no_lean: bool,
    /// Run the seeds round-robin without mutating them (the executor's speed).
    pub repeat_seeds: bool,
}

/// What `trestle sysfuzz` did.
#[derive(Debug, Clone, Serialize)]
pub struct SysFuzzReport {
    /// Seed tests given.
    pub seeds: usize,
    /// Queue entries after the initial corpus ran.
    pub initial_queue: usize,
    /// Edges the initial corpus covered.
    pub initial_edges: usize,
    /// Queue entries at the end.
    pub queue: usize,
    /// Edges covered at the end.
    pub edges: usize,
    /// Where fuzzed runs stopped, milliseconds: calibrated from the initial corpus,
    /// at most --timeout (a run stopped with new edges ran again to --timeout).
    pub run_limit_ms: u64,
    /// Fuzzed runs stopped at that limit.
    pub stopped_runs: u64,
    /// Of those, the runs that ran again and ended within --timeout: slow inputs,
    /// neither queue entries nor timeouts (as in AFL++).
    pub slow_runs: u64,
    /// Of those with new edges, the runs not run again to --timeout: such runs had
    /// taken their share of the time (`trestle_sysfuzz::RERUN_SHARE`).
    pub stopped_not_rerun: u64,
    /// Seconds the runs again to --timeout took.
    pub rerun_seconds: f64,
    /// The build it ran: `lean` (the program's lean sibling) or `program`.
    pub build: &'static str,
    /// Why it ran the program itself (empty for the lean build).
    pub build_note: String,
    /// Executions, the initial corpus included.
    pub executions: u64,
    /// Fuzzing time (after the initial corpus), seconds.
    pub seconds: f64,
    /// Executions per second while fuzzing.
    pub execs_per_sec: f64,
    /// Queue entries found while fuzzing.
    pub new_queue: Vec<PathBuf>,
    /// Crashes found.
    pub crashes: Vec<PathBuf>,
    /// Timeouts found.
    pub timeouts: Vec<PathBuf>,
    /// The output directory.
    #[serde(skip)]
    pub out: PathBuf,
}

/// Run `trestle sysfuzz`.
pub fn run(args: &Options) -> Result<SysFuzzReport> {
    let seeds = systest::load_tests(&args.seeds)?;
    let binary = Binary::load(&args.program)?;
    let cfg = SysFuzzConfig {
        program: binary.path.clone(),
        seeds,
        out: args.out.clone(),
        timeout: args.timeout,
        seed: args.seed,
        dictionary: if args.no_dict {
            Vec::new()
        } else {
            dictionary(&binary)
        },
        no_forkserver: args.no_forkserver,
        cmplog: !args.no_cmplog,
        memory: if trestle_exec::sandbox::is_sanitizer_build(&binary.path) {
            0
        } else {
            args.memory_mb << 20
        },
        sandbox: !args.no_sandbox,
        lean: !args.no_lean,
    };
    let n_seeds = cfg.seeds.len();
    let seeds = if args.repeat_seeds {
        cfg.seeds.clone()
    } else {
        Vec::new()
    };
    crate::fuzz::bind_core(args.pin, args.no_pin)?;
    let mut f = SysFuzzer::new(cfg)?;
    let initial = f.take_report()?;
    let (initial_queue, initial_edges, initial_execs) = (f.queue_len(), f.edges(), f.executions());
    let mut report = SysFuzzReport {
        seeds: n_seeds,
        initial_queue,
        initial_edges,
        queue: 0,
        edges: 0,
        run_limit_ms: f.run_limit().as_millis() as u64,
        build: f.build().kind(),
        build_note: match f.build() {
            trestle_sysfuzz::lean::SystemBuild::Program(why) => why.clone(),
            trestle_sysfuzz::lean::SystemBuild::Lean(_) => String::new(),
        },
        stopped_runs: 0,
        slow_runs: 0,
        stopped_not_rerun: 0,
        rerun_seconds: 0.0,
        executions: 0,
        seconds: 0.0,
        execs_per_sec: 0.0,
        new_queue: Vec::new(),
        crashes: initial.new_crashes,
        timeouts: initial.new_timeouts,
        out: f.out().to_path_buf(),
    };
    let start = Instant::now();
    let end = start + args.time;
    if args.repeat_seeds {
        f.repeat_for(&seeds, args.time)?;
    }
    loop {
        let now = Instant::now();
        if args.repeat_seeds || now >= end || (args.stop_on_crash && !report.crashes.is_empty()) {
            break;
        }
        let slice = f.fuzz_for((end - now).min(Duration::from_secs(1)))?;
        report.new_queue.extend(slice.new_queue);
        report.crashes.extend(slice.new_crashes);
        report.timeouts.extend(slice.new_timeouts);
    }
    report.seconds = start.elapsed().as_secs_f64();
    report.queue = f.queue_len();
    report.edges = f.edges();
    report.executions = f.executions();
    let stopped = f.stopped_runs();
    report.stopped_runs = stopped.stopped;
    report.slow_runs = stopped.slow;
    report.stopped_not_rerun = stopped.not_rerun;
    report.rerun_seconds = stopped.rerun_time.as_secs_f64();
    report.execs_per_sec = (report.executions - initial_execs) as f64 / report.seconds.max(1e-9);
    Ok(report)
}

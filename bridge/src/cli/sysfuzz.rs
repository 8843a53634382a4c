//! `trestle sysfuzz`: its command-line arguments.

use super::parse_duration;
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `trestle sysfuzz`.
#[derive(Debug, clap::Args)]
pub struct SysFuzzArgs {
    /// The instrumented program (built with trestle-cc).
    #[arg(long)]
    pub program: PathBuf,
    /// Seed system tests: a JSON file or a directory of them.
    #[arg(long)]
    pub seeds: PathBuf,
    /// How long to fuzz.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub time: Duration,
    /// Output directory (queue/, crashes/, timeouts/); an existing one is resumed.
    #[arg(long)]
    pub out: PathBuf,
    /// Time limit per execution.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Random seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Stop at the first crash.
    #[arg(long)]
    pub stop_on_crash: bool,
    /// Do not insert the program's string literals and compared constants (a blind
    /// baseline).
    #[arg(long)]
    pub no_dict: bool,
    /// Print the report as JSON on stdout: seeds, initial_queue, initial_edges, queue,
    /// edges, executions, seconds, execs_per_sec, new_queue, crashes and timeouts (lists
    /// of system-test files).
    #[arg(long)]
    pub json: bool,
    /// Start the program anew for every execution instead of forking it from a
    /// server at the start of `main` (slower; for comparison and debugging).
    #[arg(long)]
    pub no_forkserver: bool,
    /// No input-to-state replacement (CmpLog): do not run each picked input once more
    /// to log the operands of the program's comparisons.
    #[arg(long)]
    pub no_cmplog: bool,
    /// Address-space limit per execution, MiB (0: none; not applied to sanitizer
    /// builds). Each execution also gets a CPU-time limit just under --timeout.
    #[arg(long, default_value_t = 4096)]
    pub memory_mb: u64,
    /// Run the fuzzer and the program on this core (default: a free one, that no
    /// other fuzzer is bound to; none if all are taken).
    #[arg(long, conflicts_with = "no_pin")]
    pub pin: Option<usize>,
    /// Do not bind to a core.
    #[arg(long)]
    pub no_pin: bool,
    /// Run the program without bubblewrap (by default it sees the machine read-only,
    /// a private /tmp and no network, and writes only in its working directory).
    #[arg(long)]
    pub no_sandbox: bool,
    /// Run the program itself, not the lean build trestle-cc links beside it
    /// (`.NAME.trestle-lean`: the same code with a runtime of a few kilobytes, faster
    /// to fork; used whenever it belongs to the program).
    #[arg(long)]
    pub no_lean: bool,
    /// Do not fuzz: run the seeds round-robin, unmutated, for --time, each as a fuzzed
    /// input runs, and report the executions per second (what an execution costs the
    /// fuzzer apart from mutating; `trestle exec --for` measures the validation
    /// executor instead).
    #[arg(long)]
    pub repeat_seeds: bool,
}

impl SysFuzzArgs {
    /// The stage's options from the command line.
    pub fn options(&self) -> crate::system::sysfuzz::Options {
        crate::system::sysfuzz::Options {
            program: self.program.clone(),
            seeds: self.seeds.clone(),
            time: self.time,
            out: self.out.clone(),
            timeout: self.timeout,
            seed: self.seed,
            stop_on_crash: self.stop_on_crash,
            no_dict: self.no_dict,
            no_forkserver: self.no_forkserver,
            no_cmplog: self.no_cmplog,
            memory_mb: self.memory_mb,
            pin: self.pin,
            no_pin: self.no_pin,
            no_sandbox: self.no_sandbox,
            no_lean: self.no_lean,
            repeat_seeds: self.repeat_seeds,
        }
    }
}

/// Run `trestle sysfuzz` and print what it did: a line, or the report as JSON.
pub fn run(args: &SysFuzzArgs) -> anyhow::Result<()> {
    let report = crate::system::sysfuzz::run(&args.options())?;
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        crate::outln!(
            "{} executions in {:.1}s ({:.0}/s, runs stopped at {} ms: {}, {} of them slow, not hanging, {} not run again for lack of time); queue {} -> {}, edges {} -> {}; {} crash(es), {} timeout(s) in {}",
            report.executions,
            report.seconds,
            report.execs_per_sec,
            report.run_limit_ms,
            report.stopped_runs,
            report.slow_runs,
            report.stopped_not_rerun,
            report.initial_queue,
            report.queue,
            report.initial_edges,
            report.edges,
            report.crashes.len(),
            report.timeouts.len(),
            report.out.display()
        );
    }
    Ok(())
}

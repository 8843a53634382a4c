//! `trestle fuzz`: its command-line arguments.

use super::parse_duration;
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `trestle fuzz`.
#[derive(Debug, clap::Args)]
pub struct FuzzArgs {
    /// A unit file (from `trestle carve`).
    pub unit: PathBuf,
    /// How long to fuzz.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub time: Duration,
    /// Output directory (AFL layout: queue/, crashes/, timeouts/).
    #[arg(long)]
    pub out: PathBuf,
    /// Cores to fuzz on: one fuzzer per core (client i on core i), sharing finds
    /// through LibAFL's launcher and an LLMP broker on a free localhost port.
    #[arg(long, default_value_t = 1)]
    pub cores: usize,
    /// Program to fuzz in (default: the one the unit was carved from).
    #[arg(long)]
    pub program: Option<PathBuf>,
    /// Time limit per execution. In-process, an execution is a hang sooner: after 20
    /// times the recorded values' time (10 ms at least), measured when fuzzing starts
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Random seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Turn CmpLog (input-to-state comparison solving) off.
    #[arg(long)]
    pub no_cmplog: bool,
    /// Stop at the first crash.
    #[arg(long)]
    pub stop_on_crash: bool,
    /// One process per execution instead of a persistent harness that resets the
    /// context between executions (slower, fully isolated).
    #[arg(long)]
    pub fork_per_exec: bool,
    /// Run the fuzzer inside the harness process and call the unit directly, with no
    /// process round trip per execution (much faster; one core). A crash ends just
    /// its execution; a hang restarts the fuzzer from a fork of the restored harness.
    #[arg(long, conflicts_with = "fork_per_exec")]
    pub in_process: bool,
    /// Pin the fuzzer and the harness to this core (default: a free one, that no
    /// other fuzzer is bound to; none if all are taken). Single-core only: with
    /// --cores N, client i runs on core i.
    #[arg(long, conflicts_with = "no_pin")]
    pub pin: Option<usize>,
    /// Do not pin to a core. Single-core only.
    #[arg(long)]
    pub no_pin: bool,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Fuzz to take the direction the unit's recorded values do not take at the
    /// conditional branch on this source line (FILE:LINE): the campaign ends once an
    /// input takes it. In-process, how close the branch's comparison came counts as
    /// progress. The unit must reach the line (`trestle record --reach` carves such units).
    #[arg(long, value_name = "FILE:LINE")]
    pub goal: Option<String>,
    /// With --goal: do not count the comparison's operand distance as progress (to
    /// measure what it adds).
    #[arg(long, requires = "goal")]
    pub no_distance: bool,
    /// With --goal: go on fuzzing this long once the direction is taken (what lies
    /// behind the branch), instead of ending there.
    #[arg(long, requires = "goal", default_value = "0s", value_parser = parse_duration)]
    pub after_goal: Duration,
    /// Start from these system tests too (a directory of them, a system fuzzer's
    /// queue say): each stream parameter takes a test's same input, from where the
    /// recorded call began reading it.
    #[arg(long)]
    pub start_from: Option<PathBuf>,
}

impl FuzzArgs {
    /// The stage's options from the command line.
    pub fn options(&self) -> crate::fuzz::Options {
        crate::fuzz::Options {
            unit: self.unit.clone(),
            time: self.time,
            out: self.out.clone(),
            cores: self.cores,
            program: self.program.clone(),
            timeout: self.timeout,
            seed: self.seed,
            no_cmplog: self.no_cmplog,
            stop_on_crash: self.stop_on_crash,
            fork_per_exec: self.fork_per_exec,
            in_process: self.in_process,
            pin: self.pin,
            no_pin: self.no_pin,
            progress: !self.json,
            goal: self.goal.clone(),
            no_distance: self.no_distance,
            after_goal: self.after_goal,
            start_from: self.start_from.clone(),
        }
    }
}

/// Run `trestle fuzz` and say what it found: a summary on stderr, or the report as
/// JSON on stdout.
pub fn run(args: &FuzzArgs) -> anyhow::Result<()> {
    let f = crate::fuzz::run(&args.options())?;
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&f.report)?);
    } else {
        eprintln!(
            "fuzzed {} for {:.1}s: {} executions ({:.0}/s), {} in queue, {} crash(es), {} timeout(s){}{}",
            f.function,
            f.report.seconds,
            f.report.executions,
            f.report.executions as f64 / f.report.seconds.max(1e-9),
            f.report.corpus,
            f.report.crashes.len(),
            f.report.timeouts.len(),
            f.report.hang_limit_ms.map(|ms| format!(" (hang limit {ms} ms, from the recorded call's time)")).unwrap_or_default(),
            f.report.first_crash_after.map(|t| format!("; first after {t:.1}s")).unwrap_or_default()
        );
        for c in &f.report.crashes {
            eprintln!("  crash: {}", c.display());
        }
        if let Some(loc) = &args.goal {
            match f.report.goal_after {
                Some(t) => eprintln!("took the other direction at {loc} after {t:.1}s"),
                None => eprintln!("never took the other direction at {loc}"),
            }
        }
    }
    Ok(())
}

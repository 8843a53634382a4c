//! `trestle replay`: its command-line arguments.

use super::parse_duration;
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `trestle replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// A unit file or a directory of units.
    pub units: PathBuf,
    /// Compare each replay with the recorded outcome and report fidelity. Exits with
    /// status 1 when any unit is not faithful or cannot be replayed, 0 when all are. A
    /// unit that differs is replayed a second time, with the clock shifted and the
    /// stack moved: words of memory in which the two replays differ too (a seed taken
    /// from the clock, a process id, a stack address) are left out of the comparison.
    #[arg(long)]
    pub check: bool,
    /// Print a machine-readable summary on stdout.
    #[arg(long)]
    pub json: bool,
    /// Program to replay in (default: the one each unit was carved from).
    #[arg(long)]
    pub program: Option<PathBuf>,
    /// Parallel replays (default: one more than the number of cores, so that a core
    /// whose replay thread is reading or judging a unit runs another's replay).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Time limit per replay.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Print every unfaithful unit with the first difference.
    #[arg(long, short)]
    pub verbose: bool,
    /// Write, for every unit that is not faithful, the recorded and the replayed
    /// outcome as JSON into this directory (for diffing by hand).
    #[arg(long)]
    pub dump: Option<PathBuf>,
    /// Units carved from a second recording of the same system tests (`trestle
    /// record` and `carve` run again): what the two recordings of a call disagree on
    /// (a process id, a salt from getrandom, the time, addresses) is left out of that
    /// unit's comparison and counted apart; where they ended differently the unit has
    /// no oracle.
    #[arg(long, value_name = "UNITS")]
    pub twin: Option<PathBuf>,
    /// Start the program afresh for every unit instead of forking each replay from
    /// a copy of it started once (a forkserver in replay mode; a program that does
    /// not serve is started for every unit anyway). Slower; the verdicts are those of
    /// freshly started processes throughout.
    #[arg(long)]
    pub no_forkserver: bool,
}

impl ReplayArgs {
    /// The stage's options from the command line.
    pub fn options(&self) -> crate::replay::Options {
        crate::replay::Options {
            units: self.units.clone(),
            check: self.check,
            progress: !self.json,
            program: self.program.clone(),
            jobs: self.jobs,
            timeout: self.timeout,
            dump: self.dump.clone(),
            twin: self.twin.clone(),
            forkserver: !self.no_forkserver,
        }
    }
}

/// Run `trestle replay` and print its summary: a table (with every unit that is not
/// faithful under `--verbose`, or when not checking), or JSON.
pub fn run(args: &ReplayArgs) -> anyhow::Result<crate::replay::ReplaySummary> {
    let summary = crate::replay::run(&args.options())?;
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        crate::out!(
            "{}",
            crate::replay::table(&summary, args.verbose || !args.check)
        );
    }
    Ok(summary)
}

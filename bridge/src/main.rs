//! `trestle`: carve unit tests out of system tests, replay them, fuzz them and lift
//! what they find back into system tests that the real program confirms. See the
//! README for worked examples and ARCHITECTURE.md for the map of the code.

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use trestle_bridge::{carve, export, fuzz, lift, record, replay, report, run, show, validate};

/// trestle: a test generation bridge for C and C++ programs.
///
/// Typical use: build with trestle-cc, then `record` the seed system tests,
/// `carve` units from the traces, and `replay --check` them.
#[derive(Debug, Parser)]
#[command(
    version,
    about,
    long_about,
    after_help = "Exit status: 0 on success (or nothing found); 1 when the command's \
finding is negative: `replay --check` with a unit that does not replay as recorded \
(or cannot be replayed), `validate` with a test that does not crash (an alarm that \
does not reproduce), `run --fail-on-alarm` that found a true alarm; 2 on bad usage or \
bad input (a missing program, a corrupt trace, unit or campaign file, ...)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The whole bridge in one campaign: system fuzzing, carving, unit fuzzing,
    /// lifting and validation, until the time is up.
    Run(run::RunArgs),
    /// Write a campaign's report (Markdown and HTML, or JSON).
    Report(report::ReportArgs),
    /// Run system tests with recording on; writes traces.
    Record(record::RecordArgs),
    /// Turn traces into unit files (deduplicated).
    Carve(carve::CarveArgs),
    /// Replay units in fresh processes; with --check, report fidelity.
    Replay(replay::ReplayArgs),
    /// Print a unit readably.
    Show(show::ShowArgs),
    /// Fuzz a unit's parameters with LibAFL.
    Fuzz(fuzz::FuzzArgs),
    /// Write unit findings back into system tests, run the real program on them in a
    /// sandbox, and report only the crashes it confirms (reduced, with provenance).
    Lift(lift::LiftArgs),
    /// Run a program on system tests in the sandbox and report crashes and limits
    /// (exit status 1 when a test does not crash: an alarm that does not reproduce).
    Validate(validate::ValidateArgs),
    /// Write a unit as a standalone C file that rebuilds its context and calls the function.
    Export(export::ExportArgs),
    /// Fuzz a program at system level (arguments, stdin, files) from seed system tests.
    Sysfuzz(trestle_bridge::sysfuzz::SysFuzzArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Run(a) => match run::run(a) {
            Ok(o) if a.fail_on_alarm && o.alarms > 0 => return ExitCode::from(1),
            r => r.map(|_| ()),
        },
        Command::Report(a) => report::run(a),
        Command::Record(a) => record::run(a),
        Command::Carve(a) => carve::run(a).and_then(|s| match s.bad_traces {
            0 => Ok(()),
            n => Err(anyhow::anyhow!("{n} trace file(s) could not be read (see the errors above); the units of the others were written")),
        }),
        Command::Replay(a) => match replay::run(a) {
            // The check's finding is negative: some unit did not replay as recorded.
            Ok(s) if a.check && s.faithful + s.no_oracle < s.units => return ExitCode::from(1),
            r => r.map(|_| ()),
        },
        Command::Show(a) => show::run(a),
        Command::Fuzz(a) => fuzz::run(a).map(|_| ()),
        Command::Export(a) => export::run(a),
        Command::Lift(a) => lift::run(a).map(|_| ()),
        // Validation confirms alarms: a test that does not crash is not confirmed.
        Command::Validate(a) => match validate::run(a) {
            Ok(v) if v.crashed < v.tests => return ExitCode::from(1),
            r => r.map(|_| ()),
        },
        Command::Sysfuzz(a) => trestle_bridge::sysfuzz::run(a).map(|_| ()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("trestle: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

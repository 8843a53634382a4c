//! The command line: parses arguments into each stage's typed options, calls the
//! stage, and maps its result to an exit status (0 success, 1 negative finding,
//! 2 bad usage or input). Nothing here does a stage's work.

mod capture;
mod carve;
mod exec;
mod export;
mod fuzz;
mod join;
mod lift;
mod record;
mod replay;
mod report;
mod run;
mod say;
mod show;
mod sysfuzz;
mod triage;
mod validate;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

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
    /// Work for a campaign on another machine (`trestle run --listen HOST:PORT`):
    /// fuzz its units and system tests here and send back what is found.
    Join(join::JoinArgs),
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
    Sysfuzz(sysfuzz::SysFuzzArgs),
    /// Run a program on system tests as trestle runs them (its forkserver when built
    /// with trestle-cc) and print how each run ended, its output sizes and costs; with
    /// --for, how many runs a second the executor makes.
    Exec(exec::ExecArgs),
    /// Sort crashing inputs from any fuzzer (AFL++, libFuzzer, trestle) into bugs:
    /// confirm each on the program as shipped, group by crash class and faulting line,
    /// reduce one per bug (exit status 1 with --fail-on-new when a bug is new).
    Triage(triage::TriageArgs),
    /// Run a project's own tests (`make check`, a script) and turn every run of a
    /// program built with trestle-cc into a system test, checked to replay the same
    /// way outside the suite.
    Capture(capture::CaptureArgs),
}

/// Parse the command line, run the command, and turn its result into the exit status.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    say::install();
    let result = match &cli.command {
        Command::Run(a) => match run::run(a) {
            Ok(alarms) if a.fail_on_alarm && alarms > 0 => return ExitCode::from(1),
            r => r.map(|_| ()),
        },
        Command::Join(a) => crate::cluster::worker::run(&a.options()).map(|_| ()),
        Command::Report(a) => report::run(a),
        Command::Record(a) => crate::record::run(&a.options()),
        Command::Carve(a) => crate::carve::run(&a.options()).and_then(|s| match s.bad_traces {
            0 => Ok(()),
            n => Err(anyhow::anyhow!("{n} trace file(s) could not be read (see the errors above); the units of the others were written")),
        }),
        Command::Replay(a) => match replay::run(a) {
            // The check's finding is negative: some unit did not replay as recorded.
            Ok(s) if a.check && s.faithful + s.no_oracle < s.units => return ExitCode::from(1),
            r => r.map(|_| ()),
        },
        Command::Show(a) => show::run(a),
        Command::Fuzz(a) => fuzz::run(a),
        Command::Export(a) => crate::export::run(&a.options()),
        Command::Lift(a) => lift::run(a),
        // Validation confirms alarms: a test that does not crash is not confirmed.
        Command::Validate(a) => match validate::run(a) {
            Ok(v) if v.crashed < v.tests => return ExitCode::from(1),
            r => r.map(|_| ()),
        },
        Command::Sysfuzz(a) => sysfuzz::run(a),
        Command::Triage(a) => match crate::triage::run(&a.options()) {
            Ok(s) => {
                a.print(&s);
                if a.fail_on_new.is_some() && s.groups.iter().any(|g| g.new) {
                    return ExitCode::from(1);
                }
                Ok(())
            }
            Err(e) => Err(e),
        },
        Command::Capture(a) => crate::capture::run(&a.options()).map(|s| a.print(&s)),
        // Whatever the program's exit status, a test that ran is a success; one the
        // executor could not run makes the input bad.
        Command::Exec(a) => crate::system::exec::run(&a.options(), &mut |t, r| a.print_run(t, r)).and_then(|s| {
            a.print_summary(&s);
            match s.failed {
                0 => Ok(()),
                n => Err(anyhow::anyhow!("{n} of {} test(s) could not be run (see their lines above)", s.tests)),
            }
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("trestle: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Parse a command-line duration: what `humantime` reads (`10s`, `500ms`, `2m`,
/// `1.5h`, `1h 30m`), or a plain number of seconds (`90`, `0.5`), which it would refuse
/// for want of a unit and which scripts and earlier versions pass.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let s = s.trim();
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return s
            .parse::<f64>()
            .ok()
            .and_then(|secs| std::time::Duration::try_from_secs_f64(secs).ok())
            .ok_or_else(|| format!("invalid duration {s:?} (try 10s, 500ms, 2m)"));
    }
    humantime::parse_duration(s)
        .map_err(|e| format!("invalid duration {s:?}: {e} (try 10s, 500ms, 2m)"))
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("0.5").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("15min").unwrap(), Duration::from_secs(900));
        assert_eq!(parse_duration("1h 30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration(" 0s ").unwrap(), Duration::ZERO);
        for bad in ["ten", "", "1..5", "5 parsecs", "-1s"] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.contains(&format!("{:?}", bad.trim())), "{e}");
        }
    }
}

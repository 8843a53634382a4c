//! `trestle run`: its command-line arguments.

use super::parse_duration;
use crate::campaign::{Listen, Session, Settings, Start};
use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `trestle run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// The program, built with trestle-cc.
    #[arg(long, required_unless_present = "resume")]
    pub program: Option<PathBuf>,
    /// Seed system tests: a JSON file or a directory of them.
    #[arg(long, required_unless_present = "resume")]
    pub seeds: Option<PathBuf>,
    /// Time budget of the whole campaign.
    #[arg(long, default_value = "15m", value_parser = parse_duration)]
    pub time: Duration,
    /// Output directory (must not exist or be empty).
    #[arg(long, required_unless_present = "resume")]
    pub out: Option<PathBuf>,
    /// Go on with the campaign in this directory, with its settings, for the time it
    /// has left.
    #[arg(long, conflicts_with_all = ["program", "seeds", "out"])]
    pub resume: Option<PathBuf>,
    /// Cores for unit fuzzing (LibAFL launcher, one client per core).
    #[arg(long, default_value_t = 1)]
    pub cores: usize,
    /// Unit fuzzing through the persistent forkserver (a round trip between fuzzer
    /// and harness per execution) instead of in-process, where the fuzzer runs inside
    /// the harness (`trestle fuzz --in-process`, about ten times the executions).
    /// Implied by --cores above 1.
    #[arg(long)]
    pub forkserver: bool,
    /// Fuzz only units of these functions.
    #[arg(long, num_args = 1..)]
    pub focus: Vec<String>,
    /// Fuzz first the functions whose source lines changed since this git revision
    /// (needs --source).
    #[arg(long, requires = "source")]
    pub changed_since: Option<String>,
    /// The source tree (a git work tree) for --changed-since.
    #[arg(long)]
    pub source: Option<PathBuf>,
    /// The program that confirms findings: every alarm crashes (or hangs) it. Best the
    /// build you ship (without trestle-cc, with -g); a coverage build also decides
    /// "effective" unless --coverage-with names one. Default: the program itself, run
    /// with trestle's runtime passive.
    #[arg(long)]
    pub validate_with: Option<PathBuf>,
    /// A coverage build of the program (clang-19 -g -fprofile-instr-generate
    /// -fcoverage-mapping) that decides which lifted tests are effective and what is
    /// not covered yet, so that --validate-with can be the build you ship.
    #[arg(long)]
    pub coverage_with: Option<PathBuf>,
    /// Only system-level fuzzing: the baseline the bridge is compared with.
    #[arg(long)]
    pub system_only: bool,
    /// Length of a system fuzzing slice.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub system_slice: Duration,
    /// Length of a unit fuzzing slice.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub unit_slice: Duration,
    /// Time limit per execution (system test or unit).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Random seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Run the program without bubblewrap, both when fuzzing it and when validating
    /// lifted tests (still in fresh directories, with rlimits).
    #[arg(long)]
    pub no_sandbox: bool,
    /// Fuzz at system level on the program itself, not on the lean build trestle-cc
    /// links beside it (`.NAME.trestle-lean`, the same code with a runtime of a few
    /// kilobytes; used whenever it belongs to the program).
    #[arg(long)]
    pub no_lean: bool,
    /// Plain progress lines even on a terminal.
    #[arg(long)]
    pub plain: bool,
    /// Run a one-core campaign (fuzzers and the program) on this core (default: a
    /// free one, that no other fuzzer is bound to; none if all are taken).
    #[arg(long, conflicts_with = "no_pin")]
    pub pin: Option<usize>,
    /// Do not bind a one-core campaign to a core.
    #[arg(long)]
    pub no_pin: bool,
    /// Exit with status 1 when the campaign found a true alarm (for CI jobs).
    #[arg(long)]
    pub fail_on_alarm: bool,
    /// Also write the alarms to FILE as SARIF 2.1.0, for code scanning (source paths
    /// relative to the working directory where they lie under it).
    #[arg(long, value_name = "FILE")]
    pub sarif: Option<PathBuf>,
    /// Accept workers on other machines (`trestle join HOST:PORT`) at this address
    /// for the whole campaign; this node alone validates and reports.
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: Option<String>,
    /// With --listen: leave all fuzzing to the workers; this node records, carves,
    /// validates and reports.
    #[arg(long, requires = "listen")]
    pub delegate: bool,
    /// With --listen: the key file workers must hold (`trestle join --key`); made,
    /// readable by its owner only, when it does not exist. Default: cluster.key in
    /// the campaign directory.
    #[arg(long, value_name = "FILE", requires = "listen")]
    pub key: Option<PathBuf>,
    /// The most the campaign directory should hold (500M, 2G, ...): past 80% of it,
    /// the corpora of lifted unit slices go first, then the oldest carved units;
    /// alarms, the system queue and what a resume needs are never evicted. A resumed
    /// campaign keeps its own.
    #[arg(long, default_value = "2G", value_parser = crate::campaign::disk::parse_size)]
    pub max_disk: u64,
}

impl RunArgs {
    /// Where the campaign starts: the settings from the command line (checked by the
    /// campaign), or the directory to resume.
    pub fn start(&self) -> anyhow::Result<Start> {
        if let Some(dir) = &self.resume {
            return Ok(Start::Resume(dir.clone()));
        }
        let given = |o: &Option<PathBuf>, name: &str| {
            o.clone()
                .ok_or_else(|| anyhow::anyhow!("--{name} is required (or --resume DIR)"))
        };
        let program = given(&self.program, "program")?;
        Ok(Start::New {
            out: given(&self.out, "out")?,
            settings: Settings {
                validate_with: self.validate_with.clone().unwrap_or(program.clone()),
                program,
                seeds: given(&self.seeds, "seeds")?,
                budget: self.time,
                cores: self.cores,
                in_process: !self.forkserver && self.cores == 1,
                focus: self.focus.clone(),
                changed: Vec::new(),
                changed_since: self.changed_since.clone(),
                coverage_with: self.coverage_with.clone(),
                system_only: self.system_only,
                system_slice: self.system_slice,
                unit_slice: self.unit_slice,
                timeout: self.timeout,
                seed: self.seed,
                no_sandbox: self.no_sandbox,
                no_lean: self.no_lean,
                max_disk: self.max_disk,
            },
            source: self.source.clone(),
        })
    }

    /// How this session runs.
    pub fn session(&self) -> Session {
        Session {
            pin: self.pin,
            no_pin: self.no_pin,
            live: !self.plain && std::io::stderr().is_terminal(),
            listen: self.listen.as_ref().map(|addr| Listen {
                addr: addr.clone(),
                delegate: self.delegate,
                key: self.key.clone(),
            }),
        }
    }
}

/// Run the campaign; with `--sarif`, write its alarms there. Returns how many true
/// alarms it found.
pub fn run(a: &RunArgs) -> anyhow::Result<usize> {
    let o = crate::campaign::run(a.start()?, &a.session())?;
    if let Some(file) = &a.sarif {
        let details = crate::report::alarm_details(&o.dir, &o.alarms)?;
        let findings = crate::sarif::Findings {
            dir: &o.dir,
            program: &o.campaign.settings.program,
            elapsed: o.campaign.elapsed,
            alarms: &o.alarms,
            details: &details,
        };
        crate::sarif::write(&findings, file)?;
    }
    Ok(o.alarms.len())
}

#[cfg(test)]
mod tests {
    use super::super::{Cli, Command};
    use super::*;
    use clap::Parser as _;
    use std::time::Duration;

    /// A new campaign's required arguments.
    const NEW: &[&str] = &["--program", "p", "--seeds", "s", "--out", "o"];

    fn run_args(args: &[&str]) -> RunArgs {
        let argv = ["trestle", "run"].into_iter().chain(args.iter().copied());
        match Cli::try_parse_from(argv)
            .expect("arguments that parse")
            .command
        {
            Command::Run(a) => a,
            other => panic!("not `trestle run`: {other:?}"),
        }
    }

    #[test]
    fn the_command_line_becomes_a_campaigns_settings_once() {
        let a = run_args(&[NEW, &["--time", "90s", "--unit-slice", "500ms"]].concat());
        let Start::New {
            out,
            settings,
            source,
        } = a.start().unwrap()
        else {
            panic!("a new campaign");
        };
        assert_eq!(out, PathBuf::from("o"));
        assert_eq!(settings.program, PathBuf::from("p"));
        assert_eq!(
            settings.validate_with, settings.program,
            "validated on the program itself by default"
        );
        assert!(settings.in_process, "one core fuzzes units in process");
        assert_eq!(settings.budget, Duration::from_secs(90));
        assert_eq!(settings.unit_slice, Duration::from_millis(500));
        assert!(settings.changed.is_empty() && source.is_none());

        let a = run_args(&[NEW, &["--cores", "2", "--validate-with", "plain"]].concat());
        let Start::New { settings, .. } = a.start().unwrap() else {
            panic!("a new campaign");
        };
        assert!(
            !settings.in_process,
            "more cores fuzz through the forkserver"
        );
        assert_eq!(settings.validate_with, PathBuf::from("plain"));

        let a = run_args(&["--resume", "dir", "--listen", "127.0.0.1:0", "--delegate"]);
        assert!(matches!(a.start().unwrap(), Start::Resume(d) if d == std::path::Path::new("dir")));
        let listen = a.session().listen.expect("workers accepted");
        assert!(listen.delegate && listen.key.is_none());
        assert!(run_args(&["--resume", "d"]).session().listen.is_none());
        // --delegate without --listen, or a new campaign without its program, is bad
        // usage before anything starts.
        let argv = |v: &[&str]| Cli::try_parse_from(["trestle", "run"].iter().chain(v));
        assert!(argv(&["--resume", "d", "--delegate"]).is_err());
        assert!(argv(&["--seeds", "s", "--out", "o"]).is_err());
    }
}

//! `trestle triage`: its command-line arguments and what it prints.

use super::parse_duration;
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `trestle triage`.
#[derive(Debug, Clone, clap::Args)]
pub struct TriageArgs {
    /// Crashing inputs: AFL++ output or instance directories (crashes/, with the
    /// target's command line read from fuzzer_stats), libFuzzer crash-* files or
    /// directories of them, trestle system tests (JSON), or files of input bytes.
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// The program to confirm crashes with, as shipped (built with -g for source
    /// lines; not a trestle-cc build).
    #[arg(long)]
    pub program: PathBuf,
    /// Output directory: alarms/<id>/ per bug (reduced reproducer, provenance,
    /// summary), alarms.json, triage.json (every group with all its members, every
    /// dropped input with why), report.md.
    #[arg(long)]
    pub out: PathBuf,
    /// An earlier triage (or campaign) directory: exit with status 1 when a bug is
    /// not among its alarms (for CI).
    #[arg(long)]
    pub fail_on_new: Option<PathBuf>,
    /// Wall-clock limit per run.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// CPU time after which a hang input (AFL++'s hangs/, libFuzzer's timeout-*)
    /// counts as hanging, in whole seconds; it must hang twice, spinning in the same
    /// place, to be a finding.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub hang_timeout: Duration,
    /// Address-space limit per run, MiB (not applied to sanitizer builds).
    #[arg(long, default_value_t = 4096)]
    pub memory_mb: u64,
    /// Time allowed for reducing each bug's smallest input to 1-minimal.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub reduce_time: Duration,
    /// Do not reduce.
    #[arg(long)]
    pub no_reduce: bool,
    /// Run without bubblewrap (still in a fresh directory, with rlimits).
    #[arg(long)]
    pub no_sandbox: bool,
    /// Another build of the program, `ROLE=PROGRAM` (say `asan=./prog-asan`; may be
    /// given more than once): each bug's reproducer runs on it too, and a bug some
    /// build lacks is flagged build-dependent (often undefined behaviour).
    #[arg(long = "also-on", value_name = "ROLE=PROGRAM", value_parser = parse_build)]
    pub also_on: Vec<(String, PathBuf)>,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Also write the bugs to FILE as SARIF 2.1.0, for code scanning (as `trestle
    /// run --sarif` does a campaign's alarms).
    #[arg(long, value_name = "FILE")]
    pub sarif: Option<PathBuf>,
    /// The program's arguments, `@@` standing for the input file (default: AFL++'s
    /// from fuzzer_stats; `@@` alone for libFuzzer crash files; otherwise the input
    /// is the program's stdin).
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// `ROLE=PROGRAM` of `--also-on`.
fn parse_build(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((role, program))
            if !role.is_empty()
                && !program.is_empty()
                && role
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') =>
        {
            Ok((role.to_owned(), PathBuf::from(program)))
        }
        _ => Err(format!(
            "{s:?} is not ROLE=PROGRAM (a name of letters, digits, - or _, then the build's path)"
        )),
    }
}

impl TriageArgs {
    /// The stage's options from the command line.
    pub fn options(&self) -> crate::triage::Options {
        crate::triage::Options {
            inputs: self.inputs.clone(),
            program: self.program.clone(),
            command: (!self.command.is_empty()).then(|| self.command.clone()),
            out: self.out.clone(),
            timeout: self.timeout,
            hang_timeout: self.hang_timeout,
            memory_mb: self.memory_mb,
            no_sandbox: self.no_sandbox,
            reduce_time: (!self.no_reduce).then_some(self.reduce_time),
            fail_on_new: self.fail_on_new.clone(),
            progress: !self.json,
            also_on: self.also_on.clone(),
            sarif: self.sarif.clone(),
        }
    }

    /// Print the summary: one line per bug, then what was dropped.
    pub fn print(&self, s: &crate::triage::Summary) {
        if self.json {
            crate::outln!(
                "{}",
                serde_json::to_string_pretty(s).expect("the summary serialises")
            );
            return;
        }
        crate::outln!(
            "triaged {} input(s) in {:.0}s: {} reproduce (crash, hang or run out of memory) as {} bug(s), {} dropped",
            s.inputs,
            s.seconds,
            s.reproduced,
            s.groups.len(),
            s.dropped.len()
        );
        for g in &s.groups {
            crate::outln!(
                "  {}{}: {} ({} input(s); first {}, smallest {})",
                if g.new && self.fail_on_new.is_some() {
                    "NEW "
                } else {
                    ""
                },
                g.id,
                g.signature,
                g.members.len(),
                g.first.display(),
                g.smallest.display()
            );
            if !g.not_on.is_empty() {
                crate::outln!(
                    "    build-dependent: does not reproduce on the {} build",
                    g.not_on.join(", ")
                );
            }
        }
        let mut reasons: std::collections::BTreeMap<&str, usize> =
            std::collections::BTreeMap::new();
        for d in &s.dropped {
            *reasons.entry(d.reason.as_str()).or_default() += 1;
        }
        for (r, n) in reasons {
            crate::outln!("  dropped {n}: {r}");
        }
        crate::outln!("alarms: {}", self.out.join("alarms").display());
        crate::outln!("report: {}", self.out.join(crate::triage::REPORT).display());
    }
}

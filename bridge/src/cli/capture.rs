//! `trestle capture`: its command-line arguments and what it prints.

use super::parse_duration;
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `trestle capture`.
#[derive(Debug, Clone, clap::Args)]
pub struct CaptureArgs {
    /// Output directory (new or empty): a folder of system tests per program built
    /// with trestle-cc that the command ran, and capture.json (every test, whether it
    /// replays the same way, and why not).
    #[arg(long)]
    pub out: PathBuf,
    /// Keep at most this many tests per program: the most diverse by the edges each
    /// covers.
    #[arg(long)]
    pub max: Option<usize>,
    /// Bytes kept at most of any one input (stdin, a file read) or output; a longer
    /// one is cut and the test says so.
    #[arg(long, default_value_t = trestle_abi::capture::DEFAULT_MAX_INPUT)]
    pub max_input: u64,
    /// Wall-clock limit for each test's check run.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Keep the raw records (OUT/.raw) the programs wrote.
    #[arg(long)]
    pub keep_raw: bool,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// The command that runs the tests (`make check`, a script, ...), after `--`.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

impl CaptureArgs {
    /// The stage's options from the command line.
    pub fn options(&self) -> crate::capture::Options {
        crate::capture::Options {
            out: self.out.clone(),
            command: self.command.clone(),
            max_tests: self.max,
            max_input: self.max_input,
            timeout: self.timeout,
            keep_raw: self.keep_raw,
            progress: !self.json,
        }
    }

    /// Print the summary: a line per program, then what did not replay the same way.
    pub fn print(&self, s: &crate::capture::Summary) {
        if self.json {
            crate::outln!(
                "{}",
                serde_json::to_string_pretty(s).expect("the summary serialises")
            );
            return;
        }
        crate::outln!(
            "captured {} process(es) of {} instrumented program(s) in {:.0} s (the command ended with {})",
            s.processes,
            s.programs.len(),
            s.command_seconds,
            s.command_status
        );
        if s.unfinished > 0 {
            crate::outln!(
                "  {} process(es) were killed before they ended: no test",
                s.unfinished
            );
        }
        for (exe, v) in &s.other_format {
            crate::outln!("  {exe}: built by another trestle ({v}); rebuild it with this trestle-cc to capture it");
        }
        for p in &s.programs {
            let pct = if p.written == 0 {
                0.0
            } else {
                100.0 * p.faithful as f64 / p.written as f64
            };
            crate::outln!(
                "  {}: {} test(s) written to {} ({} run(s), {} different{}); {} of them ({pct:.1}%) replay with the same exit status and stdout; {} edges",
                p.name,
                p.written,
                self.out.join(&p.name).display(),
                p.processes,
                p.unique,
                if p.left_out > 0 { format!(", {} left out by --max", p.left_out) } else { String::new() },
                p.faithful,
                p.edges
            );
            if p.status_only > 0 {
                crate::outln!("    {} of them wrote stdout to a terminal or a device: only their exit status is compared", p.status_only);
            }
            for (why, n) in &p.unfaithful {
                crate::outln!("    {n} {why}");
            }
            for (why, n) in &p.not_tests {
                crate::outln!("    {n} run(s) not written: {why}");
            }
            let by_itself = p.tests.iter().filter(|t| t.started_by_itself).count();
            if by_itself > 0 {
                crate::outln!("    {by_itself} test(s) were started by {} itself (each also runs inside its parent's test)", p.name);
            }
        }
        if s.programs.is_empty() {
            crate::outln!("  no program built with trestle-cc ran under the command");
        }
        crate::outln!(
            "details: {}",
            self.out.join(crate::capture::SUMMARY_FILE).display()
        );
    }
}

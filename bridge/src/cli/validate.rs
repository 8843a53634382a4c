//! `trestle validate`: its command-line arguments.

use std::path::PathBuf;
use std::time::Duration;
use trestle_exec::systest::parse_duration;

/// Arguments of `trestle validate`.
#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// System tests: a JSON file or a directory of them.
    pub tests: PathBuf,
    /// The program to run (built without trestle-cc; with -g for named frames).
    #[arg(long)]
    pub program: PathBuf,
    /// Wall-clock limit per run.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Address-space limit per run, MiB (not applied to sanitizer builds).
    #[arg(long, default_value_t = 4096)]
    pub memory_mb: u64,
    /// Largest file a run may write, MiB.
    #[arg(long, default_value_t = 64)]
    pub file_size_mb: u64,
    /// Run without bubblewrap (still in a fresh directory, with rlimits).
    #[arg(long)]
    pub no_sandbox: bool,
    /// One JSON object per test on stdout.
    #[arg(long)]
    pub json: bool,
}

impl ValidateArgs {
    /// The stage's options from the command line.
    pub fn options(&self) -> crate::validate::Options {
        crate::validate::Options {
            tests: self.tests.clone(),
            program: self.program.clone(),
            timeout: self.timeout,
            memory_mb: self.memory_mb,
            file_size_mb: self.file_size_mb,
            no_sandbox: self.no_sandbox,
            json: self.json,
        }
    }
}

//! `trestle record`: its command-line arguments.

use super::parse_duration;
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `trestle record`.
#[derive(Debug, clap::Args)]
pub struct RecordArgs {
    /// The program, built with trestle-cc.
    #[arg(long)]
    pub program: PathBuf,
    /// A system test (JSON) or a directory of them.
    #[arg(long)]
    pub tests: PathBuf,
    /// Directory to write traces to (must not exist, or be empty).
    #[arg(long)]
    pub out: PathBuf,
    /// Time limit per test.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Distinct contexts carved per function and process.
    #[arg(long, default_value_t = 5)]
    pub max_per_fn: u32,
    /// Record only this function (repeat for more): the units of the functions you
    /// work on, without the time and disk of every other one.
    #[arg(long = "function", value_name = "NAME")]
    pub functions: Vec<String>,
    /// Keep only the calls that reach the conditional branch at this source line
    /// (FILE:LINE, e.g. stack.c:419; repeat for more) before they return: the units
    /// that can decide it. Each function may then be called many times before its
    /// --max-per-fn calls that reach are recorded.
    #[arg(long = "reach", value_name = "FILE:LINE")]
    pub reach: Vec<String>,
    /// Bytes each process's trace may reach (e.g. 64M) before it records no new call;
    /// calls already under way still get their ends, so every recorded call carves
    /// whole. Default: no bound.
    #[arg(long, value_name = "SIZE", value_parser = crate::campaign::disk::parse_size)]
    pub max_trace: Option<u64>,
}

impl RecordArgs {
    /// The stage's options from the command line.
    pub fn options(&self) -> crate::record::Options {
        crate::record::Options {
            program: self.program.clone(),
            tests: self.tests.clone(),
            out: self.out.clone(),
            timeout: self.timeout,
            max_per_fn: self.max_per_fn,
            only: Vec::new(),
            functions: self.functions.clone(),
            reach: Vec::new(),
            reach_by_test: Default::default(),
            reach_lines: self.reach.clone(),
            max_trace_bytes: self.max_trace,
            quiet: false,
        }
    }
}

//! `trestle join`: its command-line arguments.

use super::parse_duration;
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `trestle join`.
#[derive(Debug, clap::Args)]
pub struct JoinArgs {
    /// The main node (`trestle run --listen HOST:PORT`).
    #[arg(value_name = "HOST:PORT")]
    pub addr: String,
    /// The program, the same build as the main node's (built with trestle-cc).
    #[arg(long)]
    pub program: PathBuf,
    /// Cores to fuzz on: with N > 1, N single-core workers NAME-c1 … NAME-cN, each
    /// with a system fuzzer and unit slices of its own, in child processes that die
    /// with this one.
    #[arg(long, default_value_t = 1)]
    pub cores: usize,
    /// Work at most this long (default: until the campaign ends).
    #[arg(long, value_parser = parse_duration)]
    pub time: Option<Duration>,
    /// Keep the worker's queue and unit runs here (default: a temporary directory).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The worker's name in the campaign (default: host name and process id).
    #[arg(long)]
    pub name: Option<String>,
    /// Run the program without bubblewrap (still in fresh directories, with rlimits).
    #[arg(long)]
    pub no_sandbox: bool,
    /// The campaign's key file (the main node's `cluster.key`, copied here): only a
    /// worker holding it is admitted.
    #[arg(long, value_name = "FILE")]
    pub key: PathBuf,
}

impl JoinArgs {
    /// The stage's options from the command line.
    pub fn options(&self) -> crate::cluster::worker::Options {
        crate::cluster::worker::Options {
            addr: self.addr.clone(),
            program: self.program.clone(),
            cores: self.cores,
            time: self.time,
            out: self.out.clone(),
            name: self.name.clone(),
            no_sandbox: self.no_sandbox,
            key: self.key.clone(),
        }
    }
}

//! `trestle report`: its command-line arguments.

use std::path::PathBuf;

/// Arguments of `trestle report`.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// A campaign directory (from `trestle run`).
    pub dir: PathBuf,
    /// A system-only campaign with the same budget and seeds, to compare coverage with
    /// (default: DIR/baseline if there is one).
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// Print the report as JSON on stdout instead of writing files.
    #[arg(long)]
    pub json: bool,
    /// Also write the alarms to FILE as SARIF 2.1.0, for code scanning (source paths
    /// relative to the working directory where they lie under it).
    #[arg(long, value_name = "FILE")]
    pub sarif: Option<PathBuf>,
}

impl ReportArgs {
    /// The stage's options from the command line.
    pub fn options(&self) -> crate::report::Options {
        crate::report::Options {
            dir: self.dir.clone(),
            baseline: self.baseline.clone(),
            json: self.json,
            sarif: self.sarif.clone(),
        }
    }
}

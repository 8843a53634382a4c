//! `trestle carve`: its command-line arguments.

use std::path::PathBuf;

/// Arguments of `trestle carve`.
#[derive(Debug, clap::Args)]
pub struct CarveArgs {
    /// A trace directory written by `trestle record`.
    pub traces: PathBuf,
    /// Directory to write units to.
    #[arg(long)]
    pub out: PathBuf,
    /// The program (default: the one named in the trace directory).
    #[arg(long)]
    pub program: Option<PathBuf>,
}

impl CarveArgs {
    /// The stage's options from the command line.
    pub fn options(&self) -> crate::carve::Options {
        crate::carve::Options {
            traces: self.traces.clone(),
            out: self.out.clone(),
            program: self.program.clone(),
            quiet: false,
        }
    }
}

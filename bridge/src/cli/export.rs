//! `trestle export`: its command-line arguments.

use std::path::PathBuf;

/// Arguments of `trestle export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// A unit file (from `trestle carve`, or `unit.unit` in a fuzz directory).
    pub unit: PathBuf,
    /// A raw unit-fuzzer input (e.g. a file in a fuzz directory's `crashes/`): the
    /// parameters take its values.
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// Where to write the C file (`build.sh` is written next to it).
    #[arg(long)]
    pub out: PathBuf,
    /// The program to read function and global metadata from (default: the one the
    /// unit was carved from).
    #[arg(long)]
    pub program: Option<PathBuf>,
}

impl ExportArgs {
    /// The stage's options from the command line.
    pub fn options(&self) -> crate::export::Options {
        crate::export::Options {
            unit: self.unit.clone(),
            input: self.input.clone(),
            out: self.out.clone(),
            program: self.program.clone(),
        }
    }
}

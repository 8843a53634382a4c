//! `trestle show`: its command-line arguments.

use std::path::PathBuf;

/// Arguments of `trestle show`.
#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// A unit file.
    pub unit: PathBuf,
    /// Print every byte of every extent, not just the first 64.
    #[arg(long)]
    pub full: bool,
}

impl ShowArgs {
    /// The stage's options from the command line.
    pub fn options(&self) -> crate::carve::show::Options {
        crate::carve::show::Options {
            unit: self.unit.clone(),
            full: self.full,
        }
    }
}

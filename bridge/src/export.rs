//! `trestle export`: a carved unit as a standalone C file (placeholder; being written).

use crate::binary::Binary;
use anyhow::{bail, Result};
use std::path::PathBuf;
use trestle_abi::fuzz::ParamValue;
use trestle_abi::unit::Unit;

/// Arguments of `trestle export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// A unit file (from `trestle carve`, or `unit.unit` in a fuzz directory).
    pub unit: PathBuf,
    /// Where to write the C file.
    #[arg(long)]
    pub out: PathBuf,
}

/// The unit as C source; with `values`, the parameters take those values.
pub fn export_c(_unit: &Unit, _binary: Option<&Binary>, _values: Option<&[ParamValue]>) -> Result<String> {
    bail!("exporting units as C is not available yet")
}

/// Run `trestle export`.
pub fn run(_args: &ExportArgs) -> Result<()> {
    bail!("exporting units as C is not available yet")
}

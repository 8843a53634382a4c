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

/// Run `trestle show`: the unit as text on stdout.
pub fn run(args: &ShowArgs) -> anyhow::Result<()> {
    let unit = crate::carve::units::read_unit(&args.unit)?;
    crate::out!("{}", crate::carve::show::render(&unit, args.full));
    Ok(())
}

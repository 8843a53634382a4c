//! `trestle report`: its command-line arguments, and the report printed or written.

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

/// Run `trestle report`: the report as JSON on stdout, or its pages (and SARIF) written.
pub fn run(args: &ReportArgs) -> anyhow::Result<()> {
    let r = crate::report::gather(&args.dir, args.baseline.as_deref())?;
    if let Some(file) = &args.sarif {
        crate::sarif::write(&crate::sarif::Findings::of_report(&r), file)?;
    }
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    let (md, page) = crate::report::write_pages(&args.dir, &r)?;
    eprintln!("wrote {} and {}", md.display(), page.display());
    Ok(())
}

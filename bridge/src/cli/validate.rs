//! `trestle validate`: its command-line arguments.

use super::parse_duration;
use std::path::PathBuf;
use std::time::Duration;

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
        }
    }
}

/// Run `trestle validate`, printing a line (or, with `--json`, an object) per test as
/// it ends.
pub fn run(args: &ValidateArgs) -> anyhow::Result<crate::validate::Validated> {
    crate::validate::run(&args.options(), |t, run, sandboxed| {
        if args.json {
            let v = serde_json::json!({
                "test": t.path,
                "status": run.status.to_string(),
                "crash": run.crash.as_ref().map(|c| c.to_string()),
                "frames": run.crash.as_ref().map(|c| c.frames.clone()),
                // Innermost first, each with its source file and line where debug
                // info has them: where exactly the program died.
                "stack": run.crash.as_ref().map(|c| c.stack.clone()),
                "limit": run.limit,
                "max_rss_kib": run.max_rss_kib,
                "cpu_ms": run.cpu_ms,
                "wall_ms": run.wall.as_millis() as u64,
                "sandboxed": sandboxed,
                "forkserver": run.forked,
            });
            crate::outln!("{v}");
        } else {
            let what = match (&run.crash, &run.limit) {
                (Some(c), _) => format!("CRASH {c}"),
                (None, Some(l)) => format!("{} (limit: {l})", run.status),
                (None, None) => run.status.to_string(),
            };
            crate::outln!("{}: {what}", t.name);
        }
    })
}

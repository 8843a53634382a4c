//! `trestle validate`: run a program on system tests in the sandbox lifting uses, and
//! say how each run ended: exit status, crash signature, resource limits hit.

pub mod reduce;

use anyhow::{Context as _, Result};
use std::path::PathBuf;
use std::time::Duration;
use trestle_exec::sandbox::{cpu_limit, Limits, Sandbox};
use trestle_exec::signature::FrameFilter;
use trestle_exec::systest::load_tests;

/// Options of `trestle validate`.
#[derive(Debug)]
pub struct Options {
    /// System tests: a JSON file or a directory of them.
    pub tests: PathBuf,
    /// The program to run (built without trestle-cc; with -g for named frames).
    pub program: PathBuf,
    /// Wall-clock limit per run.
    pub timeout: Duration,
    /// Address-space limit per run, MiB (not applied to sanitizer builds).
    pub memory_mb: u64,
    /// Largest file a run may write, MiB.
    pub file_size_mb: u64,
    /// Run without bubblewrap (still in a fresh directory, with rlimits).
    pub no_sandbox: bool,
    /// One JSON object per test on stdout.
    pub json: bool,
}

/// How many tests were run, and how many crashed.
#[derive(Debug, Clone, Copy)]
pub struct Validated {
    /// Tests run.
    pub tests: usize,
    /// Of those, crashed (reproduced as a crash).
    pub crashed: usize,
}

/// Run `trestle validate`.
pub fn run(args: &Options) -> Result<Validated> {
    let limits = Limits {
        wall: args.timeout,
        cpu_secs: cpu_limit(args.timeout),
        memory: args.memory_mb << 20,
        file_size: args.file_size_mb << 20,
        ..Limits::default()
    };
    let sandbox = Sandbox::new(limits, !args.no_sandbox)?;
    let program = std::fs::canonicalize(&args.program)
        .with_context(|| format!("program {}", args.program.display()))?;
    let filter = FrameFilter {
        program: Some(program.clone()),
        stop_after: None,
    };
    let (mut crashed, mut tests) = (0, 0);
    for t in load_tests(&args.tests)? {
        tests += 1;
        let run = sandbox
            .run(&program, &t.test, &[], &filter, None)
            .with_context(|| format!("running {}", t.path.display()))?;
        crashed += usize::from(run.crashed());
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
                "sandboxed": sandbox.isolated(),
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
    }
    Ok(Validated { tests, crashed })
}

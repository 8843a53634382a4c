//! `trestle validate`: run a program on system tests in the sandbox lifting uses, and
//! say how each run ended: exit status, crash signature, resource limits hit.

pub mod reduce;

use anyhow::{Context as _, Result};
use std::path::PathBuf;
use std::time::Duration;
use trestle_exec::sandbox::{cpu_limit, Limits, Sandbox, SandboxRun};
use trestle_exec::signature::FrameFilter;
use trestle_exec::systest::{load_tests, NamedTest};

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
}

/// How many tests were run, and how many crashed.
#[derive(Debug, Clone, Copy)]
pub struct Validated {
    /// Tests run.
    pub tests: usize,
    /// Of those, crashed (reproduced as a crash).
    pub crashed: usize,
}

/// Run `trestle validate`: each test in turn, handing `each` the test, how its run
/// ended and whether it ran in the sandbox.
pub fn run(
    args: &Options,
    mut each: impl FnMut(&NamedTest, &SandboxRun, bool),
) -> Result<Validated> {
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
        each(&t, &run, sandbox.isolated());
    }
    Ok(Validated { tests, crashed })
}

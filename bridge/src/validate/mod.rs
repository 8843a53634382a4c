//! `trestle validate`: run a program on system tests in the sandbox lifting uses, and
//! say how each run ended: exit status, crash signature, resource limits hit.

pub mod reduce;

use anyhow::{Context as _, Result};
use std::path::PathBuf;
use std::time::Duration;
use trestle_exec::sandbox::{cpu_limit, Limits, Sandbox, SandboxRun};
use trestle_exec::signature::FrameFilter;
use trestle_exec::systest::{load_tests, NamedTest};

/// What `trestle validate` runs and how (the command line's flags, as values:
/// `trestle validate --help` has the user's view).
#[derive(Debug)]
pub struct Options {
    /// Where the tests are read from (one file or a directory).
    pub tests: PathBuf,
    /// The build the tests run on (frames are named from its debug info).
    pub program: PathBuf,
    /// Upper bound of one run's wall clock.
    pub timeout: Duration,
    /// Address-space limit of a run in MiB; ignored for sanitizer builds.
    pub memory_mb: u64,
    /// File-size limit of a run in MiB.
    pub file_size_mb: u64,
    /// Run outside bubblewrap.
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

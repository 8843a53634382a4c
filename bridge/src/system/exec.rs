//! `trestle exec`: run a program on system tests through the one executor
//! ([`trestle_exec::sandbox::Sandbox`]: forked from the program's forkserver when it
//! was built with trestle-cc, started afresh otherwise) and say how each run went, or
//! run them round-robin for a while and say how fast that was. It is how scripts
//! (seed checks, coverage, benchmarks) run tests, so that they run them exactly as
//! trestle does instead of each carrying a copy of it.

use anyhow::{bail, Context as _, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use trestle_exec::sandbox::{cpu_limit, Limits, Sandbox, SandboxRun};
use trestle_exec::signature::FrameFilter;
use trestle_exec::systest::{load_tests, NamedTest};

/// Options of `trestle exec`.
#[derive(Debug, Clone)]
pub struct Options {
    /// The program to run.
    pub program: PathBuf,
    /// Where the tests are read from (one file or a directory).
    pub tests: PathBuf,
    /// Environment for every run, over the test's own (`--env K=V`).
    pub env: Vec<(String, String)>,
    /// Upper bound of one run's wall clock.
    pub timeout: Duration,
    /// Isolate runs with bubblewrap (otherwise a fresh directory and rlimits only).
    pub sandbox: bool,
    /// Start the program for every run even when it could be served by its forkserver.
    pub spawn: bool,
    /// Repeat the tests round-robin for this long and count executions instead of
    /// reporting each run.
    pub repeat_for: Option<Duration>,
    /// Write each run's LLVM profile (of a coverage build) to `DIR/NAME.profraw`,
    /// inside the sandbox too (`--profile-dir`).
    pub profile_dir: Option<PathBuf>,
}

/// What a whole `trestle exec` did.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Tests loaded.
    pub tests: usize,
    /// Tests that could not be run (the executor failed, not the program).
    pub failed: usize,
    /// Runs of the program.
    pub executions: u64,
    /// Of those, forked from the program's forkserver.
    pub forked: u64,
    /// Runs per way they ended (`exit 0`, `signal 11`, `timeout`).
    pub statuses: BTreeMap<String, u64>,
    /// Time spent running, from the first run to the last.
    pub elapsed: Duration,
}

impl Summary {
    /// Executions per second.
    pub fn execs_per_sec(&self) -> f64 {
        self.executions as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    fn count(&mut self, run: &SandboxRun) {
        self.executions += 1;
        self.forked += u64::from(run.forked);
        *self.statuses.entry(run.status.to_string()).or_default() += 1;
    }
}

/// Run `trestle exec`: every test once, each result handed to `report` as it comes
/// (a test the executor could not run is an `Err` there, counted as failed, and the
/// others still run); with [`Options::repeat_for`], round-robin for that long
/// without reports, stopping at the first test that cannot be run.
pub fn run(
    opts: &Options,
    report: &mut dyn FnMut(&NamedTest, &Result<SandboxRun>),
) -> Result<Summary> {
    check_program(&opts.program)?;
    let tests = load_tests(&opts.tests)?;
    let program = std::fs::canonicalize(&opts.program)
        .with_context(|| format!("program {}", opts.program.display()))?;
    let limits = Limits {
        wall: opts.timeout,
        cpu_secs: cpu_limit(opts.timeout),
        ..Limits::default()
    };
    let mut sandbox = Sandbox::new(limits, opts.sandbox)?;
    if opts.spawn {
        sandbox = sandbox.without_forkserver();
    }
    if let Some(dir) = &opts.profile_dir {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("profile directory {}", dir.display()))?;
    }
    let runner = Runner {
        sandbox,
        filter: FrameFilter {
            program: Some(program.clone()),
            stop_after: None,
        },
        program,
        env: &opts.env,
        profile_dir: opts.profile_dir.as_deref(),
    };
    let mut summary = Summary {
        tests: tests.len(),
        ..Summary::default()
    };
    let start = Instant::now();
    match opts.repeat_for {
        None => {
            for t in &tests {
                let r = runner.once(t);
                match &r {
                    Ok(run) => summary.count(run),
                    Err(_) => summary.failed += 1,
                }
                report(t, &r);
            }
        }
        Some(budget) => {
            for t in tests.iter().cycle() {
                summary.count(&runner.once(t)?);
                if start.elapsed() >= budget {
                    break;
                }
            }
        }
    }
    summary.elapsed = start.elapsed();
    Ok(summary)
}

/// The executor and what every run shares.
struct Runner<'a> {
    sandbox: Sandbox,
    filter: FrameFilter,
    program: PathBuf,
    env: &'a [(String, String)],
    profile_dir: Option<&'a Path>,
}

impl Runner<'_> {
    fn once(&self, t: &NamedTest) -> Result<SandboxRun> {
        let profile = self
            .profile_dir
            .map(|d| d.join(format!("{}.profraw", t.name.replace('/', "_"))));
        self.sandbox
            .run(
                &self.program,
                &t.test,
                self.env,
                &self.filter,
                profile.as_deref(),
            )
            .with_context(|| format!("running {}", t.path.display()))
    }
}

/// Parse `K=V` (an `--env` argument).
pub fn parse_env(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("expected NAME=VALUE, got {s:?}")),
    }
}

/// Check that `program` can be run before any test is loaded for it.
fn check_program(program: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let meta =
        std::fs::metadata(program).with_context(|| format!("program {}", program.display()))?;
    if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
        bail!("program {} is not an executable file", program.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_arguments_need_a_name() {
        assert_eq!(parse_env("A=b=c").unwrap(), ("A".into(), "b=c".into()));
        assert_eq!(parse_env("A=").unwrap(), ("A".into(), String::new()));
        assert!(parse_env("=x").is_err());
        assert!(parse_env("A").is_err());
    }

    // Running tests through the executor needs trestle-exec, which the workspace
    // builds: tests/e2e/forkserver.rs covers it (`trestle_exec_reports_…`).
}

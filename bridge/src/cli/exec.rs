//! `trestle exec`: its command-line arguments and how its results are printed.

use super::parse_duration;
use crate::system::exec::{parse_env, Summary};
use std::path::PathBuf;
use std::time::Duration;
use trestle_exec::sandbox::SandboxRun;
use trestle_exec::systest::{NamedTest, RunStatus};

/// Arguments of `trestle exec`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Per test, one line: NAME, how it ended (exit=N, signal=N (SIGNAME), or \
timeout), stdout=NB stderr=NB (bytes written in all), wall=MS (fractional) cpu=MS rss=KIB, and `forkserver` \
when the run was forked from the program's forkserver (a trestle-cc build) rather than started \
afresh; a resource limit the run ran into and a crash signature follow. With --json the same \
as one object per line: test, name, status, exit, signal, timeout, stdout_bytes, stderr_bytes, \
wall_ms, cpu_ms, max_rss_kib, forkserver, limit, crash (and stdout, stderr with \
--show-output). A test that could not be run prints an error in its place (`error` in JSON).\n\n\
With --for, one summary instead: executions, seconds, execs_per_sec, forked and the count of \
each way the runs ended.\n\n\
Exit status: 0 when every test ran, whatever the program's exit status; 2 on bad usage or \
input (a missing program, a malformed test) or a test the executor could not run."
)]
pub struct ExecArgs {
    /// System tests: a JSON file or a directory of them.
    pub tests: PathBuf,
    /// The program to run (any build; a trestle-cc build is forked from its forkserver).
    #[arg(long)]
    pub program: PathBuf,
    /// Environment variable for every run, over the test's own and trestle's
    /// environment (repeatable).
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Wall-clock limit per run (the CPU limit is a little less).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Isolate runs with bubblewrap, as validation does (the default).
    #[arg(long, overrides_with = "no_sandbox")]
    pub sandbox: bool,
    /// Run the program without bubblewrap: each run in a fresh directory with rlimits
    /// only, where a test naming a path outside it (a fuzzed `-r /`) can change any
    /// file you can. For tests you trust, or to measure the executor without bubblewrap.
    #[arg(long, overrides_with = "sandbox")]
    pub no_sandbox: bool,
    /// Write each run's LLVM profile (a build with -fprofile-instr-generate) to
    /// DIR/NAME.profraw; works in the sandbox, where the program cannot write outside
    /// its test directory. Such runs are started afresh, not forked.
    #[arg(long, value_name = "DIR")]
    pub profile_dir: Option<PathBuf>,
    /// Start the program for every run even when it was built with trestle-cc and
    /// could be forked from its forkserver (as `trestle record` runs it).
    #[arg(long)]
    pub no_forkserver: bool,
    /// Repeat the tests round-robin for this long and print only the executions per
    /// second (the executor's speed).
    #[arg(long = "for", value_name = "DURATION", value_parser = parse_duration)]
    pub repeat_for: Option<Duration>,
    /// Print each run's stdout and stderr (their last 64 KiB) after its line.
    #[arg(long)]
    pub show_output: bool,
    /// One JSON object per test (or for the summary) on stdout.
    #[arg(long)]
    pub json: bool,
}

impl ExecArgs {
    /// The stage's options from the command line.
    pub fn options(&self) -> crate::system::exec::Options {
        crate::system::exec::Options {
            program: self.program.clone(),
            tests: self.tests.clone(),
            env: self.env.clone(),
            timeout: self.timeout,
            sandbox: !self.no_sandbox,
            spawn: self.no_forkserver,
            repeat_for: self.repeat_for,
            profile_dir: self.profile_dir.clone(),
        }
    }

    /// Print how one test's run went.
    pub fn print_run(&self, t: &NamedTest, r: &anyhow::Result<SandboxRun>) {
        match (r, self.json) {
            (Ok(run), true) => crate::outln!("{}", self.run_json(t, run)),
            (Ok(run), false) => {
                crate::outln!("{}", run_line(&t.name, run));
                if self.show_output {
                    show("stdout", &run.stdout, run.stdout_bytes);
                    show("stderr", &run.stderr, run.stderr_bytes);
                }
            }
            (Err(e), true) => crate::outln!(
                "{}",
                serde_json::json!({"test": t.path, "name": t.name, "error": format!("{e:#}")})
            ),
            (Err(e), false) => crate::outln!("{:<20}  error: {e:#}", t.name),
        }
    }

    fn run_json(&self, t: &NamedTest, run: &SandboxRun) -> serde_json::Value {
        let (exit, signal) = match run.status {
            RunStatus::Exited(c) => (Some(c), None),
            RunStatus::Signaled(s) => (None, Some(s)),
            RunStatus::TimedOut => (None, None),
        };
        let mut v = serde_json::json!({
            "test": t.path,
            "name": t.name,
            "status": run.status.to_string(),
            "exit": exit,
            "signal": signal,
            "timeout": run.status == RunStatus::TimedOut,
            "stdout_bytes": run.stdout_bytes,
            "stderr_bytes": run.stderr_bytes,
            "wall_ms": run.wall.as_secs_f64() * 1000.0,
            "cpu_ms": run.cpu_ms,
            "max_rss_kib": run.max_rss_kib,
            "forkserver": run.forked,
            "limit": run.limit,
            "crash": run.crash.as_ref().map(|c| c.to_string()),
        });
        if self.show_output {
            v["stdout"] = String::from_utf8_lossy(&run.stdout).into();
            v["stderr"] = String::from_utf8_lossy(&run.stderr).into();
        }
        v
    }

    /// Print the summary of a `--for` run (nothing otherwise: each test had its line).
    pub fn print_summary(&self, s: &Summary) {
        if self.repeat_for.is_none() {
            return;
        }
        if self.json {
            let v = serde_json::json!({
                "tests": s.tests,
                "executions": s.executions,
                "seconds": s.elapsed.as_secs_f64(),
                "execs_per_sec": s.execs_per_sec(),
                "forked": s.forked,
                "statuses": s.statuses,
            });
            crate::outln!("{v}");
        } else {
            let ends: Vec<String> = s
                .statuses
                .iter()
                .map(|(k, n)| format!("{k}: {n}"))
                .collect();
            crate::outln!(
                "{} executions of {} test(s) in {:.1}s: {:.0}/s, {} forked from the forkserver ({})",
                s.executions,
                s.tests,
                s.elapsed.as_secs_f64(),
                s.execs_per_sec(),
                s.forked,
                ends.join(", ")
            );
        }
    }
}

/// A run in one line: `NAME  exit=0  stdout=5B  stderr=0B  wall=2.1ms cpu=1ms rss=1200KiB  forkserver`.
fn run_line(name: &str, run: &SandboxRun) -> String {
    let status = match run.status {
        RunStatus::Exited(c) => format!("exit={c}"),
        RunStatus::Signaled(s) => {
            format!("signal={s} ({})", trestle_exec::signature::signal_name(s))
        }
        RunStatus::TimedOut => "timeout".to_owned(),
    };
    let mut line = format!(
        "{name:<20}  {status:<7}  stdout={}B  stderr={}B  wall={:.1}ms cpu={}ms rss={}KiB",
        run.stdout_bytes,
        run.stderr_bytes,
        run.wall.as_secs_f64() * 1000.0,
        run.cpu_ms,
        run.max_rss_kib
    );
    if run.forked {
        line.push_str("  forkserver");
    }
    if let Some(l) = &run.limit {
        line.push_str(&format!("  limit: {l}"));
    }
    if let Some(c) = &run.crash {
        line.push_str(&format!("  crash: {c}"));
    }
    line
}

/// Print an output below its run's line, indented (what `run-seeds.sh -v` showed).
fn show(label: &str, tail: &[u8], total: u64) {
    if tail.is_empty() {
        return;
    }
    if (tail.len() as u64) < total {
        crate::outln!("  --- {label} (the last {} of {total} bytes):", tail.len());
    } else {
        crate::outln!("  --- {label}:");
    }
    for line in String::from_utf8_lossy(tail).lines() {
        crate::outln!("  | {line}");
    }
}

#[cfg(test)]
mod tests {
    use crate::cli::{Cli, Command};
    use clap::Parser as _;

    fn sandboxed(args: &[&str]) -> bool {
        let argv = ["trestle", "exec", "--program", "p", "t"]
            .into_iter()
            .chain(args.iter().copied());
        match Cli::try_parse_from(argv)
            .expect("arguments that parse")
            .command
        {
            Command::Exec(a) => a.options().sandbox,
            other => panic!("not `trestle exec`: {other:?}"),
        }
    }

    /// A test is run isolated unless asked not to be: a fuzzed one may name any path.
    #[test]
    fn tests_run_in_the_sandbox_unless_told_not_to() {
        assert!(sandboxed(&[]));
        assert!(sandboxed(&["--sandbox"]));
        assert!(!sandboxed(&["--no-sandbox"]));
        assert!(
            sandboxed(&["--no-sandbox", "--sandbox"]),
            "the last one wins"
        );
    }
}

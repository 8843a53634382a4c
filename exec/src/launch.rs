//! How a system test becomes a run of the program, the same for everything that runs
//! one: recording and replay ([`run_test`]), validation, lifting and
//! reduction ([`crate::sandbox::Sandbox::run`]) and system fuzzing
//! (the system fuzzer, whose forkserver requests carry the same layout).
//!
//! - **Layout** ([`Layout`]): a fresh working directory holding the test's files, and
//!   its stdin in a file beside it, never a pipe (a replay seeks it to where the
//!   recording had read, and the fuzzer's forkserver child opens it); both in memory
//!   where the machine allows ([`crate::systest::scratch_dir`]).
//! - **Running** ([`run_to_end`], through [`crate::spawn`]): the program leads its own process group, reads
//!   stdin from that file, has its output captured (the last 64 KiB) or discarded, and
//!   is killed with everything it started when it overstays its time.

use crate::spawn;
use crate::systest::{materialise, scratch_dir, RunStatus};
use anyhow::{Context as _, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;
use trestle_abi::unit::SystemTest;

/// How much of a run's stdout and stderr is kept: the end.
pub const OUTPUT_TAIL: usize = 64 << 10;

/// A system test laid out for one run; removed when dropped.
pub struct Layout {
    _root: tempfile::TempDir,
    /// The working directory, holding the test's files.
    pub cwd: PathBuf,
    /// A directory beside it for the run's side files (its stdin, a status report,
    /// a crash stack, a coverage profile).
    pub side: PathBuf,
    /// The file the program reads as stdin.
    pub stdin: PathBuf,
}

impl Layout {
    /// Lay out `test`: its files in a fresh working directory, its stdin beside it.
    pub fn new(test: &SystemTest) -> Result<Layout> {
        Layout::in_root(test, scratch_dir("trestle-run-")?)
    }

    /// The same in a fresh directory under `base` (one a sandboxed forkserver sees).
    pub fn new_in(test: &SystemTest, base: &Path) -> Result<Layout> {
        let root = tempfile::Builder::new()
            .prefix("run-")
            .tempdir_in(base)
            .with_context(|| format!("cannot create a directory in {}", base.display()))?;
        Layout::in_root(test, root)
    }

    fn in_root(test: &SystemTest, root: tempfile::TempDir) -> Result<Layout> {
        let cwd = root.path().join("w");
        let side = root.path().join("s");
        std::fs::create_dir(&cwd).with_context(|| format!("cannot create {}", cwd.display()))?;
        std::fs::create_dir(&side).with_context(|| format!("cannot create {}", side.display()))?;
        materialise(test, &cwd)?;
        let stdin = side.join("stdin");
        std::fs::write(&stdin, test.stdin.as_deref().unwrap_or_default())
            .with_context(|| format!("cannot write {}", stdin.display()))?;
        Ok(Layout {
            _root: root,
            cwd,
            side,
            stdin,
        })
    }
}

/// How a run ended.
pub struct Ended {
    /// Exit status, signal, or timeout.
    pub status: RunStatus,
    /// What the process itself returned (`None` after a timeout).
    pub raw: Option<ExitStatus>,
    /// The end of its stdout, if captured.
    pub stdout: Vec<u8>,
    /// The end of its stderr, if captured.
    pub stderr: Vec<u8>,
    /// How many bytes it wrote to stdout and to stderr in all (0 if not captured).
    pub output_len: (u64, u64),
    /// Wall-clock time from start to end.
    pub wall: Duration,
    /// After a timeout, the largest peak resident memory (KiB) of a process of the
    /// run's tree just before it was killed: what it had grown to when the clock
    /// stopped it (0 otherwise, or where /proc does not say).
    pub peak_rss_kib: u64,
}

/// What to keep of a run's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capture {
    /// Keep the end of stdout.
    pub stdout: bool,
    /// Keep the end of stderr.
    pub stderr: bool,
}

/// Start `cmd` (program, arguments, environment and working directory set) with
/// stdin from the file `stdin`, in a process group of its own, and wait at most
/// `timeout`; past it the whole group is killed and the run is a timeout.
pub fn run_to_end(
    cmd: &mut Command,
    stdin: &Path,
    capture: Capture,
    timeout: Duration,
) -> Result<Ended> {
    let input =
        std::fs::File::open(stdin).with_context(|| format!("cannot open {}", stdin.display()))?;
    let pipe_or_null = |keep: bool| if keep { Stdio::piped() } else { Stdio::null() };
    cmd.stdin(Stdio::from(input))
        .stdout(pipe_or_null(capture.stdout))
        .stderr(pipe_or_null(capture.stderr));
    let mut run = spawn::start(cmd)
        .with_context(|| format!("cannot run {}", cmd.get_program().to_string_lossy()))?;
    let out = drain(run.child.stdout.take());
    let err = drain(run.child.stderr.take());
    let waited = spawn::wait_until(&mut run, timeout)?;
    let status = match waited.end() {
        spawn::End::TimedOut => RunStatus::TimedOut,
        spawn::End::Exited(c) => RunStatus::Exited(c),
        spawn::End::Signaled(s) => RunStatus::Signaled(s),
    };
    let (stdout, stdout_len) = out.join().expect("the output reader does not panic");
    let (stderr, stderr_len) = err.join().expect("the output reader does not panic");
    Ok(Ended {
        status,
        raw: waited.status,
        stdout,
        stderr,
        output_len: (stdout_len, stderr_len),
        wall: waited.wall,
        peak_rss_kib: waited.peak_rss_kib,
    })
}

/// Read a pipe to its end on a thread of its own, keeping the last [`OUTPUT_TAIL`]
/// bytes and counting all of them.
fn drain<R: std::io::Read + Send + 'static>(
    pipe: Option<R>,
) -> std::thread::JoinHandle<(Vec<u8>, u64)> {
    std::thread::spawn(move || {
        let (mut v, mut len) = (Vec::new(), 0u64);
        if let Some(mut p) = pipe {
            let mut buf = [0u8; 65536];
            loop {
                match p.read(&mut buf) {
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    // The end of the output, or a pipe that failed: what was read stays.
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        len += n as u64;
                        v.extend_from_slice(&buf[..n]);
                        if v.len() > 2 * OUTPUT_TAIL {
                            v.drain(..v.len() - OUTPUT_TAIL);
                        }
                    }
                }
            }
        }
        if v.len() > OUTPUT_TAIL {
            v.drain(..v.len() - OUTPUT_TAIL);
        }
        (v, len)
    })
}

/// Options for one run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Wall-clock limit.
    pub timeout: Duration,
    /// Extra environment (trestle's variables).
    pub env: Vec<(String, String)>,
    /// Keep stdout (otherwise discarded).
    pub capture_stdout: bool,
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// How it ended.
    pub status: RunStatus,
    /// Its stdout, if captured.
    pub stdout: Vec<u8>,
    /// Its stderr (always captured, last 64 KiB).
    pub stderr: Vec<u8>,
}

/// Turn address-space randomisation off for the programs this thread starts. The
/// personality is the thread's own and children inherit it, so no code needs to run
/// in the child between fork and exec: `Command` can then spawn without copying this
/// process's page tables (with thousands of units in memory, that copy was most of
/// the cost of a replay).
pub fn no_randomization_for_children() {
    thread_local!(static SET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
    if !SET.get() {
        // SAFETY: personality() with 0xffffffff only queries; then it sets a flag of
        // this thread.
        unsafe {
            let current = libc::personality(0xffff_ffff);
            if current != -1 {
                libc::personality(
                    (current as libc::c_ulong) | libc::ADDR_NO_RANDOMIZE as libc::c_ulong,
                );
            }
        }
        SET.set(true);
    }
}

/// Run `program` on `test` in a fresh working directory, with address-space
/// randomisation off so that recorded addresses of libc objects stay valid.
pub fn run_test(program: &Path, test: &SystemTest, opts: &RunOptions) -> Result<RunResult> {
    // Stdin comes from a file, not a pipe: a replay can then seek it to where the
    // recording had read up to.
    let layout = Layout::new(test)?;
    let mut cmd = Command::new(program);
    cmd.args(&test.args)
        .current_dir(&layout.cwd)
        .envs(test.env.iter())
        .envs(opts.env.iter().map(|(k, v)| (k, v)));
    no_randomization_for_children();
    let capture = Capture {
        stdout: opts.capture_stdout,
        stderr: true,
    };
    let e = run_to_end(&mut cmd, &layout.stdin, capture, opts.timeout)
        .with_context(|| format!("cannot run program {}", program.display()))?;
    Ok(RunResult {
        status: e.status,
        stdout: e.stdout,
        stderr: e.stderr,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_test_is_laid_out_and_run_with_stdin_from_a_file_and_a_time_limit() {
        let mut test = SystemTest::default();
        test.files.insert("d/in.txt".into(), b"file".to_vec());
        test.stdin = Some(b"from stdin".to_vec());
        let l = Layout::new(&test).unwrap();
        assert_eq!(std::fs::read(l.cwd.join("d/in.txt")).unwrap(), b"file");
        assert!(
            !l.stdin.starts_with(&l.cwd),
            "stdin lives outside the working directory"
        );
        let mut cmd = Command::new("sh");
        // stdin is a regular file (seekable), not a pipe.
        cmd.args([
            "-c",
            "cat; cat d/in.txt; test -f /dev/stdin && echo seekable >&2",
        ])
        .current_dir(&l.cwd);
        let e = run_to_end(
            &mut cmd,
            &l.stdin,
            Capture {
                stdout: true,
                stderr: true,
            },
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(e.status, RunStatus::Exited(0));
        assert_eq!(e.stdout, b"from stdinfile");
        assert_eq!(e.stderr, b"seekable\n");
        assert_eq!(e.output_len, (14, 9));
        let mut sleeper = Command::new("sh");
        sleeper.args(["-c", "sleep 30 & wait"]);
        let t = Instant::now();
        let e = run_to_end(
            &mut sleeper,
            &l.stdin,
            Capture {
                stdout: false,
                stderr: false,
            },
            Duration::from_millis(200),
        )
        .unwrap();
        assert_eq!(e.status, RunStatus::TimedOut);
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the group was not killed at the limit"
        );
    }
}

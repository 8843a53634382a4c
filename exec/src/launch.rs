//! How a system test becomes a run of the program, the same for everything that runs
//! one: recording and replay ([`crate::systest::run_test`]), validation, lifting and
//! reduction ([`crate::sandbox::Sandbox::run`]) and system fuzzing
//! (the system fuzzer, whose forkserver requests carry the same layout).
//!
//! - **Layout** ([`Layout`]): a fresh working directory holding the test's files, and
//!   its stdin in a file beside it, never a pipe (a replay seeks it to where the
//!   recording had read, and the fuzzer's forkserver child opens it); both in memory
//!   where the machine allows ([`crate::systest::scratch_dir`]).
//! - **Running** ([`run_to_end`]): the program leads its own process group, reads
//!   stdin from that file, has its output captured (the last 64 KiB) or discarded, and
//!   is killed with everything it started when it overstays its time.

use crate::systest::{materialise, scratch_dir, RunStatus};
use anyhow::{Context as _, Result};
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use trestle_abi::unit::SystemTest;
use wait_timeout::ChildExt as _;

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
        .stderr(pipe_or_null(capture.stderr))
        .process_group(0);
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot run {}", cmd.get_program().to_string_lossy()))?;
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let raw = child.wait_timeout(timeout)?;
    let mut peak_rss_kib = 0;
    if raw.is_none() {
        peak_rss_kib = tree_peak_rss_kib(child.id());
        // SAFETY: signalling the child's own process group.
        unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
        let _ = child.wait();
    }
    let wall = start.elapsed();
    let status = match raw {
        None => RunStatus::TimedOut,
        Some(s) => match (s.code(), s.signal()) {
            (Some(c), _) => RunStatus::Exited(c),
            (None, sig) => RunStatus::Signaled(sig.unwrap_or(0)),
        },
    };
    let (stdout, stdout_len) = out.join().expect("the output reader does not panic");
    let (stderr, stderr_len) = err.join().expect("the output reader does not panic");
    Ok(Ended {
        status,
        raw,
        stdout,
        stderr,
        output_len: (stdout_len, stderr_len),
        wall,
        peak_rss_kib,
    })
}

/// The largest `VmHWM` (peak resident memory, KiB) of `root` and the processes below
/// it, from /proc; 0 when none can be read. A sandboxed run is bubblewrap, its
/// `trestle-exec` and the program, each a child of the one before.
fn tree_peak_rss_kib(root: u32) -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let parents: Vec<(u32, u32)> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // The command may hold spaces and parentheses: the fields start after the last ')'.
            let ppid = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((pid, ppid))
        })
        .collect();
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let p = tree[i];
        tree.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    tree.iter()
        .filter_map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .max()
        .unwrap_or(0)
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

#[cfg(test)]
mod tests {
    use super::*;

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

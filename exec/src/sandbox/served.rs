//! The sandbox's fast path: a program built with `trestle-cc` is started once as a
//! forkserver ([`crate::forkserver`]), inside bubblewrap when the sandbox isolates,
//! and every run is a fork of it. Validating, lifting and reducing then cost about
//! what a fuzzer's execution costs, not a bubblewrap start each.
//!
//! The server runs in the sandbox with the limits that hold for the whole tree
//! (file size, open files, no core dumps); each child sets its own CPU and memory
//! limits, writes its stdout and stderr to files of its run, and leaves its crash
//! stack in its own file (`libtrestle_crashstack.so`, preloaded into the server, reads
//! the file's name when the crash happens). The sandbox shares the process-id
//! namespace with trestle, so that a hung child's process group can be killed from
//! outside; the network, host name, IPC and user namespaces are its own. Each run's
//! files are laid out in one directory bound read-write into the sandbox.

use super::{Limits, Outcome, ProgramKind};
use crate::forkserver::{ForkServer, Request, RunEnd};
use crate::launch::Layout;
use crate::systest::RunStatus;
use anyhow::Context as _;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use trestle_abi::sysserver::ChildLimits;
use trestle_abi::unit::SystemTest;

/// A served program: its server (while it serves) and where its runs are laid out.
pub struct Served {
    pub program: PathBuf,
    pub kind: ProgramKind,
    server: Option<ForkServer>,
    base: tempfile::TempDir,
}

impl std::fmt::Debug for Served {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Served")
            .field("program", &self.program)
            .field("serving", &self.server.is_some())
            .finish()
    }
}

/// How long a run past its wall-clock limit gets, after SIGXCPU, for the crash
/// handler to write where it hung before SIGKILL: a hang that sleeps or waits on the
/// kernel (gzip walking `/`) never reaches its CPU limit, and had no frames. (A run
/// started per test in the sandbox still has none: bubblewrap's own session keeps
/// the signal from the program.)
const STACK_GRACE: Duration = Duration::from_millis(500);

/// What a served run produced, before the sandbox reads a crash out of it.
pub(super) struct ServedRun {
    pub outcome: Outcome,
    /// The crash stack file of the run (if the child crashed under the preload).
    pub stack: PathBuf,
    /// The run's files, removed when this is dropped.
    _layout: Layout,
}

/// The last `OUTPUT_TAIL` bytes of a file (empty if there is none), and its length.
fn tail(path: &Path) -> anyhow::Result<(Vec<u8>, u64)> {
    let mut b = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            return Err(e)
                .with_context(|| format!("cannot read the run's output {}", path.display()))
        }
    };
    let len = b.len() as u64;
    if b.len() > crate::launch::OUTPUT_TAIL {
        b.drain(..b.len() - crate::launch::OUTPUT_TAIL);
    }
    Ok((b, len))
}

impl Served {
    /// Start serving `program` (canonical); `server` stays `None` when it cannot
    /// (then the sandbox starts it for every run).
    pub fn start(
        program: &Path,
        kind: ProgramKind,
        bwrap: Option<&Path>,
        preload: &Path,
        limits: &Limits,
    ) -> anyhow::Result<Served> {
        let base = crate::systest::scratch_dir("trestle-served-")?;
        let mut served = Served {
            program: program.to_path_buf(),
            kind,
            server: None,
            base,
        };
        if kind.trestle {
            served.server = served.launch(bwrap, preload, limits);
        }
        Ok(served)
    }

    /// Whether runs go through a forkserver.
    pub fn serving(&self) -> bool {
        self.server.is_some()
    }

    fn launch(&self, bwrap: Option<&Path>, preload: &Path, limits: &Limits) -> Option<ForkServer> {
        let base = self.base.path();
        let mut cmd = match bwrap {
            Some(bwrap) => super::bwrap_command(bwrap, &self.program, &[preload], &[base], false),
            None => Command::new(&self.program),
        };
        cmd.current_dir(base);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("TRESTLE_") || k == "LD_PRELOAD" {
                cmd.env_remove(k);
            }
        }
        cmd.env("LD_BIND_NOW", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if self.kind.sanitizer {
            super::sanitizer_env(&mut cmd);
        } else {
            // Installs the crash handler in the server; each child names its own file.
            cmd.env("LD_PRELOAD", preload)
                .env(trestle_abi::fuzz::ENV_CRASH_STACK, base.join("stack"));
        }
        let (file_size, open_files) = (limits.file_size, limits.open_files);
        // SAFETY: setrlimit is async-signal-safe and affects only the server and the
        // children it forks.
        unsafe {
            cmd.pre_exec(move || {
                for (res, v) in [
                    (libc::RLIMIT_FSIZE, file_size),
                    (libc::RLIMIT_NOFILE, open_files),
                    (libc::RLIMIT_CORE, 0),
                ] {
                    libc::setrlimit(
                        res,
                        &libc::rlimit {
                            rlim_cur: v,
                            rlim_max: v,
                        },
                    );
                }
                Ok(())
            });
        }
        match ForkServer::start(cmd) {
            Ok(server) => server.map(|mut s| {
                s.stop_with_stack(STACK_GRACE);
                s
            }),
            // Runs stay correct without the server, only slower: say so, go on.
            Err(e) => {
                eprintln!("trestle: {} cannot be started as a forkserver ({e}); every run starts it afresh", self.program.display());
                None
            }
        }
    }

    /// Run `test` through the server; `None` if there is no server (any more): the
    /// caller spawns the program instead. A server that dies during a run is started
    /// again and the run repeated once.
    pub(super) fn run(
        &mut self,
        test: &SystemTest,
        extra_env: &[(String, String)],
        bwrap: Option<&Path>,
        preload: &Path,
        limits: &Limits,
    ) -> anyhow::Result<Option<ServedRun>> {
        for attempt in 0..2 {
            if attempt > 0 {
                self.server = self.launch(bwrap, preload, limits);
            }
            let Some(server) = self.server.as_mut() else {
                return Ok(None);
            };
            let layout = Layout::new_in(test, self.base.path())?;
            let (out, err, stack) = (
                layout.side.join("stdout"),
                layout.side.join("stderr"),
                layout.side.join("stack"),
            );
            let (argv, mut env) = crate::forkserver::test_argv_env(&self.program, test);
            env.extend(extra_env.iter().map(|(k, v)| (k.as_bytes(), v.as_bytes())));
            env.push((
                trestle_abi::fuzz::ENV_CRASH_STACK.as_bytes(),
                stack.as_os_str().as_bytes(),
            ));
            let child_limits = ChildLimits {
                cpu_secs: limits.cpu_secs.max(1),
                address_space: if self.kind.sanitizer {
                    0
                } else {
                    limits.memory
                },
                open_files: 0,
            };
            let req = Request {
                argv: &argv,
                env: &env,
                cwd: &layout.cwd,
                stdin: &layout.stdin,
                stdout: Some(&out),
                stderr: Some(&err),
                limits: child_limits,
            };
            let started = Instant::now();
            let (status, cpu_ms, max_rss_kib) = match server.run(&req, limits.wall) {
                RunEnd::Ended(e) => (
                    RunStatus::from_wait(e.status as i32),
                    u64::from(e.cpu_ms),
                    u64::from(e.max_rss_kib),
                ),
                RunEnd::Timeout(e) => (
                    RunStatus::TimedOut,
                    e.map_or(0, |e| u64::from(e.cpu_ms)),
                    e.map_or(0, |e| u64::from(e.max_rss_kib)),
                ),
                RunEnd::ServerDied => {
                    self.server = None;
                    continue;
                }
            };
            let wall = started.elapsed();
            let ((stdout, stdout_len), (stderr, stderr_len)) = (tail(&out)?, tail(&err)?);
            let outcome = Outcome {
                status,
                stdout,
                stderr,
                output_len: (stdout_len, stderr_len),
                max_rss_kib,
                cpu_ms,
                wall,
            };
            return Ok(Some(ServedRun {
                outcome,
                stack,
                _layout: layout,
            }));
        }
        Ok(None)
    }
}

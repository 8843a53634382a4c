//! The host side of the system-test forkserver (`trestle_abi::sysserver`): start a
//! program built with `trestle-cc` once, then have it fork a child per system test.
//!
//! [`ForkServer::launch`] spawns the program with the control and status pipes on the
//! agreed descriptors and waits for its hello; a program that does not say hello (not
//! built with `trestle-cc`, or it never reaches `main`) is no server, and the caller
//! spawns it per test instead. Why it is none is a [`ServeError`]: above all, a hello
//! of another protocol version ([`ServeError::VersionMismatch`]) means the program was
//! built with another trestle's `trestle-cc`, which the user should hear about rather
//! than get per-test spawning at a fraction of the speed. [`ForkServer::start`] is
//! the lenient form for callers that just fall back: it warns about that case on
//! stderr, naming the program. [`ForkServer::run`] sends one request and waits for
//! the child's end within a time limit, killing the child's process group when it is
//! exceeded. A server that dies (or garbles its status pipe) is reported as such
//! ([`RunEnd::ServerDied`]); the caller starts a new one.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use trestle_abi::sysserver::{
    ChildLimits, Ended, SysRun, CONTROL_FD, ENV_SYS_FORKSERVER, HELLO, STATUS_FD,
};

/// How long a starting program has to say hello.
const HELLO_WAIT: Duration = Duration::from_secs(10);
/// How long the server has to report a child's pid.
const PID_WAIT: Duration = Duration::from_secs(5);

/// Why a program does not serve (or no longer does): what its status pipe said.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// It could not be started (or the pipes to it could not be made).
    #[error("cannot start it: {0}")]
    Spawn(#[source] std::io::Error),
    /// Nothing within the time allowed for a hello.
    #[error("no hello within {}s (not built with trestle-cc, or it never reaches main)", HELLO_WAIT.as_secs())]
    NoHello,
    /// A first word other than [`HELLO`]: a runtime speaking another version of the
    /// protocol (built with another trestle's `trestle-cc`), or something else.
    #[error("{}", mismatch(.seen))]
    VersionMismatch {
        /// The word it said.
        seen: u32,
    },
    /// The status pipe closed: the program exited (or closed the descriptor).
    #[error(
        "it closed its status pipe (it exited: not built with trestle-cc, or it ends before main)"
    )]
    Closed,
    /// Reading the status pipe failed.
    #[error("cannot read its status pipe: {0}")]
    Io(#[source] std::io::Error),
    /// A frame of a length the protocol does not have there.
    #[error("a status frame of {len} bytes where {expected} were due")]
    BadFrame {
        /// The length it gave.
        len: u32,
        /// The length due.
        expected: usize,
    },
}

/// Versions are the low byte of the hello; the rest says it is trestle's.
fn mismatch(&seen: &u32) -> String {
    if seen >> 8 == HELLO >> 8 {
        format!(
            "it speaks forkserver protocol version {}, this trestle version {}: rebuild it with this trestle's trestle-cc",
            seen & 0xff,
            HELLO & 0xff
        )
    } else {
        format!("it said {seen:#010x} where the hello {HELLO:#010x} was due")
    }
}

/// How one run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// The child ended: its wait status and what it used.
    Ended(Ended),
    /// It ran past the time limit and was killed: what it had used by then, when the
    /// server reported its end (a blow-up stopped by the clock shows in its peak
    /// memory).
    Timeout(Option<Ended>),
    /// The server went away; the run's outcome is unknown.
    ServerDied,
}

/// One execution.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// `argv[0]` and the arguments.
    pub argv: &'a [&'a [u8]],
    /// Variables set on top of the server's environment.
    pub env: &'a [(&'a [u8], &'a [u8])],
    /// Working directory (absolute).
    pub cwd: &'a Path,
    /// The file read as stdin (absolute).
    pub stdin: &'a Path,
    /// Files for stdout and stderr (absolute; `None`: the server's, usually nowhere).
    pub stdout: Option<&'a Path>,
    /// See `stdout`.
    pub stderr: Option<&'a Path>,
    /// Limits the child sets on itself.
    pub limits: ChildLimits,
}

/// A request's `argv` and its variables (name, value), borrowed.
pub type ArgvEnv<'a> = (Vec<&'a [u8]>, Vec<(&'a [u8], &'a [u8])>);

/// The `argv` (`program` and the test's arguments) and the variables of `test`, as a
/// [`Request`] takes them.
pub fn test_argv_env<'a>(
    program: &'a Path,
    test: &'a trestle_abi::unit::SystemTest,
) -> ArgvEnv<'a> {
    let mut argv: Vec<&[u8]> = vec![program.as_os_str().as_bytes()];
    argv.extend(test.args.iter().map(|a| a.as_bytes()));
    let env = test
        .env
        .iter()
        .map(|(k, v)| (k.as_bytes(), v.as_bytes()))
        .collect();
    (argv, env)
}

/// A running forkserver.
pub struct ForkServer {
    child: Child,
    control: std::fs::File,
    status: std::fs::File,
    /// Coverage-map entries the program uses (its edges), as the server said.
    pub edges: usize,
    /// How long a run past its limit gets, after SIGXCPU, to end before SIGKILL
    /// ([`ForkServer::stop_with_stack`]); none: SIGKILL at once.
    grace: Option<Duration>,
}

fn pipe() -> std::io::Result<(std::fs::File, std::fs::File)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    use std::os::fd::FromRawFd as _;
    // SAFETY: both descriptors are fresh and owned from here on.
    Ok(unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    })
}

/// Wait until `fd` is readable (or closed), at most `limit`: false if it is not.
fn readable(fd: i32, limit: Duration) -> std::io::Result<bool> {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: polling one descriptor we own.
        let n = unsafe { libc::poll(&mut p, 1, left.as_millis().min(i32::MAX as u128) as i32) };
        if n > 0 {
            return Ok(true);
        }
        if n == 0 {
            return Ok(false);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// The program a server command runs: its last word. A server takes no arguments of
/// its own (each request brings its `argv`), so that is the program whether it runs
/// alone or wrapped (bubblewrap's command line ends in it).
fn program_of(cmd: &Command) -> &OsStr {
    cmd.get_args().last().unwrap_or(cmd.get_program())
}

impl ForkServer {
    /// Start `cmd` (the program, its environment and limits already set) as a server.
    /// `Ok(None)` if it does not serve; `Err` if it cannot be started or its status
    /// pipe cannot be read. A program of another protocol version is one line on
    /// stderr naming it (the caller falls back to spawning it, slowly); callers that
    /// want that as an error use [`ForkServer::launch`].
    pub fn start(cmd: Command) -> std::io::Result<Option<ForkServer>> {
        let program = std::path::PathBuf::from(program_of(&cmd));
        match ForkServer::launch(cmd) {
            Ok(server) => Ok(Some(server)),
            Err(ServeError::Spawn(e) | ServeError::Io(e)) => Err(e),
            Err(e @ ServeError::VersionMismatch { .. }) => {
                eprintln!(
                    "trestle: {} does not serve system tests: {e}; starting it for every test",
                    program.display()
                );
                Ok(None)
            }
            Err(ServeError::NoHello | ServeError::Closed | ServeError::BadFrame { .. }) => Ok(None),
        }
    }

    /// Start `cmd` (the program, its environment and limits already set) as a server,
    /// or say why it is none (a program that is none is ended before this returns).
    pub fn launch(mut cmd: Command) -> Result<ForkServer, ServeError> {
        let (ctl_read, ctl_write) = pipe().map_err(ServeError::Spawn)?;
        let (st_read, st_write) = pipe().map_err(ServeError::Spawn)?;
        use std::os::fd::AsRawFd as _;
        let (cr, sw) = (ctl_read.as_raw_fd(), st_write.as_raw_fd());
        cmd.env(ENV_SYS_FORKSERVER, "1").stdin(Stdio::null());
        // SAFETY: only dup2 between fork and exec; dup2 clears close-on-exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(cr, CONTROL_FD) < 0 || libc::dup2(sw, STATUS_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(ServeError::Spawn)?;
        drop(ctl_read);
        drop(st_write);
        let mut server = ForkServer {
            child,
            control: ctl_write,
            status: st_read,
            edges: 0,
            grace: None,
        };
        match server.read_word(HELLO_WAIT)? {
            Some(HELLO) => {}
            Some(seen) => return Err(ServeError::VersionMismatch { seen }),
            None => return Err(ServeError::NoHello),
        }
        // The edge count follows the hello at once.
        server.edges = server.read_word(HELLO_WAIT)?.ok_or(ServeError::NoHello)? as usize;
        Ok(server)
    }

    /// One frame's payload of `len` bytes, within `limit`; `Ok(None)` if none came.
    fn read_frame(&mut self, limit: Duration, len: usize) -> Result<Option<Vec<u8>>, ServeError> {
        use std::io::Read as _;
        use std::os::fd::AsRawFd as _;
        if !readable(self.status.as_raw_fd(), limit).map_err(ServeError::Io)? {
            return Ok(None);
        }
        // The server writes a frame whole: one read takes it all. The header is
        // checked before anything more is waited for (a frame of another length
        // would otherwise leave the read waiting for bytes that never come).
        let io = |e: std::io::Error| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => ServeError::Closed,
            _ => ServeError::Io(e),
        };
        let mut frame = vec![0u8; 4 + len];
        let mut got = 0;
        while got < 4 {
            match self.status.read(&mut frame[got..]) {
                Ok(0) => return Err(ServeError::Closed),
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ServeError::Io(e)),
            }
        }
        let head = u32::from_le_bytes(frame[..4].try_into().expect("four bytes"));
        if head as usize != len {
            return Err(ServeError::BadFrame {
                len: head,
                expected: len,
            });
        }
        self.status.read_exact(&mut frame[got..]).map_err(io)?;
        frame.drain(..4);
        Ok(Some(frame))
    }

    fn read_word(&mut self, limit: Duration) -> Result<Option<u32>, ServeError> {
        let word = self.read_frame(limit, 4)?;
        Ok(word.map(|b| u32::from_le_bytes(b.try_into().expect("read_frame gives 4 bytes"))))
    }

    fn read_ended(&mut self, limit: Duration) -> Result<Option<Ended>, ServeError> {
        let ended = self.read_frame(limit, Ended::LEN)?;
        Ok(ended
            .map(|b| Ended::from_bytes(&b.try_into().expect("read_frame gives Ended::LEN bytes"))))
    }

    /// Run one request within `timeout`.
    pub fn run(&mut self, req: &Request<'_>, timeout: Duration) -> RunEnd {
        use std::io::Write as _;
        let path = |p: Option<&Path>| {
            p.map(|p| p.as_os_str().as_bytes().to_vec())
                .unwrap_or_default()
        };
        let run = SysRun {
            argv: req.argv.iter().map(|a| a.to_vec()).collect(),
            env: req
                .env
                .iter()
                .map(|(k, v)| (k.to_vec(), v.to_vec()))
                .collect(),
            cwd: req.cwd.as_os_str().as_bytes().to_vec(),
            stdin: req.stdin.as_os_str().as_bytes().to_vec(),
            limits: req.limits,
            stdout: path(req.stdout),
            stderr: path(req.stderr),
        };
        let body = bincode::serialize(&run).expect("plain data serialises");
        let mut frame = (body.len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(&body);
        // The limit counts from the request, not from the child's pid: on a busy
        // machine the server may write the pid only after its child has run for a
        // while (the fork's parent waits for a core), and a 200 ms run then ended
        // "within" a 20 ms limit and joined the system fuzzer's queue.
        let deadline = Instant::now() + timeout;
        if self.control.write_all(&frame).is_err() {
            return RunEnd::ServerDied;
        }
        // A status pipe that closes, fails or garbles its frames is a dead server
        // alike: its runs can no longer be told apart, and the caller starts another.
        let Ok(Some(pid)) = self.read_word(PID_WAIT) else {
            return RunEnd::ServerDied;
        };
        let first = self.read_ended(deadline.saturating_duration_since(Instant::now()));
        if let Ok(Some(ended)) = first {
            // Exited, but past the limit: it did not end within it. A run a signal
            // ended (a crash) is said as it is, whenever it is read.
            let exited = libc::WIFEXITED(ended.status as i32);
            return if exited && Instant::now() > deadline {
                RunEnd::Timeout(Some(ended))
            } else {
                RunEnd::Ended(ended)
            };
        }
        if let (Some(grace), Ok(None)) = (self.grace, &first) {
            // SIGXCPU first, as the CPU limit would send it: a crash handler writes
            // where the run was (a hang that sleeps or waits on the kernel never
            // reaches its CPU limit), then the run ends by itself or is killed.
            // SAFETY: the child leads its own process group.
            unsafe { libc::kill(-(pid as i32), libc::SIGXCPU) };
            match self.read_ended(grace) {
                Ok(Some(ended)) => return RunEnd::Timeout(Some(ended)),
                Ok(None) => {}
                Err(_) => return RunEnd::ServerDied,
            }
        }
        // SAFETY: the child leads its own process group; end all of it.
        unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
        if first.is_err() {
            return RunEnd::ServerDied;
        }
        match self.read_ended(PID_WAIT) {
            Ok(Some(ended)) => RunEnd::Timeout(Some(ended)),
            _ => RunEnd::ServerDied,
        }
    }

    /// From now on, a run past its limit gets SIGXCPU and `grace` to end before
    /// SIGKILL, so that a crash handler names where it hung (validation; the fuzzer's
    /// runs are killed at once).
    pub fn stop_with_stack(&mut self, grace: Duration) {
        self.grace = Some(grace);
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// End the server (closing its control pipe ends it; a kill makes sure).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ForkServer {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A "program" that writes `frames` (as `printf` octal escapes) on the status pipe
    /// and exits (through /proc: a POSIX shell redirects only descriptors up to 9).
    fn fake(frames: &str) -> Command {
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(format!("printf '{frames}' > /proc/self/fd/{STATUS_FD}"));
        cmd
    }

    #[test]
    fn a_hello_of_another_version_is_a_version_mismatch_naming_both_versions() {
        // A version-2 hello: 0x54535302, little-endian.
        let e = ForkServer::launch(fake(r"\004\000\000\000\002\123\123\124"))
            .err()
            .expect("no server");
        assert!(
            matches!(e, ServeError::VersionMismatch { seen: 0x5453_5302 }),
            "{e:?}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains("version 2") && msg.contains("version 3") && msg.contains("rebuild"),
            "{msg}"
        );
        // The lenient form falls back (after its warning) rather than failing.
        assert!(ForkServer::start(fake(r"\004\000\000\000\002\123\123\124"))
            .unwrap()
            .is_none());
    }

    #[test]
    fn a_program_that_exits_or_garbles_its_hello_says_which() {
        let e = ForkServer::launch(fake("")).err().expect("no server");
        assert!(matches!(e, ServeError::Closed), "{e:?}");
        let e = ForkServer::launch(fake(r"\002\000\000\000ab"))
            .err()
            .expect("no server");
        assert!(
            matches!(
                e,
                ServeError::BadFrame {
                    len: 2,
                    expected: 4
                }
            ),
            "{e:?}"
        );
        let e = ForkServer::launch(fake(r"\004\000\000\000abcd"))
            .err()
            .expect("no server");
        assert!(e.to_string().contains("where the hello"), "{e}");
        let e = ForkServer::launch(Command::new("/nonexistent/trestle-test-program"))
            .err()
            .expect("no server");
        assert!(matches!(e, ServeError::Spawn(_)), "{e:?}");
    }

    #[test]
    fn the_program_of_a_wrapped_server_command_is_its_last_word() {
        let mut cmd = Command::new("bwrap");
        cmd.args(["--ro-bind", "/", "/", "--", "/bin/prog"]);
        assert_eq!(program_of(&cmd), "/bin/prog");
        assert_eq!(program_of(&Command::new("/bin/prog")), "/bin/prog");
    }
}

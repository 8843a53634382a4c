//! The host side of the system-test forkserver (`trestle_abi::sysserver`): start a
//! program built with `trestle-cc` once, then have it fork a child per system test.
//!
//! [`ForkServer::start`] spawns the program with the control and status pipes on the
//! agreed descriptors and waits for its hello; a program that does not say hello (not
//! built with `trestle-cc`, or it never reaches `main`) is no server, and the caller
//! spawns it per test instead. [`ForkServer::run`] sends one request and waits for
//! the child's end within a time limit, killing the child's process group when it is
//! exceeded. A server that dies is reported as such ([`RunEnd::ServerDied`]); the
//! caller starts a new one.

use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use trestle_abi::sysserver::{ChildLimits, Ended, SysRun, CONTROL_FD, ENV_SYS_FORKSERVER, HELLO, STATUS_FD};

/// How long a starting program has to say hello.
const HELLO_WAIT: Duration = Duration::from_secs(10);
/// How long the server has to report a child's pid.
const PID_WAIT: Duration = Duration::from_secs(5);

/// How one run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// The child ended: its wait status and what it used.
    Ended(Ended),
    /// It ran past the time limit and was killed.
    Timeout,
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

/// A running forkserver.
pub struct ForkServer {
    child: Child,
    control: std::fs::File,
    status: std::fs::File,
    /// Coverage-map entries the program uses (its edges), as the server said.
    pub edges: usize,
}

fn pipe() -> std::io::Result<(std::fs::File, std::fs::File)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    use std::os::fd::FromRawFd as _;
    // SAFETY: both descriptors are fresh and owned from here on.
    Ok(unsafe { (std::fs::File::from_raw_fd(fds[0]), std::fs::File::from_raw_fd(fds[1])) })
}

/// Wait until `fd` is readable, at most `limit`.
fn readable(fd: i32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: polling one descriptor we own.
        let n = unsafe { libc::poll(&mut p, 1, left.as_millis().min(i32::MAX as u128) as i32) };
        if n > 0 {
            return true;
        }
        if n == 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return false;
        }
    }
}

impl ForkServer {
    /// Start `cmd` (the program, its environment and limits already set) as a server.
    /// `Ok(None)` if it does not serve.
    pub fn start(mut cmd: Command) -> std::io::Result<Option<ForkServer>> {
        let (ctl_read, ctl_write) = pipe()?;
        let (st_read, st_write) = pipe()?;
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
        let child = cmd.spawn()?;
        drop(ctl_read);
        drop(st_write);
        let mut server = ForkServer { child, control: ctl_write, status: st_read, edges: 0 };
        // Anything else (no word, a program that exited, another version) is no
        // server; dropping it ends the program.
        if server.read_word(HELLO_WAIT) != Some(HELLO) {
            return Ok(None);
        }
        let Some(edges) = server.read_word(HELLO_WAIT) else { return Ok(None) };
        server.edges = edges as usize;
        Ok(Some(server))
    }

    /// One frame's payload of `len` bytes, within `limit`; `None` if none came, or
    /// one of another length.
    fn read_frame(&mut self, limit: Duration, len: usize) -> Option<Vec<u8>> {
        use std::io::Read as _;
        use std::os::fd::AsRawFd as _;
        if !readable(self.status.as_raw_fd(), limit) {
            return None;
        }
        let mut head = [0u8; 4];
        self.status.read_exact(&mut head).ok()?;
        if u32::from_le_bytes(head) as usize != len {
            return None;
        }
        let mut payload = vec![0u8; len];
        self.status.read_exact(&mut payload).ok()?;
        Some(payload)
    }

    fn read_word(&mut self, limit: Duration) -> Option<u32> {
        let b = self.read_frame(limit, 4)?;
        Some(u32::from_le_bytes(b.try_into().ok()?))
    }

    fn read_ended(&mut self, limit: Duration) -> Option<Ended> {
        let b = self.read_frame(limit, Ended::LEN)?;
        Some(Ended::from_bytes(&b.try_into().ok()?))
    }

    /// Run one request within `timeout`.
    pub fn run(&mut self, req: &Request<'_>, timeout: Duration) -> RunEnd {
        use std::io::Write as _;
        let path = |p: Option<&Path>| p.map(|p| p.as_os_str().as_bytes().to_vec()).unwrap_or_default();
        let run = SysRun {
            argv: req.argv.iter().map(|a| a.to_vec()).collect(),
            env: req.env.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect(),
            cwd: req.cwd.as_os_str().as_bytes().to_vec(),
            stdin: req.stdin.as_os_str().as_bytes().to_vec(),
            limits: req.limits,
            stdout: path(req.stdout),
            stderr: path(req.stderr),
        };
        let body = bincode::serialize(&run).expect("plain data serialises");
        let mut frame = (body.len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(&body);
        if self.control.write_all(&frame).is_err() {
            return RunEnd::ServerDied;
        }
        let Some(pid) = self.read_word(PID_WAIT) else { return RunEnd::ServerDied };
        match self.read_ended(timeout) {
            Some(ended) => RunEnd::Ended(ended),
            None => {
                // SAFETY: the child leads its own process group; end all of it.
                unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
                match self.read_ended(PID_WAIT) {
                    Some(_) => RunEnd::Timeout,
                    None => RunEnd::ServerDied,
                }
            }
        }
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

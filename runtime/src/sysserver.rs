//! The server side of the system-test forkserver (`trestle_abi::sysserver`).
//!
//! It runs at the start of `main`, in passive mode, after the C runtime and the
//! program's constructors: each child is a fork of a process that has not run any of
//! `main` yet. The child does not return into the `main` that called the hook (its
//! arguments are fixed); it calls `main` again with the request's arguments and exits
//! with what that returns, as the C runtime would. The nested `main` finds the hook
//! already past and goes on.

use std::sync::atomic::{AtomicBool, Ordering};
use trestle_abi::sysserver::{ChildLimits, SysRun, CONTROL_FD, ENV_SYS_FORKSERVER, HELLO, MAX_REQUEST, STATUS_FD};

/// Set in a child (and in the server once it started): the hook must not serve again.
static STARTED: AtomicBool = AtomicBool::new(false);

extern "C" {
    fn main(argc: libc::c_int, argv: *const *const libc::c_char, envp: *const *const libc::c_char) -> libc::c_int;
    static environ: *const *const libc::c_char;
}

fn read_exact(fd: i32, buf: &mut [u8]) -> bool {
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: reading into the unfilled part of `buf`.
        let n = unsafe { libc::read(fd, buf[done..].as_mut_ptr().cast(), buf.len() - done) };
        if n > 0 {
            done += n as usize;
        } else if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        } else {
            return false;
        }
    }
    true
}

fn write_word(fd: i32, v: u32) -> bool {
    let mut frame = [0u8; 8];
    frame[..4].copy_from_slice(&4u32.to_le_bytes());
    frame[4..].copy_from_slice(&v.to_le_bytes());
    // SAFETY: writing a local buffer.
    unsafe { libc::write(fd, frame.as_ptr().cast(), frame.len()) == frame.len() as isize }
}

fn read_request() -> Option<SysRun> {
    let mut len = [0u8; 4];
    if !read_exact(CONTROL_FD, &mut len) {
        return None;
    }
    let len = u32::from_le_bytes(len);
    if len > MAX_REQUEST {
        return None;
    }
    let mut body = vec![0u8; len as usize];
    if !read_exact(CONTROL_FD, &mut body) {
        return None;
    }
    bincode::deserialize(&body).ok()
}

fn c_string(b: &[u8]) -> std::ffi::CString {
    std::ffi::CString::new(b.iter().copied().filter(|&c| c != 0).collect::<Vec<u8>>()).expect("NUL bytes removed")
}

/// Serve system tests if the host asked for it; returns at once otherwise, and in
/// every child.
pub fn maybe_serve() {
    if STARTED.swap(true, Ordering::AcqRel) || std::env::var_os(ENV_SYS_FORKSERVER).is_none() {
        return;
    }
    if !write_word(STATUS_FD, HELLO) {
        // Nobody listens: run as a plain program.
        return;
    }
    loop {
        let Some(run) = read_request() else {
            // The host closed the pipe (or sent garbage): done.
            // SAFETY: ends the server.
            unsafe { libc::_exit(0) }
        };
        // Everything the child needs is prepared before the fork.
        let argv: Vec<std::ffi::CString> = run.argv.iter().map(|a| c_string(a)).collect();
        let env: Vec<(std::ffi::CString, std::ffi::CString)> = run.env.iter().map(|(k, v)| (c_string(k), c_string(v))).collect();
        let cwd = c_string(&run.cwd);
        let stdin = c_string(&run.stdin);
        let limits = run.limits;
        // SAFETY: the server is single-threaded; the child only uses what is above.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            child(&argv, &env, &cwd, &stdin, limits);
        }
        if pid < 0 || !write_word(STATUS_FD, pid.max(0) as u32) {
            // SAFETY: ends the server.
            unsafe { libc::_exit(1) }
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
            if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                break;
            }
        }
        if !write_word(STATUS_FD, status as u32) {
            // SAFETY: ends the server.
            unsafe { libc::_exit(1) }
        }
    }
}

/// The child: take the request's limits, directory, input and environment, run `main`.
fn child(argv: &[std::ffi::CString], env: &[(std::ffi::CString, std::ffi::CString)], cwd: &std::ffi::CStr, stdin: &std::ffi::CStr, limits: ChildLimits) -> ! {
    // SAFETY: plain calls in a fresh, single-threaded child; `main` is the program's.
    unsafe {
        libc::close(CONTROL_FD);
        libc::close(STATUS_FD);
        for (resource, value) in [
            (libc::RLIMIT_CPU, limits.cpu_secs),
            (libc::RLIMIT_AS, limits.address_space),
            (libc::RLIMIT_NOFILE, limits.open_files),
        ] {
            if value > 0 {
                let l = libc::rlimit { rlim_cur: value, rlim_max: value };
                libc::setrlimit(resource, &l);
            }
        }
        // Its own process group: the host ends a hang with everything it started.
        libc::setpgid(0, 0);
        if libc::chdir(cwd.as_ptr()) != 0 {
            libc::_exit(126);
        }
        let fd = libc::open(stdin.as_ptr(), libc::O_RDONLY);
        if fd >= 0 {
            libc::dup2(fd, 0);
            if fd != 0 {
                libc::close(fd);
            }
        }
        for (k, v) in env {
            libc::setenv(k.as_ptr(), v.as_ptr(), 1);
        }
        let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        let code = main(argv.len() as libc::c_int, ptrs.as_ptr(), environ);
        libc::exit(code)
    }
}

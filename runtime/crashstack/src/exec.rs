//! `trestle-exec STATUS -- PROGRAM [ARG...]`: runs PROGRAM as its child inside a
//! validation sandbox and writes how it ended to STATUS, because the sandbox
//! (bubblewrap) folds a death by signal into an exit status of 128 + signal.
//!
//! STATUS gets `exit N` or `signal N`, then `maxrss KIB` and `cpu_ms MS`. The
//! supervisor exits as its child did (128 + signal for a signal).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt as _;

fn main() {
    let args: Vec<_> = std::env::args_os().collect();
    if args.len() < 4 || args[2] != "--" {
        eprintln!("usage: trestle-exec STATUS -- PROGRAM [ARG...]");
        std::process::exit(125);
    }
    let status_path = args[1].clone();
    let argv: Vec<CString> = match args[3..]
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect()
    {
        Ok(v) => v,
        Err(_) => {
            eprintln!("trestle-exec: an argument contains a NUL byte");
            std::process::exit(125);
        }
    };
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    // SAFETY: fork in a single-threaded process; the child only calls execv and _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        eprintln!("trestle-exec: fork: {}", std::io::Error::last_os_error());
        std::process::exit(125);
    }
    if pid == 0 {
        // SAFETY: argv is a NULL-terminated array of valid C strings.
        unsafe {
            libc::execv(ptrs[0], ptrs.as_ptr());
            let msg = b"trestle-exec: cannot execute the program\n";
            libc::write(2, msg.as_ptr() as *const libc::c_void, msg.len());
            libc::_exit(127);
        }
    }
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid out-parameter.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: waiting for our own child.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            break;
        }
        if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            eprintln!("trestle-exec: wait: {}", std::io::Error::last_os_error());
            std::process::exit(125);
        }
    }
    let cpu_ms = (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1000
        + (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1000;
    let (line, code) = if libc::WIFSIGNALED(status) {
        let s = libc::WTERMSIG(status);
        (format!("signal {s}"), 128 + s)
    } else {
        let c = libc::WEXITSTATUS(status);
        (format!("exit {c}"), c)
    };
    let text = format!("{line}\nmaxrss {}\ncpu_ms {cpu_ms}\n", usage.ru_maxrss);
    if let Err(e) = std::fs::write(&status_path, text) {
        eprintln!(
            "trestle-exec: cannot write {}: {e}",
            std::path::Path::new(&status_path).display()
        );
    }
    std::process::exit(code);
}

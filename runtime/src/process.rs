//! Child processes, as the recording sees them: `fork`, `vfork`, `posix_spawn` and
//! `popen` start one, `wait`, `waitpid`, `wait3`, `wait4`, `waitid` and `pclose` wait
//! for one. The pass renames these calls to the wrappers here.
//!
//! A unit is replayed alone in a fresh process, which has no children. A call that
//! starts a child and waits for it replays as recorded (the replay starts its own);
//! a call that waits for a child started before it began (mawk's `wait_for`,
//! `file_close`, `close_out_pipes`) would find none. The recording marks such
//! invocations (`Record::Unreplayable`), and `carve` leaves them out with the reason.
//!
//! Which invocations: those opened after the waited-for child was started. The
//! wrappers note, for each child, the sequence number the next carved invocation
//! will get; invocations numbered from there on did not see it start.

use crate::{guard, lock, mode, MODE_RECORD};
use libc::{c_char, c_int, pid_t, FILE};
use trestle_abi::trace::Unreplayable;

/// A child started by the recorded process.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Child {
    /// Its process id (0 for a `popen` stream, whose pid the C library keeps).
    pid: pid_t,
    /// The `FILE` of a `popen`ed command.
    stream: usize,
    /// The sequence number of the first invocation opened after it started.
    born: u64,
}

/// `errno` as a wait left it, put back when dropped: the caller reads it after the
/// wrapper has written to the trace.
struct KeepErrno(c_int);

impl KeepErrno {
    fn new() -> Self {
        // SAFETY: the calling thread's errno.
        KeepErrno(unsafe { *libc::__errno_location() })
    }
}

impl Drop for KeepErrno {
    fn drop(&mut self) {
        // SAFETY: the calling thread's errno.
        unsafe { *libc::__errno_location() = self.0 };
    }
}

fn recording() -> bool {
    mode() == MODE_RECORD
}

/// A child was started: `pid` (or the `popen` stream `stream`).
fn started(pid: pid_t, stream: usize) {
    guard("the child process hook", || {
        if let Some(rt) = lock().as_mut() {
            let born = rt.next_seq;
            rt.children.push(Child { pid, stream, born });
        }
    })
}

/// In a child just forked: its parent's children are not its own.
fn forked_child() {
    guard("the child process hook", || {
        if let Some(rt) = lock().as_mut() {
            rt.children.clear();
        }
    })
}

/// The process waited for the child `which` picks (`None`: one it cannot tell, so
/// any it has): every open invocation opened after that child started cannot be
/// replayed.
fn waited(call: &str, which: Option<&dyn Fn(&Child) -> bool>) {
    guard("the wait hook", || {
        if let Some(rt) = lock().as_mut() {
            let born = match which {
                Some(f) => rt
                    .children
                    .iter()
                    .position(f)
                    .map(|i| rt.children.remove(i).born),
                None => rt.children.iter().map(|c| c.born).min(),
            };
            // A child the wrappers did not see start (started by code that is not
            // instrumented): every open invocation may have begun after it.
            let born = born.unwrap_or(0);
            rt.mark_unreplayable(born, &Unreplayable::WaitsForEarlierChild(call.to_owned()));
        }
    })
}

/// After a wait that returned `ret` (with `errno` as it left it): which child it
/// reaped, if any, and whether it observed children at all.
fn after_wait(call: &str, ret: pid_t) {
    if !recording() {
        return;
    }
    let _errno = KeepErrno::new();
    if ret > 0 {
        waited(call, Some(&|c: &Child| c.pid == ret));
    } else if ret == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ECHILD) {
        // WNOHANG with children still running, or interrupted: the call saw
        // children that a replay would not have.
        waited(call, None);
    }
}

/// `fork`, noted.
///
/// # Safety
/// As `fork`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_fork() -> pid_t {
    // SAFETY: forwarding.
    let pid = unsafe { libc::fork() };
    if recording() {
        match pid {
            0 => forked_child(),
            p if p > 0 => started(p, 0),
            _ => {}
        }
    }
    pid
}

/// `vfork`, as `fork`: a wrapper cannot return into a child that shares its
/// parent's stack, and `fork` is a valid `vfork`.
///
/// # Safety
/// As `vfork`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_vfork() -> pid_t {
    // SAFETY: as documented.
    unsafe { __trestle_fork() }
}

/// After `posix_spawn(p)` returned `r` for `child`: note the child, and give its pid
/// to the caller's slot `pid` (which may be null).
///
/// # Safety
/// `pid` is null or the caller's writable slot.
unsafe fn spawned(r: c_int, child: pid_t, pid: *mut pid_t) -> c_int {
    if r == 0 {
        if recording() {
            started(child, 0);
        }
        if !pid.is_null() {
            // SAFETY: as documented.
            unsafe { *pid = child };
        }
    }
    r
}

/// `posix_spawn`, noted.
///
/// # Safety
/// As `posix_spawn`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_posix_spawn(
    pid: *mut pid_t,
    path: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    let mut child: pid_t = 0;
    // SAFETY: forwarding, with our own pid slot.
    let r = unsafe { libc::posix_spawn(&mut child, path, actions, attr, argv, envp) };
    // SAFETY: the caller's slot, as the caller passed it.
    unsafe { spawned(r, child, pid) }
}

/// `posix_spawnp`, noted.
///
/// # Safety
/// As `posix_spawnp`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_posix_spawnp(
    pid: *mut pid_t,
    file: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    let mut child: pid_t = 0;
    // SAFETY: forwarding, with our own pid slot.
    let r = unsafe { libc::posix_spawnp(&mut child, file, actions, attr, argv, envp) };
    // SAFETY: the caller's slot, as the caller passed it.
    unsafe { spawned(r, child, pid) }
}

/// `popen`, noted.
///
/// # Safety
/// As `popen`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_popen(command: *const c_char, mode: *const c_char) -> *mut FILE {
    // SAFETY: forwarding.
    let fp = unsafe { libc::popen(command, mode) };
    if !fp.is_null() && recording() {
        started(0, fp as usize);
    }
    fp
}

/// `pclose`, noted: it waits for the stream's command.
///
/// # Safety
/// As `pclose`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_pclose(fp: *mut FILE) -> c_int {
    // SAFETY: forwarding.
    let r = unsafe { libc::pclose(fp) };
    if recording() {
        let stream = fp as usize;
        waited(
            "pclose",
            Some(&|c: &Child| c.pid == 0 && c.stream == stream),
        );
    }
    r
}

/// `wait`, noted.
///
/// # Safety
/// As `wait`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_wait(status: *mut c_int) -> pid_t {
    // SAFETY: forwarding.
    let r = unsafe { libc::wait(status) };
    after_wait("wait", r);
    r
}

/// `waitpid`, noted.
///
/// # Safety
/// As `waitpid`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_waitpid(
    pid: pid_t,
    status: *mut c_int,
    options: c_int,
) -> pid_t {
    // SAFETY: forwarding.
    let r = unsafe { libc::waitpid(pid, status, options) };
    after_wait("waitpid", r);
    r
}

/// `wait3`, noted.
///
/// # Safety
/// As `wait3`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_wait3(
    status: *mut c_int,
    options: c_int,
    usage: *mut libc::rusage,
) -> pid_t {
    // SAFETY: forwarding (`wait3` is `wait4` for any child).
    let r = unsafe { libc::wait4(-1, status, options, usage) };
    after_wait("wait3", r);
    r
}

/// `wait4`, noted.
///
/// # Safety
/// As `wait4`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_wait4(
    pid: pid_t,
    status: *mut c_int,
    options: c_int,
    usage: *mut libc::rusage,
) -> pid_t {
    // SAFETY: forwarding.
    let r = unsafe { libc::wait4(pid, status, options, usage) };
    after_wait("wait4", r);
    r
}

/// `waitid`, noted.
///
/// # Safety
/// As `waitid`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_waitid(
    idtype: libc::idtype_t,
    id: libc::id_t,
    info: *mut libc::siginfo_t,
    options: c_int,
) -> c_int {
    // SAFETY: forwarding.
    let r = unsafe { libc::waitid(idtype, id, info, options) };
    if recording() {
        let _errno = KeepErrno::new();
        // SAFETY: filled by a successful waitid (si_pid 0: nothing reaped).
        let pid = if r == 0 && !info.is_null() {
            unsafe { (*info).si_pid() }
        } else {
            -1
        };
        if pid > 0 {
            waited("waitid", Some(&|c: &Child| c.pid == pid));
        } else if r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ECHILD) {
            waited("waitid", None);
        }
    }
    r
}

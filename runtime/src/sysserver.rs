//! The server side of the system-test forkserver (`trestle_abi::sysserver`).
//!
//! It runs at the start of `main`, in passive mode (system fuzzing) or in replay mode
//! (`trestle replay`, the program's metadata loaded once for all the units it
//! replays), after the C runtime and the program's constructors: each child is a fork
//! of a process that has not run any of `main` yet. The child does not return into
//! the `main` that called the hook (its arguments are fixed); it calls `main` again
//! with the request's arguments and exits with what that returns, as the C runtime
//! would. The nested `main` finds the hook
//! already past and goes on.

use std::sync::atomic::{AtomicBool, Ordering};
use trestle_abi::sysserver::{
    ChildLimits, Ended, SysRun, CONTROL_FD, ENV_SYS_FORKSERVER, HELLO, MAX_REQUEST, STATUS_FD,
};

/// Set in a child (and in the server once it started): the hook must not serve again.
static STARTED: AtomicBool = AtomicBool::new(false);

/// Set in a child of a server that replays units.
static REPLAY_CHILD: AtomicBool = AtomicBool::new(false);

/// Whether this process is a replay server's child: its arguments are the server's
/// strings, no part of a fresh process's memory.
pub fn replay_child() -> bool {
    REPLAY_CHILD.load(Ordering::Relaxed)
}

extern "C" {
    fn main(
        argc: libc::c_int,
        argv: *const *const libc::c_char,
        envp: *const *const libc::c_char,
    ) -> libc::c_int;
    static environ: *const *const libc::c_char;
}

/// Fill `buf` from `fd`; returns how many bytes came before the end of the pipe.
fn read_full(fd: i32, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: reading into the unfilled part of `buf`.
        let n = unsafe { libc::read(fd, buf[done..].as_mut_ptr().cast(), buf.len() - done) };
        if n > 0 {
            done += n as usize;
        } else if n == 0 {
            break;
        } else {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
    Ok(done)
}

/// Write one frame: its length, then `payload`.
fn write_frame(fd: i32, payload: &[u8]) -> bool {
    let mut frame = Vec::with_capacity(4 + payload.len());
    frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    frame.extend_from_slice(payload);
    // SAFETY: writing a local buffer.
    unsafe { libc::write(fd, frame.as_ptr().cast(), frame.len()) == frame.len() as isize }
}

fn write_word(fd: i32, v: u32) -> bool {
    write_frame(fd, &v.to_le_bytes())
}

/// The next request; `None` when the host closed the pipe between requests (the end).
fn read_request() -> Result<Option<SysRun>, String> {
    let mut len = [0u8; 4];
    match read_full(CONTROL_FD, &mut len).map_err(|e| format!("cannot read a request: {e}"))? {
        0 => return Ok(None),
        4 => {}
        n => return Err(format!("a request's length ends after {n} of 4 bytes")),
    }
    let len = u32::from_le_bytes(len);
    if len > MAX_REQUEST {
        return Err(format!(
            "a request of {len} bytes, over the limit of {MAX_REQUEST}"
        ));
    }
    let mut body = vec![0u8; len as usize];
    let n = read_full(CONTROL_FD, &mut body).map_err(|e| format!("cannot read a request: {e}"))?;
    if n < body.len() {
        return Err(format!("a request ends after {n} of {len} bytes"));
    }
    bincode::deserialize(&body)
        .map(Some)
        .map_err(|e| format!("a request that does not decode (host and program built from different trestle versions?): {e}"))
}

fn c_string(b: &[u8]) -> std::ffi::CString {
    std::ffi::CString::new(b.iter().copied().filter(|&c| c != 0).collect::<Vec<u8>>())
        .expect("NUL bytes removed")
}

/// Bytes of stack a replay server's child zeroes below itself before `main`.
const STACK_SCRUB: usize = 128 << 10;

/// Zero [`STACK_SCRUB`] bytes of the stack below the caller. The server's own frames
/// (a request decoded, strings made) leave heap and stack addresses there, where a
/// fresh process's stack holds none, and a replayed call that keeps an uninitialised
/// slot (the register save area of a `va_list` whose caller passed no vector
/// registers) showed them as pointers into its context: `mean(3, ...)` of the
/// variadic test reached an extent its recording did not.
///
/// The whole pages further than [`SCRUB_BY_HAND`] below are handed back to the
/// kernel, which gives zeroed ones where the replay touches them; only the nearer
/// ones are written (writing all of it copied 32 pages into every child, a twentieth
/// of a replay's time).
#[inline(never)]
fn scrub_stack() {
    let here = 0u8;
    let sp = std::hint::black_box(&here) as *const u8 as usize;
    let keep = (sp - SCRUB_BY_HAND) & !(PAGE - 1);
    let start = keep - (STACK_SCRUB - SCRUB_BY_HAND);
    // SAFETY: the range lies wholly below this frame and what it calls (madvise's
    // few words): unused stack of this forked process. Its lowest byte is written
    // first, so the stack's mapping reaches as far down as writing all of it made it
    // reach (a fresh process's stack mapping starts that large, and what the runtime
    // takes for the stack follows the mapping); the pages above it are not touched.
    unsafe {
        std::ptr::write_volatile(start as *mut u8, 0);
        libc::madvise(
            start as *mut libc::c_void,
            keep - start,
            libc::MADV_DONTNEED,
        )
    };
    zero_near_stack();
}

/// Zero the [`SCRUB_BY_HAND`] bytes (and a page more) below the caller.
#[inline(never)]
fn zero_near_stack() {
    let mut area = std::mem::MaybeUninit::<[u8; SCRUB_BY_HAND + PAGE]>::uninit();
    // SAFETY: writing the whole of a local array.
    unsafe { std::ptr::write_bytes(area.as_mut_ptr().cast::<u8>(), 0, SCRUB_BY_HAND + PAGE) };
    std::hint::black_box(&mut area);
}

/// Bytes of the stack [`scrub_stack`] writes zeroes to; the rest it drops.
const SCRUB_BY_HAND: usize = 8 << 10;
const PAGE: usize = 4096;

/// Serve system tests if the host asked for it; returns at once otherwise, and in
/// every child. `replaying`: the program is in replay mode, and each child is a
/// [`replay_child`] and zeroes the stack its `main` will use ([`scrub_stack`]):
/// replays judge what a call leaves in memory, the system fuzzer only the edges it
/// took, and pays for no page it does not need.
pub fn maybe_serve(replaying: bool) {
    // Read before written: a child (which finds it set) then never copies the page.
    if STARTED.load(Ordering::Acquire)
        || STARTED.swap(true, Ordering::AcqRel)
        || std::env::var_os(ENV_SYS_FORKSERVER).is_none()
    {
        return;
    }
    if !write_word(STATUS_FD, HELLO) {
        // Nobody listens: run as a plain program.
        return;
    }
    if !write_word(STATUS_FD, crate::forkserver::edges() as u32) {
        // SAFETY: the host went away between two words: end the server.
        unsafe { libc::_exit(1) }
    }
    loop {
        let run = match read_request() {
            Ok(Some(run)) => run,
            // The host closed the pipe: done.
            Ok(None) => {
                // SAFETY: ends the server.
                unsafe { libc::_exit(0) }
            }
            // Said, then the same end: the host sees the server gone.
            Err(e) => {
                eprintln!("trestle runtime: system forkserver: {e}");
                // SAFETY: ends the server.
                unsafe { libc::_exit(0) }
            }
        };
        // Everything the child needs is prepared before the fork.
        let argv: Vec<std::ffi::CString> = run.argv.iter().map(|a| c_string(a)).collect();
        let env: Vec<(std::ffi::CString, std::ffi::CString)> = run
            .env
            .iter()
            .map(|(k, v)| (c_string(k), c_string(v)))
            .collect();
        let cwd = c_string(&run.cwd);
        let stdin = c_string(&run.stdin);
        let output = [(1, c_string(&run.stdout)), (2, c_string(&run.stderr))];
        let limits = run.limits;
        let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
        argv_ptrs.push(std::ptr::null());
        // SAFETY: the server is single-threaded; the child only uses what is above.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            if replaying {
                REPLAY_CHILD.store(true, Ordering::Relaxed);
                scrub_stack();
            }
            child(&argv_ptrs, &env, &cwd, &stdin, &output, limits);
        }
        if pid < 0 || !write_word(STATUS_FD, pid.max(0) as u32) {
            // SAFETY: ends the server.
            unsafe { libc::_exit(1) }
        }
        let mut status = 0;
        // SAFETY: a zeroed rusage is a valid one to fill.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waiting for our own child.
        while unsafe { libc::wait4(pid, &mut status, 0, &mut usage) } < 0 {
            if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                break;
            }
        }
        let ms = |t: libc::timeval| t.tv_sec as u64 * 1000 + t.tv_usec as u64 / 1000;
        let ended = Ended {
            status: status as u32,
            cpu_ms: (ms(usage.ru_utime) + ms(usage.ru_stime)).min(u32::MAX as u64) as u32,
            max_rss_kib: usage.ru_maxrss.clamp(0, u32::MAX as i64) as u32,
        };
        if !write_frame(STATUS_FD, &ended.to_bytes()) {
            // SAFETY: ends the server.
            unsafe { libc::_exit(1) }
        }
    }
}

/// The child: take the request's limits, directory, input, output files and
/// environment, run `main` with `argv` (null-terminated). It allocates nothing itself: each page a child
/// touches that the server did not is a page fault in every execution.
fn child(
    argv: &[*const libc::c_char],
    env: &[(std::ffi::CString, std::ffi::CString)],
    cwd: &std::ffi::CStr,
    stdin: &std::ffi::CStr,
    output: &[(i32, std::ffi::CString)],
    limits: ChildLimits,
) -> ! {
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
                // The CPU limit's hard bound a second later: at the soft one the
                // program gets SIGXCPU, whose handler writes where it was spinning
                // (a hang named by its stack, as an unserved run's); with both equal
                // the kernel sends SIGKILL at once, and the hang has no frames.
                let max = if resource == libc::RLIMIT_CPU {
                    value + 1
                } else {
                    value
                };
                let l = libc::rlimit {
                    rlim_cur: value,
                    rlim_max: max,
                };
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
        for (target, path) in output {
            if path.is_empty() {
                continue;
            }
            let fd = libc::open(
                path.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
                0o600,
            );
            if fd < 0 {
                libc::_exit(126);
            }
            libc::dup2(fd, *target);
            if fd != *target {
                libc::close(fd);
            }
        }
        for (k, v) in env {
            libc::setenv(k.as_ptr(), v.as_ptr(), 1);
        }
        // A replay asked for with the clock shifted says so in its environment, and
        // runs with its stack moved as well, as a freshly started one whose
        // environment grew by the variable would: what a call computes from either
        // then differs between the two replays. (Replays only: a system fuzzer's
        // child, thousands a second, does not look the variable up.)
        let code = if replay_child() && crate::clock::read_shift() != 0 {
            with_stack_moved(|| main(argv.len() as libc::c_int - 1, argv.as_ptr(), environ))
        } else {
            main(argv.len() as libc::c_int - 1, argv.as_ptr(), environ)
        };
        libc::exit(code)
    }
}

/// Bytes a replay with the clock shifted runs deeper in the stack: not a multiple
/// of a page, so both the page and the offset in it of every stack address move.
const STACK_MOVE: usize = 1040;

/// `f` called [`STACK_MOVE`] bytes deeper in the stack.
#[inline(never)]
fn with_stack_moved<T>(f: impl FnOnce() -> T) -> T {
    let mut gap = [0u8; STACK_MOVE];
    std::hint::black_box(&mut gap);
    let r = f();
    std::hint::black_box(&mut gap);
    r
}

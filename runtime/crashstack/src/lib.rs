//! `libtrestle_crashstack.so`: preloaded (`LD_PRELOAD`) into a program that trestle
//! validates, so that a crash leaves its stack behind for the crash signature.
//!
//! When `TRESTLE_CRASH_STACK` names a file, fatal signals (SEGV, BUS, ABRT, FPE, ILL,
//! and XCPU, the CPU limit that stops a hang) get a handler on an alternate stack that writes, with nothing but system calls:
//!
//! ```text
//! signal 11
//! addr 0x7ffd5a3f2ff8
//! pc 0x555555555189
//! sp 0x7ffd5a3f3000
//! spword 0x555555555200
//! maps
//! <the contents of /proc/self/maps>
//! end-maps
//! frame 0x7ffff7e0a050
//! frame ...
//! ```
//!
//! then restores the default action and lets the signal kill the process as it
//! would have. A hang (SIGXCPU) is sampled first: [`HANG_SAMPLES`] more times, every
//! [`SAMPLE_INTERVAL_US`] µs of wall-clock time (SIGALRM, so a hang that sleeps is
//! sampled too), the record gets
//!
//! ```text
//! sample
//! pc 0x555555555190
//! frame ...
//! ```
//!
//! appended, and SIGXCPU then ends the run. One stack of a loop lands anywhere in it (a
//! function the loop calls, the allocator); what every sample has in common is where
//! it spins. The samples take a fifth of a second, within the second the hard CPU
//! limit (and the served run's grace) leaves.
//!
//! The library also stands in for `malloc`, `calloc` and `realloc` (passing each to
//! the C library's): the first request that fails (the run's
//! address-space limit) writes the same record with `alloc-failed <size>` in place of
//! the signal and no registers, so a run that blows up its memory says where it was
//! allocating. A crash later in the run writes over it. The file is the one the variable names when the crash happens (a
//! forkserver child is given its own after the library loaded in the server), or the
//! one it named at load time if the program dropped its environment. The host turns addresses into functions with `llvm-symbolizer`. A
//! program that installs its own handlers replaces this one; the host then has the
//! signal but no frames.

use std::ffi::{c_int, c_void};

const PATH_MAX: usize = 4096;
const MAX_FRAMES: usize = 64;
const ALT_STACK: usize = 256 * 1024;
/// How many stacks a hang gets after its first.
const HANG_SAMPLES: u32 = 8;
/// The wall-clock time between them.
const SAMPLE_INTERVAL_US: i64 = 25_000;

/// Samples still to take of a hang (only the signal handlers touch it, one at a time:
/// SIGALRM is blocked while its handler runs).
static mut SAMPLES_LEFT: u32 = 0;

/// The output path, copied at load time (the handler must not allocate).
static mut PATH: [u8; PATH_MAX] = [0; PATH_MAX];

extern "C" {
    fn backtrace(buffer: *mut *mut c_void, size: c_int) -> c_int;
}

/// The variable naming the stack file, as a C string.
const ENV_NAME_C: &std::ffi::CStr = match std::ffi::CStr::from_bytes_with_nul(
    concat!(trestle_abi::crash_stack_env!(), "\0").as_bytes(),
) {
    Ok(name) => name,
    Err(_) => panic!("the variable name has no NUL inside"),
};

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

extern "C" fn init() {
    // SAFETY: getenv at load time, before the program's threads exist.
    let p = unsafe { libc::getenv(ENV_NAME_C.as_ptr()) };
    if p.is_null() {
        return;
    }
    // SAFETY: `p` is a NUL-terminated string from the environment.
    let bytes = unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes();
    if bytes.is_empty() || bytes.len() >= PATH_MAX {
        return;
    }
    // SAFETY: single-threaded at load time; nothing else touches PATH yet.
    unsafe {
        let path = &mut *std::ptr::addr_of_mut!(PATH);
        path[..bytes.len()].copy_from_slice(bytes);
        // backtrace() loads the unwinder on first use, which is not safe inside a
        // signal handler: use it once now.
        let mut frames = [std::ptr::null_mut::<c_void>(); 4];
        backtrace(frames.as_mut_ptr(), frames.len() as c_int);
        let stack = libc::mmap(
            std::ptr::null_mut(),
            ALT_STACK,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if stack != libc::MAP_FAILED {
            let ss = libc::stack_t {
                ss_sp: stack,
                ss_flags: 0,
                ss_size: ALT_STACK,
            };
            libc::sigaltstack(&ss, std::ptr::null_mut());
        }
        // SIGXCPU too: a run stopped at its CPU limit (the soft one, a second below
        // the hard) leaves where it was spinning.
        for sig in [
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGABRT,
            libc::SIGFPE,
            libc::SIGILL,
            libc::SIGXCPU,
        ] {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_fatal as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESETHAND;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Writes `bytes` fully (async-signal-safe).
unsafe fn put(fd: c_int, bytes: &[u8]) {
    let mut rest = bytes;
    while !rest.is_empty() {
        // SAFETY: writing from a valid slice.
        let n = unsafe { libc::write(fd, rest.as_ptr() as *const c_void, rest.len()) };
        if n <= 0 {
            return;
        }
        rest = &rest[n as usize..];
    }
}

/// `prefix` then `value` in hex then a newline, without allocating.
unsafe fn put_hex(fd: c_int, prefix: &[u8], value: usize) {
    let mut buf = [0u8; 32];
    let mut i = buf.len();
    i -= 1;
    buf[i] = b'\n';
    let mut v = value;
    loop {
        i -= 1;
        buf[i] = b"0123456789abcdef"[v & 15];
        v >>= 4;
        if v == 0 {
            break;
        }
    }
    i -= 2;
    buf[i] = b'0';
    buf[i + 1] = b'x';
    // SAFETY: plain writes.
    unsafe {
        put(fd, prefix);
        put(fd, &buf[i..]);
    }
}

unsafe fn put_dec(fd: c_int, prefix: &[u8], value: u32) {
    let mut buf = [0u8; 16];
    let mut i = buf.len() - 1;
    buf[i] = b'\n';
    let mut v = value;
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    // SAFETY: plain writes.
    unsafe {
        put(fd, prefix);
        put(fd, &buf[i..]);
    }
}

extern "C" {
    static environ: *const *const libc::c_char;
}

/// Copy the current value of `TRESTLE_CRASH_STACK` into `out` (NUL-terminated) by
/// walking the environment: no locks, no allocation. False if it is not set.
///
/// # Safety
/// `environ` must be the process's environment (or null).
unsafe fn path_now(out: &mut [u8; PATH_MAX]) -> bool {
    const NAME: &[u8] = concat!(trestle_abi::crash_stack_env!(), "=").as_bytes();
    // SAFETY: the caller promises `environ` is a null-terminated array of C strings.
    unsafe {
        let mut p = environ;
        if p.is_null() {
            return false;
        }
        while !(*p).is_null() {
            let entry = std::ffi::CStr::from_ptr(*p).to_bytes();
            if let Some(value) = entry.strip_prefix(NAME) {
                if value.is_empty() || value.len() >= PATH_MAX {
                    return false;
                }
                out[..value.len()].copy_from_slice(value);
                out[value.len()] = 0;
                return true;
            }
            p = p.add(1);
        }
    }
    false
}

/// Open the stack file (the one the environment names now, else the one it named at
/// load time) for a new record, or with `append` to add to the one there; -1 if it
/// cannot be.
unsafe fn open_record(append: bool) -> c_int {
    let mut now = [0u8; PATH_MAX];
    let how = if append {
        libc::O_APPEND
    } else {
        libc::O_CREAT | libc::O_TRUNC
    };
    // SAFETY: `environ` is the process's; PATH was written once at load time.
    unsafe {
        let path = if path_now(&mut now) {
            now.as_ptr()
        } else {
            std::ptr::addr_of!(PATH) as *const u8
        };
        libc::open(
            path as *const libc::c_char,
            libc::O_WRONLY | how | libc::O_CLOEXEC,
            0o600,
        )
    }
}

/// The rest of a record: the memory map, then the frames `backtrace` finds, and close.
unsafe fn put_maps_and_frames(fd: c_int) {
    // SAFETY: system calls and backtrace() (initialised at load time) on our own memory.
    unsafe {
        put(fd, b"maps\n");
        let maps = libc::open(
            c"/proc/self/maps".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if maps >= 0 {
            let mut buf = [0u8; 4096];
            loop {
                let n = libc::read(maps, buf.as_mut_ptr() as *mut c_void, buf.len());
                if n <= 0 {
                    break;
                }
                put(fd, &buf[..n as usize]);
            }
            libc::close(maps);
        }
        put(fd, b"end-maps\n");
        // Last, because unwinding from a wild pc may fault in here too.
        put_frames(fd);
        libc::close(fd);
    }
}

/// The return addresses `backtrace` finds, a `frame` line each.
unsafe fn put_frames(fd: c_int) {
    // SAFETY: backtrace() was initialised at load time; writes of our own memory.
    unsafe {
        let mut frames = [std::ptr::null_mut::<c_void>(); MAX_FRAMES];
        let n = backtrace(frames.as_mut_ptr(), MAX_FRAMES as c_int);
        for f in &frames[..n.max(0) as usize] {
            put_hex(fd, b"frame ", *f as usize);
        }
    }
}

/// The interrupted program counter, if the kernel gave the context.
unsafe fn put_pc(fd: c_int, ctx: *mut c_void) {
    if !ctx.is_null() {
        // SAFETY: the kernel passes a ucontext_t to an SA_SIGINFO handler.
        unsafe {
            let uc = &*(ctx as *const libc::ucontext_t);
            put_hex(
                fd,
                b"pc ",
                uc.uc_mcontext.gregs[libc::REG_RIP as usize] as usize,
            );
        }
    }
}

/// Start sampling a hang: SIGALRM every [`SAMPLE_INTERVAL_US`], [`HANG_SAMPLES`]
/// times ([`on_sample`]), unblocked in the mask the interrupted code gets back (`ctx`,
/// the handler's context). False if the timer cannot be set, and the run should end now.
unsafe fn start_sampling(ctx: *mut c_void) -> bool {
    // SAFETY: sigaction and setitimer are system calls; SAMPLES_LEFT is only touched
    // by the handlers, and SIGALRM is not armed yet.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sample as *const () as usize;
        // SA_RESTART: a hang that waits in a system call goes on waiting.
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(libc::SIGALRM, &sa, std::ptr::null_mut()) != 0 {
            return false;
        }
        // A program that blocked SIGALRM would never be sampled: the mask restored
        // when this handler returns is the one in its context.
        if !ctx.is_null() {
            libc::sigdelset(
                &mut (*(ctx as *mut libc::ucontext_t)).uc_sigmask,
                libc::SIGALRM,
            );
        }
        *std::ptr::addr_of_mut!(SAMPLES_LEFT) = HANG_SAMPLES;
        let every = libc::timeval {
            tv_sec: 0,
            tv_usec: SAMPLE_INTERVAL_US,
        };
        let timer = libc::itimerval {
            it_interval: every,
            it_value: every,
        };
        libc::setitimer(libc::ITIMER_REAL, &timer, std::ptr::null_mut()) == 0
    }
}

/// One more stack of a hang; after the last, the run ends by SIGXCPU as it would have.
extern "C" fn on_sample(_sig: c_int, _info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: system calls and backtrace() on memory of our own.
    unsafe {
        let fd = open_record(true);
        if fd >= 0 {
            put(fd, b"sample\n");
            put_pc(fd, ctx);
            put_frames(fd);
            libc::close(fd);
        }
        let left = &mut *std::ptr::addr_of_mut!(SAMPLES_LEFT);
        *left = left.saturating_sub(1);
        if *left == 0 || fd < 0 {
            let off: libc::itimerval = std::mem::zeroed();
            libc::setitimer(libc::ITIMER_REAL, &off, std::ptr::null_mut());
            end_by(libc::SIGXCPU);
        }
    }
}

/// End the process by `sig`, as its default action would.
unsafe fn end_by(sig: c_int) {
    // SAFETY: plain system calls. A handler's own signal is blocked while it runs, so
    // raising it delivers it as soon as the handler returns.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

extern "C" fn on_fatal(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: only system calls and backtrace() (already initialised) on memory of
    // our own; the process is about to die.
    unsafe {
        let fd = open_record(false);
        if fd >= 0 {
            put_dec(fd, b"signal ", sig as u32);
            // The faulting address: next to the stack pointer when the stack ran out.
            if !info.is_null() && matches!(sig, libc::SIGSEGV | libc::SIGBUS) {
                put_hex(fd, b"addr ", (*info).si_addr() as usize);
            }
            put_pc(fd, ctx);
            if !ctx.is_null() {
                let uc = &*(ctx as *const libc::ucontext_t);
                put_hex(
                    fd,
                    b"sp ",
                    uc.uc_mcontext.gregs[libc::REG_RSP as usize] as usize,
                );
                // After a call to a wild address the unwinder is lost, but the word at
                // the stack pointer is still the return address into the caller.
                // process_vm_readv reads it without faulting if the stack is bad too.
                let sp = uc.uc_mcontext.gregs[libc::REG_RSP as usize] as usize;
                let mut word = 0usize;
                let local = libc::iovec {
                    iov_base: &mut word as *mut usize as *mut c_void,
                    iov_len: 8,
                };
                let remote = libc::iovec {
                    iov_base: sp as *mut c_void,
                    iov_len: 8,
                };
                if libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) == 8 {
                    put_hex(fd, b"spword ", word);
                }
            }
            put_maps_and_frames(fd);
            // A hang goes on a little longer, to be sampled. (SA_RESETHAND restored
            // SIGXCPU's default: the kernel's next one, or the host's, ends it.)
            if sig == libc::SIGXCPU && start_sampling(ctx) {
                return;
            }
        }
        end_by(sig);
    }
}

extern "C" {
    fn __libc_malloc(n: usize) -> *mut c_void;
    fn __libc_calloc(n: usize, size: usize) -> *mut c_void;
    fn __libc_realloc(p: *mut c_void, n: usize) -> *mut c_void;
}

/// Whether this process (or the forkserver it was forked from) wrote its record of a
/// failed allocation: only the first says where the memory ran out.
static ALLOC_FAILED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A request of `size` bytes failed: write the record, once, when a stack file is
/// set. It allocates nothing (the allocator just failed).
fn allocation_failed(size: usize) {
    // SAFETY: reads of PATH (written at load time) and system calls.
    unsafe {
        if (*std::ptr::addr_of!(PATH))[0] == 0 && !path_now(&mut [0u8; PATH_MAX]) {
            return;
        }
        if ALLOC_FAILED.swap(true, std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let fd = open_record(false);
        if fd >= 0 {
            put_hex(fd, b"alloc-failed ", size);
            put_maps_and_frames(fd);
        }
    }
}

/// The C library's `malloc`, noting a failure.
///
/// # Safety
/// As `malloc`.
#[no_mangle]
pub unsafe extern "C" fn malloc(n: usize) -> *mut c_void {
    // SAFETY: the C library's own entry point, with the caller's arguments.
    let p = unsafe { __libc_malloc(n) };
    if p.is_null() && n > 0 {
        allocation_failed(n);
    }
    p
}

/// The C library's `calloc`, noting a failure.
///
/// # Safety
/// As `calloc`.
#[no_mangle]
pub unsafe extern "C" fn calloc(n: usize, size: usize) -> *mut c_void {
    // SAFETY: as in `malloc`.
    let p = unsafe { __libc_calloc(n, size) };
    if p.is_null() && n > 0 && size > 0 {
        allocation_failed(n.saturating_mul(size));
    }
    p
}

/// The C library's `realloc`, noting a failure (not a free by `realloc(p, 0)`).
///
/// # Safety
/// As `realloc`.
#[no_mangle]
pub unsafe extern "C" fn realloc(p: *mut c_void, n: usize) -> *mut c_void {
    // SAFETY: as in `malloc`.
    let q = unsafe { __libc_realloc(p, n) };
    if q.is_null() && n > 0 {
        allocation_failed(n);
    }
    q
}

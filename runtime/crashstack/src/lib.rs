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
//! scan 0x555555555321
//! scan ...
//! data 0x555555558000
//! 00000000000000001000000000000000...
//! end-data
//! frame 0x7ffff7e0a050
//! frame ...
//! ```
//!
//! (`scan`: the words on the stack from the stack pointer up, 64 KiB at most, that
//! point into executable code, for the host's stack scan when the unwinder finds no
//! frame of the program; not for a hang; older records have none. `data`: for SIGSEGV
//! and SIGBUS, the program's writable data in hex, for the host to see what the
//! global a faulting pointer came from held) then restores the default action and lets the signal kill the process as it
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

/// The most environment entries [`path_now`] looks at (a smashed stack holding the
/// environment is read no further than its end, but the bound keeps any loop short).
const MAX_ENV_ENTRIES: usize = 1 << 16;

/// Copy the current value of `TRESTLE_CRASH_STACK` into `out` (NUL-terminated) by
/// walking the environment: no locks, no allocation. False if it is not set, or the
/// environment cannot be read: it lives at the top of the main stack, which a stack
/// buffer overflow may have overwritten (mawk's `sprintf` into a stack buffer with a
/// `CONVFMT` of width 20000 wrote spaces up to the stack's end, and the handler,
/// following those as pointers, faulted before it wrote a line). Every read of it goes
/// through [`read_memory`], which cannot fault.
///
/// # Safety
/// `environ` must be the process's environment variable (its value may be anything).
unsafe fn path_now(out: &mut [u8; PATH_MAX]) -> bool {
    const NAME: &[u8] = concat!(trestle_abi::crash_stack_env!(), "=").as_bytes();
    // SAFETY: reading the libc variable itself is sound; what it points at is only
    // read through `read_memory`.
    let mut entries = unsafe { environ } as usize;
    if entries == 0 {
        return false;
    }
    for _ in 0..MAX_ENV_ENTRIES {
        let mut word = [0u8; std::mem::size_of::<usize>()];
        // SAFETY: `read_memory` checks the address itself.
        if unsafe { read_memory(entries, &mut word) } != word.len() {
            return false;
        }
        let entry = usize::from_ne_bytes(word);
        if entry == 0 {
            return false;
        }
        let mut head = [0u8; NAME.len()];
        // SAFETY: as above.
        if unsafe { read_memory(entry, &mut head) } == head.len() && head == NAME {
            let Some(value) = entry.checked_add(NAME.len()) else {
                return false;
            };
            // SAFETY: as above.
            let got = unsafe { read_memory(value, &mut out[..]) };
            return matches!(out[..got].iter().position(|&b| b == 0), Some(len) if len > 0);
        }
        entries = match entries.checked_add(word.len()) {
            Some(next) => next,
            None => return false,
        };
    }
    false
}

/// The unit [`read_memory`] reads in: no read crosses a page, so each either reads
/// all it asked for or nothing.
const PAGE: usize = 4096;

/// Copy the memory of this process at `addr` into `out` without faulting, a page at
/// a time with `process_vm_readv`; stops at the first page that cannot be read.
/// Returns how many bytes it copied.
///
/// # Safety
/// Only system calls; `addr` may be any value.
unsafe fn read_memory(addr: usize, out: &mut [u8]) -> usize {
    let mut done = 0;
    while done < out.len() {
        let Some(at) = addr.checked_add(done) else {
            break;
        };
        let n = (PAGE - at % PAGE).min(out.len() - done);
        let local = libc::iovec {
            iov_base: out[done..].as_mut_ptr() as *mut c_void,
            iov_len: n,
        };
        let remote = libc::iovec {
            iov_base: at as *mut c_void,
            iov_len: n,
        };
        // SAFETY: the kernel checks the remote range and writes only into `out`.
        let got = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        if got <= 0 {
            break;
        }
        done += got as usize;
        if (got as usize) < n {
            break;
        }
    }
    done
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

/// The rest of a record: the memory map, with a crash's stack scan (`scan_from`, its
/// stack pointer) the code addresses on its stack ([`put_scan`]), with `data` the
/// program's writable data ([`put_data`]), then the frames `backtrace` finds, and
/// close.
unsafe fn put_maps_and_frames(fd: c_int, scan_from: Option<usize>, data: bool) {
    // SAFETY: system calls and backtrace() (initialised at load time) on our own memory.
    unsafe {
        put(fd, b"maps\n");
        let mut notes = MapNotes::new(scan_from.unwrap_or(0));
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
                notes.feed(&buf[..n as usize]);
            }
            libc::close(maps);
        }
        put(fd, b"end-maps\n");
        if scan_from.is_some() {
            put_scan(fd, &notes);
        }
        if data {
            put_data(fd, &notes);
        }
        // Last, because unwinding from a wild pc may fault in here too.
        put_frames(fd);
        libc::close(fd);
    }
}

/// How far above the stack pointer a crash's stack is scanned.
const SCAN_BYTES: usize = 64 * 1024;
/// The most `scan` lines a record gets.
const MAX_SCAN_WORDS: usize = 256;
/// The most executable mappings the scan knows (the program's own come first in the
/// map, below the libraries).
const MAX_EXEC_MAPS: usize = 128;
/// The most writable mappings of the program [`put_data`] copies.
const MAX_DATA_MAPS: usize = 8;
/// The most bytes of them it copies.
const MAX_DATA_BYTES: usize = 1 << 20;

/// What the stack scan needs of the memory map, noted while the record copies it
/// (nothing allocated): the end of the mapping that holds the stack pointer, and the
/// executable mappings.
struct MapNotes {
    /// The interrupted stack pointer.
    sp: usize,
    /// The end of the mapping holding `sp`; 0 if none does.
    stack_end: usize,
    /// Executable mappings, `[start, end)`.
    executable: [(usize, usize); MAX_EXEC_MAPS],
    /// How many of `executable` are set.
    executable_count: usize,
    /// The inode of the program's file: the first file the map names (the program
    /// is mapped below its libraries).
    program_inode: usize,
    /// The program's writable mappings, `[start, end)`: its data, and its bss where
    /// that goes on past the file in an anonymous mapping right after.
    data: [(usize, usize); MAX_DATA_MAPS],
    /// How many of `data` are set.
    data_count: usize,
    /// The start of the line being read (up to the path's first bytes).
    line: [u8; 128],
    /// How much of `line` is set.
    line_len: usize,
}

impl MapNotes {
    fn new(sp: usize) -> MapNotes {
        MapNotes {
            sp,
            stack_end: 0,
            executable: [(0, 0); MAX_EXEC_MAPS],
            executable_count: 0,
            program_inode: 0,
            data: [(0, 0); MAX_DATA_MAPS],
            data_count: 0,
            line: [0; 128],
            line_len: 0,
        }
    }

    /// Take in the next bytes of `/proc/self/maps`.
    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if b == b'\n' {
                self.end_line();
                self.line_len = 0;
            } else if self.line_len < self.line.len() {
                self.line[self.line_len] = b;
                self.line_len += 1;
            }
        }
    }

    /// `7ffd5a3d3000-7ffd5a3f4000 rw-p ...`: note the range if it holds the stack
    /// pointer or code.
    fn end_line(&mut self) {
        let line = &self.line[..self.line_len];
        let Some((start, rest)) = parse_hex(line) else {
            return;
        };
        let Some((end, rest)) = rest.strip_prefix(b"-").and_then(parse_hex) else {
            return;
        };
        let perms = rest.strip_prefix(b" ").unwrap_or_default();
        if (start..end).contains(&self.sp) {
            self.stack_end = end;
        }
        if perms.get(2) == Some(&b'x') && self.executable_count < MAX_EXEC_MAPS {
            self.executable[self.executable_count] = (start, end);
            self.executable_count += 1;
        }
        // `rw-p 00002000 fe:00 5881993    /path`: the inode, and whether a name follows.
        let mut fields = perms.split(|&b| b == b' ').filter(|f| !f.is_empty());
        let (Some(_), Some(_), Some(_), Some(inode)) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return;
        };
        let inode = inode
            .iter()
            .try_fold(0usize, |v, &b| {
                b.is_ascii_digit()
                    .then(|| v.wrapping_mul(10).wrapping_add(usize::from(b - b'0')))
            })
            .unwrap_or(0);
        let named = fields.next().is_some();
        if self.program_inode == 0 && inode != 0 {
            self.program_inode = inode;
        }
        let writable = perms.get(1) == Some(&b'w');
        let program_data = inode != 0 && inode == self.program_inode;
        let bss = inode == 0
            && !named
            && self.data_count > 0
            && self.data[self.data_count - 1].1 == start;
        if writable && (program_data || bss) && self.data_count < MAX_DATA_MAPS {
            self.data[self.data_count] = (start, end);
            self.data_count += 1;
        }
    }

    /// Whether `addr` is in an executable mapping.
    fn is_code(&self, addr: usize) -> bool {
        self.executable[..self.executable_count]
            .iter()
            .any(|&(start, end)| (start..end).contains(&addr))
    }
}

/// A hexadecimal number at the start of `bytes`, and what follows it.
fn parse_hex(bytes: &[u8]) -> Option<(usize, &[u8])> {
    let digits = bytes.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 || digits > 16 {
        return None;
    }
    let mut value = 0usize;
    for &b in &bytes[..digits] {
        let d = (b as char).to_digit(16)? as usize;
        value = value << 4 | d;
    }
    Some((value, &bytes[digits..]))
}

/// The stack scan, for when the unwinder finds nothing of the program (a smashed
/// stack: the return addresses it would follow were overwritten): the words from the
/// stack pointer up ([`SCAN_BYTES`] at most, not past the end of its mapping) that
/// point into executable code, innermost first, a `scan` line each
/// ([`MAX_SCAN_WORDS`] at most). The host keeps those that follow a call instruction
/// in the program, return addresses left above the damage. Reads cannot fault.
unsafe fn put_scan(fd: c_int, notes: &MapNotes) {
    const WORD: usize = std::mem::size_of::<usize>();
    let from = notes.sp & !(WORD - 1);
    if notes.stack_end <= from {
        return;
    }
    let end = notes.stack_end.min(from.saturating_add(SCAN_BYTES));
    let mut words = [0usize; PAGE / WORD];
    let mut at = from;
    let mut written = 0;
    while at < end {
        let want = (end - at).min(PAGE);
        // SAFETY: `words` is PAGE bytes of plain integers; read_memory checks `at`.
        let got = unsafe {
            read_memory(
                at,
                std::slice::from_raw_parts_mut(words.as_mut_ptr() as *mut u8, want),
            )
        };
        for &w in &words[..got / WORD] {
            if notes.is_code(w) {
                // SAFETY: a plain write.
                unsafe { put_hex(fd, b"scan ", w) };
                written += 1;
                if written == MAX_SCAN_WORDS {
                    return;
                }
            }
        }
        if got < want {
            return;
        }
        at += want;
    }
}

/// The program's writable data as it is at the crash ([`MAX_DATA_BYTES`] at most):
/// per mapping a `data <start>` line, its bytes in hex, 64 to a line, and `end-data`.
/// The host reads which global a faulting pointer was loaded from and what it holds
/// (a NULL stored once and dereferenced in two places is one bug). Reads cannot fault.
unsafe fn put_data(fd: c_int, notes: &MapNotes) {
    const LINE: usize = 64;
    let mut left = MAX_DATA_BYTES;
    for &(start, end) in &notes.data[..notes.data_count] {
        if left == 0 {
            return;
        }
        let end = end.min(start.saturating_add(left));
        // SAFETY: plain writes; read_memory checks every address.
        unsafe {
            put_hex(fd, b"data ", start);
            let mut at = start;
            while at < end {
                let mut bytes = [0u8; LINE];
                let want = (end - at).min(LINE);
                let got = read_memory(at, &mut bytes[..want]);
                let mut text = [0u8; 2 * LINE + 1];
                for (i, b) in bytes[..got].iter().enumerate() {
                    text[2 * i] = b"0123456789abcdef"[usize::from(b >> 4)];
                    text[2 * i + 1] = b"0123456789abcdef"[usize::from(b & 15)];
                }
                text[2 * got] = b'\n';
                put(fd, &text[..2 * got + 1]);
                if got < want {
                    break;
                }
                at += want;
            }
            put(fd, b"end-data\n");
        }
        left -= end - start;
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
            let mut scan_from = None;
            if !ctx.is_null() {
                let uc = &*(ctx as *const libc::ucontext_t);
                put_hex(
                    fd,
                    b"sp ",
                    uc.uc_mcontext.gregs[libc::REG_RSP as usize] as usize,
                );
                // After a call to a wild address the unwinder is lost, but the word at
                // the stack pointer is still the return address into the caller.
                // read_memory reads it without faulting if the stack is bad too.
                let sp = uc.uc_mcontext.gregs[libc::REG_RSP as usize] as usize;
                let mut word = [0u8; 8];
                if read_memory(sp, &mut word) == word.len() {
                    put_hex(fd, b"spword ", usize::from_ne_bytes(word));
                }
                // A hang's stack is sampled, not scanned: the scan is for a crash
                // whose return addresses may be gone.
                if sig != libc::SIGXCPU {
                    scan_from = Some(sp);
                }
            }
            put_maps_and_frames(fd, scan_from, matches!(sig, libc::SIGSEGV | libc::SIGBUS));
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
            put_maps_and_frames(fd, None, false);
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

//! Capturing a system test from every run of the program (`trestle capture`; the
//! record's layout is in `trestle_abi::capture`).
//!
//! At the start of `main`, with [`ENV_CAPTURE_DIR`] set, the process makes a record
//! directory and forks. The child goes on as the program, with the variables it asks
//! for and the files it opens noted in the record as it goes ([`note_getenv`],
//! [`note_opened`]). The parent becomes its supervisor: standard streams that are
//! pipes (or devices other than terminals) pass through it, so it keeps what went by;
//! those that are regular files it reads in place. Once the child has ended, it writes
//! what stdin held, what stdout and stderr got and how the child ended, then ends the
//! same way (the same exit status, or the same signal), forwarding on the way any
//! signal sent to it, so a suite's `timeout` or `kill` still reaches the program.
//!
//! A process the program forks is part of its run: it notes what it opens and asks
//! for in the same record. A program it starts is captured on its own, and what that
//! one opens and asks for is noted in the records of the captured processes that
//! started it as well ([`ENV_CAPTURE_ANCESTORS`]): their tests need it too.

use libc::{c_char, c_int};
use std::ffi::CStr;
use std::io::Write as _;
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use trestle_abi::capture::*;

/// This process is a captured program or forked from one (not its supervisor).
static CAPTURING: AtomicBool = AtomicBool::new(false);
/// The records what this process opens and asks for goes to, once capturing: its
/// own first, then those of the captured processes that started it.
static RECORDS: OnceLock<Vec<PathBuf>> = OnceLock::new();
static MAX_INPUT: OnceLock<u64> = OnceLock::new();
/// Stored files so far.
static STORED: AtomicU32 = AtomicU32::new(0);
/// Names noted by [`note_getenv`], and resolved paths noted by [`note_opened`].
static SEEN: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
/// The child, for the supervisor's signal handler.
static CHILD: AtomicI32 = AtomicI32::new(0);

/// Variables that change how a program behaves without its asking for them through
/// an instrumented `getenv` (the C library reads them itself).
fn implicit_variable(name: &[u8]) -> bool {
    name.starts_with(b"LC_") || matches!(name, b"LANG" | b"LANGUAGE" | b"TZ" | b"POSIXLY_CORRECT")
}

fn max_input() -> u64 {
    *MAX_INPUT.get_or_init(|| {
        std::env::var(ENV_CAPTURE_MAX_INPUT)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(DEFAULT_MAX_INPUT)
    })
}

fn append(name: &str, bytes: &[u8]) {
    for dir in RECORDS.get().into_iter().flatten() {
        // One write per entry, appended: a crash leaves whole entries, and processes
        // writing to one record at once do not mix theirs.
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(name))
        {
            let _ = f.write_all(bytes);
        }
    }
}

/// Seen before (and noted as seen now).
fn seen(key: Vec<u8>) -> bool {
    let mut s = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    if s.contains(&key) {
        return true;
    }
    s.push(key);
    false
}

/// `getenv(name)` returned `value`.
///
/// # Safety
/// `name` and a non-null `value` are NUL-terminated strings.
pub unsafe fn note_getenv(name: *const c_char, value: *const c_char) {
    if !CAPTURING.load(Ordering::Relaxed) || name.is_null() || value.is_null() {
        return;
    }
    // SAFETY: as documented.
    let (name, value) = unsafe {
        (
            CStr::from_ptr(name).to_bytes(),
            CStr::from_ptr(value).to_bytes(),
        )
    };
    let mut key = b"env:".to_vec();
    key.extend_from_slice(name);
    if seen(key) {
        return;
    }
    append(ENV, &[name, b"\0", value, b"\0"].concat());
}

/// The program opened `path` as `fd`: `reads` what was there before (not opened
/// write-only, emptied or created anew), `writes` to it.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
pub unsafe fn note_opened(fd: c_int, path: *const c_char, reads: bool, writes: bool) {
    if !CAPTURING.load(Ordering::Relaxed) || fd < 0 || path.is_null() {
        return;
    }
    crate::guard("the capture hook", || {
        let saved = errno();
        // SAFETY: as documented.
        let given = unsafe { CStr::from_ptr(path) }.to_bytes().to_vec();
        let resolved = std::fs::read_link(format!("/proc/self/fd/{fd}"))
            .map(|p| p.into_os_string().into_vec())
            .unwrap_or_default();
        // SAFETY: fstat into a zeroed struct.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let ok = unsafe { libc::fstat(fd, &mut st) } == 0;
        let is = |t| st.st_mode & libc::S_IFMT == t;
        let mut stored = Vec::new();
        let access = if !ok {
            ACCESS_STREAM
        } else if is(libc::S_IFDIR) {
            ACCESS_DIRECTORY
        } else if is(libc::S_IFIFO) || is(libc::S_IFSOCK) {
            ACCESS_STREAM
        } else if !reads {
            ACCESS_WRITE
        } else {
            // The first open of a file keeps its content: later ones may see what
            // the program itself wrote there.
            if is(libc::S_IFREG) && !seen([b"file:".as_slice(), &resolved].concat()) {
                // SAFETY: a plain query.
                let pid = unsafe { libc::getpid() };
                let name = format!(
                    "{STORED_PREFIX}{pid}-{}",
                    STORED.fetch_add(1, Ordering::Relaxed)
                );
                let content = read_at(fd, 0, max_input());
                let mut all = true;
                for dir in RECORDS.get().into_iter().flatten() {
                    all &= std::fs::write(dir.join(&name), &content).is_ok();
                }
                if all {
                    stored = name.into_bytes();
                }
            }
            if writes {
                ACCESS_READ_WRITE
            } else {
                ACCESS_READ
            }
        };
        let size = if ok { st.st_size.max(0) as u64 } else { 0 };
        let size = size.to_string();
        let link = std::fs::symlink_metadata(std::ffi::OsStr::from_bytes(&given))
            .is_ok_and(|m| m.file_type().is_symlink());
        let link: &[u8] = if link { OPENED_SYMLINK.as_bytes() } else { b"" };
        let fields: [&[u8]; OPENED_FIELDS] = [
            access.as_bytes(),
            &given,
            &resolved,
            &stored,
            size.as_bytes(),
            link,
        ];
        let mut entry = Vec::new();
        for f in fields {
            entry.extend_from_slice(f);
            entry.push(0);
        }
        append(OPENED, &entry);
        set_errno(saved);
    })
}

fn errno() -> c_int {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() }
}

fn set_errno(e: c_int) {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// Up to `max` bytes of the file open as `fd` from `offset`, without moving its
/// offset, even when `fd` is open for writing only (a stream redirected to a file).
fn read_back(fd: c_int, offset: u64, max: u64) -> Vec<u8> {
    use std::os::fd::AsRawFd as _;
    match std::fs::File::open(format!("/proc/self/fd/{fd}")) {
        Ok(f) => read_at(f.as_raw_fd(), offset, max),
        Err(_) => read_at(fd, offset, max),
    }
}

/// Up to `max` bytes of `fd` from `offset`, without moving its offset.
fn read_at(fd: c_int, mut offset: u64, max: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    while (out.len() as u64) < max {
        let want = buf.len().min((max - out.len() as u64) as usize);
        // SAFETY: reading into our own buffer.
        let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), want, offset as libc::off_t) };
        if n <= 0 {
            break;
        }
        out.extend_from_slice(&buf[..n as usize]);
        offset += n as u64;
    }
    out
}

fn stat_of(fd: c_int) -> Option<libc::stat> {
    // SAFETY: fstat into a zeroed struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some(st)
}

fn is_terminal(fd: c_int) -> bool {
    // SAFETY: a plain query.
    unsafe { libc::isatty(fd) == 1 }
}

/// What standard stream `fd` is connected to.
fn stream_kind(fd: c_int) -> StreamKind {
    let Some(st) = stat_of(fd) else {
        return StreamKind::Nothing;
    };
    let t = st.st_mode & libc::S_IFMT;
    if t == libc::S_IFREG {
        StreamKind::File
    } else if is_terminal(fd) {
        StreamKind::Terminal
    } else if t == libc::S_IFCHR || t == libc::S_IFBLK {
        StreamKind::Device
    } else {
        StreamKind::Pipe
    }
}

fn same_file(a: c_int, b: c_int) -> bool {
    match (stat_of(a), stat_of(b)) {
        (Some(x), Some(y)) => x.st_dev == y.st_dev && x.st_ino == y.st_ino,
        _ => false,
    }
}

fn offset_of(fd: c_int) -> u64 {
    // SAFETY: a plain query.
    let o = unsafe { libc::lseek(fd, 0, libc::SEEK_CUR) };
    o.max(0) as u64
}

/// Where what the program writes to the regular file `fd` will start (or where it
/// reads from): the offset, or the end for a file opened to append (`>>`), whose
/// offset says nothing until the first write.
fn start_of(fd: c_int) -> u64 {
    // SAFETY: a plain query.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags >= 0 && flags & libc::O_APPEND != 0 {
        return stat_of(fd).map_or(0, |s| s.st_size.max(0) as u64);
    }
    offset_of(fd)
}

/// What the supervisor knows of one standard stream.
struct Stream {
    fd: c_int,
    kind: StreamKind,
    /// Where a regular file stood at the start.
    start: u64,
    /// For a pipe: the supervisor's end of the pipe to or from the program.
    ours: c_int,
    /// Bytes kept (at most the maximum input).
    kept: Vec<u8>,
    /// Bytes that went by in all.
    total: u64,
    /// No more to pass along.
    done: bool,
}

impl Stream {
    fn keep(&mut self, bytes: &[u8]) {
        let room = max_input().saturating_sub(self.kept.len() as u64) as usize;
        self.kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
        self.total += bytes.len() as u64;
    }
}

fn pipe() -> Option<[c_int; 2]> {
    let mut p = [0; 2];
    // SAFETY: a two-int array.
    (unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } == 0).then_some(p)
}

/// Start capturing this process, if asked (`main`'s own `argv`).
///
/// # Safety
/// `argv` is `main`'s.
pub unsafe fn maybe_start(argc: c_int, argv: *const *const c_char) {
    let Some(root) = std::env::var_os(ENV_CAPTURE_DIR) else {
        return;
    };
    crate::guard("the capture start", || {
        if let Err(e) = start(Path::new(&root), argc, argv) {
            eprintln!(
                "trestle runtime: cannot capture this run into {}: {e}",
                Path::new(&root).display()
            );
        }
    })
}

fn start(root: &Path, argc: c_int, argv: *const *const c_char) -> std::io::Result<()> {
    // SAFETY: a plain query.
    let pid = unsafe { libc::getpid() };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = root.join(format!("{pid}-{nanos}"));
    std::fs::create_dir(&dir)?;
    let mut args = Vec::new();
    for i in 0..argc.max(0) as usize {
        // SAFETY: argv holds argc strings.
        let a = unsafe { *argv.add(i) };
        if a.is_null() {
            break;
        }
        // SAFETY: a NUL-terminated argument.
        args.extend_from_slice(unsafe { CStr::from_ptr(a) }.to_bytes());
        args.push(0);
    }
    std::fs::write(dir.join(ARGV), args)?;
    let bytes =
        |p: std::io::Result<PathBuf>| p.map(|p| p.into_os_string().into_vec()).unwrap_or_default();
    std::fs::write(dir.join(CWD), bytes(std::env::current_dir()))?;
    std::fs::write(dir.join(EXE), bytes(std::fs::read_link("/proc/self/exe")))?;
    // SAFETY: a plain query.
    let ppid = unsafe { libc::getppid() };
    std::fs::write(
        dir.join(PARENT_EXE),
        bytes(std::fs::read_link(format!("/proc/{ppid}/exe"))),
    )?;
    let mut env = Vec::new();
    for (k, v) in std::env::vars_os() {
        if implicit_variable(k.as_bytes()) {
            env.extend_from_slice(&[k.as_bytes(), b"\0", v.as_bytes(), b"\0"].concat());
        }
    }
    std::fs::write(dir.join(ENV), env)?;

    let mut streams: Vec<Stream> = (0..3)
        .map(|fd| {
            let kind = stream_kind(fd);
            Stream {
                fd,
                kind,
                start: if kind == StreamKind::File {
                    start_of(fd)
                } else {
                    0
                },
                ours: -1,
                kept: Vec::new(),
                total: 0,
                done: false,
            }
        })
        .collect();
    let merged = matches!(streams[1].kind, StreamKind::File | StreamKind::Pipe) && same_file(1, 2);
    // Regular stdin: what is left of it is the test's stdin, read in place.
    if streams[0].kind == StreamKind::File {
        let limit = max_input();
        streams[0].kept = read_back(0, streams[0].start, limit);
        let size = stat_of(0).map_or(0, |s| s.st_size.max(0) as u64);
        streams[0].total = size
            .saturating_sub(streams[0].start)
            .max(streams[0].kept.len() as u64);
    }
    // Pipes: the program gets a pipe of ours in their place.
    let mut theirs = [-1; 3];
    for s in streams.iter_mut() {
        if s.kind != StreamKind::Pipe || (s.fd == 2 && merged) {
            continue;
        }
        let Some([r, w]) = pipe() else {
            return Err(std::io::Error::last_os_error());
        };
        if s.fd == 0 {
            s.ours = w;
            theirs[0] = r;
        } else {
            s.ours = r;
            theirs[s.fd as usize] = w;
        }
    }
    if merged {
        streams[2].kind = StreamKind::Merged;
        theirs[2] = theirs[1];
    }

    // SAFETY: the program has just entered main; fork keeps this thread only.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if child == 0 {
        for (fd, t) in theirs.iter().enumerate() {
            if *t >= 0 {
                // SAFETY: putting our pipe end in place of the standard stream.
                unsafe { libc::dup2(*t, fd as c_int) };
            }
        }
        for s in &streams {
            if s.ours >= 0 {
                // SAFETY: closing the supervisor's ends in the program.
                unsafe { libc::close(s.ours) };
            }
        }
        for t in theirs {
            if t > 2 {
                // SAFETY: the originals, now duplicated onto 0..2.
                unsafe { libc::close(t) };
            }
        }
        let ancestors = std::env::var(ENV_CAPTURE_ANCESTORS).unwrap_or_default();
        let own = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut records = vec![dir];
        records.extend(
            ancestors
                .split(':')
                .filter(|a| !a.is_empty())
                .map(|a| root.join(a)),
        );
        let lineage = if ancestors.is_empty() {
            own
        } else {
            format!("{own}:{ancestors}")
        };
        // Single-threaded: the program has only just entered main.
        std::env::set_var(ENV_CAPTURE_ANCESTORS, lineage);
        let _ = RECORDS.set(records);
        CAPTURING.store(true, Ordering::Relaxed);
        return Ok(());
    }
    for t in theirs {
        if t >= 0 {
            // SAFETY: the program's ends, which it has.
            unsafe { libc::close(t) };
        }
    }
    supervise(child, &dir, streams)
}

/// The write end of the pipe that wakes the supervisor when the program ends.
static WAKE: AtomicI32 = AtomicI32::new(-1);

extern "C" fn child_ended(_: c_int) {
    let fd = WAKE.load(Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: async-signal-safe; a full pipe already wakes the supervisor.
        unsafe { libc::write(fd, [0u8].as_ptr().cast(), 1) };
    }
}

extern "C" fn forward_signal(sig: c_int) {
    let child = CHILD.load(Ordering::Relaxed);
    if child > 0 {
        // SAFETY: async-signal-safe.
        unsafe { libc::kill(child, sig) };
    }
}

/// The supervisor: pass the pipes along until the program ends, write the record,
/// end as the program did. Never returns.
fn supervise(child: libc::pid_t, dir: &Path, mut streams: Vec<Stream>) -> ! {
    CHILD.store(child, Ordering::Relaxed);
    // SAFETY: installing a handler that only calls kill(); ignoring SIGPIPE so a
    // reader that went away is an error we see.
    unsafe {
        for sig in [
            libc::SIGTERM,
            libc::SIGINT,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGUSR1,
            libc::SIGUSR2,
            libc::SIGALRM,
        ] {
            libc::signal(
                sig,
                forward_signal as extern "C" fn(c_int) as libc::sighandler_t,
            );
        }
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    // The program's end wakes the poll below at once rather than at its timeout.
    let wake = pipe();
    if let Some([r, w]) = wake {
        // SAFETY: our own pipe; the handler only writes to it.
        unsafe {
            libc::fcntl(r, libc::F_SETFL, libc::O_NONBLOCK);
            libc::fcntl(w, libc::F_SETFL, libc::O_NONBLOCK);
            WAKE.store(w, Ordering::Relaxed);
            libc::signal(
                libc::SIGCHLD,
                child_ended as extern "C" fn(c_int) as libc::sighandler_t,
            );
        }
    }
    for s in &streams {
        if s.ours >= 0 {
            // SAFETY: our own pipe ends.
            unsafe { libc::fcntl(s.ours, libc::F_SETFL, libc::O_NONBLOCK) };
        }
    }
    let mut pending: Vec<u8> = Vec::new();
    let mut status: Option<c_int> = None;
    let mut ended_at: Option<std::time::Instant> = None;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        if status.is_none() {
            let mut st = 0;
            // SAFETY: our own child.
            let r = unsafe { libc::waitpid(child, &mut st, libc::WNOHANG) };
            if r == child {
                status = Some(st);
                ended_at = Some(std::time::Instant::now());
                // Nobody reads stdin any more.
                if streams[0].ours >= 0 {
                    // SAFETY: our end.
                    unsafe { libc::close(streams[0].ours) };
                    streams[0].ours = -1;
                }
            } else if r < 0 && errno() != libc::EINTR {
                status = Some(0);
                ended_at = Some(std::time::Instant::now());
            }
        }
        let outputs_open = streams[1..].iter().any(|s| s.ours >= 0 && !s.done);
        // What a program's own children still write after it ended gets a moment.
        if status.is_some()
            && (!outputs_open || ended_at.is_some_and(|t| t.elapsed().as_secs() >= 2))
        {
            break;
        }
        let mut polls: Vec<libc::pollfd> = Vec::new();
        if let Some([r, _]) = wake {
            polls.push(libc::pollfd {
                fd: r,
                events: libc::POLLIN,
                revents: 0,
            });
        }
        if streams[0].ours >= 0 {
            if !pending.is_empty() {
                polls.push(libc::pollfd {
                    fd: streams[0].ours,
                    events: libc::POLLOUT,
                    revents: 0,
                });
            } else if !streams[0].done {
                polls.push(libc::pollfd {
                    fd: 0,
                    events: libc::POLLIN,
                    revents: 0,
                });
            } else {
                // All of stdin handed over: the program sees its end.
                // SAFETY: our end.
                unsafe { libc::close(streams[0].ours) };
                streams[0].ours = -1;
            }
        }
        for s in &streams[1..] {
            if s.ours >= 0 && !s.done {
                polls.push(libc::pollfd {
                    fd: s.ours,
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
        }
        // SAFETY: an array of pollfds we own.
        let n = unsafe { libc::poll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, 200) };
        if n <= 0 {
            continue;
        }
        for p in polls.iter().filter(|p| p.revents != 0) {
            if wake.is_some_and(|[r, _]| r == p.fd) {
                // SAFETY: draining our own non-blocking pipe.
                while unsafe { libc::read(p.fd, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
            } else if p.fd == 0 {
                // SAFETY: reading into our buffer.
                let r = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
                if r > 0 {
                    streams[0].keep(&buf[..r as usize]);
                    pending.extend_from_slice(&buf[..r as usize]);
                } else if r == 0 || errno() != libc::EINTR && errno() != libc::EAGAIN {
                    // The end of stdin: the program sees it once it has read the rest.
                    streams[0].done = true;
                }
            } else if p.fd == streams[0].ours {
                // SAFETY: writing what we hold.
                let w = unsafe { libc::write(p.fd, pending.as_ptr().cast(), pending.len()) };
                if w > 0 {
                    pending.drain(..w as usize);
                } else if errno() == libc::EPIPE {
                    // The program closed its stdin: it reads no more.
                    streams[0].done = true;
                    pending.clear();
                    // SAFETY: our end.
                    unsafe { libc::close(streams[0].ours) };
                    streams[0].ours = -1;
                }
            } else if let Some(s) = streams[1..].iter_mut().find(|s| s.ours == p.fd) {
                // SAFETY: reading into our buffer.
                let r = unsafe { libc::read(s.ours, buf.as_mut_ptr().cast(), buf.len()) };
                if r > 0 {
                    let chunk = &buf[..r as usize];
                    s.keep(chunk);
                    if !write_all(s.fd, chunk) {
                        // Whoever read this went away: so does our end, and the
                        // program's next write fails as it would have.
                        // SAFETY: our end.
                        unsafe { libc::close(s.ours) };
                        s.ours = -1;
                    }
                } else if r == 0 || errno() != libc::EINTR && errno() != libc::EAGAIN {
                    s.done = true;
                }
            }
        }
    }
    let status = status.unwrap_or(0);
    // Regular files: what the program wrote since the start.
    for s in streams.iter_mut().skip(1) {
        if s.kind == StreamKind::File {
            let end = offset_of(s.fd);
            s.kept = read_back(s.fd, s.start, max_input().min(end.saturating_sub(s.start)));
            s.total = end.saturating_sub(s.start);
        }
    }
    let mut process = String::new();
    process += &process_line("format", &CAPTURE_FORMAT.to_string());
    process += &process_line("version", env!("CARGO_PKG_VERSION"));
    let ended = if libc::WIFSIGNALED(status) {
        format!("signal {}", libc::WTERMSIG(status))
    } else {
        format!("exit {}", libc::WEXITSTATUS(status))
    };
    process += &process_line("status", &ended);
    for (s, (name, file)) in
        streams
            .iter()
            .zip([("stdin", STDIN), ("stdout", STDOUT), ("stderr", STDERR)])
    {
        process += &process_line(name, &format!("{} {}", s.kind.word(), s.total));
        let _ = std::fs::write(dir.join(file), &s.kept);
    }
    // The record is whole once this file is there.
    let tmp = dir.join(".process");
    if std::fs::write(&tmp, process).is_ok() {
        let _ = std::fs::rename(&tmp, dir.join(PROCESS));
    }
    end_as(status)
}

fn write_all(fd: c_int, mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        // SAFETY: writing our buffer.
        let w = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if w > 0 {
            bytes = &bytes[w as usize..];
        } else if w < 0 && errno() == libc::EINTR {
            continue;
        } else if w < 0 && errno() == libc::EAGAIN {
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLOUT,
                revents: 0,
            };
            // SAFETY: one pollfd.
            unsafe { libc::poll(&mut p, 1, 100) };
        } else {
            return false;
        }
    }
    true
}

/// End the supervisor the way the program ended.
fn end_as(status: c_int) -> ! {
    // SAFETY: leaving without running the program's exit handlers (they are the
    // program's, which has run them); a signal is raised with its default action
    // and no core file of ours.
    unsafe {
        if libc::WIFSIGNALED(status) {
            let sig = libc::WTERMSIG(status);
            let no_core = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            libc::signal(sig, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, sig);
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::raise(sig);
            libc::_exit(128 + sig)
        }
        libc::_exit(libc::WEXITSTATUS(status))
    }
}

//! C library streams: knowing which `FILE` objects exist, which file each has open,
//! and where its buffer is, so that a context holding a `FILE *` can be replayed.
//!
//! The pass renames `fopen`, `fdopen`, `freopen` and `fclose` to the wrappers here;
//! the standard streams are registered at start-up. A `FILE` is an extent of kind
//! `File`; before every walk its buffer (glibc's `_IO_buf_base`..`_IO_buf_end`, memory
//! the C library allocated itself) is registered too, so the read and write pointers
//! inside the `FILE` become relocatable edges. The walk notes, for each `FILE`, its
//! descriptor, the descriptor's offset and the path it was opened with; a replay
//! reopens the path (or seeks standard input), positions it, and puts it under the
//! same descriptor number.
//!
//! Layout offsets are glibc's on x86-64 (`struct _IO_FILE`), the only C library this
//! runtime supports.

use crate::extents::ExtentMap;
use crate::{lock, tracking};
use libc::{c_char, c_int, FILE};
use std::collections::HashMap;
use trestle_abi::ExtentKind;

const OFF_BUF_BASE: usize = 56;
const OFF_BUF_END: usize = 64;
const OFF_FILENO: usize = 112;
/// Offsets of the pointer fields of a FILE that a walk follows: the read, write,
/// buffer, save and backup pointers (`_IO_read_ptr` .. `_IO_save_end`), and `_lock`
/// and `_wide_data`, which for an `fopen`ed stream point inside its own allocation.
const EDGE_OFFSETS: [usize; 13] = [8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 136, 160];

/// True if the word at `offset` in a FILE is one of [`EDGE_OFFSETS`].
pub fn is_edge_offset(offset: usize) -> bool {
    EDGE_OFFSETS.contains(&offset)
}

const OFF_READ_PTR: usize = 8;
const OFF_READ_END: usize = 16;
const OFF_READ_BASE: usize = 24;
const OFF_OLD_OFFSET: usize = 120;
const OFF_OFFSET: usize = 144;
const OFF_MODE: usize = 192;
/// `_flags` bits (glibc's `libio.h`).
const IO_UNBUFFERED: i32 = 0x2;
const IO_NO_READS: i32 = 0x4;
const IO_EOF_SEEN: i32 = 0x10;
const IO_ERR_SEEN: i32 = 0x20;
const IO_IN_BACKUP: i32 = 0x100;
const IO_LINE_BUF: i32 = 0x200;
const IO_CURRENTLY_PUTTING: i32 = 0x800;

/// `sizeof(struct _IO_FILE_plus)`: the standard streams are this big.
pub(crate) const STD_FILE_SIZE: usize = 224;
/// `sizeof(struct locked_FILE)` (glibc's `iofopen.c`, `iofdopen.c`): what `fopen` and
/// `fdopen` allocate, the `FILE`, its lock and its wide-character state. The block
/// `malloc` hands out may be larger, by however much the chunk it reused was, which
/// differs between a recording and its replay.
const LOCKED_FILE_SIZE: usize = 472;
/// Bytes of a `FILE` that hold nothing: the padding after `_flags` and after
/// `_shortbuf`, `_old_offset` and `_vtable_offset` (the glibc 2.0 ABI's, which the
/// current one neither sets nor reads), `_freeres_buf`, `__pad5` and `_unused2`.
/// `fopen`, `fdopen` and `popen` leave them as `malloc` found them.
const PADDING: [std::ops::Range<usize>; 6] =
    [4..8, 120..128, 130..131, 132..136, 176..192, 196..216];
/// Offset of a `FILE`'s one-byte `_shortbuf`.
const OFF_SHORTBUF: usize = 131;
/// Bytes a `FILE` uses only once it is wide-oriented (`_mode` > 0), uninitialised
/// until then: its `_codecvt` pointer, and in the wide state `fopen` allocates after
/// the `FILE` and its lock, the conversion states, converters and `_shortbuf`.
const WIDE_ONLY: [std::ops::Range<usize>; 2] = [152..160, 328..464];

/// Zero the bytes of a `FILE`'s copy that hold nothing ([`PADDING`], and
/// [`WIDE_ONLY`] in a stream that is not wide), so that what an earlier user of its
/// memory left there does not count as its state. The C library sets the wide bytes
/// up when a stream turns wide, so a replay may restore them as zeros.
pub fn clear_padding(bytes: &mut [u8]) {
    let wide = bytes
        .get(OFF_MODE..OFF_MODE + 4)
        .is_some_and(|m| i32::from_ne_bytes([m[0], m[1], m[2], m[3]]) > 0);
    let wide_only: &[std::ops::Range<usize>] = if wide { &[] } else { &WIDE_ONLY };
    for r in PADDING.iter().chain(wide_only) {
        if let Some(b) = bytes.get_mut(r.clone()) {
            b.fill(0);
        }
    }
    // `_shortbuf` is the buffer of an unbuffered stream only; in any other it is residue.
    let unbuffered = bytes
        .first()
        .is_some_and(|&f| i32::from(f) & IO_UNBUFFERED != 0);
    if !unbuffered {
        if let Some(b) = bytes.get_mut(OFF_SHORTBUF) {
            *b = 0;
        }
    }
}

/// What the runtime knows about one `FILE`.
#[derive(Debug, Clone, Default)]
pub struct FileInfo {
    /// Path it was opened with.
    pub path: Option<String>,
    /// `open(2)` flags for reopening it.
    pub flags: i32,
    /// The buffer extent last registered for it.
    pub(crate) buf: Option<(usize, usize)>,
}

/// Every known `FILE`, by address.
pub type FileTable = HashMap<usize, FileInfo>;

extern "C" {
    static stdin: *mut FILE;
    static stdout: *mut FILE;
    static stderr: *mut FILE;
    fn malloc_usable_size(p: *mut libc::c_void) -> libc::size_t;
}

/// The descriptor of the `FILE` at `fp`.
///
/// # Safety
/// `fp` must be a live `FILE`.
pub unsafe fn fileno_of(fp: usize) -> i32 {
    // SAFETY: reading a field of a live FILE.
    unsafe { *((fp + OFF_FILENO) as *const i32) }
}

/// The descriptor of `fp` if it is one of the C library's standard streams.
pub fn std_stream_fd(fp: *mut FILE) -> Option<i32> {
    // SAFETY: reading the C library's stream pointers.
    let streams = unsafe { [stdin, stdout, stderr] };
    streams
        .iter()
        .position(|&s| s == fp && !fp.is_null())
        .map(|i| i as i32)
}

/// The C library's standard stream with descriptor `fd` (0, 1 or 2).
pub fn std_stream(fd: i32) -> Option<*mut FILE> {
    // SAFETY: reading the C library's stream pointers.
    let streams = unsafe { [stdin, stdout, stderr] };
    usize::try_from(fd)
        .ok()
        .and_then(|i| streams.get(i).copied())
        .filter(|s| !s.is_null())
}

/// Register the standard streams (called before the program does any I/O).
pub fn register_std_streams(files: &mut FileTable, extents: &mut ExtentMap) {
    // SAFETY: reading the C library's stream pointers.
    let streams = unsafe { [stdin, stdout, stderr] };
    for (i, fp) in streams.into_iter().enumerate() {
        if !fp.is_null() {
            files.insert(
                fp as usize,
                FileInfo {
                    flags: -1,
                    ..Default::default()
                },
            );
            extents.insert_heap(fp as usize, STD_FILE_SIZE, ExtentKind::File);
            if i < 2 {
                // SAFETY: no I/O has happened on the stream yet.
                unsafe { give_zeroed_buffer(fp, extents) };
            }
        }
    }
}

/// Give a stream a buffer of the size the C library would pick, but zeroed and known
/// as an extent. The C library's own buffer would hold uninitialised bytes past the
/// data, which differ between a recording and its replay.
///
/// # Safety
/// `fp` must be a live stream on which no I/O has happened yet.
pub unsafe fn give_zeroed_buffer(fp: *mut FILE, extents: &mut ExtentMap) {
    // SAFETY: as documented.
    unsafe {
        let fd = fileno_of(fp as usize);
        let mode = if fd >= 0 && libc::isatty(fd) == 1 {
            libc::_IOLBF
        } else {
            libc::_IOFBF
        };
        give_zeroed_buffer_in(fp, mode, extents);
    }
}

/// Give a `FILE` restored by a replay the buffer its recorded stream would have had:
/// a zeroed one (as [`give_zeroed_buffer`] gave it in the recording), buffered by
/// line or in full as the recorded flags say. A stream recorded unbuffered (stderr,
/// which the runtime leaves as the C library made it) gets none: its first write
/// takes the one-byte buffer inside the `FILE`, as it did in the recording, instead
/// of a buffer the recording never had.
///
/// # Safety
/// `fp` must be a restored `FILE` on which no I/O has happened in this process.
pub unsafe fn give_restored_buffer(fp: *mut FILE, extents: &mut ExtentMap) {
    // SAFETY: reading the fields of a live FILE.
    let (flags, base) = unsafe {
        (
            *(fp as *const i32),
            *((fp as usize + OFF_BUF_BASE) as *const usize),
        )
    };
    if base != 0 || flags & IO_UNBUFFERED != 0 {
        return;
    }
    let mode = if flags & IO_LINE_BUF != 0 {
        libc::_IOLBF
    } else {
        libc::_IOFBF
    };
    // SAFETY: as documented.
    unsafe { give_zeroed_buffer_in(fp, mode, extents) };
}

/// # Safety
/// `fp` must be a live stream on which no I/O has happened yet.
unsafe fn give_zeroed_buffer_in(fp: *mut FILE, mode: c_int, extents: &mut ExtentMap) {
    // SAFETY: plain libc calls on a live stream and fresh memory.
    unsafe {
        let fd = fileno_of(fp as usize);
        let mut st: libc::stat = std::mem::zeroed();
        let size = if fd >= 0 && libc::fstat(fd, &mut st) == 0 && st.st_blksize > 0 {
            st.st_blksize as usize
        } else {
            libc::BUFSIZ as usize
        };
        let buf = libc::calloc(1, size);
        if buf.is_null() {
            return;
        }
        if libc::setvbuf(fp, buf.cast(), mode, size) == 0 {
            extents.insert_heap(buf as usize, size, ExtentKind::Heap);
        } else {
            libc::free(buf);
        }
    }
}

/// Register each `FILE`'s current buffer as an extent (and forget buffers it no
/// longer uses). Called before every walk.
pub fn refresh_buffers(files: &mut FileTable, extents: &mut ExtentMap) {
    for (&fp, info) in files.iter_mut() {
        // SAFETY: registered FILEs are live until fclose removes them.
        let (base, end) = unsafe {
            (
                *((fp + OFF_BUF_BASE) as *const usize),
                *((fp + OFF_BUF_END) as *const usize),
            )
        };
        let now = (base != 0 && end > base).then_some((base, end));
        if now == info.buf {
            continue;
        }
        if let Some((b, _)) = info.buf.take() {
            extents.remove_heap(b);
        }
        if let Some((b, e)) = now {
            // A buffer the program supplied (setvbuf) is already an extent of its own.
            if extents.find(b, u64::MAX).is_none() {
                extents.insert_heap(b, e - b, ExtentKind::Heap);
                info.buf = Some((b, e));
            }
        }
    }
}

/// Forget a `FILE` and its buffer. The `FILE` stays known as freed memory: a
/// pointer the program keeps to a closed stream is then a pointer to a freed extent
/// in the recording and in the replay alike, not an address that differs.
fn forget(fp: usize) {
    if let Some(rt) = lock().as_mut() {
        if let Some(info) = rt.files.remove(&fp) {
            if let Some((b, _)) = info.buf {
                rt.extents.remove_heap(b);
            }
        }
        rt.extents.retire(fp);
    }
}

/// `open(2)` flags for reopening a stream opened with `mode` (never truncating: the
/// replay must find what the recording had written).
fn flags_of_mode(mode: &[u8]) -> i32 {
    let plus = mode.contains(&b'+');
    match mode.first() {
        Some(b'r') if plus => libc::O_RDWR,
        Some(b'r') => libc::O_RDONLY,
        Some(b'w') if plus => libc::O_RDWR | libc::O_CREAT,
        Some(b'w') => libc::O_WRONLY | libc::O_CREAT,
        Some(b'a') if plus => libc::O_RDWR | libc::O_APPEND | libc::O_CREAT,
        Some(b'a') => libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT,
        _ => libc::O_RDONLY,
    }
}

/// # Safety
/// `s` must be null or a NUL-terminated string.
unsafe fn c_str(s: *const c_char) -> Option<Vec<u8>> {
    // SAFETY: as documented.
    (!s.is_null()).then(|| unsafe { std::ffi::CStr::from_ptr(s) }.to_bytes().to_vec())
}

fn register(fp: *mut FILE, path: Option<Vec<u8>>, mode: Option<Vec<u8>>) {
    if fp.is_null() || mode_passive() {
        return;
    }
    let size = if std_stream_fd(fp).is_some() {
        // freopen on a standard stream returns it: static, not malloc'd.
        STD_FILE_SIZE
    } else {
        // SAFETY: `fp` came from the C library's fopen family: a malloc'd FILE.
        unsafe { malloc_usable_size(fp.cast()) }.clamp(STD_FILE_SIZE, LOCKED_FILE_SIZE)
    };
    if let Some(rt) = lock().as_mut() {
        let old = rt.files.remove(&(fp as usize)).unwrap_or_default();
        if let Some((b, _)) = old.buf {
            rt.extents.remove_heap(b);
        }
        let info = FileInfo {
            path: path
                .map(|p| String::from_utf8_lossy(&p).into_owned())
                .or(old.path),
            flags: mode.map_or(old.flags, |m| flags_of_mode(&m)),
            buf: None,
        };
        rt.files.insert(fp as usize, info);
        rt.extents.insert_heap(fp as usize, size, ExtentKind::File);
        // SAFETY: the stream was just opened: no I/O yet.
        unsafe { give_zeroed_buffer(fp, &mut rt.extents) };
    }
}

/// A file a unit execution opened (fuzz mode).
enum Opened {
    Fd(c_int),
    Stream(usize),
}

/// The files the current unit execution opened and did not close. A function that
/// opens what it reads and leaves the closing to `exit()` (paste's `paste_parallel`
/// opens every file it pastes) would otherwise leave a descriptor per execution in a
/// harness that runs many, until `open` fails and the harness can write nothing.
static OPENED: std::sync::Mutex<Vec<Opened>> = std::sync::Mutex::new(Vec::new());

fn opened_list() -> std::sync::MutexGuard<'static, Vec<Opened>> {
    OPENED.lock().unwrap_or_else(|p| p.into_inner())
}

fn note_opened(o: Opened) {
    if crate::fuzzing() {
        opened_list().push(o);
    }
}

fn note_closed(fd: Option<c_int>, stream: Option<usize>) {
    if crate::fuzzing() {
        opened_list().retain(|o| match o {
            Opened::Fd(f) => Some(*f) != fd,
            Opened::Stream(s) => Some(*s) != stream,
        });
    }
}

/// Close what the unit execution that just ended opened and left open (streams
/// first, then bare descriptors); called as the harness puts the context back.
pub fn close_opened() {
    let left = std::mem::take(&mut *opened_list());
    let mut streams_closed = Vec::new();
    for o in &left {
        if let Opened::Stream(fp) = o {
            // SAFETY: a stream the C library opened during the execution and nobody
            // closed (fclose is tracked): closing it frees it.
            unsafe {
                streams_closed.push(fileno_of(*fp));
                libc::fclose(*fp as *mut FILE);
            }
        }
    }
    for o in &left {
        if let Opened::Fd(fd) = o {
            if !streams_closed.contains(fd) {
                // SAFETY: a descriptor the execution opened and did not close.
                unsafe { libc::close(*fd) };
            }
        }
    }
}

/// Forget what setting the unit up opened: only executions' files are closed.
pub fn forget_opened() {
    opened_list().clear();
}

fn mode_passive() -> bool {
    !tracking()
}

/// Under `trestle capture`: the program opened `path` as the stream `fp` with mode `m`.
///
/// # Safety
/// `fp` is a live stream, `path` and `m` NUL-terminated strings.
unsafe fn capture_stream(fp: *mut FILE, path: *const c_char, m: *const c_char) {
    // SAFETY: as documented.
    let mode = unsafe { std::ffi::CStr::from_ptr(m) }.to_bytes();
    let reads = mode.first() == Some(&b'r') || mode.contains(&b'+');
    let writes = mode.first() != Some(&b'r') || mode.contains(&b'+');
    // "w" and "w+" empty the file: nothing there before is input.
    let truncates = mode.first() == Some(&b'w');
    // SAFETY: as documented.
    unsafe { crate::capture::note_opened(libc::fileno(fp), path, reads && !truncates, writes) };
}

/// Under `trestle capture`: the program opened `path` as `fd` with `flags`.
fn capture_fd(fd: c_int, path: *const c_char, flags: c_int) {
    let access = flags & libc::O_ACCMODE;
    let writes = access != libc::O_RDONLY;
    // A file emptied or made anew holds nothing that was input.
    let fresh = writes
        && (flags & libc::O_TRUNC != 0
            || flags & (libc::O_CREAT | libc::O_EXCL) == libc::O_CREAT | libc::O_EXCL);
    let reads = access != libc::O_WRONLY && !fresh;
    // SAFETY: open() accepted `path`, a NUL-terminated string (or null).
    unsafe { crate::capture::note_opened(fd, path, reads, writes) };
}

/// `fopen`, tracked.
///
/// # Safety
/// As `fopen`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_fopen(path: *const c_char, m: *const c_char) -> *mut FILE {
    // SAFETY: forwarding; the strings are the caller's.
    unsafe {
        let fp = libc::fopen(path, m);
        register(fp, c_str(path), c_str(m));
        if !fp.is_null() {
            note_opened(Opened::Stream(fp as usize));
            capture_stream(fp, path, m);
        }
        fp
    }
}

/// `fdopen`, tracked.
///
/// # Safety
/// As `fdopen`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_fdopen(fd: c_int, m: *const c_char) -> *mut FILE {
    // SAFETY: forwarding.
    unsafe {
        let fp = libc::fdopen(fd, m);
        register(fp, None, c_str(m));
        if !fp.is_null() {
            note_opened(Opened::Stream(fp as usize));
        }
        fp
    }
}

/// `freopen`, tracked.
///
/// # Safety
/// As `freopen`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_freopen(
    path: *const c_char,
    m: *const c_char,
    stream: *mut FILE,
) -> *mut FILE {
    // SAFETY: forwarding.
    unsafe {
        let fp = libc::freopen(path, m, stream);
        if fp.is_null() {
            forget(stream as usize);
        } else {
            register(fp, c_str(path), c_str(m));
            capture_stream(fp, path, m);
        }
        fp
    }
}

/// `fclose`, tracked. A `FILE` restored by a replay lives in the replay arena, not in
/// the C library's heap: it is flushed and its descriptor closed here, since the C
/// library's `fclose` would try to free it.
///
/// # Safety
/// As `fclose`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_fclose(fp: *mut FILE) -> c_int {
    if fp.is_null() {
        // SAFETY: forwarding.
        return unsafe { libc::fclose(fp) };
    }
    // A unit execution that closes a standard stream (a `main` closing stdin after
    // reading it, or stdout at exit) leaves it open for the next execution, which is
    // served new input on it: flushed, not closed.
    if crate::fuzzing() && std_stream_fd(fp).is_some() {
        // SAFETY: `fp` is one of the C library's live standard streams.
        return if unsafe { libc::fflush(fp) } == 0 {
            0
        } else {
            libc::EOF
        };
    }
    if !mode_passive() {
        forget(fp as usize);
    }
    note_closed(None, Some(fp as usize));
    if crate::arena::in_arena(fp as usize) {
        // SAFETY: `fp` is a live FILE copy; flushing writes through its descriptor.
        unsafe {
            let flushed = libc::fflush(fp);
            let closed = libc::close(fileno_of(fp as usize));
            return if flushed == 0 && closed == 0 {
                0
            } else {
                libc::EOF
            };
        }
    }
    // SAFETY: forwarding.
    unsafe { libc::fclose(fp) }
}

/// A descriptor the program opened with `open`/`openat`.
#[derive(Debug, Clone)]
pub struct FdInfo {
    /// The path as given (relative to the working directory at the time).
    pub path: String,
    /// The open flags.
    pub flags: i32,
}

fn track_fd(fd: c_int, path: *const c_char, flags: c_int) {
    if fd < 0 || path.is_null() || !tracking() {
        return;
    }
    // SAFETY: `path` is the NUL-terminated string open() just accepted.
    let p = unsafe { std::ffi::CStr::from_ptr(path) }
        .to_string_lossy()
        .into_owned();
    if let Some(rt) = lock().as_mut() {
        rt.fds.insert(fd, FdInfo { path: p, flags });
    }
}

/// `open`, tracked. Declared without the variadic mode; on x86-64 a variadic caller
/// passes it in the third integer register either way.
///
/// # Safety
/// As `open`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_open(
    path: *const c_char,
    flags: c_int,
    mode: libc::c_uint,
) -> c_int {
    // SAFETY: forwarding.
    let fd = unsafe { libc::open(path, flags, mode) };
    track_fd(fd, path, flags);
    capture_fd(fd, path, flags);
    if fd >= 0 {
        note_opened(Opened::Fd(fd));
    }
    fd
}

/// `openat`, tracked (paths relative to a directory descriptor other than the
/// working directory are not reopened by a replay).
///
/// # Safety
/// As `openat`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: libc::c_uint,
) -> c_int {
    // SAFETY: forwarding.
    let fd = unsafe { libc::openat(dirfd, path, flags, mode) };
    capture_fd(fd, path, flags);
    if dirfd == libc::AT_FDCWD {
        track_fd(fd, path, flags);
    }
    if fd >= 0 {
        note_opened(Opened::Fd(fd));
    }
    fd
}

/// `close`, tracked.
///
/// # Safety
/// As `close`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_close(fd: c_int) -> c_int {
    if tracking() {
        if let Some(rt) = lock().as_mut() {
            rt.fds.remove(&fd);
        }
    }
    note_closed(Some(fd), None);
    // SAFETY: forwarding.
    unsafe { libc::close(fd) }
}

/// The tracked descriptors with their current offsets, for a context.
pub fn open_fds(fds: &HashMap<i32, FdInfo>) -> Vec<trestle_abi::OpenFile> {
    let mut v: Vec<trestle_abi::OpenFile> = fds
        .iter()
        .map(|(&fd, info)| {
            // SAFETY: lseek only queries the descriptor.
            let off = unsafe { libc::lseek(fd, 0, libc::SEEK_CUR) };
            trestle_abi::OpenFile {
                extent: u32::MAX,
                fd,
                offset: (off >= 0).then_some(off as u64),
                path: Some(info.path.clone()),
                flags: info.flags,
                standard: None,
            }
        })
        .collect();
    v.sort_by_key(|f| f.fd);
    v
}

/// The read position of the stream `FILE` at `fp`, opened as `open` says; `None`
/// for a stream that cannot read (an output stream).
///
/// # Safety
/// `fp` must be a live `FILE`.
pub unsafe fn stream_pos(
    fp: usize,
    open: &trestle_abi::OpenFile,
) -> Option<trestle_abi::StreamPos> {
    // SAFETY: reading fields of a live FILE.
    let (flags, ptr, end, mode) = unsafe {
        (
            *(fp as *const i32),
            *((fp + OFF_READ_PTR) as *const usize),
            *((fp + OFF_READ_END) as *const usize),
            *((fp + OFF_MODE) as *const i32),
        )
    };
    if flags & IO_NO_READS != 0 {
        return None;
    }
    let problem = if open.fd < 0 {
        Some("no descriptor (a stream with its own buffering functions)".to_owned())
    } else if flags & IO_IN_BACKUP != 0 {
        Some("bytes pushed back with ungetc".to_owned())
    } else if mode > 0 {
        Some("a wide-character stream".to_owned())
    } else if flags & IO_CURRENTLY_PUTTING != 0 {
        Some("a stream in the middle of writing".to_owned())
    } else if open.offset.is_none() {
        Some("not seekable (a pipe, socket or terminal)".to_owned())
    } else {
        None
    };
    Some(trestle_abi::StreamPos {
        fd: open.fd,
        file: None,
        buffered: true,
        path: open.path.clone(),
        offset: open.offset,
        pending: end.saturating_sub(ptr) as u64,
        mark: ptr as u64,
        problem,
    })
}

/// The read positions of every input stream a context may read from: the `FILE`s
/// the walk met (`found`), then the C library's `stdin` and the descriptors opened
/// with `open` that none of those covers. A descriptor in `mapped` was mapped into
/// memory: its stream cannot be replaced.
pub fn stream_positions(
    found: Vec<trestle_abi::StreamPos>,
    fds: &HashMap<i32, FdInfo>,
    mapped: &std::collections::HashSet<i32>,
) -> Vec<trestle_abi::StreamPos> {
    let mut out = found;
    if !out.iter().any(|s| s.fd == 0) {
        // SAFETY: reading the C library's stream pointer; the stream is live.
        let fp = unsafe { stdin } as usize;
        // SAFETY: lseek only queries the descriptor.
        let off = unsafe { libc::lseek(0, 0, libc::SEEK_CUR) };
        let open = trestle_abi::OpenFile {
            extent: u32::MAX,
            fd: 0,
            offset: (off >= 0).then_some(off as u64),
            path: None,
            flags: -1,
            standard: Some(0),
        };
        // SAFETY: stdin is a live FILE.
        if fp != 0 {
            if let Some(s) = unsafe { stream_pos(fp, &open) } {
                out.push(s);
            }
        }
    }
    for f in open_fds(fds) {
        let readable = f.flags & libc::O_ACCMODE != libc::O_WRONLY;
        if readable && !out.iter().any(|s| s.fd == f.fd) {
            let problem = f
                .offset
                .is_none()
                .then(|| "not seekable (a pipe, socket or terminal)".to_owned());
            out.push(trestle_abi::StreamPos {
                fd: f.fd,
                file: None,
                buffered: false,
                path: f.path,
                offset: f.offset,
                pending: 0,
                mark: 0,
                problem,
            });
        }
    }
    for s in &mut out {
        if s.problem.is_none() && mapped.contains(&s.fd) {
            s.problem = Some("mapped into memory with mmap".to_owned());
        }
    }
    out
}

/// Make the `FILE` at `fp` read afresh from its descriptor: its buffer empty, its
/// end-of-file and error marks cleared, its cached offset forgotten. The next read
/// fills the buffer from wherever the descriptor now stands.
///
/// # Safety
/// `fp` must be a live `FILE` that no other thread uses.
pub unsafe fn drop_read_ahead(fp: usize) {
    // SAFETY: writing fields of a live FILE, as glibc's own seek would.
    unsafe {
        let base = *((fp + OFF_BUF_BASE) as *const usize);
        for off in [OFF_READ_PTR, OFF_READ_END, OFF_READ_BASE] {
            *((fp + off) as *mut usize) = base;
        }
        *(fp as *mut i32) &= !(IO_EOF_SEEN | IO_ERR_SEEN);
        *((fp + OFF_OLD_OFFSET) as *mut i64) = -1;
        *((fp + OFF_OFFSET) as *mut i64) = -1;
    }
}

/// The C library's `stdin`.
pub fn c_stdin() -> usize {
    // SAFETY: reading the C library's stream pointer.
    unsafe { stdin as usize }
}

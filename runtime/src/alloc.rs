//! Allocation wrappers: the pass renames calls to `malloc` & co. to these, so every
//! heap extent the program makes is in the extent map.
//!
//! C++ `operator new`/`delete` are defined here outright instead (replacing them is
//! what the language provides for): that is the only way to see the allocations
//! libstdc++ makes inside its own shared library, e.g. for `std::string` buffers.
//!
//! During in-process fuzzing the program's allocations come from the unit's own heap
//! instead of glibc's ([`crate::unit_heap`]), emptied after every execution.

use crate::{lock, tracking, unit_heap};
use libc::{c_char, c_int, c_void, size_t};
use std::collections::VecDeque;
use std::sync::Mutex;
use trestle_abi::ExtentKind;

/// Freed blocks held back from the allocator while recording or replaying, oldest
/// first, as AddressSanitizer's quarantine holds them. A program that keeps stale
/// pointers (bc's number cache keeps each freed number's digit pointer) would
/// otherwise see them alias whatever `malloc` hands out next at that address, in the
/// recording at one place and in the replay at another; held back, a stale pointer
/// points into an [`ExtentKind::Freed`] extent in both.
struct Quarantine {
    blocks: VecDeque<(usize, usize)>,
    bytes: usize,
}

static QUARANTINE: Mutex<Quarantine> = Mutex::new(Quarantine {
    blocks: VecDeque::new(),
    bytes: 0,
});

/// Bytes held back at most; past that the oldest blocks are really freed.
const QUARANTINE_BYTES: usize = 256 << 20;
/// Blocks held back at most.
const QUARANTINE_BLOCKS: usize = 1 << 20;

/// `realloc` of a block the runtime knows: a new block of `size` bytes holding the
/// first `old_len` (at most `size`) bytes of `old`, which is then freed as tracked.
fn move_block(old: *mut c_void, old_len: usize, size: size_t) -> *mut c_void {
    // SAFETY: forwarding; copying at most the old block's length.
    unsafe {
        let p = __trestle_malloc(size);
        if !p.is_null() {
            std::ptr::copy_nonoverlapping(old as *const u8, p as *mut u8, old_len.min(size));
            free_tracked(old);
        }
        p
    }
}

/// Free `p` in record or replay mode: a tracked heap block becomes a freed extent and
/// is held back; anything else is freed at once. Arena blocks (restored extents) are
/// never the allocator's, so they are only marked.
fn free_tracked(p: *mut c_void) {
    let mut g = lock();
    let freed = g.as_mut().and_then(|rt| rt.extents.free_heap(p as usize));
    let Some(len) = freed else {
        drop(g);
        if !crate::arena::in_arena(p as usize) {
            // SAFETY: forwarding a block the runtime does not hold back.
            unsafe { libc::free(p) };
        }
        return;
    };
    if crate::arena::in_arena(p as usize) {
        return;
    }
    let mut q = QUARANTINE.lock().unwrap_or_else(|e| e.into_inner());
    q.blocks.push_back((p as usize, len));
    q.bytes += len;
    while q.bytes > QUARANTINE_BYTES || q.blocks.len() > QUARANTINE_BLOCKS {
        let Some((old, old_len)) = q.blocks.pop_front() else {
            break;
        };
        q.bytes -= old_len;
        if let Some(rt) = g.as_mut() {
            rt.extents.forget_freed(old);
        }
        // SAFETY: a block the program freed, held back until now.
        unsafe { libc::free(old as *mut c_void) };
    }
}

/// Register a fresh allocation. Its bytes are zeroed first: uninitialised memory
/// differs between the recording and the replay (recycled chunks, fresh pages), and
/// a function that copies some of it (padding, a string's unused buffer) would look
/// unfaithful for no fault of its own. Only in record and replay mode.
fn track(p: *mut c_void, len: usize) {
    if p.is_null() || !tracking() {
        return;
    }
    // SAFETY: `p` is a fresh allocation of at least `len` bytes.
    unsafe { std::ptr::write_bytes(p as *mut u8, 0, len) };
    track_existing(p, len);
}

/// Register an allocation whose bytes are already meaningful.
fn track_existing(p: *mut c_void, len: usize) {
    if p.is_null() || !tracking() {
        return;
    }
    if let Some(rt) = lock().as_mut() {
        rt.extents.insert_heap(p as usize, len, ExtentKind::Heap);
    }
}

fn untrack(p: *mut c_void) {
    if p.is_null() || !tracking() {
        return;
    }
    if let Some(rt) = lock().as_mut() {
        rt.extents.remove_heap(p as usize);
    }
}

/// `malloc`, tracked.
///
/// # Safety
/// As `malloc`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_malloc(size: size_t) -> *mut c_void {
    if unit_heap::active() {
        return unit_heap::alloc(size, 16);
    }
    // SAFETY: forwarding.
    let p = unsafe { libc::malloc(size) };
    track(p, size);
    p
}

/// `calloc`, tracked.
///
/// # Safety
/// As `calloc`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_calloc(n: size_t, size: size_t) -> *mut c_void {
    if unit_heap::active() {
        let Some(len) = n.checked_mul(size) else {
            return std::ptr::null_mut();
        };
        let p = unit_heap::alloc(len, 16);
        if !p.is_null() {
            // SAFETY: a fresh block of `len` bytes (reused memory: zero it).
            unsafe { std::ptr::write_bytes(p as *mut u8, 0, len) };
        }
        return p;
    }
    // SAFETY: forwarding.
    let p = unsafe { libc::calloc(n, size) };
    track(p, n.saturating_mul(size));
    p
}

/// `realloc`, tracked.
///
/// # Safety
/// As `realloc`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_realloc(old: *mut c_void, size: size_t) -> *mut c_void {
    if unit_heap::active() && (old.is_null() || unit_heap::contains(old)) {
        if !old.is_null() && size == 0 {
            return std::ptr::null_mut(); // freed, as glibc's realloc(p, 0) does
        }
        let p = unit_heap::alloc(size, 16);
        if !p.is_null() && !old.is_null() {
            // SAFETY: both blocks are at least this long.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    old as *const u8,
                    p as *mut u8,
                    unit_heap::size_of(old).min(size),
                )
            };
        }
        return p;
    }
    if crate::arena::in_arena(old as usize) {
        // A restored extent: move it to the heap, leave the arena copy alone.
        let old_len = lock()
            .as_ref()
            .and_then(|rt| rt.extents.find(old as usize, 0))
            .map_or(0, |f| f.len);
        return move_block(old, old_len, size);
    }
    let old_len = if old.is_null() || !tracking() {
        0
    } else {
        lock()
            .as_ref()
            .and_then(|rt| rt.extents.find(old as usize, 0))
            .filter(|f| f.start == old as usize)
            .map_or(0, |f| f.len)
    };
    if old_len > 0 {
        // A tracked block always moves, so that its old address goes to the
        // quarantine like any freed block (see `Quarantine`).
        if size == 0 {
            free_tracked(old);
            return std::ptr::null_mut();
        }
        return move_block(old, old_len, size);
    }
    // SAFETY: forwarding.
    let p = unsafe { libc::realloc(old, size) };
    if !p.is_null() || size == 0 {
        untrack(old);
    }
    if !p.is_null() && tracking() {
        // Zero the grown tail only; the head holds the old contents.
        if size > old_len {
            // SAFETY: `p` has `size` bytes.
            unsafe { std::ptr::write_bytes((p as *mut u8).add(old_len), 0, size - old_len) };
        }
        track_existing(p, size);
    }
    p
}

/// `reallocarray`, tracked.
///
/// # Safety
/// As `reallocarray`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_reallocarray(
    old: *mut c_void,
    n: size_t,
    size: size_t,
) -> *mut c_void {
    let Some(total) = n.checked_mul(size) else {
        // SAFETY: setting errno.
        unsafe { *libc::__errno_location() = libc::ENOMEM };
        return std::ptr::null_mut();
    };
    // SAFETY: forwarding.
    unsafe { __trestle_realloc(old, total) }
}

/// `free`, tracked.
///
/// # Safety
/// As `free`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_free(p: *mut c_void) {
    if unit_heap::contains(p) {
        return; // given back when the execution ends
    }
    if !p.is_null() && tracking() {
        free_tracked(p);
        return;
    }
    untrack(p);
    if crate::arena::in_arena(p as usize) {
        return; // restored extents are not the allocator's
    }
    // SAFETY: forwarding.
    unsafe { libc::free(p) }
}

/// Sized `operator delete`, tracked.
///
/// # Safety
/// As `free`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_free_sized(p: *mut c_void, _size: size_t) {
    // SAFETY: forwarding.
    unsafe { __trestle_free(p) }
}

/// `strdup`, tracked.
///
/// # Safety
/// As `strdup`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_strdup(s: *const c_char) -> *mut c_char {
    if unit_heap::active() {
        // SAFETY: `s` is NUL-terminated, per strdup's contract.
        return unsafe { unit_heap_copy(s, libc::strlen(s)) };
    }
    // SAFETY: forwarding; the result is NUL-terminated.
    let p = unsafe { libc::strdup(s) };
    if !p.is_null() {
        // SAFETY: `p` is a fresh NUL-terminated string.
        track_existing(p.cast(), unsafe { libc::strlen(p) } + 1);
    }
    p
}

/// `strndup`, tracked.
///
/// # Safety
/// As `strndup`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_strndup(s: *const c_char, n: size_t) -> *mut c_char {
    if unit_heap::active() {
        // SAFETY: `s` holds a NUL within `n` bytes or at least `n` bytes.
        return unsafe { unit_heap_copy(s, libc::strnlen(s, n)) };
    }
    // SAFETY: forwarding; the result is NUL-terminated.
    let p = unsafe { libc::strndup(s, n) };
    if !p.is_null() {
        // SAFETY: `p` is a fresh NUL-terminated string.
        track_existing(p.cast(), unsafe { libc::strlen(p) } + 1);
    }
    p
}

/// `aligned_alloc`, tracked.
///
/// # Safety
/// As `aligned_alloc`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_aligned_alloc(align: size_t, size: size_t) -> *mut c_void {
    if unit_heap::active() {
        return if align.is_power_of_two() {
            unit_heap::alloc(size, align)
        } else {
            std::ptr::null_mut()
        };
    }
    // SAFETY: forwarding.
    let p = unsafe { libc::aligned_alloc(align, size) };
    track(p, size);
    p
}

/// `memalign`, tracked.
///
/// # Safety
/// As `memalign`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_memalign(align: size_t, size: size_t) -> *mut c_void {
    if unit_heap::active() {
        return if align.is_power_of_two() {
            unit_heap::alloc(size, align)
        } else {
            std::ptr::null_mut()
        };
    }
    // SAFETY: forwarding.
    let p = unsafe { libc::memalign(align, size) };
    track(p, size);
    p
}

/// `posix_memalign`, tracked.
///
/// # Safety
/// As `posix_memalign`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_posix_memalign(
    out: *mut *mut c_void,
    align: size_t,
    size: size_t,
) -> c_int {
    if unit_heap::active() {
        if !align.is_power_of_two() || align < std::mem::size_of::<usize>() {
            return libc::EINVAL;
        }
        let p = unit_heap::alloc(size, align);
        if p.is_null() {
            return libc::ENOMEM;
        }
        // SAFETY: `out` is writable, per posix_memalign's contract.
        unsafe { *out = p };
        return 0;
    }
    // SAFETY: forwarding.
    let r = unsafe { libc::posix_memalign(out, align, size) };
    if r == 0 {
        // SAFETY: on success `*out` holds the allocation.
        track(unsafe { *out }, size);
    }
    r
}

/// A NUL-terminated copy of `len` bytes at `s`, on the unit's heap.
///
/// # Safety
/// `s` must have `len` readable bytes.
unsafe fn unit_heap_copy(s: *const c_char, len: usize) -> *mut c_char {
    let p = unit_heap::alloc(len + 1, 16) as *mut c_char;
    if !p.is_null() {
        // SAFETY: `p` has room for the bytes and the NUL.
        unsafe {
            std::ptr::copy_nonoverlapping(s, p, len);
            *p.add(len) = 0;
        }
    }
    p
}

fn new_or_abort(size: size_t) -> *mut c_void {
    // SAFETY: forwarding; operator new must not return null.
    let p = unsafe { __trestle_malloc(size.max(1)) };
    if p.is_null() {
        eprintln!("trestle runtime: operator new({size}) failed: out of memory");
        std::process::abort();
    }
    p
}

/// `operator new(size_t)`.
#[no_mangle]
pub extern "C" fn _Znwm(size: size_t) -> *mut c_void {
    new_or_abort(size)
}

/// `operator new[](size_t)`.
#[no_mangle]
pub extern "C" fn _Znam(size: size_t) -> *mut c_void {
    new_or_abort(size)
}

/// `operator delete(void*)`.
///
/// # Safety
/// As `operator delete`.
#[no_mangle]
pub unsafe extern "C" fn _ZdlPv(p: *mut c_void) {
    // SAFETY: forwarding.
    unsafe { __trestle_free(p) }
}

/// `operator delete[](void*)`.
///
/// # Safety
/// As `operator delete[]`.
#[no_mangle]
pub unsafe extern "C" fn _ZdaPv(p: *mut c_void) {
    // SAFETY: forwarding.
    unsafe { __trestle_free(p) }
}

/// `operator delete(void*, size_t)`.
///
/// # Safety
/// As `operator delete`.
#[no_mangle]
pub unsafe extern "C" fn _ZdlPvm(p: *mut c_void, _size: size_t) {
    // SAFETY: forwarding.
    unsafe { __trestle_free(p) }
}

/// `operator delete[](void*, size_t)`.
///
/// # Safety
/// As `operator delete[]`.
#[no_mangle]
pub unsafe extern "C" fn _ZdaPvm(p: *mut c_void, _size: size_t) {
    // SAFETY: forwarding.
    unsafe { __trestle_free(p) }
}

extern "C" {
    fn getdelim(
        lineptr: *mut *mut c_char,
        n: *mut size_t,
        delim: c_int,
        stream: *mut libc::FILE,
    ) -> libc::ssize_t;
}

/// Register the buffer `getline`/`getdelim` left in `*lineptr` (the C library may
/// have allocated or moved it with its own `realloc`).
fn track_line_buffer(before: *mut c_void, lineptr: *mut *mut c_char, n: *mut size_t) {
    if !tracking() || lineptr.is_null() || n.is_null() {
        return;
    }
    // SAFETY: getline's contract: `*lineptr` is a malloc'd buffer of `*n` bytes.
    let (after, size) = unsafe { (*lineptr as *mut c_void, *n) };
    if after != before {
        untrack(before);
    }
    track_existing(after, size);
}

/// `getdelim`, with its buffer tracked.
///
/// # Safety
/// As `getdelim`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_getdelim(
    lineptr: *mut *mut c_char,
    n: *mut size_t,
    delim: c_int,
    stream: *mut libc::FILE,
) -> libc::ssize_t {
    // SAFETY: forwarding; `lineptr` is valid per getdelim's contract.
    unsafe {
        if !lineptr.is_null() && !n.is_null() && unit_heap::contains(*lineptr as *const c_void) {
            // The C library grows the buffer with its own realloc: hand it a copy
            // from its own heap instead of a block of the unit's.
            let copy = libc::malloc((*n).max(1)) as *mut c_char;
            if copy.is_null() {
                *libc::__errno_location() = libc::ENOMEM;
                return -1;
            }
            std::ptr::copy_nonoverlapping(*lineptr, copy, *n);
            *lineptr = copy;
        }
        let before = if lineptr.is_null() {
            std::ptr::null_mut()
        } else {
            *lineptr as *mut c_void
        };
        let r = getdelim(lineptr, n, delim, stream);
        track_line_buffer(before, lineptr, n);
        r
    }
}

extern "C" {
    // The va_list is passed as the pointer it decays to on x86-64.
    fn vasprintf(out: *mut *mut c_char, format: *const c_char, args: *mut c_void) -> c_int;
    fn __vasprintf_chk(
        out: *mut *mut c_char,
        flag: c_int,
        format: *const c_char,
        args: *mut c_void,
    ) -> c_int;
}

/// `vasprintf`, with the string the C library allocated tracked (`asprintf` comes
/// here from `asprintf.c`): a function returning it (m4's `xvasprintf`) returns a
/// pointer into its context, not the address of memory a replay does not have.
///
/// # Safety
/// As `vasprintf`; `args` is the `va_list`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_vasprintf(
    out: *mut *mut c_char,
    format: *const c_char,
    args: *mut c_void,
) -> c_int {
    // SAFETY: forwarding.
    track_printed(out, unsafe { vasprintf(out, format, args) })
}

/// `__vasprintf_chk` (`vasprintf` under `_FORTIFY_SOURCE`), as `vasprintf`.
///
/// # Safety
/// As `__vasprintf_chk`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_vasprintf_chk(
    out: *mut *mut c_char,
    flag: c_int,
    format: *const c_char,
    args: *mut c_void,
) -> c_int {
    // SAFETY: forwarding.
    track_printed(out, unsafe { __vasprintf_chk(out, flag, format, args) })
}

/// Register the string of `n` bytes `vasprintf` allocated at `*out`; returns `n`.
fn track_printed(out: *mut *mut c_char, n: c_int) -> c_int {
    if n >= 0 && tracking() {
        // SAFETY: on success `*out` is a fresh string of `n` bytes and its NUL.
        track_existing(unsafe { *out }.cast(), n as usize + 1);
    }
    n
}

/// `getline`, with its buffer tracked.
///
/// # Safety
/// As `getline`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_getline(
    lineptr: *mut *mut c_char,
    n: *mut size_t,
    stream: *mut libc::FILE,
) -> libc::ssize_t {
    // SAFETY: forwarding.
    unsafe { __trestle_getdelim(lineptr, n, b'\n' as c_int, stream) }
}

//! Memory the program maps itself: `mmap` and its kin, renamed by the pass.
//!
//! A readable mapping is a heap extent like a `malloc` block, so a pointer into it is
//! followed and its bytes go into the context (m4's gnulib reads `/proc/self/maps`
//! into an anonymous mapping; xmlwf maps its input file). A replay restores those
//! bytes in its own memory, where the program's `munmap` of them is a no-op. The
//! walk reads every extent it meets, so a mapping leaves the map before it stops
//! being readable: unmapped, moved by `mremap` or protected against reading.
//! A file mapping counts up to the file's end only: past it, pages fault.

use crate::{lock, tracking, unit_heap};
use libc::{c_int, c_void, size_t};
use std::collections::BTreeMap;

/// The program's mappings the extent map holds, by start: their lengths.
#[derive(Default)]
pub struct Mappings(BTreeMap<usize, usize>);

impl Mappings {
    /// The starts of the mappings overlapping `[start, start + len)`.
    fn overlapping(&self, start: usize, len: usize) -> Vec<usize> {
        let end = start.saturating_add(len.max(1));
        self.0
            .range(..end)
            .filter(|(&s, &l)| s + l > start)
            .map(|(&s, _)| s)
            .collect()
    }
}

/// The bytes of a fresh mapping of `len` bytes that can be read: all of an anonymous
/// one, up to the end of a regular file for a file mapping; none when it is not
/// readable.
fn readable_len(len: size_t, prot: c_int, flags: c_int, fd: c_int, off: libc::off_t) -> usize {
    if prot & libc::PROT_READ == 0 {
        return 0;
    }
    if flags & libc::MAP_ANONYMOUS != 0 || fd < 0 {
        return len;
    }
    // SAFETY: fstat fills a plain struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 || st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return 0; // a device or some other mapping: its pages may not all be there
    }
    (st.st_size - off).clamp(0, len as i64) as usize
}

/// Forget the mappings overlapping `[start, start + len)`: their extents become freed
/// memory, pointed at but never read.
fn forget(start: usize, len: usize) {
    if let Some(rt) = lock().as_mut() {
        for s in rt.mappings.overlapping(start, len) {
            rt.mappings.0.remove(&s);
            rt.extents.free_heap(s);
        }
    }
}

fn remember(p: *mut c_void, len: usize) {
    if p == libc::MAP_FAILED || p.is_null() || len == 0 {
        return;
    }
    if let Some(rt) = lock().as_mut() {
        rt.mappings.0.insert(p as usize, len);
        rt.extents
            .insert_heap(p as usize, len, trestle_abi::ExtentKind::Heap);
    }
}

/// Memory a replay or a unit harness restored (or allocated for the unit): the
/// program's unmapping of it must not reach the kernel.
fn restored(p: *mut c_void) -> bool {
    unit_heap::contains(p) || crate::arena::in_arena(p as usize)
}

/// `mmap`, tracked: a readable mapping is a heap extent, and a mapped descriptor's
/// content is in memory, so its stream is never a parameter.
///
/// # Safety
/// As `mmap`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: libc::off_t,
) -> *mut c_void {
    if !tracking() {
        // SAFETY: forwarding.
        return unsafe { libc::mmap(addr, len, prot, flags, fd, off) };
    }
    if fd >= 0 && flags & libc::MAP_ANONYMOUS == 0 {
        if let Some(rt) = lock().as_mut() {
            rt.mapped_fds.insert(fd);
        }
    }
    if flags & libc::MAP_FIXED != 0 {
        forget(addr as usize, len); // replaced by the new mapping
    }
    // SAFETY: forwarding.
    let p = unsafe { libc::mmap(addr, len, prot, flags, fd, off) };
    remember(p, readable_len(len, prot, flags, fd, off));
    p
}

/// `munmap`, tracked; a no-op on memory a replay restored.
///
/// # Safety
/// As `munmap`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_munmap(addr: *mut c_void, len: size_t) -> c_int {
    if restored(addr) {
        // Gone for the program as it was when recorded: freed memory, pointed at.
        if tracking() {
            if let Some(rt) = lock().as_mut() {
                rt.extents.free_heap(addr as usize);
            }
        }
        return 0;
    }
    if tracking() {
        forget(addr as usize, len);
    }
    // SAFETY: forwarding.
    unsafe { libc::munmap(addr, len) }
}

/// `mremap`, tracked (its optional fifth argument, the new address, is passed in a
/// register whether given or not). A restored block cannot move: the call fails
/// as it would for memory that was never mapped.
///
/// # Safety
/// As `mremap`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    if restored(old) {
        // SAFETY: setting errno.
        unsafe { *libc::__errno_location() = libc::EFAULT };
        return libc::MAP_FAILED;
    }
    if !tracking() {
        // SAFETY: forwarding.
        return unsafe { libc::mremap(old, old_len, new_len, flags, new_addr) };
    }
    // Whether it stays readable, and how far for a file, is not known here: what
    // was readable before is, up to the new length.
    let was = lock()
        .as_ref()
        .and_then(|rt| rt.mappings.0.get(&(old as usize)).copied());
    forget(old as usize, old_len);
    if flags & libc::MREMAP_FIXED != 0 {
        forget(new_addr as usize, new_len);
    }
    // SAFETY: forwarding.
    let p = unsafe { libc::mremap(old, old_len, new_len, flags, new_addr) };
    if let Some(was) = was {
        remember(
            p,
            if was < old_len {
                was.min(new_len)
            } else {
                new_len
            },
        );
    }
    p
}

/// `mprotect`, tracked: a mapping made unreadable leaves the extent map (and a
/// restored block keeps its protection: the replay's memory is not the program's).
///
/// # Safety
/// As `mprotect`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_mprotect(addr: *mut c_void, len: size_t, prot: c_int) -> c_int {
    if restored(addr) {
        return 0;
    }
    if tracking() && prot & libc::PROT_READ == 0 {
        forget(addr as usize, len);
    }
    // SAFETY: forwarding.
    unsafe { libc::mprotect(addr, len, prot) }
}

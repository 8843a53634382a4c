//! The unit's own heap, for in-process fuzzing.
//!
//! In-process, the unit shares its process with the fuzzer. Were its allocations
//! glibc's, a heap overflow in the unit (the kind of bug fuzzing is for) would
//! corrupt the allocator the fuzzer itself uses, and its crash handler would die in
//! `malloc`; and what the unit allocates and never frees would pile up over millions
//! of executions. So while in-process fuzzing is on ([`enable`]), the allocation
//! wrappers (`alloc.rs`) take the unit's memory from a region of its own, far from
//! glibc's heap: a bump allocator that [`rewind`] empties after every execution.
//! `free` of such a block does nothing; the next execution reuses the memory.
//!
//! Each block has a 16-byte header (its size, for `realloc`, and a marker) between it
//! and the previous one, as malloc's chunk headers would: an overflow of one block
//! runs into the next block's header and data, never into the fuzzer's memory.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Address space reserved (not committed: pages come as the unit touches them).
const RESERVE: usize = 4 << 30;
/// Where to put it: clear of glibc's heap, the libraries, the stack and the replay
/// arena (0x6000_0000_0000).
const HINT: usize = 0x5000_0000_0000;
const HEADER: usize = 16;
const MARKER: u64 = u64::from_le_bytes(*b"trestleH");

static BASE: AtomicUsize = AtomicUsize::new(0);
static NEXT: AtomicUsize = AtomicUsize::new(0);
static END: AtomicUsize = AtomicUsize::new(0);

/// Reserve the heap and route the unit's allocations to it from now on.
pub fn enable() -> Result<(), String> {
    if active() {
        return Ok(());
    }
    // SAFETY: an anonymous private mapping where nothing else is (the hint is only a
    // hint without MAP_FIXED; any address the kernel picks will do).
    let p = unsafe {
        libc::mmap(
            HINT as *mut libc::c_void,
            RESERVE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(format!(
            "cannot reserve the unit's heap: {}",
            std::io::Error::last_os_error()
        ));
    }
    let base = p as usize;
    BASE.store(base, Ordering::Relaxed);
    NEXT.store(base, Ordering::Relaxed);
    END.store(base + RESERVE, Ordering::Release);
    Ok(())
}

/// True once [`enable`] has run: the allocation wrappers use this heap.
#[inline]
pub fn active() -> bool {
    END.load(Ordering::Relaxed) != 0
}

/// True if `p` points into this heap.
#[inline]
pub fn contains(p: *const libc::c_void) -> bool {
    let p = p as usize;
    p >= BASE.load(Ordering::Relaxed) && p < END.load(Ordering::Relaxed)
}

/// `size` bytes aligned to `align` (a power of two), or null when the heap is full
/// (the unit sees an allocation failure). The bytes are not zeroed.
pub fn alloc(size: usize, align: usize) -> *mut libc::c_void {
    let align = align.max(16);
    let end = END.load(Ordering::Relaxed);
    let mut cur = NEXT.load(Ordering::Relaxed);
    loop {
        let start = (cur + HEADER + align - 1) & !(align - 1);
        let Some(next) = start.checked_add(size).map(|n| (n + 15) & !15) else {
            return std::ptr::null_mut();
        };
        if next > end {
            return std::ptr::null_mut();
        }
        match NEXT.compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => {
                // SAFETY: the 16 bytes before `start` lie in the space just claimed.
                unsafe {
                    let h = (start - HEADER) as *mut u64;
                    h.write(size as u64);
                    h.add(1).write(MARKER);
                }
                return start as *mut libc::c_void;
            }
            Err(now) => cur = now,
        }
    }
}

/// The size a block of this heap was allocated with (0 for a pointer that is not
/// the start of one: a `realloc` then copies nothing).
pub fn size_of(p: *const libc::c_void) -> usize {
    let h = (p as usize).wrapping_sub(HEADER);
    if !contains(h as *const libc::c_void) {
        return 0;
    }
    // SAFETY: `h` lies inside the reserved heap, which is readable.
    unsafe {
        let h = h as *const u64;
        if h.add(1).read() == MARKER {
            // An overflow may have damaged the size: never past what was handed out.
            (h.read() as usize).min(NEXT.load(Ordering::Relaxed).saturating_sub(p as usize))
        } else {
            0
        }
    }
}

/// Empty the heap: everything the last execution allocated is free again.
pub fn rewind() {
    NEXT.store(BASE.load(Ordering::Relaxed), Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_aligned_apart_and_given_back_on_rewind() {
        enable().unwrap();
        assert!(active());
        let a = alloc(24, 16);
        let b = alloc(100, 64);
        assert!(contains(a) && contains(b));
        assert_eq!(a as usize % 16, 0);
        assert_eq!(b as usize % 64, 0);
        // A header between blocks, as malloc's chunk headers keep them apart.
        assert!(b as usize >= a as usize + 24 + HEADER);
        assert_eq!(size_of(a), 24);
        assert_eq!(size_of(b), 100);
        assert_eq!(
            size_of(unsafe { (a as *const u8).add(8) } as *const libc::c_void),
            0
        );
        assert!(!contains(std::ptr::null()));
        assert!(
            alloc(usize::MAX - 64, 16).is_null(),
            "a request past the reserve fails, as malloc would"
        );
        rewind();
        assert_eq!(alloc(24, 16), a, "the next execution reuses the memory");
    }
}

//! Blocks the C library allocated for itself.
//!
//! The pass renames the program's own calls to `malloc` & co., so every block the
//! program allocates is a heap extent. The C library allocates too, inside its own
//! functions, and hands the program pointers to what it made: `regcomp` and
//! `re_compile_pattern` keep their automaton in blocks the pattern buffer points at.
//! A context holding such a pointer as plain bits replays it as an address of the
//! recording's heap; GNU diff's `-I` units ran `re_search` over whatever lay there in
//! the replay and never returned.
//!
//! Such a block is recognised where a word points at its start: glibc's chunk header
//! (the 8 bytes before) says how long it is, and the next chunk's header says it is
//! in use. The main heap only (from the `[heap]` mapping to the current break): a
//! chunk of another arena or of its own mapping is left alone, as are pointers into
//! a block's middle that no pointer to its start came before (see
//! [`crate::walk::Walker`]).

use std::sync::atomic::{AtomicUsize, Ordering};

/// Where the main heap starts, once a `[heap]` mapping was seen (0: not yet).
static HEAP_START: AtomicUsize = AtomicUsize::new(0);
/// The break when `/proc/self/maps` last showed no heap: read again only once the
/// break has moved.
static NO_HEAP_AT: AtomicUsize = AtomicUsize::new(usize::MAX);

/// The C library's main heap, `[start, break)`, if the process has one yet.
pub(crate) fn brk_heap() -> Option<(usize, usize)> {
    // SAFETY: sbrk(0) only reads the current break.
    let top = unsafe { libc::sbrk(0) } as usize;
    let mut start = HEAP_START.load(Ordering::Relaxed);
    if start == 0 {
        if NO_HEAP_AT.load(Ordering::Relaxed) == top {
            return None;
        }
        match heap_mapping_start() {
            Some(s) => {
                HEAP_START.store(s, Ordering::Relaxed);
                start = s;
            }
            None => {
                NO_HEAP_AT.store(top, Ordering::Relaxed);
                return None;
            }
        }
    }
    (start < top).then_some((start, top))
}

fn heap_mapping_start() -> Option<usize> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let line = maps.lines().find(|l| l.ends_with("[heap]"))?;
    usize::from_str_radix(line.split('-').next()?, 16).ok()
}

/// Whether `addr` lies in the C library's main heap.
pub(crate) fn in_brk_heap(addr: usize) -> bool {
    brk_heap().is_some_and(|(lo, hi)| (lo..hi).contains(&addr))
}

/// glibc's chunk header flags.
const PREV_INUSE: usize = 1;
const IS_MMAPPED: usize = 2;
const NON_MAIN_ARENA: usize = 4;
/// The smallest chunk on x86-64.
const MIN_CHUNK: usize = 32;

/// If `addr` is the start of a block in use in the C library's main heap, the bytes
/// it can hold (the chunk's size less its header: what `malloc_usable_size` says).
pub fn block_at(addr: usize) -> Option<usize> {
    if !addr.is_multiple_of(16) {
        return None;
    }
    let (lo, hi) = brk_heap()?;
    if addr < lo + 16 || addr >= hi {
        return None;
    }
    // SAFETY: `addr - 8` and the next chunk's header are checked to lie inside the
    // heap mapping, `[lo, hi)`, which is readable memory of this process.
    let head = unsafe { std::ptr::read((addr - 8) as *const usize) };
    if head & (IS_MMAPPED | NON_MAIN_ARENA) != 0 {
        return None;
    }
    let size = head & !7;
    if size < MIN_CHUNK || !size.is_multiple_of(16) {
        return None;
    }
    let next = (addr - 16).checked_add(size)?;
    if next.checked_add(16)? > hi {
        return None;
    }
    // SAFETY: as above, `next + 8 .. next + 16` is inside the heap.
    let next_head = unsafe { std::ptr::read((next + 8) as *const usize) };
    let next_size = next_head & !7;
    if next_head & PREV_INUSE == 0 || next_size < 16 || next.checked_add(next_size)? > hi {
        return None;
    }
    Some(size - 8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_the_c_library_allocated_is_found_by_its_start_only() {
        // SAFETY: plain malloc and free of the C library's own heap.
        unsafe {
            let p = libc::malloc(100) as usize;
            if !in_brk_heap(p) {
                libc::free(p as *mut libc::c_void);
                return; // another arena (a test thread's): nothing to check here
            }
            let usable = libc::malloc_usable_size(p as *mut libc::c_void);
            assert_eq!(block_at(p), Some(usable));
            assert!(usable >= 100);
            assert_eq!(block_at(p + 16), None);
            assert_eq!(block_at(p + 8), None);
            libc::free(p as *mut libc::c_void);
        }
    }

    #[test]
    fn no_heap_address_is_a_block() {
        let on_stack = 0u64;
        assert_eq!(block_at(&on_stack as *const u64 as usize), None);
        assert_eq!(block_at(0), None);
        assert_eq!(block_at(0x10), None);
    }
}

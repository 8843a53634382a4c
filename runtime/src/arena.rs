//! The replay arena: where restored extents are placed.

use std::sync::Mutex;

/// Restored extents live in an arena of their own, mapped far from the heap, the
/// stack and the libraries. Recorded memory may hold stale addresses (uninitialised
/// words, dangling pointers) that are restored verbatim; were the restored extents
/// placed by `malloc`, such a stale address could land inside one and read as a real
/// pointer, so the replay would see an edge the recording never had.
struct Arena {
    next: usize,
    end: usize,
}

static ARENA: Mutex<Arena> = Mutex::new(Arena { next: 0, end: 0 });
const ARENA_HINT: usize = 0x6000_0000_0000;
const ARENA_CHUNK: usize = 256 << 20;

/// True if `p` was handed out by the replay arena (the program must not free it).
pub fn in_arena(p: usize) -> bool {
    (ARENA_HINT..ARENA_HINT + (64 << 30)).contains(&p) && {
        let a = ARENA.lock().unwrap_or_else(|e| e.into_inner());
        a.end != 0 && p < a.end
    }
}

/// Bytes left free before each restored block.
pub(crate) const BLOCK_GAP: usize = 64;

pub(crate) fn arena_alloc(len: usize, align: usize) -> Result<usize, String> {
    let mut a = ARENA.lock().unwrap_or_else(|e| e.into_inner());
    let start = (a.next + align - 1) & !(align - 1);
    if a.end == 0 || start + len + 16 > a.end {
        let base = if a.end == 0 { ARENA_HINT } else { a.end };
        let size = ARENA_CHUNK.max((len + align).next_multiple_of(4096));
        // SAFETY: an anonymous private mapping at an address nothing else uses
        // (MAP_FIXED_NOREPLACE fails rather than clobber a mapping).
        let p = unsafe {
            libc::mmap(
                base as *mut libc::c_void,
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE
                    | libc::MAP_ANONYMOUS
                    | libc::MAP_NORESERVE
                    | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED || p as usize != base {
            return Err(format!("cannot map the replay arena at {base:#x}"));
        }
        if a.end == 0 {
            a.next = base;
        }
        a.end = base + size;
        drop(a);
        return arena_alloc(len, align);
    }
    // A gap after each extent keeps a one-past-the-end pointer (a vector's capacity
    // end, say) from reading as a pointer to the next extent, as malloc's chunk
    // headers kept it apart in the recording.
    a.next = start + len + 16;
    Ok(start)
}

/// Where the next arena allocation will go: a mark for [`arena_rewind`].
pub(crate) fn arena_mark() -> usize {
    ARENA.lock().unwrap_or_else(|e| e.into_inner()).next
}

/// Hand out again the arena space allocated since `mark` (from [`arena_mark`]): the
/// caller no longer uses anything placed there. The arena's chunks are contiguous,
/// so the space stays mapped and is simply reused.
pub(crate) fn arena_rewind(mark: usize) {
    let mut a = ARENA.lock().unwrap_or_else(|e| e.into_inner());
    if a.end != 0 {
        // A mark taken before the arena existed is its start.
        a.next = if mark == 0 {
            ARENA_HINT
        } else {
            mark.min(a.next)
        };
    }
}

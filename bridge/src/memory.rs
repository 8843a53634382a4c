//! The campaign's own memory.

/// Return the heap memory freed so far to the system now, rather than when the
/// allocator's decay would (after a round, which freed its units and coverage sets).
/// Both heaps: jemalloc's, which the campaign's Rust code allocates from (see
/// main.rs), and glibc's, which the C library's own buffers come from.
pub fn give_back_free_memory() {
    // "arena.<MALLCTL_ARENAS_ALL>.purge": every arena's unused dirty pages.
    const PURGE_ALL: &[u8] = b"arena.4096.purge\0";
    // SAFETY: a mallctl that takes and returns nothing; purging only releases pages
    // that hold no live allocation. malloc_trim likewise releases only free memory.
    unsafe {
        tikv_jemalloc_sys::mallctl(
            PURGE_ALL.as_ptr().cast(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        );
        libc::malloc_trim(0);
    }
}

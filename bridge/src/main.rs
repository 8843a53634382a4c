//! `trestle`: carve unit tests out of system tests, replay them, fuzz them and lift
//! what they find back into system tests that the real program confirms. See the
//! README and docs/ for worked examples and ARCHITECTURE.md for the map of the code.

/// jemalloc, not glibc's malloc. A campaign runs for hours and frees as much as it
/// allocates (some 100 MB a second of short-lived buffers on GNU sed); glibc kept what
/// was freed in its heap, fragmented, and the trestle process of a 2-hour sed campaign
/// grew from 66 to 132 MB resident while glibc itself counted 42 MB in use (trimming
/// by hand between rounds slowed the growth but did not stop it). jemalloc returns
/// pages left free for ten seconds to the system on its own (`bench/RESULTS.md`,
/// the 2-hour campaigns).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    trestle_bridge::cli::main()
}

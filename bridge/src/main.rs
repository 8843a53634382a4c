//! `trestle`: carve unit tests out of system tests, replay them, fuzz them and lift
//! what they find back into system tests that the real program confirms. See the
//! README for worked examples and ARCHITECTURE.md for the map of the code.

fn main() -> std::process::ExitCode {
    // Buffers of 256 KiB and more get mappings of their own, given back when freed.
    // glibc otherwise raises this threshold to the largest buffer freed so far (up
    // to 32 MiB), and after a program's binary was read, later large buffers (a
    // coverage report, a unit, a trace) came from the heap and kept it resident
    // (a sed campaign's first sample of its resident memory: 54 MB, 31 MB with it).
    // SAFETY: a malloc tunable, set before any other thread runs.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024) };
    trestle_bridge::cli::main()
}

//! `trestle`: carve unit tests out of system tests, replay them, fuzz them and lift
//! what they find back into system tests that the real program confirms. See the
//! README for worked examples and ARCHITECTURE.md for the map of the code.

fn main() -> std::process::ExitCode {
    trestle_bridge::cli::main()
}

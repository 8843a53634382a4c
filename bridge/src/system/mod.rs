//! The bridge's side of system tests: system-level coverage of a coverage build
//! ([`coverage`]), `trestle exec` ([`exec`]), which runs tests through the one
//! executor for scripts and benchmarks, and `trestle sysfuzz` ([`sysfuzz`]), the system
//! fuzzer alone. Running the program is `trestle_exec`'s; the fuzzer is
//! `trestle_sysfuzz`.

pub mod coverage;
pub mod exec;
pub mod sysfuzz;

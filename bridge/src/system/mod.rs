//! System tests and everything that runs them: their format and working directories
//! ([`systest`]), the one way a test becomes a run of the program ([`launch`]), the
//! host side of the forkserver ([`forkserver`]), system-level coverage ([`coverage`]),
//! the system fuzzer ([`fuzz`]) and `trestle exec` ([`exec`]), which runs tests through
//! the sandbox's executor for scripts and benchmarks.

pub mod coverage;
pub mod exec;
pub mod forkserver;
pub mod fuzz;
pub mod launch;
pub mod lean;
pub mod systest;

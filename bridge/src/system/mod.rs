//! System tests and everything that runs them: their format and working directories
//! ([`systest`]), the one way a test becomes a run of the program ([`launch`]), the
//! host side of the forkserver ([`forkserver`]), system-level coverage ([`coverage`])
//! and the system fuzzer ([`fuzz`]).

pub mod coverage;
pub mod forkserver;
pub mod fuzz;
pub mod launch;
pub mod systest;

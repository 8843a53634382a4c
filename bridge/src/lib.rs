//! trestle's host side as a library: the stages of the bridge and the data between
//! them. The `trestle` binary is a thin command line over it ([`cli`]).
//!
//! The pipeline, one module per arrow (ARCHITECTURE.md has the picture):
//!
//! - [`record`]: system tests → traces (runs the instrumented program with recording on);
//! - [`carve`]: traces → units, deduplicated, with the mapping of context values to the
//!   system input that makes a unit parameterized;
//! - [`replay`]: units → fresh processes, checked against what the system run recorded;
//! - [`fuzz`]: a parameterized unit → unit findings (the LibAFL unit fuzzer);
//! - [`lift`]: unit findings → system tests, kept only where the real program crashes;
//! - [`validate`]: the sandbox every lifted test runs in, crash signatures, reduction;
//! - [`system`]: system tests themselves, the one executor that runs them (forkserver),
//!   system-level coverage and the system fuzzer;
//! - [`campaign`]: all of the above as one time-boxed campaign (`trestle run`), on one
//!   machine or, with [`cluster`], across several;
//! - [`capture`]: a project's own test suite → seed system tests;
//! - [`triage`]: crashing inputs from any fuzzer → confirmed bugs, grouped and reduced;
//! - [`report`] and [`export`]: what a campaign found (also as SARIF, [`sarif`]), and
//!   units as standalone C tests.
//!
//! Shared data: [`binary`] (what an instrumented program says about itself) and
//! [`files`] (the typed files of a campaign directory); [`tools`] finds the programs
//! the bridge runs besides the subject.
//!
//! It must not depend on LLVM or link the runtime; it talks to instrumented programs
//! only through files, pipes and the environment, in the formats of `trestle-abi`.

pub mod campaign;
pub mod capture;
pub mod carve;
pub mod cli;
pub mod cluster;
pub mod export;
pub mod fuzz;
pub mod lift;
pub mod memory;
pub mod record;
pub mod replay;
pub mod report;
pub mod roadblocks;
pub mod sarif;
pub mod stdout;
pub mod system;
pub mod triage;
pub mod validate;

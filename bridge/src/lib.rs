//! The trestle command line, as a library: each subcommand is a module with a clap
//! `Args` struct and a `run` function; the binary only parses and dispatches.
//!
//! Owns everything that happens on the host: running system tests, reading traces,
//! making units, replaying them. It must not depend on LLVM or link the runtime; it
//! talks to instrumented programs only through files and the environment, in the
//! formats of `trestle-abi`.

pub mod binary;
pub mod carve;
pub mod coverage;
pub mod files;
pub mod export;
pub mod forkserver;
pub mod fuzz;
pub mod launch;
pub mod lift;
pub mod mapping;
pub mod record;
pub mod reduce;
pub mod replay;
pub mod report;
pub mod run;
pub mod sandbox;
pub mod show;
pub mod signature;
pub mod sysfuzz;
pub mod systest;
pub mod units;
pub mod validate;

//! Running a program on system tests, the one way every part of trestle does it.
//!
//! - [`systest`]: the system-test format, loading tests and their working directories;
//! - [`spawn`]: the one start-and-wait-with-a-deadline, used by every bounded run;
//! - [`launch`]: how a test becomes a run of the program (its layout on disk, and
//!   [`launch::run_to_end`], a run with its output kept);
//! - [`forkserver`]: the host side of the forkserver a `trestle-cc` build carries;
//! - [`sandbox`]: runs of untrusted tests under bubblewrap and rlimits, forked from a
//!   served program where it can be;
//! - [`signature`]: crash signatures, symbolized stacks and the frames that name a bug;
//! - [`origin`]: the global a faulting pointer was loaded from;
//! - [`binary`]: what an instrumented program says about itself;
//! - [`files`]: typed JSON files, written atomically;
//! - [`tools`]: finding the programs run besides the subject.
//!
//! It depends on nothing of trestle but `trestle-abi`; the system fuzzer, the unit
//! fuzzer and the bridge all run the program through it.

pub mod binary;
pub mod files;
pub mod forkserver;
pub mod launch;
pub mod origin;
pub mod sandbox;
pub mod signature;
pub mod spawn;
pub mod systest;
pub mod tools;

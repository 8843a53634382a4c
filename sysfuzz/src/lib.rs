//! System-level fuzzing: LibAFL over structured system tests (arguments, stdin, file
//! contents), running the instrumented program once per execution in a fresh working
//! directory.
//!
//! This is the first step of a campaign and, alone, its `--system-only` baseline. The
//! program needs no harness: in the runtime's passive mode it attaches its
//! SanitizerCoverage counters to the shared map named by `__AFL_SHM_ID`, so a plain
//! spawned run reports its edges ([`SysExecutor`] spawns it, a hit-count map observer
//! reads them). Inputs are [`SysInput`]s — the JSON system test, held as bytes — and
//! [`SysMutator`]'s structured mutations (byte level, the Radamsa-like line and number
//! mutations the bridge paper used, dictionary tokens, argument lists, crossover
//! between tests) stack a few per execution.
//!
//! Output, written as soon as found: `queue/<hash>.json` for every input that reached
//! new coverage (seeds included), `crashes/<hash>.json` and `timeouts/<hash>.json` for
//! inputs that crash or hang with coverage no earlier finding had — all standard system
//! tests. A fuzzer started on an existing output directory reloads its queue.
//!
//! It owns the system-level fuzzing loop only: no recording, carving or lifting, and no
//! progress output (the caller reports; errors are returned).
//!
//! Where things are: the input (`input`), running it (`executor`), keeping crashes
//! and timeouts (`findings`), changing inputs (`mutators`, with the `dictionary` they
//! insert from, and `trim` for queue entries), which comparisons the input moves
//! (`operands`), where each entry came from (`lineage`), how many mutations a picked
//! entry gets (`energy`), which build it runs ([`lean`]), lifted tests tried on that
//! build ([`Probe`]), and the loop and its settings (`engine`). The `trestle sysfuzz`
//! command over it is the bridge's (`trestle_bridge::system::sysfuzz`).

mod config;
mod dictionary;
mod energy;
mod engine;
mod executor;
mod findings;
mod indexes;
mod input;
pub mod lean;
mod lineage;
mod mutators;
mod operands;
mod probe;
mod trim;

pub use config::SysFuzzConfig;
pub use dictionary::dictionary;
pub use engine::{SliceReport, SysFuzzer};
pub use executor::{StoppedRuns, SysExecutor, RERUN_SHARE};
pub use findings::FindingFeedback;
pub use input::{SysInput, MAX_ARGS, MAX_ARG_LEN, MAX_CONTENT};
pub use lineage::{Descent, LiftedOrigin, LINEAGE_FILE};
pub use mutators::{
    sys_mutator, ArgListMutator, ByteMutator, CrossoverMutator, LineMutator, NumberMutator,
    SysMutator, TokenMutator,
};
pub use operands::OperandSample;
pub use probe::{Probe, Probed};

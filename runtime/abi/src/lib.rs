//! The contract between trestle's three sides.
//!
//! The pass (`instrument/`) emits calls to the hooks named in [`hooks`], tables in the
//! sections named in [`meta`], and ids computed by [`ids`]. The runtime (`runtime/`)
//! implements those hooks and writes [`trace`] records; the host tools (`bridge/`,
//! `unit-fuzz/`) read them back and turn them into [`unit`]s. Everything that crosses a
//! boundary is defined here once, so the two sides cannot drift apart; so is what a
//! unit's parameter values do to its context ([`params`]), which both the harness
//! and `trestle export` carry out.
//!
//! This crate must stay small and free of LLVM and of anything host-only: the runtime,
//! which is linked into every instrumented subject, compiles against it.

pub mod branches;
pub mod c_header;
pub mod capture;
pub mod context;
pub mod fuzz;
pub mod hooks;
pub mod ids;
pub mod lean;
pub mod meta;
pub mod params;
pub mod sysserver;
pub mod trace;
pub mod unit;

pub use context::{
    Context, Extent, ExtentKind, OpenFile, Outcome, PtrSlot, State, StreamPos, Value,
};
pub use meta::{FnMeta, GlobalMeta, ModuleMeta, ParamMeta, ValueKind};

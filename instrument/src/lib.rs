//! trestle's compile-time side.
//!
//! - [`pass`]: the inkwell pass that instruments one LLVM module for carving.
//! - [`driver`]: the `trestle-cc` / `trestle-c++` compiler wrappers, which compile each
//!   source to unoptimised bitcode, run the pass, then optimise, inline the edge
//!   counters ([`edges`]), generate code and link the runtime.
//!
//! Owns everything that runs inside the compiler; must not depend on the runtime's
//! code, only on the contract in `trestle-abi`.

pub mod branches;
pub mod driver;
pub mod edges;
pub mod pass;
pub mod routines;

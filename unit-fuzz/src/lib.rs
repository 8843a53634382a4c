//! trestle's unit fuzzer: LibAFL over the parameters of one carved unit.
//!
//! Owns the fuzzing loop on the host side (executors, observers, mutators, objectives).
//! It must not touch carving or lifting; it consumes `trestle_abi::unit::Unit`s and
//! produces inputs. Nothing is implemented yet: the map-and-fuzz issue builds it.

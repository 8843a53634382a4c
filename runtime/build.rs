//! Compiles the one piece of the runtime that must be C: the unit call of in-process
//! fuzzing that `exit()` and crashes return from (`src/unit_call.c`, which needs
//! sigsetjmp). The result codes it returns are trestle-abi's, passed as macros.

use trestle_abi::fuzz::{EXEC_CRASHED, EXEC_EXITED, EXEC_RETURNED};

fn main() {
    println!("cargo:rerun-if-changed=src/unit_call.c");
    cc::Build::new()
        .file("src/unit_call.c")
        .define("TRESTLE_EXEC_RETURNED", EXEC_RETURNED.to_string().as_str())
        .define("TRESTLE_EXEC_EXITED", EXEC_EXITED.to_string().as_str())
        .define("TRESTLE_EXEC_CRASHED", EXEC_CRASHED.to_string().as_str())
        .opt_level(2)
        .warnings(true)
        .compile("trestle_unit_call");
}

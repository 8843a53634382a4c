//! Compiles the one piece of the runtime that must be C: the unit call of in-process
//! fuzzing that `exit()` and crashes return from (`src/unit_call.c`, which needs
//! sigsetjmp).

fn main() {
    println!("cargo:rerun-if-changed=src/unit_call.c");
    cc::Build::new().file("src/unit_call.c").opt_level(2).warnings(true).compile("trestle_unit_call");
}

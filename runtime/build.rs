//! Compiles the pieces of the runtime that must be C: the unit call of in-process
//! fuzzing that `exit()` and crashes return from (`src/unit_call.c`, which needs
//! sigsetjmp), and `asprintf`'s wrapper (`src/asprintf.c`, a variadic function). Their
//! constants come from trestle-abi, as the generated `trestle_abi.h`.

fn main() {
    println!("cargo:rerun-if-changed=src/unit_call.c");
    println!("cargo:rerun-if-changed=src/asprintf.c");
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("trestle_abi.h"), trestle_abi::c_header::render())
        .expect("write trestle_abi.h into OUT_DIR");
    cc::Build::new()
        .file("src/unit_call.c")
        .file("src/asprintf.c")
        .include(&out)
        .opt_level(2)
        .warnings(true)
        .compile("trestle_unit_call");
}

//! Compiles the lean runtime (`runtime/lean/lean.c`), which `trestle-cc` carries in its
//! own binary and links into every program's lean sibling. Its constants come from
//! trestle-abi, as the generated `trestle_abi.h`.

fn main() {
    let source = "../runtime/lean/lean.c";
    println!("cargo:rerun-if-changed={source}");
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("trestle_abi.h"), trestle_abi::c_header::render())
        .expect("write trestle_abi.h into OUT_DIR");
    // Not linked into trestle-cc: embedded (include_bytes!) and written out at link time.
    cc::Build::new()
        .file(source)
        .include(&out)
        .opt_level(2)
        .debug(false)
        .pic(true)
        .warnings(true)
        .extra_warnings(true)
        .flag_if_supported("-fno-stack-protector")
        .cargo_metadata(false)
        .compile("trestle_lean");
}

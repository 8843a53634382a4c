//! The multi-core launcher of `trestle fuzz --cores N`: started by the unit fuzzer
//! with a launch plan, it runs LibAFL's launcher (broker and one fuzzer per core) in
//! a fresh single-threaded process, so its forks are safe whatever the caller runs.

fn main() {
    let Some(plan) = std::env::args_os().nth(1) else {
        eprintln!(
            "usage: {} PLAN (started by trestle fuzz --cores N)",
            trestle_unit_fuzz::LAUNCHER
        );
        std::process::exit(2);
    };
    std::process::exit(trestle_unit_fuzz::launcher_main(std::path::Path::new(
        &plan,
    )));
}

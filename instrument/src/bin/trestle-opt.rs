//! `trestle-opt IN.bc OUT.bc`: run the carving pass on one bitcode file (for debugging
//! the pass outside the compiler wrappers).

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 || args[1] == "--help" || args[1] == "-h" {
        eprintln!(
            "usage: trestle-opt IN.bc OUT.bc\nInstruments IN.bc for carving and writes OUT.bc."
        );
        return ExitCode::from(2);
    }
    match trestle_instrument::pass::instrument_bitcode_file(
        Path::new(&args[1]),
        Path::new(&args[2]),
    ) {
        Ok(stats) => {
            eprintln!("trestle-opt: {stats:?}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("trestle-opt: {}: {e}", args[1]);
            ExitCode::FAILURE
        }
    }
}

//! Writing results on stdout. A reader that goes away early (`trestle validate … |
//! head -1`) closes the pipe; Rust's `println!` would then panic. trestle stops
//! instead, quietly and with the status a C tool killed by SIGPIPE has (141), and
//! keeps SIGPIPE ignored so that a program under test that closes its stdin cannot
//! kill the fuzzer.

use std::io::Write;

/// The exit status of a process killed by SIGPIPE, as a shell reports it.
const BROKEN_PIPE_STATUS: i32 = 128 + 13;

/// Print on stdout, like `print!`, stopping the process when the reader has gone.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::stdout::write(format_args!($($arg)*), false) };
}

/// Print a line on stdout, like `println!`, stopping the process when the reader has gone.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => { $crate::stdout::write(format_args!($($arg)*), true) };
}

/// Write `args` (and a newline) on stdout and flush. A closed pipe ends the process
/// with status 141; any other write error ends it with a message and status 2.
pub fn write(args: std::fmt::Arguments, newline: bool) {
    let mut out = std::io::stdout().lock();
    let written = out
        .write_fmt(args)
        .and_then(|()| {
            if newline {
                out.write_all(b"\n")
            } else {
                Ok(())
            }
        })
        .and_then(|()| out.flush());
    match written {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            std::process::exit(BROKEN_PIPE_STATUS)
        }
        Err(e) => {
            eprintln!("trestle: cannot write on stdout: {e}");
            std::process::exit(2);
        }
    }
}

//! The ABI as a C header, for the runtime's C code (written by `runtime/build.rs` into
//! its build directory as `trestle_abi.h`): C gets its constants from here, never
//! from literals of its own.

use crate::{fuzz, hooks};
use std::fmt::Write as _;

/// The text of `trestle_abi.h`.
pub fn render() -> String {
    let mut h = String::from("/* Generated from trestle-abi by runtime/build.rs: do not edit. */\n#ifndef TRESTLE_ABI_H\n#define TRESTLE_ABI_H\n\n");
    let ints: [(&str, i64, &str); 4] = [
        ("TRESTLE_EXEC_RETURNED", fuzz::EXEC_RETURNED as i64, "a catching unit call returned"),
        ("TRESTLE_EXEC_EXITED", fuzz::EXEC_EXITED as i64, "the unit called exit()"),
        ("TRESTLE_EXEC_CRASHED", fuzz::EXEC_CRASHED as i64, "the unit crashed: this plus the signal number"),
        ("TRESTLE_EXIT_SETUP_FAILED", fuzz::EXIT_SETUP_FAILED as i64, "the harness could not set a unit up"),
    ];
    for (name, value, what) in ints {
        let _ = writeln!(h, "/* {what} */\n#define {name} {value}");
    }
    let strings: [(&str, &str); 2] = [("TRESTLE_ENV_CRASH_STACK", fuzz::ENV_CRASH_STACK), ("TRESTLE_THUNK_PREFIX", hooks::THUNK_PREFIX)];
    for (name, value) in strings {
        let _ = writeln!(h, "#define {name} {value:?}");
    }
    h.push_str("\n#endif\n");
    h
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_header_defines_each_constant_once_with_its_value() {
        let h = super::render();
        assert_eq!(h.matches("#define TRESTLE_EXEC_CRASHED ").count(), 1);
        assert!(h.contains(&format!("#define TRESTLE_EXEC_CRASHED {}\n", crate::fuzz::EXEC_CRASHED)));
        assert!(h.contains(&format!("#define TRESTLE_ENV_CRASH_STACK \"{}\"\n", crate::fuzz::ENV_CRASH_STACK)));
    }
}

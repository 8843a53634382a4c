//! The ABI as a C header, for the runtime's C code (written by `runtime/build.rs` into
//! its build directory as `trestle_abi.h`): C gets its constants from here, never
//! from literals of its own.

use crate::{branches, fuzz, hooks, sysserver};
use std::fmt::Write as _;

/// The text of `trestle_abi.h`.
pub fn render() -> String {
    let mut h = String::from("/* Generated from trestle-abi by runtime/build.rs: do not edit. */\n#ifndef TRESTLE_ABI_H\n#define TRESTLE_ABI_H\n\n");
    let ints: [(&str, i128, &str); 12] = [
        (
            "TRESTLE_EXEC_RETURNED",
            fuzz::EXEC_RETURNED as i128,
            "a catching unit call returned",
        ),
        (
            "TRESTLE_EXEC_EXITED",
            fuzz::EXEC_EXITED as i128,
            "the unit called exit()",
        ),
        (
            "TRESTLE_EXEC_CRASHED",
            fuzz::EXEC_CRASHED as i128,
            "the unit crashed: this plus the signal number",
        ),
        (
            "TRESTLE_EXIT_SETUP_FAILED",
            fuzz::EXIT_SETUP_FAILED as i128,
            "the harness could not set a unit up",
        ),
        (
            "TRESTLE_SYS_CONTROL_FD",
            sysserver::CONTROL_FD as i128,
            "the system forkserver reads requests here",
        ),
        (
            "TRESTLE_SYS_STATUS_FD",
            sysserver::STATUS_FD as i128,
            "the system forkserver writes its hello, pids and statuses here",
        ),
        (
            "TRESTLE_SYS_HELLO",
            sysserver::HELLO as i128,
            "the system forkserver's first word",
        ),
        (
            "TRESTLE_SYS_MAX_REQUEST",
            sysserver::MAX_REQUEST as i128,
            "the largest request the system forkserver accepts",
        ),
        (
            "TRESTLE_EDGE_MAP_SIZE",
            hooks::EDGE_MAP_SIZE as i128,
            "the edge map's size unless the host says otherwise",
        ),
        (
            "TRESTLE_BRANCHES_MAGIC",
            branches::BRANCHES_MAGIC as i128,
            "first word of a guard number dump",
        ),
        (
            "TRESTLE_CMP_ROUTINE_STRING",
            branches::CMP_ROUTINE_STRING as i128,
            "the comparison routine hook's flag: the operands are C strings",
        ),
        (
            "TRESTLE_CMPLOG_SEEN_WORDS",
            crate::lean::CMPLOG_SEEN_WORDS as i128,
            "64-bit words of each comparison's set of operands seen, past the CmpLog map",
        ),
    ];
    for (name, value, what) in ints {
        if value > i128::from(i32::MAX) {
            let _ = writeln!(h, "/* {what} */\n#define {name} {value:#x}ULL");
        } else {
            let _ = writeln!(h, "/* {what} */\n#define {name} {value}");
        }
    }
    // Section names as bare tokens, for the linker's __start_/__stop_ symbols.
    let _ = writeln!(
        h,
        "/* the branch table's guard rows */\n#define TRESTLE_SECTION_BRANCH_GUARDS {}",
        branches::SECTION_BRANCH_GUARDS
    );
    let strings: [(&str, &str); 9] = [
        ("TRESTLE_ENV_CRASH_STACK", fuzz::ENV_CRASH_STACK),
        ("TRESTLE_THUNK_PREFIX", hooks::THUNK_PREFIX),
        ("TRESTLE_ENV_SYS_FORKSERVER", sysserver::ENV_SYS_FORKSERVER),
        ("TRESTLE_ENV_AFL_SHM_ID", hooks::ENV_AFL_SHM_ID),
        ("TRESTLE_ENV_AFL_MAP_SIZE", hooks::ENV_AFL_MAP_SIZE),
        (
            "TRESTLE_ENV_AFL_CMPLOG_SHM_ID",
            hooks::ENV_AFL_CMPLOG_SHM_ID,
        ),
        ("TRESTLE_ENV_BRANCH_DUMP", branches::ENV_BRANCH_DUMP),
        ("TRESTLE_ENV_TRACE_DIR", hooks::ENV_TRACE_DIR),
        ("TRESTLE_ENV_REPLAY", hooks::ENV_REPLAY),
    ];
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
        assert!(h.contains(&format!(
            "#define TRESTLE_EXEC_CRASHED {}\n",
            crate::fuzz::EXEC_CRASHED
        )));
        assert!(h.contains(&format!(
            "#define TRESTLE_ENV_CRASH_STACK \"{}\"\n",
            crate::fuzz::ENV_CRASH_STACK
        )));
    }
}

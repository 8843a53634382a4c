//! The unit harness's entry: which way a harness process serves its unit.

use trestle_abi::fuzz::{ENV_CRASH_STACK_LIB, ENV_FUZZ_INPROC, ENV_FUZZ_INPUT, ENV_FUZZ_PROBE};

/// Serve the unit: fuzz it in-process (`TRESTLE_FUZZ_INPROC`), probe a branch with a
/// few inputs (`TRESTLE_FUZZ_PROBE`), run one input from a file (`TRESTLE_FUZZ_INPUT`),
/// or serve a fuzzer through the forkserver protocol.
/// Never returns.
pub fn run() -> ! {
    let mut session = match crate::guard("harness setup", crate::fuzz::Session::from_env) {
        Ok(s) => s,
        Err(e) => crate::fuzz::die(&e),
    };
    if let Some(plan) = std::env::var_os(ENV_FUZZ_INPROC) {
        crate::inproc::serve(&mut session, &plan)
    }
    if let Some(path) = std::env::var_os(ENV_FUZZ_PROBE) {
        crate::probe::run(&mut session, &path)
    }
    if let Some(path) = std::env::var_os(ENV_FUZZ_INPUT) {
        let input = std::fs::read(&path)
            .unwrap_or_else(|e| crate::fuzz::die(&format!("cannot read input: {e}")));
        if let Some(lib) = std::env::var_os(ENV_CRASH_STACK_LIB) {
            crate::fuzz::load_library(&lib).unwrap_or_else(|e| crate::fuzz::die(&e));
        }
        session.apply(&input);
        session.execute();
        // SAFETY: ends the process.
        unsafe { libc::_exit(0) }
    }
    crate::forkserver::serve(&mut session)
}

//! The target side of the AFL++ forkserver protocol, for a unit harness.
//!
//! `libafl_targets` speaks the protocol and owns the SanitizerCoverage edge map and
//! the trace-cmp CmpLog map; this module maps them (and the test-case buffer) onto
//! the shared memory the fuzzer created, then serves executions. The restored unit
//! lives in the forkserver process; each execution runs in a fork of it, so the
//! function's effects never carry over.

use crate::fuzz::Session;
use libafl_bolts::shmem::{ShMemProvider, UnixShMemProvider};
use libafl_targets::{
    __afl_map_size, map_cmplog_shared_memory, map_input_shared_memory, map_shared_memory,
    start_forkserver, ForkserverState, MaybePersistentForkserverParent, CMPLOG_ENABLED,
    INPUT_LENGTH_PTR, INPUT_PTR, MAX_EDGES_FOUND, SHM_FUZZING,
};
use trestle_abi::hooks;

/// The descriptor the fuzzer's control pipe arrives on: AFL++'s `FORKSRV_FD`, which
/// `libafl_targets` reads the protocol from (it does not export the number).
const AFL_CONTROL_FD: i32 = 198;

/// Executions one forked process serves in persistent mode before a fresh fork.
const PERSISTENT_ROUNDS: u32 = 1000;

/// The size of the map the fuzzer made (AFL's convention: the default when unsaid).
/// A value that is not a size is an error, as it is to `libafl_targets`, which
/// parses the same variable when it attaches the map.
fn host_map_size() -> Result<usize, String> {
    match std::env::var(hooks::ENV_AFL_MAP_SIZE) {
        Ok(s) => s
            .parse()
            .map_err(|e| format!("{}={s:?} is not a map size: {e}", hooks::ENV_AFL_MAP_SIZE)),
        Err(std::env::VarError::NotPresent) => Ok(hooks::EDGE_MAP_SIZE),
        Err(e) => Err(format!("{}: {e}", hooks::ENV_AFL_MAP_SIZE)),
    }
}

fn die(what: &str, err: impl std::fmt::Display) -> ! {
    crate::fuzz::die(&format!("{what}: {err}"))
}

/// The number of edges SanitizerCoverage registered (the map size the fuzzer needs).
pub fn edges() -> usize {
    // SAFETY: written only by the guard initialisers, which ran before main.
    unsafe { MAX_EDGES_FOUND }.max(1)
}

/// Passive mode under a system-level fuzzer: with `__AFL_SHM_ID` set, point the
/// SanitizerCoverage counters at that shared memory, so that a plain spawned run
/// reports its edges (hit counts) to the fuzzer. Without the variable this is one
/// environment lookup. A map that cannot be attached (gone, of an unreadable size, or
/// smaller than the program's edges) leaves the counters where they were, with a
/// message on stderr: the run goes on, unobserved.
pub fn attach_edge_map() {
    if std::env::var_os(hooks::ENV_AFL_SHM_ID).is_none() {
        return;
    }
    let host_size = match host_map_size() {
        Ok(size) => size,
        Err(e) => {
            eprintln!("trestle runtime: {e}; coverage not reported");
            return;
        }
    };
    let edges = edges();
    if edges > host_size {
        eprintln!("trestle runtime: the program has {edges} edges, the fuzzer's map {host_size}; coverage not reported");
        return;
    }
    // Called once, from the runtime's initialisation (the first hook, at the start of
    // `main`); the counters move to a map at least `edges` long. Edges taken before
    // that (constructors) stay in the private map.
    let mut provider = match UnixShMemProvider::new() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("trestle runtime: cannot attach the coverage map: {e}");
            return;
        }
    };
    if let Err(e) = map_shared_memory(&mut provider) {
        eprintln!("trestle runtime: cannot attach the coverage map: {e}");
    }
    // A system-level CmpLog run: the trace-cmp hooks log the operands of every
    // comparison, for input-to-state solving on the system input.
    if std::env::var_os(hooks::ENV_AFL_CMPLOG_SHM_ID).is_some() {
        match map_cmplog_shared_memory(&mut provider) {
            // SAFETY: single-threaded initialisation, before `main` runs.
            Ok(()) => unsafe { CMPLOG_ENABLED = 1 },
            Err(e) => eprintln!("trestle runtime: cannot attach the CmpLog map: {e}"),
        }
    }
}

/// Serve executions to a fuzzer; without one (no `__AFL_SHM_ID`), run the recorded
/// values once. Never returns.
pub fn serve(session: &mut Session) -> ! {
    if std::env::var_os(hooks::ENV_AFL_SHM_ID).is_none() {
        session.apply(&[]);
        session.execute();
        // SAFETY: ends the process.
        unsafe { libc::_exit(0) }
    }
    let mut provider = UnixShMemProvider::new().unwrap_or_else(|e| die("shared memory", e));
    let host_size = host_map_size().unwrap_or_else(|e| die("map size", e));
    let edges = edges();
    if edges > host_size {
        die(
            "map size",
            format!("the program has {edges} edges, the fuzzer's map {host_size}"),
        );
    }
    // SAFETY: single-threaded set-up before the first fork; libafl_targets reads
    // these statics when it speaks the protocol.
    unsafe {
        __afl_map_size = edges;
    }
    map_shared_memory(&mut provider).unwrap_or_else(|e| die("edge map", e));
    let shm_input = std::env::var_os(hooks::ENV_AFL_SHM_FUZZ_ID).is_some();
    if shm_input {
        map_input_shared_memory(&mut provider).unwrap_or_else(|e| die("test case memory", e));
        // SAFETY: as above.
        unsafe { SHM_FUZZING = 1 };
    }
    if std::env::var_os(hooks::ENV_AFL_CMPLOG_SHM_ID).is_some() {
        map_cmplog_shared_memory(&mut provider).unwrap_or_else(|e| die("cmplog map", e));
        // SAFETY: as above.
        unsafe { CMPLOG_ENABLED = 1 };
    }
    match start_forkserver(&mut MaybePersistentForkserverParent::new()) {
        Ok(ForkserverState::Child) => {
            // A stopped persistent child must not outlive the fuzzer.
            // SAFETY: plain prctl on this process.
            unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
        }
        Ok(ForkserverState::NoAfl) => {
            session.apply(&[]);
            session.execute();
            // SAFETY: ends the process.
            unsafe { libc::_exit(0) }
        }
        // The fuzzer closing its pipes at the end of a campaign also lands here: that
        // is the normal end; anything else is said before the same end.
        Err(e) => {
            if !fuzzer_hung_up() {
                eprintln!("trestle runtime: the forkserver stopped: {e}");
            }
            // SAFETY: ends the process.
            unsafe { libc::_exit(0) }
        }
    }
    let persistent = std::env::var("__AFL_PERSISTENT").is_ok_and(|v| v == "1");
    let rounds = if persistent { PERSISTENT_ROUNDS } else { 1 };
    for round in 0..rounds {
        if round > 0 {
            // Done with one input: stop, and the forkserver tells the fuzzer; it
            // continues us when the next input is in place.
            // SAFETY: signals this process.
            unsafe { libc::raise(libc::SIGSTOP) };
            session.reset();
        }
        let input: Vec<u8> = if shm_input {
            // SAFETY: the fuzzer wrote a length and that many bytes before running us.
            unsafe { std::slice::from_raw_parts(INPUT_PTR, *INPUT_LENGTH_PTR as usize).to_vec() }
        } else {
            let mut v = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut v)
                .unwrap_or_else(|e| die("reading the input", e));
            v
        };
        session.apply(&input);
        session.execute();
    }
    // SAFETY: the executions are over; the fork exits without running exit handlers.
    unsafe { libc::_exit(0) }
}

/// Whether the fuzzer has closed its end of the forkserver's control pipe (how a
/// campaign ends), as opposed to the protocol failing while it still listens.
fn fuzzer_hung_up() -> bool {
    let mut fds = libc::pollfd {
        fd: AFL_CONTROL_FD,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no waiting.
    let ready = unsafe { libc::poll(&mut fds, 1, 0) };
    ready == 1 && fds.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0
}

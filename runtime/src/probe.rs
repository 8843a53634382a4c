//! Probe mode of the unit harness (`TRESTLE_FUZZ_PROBE`): run a few inputs, each once
//! in a fork of the restored unit, and say what one branch saw in each — the operands
//! its comparison logged under its fixed CmpLog id and which of its edges were hit.
//! The host compares the runs to learn whether the unit's parameters decide the
//! branch before it spends a slice fuzzing them (`trestle_unit_fuzz::probe`).
//!
//! Each fork writes its counters and its CmpLog map into memory shared with this
//! process, set up fresh for it, so whatever way the execution ends (a return, an
//! `exit`, a crash) what it saw up to then is read back.

use crate::fuzz::{die, Session};
use libafl_targets::cmps::{CmpLogHeader, CmpLogInstruction, CmpLogMap, CMPLOG_KIND_INS};
use libafl_targets::{CMPLOG_ENABLED, CMPLOG_MAP_H, CMPLOG_MAP_PTR, CMPLOG_MAP_W, EDGES_MAP_PTR};
use std::mem::size_of;
use std::time::{Duration, Instant};
use trestle_abi::fuzz::{ProbeEnd, ProbeRequest, ProbeRun};
use trestle_abi::hooks::EDGE_MAP_SIZE;

const HEADER: usize = size_of::<CmpLogHeader>();
const OPERANDS: usize = size_of::<CmpLogInstruction>();

/// Run the probe named by `path` and end the process.
pub fn run(session: &mut Session, path: &std::ffi::OsStr) -> ! {
    let bytes = std::fs::read(path).unwrap_or_else(|e| {
        die(&format!(
            "cannot read the probe request {}: {e}",
            path.to_string_lossy()
        ))
    });
    let req: ProbeRequest = bincode::deserialize(&bytes)
        .unwrap_or_else(|e| die(&format!("corrupted probe request: {e}")));
    let edges = crate::forkserver::edges();
    if edges > EDGE_MAP_SIZE {
        die(&format!(
            "the program has {edges} edges, the probe's map {EDGE_MAP_SIZE}"
        ));
    }
    let limit = Duration::from_millis(req.timeout_ms.max(1));
    let runs: Vec<ProbeRun> = req
        .inputs
        .iter()
        .map(|input| once(session, &req, input, limit))
        .collect();
    let out = bincode::serialize(&runs)
        .unwrap_or_else(|e| die(&format!("cannot encode the probe's runs: {e}")));
    std::fs::write(&req.out, out)
        .unwrap_or_else(|e| die(&format!("cannot write {}: {e}", req.out.display())));
    // SAFETY: ends the process.
    unsafe { libc::_exit(0) }
}

/// Memory shared with the forked child, unmapped when dropped.
struct Shared {
    base: *mut u8,
    len: usize,
}

impl Shared {
    fn new(len: usize) -> Shared {
        // SAFETY: a fresh anonymous mapping; pages are zero and only touched ones use memory.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            die(&format!(
                "cannot map {len} bytes for the probe: {}",
                std::io::Error::last_os_error()
            ));
        }
        Shared {
            base: base.cast(),
            len,
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, no longer used.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// One input in a fork, read back from the shared maps.
fn once(session: &mut Session, req: &ProbeRequest, input: &[u8], limit: Duration) -> ProbeRun {
    let cmp_len = size_of::<CmpLogMap>();
    let shared = Shared::new(cmp_len + EDGE_MAP_SIZE);
    // SAFETY: fork of a single-threaded harness (the forkserver does the same).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        die(&format!(
            "cannot fork for the probe: {}",
            std::io::Error::last_os_error()
        ));
    }
    if pid == 0 {
        // SAFETY: the child points the hooks at the shared maps before it runs the unit;
        // nothing else runs in it.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            CMPLOG_MAP_PTR = shared.base.cast();
            EDGES_MAP_PTR = shared.base.add(cmp_len);
            CMPLOG_ENABLED = 1;
        }
        session.apply(input);
        session.execute();
        // SAFETY: ends the child without the program's exit handlers.
        unsafe { libc::_exit(0) }
    }
    let end = wait(pid, limit);
    let mut run = ProbeRun {
        end,
        hits: 0,
        operands: Vec::new(),
        edges: Vec::new(),
    };
    // SAFETY: the child is gone; the maps are ours to read, within their lengths.
    unsafe {
        let edges = std::slice::from_raw_parts(shared.base.add(cmp_len), EDGE_MAP_SIZE);
        run.edges = req
            .edges
            .iter()
            .copied()
            .filter(|&e| edges.get(e as usize).is_some_and(|&c| c != 0))
            .collect();
        if let Some(id) = req.cmp {
            let k = id as usize & (CMPLOG_MAP_W - 1);
            let header = shared.base.add(k * HEADER);
            if *header.add(3) == CMPLOG_KIND_INS {
                let hits = (header as *const u16).read_unaligned();
                run.hits = u32::from(hits);
                for h in 0..usize::from(hits).min(CMPLOG_MAP_H) {
                    let op = shared
                        .base
                        .add(CMPLOG_MAP_W * HEADER + (k * CMPLOG_MAP_H + h) * OPERANDS);
                    run.operands.push((
                        (op as *const u64).read_unaligned(),
                        (op.add(8) as *const u64).read_unaligned(),
                    ));
                }
            }
        }
    }
    run
}

/// Wait for the child `pid` up to `limit`, then kill it.
fn wait(pid: libc::pid_t, limit: Duration) -> ProbeEnd {
    let deadline = Instant::now() + limit;
    let mut status = 0;
    loop {
        // SAFETY: our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            return if libc::WIFSIGNALED(status) {
                ProbeEnd::Signaled(libc::WTERMSIG(status))
            } else {
                ProbeEnd::Exited(libc::WEXITSTATUS(status))
            };
        }
        if r < 0 {
            return ProbeEnd::Exited(-1);
        }
        if Instant::now() >= deadline {
            // SAFETY: our own child; the wait reaps it.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return ProbeEnd::TimedOut;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

//! One core per fuzzer. A fuzzer and the program it runs take turns (one waits while
//! the other works), so they belong on one core: the scheduler then never moves the
//! program's forkserver between cores, and a fork need not flush the TLB of another
//! core. AFL++ binds itself the same way by default.
//!
//! A core is free when no other process holds its lock (a trestle fuzzer bound to
//! it) and no other process is bound to it alone (an AFL++ instance, say). The lock
//! is a file under `/dev/shm` held with `flock` for as long as the process lives, so
//! two fuzzers starting at the same moment never pick the same core.

use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;
use std::collections::BTreeSet;
use std::os::fd::AsRawFd as _;

/// The cores this process may run on.
pub fn allowed() -> Vec<usize> {
    match sched_getaffinity(Pid::from_raw(0)) {
        Ok(set) => (0..CpuSet::count())
            .filter(|&c| set.is_set(c).unwrap_or(false))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Cores another user process is bound to alone (`Cpus_allowed_list` of one core;
/// kernel threads, which have no `VmSize`, are per-core by nature and do not count).
fn bound_elsewhere() -> BTreeSet<usize> {
    let me = std::process::id().to_string();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return BTreeSet::new();
    };
    procs
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()) && n != me)
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("status")).ok())
        .filter(|status| status.lines().any(|l| l.starts_with("VmSize:")))
        .filter_map(|status| {
            let list = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?
                .trim()
                .to_string();
            list.parse::<usize>().ok()
        })
        .collect()
}

/// Take the lock of `core`; false if another process holds it. Held until exit.
fn lock(core: usize) -> bool {
    let path = format!("/dev/shm/trestle-core-{core}.lock");
    let Ok(file) = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
    else {
        // No lock to take (no /dev/shm): the scan of bound processes decides alone.
        return true;
    };
    // SAFETY: flock on a descriptor we own.
    if unsafe { nix::libc::flock(file.as_raw_fd(), nix::libc::LOCK_EX | nix::libc::LOCK_NB) } != 0 {
        return false;
    }
    // The lock lives as long as the open file: keep it open until the process ends.
    std::mem::forget(file);
    true
}

/// Bind the calling thread, and every process it starts from now on, to `core`.
pub fn pin(core: usize) -> std::io::Result<()> {
    let mut set = CpuSet::new();
    set.set(core).map_err(std::io::Error::from)?;
    sched_setaffinity(Pid::from_raw(0), &set).map_err(std::io::Error::from)
}

/// A free core (see the module documentation), locked for this process; `None` when
/// every core this process may use is taken (then the caller stays unbound, as
/// AFL++ does).
pub fn free_core() -> Option<usize> {
    let elsewhere = bound_elsewhere();
    allowed()
        .into_iter()
        .filter(|c| !elsewhere.contains(c))
        .find(|&c| lock(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_locked_core_is_not_free_for_another_process() {
        // This process takes a core; a second process sees it taken and picks another
        // (or none, on a single core).
        let Some(core) = free_core() else { return };
        pin(core).expect("pin");
        assert_eq!(allowed(), vec![core], "bound to the core it took");
        let path = format!("/dev/shm/trestle-core-{core}.lock");
        let held = std::fs::File::open(&path).expect("lock file");
        // SAFETY: flock on a descriptor we own.
        let got =
            unsafe { nix::libc::flock(held.as_raw_fd(), nix::libc::LOCK_EX | nix::libc::LOCK_NB) };
        assert_ne!(
            got, 0,
            "the lock is held (a second open file description cannot take it)"
        );
    }
}

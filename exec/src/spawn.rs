//! Starting a process and waiting for it with a deadline: the one place trestle does
//! it. Every bounded run of a program (a system test's run, [`crate::launch`]), of a
//! unit harness (the unit fuzzer's dry runs and probes, lifting's reruns) or of a tool
//! goes through [`start`] and [`wait_until`] (or [`run_bounded`], both at once).
//!
//! A started process leads a process group of its own, so that a run past its limit
//! is killed with everything it started (a shell's children, bubblewrap's program),
//! and a terminal's Ctrl-C reaches trestle, which ends its runs itself.

use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};
use wait_timeout::ChildExt as _;

/// How a bounded run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// It exited, with this status.
    Exited(i32),
    /// A signal ended it.
    Signaled(i32),
    /// It ran past its limit and was killed with its process group.
    TimedOut,
}

/// What waiting for a bounded run found.
#[derive(Debug, Clone, Copy)]
pub struct Waited {
    /// What the process returned; `None` after a timeout.
    pub status: Option<ExitStatus>,
    /// Wall-clock time from [`start`] to its end (or to the kill).
    pub wall: Duration,
    /// After a timeout, the largest peak resident memory (KiB) of a process of the
    /// run's tree just before it was killed: what it had grown to when the clock
    /// stopped it (0 otherwise, or where /proc does not say).
    pub peak_rss_kib: u64,
}

impl Waited {
    /// How it ended.
    pub fn end(&self) -> End {
        match self.status {
            None => End::TimedOut,
            Some(s) => match (s.code(), s.signal()) {
                (Some(c), _) => End::Exited(c),
                (None, Some(sig)) => End::Signaled(sig),
                (None, None) => End::Exited(-1),
            },
        }
    }
}

/// A started process and when it started.
pub struct Started {
    /// The process.
    pub child: Child,
    at: Instant,
}

/// Start `cmd` as the leader of a new process group.
pub fn start(cmd: &mut Command) -> std::io::Result<Started> {
    cmd.process_group(0);
    let at = Instant::now();
    let child = cmd.spawn()?;
    Ok(Started { child, at })
}

/// Wait for `run` at most `limit` after it started; past it, kill its whole process
/// group and reap it.
pub fn wait_until(run: &mut Started, limit: Duration) -> std::io::Result<Waited> {
    let left = limit.saturating_sub(run.at.elapsed());
    let status = run.child.wait_timeout(left)?;
    let mut peak_rss_kib = 0;
    if status.is_none() {
        peak_rss_kib = tree_peak_rss_kib(run.child.id());
        // SAFETY: signalling the child's own process group.
        unsafe { libc::kill(-(run.child.id() as i32), libc::SIGKILL) };
        run.child.wait()?;
    }
    Ok(Waited {
        status,
        wall: run.at.elapsed(),
        peak_rss_kib,
    })
}

/// Start `cmd` and wait for it at most `limit` ([`start`], then [`wait_until`]).
pub fn run_bounded(cmd: &mut Command, limit: Duration) -> std::io::Result<Waited> {
    wait_until(&mut start(cmd)?, limit)
}

/// Start the programs `cmd` runs without address-space randomization: addresses
/// recorded in one run (of C library objects, say) hold in the next only so.
pub fn without_aslr(cmd: &mut Command) -> &mut Command {
    // SAFETY: personality() is async-signal-safe and affects only the child.
    unsafe {
        cmd.pre_exec(|| {
            libc::personality(libc::ADDR_NO_RANDOMIZE as libc::c_ulong);
            Ok(())
        })
    }
}

/// The largest `VmHWM` (peak resident memory, KiB) of `root` and the processes below
/// it, from /proc; 0 when none can be read. A sandboxed run is bubblewrap, its
/// `trestle-exec` and the program, each a child of the one before.
fn tree_peak_rss_kib(root: u32) -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let parents: Vec<(u32, u32)> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // The command may hold spaces and parentheses: the fields start after the last ')'.
            let ppid = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((pid, ppid))
        })
        .collect();
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let p = tree[i];
        tree.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    tree.iter()
        .filter_map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_past_its_limit_is_killed_with_what_it_started() {
        let t = Instant::now();
        let w = run_bounded(
            Command::new("sh").args(["-c", "sleep 30 & sleep 30; wait"]),
            Duration::from_millis(200),
        )
        .unwrap();
        assert_eq!(w.end(), End::TimedOut);
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the group outlived its limit"
        );
        let w = run_bounded(
            Command::new("sh").args(["-c", "exit 3"]),
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(w.end(), End::Exited(3));
        let w = run_bounded(
            Command::new("sh").args(["-c", "kill -SEGV $$"]),
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(w.end(), End::Signaled(libc::SIGSEGV));
    }
}

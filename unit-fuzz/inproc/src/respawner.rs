//! The respawner: the process that restored the unit's context and called the
//! entry point. It never fuzzes: it forks a fuzzer process, watches it, and forks
//! the next when one ends (a hang, a crash outside the unit, a periodic fresh
//! start), until one says the campaign is over or the deadline has passed.

use crate::{fuzz, Campaign};
use libafl_bolts::shmem::{ShMem, ShMemProvider, UnixShMemProvider};
use libafl_bolts::staterestore::StateRestorer;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use trestle_unit_fuzz::inprocess::MAX_LOST_PROCESSES;

/// Shared memory for the fuzzer's state across processes; a larger state goes
/// through a temporary file (LibAFL's `StateRestorer` does that by itself).
const STATE_MAP_SIZE: usize = 64 << 20;

/// Fuzzer processes in a row that may die without saving their state or executing
/// anything before the campaign is given up.
const MAX_BARREN_DEATHS: u32 = 3;

/// The respawner: fork a fuzzer, wait for it, fork the next, until one says the
/// campaign is over.
pub(crate) fn respawn(c: &Campaign) -> Result<(), String> {
    let mut restorer = std::mem::ManuallyDrop::new(state_restorer()?);
    // SAFETY: plain libc query.
    let respawner = unsafe { libc::getpid() };
    let mut barren = 0;
    // A fuzzer stops by itself at the deadline, after its current round; one stuck
    // outside the target (where LibAFL's timeout does not reach) is ended.
    let grace = Duration::from_secs(2) + c.plan.timeout * 2;
    let stall = Duration::from_secs(10) + c.plan.timeout * 3;
    loop {
        let before = c.shared.beats.load(Ordering::Relaxed);
        // SAFETY: the process is single-threaded (the runtime starts no threads).
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(format!(
                "cannot fork a fuzzer: {}",
                std::io::Error::last_os_error()
            ));
        }
        if pid == 0 {
            // SAFETY: this fork owns its copy of the restorer from here on; the
            // respawner's is never touched in this process again.
            fuzzer_process(c, respawner, unsafe {
                std::mem::ManuallyDrop::take(&mut restorer)
            });
        }
        let (status, stuck) = watch(c, pid, grace, stall);
        if c.shared.done.load(Ordering::SeqCst) {
            return Ok(());
        }
        if stuck && Instant::now() >= c.end {
            // Past the deadline: the campaign is over, with what the reports say.
            c.report_done();
            return Ok(());
        }
        c.shared.restarts.fetch_add(1, Ordering::Relaxed);
        if restorer.has_content() {
            // A hang (LibAFL's timeout handler), a crash outside the unit, or a
            // fresh start: the state was saved.
            barren = 0;
            continue;
        }
        let lost = c.shared.lost.fetch_add(1, Ordering::Relaxed) + 1;
        if lost >= MAX_LOST_PROCESSES {
            // The unit takes the fuzzer down again and again: its caller goes on
            // with the forkserver harness.
            c.say(&format!(
                "{lost} fuzzer processes ended without saving their state (last: {}); in-process fuzzing gives this unit up",
                describe_status(status)
            ));
            c.report_done();
            return Ok(());
        }
        c.say(&format!(
            "a fuzzer process ended ({}) without saving its state; the next starts from the queue",
            describe_status(status)
        ));
        if c.shared.beats.load(Ordering::Relaxed) == before {
            barren += 1;
            if barren >= MAX_BARREN_DEATHS {
                return Err(format!(
                    "{barren} fuzzer processes in a row ended without executing anything (last: {})",
                    describe_status(status)
                ));
            }
        } else {
            barren = 0;
        }
        c.shared.afresh.store(true, Ordering::SeqCst);
    }
}

pub(crate) type Restorer =
    StateRestorer<<UnixShMemProvider as ShMemProvider>::ShMem, UnixShMemProvider>;

/// Shared memory for handing the fuzzer's state from one process to the next.
fn state_restorer() -> Result<Restorer, String> {
    let mut provider = UnixShMemProvider::new().map_err(|e| format!("shared memory: {e}"))?;
    let shmem = provider
        .new_shmem(STATE_MAP_SIZE)
        .map_err(|e| format!("shared memory for the state: {e}"))?;
    // Marked for removal at once: the forks inherit the attachment, and nothing is
    // left behind however this process ends.
    let id: i32 = shmem.id().into();
    // SAFETY: plain System V call on a segment this process created.
    unsafe { libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()) };
    Ok(StateRestorer::new(shmem))
}

/// A forked fuzzer process: fuzz, report a failure, end; it never returns into
/// the respawner's loop.
fn fuzzer_process(c: &Campaign, respawner: libc::pid_t, restorer: Restorer) -> ! {
    // SAFETY: prctl on this process; a fuzzer must not outlive its respawner.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        if libc::getppid() != respawner {
            libc::_exit(0);
        }
    }
    let code = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fuzz(c, restorer))) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            c.failed(format!("the fuzzer failed: {e}"));
            c.shared.done.store(true, Ordering::SeqCst);
            1
        }
        Err(_) => {
            c.failed("the fuzzer panicked".into());
            c.shared.done.store(true, Ordering::SeqCst);
            1
        }
    };
    // SAFETY: the fuzzer process ends here.
    unsafe { libc::_exit(code) }
}

/// Wait for the fuzzer `pid`; end it if it runs `grace` past the deadline or makes
/// no execution for `stall`. Returns its wait status and whether it had to be ended.
fn watch(c: &Campaign, pid: libc::pid_t, grace: Duration, stall: Duration) -> (i32, bool) {
    let mut status = 0;
    let mut beats = c.shared.beats.load(Ordering::Relaxed);
    let mut moved = Instant::now();
    // A descriptor that polls readable when the child ends: the respawner wakes at
    // once (a crashing unit restarts the fuzzer often), not at its next check.
    // SAFETY: plain system call on our own child.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    loop {
        if pidfd >= 0 {
            let mut fds = libc::pollfd {
                fd: pidfd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(&mut fds, 1, 100) };
        } else {
            std::thread::sleep(Duration::from_millis(5));
        }
        // SAFETY: polls the child this process forked.
        if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } != 0 {
            break;
        }
        let now = Instant::now();
        let b = c.shared.beats.load(Ordering::Relaxed);
        if b != beats {
            (beats, moved) = (b, now);
        }
        if now > c.end + grace || now - moved > stall {
            // SAFETY: ends and reaps the child this process forked.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            if pidfd >= 0 {
                // SAFETY: our descriptor.
                unsafe { libc::close(pidfd) };
            }
            return (status, true);
        }
    }
    if pidfd >= 0 {
        // SAFETY: our descriptor.
        unsafe { libc::close(pidfd) };
    }
    (status, false)
}

fn describe_status(status: i32) -> String {
    if libc::WIFSIGNALED(status) {
        format!("signal {}", libc::WTERMSIG(status))
    } else {
        format!("exit status {}", libc::WEXITSTATUS(status))
    }
}

//! When a multi-core client stops, and what it reports: shared by the launcher
//! ([`crate::parallel`]) and the fuzzing loop each client runs ([`crate::forkserver`]).

use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::{getpid, Pid};
use std::path::PathBuf;
use std::time::Instant;

/// What one fuzzer process did, written to `.clients/<client>-<pid>.json` every
/// second and when it stops.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct ClientReport {
    /// Executions (of this process; a respawned fuzzer writes its own file).
    pub(crate) executions: u64,
    /// Seconds from the campaign start to this fuzzer's first crash.
    pub(crate) first_crash_after: Option<f64>,
    /// Why it could not fuzz.
    pub(crate) error: Option<String>,
}

/// When a client stops, shared by all clients of one campaign.
#[derive(Debug, Clone)]
pub(crate) struct ClientPace {
    /// The campaign's start, in the caller.
    pub(crate) start: Instant,
    /// The deadline every client stops at.
    pub(crate) end: Instant,
    /// Marker file: once it exists, every client stops.
    pub(crate) stop_file: PathBuf,
    /// The process that called [`crate::fuzz`]; clients stop when it is gone.
    pub(crate) caller: Pid,
    /// Where clients write their [`ClientReport`]s.
    pub(crate) reports: PathBuf,
    /// This client's id (from the launcher; 0 before it is known).
    pub(crate) client: usize,
}

impl ClientPace {
    /// Tell every client to stop (a crash was found and `stop_on_crash` is set).
    /// A marker that cannot be written is said (in `clients.log`): the others then
    /// run to the deadline.
    pub(crate) fn stop_all(&self) {
        if let Err(e) = std::fs::write(&self.stop_file, b"") {
            eprintln!("trestle fuzz: cannot write the stop marker {}: {e}; the other fuzzers run to the deadline", self.stop_file.display());
        }
    }

    /// Another client asked to stop, or the caller died (Ctrl-C, killed).
    pub(crate) fn should_stop(&self) -> bool {
        self.stop_file.exists() || kill(self.caller, None) == Err(Errno::ESRCH)
    }

    /// Write this fuzzer process's report so far (so a fuzzer that dies, and is
    /// respawned, still counts its executions up to its last checkpoint).
    pub(crate) fn checkpoint(&self, executions: u64, first_crash_after: Option<f64>) {
        self.write(&ClientReport {
            executions,
            first_crash_after,
            error: None,
        });
    }

    /// Write the report whole (through a rename); a failure is said in
    /// `clients.log`, and the caller then counts this fuzzer's last report, or none.
    pub(crate) fn write(&self, report: &ClientReport) {
        let path = self
            .reports
            .join(format!("{}-{}.json", self.client, getpid()));
        let tmp = path.with_extension("tmp");
        let written = serde_json::to_vec(report)
            .map_err(|e| format!("cannot encode: {e}"))
            .and_then(|bytes| {
                std::fs::write(&tmp, bytes)
                    .map_err(|e| format!("cannot write {}: {e}", tmp.display()))
            })
            .and_then(|()| {
                std::fs::rename(&tmp, &path).map_err(|e| {
                    format!("cannot rename {} to {}: {e}", tmp.display(), path.display())
                })
            });
        if let Err(e) = written {
            eprintln!("trestle fuzz: client report {}: {e}", path.display());
        }
    }
}

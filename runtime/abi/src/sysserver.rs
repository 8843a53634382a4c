//! The system-test forkserver: how a host runs an instrumented program on many system
//! tests without starting it anew for each.
//!
//! With [`ENV_SYS_FORKSERVER`] set, the runtime stops at the start of `main` and
//! serves: it writes [`HELLO`] on descriptor [`STATUS_FD`] and then the number of
//! coverage-map entries the program uses (its SanitizerCoverage edges: the host
//! need not look at more of the map), then for every request
//! read from [`CONTROL_FD`] forks; the child takes the request's working directory,
//! standard input and environment and calls `main` afresh with the request's
//! arguments, while the server reports the child's pid and then its wait status. A
//! hang is the host's to end: it kills the child's process group (the child leads its
//! own), and the server reports the status as for any end. Unlike AFL's forkserver,
//! every execution has its own arguments, input files and environment, because
//! system tests do.
//!
//! Frames on both descriptors: a little-endian `u32` length, then that many bytes:
//! a bincode [`SysRun`] towards the server; towards the host a `u32` (the hello, the
//! edge count, a pid) or, when a child ended, an [`Ended`] (three `u32`).

use serde::{Deserialize, Serialize};

/// Environment variable: serve system tests (see the module documentation).
pub const ENV_SYS_FORKSERVER: &str = "TRESTLE_SYS_FORKSERVER";
/// Descriptor the server reads requests from.
pub const CONTROL_FD: i32 = 198;
/// Descriptor the server writes its hello, pids and statuses to.
pub const STATUS_FD: i32 = 199;
/// First word the server writes: it is there, and speaks this version (2: requests
/// carry [`ChildLimits`]; 3: the hello is followed by the program's edge count,
/// requests name files for the child's output, and the end of a child says what it
/// used).
pub const HELLO: u32 = 0x5453_5303;
/// Largest request the server accepts.
pub const MAX_REQUEST: u32 = 16 << 20;

/// One execution.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SysRun {
    /// `argv[0]` and the arguments (no NUL bytes).
    pub argv: Vec<Vec<u8>>,
    /// Variables to set on top of the server's environment.
    pub env: Vec<(Vec<u8>, Vec<u8>)>,
    /// Working directory (absolute).
    pub cwd: Vec<u8>,
    /// A file to open as standard input (absolute).
    pub stdin: Vec<u8>,
    /// Resource limits the child sets on itself before `main`.
    pub limits: ChildLimits,
    /// A file for the child's stdout, created or truncated (absolute; empty: the
    /// server's own stdout).
    pub stdout: Vec<u8>,
    /// A file for the child's stderr, likewise.
    pub stderr: Vec<u8>,
}

/// How a child ended, as the server reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ended {
    /// Its wait status.
    pub status: u32,
    /// CPU time it used (user and system), milliseconds.
    pub cpu_ms: u32,
    /// Its peak resident memory, KiB.
    pub max_rss_kib: u32,
}

impl Ended {
    /// Bytes of the frame's payload.
    pub const LEN: usize = 12;

    /// The payload: the three fields, little-endian.
    pub fn to_bytes(self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[..4].copy_from_slice(&self.status.to_le_bytes());
        b[4..8].copy_from_slice(&self.cpu_ms.to_le_bytes());
        b[8..].copy_from_slice(&self.max_rss_kib.to_le_bytes());
        b
    }

    /// Read a payload written by [`Ended::to_bytes`].
    pub fn from_bytes(b: &[u8; Self::LEN]) -> Ended {
        let word = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Ended {
            status: word(0),
            cpu_ms: word(4),
            max_rss_kib: word(8),
        }
    }
}

/// Resource limits of one child (0: none). The server, which only forks and waits,
/// runs without them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildLimits {
    /// CPU seconds (RLIMIT_CPU).
    pub cpu_secs: u64,
    /// Address space in bytes (RLIMIT_AS).
    pub address_space: u64,
    /// Open descriptors (RLIMIT_NOFILE).
    pub open_files: u64,
}

//! Trace files: what a recording process writes, framed so that a crash loses nothing
//! already written and a damaged file is reported with its offset.
//!
//! Layout: a [`TraceHeader`] frame, then record frames. A frame is
//! `len: u32 LE | check: u32 LE | body: [u8; len]` where `check` is FNV-1a (folded to
//! 32 bits) of the body and the body is bincode. The writer fills the body before the
//! length, so a frame is either whole or reads as length 0, which marks the end of the
//! data (the file may be longer, zero-filled, when the process died).

use crate::context::{Context, Outcome};
use serde::{Deserialize, Serialize};

/// Magic at the start of a header body.
pub const TRACE_MAGIC: [u8; 8] = *b"TRSTRACE";
/// Trace format version (8: an open file says whether it is a standard stream, an
/// invocation may be marked `Record::Unreplayable`).
pub const TRACE_VERSION: u32 = 9;
/// Extension of trace files (`<pid>.trace`).
pub const TRACE_EXT: &str = "trace";
/// Bytes before a frame's body.
pub const FRAME_HEADER: usize = 8;

/// The first frame of every trace file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceHeader {
    /// [`TRACE_MAGIC`].
    pub magic: [u8; 8],
    /// [`TRACE_VERSION`].
    pub version: u32,
    /// Id of the binary that wrote it ([`crate::meta::binary_id`]).
    pub binary_id: u64,
    /// Process id of the writer.
    pub pid: u32,
    /// Parent process id of the writer.
    pub ppid: u32,
}

/// One record after the header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    /// A carved invocation began. `seq` numbers carved invocations within the process.
    Enter {
        /// Sequence number, matched by the [`Record::Exit`].
        seq: u64,
        /// How many times the function had been called in this process before (0-based).
        call_index: u64,
        /// The context at entry.
        context: Context,
    },
    /// A carved invocation ended.
    Exit {
        /// The [`Record::Enter`] it closes.
        seq: u64,
        /// How it ended.
        outcome: Outcome,
    },
    /// Counters at process end (absent if the process died).
    Stats(RuntimeStats),
    /// The invocation [`Record::Enter`] `seq` opened did something a replay in a
    /// process of its own cannot repeat; `carve` leaves it out, counted by reason.
    Unreplayable {
        /// The invocation.
        seq: u64,
        /// What it did.
        why: Unreplayable,
    },
    /// Recording for a branch ([`crate::hooks::ENV_RECORD_REACH`]): whether the
    /// invocation [`Record::Enter`] `seq` opened reached it before it ended; `carve`
    /// leaves out those that did not.
    Reach {
        /// The invocation.
        seq: u64,
        /// Whether one of the branch's edges was taken while it ran.
        reached: bool,
    },
}

/// Why a recorded invocation cannot be replayed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Unreplayable {
    /// It waited for (or asked after) a child process started before it began, by
    /// calling this C library function: a replay has no such child.
    WaitsForEarlierChild(String),
    /// Its pointer argument (by index) held an address in no recorded extent, no
    /// loaded object and no thread's stack: memory a replay does not have (a C
    /// library's own heap buffer, such as `readdir`'s entry; a file the program mapped).
    UnknownMemory(u32),
}

impl std::fmt::Display for Unreplayable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unreplayable::WaitsForEarlierChild(call) => {
                write!(f, "waits for a child process started before the call ({call}); a replay has none")
            }
            Unreplayable::UnknownMemory(k) => write!(
                f,
                "gets a pointer (argument {k}) into memory a replay does not have (a C library's own buffer, a mapping)"
            ),
        }
    }
}

/// Runtime counters, written once at exit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeStats {
    /// Instrumented function calls seen.
    pub calls: u64,
    /// Contexts carved.
    pub carved: u64,
    /// Contexts skipped because an equal one was already carved.
    pub duplicates: u64,
    /// Contexts cut by the size bound.
    pub partial: u64,
    /// Bytes of trace written.
    pub trace_bytes: u64,
    /// Every instrumented function this process called, with how many calls the
    /// runtime saw (it stops counting a function once carving it is done).
    pub called: Vec<(u64, u64)>,
}

/// Checksum of a frame body.
pub fn frame_check(body: &[u8]) -> u32 {
    let h = crate::ids::fnv1a64(body);
    (h ^ (h >> 32)) as u32
}

/// Frame `body` as it is stored.
pub fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + FRAME_HEADER);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&frame_check(body).to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// What is wrong with a trace, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceError {
    /// Byte offset of the damaged frame.
    pub offset: u64,
    /// What was wrong.
    pub what: String,
}

impl std::fmt::Display for TraceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "at byte offset {}: {}", self.offset, self.what)
    }
}

impl std::error::Error for TraceError {}

/// A decoded trace.
#[derive(Debug, Clone)]
pub struct Trace {
    /// Its header.
    pub header: TraceHeader,
    /// Records in file order, each with its frame's byte offset.
    pub records: Vec<(u64, Record)>,
}

/// Decode a whole trace image.
pub fn decode_trace(bytes: &[u8]) -> Result<Trace, TraceError> {
    let mut frames = Frames { bytes, pos: 0 };
    let (off, body) = match frames.next_frame()? {
        Some(f) => f,
        None => {
            return Err(TraceError {
                offset: 0,
                what: "empty trace: no header".into(),
            });
        }
    };
    let header: TraceHeader = bincode::deserialize(body).map_err(|e| TraceError {
        offset: off,
        what: format!("undecodable header: {e}"),
    })?;
    if header.magic != TRACE_MAGIC {
        return Err(TraceError {
            offset: off,
            what: "not a trestle trace (bad magic)".into(),
        });
    }
    if header.version != TRACE_VERSION {
        return Err(TraceError {
            offset: off,
            what: format!(
                "trace version {} (this trestle reads {TRACE_VERSION})",
                header.version
            ),
        });
    }
    let mut records = Vec::new();
    while let Some((off, body)) = frames.next_frame()? {
        let rec: Record = bincode::deserialize(body).map_err(|e| TraceError {
            offset: off,
            what: format!("undecodable record: {e}"),
        })?;
        records.push((off, rec));
    }
    Ok(Trace { header, records })
}

struct Frames<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Frames<'a> {
    fn next_frame(&mut self) -> Result<Option<(u64, &'a [u8])>, TraceError> {
        let rest = &self.bytes[self.pos..];
        let offset = self.pos as u64;
        if rest.is_empty() {
            return Ok(None);
        }
        if rest.len() < FRAME_HEADER {
            if rest.iter().all(|&b| b == 0) {
                return Ok(None);
            }
            return Err(TraceError {
                offset,
                what: "truncated frame header".into(),
            });
        }
        let len = u32::from_le_bytes(rest[0..4].try_into().unwrap()) as usize;
        let check = u32::from_le_bytes(rest[4..8].try_into().unwrap());
        if len == 0 {
            // End of data; the rest must be the zero fill of a file that was never trimmed.
            if rest.iter().all(|&b| b == 0) {
                return Ok(None);
            }
            return Err(TraceError {
                offset,
                what: "garbage after the end-of-data mark".into(),
            });
        }
        if rest.len() < FRAME_HEADER + len {
            return Err(TraceError {
                offset,
                what: format!(
                    "truncated record: frame says {len} bytes, {} remain",
                    rest.len() - FRAME_HEADER
                ),
            });
        }
        let body = &rest[FRAME_HEADER..FRAME_HEADER + len];
        if frame_check(body) != check {
            return Err(TraceError {
                offset,
                what: "checksum mismatch: corrupted record".into(),
            });
        }
        self.pos += FRAME_HEADER + len;
        Ok(Some((offset, body)))
    }
}

/// What the host asks a program in replay mode to do (bincode, in the file named by
/// [`crate::hooks::ENV_REPLAY`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayRequest {
    /// The binary the context was carved from; the runtime refuses another.
    pub binary_id: u64,
    /// The context to restore (its `fn_id` names the function).
    pub context: Context,
}

/// What a replay reports back (bincode, in [`crate::hooks::ENV_REPLAY_OUT`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReplayResult {
    /// The unit ran; this is how it ended.
    Ran(Outcome),
    /// The runtime could not set the unit up (wrong binary, unknown function, …).
    Refused(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::{Graph, State, Value};

    fn image(records: &[Record]) -> Vec<u8> {
        let h = TraceHeader {
            magic: TRACE_MAGIC,
            version: TRACE_VERSION,
            binary_id: 7,
            pid: 1,
            ppid: 0,
        };
        let mut out = frame(&bincode::serialize(&h).unwrap());
        for r in records {
            out.extend(frame(&bincode::serialize(r).unwrap()));
        }
        out
    }

    fn exit_rec() -> Record {
        Record::Exit {
            seq: 3,
            outcome: Outcome::Returned(State {
                ret: Value::Bits(5),
                graph: Graph::default(),
                streams: vec![],
            }),
        }
    }

    #[test]
    fn zero_fill_after_data_is_the_end() {
        let mut img = image(&[exit_rec()]);
        img.extend_from_slice(&[0; 100]);
        let t = decode_trace(&img).unwrap();
        assert_eq!(t.records.len(), 1);
        assert_eq!(t.header.binary_id, 7);
    }

    #[test]
    fn truncation_and_corruption_name_the_offset() {
        let img = image(&[exit_rec(), exit_rec()]);
        let second = image(&[exit_rec()]).len() as u64;
        let e = decode_trace(&img[..img.len() - 3]).unwrap_err();
        assert_eq!(e.offset, second);
        assert!(e.what.contains("truncated"));
        let mut bad = img.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0x55;
        let e = decode_trace(&bad).unwrap_err();
        assert_eq!(e.offset, second);
        assert!(e.what.contains("checksum"));
    }
}

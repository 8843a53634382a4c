//! Carved units and the system tests they come from: the plain data passed between
//! `trestle carve`, `replay`, `show` and, later, the unit fuzzer.

use crate::context::{Context, Outcome};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Magic at the start of a unit file.
pub const UNIT_MAGIC: [u8; 8] = *b"TRSTUNIT";
/// Unit format version (9: an open file says whether it is a standard stream).
pub const UNIT_VERSION: u32 = 9;

/// One system test (the JSON format of docs/formats.md), decoded: arguments (without the program name),
/// stdin, files created in a fresh working directory, environment. The JSON form
/// (text or base64 contents) is read and written by the host tools.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemTest {
    /// Command-line arguments after the program name.
    pub args: Vec<String>,
    /// Standard input, if any.
    pub stdin: Option<Vec<u8>>,
    /// Files to create in the working directory, by relative path.
    pub files: BTreeMap<String, Vec<u8>>,
    /// Environment variables to set.
    pub env: BTreeMap<String, String>,
}

/// One input of a system test.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum InputRef {
    /// Command-line argument `i` (0 is the first after the program name).
    Arg(u32),
    /// Standard input.
    Stdin,
    /// The named file.
    File(String),
}

impl std::fmt::Display for InputRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InputRef::Arg(i) => write!(f, "argument {i}"),
            InputRef::Stdin => write!(f, "stdin"),
            InputRef::File(n) => write!(f, "file {n:?}"),
        }
    }
}

/// Where a parameter's value occurs in the system test.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Origin {
    /// Which input.
    pub input: InputRef,
    /// Byte offset in it.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

/// Where a parameter lives in the context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ParamSite {
    /// Argument `i` of the call.
    Arg(u32),
    /// `len` bytes at `offset` in extent `extent`.
    Memory {
        /// Extent index.
        extent: u32,
        /// Byte offset.
        offset: u64,
        /// Length in bytes (without a NUL terminator).
        len: u64,
    },
    /// The unread rest of an input stream read through descriptor `fd`: the
    /// harness serves the value as what is left to read, at the position the
    /// recording had reached.
    Stream {
        /// The descriptor.
        fd: i32,
        /// The `FILE` extent reading from it, if the context holds one.
        file: Option<u32>,
        /// A `FILE` reads from it (the C library's `stdin` when `file` is `None`):
        /// its buffer is emptied so that the next read sees the new value.
        buffered: bool,
    },
}

/// How a string parameter of a new length finds room.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Resize {
    /// It cannot grow; a longer value is cut to the room there is.
    Fixed,
    /// It fills its extent: a new length gets a fresh extent, and every pointer to
    /// the old one moves to it.
    Extent,
    /// A NUL-terminated token inside a larger extent (a word `strtok` cut out of a
    /// line): a new length gets a fresh extent of its own, the pointers into the
    /// token move to it, and the rest of the extent stays where it was.
    Token,
}

/// What kind of value a parameter holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ParamKind {
    /// A byte string. `nul` if a NUL terminator followed it.
    Bytes {
        /// NUL-terminated.
        nul: bool,
        /// How a value of another length finds room.
        resize: Resize,
    },
    /// An integer of `bits` bits, written in decimal in the system input.
    Int {
        /// Width.
        bits: u16,
    },
    /// A decimal integer held as text in memory (a number token of the input
    /// before the program parsed it): fuzzed as an integer, so comparison solving
    /// sees the number the program compares, and written as decimal text, its
    /// length following the value.
    Decimal {
        /// NUL-terminated.
        nul: bool,
        /// How a value of another length finds room.
        resize: Resize,
    },
    /// The unread rest of an input stream ([`ParamSite::Stream`]). The value covers
    /// at most a cap's worth of bytes; `cut` bytes after it stay as recorded.
    Stream {
        /// Bytes of the stream after the value, kept as they were.
        cut: u64,
    },
}

impl ParamKind {
    /// True if values of this kind are integers ([`crate::fuzz::ParamValue::Int`]).
    pub fn is_int(&self) -> bool {
        matches!(self, ParamKind::Int { .. } | ParamKind::Decimal { .. })
    }

    /// A short name of the kind: `int`, `string`, `number`, `stream`.
    pub fn name(&self) -> &'static str {
        match self {
            ParamKind::Bytes { .. } => "string",
            ParamKind::Int { .. } => "int",
            ParamKind::Decimal { .. } => "number",
            ParamKind::Stream { .. } => "stream",
        }
    }
}

/// An integer that was equal to a string parameter's length (plus `delta`) and
/// follows it when the length changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Companion {
    /// Where the integer lives (an argument, or 4 or 8 bytes of memory).
    pub site: ParamSite,
    /// Its width in bits.
    pub bits: u16,
    /// Value minus the string's length (0 or 1).
    pub delta: i64,
}

/// A context value that also occurs in the system input: the unit fuzzer varies it,
/// lifting writes its new value back at its origins.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Param {
    /// Where it lives.
    pub site: ParamSite,
    /// What it holds.
    pub kind: ParamKind,
    /// Its recorded value (bytes of the string; for integers, the decimal text).
    pub original: Vec<u8>,
    /// Every place it occurs in the system input.
    pub origins: Vec<Origin>,
    /// Integers that track its length.
    pub companions: Vec<Companion>,
}

/// Where a unit came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// The program that recorded it (absolute path at recording time).
    pub program: String,
    /// Name of the system test that was running.
    pub test: String,
    /// The trace file, as given to `carve`.
    pub trace: String,
    /// Process that recorded it.
    pub pid: u32,
    /// Carve sequence number within that process.
    pub seq: u64,
    /// How many earlier calls of the function that process made.
    pub call_index: u64,
}

/// A carved unit test: a context, what the recorded call did, and where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unit {
    /// [`UNIT_MAGIC`].
    pub magic: [u8; 8],
    /// [`UNIT_VERSION`].
    pub version: u32,
    /// The binary it was carved from.
    pub binary_id: u64,
    /// The function's display name.
    pub function: String,
    /// The context to restore.
    pub context: Context,
    /// What the recorded invocation did; `None` if the process ended inside it
    /// without the runtime seeing how.
    pub expected: Option<Outcome>,
    /// Where it came from.
    pub provenance: Provenance,
    /// The system test it was carved from.
    pub system_test: SystemTest,
    /// Context values found in the system input (see `trestle show`).
    pub params: Vec<Param>,
}

/// Why a unit file could not be read.
#[derive(Debug)]
pub struct UnitError(pub String);

impl std::fmt::Display for UnitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UnitError {}

impl Unit {
    /// Encode for storage.
    pub fn encode(&self) -> Vec<u8> {
        bincode::serialize(self).expect("serialising plain data cannot fail")
    }

    /// Decode, checking magic and version.
    pub fn decode(bytes: &[u8]) -> Result<Unit, UnitError> {
        if bytes.len() < 8 || bytes[..8] != UNIT_MAGIC {
            return Err(UnitError("not a trestle unit (bad magic)".into()));
        }
        let unit: Unit =
            bincode::deserialize(bytes).map_err(|e| UnitError(format!("corrupted unit: {e}")))?;
        if unit.version != UNIT_VERSION {
            return Err(UnitError(format!(
                "unit format version {} (this trestle reads {UNIT_VERSION})",
                unit.version
            )));
        }
        Ok(unit)
    }
}

//! Carved units and the system tests they come from: the plain data passed between
//! `trestle carve`, `replay`, `show` and, later, the unit fuzzer.

use crate::context::{Context, Outcome};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Magic at the start of a unit file.
pub const UNIT_MAGIC: [u8; 8] = *b"TRSTUNIT";
/// Unit format version.
pub const UNIT_VERSION: u32 = 3;

/// One system test, as in `DESIGN.md`, decoded: arguments (without the program name),
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
        let unit: Unit = bincode::deserialize(bytes)
            .map_err(|e| UnitError(format!("corrupted unit: {e}")))?;
        if unit.version != UNIT_VERSION {
            return Err(UnitError(format!(
                "unit format version {} (this trestle reads {UNIT_VERSION})",
                unit.version
            )));
        }
        Ok(unit)
    }
}

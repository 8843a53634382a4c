//! Unit directories: where `carve` writes units and `replay`/`show` find them.

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use trestle_abi::unit::Unit;

/// File name of the index in a unit directory.
pub const UNIT_INDEX: &str = "index.json";
/// Extension of unit files.
pub const UNIT_EXT: &str = "unit";

/// `index.json` of a unit directory.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct UnitIndex {
    /// The program the units were carved from.
    pub program: PathBuf,
    /// Its binary id, hex.
    pub binary_id: String,
    /// Instrumented functions the recorded runs called.
    #[serde(default)]
    pub called_functions: usize,
    /// Called functions without a unit, with the reason.
    #[serde(default)]
    pub not_carved: Vec<String>,
    /// Units with at least one parameter.
    #[serde(default)]
    pub parameterized_units: usize,
    /// Parameters by site and kind ("heap string": 12, …).
    #[serde(default)]
    pub param_kinds: std::collections::BTreeMap<String, usize>,
    /// Units with at least one parameter of each kind.
    #[serde(default)]
    pub units_by_param_kind: std::collections::BTreeMap<String, usize>,
    /// Input streams that calls read but that are no parameter, by reason.
    #[serde(default)]
    pub unmapped_streams: std::collections::BTreeMap<String, usize>,
    /// Invocations not carved because their context was over the snapshot size bound.
    #[serde(default)]
    pub over_bound: usize,
    /// Invocations not carved because a replay could not repeat what they did
    /// (wait for a child process started before them), by reason.
    #[serde(default)]
    pub unreplayable: std::collections::BTreeMap<String, usize>,
    /// One row per unit.
    pub units: Vec<UnitRow>,
}

/// One unit in the index.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UnitRow {
    /// Path relative to the unit directory.
    pub file: String,
    /// Function display name.
    pub function: String,
    /// Function id, hex.
    pub fn_id: String,
    /// System test it came from.
    pub test: String,
    /// Call index within the recording process.
    pub call_index: u64,
    /// The recording process (its pid), which with the test, the function and the
    /// call index names the call site: `replay --twin` pairs units by it without
    /// reading them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Whether the recorded outcome is known (a replay can be checked).
    pub has_oracle: bool,
    /// Parameters mapped to the system input.
    #[serde(default)]
    pub params: usize,
    /// The kinds of its parameters ("stream", "number", "token string", …), sorted.
    #[serde(default)]
    pub param_kinds: Vec<String>,
    /// Bytes of the system input its parameters cover (overlaps counted once).
    #[serde(default)]
    pub input_bytes: u64,
    /// Hashes of its parameters' values (a stream's by line), sorted: a unit whose
    /// values all occur in one already fuzzed adds nothing new to fuzz.
    #[serde(default)]
    pub value_hashes: Vec<u64>,
    /// Other system tests whose recordings held the same context (dropped as
    /// duplicates of this unit).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also_from: Vec<String>,
}

/// The value hashes of a unit's parameters ([`UnitRow::value_hashes`]).
pub fn value_hashes(params: &[trestle_abi::unit::Param]) -> Vec<u64> {
    let mut out = Vec::new();
    for p in params {
        let tag = p.kind.name().as_bytes();
        let pieces: Vec<&[u8]> = match p.kind {
            trestle_abi::unit::ParamKind::Stream { .. } => p
                .original
                .split_inclusive(|&b| b == b'\n')
                .take(256)
                .collect(),
            _ => vec![&p.original[..]],
        };
        for piece in pieces {
            out.push(trestle_abi::ids::fnv1a64(&[tag, b":", piece].concat()));
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// How a compressed unit file begins: a zstd frame (a plain one begins with
/// [`trestle_abi::unit::UNIT_MAGIC`]).
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// zstd level of unit files: the fastest; units are written by the thousand, and
/// the contexts of one program's calls compress about tenfold even so.
const ZSTD_LEVEL: i32 = 1;

/// A unit as its file holds it, compressed (a campaign on sed carves thousands a
/// minute: 386 MB from its 35 seeds alone, uncompressed).
pub fn encode_unit(unit: &Unit) -> Result<Vec<u8>> {
    zstd::bulk::compress(&unit.encode(), ZSTD_LEVEL).context("cannot compress a unit")
}

/// A unit from its file's bytes, compressed or not.
pub fn decode_unit(bytes: &[u8]) -> Result<Unit> {
    if !bytes.starts_with(&ZSTD_MAGIC) {
        return Ok(Unit::decode(bytes)?);
    }
    if let Some(unit) = decode_in_place(bytes) {
        return Ok(unit?);
    }
    let raw =
        zstd::stream::decode_all(bytes).context("a compressed unit that does not decompress")?;
    Ok(Unit::decode(&raw)?)
}

/// Units past this size when decompressed are streamed instead of decompressed in
/// one piece (their frame says the size; a corrupt one could say anything).
const ONE_PIECE: u64 = 256 << 20;

/// A unit's zstd frame decompressed into a buffer and with a context each thread
/// keeps, then decoded; `None` where the frame does not say its size or does not
/// decompress in one piece (the caller streams it). With a fresh context and buffer
/// per unit, half the page faults of `replay --check`'s own process were zstd
/// writing into a new buffer.
fn decode_in_place(bytes: &[u8]) -> Option<Result<Unit, trestle_abi::unit::UnitError>> {
    thread_local! {
        static DECOMPRESSOR: std::cell::RefCell<Option<(zstd::bulk::Decompressor<'static>, Vec<u8>)>> =
            const { std::cell::RefCell::new(None) };
    }
    let size = zstd::zstd_safe::get_frame_content_size(bytes)
        .ok()
        .flatten()?;
    if size > ONE_PIECE {
        return None;
    }
    DECOMPRESSOR.with_borrow_mut(|d| {
        if d.is_none() {
            *d = Some((zstd::bulk::Decompressor::new().ok()?, Vec::new()));
        }
        let (dctx, buf) = d.as_mut()?;
        buf.clear();
        buf.reserve(size as usize);
        dctx.decompress_to_buffer(bytes, buf).ok()?;
        let unit = Unit::decode(buf);
        // A rare large unit does not keep its buffer's memory for the thread's life.
        if buf.capacity() > 16 << 20 {
            *buf = Vec::new();
        }
        Some(unit)
    })
}

/// Read one unit file.
pub fn read_unit(path: &Path) -> Result<Unit> {
    let bytes =
        std::fs::read(path).with_context(|| format!("cannot read unit {}", path.display()))?;
    decode_unit(&bytes)
        .with_context(|| format!("{} is not a readable trestle unit", path.display()))
}

/// Write one unit file, compressed.
pub fn write_unit(path: &Path, unit: &Unit) -> Result<()> {
    std::fs::write(path, encode_unit(unit)?)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// The unit files under `path` (a unit file or a unit directory), sorted.
pub fn unit_files(path: &Path) -> Result<Vec<PathBuf>> {
    if path.is_file() {
        return Ok(vec![path.to_owned()]);
    }
    if !path.is_dir() {
        anyhow::bail!("units not found: {}", path.display());
    }
    let mut out = Vec::new();
    let mut stack = vec![path.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("cannot list {}", d.display()))? {
            let p = e?.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == UNIT_EXT) {
                out.push(p);
            }
        }
    }
    out.sort();
    if out.is_empty() {
        anyhow::bail!("no units (*.{UNIT_EXT}) under {}", path.display());
    }
    Ok(out)
}

/// A file-system-safe rendering of a function name.
pub fn safe_name(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(80)
        .collect();
    if s.is_empty() {
        "_".into()
    } else {
        s
    }
}

//! What the pass tells the runtime and the host about an instrumented program.
//!
//! Three sections carry it, each concatenated by the linker across object files:
//!
//! - [`SECTION_META`]: per module, a framed, bincode-encoded [`ModuleMeta`]
//!   (names, parameter kinds, source locations, call graph edges). The host reads it
//!   back from the binary with `object`; the runtime reads it in memory.
//! - [`SECTION_FUNCS`]: an array of [`FuncEntry`]: id, address, replay thunk.
//! - [`SECTION_GLOBALS`]: an array of [`GlobalEntry`]: id, address, size, flags.
//!
//! The id of a binary is the FNV-1a hash of its whole [`SECTION_META`], so a unit
//! carved from one binary is recognised as foreign by another.

use serde::{Deserialize, Serialize};

/// The section names as literals, for attributes that need one (`#[link_section]`,
/// the linker's `__start_`/`__stop_` symbols): `section_name!(meta)`, `(funcs)`,
/// `(globals)`. Everything else uses the constants below, made from the same words.
#[macro_export]
macro_rules! section_name {
    (meta) => {
        "trestle_meta"
    };
    (funcs) => {
        "trestle_funcs"
    };
    (globals) => {
        "trestle_globals"
    };
    (branches) => {
        "trestle_branches"
    };
    (branch_guards) => {
        "trestle_branch_guards"
    };
}

/// Section holding framed [`ModuleMeta`] blobs.
pub const SECTION_META: &str = section_name!(meta);
/// Section holding [`FuncEntry`] arrays.
pub const SECTION_FUNCS: &str = section_name!(funcs);
/// Section holding [`GlobalEntry`] arrays.
pub const SECTION_GLOBALS: &str = section_name!(globals);

/// Magic word opening each blob in [`SECTION_META`] (little endian "TRMM").
pub const META_MAGIC: u32 = u32::from_le_bytes(*b"TRMM");

/// Version of [`ModuleMeta`]'s encoding.
pub const META_VERSION: u32 = 4;

/// One row of [`SECTION_FUNCS`], as laid out in memory (LLVM `{ i64, ptr, ptr }`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FuncEntry {
    /// Function id ([`crate::ids::symbol_id`]); 0 marks padding.
    pub id: u64,
    /// The function's address.
    pub addr: *const u8,
    /// `i64 thunk(ptr slots)`, or null if the function cannot be replayed.
    pub thunk: *const u8,
}

/// One row of [`SECTION_GLOBALS`] (LLVM `{ i64, ptr, i64, i64, ptr }`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct GlobalEntry {
    /// Global id; 0 marks padding.
    pub id: u64,
    /// The global's address.
    pub addr: *const u8,
    /// Size in bytes.
    pub size: u64,
    /// [`GLOBAL_CONSTANT`] and friends.
    pub flags: u64,
    /// Counter the instrumented code bumps on every store statically known to land in
    /// this global (null if none).
    pub writes: *const u64,
}

impl GlobalEntry {
    /// Bytes of one row in a file image.
    pub const ROW_BYTES: usize = std::mem::size_of::<GlobalEntry>();

    /// `(id, address)` of each row of a [`SECTION_GLOBALS`] image (little endian, as
    /// the linker laid it out), padding rows included.
    pub fn ids_and_addresses(section: &[u8]) -> impl Iterator<Item = (u64, u64)> + '_ {
        let word = |row: &[u8], i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&row[i * 8..i * 8 + 8]);
            u64::from_le_bytes(w)
        };
        section
            .chunks_exact(Self::ROW_BYTES)
            .map(move |row| (word(row, 0), word(row, 1)))
    }
}

/// [`GlobalEntry::flags`]: the global is read-only (never restored, never dumped).
pub const GLOBAL_CONSTANT: u64 = 1;

/// How a parameter or return value is passed through a 64-bit slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ValueKind {
    /// No value (void return).
    Void,
    /// An integer of the given width in bits (at most 64), zero-extended in the slot.
    Int(u16),
    /// An IEEE single, its bits in the low half of the slot.
    Float,
    /// An IEEE double, its bits in the slot.
    Double,
    /// A pointer.
    Ptr,
    /// A return value of this many bytes that no slot holds (a struct returned in two
    /// registers, an i128, a long double): the slot holds the address of a copy, which
    /// is walked as an extent of its own.
    Aggregate(u32),
    /// A word of a variadic function's variable arguments (a general register or a
    /// stack word): an integer or a pointer, unknown which, so it is relocated when it
    /// points into a known extent.
    Word,
    /// Anything else (vectors and aggregates as parameters): the function cannot be
    /// replayed.
    Unsupported,
}

/// A parameter of a function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParamMeta {
    /// Parameter name from the source, if debug info or IR names have it.
    pub name: Option<String>,
    /// How it is passed.
    pub kind: ValueKind,
    /// For a `byval` pointer: the size of the copied aggregate.
    pub byval_size: Option<u64>,
}

/// Variable arguments of a variadic function are recorded as extra parameters, the
/// way the x86-64 System V convention passes them: the general registers the fixed
/// parameters left free ([`ValueKind::Word`]), the vector registers they left free
/// ([`ValueKind::Double`]), then this many words of the caller's stack
/// ([`ValueKind::Word`]). A replay passes them back in the same order, so the callee's
/// `va_arg` reads what it read in the recording.
pub const VA_STACK_WORDS: usize = 6;
/// General registers for arguments on x86-64 (rdi, rsi, rdx, rcx, r8, r9).
pub const VA_GP_WORDS: usize = 6;
/// Vector registers for arguments on x86-64 (xmm0-xmm7).
pub const VA_FP_WORDS: usize = 8;

/// What the pass knows about one defined function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FnMeta {
    /// Stable id.
    pub id: u64,
    /// Symbol name (mangled for C++).
    pub name: String,
    /// Demangled name, for C++ symbols.
    pub demangled: Option<String>,
    /// Source file of the definition, when debug info has it.
    pub file: Option<String>,
    /// Source line of the definition (0 if unknown).
    pub line: u32,
    /// Parameters in order.
    pub params: Vec<ParamMeta>,
    /// Return kind.
    pub ret: ValueKind,
    /// Variadic. On x86-64 its variable arguments are carried in extra parameters
    /// after the fixed ones ([`VA_GP_WORDS`] and friends); elsewhere it has no thunk.
    pub variadic: bool,
    /// True when a replay thunk exists.
    pub replayable: bool,
    /// Private or internal linkage.
    pub local: bool,
    /// Ids of functions called directly.
    pub callees: Vec<u64>,
    /// Ids of globals referenced directly.
    pub globals: Vec<u64>,
    /// Contains calls through a pointer.
    pub indirect_calls: bool,
    /// The address is used other than by direct calls.
    pub address_taken: bool,
    /// Integer constants the function compares against (`icmp`, `switch`), for the
    /// unit fuzzer's dictionary.
    pub cmp_constants: Vec<i64>,
}

impl FnMeta {
    /// The name to show a person: demangled if there is one.
    pub fn display_name(&self) -> &str {
        self.demangled.as_deref().unwrap_or(&self.name)
    }
}

/// What the pass knows about one defined global.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GlobalMeta {
    /// Stable id.
    pub id: u64,
    /// Symbol name.
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// Read-only.
    pub constant: bool,
    /// Private or internal linkage.
    pub local: bool,
    /// For a read-only C string of 2 to 64 bytes: its text (without the NUL). The
    /// unit fuzzer uses these as a dictionary.
    pub text: Option<Vec<u8>>,
}

/// Everything one instrumented module contributes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleMeta {
    /// Encoding version, [`META_VERSION`].
    pub version: u32,
    /// The module's source file name.
    pub module: String,
    /// Defined functions.
    pub functions: Vec<FnMeta>,
    /// Defined globals.
    pub globals: Vec<GlobalMeta>,
    /// Ids of functions defined elsewhere whose address this module takes (dc's
    /// eval.c passes `dc_add`, defined in numeric.c, to `dc_binop`): the defining
    /// module cannot see that use, and a call through a pointer may reach them.
    pub address_taken: Vec<u64>,
}

/// Frame a module's metadata for [`SECTION_META`]: magic, version, length, bincode.
pub fn encode_module_meta(meta: &ModuleMeta) -> Vec<u8> {
    encode_frame(META_MAGIC, META_VERSION, meta)
}

/// One framed blob: magic, version, length, bincode of `value`.
pub(crate) fn encode_frame<T: Serialize>(magic: u32, version: u32, value: &T) -> Vec<u8> {
    let body = bincode::serialize(value).expect("serialising plain data cannot fail");
    let mut out = Vec::with_capacity(body.len() + 12);
    out.extend_from_slice(&magic.to_le_bytes());
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// Why a metadata section could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaError {
    /// Byte offset in the section.
    pub offset: usize,
    /// What was wrong there.
    pub what: String,
}

impl std::fmt::Display for MetaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "trestle metadata at section offset {}: {}",
            self.offset, self.what
        )
    }
}

impl std::error::Error for MetaError {}

/// Decode every module blob in a [`SECTION_META`] image. Zero bytes between blobs
/// (alignment padding a linker may insert) are skipped.
pub fn decode_meta_section(bytes: &[u8]) -> Result<Vec<ModuleMeta>, MetaError> {
    decode_frames(bytes, META_MAGIC, META_VERSION)
}

/// Decode every blob framed by [`encode_frame`] with `magic` in a section image,
/// skipping the zero bytes a linker may put between them.
pub(crate) fn decode_frames<T: serde::de::DeserializeOwned>(
    mut bytes: &[u8],
    magic: u32,
    version: u32,
) -> Result<Vec<T>, MetaError> {
    let total = bytes.len();
    let mut blobs = Vec::new();
    while !bytes.is_empty() {
        if bytes[0] == 0 {
            bytes = &bytes[1..];
            continue;
        }
        let offset = total - bytes.len();
        let err = |what: String| MetaError { offset, what };
        if bytes.len() < 12 {
            return Err(err("truncated blob header".into()));
        }
        let found = u32::from_le_bytes(bytes[0..4].try_into().unwrap());
        if found != magic {
            return Err(err(format!("bad magic {found:#x}")));
        }
        let found = u32::from_le_bytes(bytes[4..8].try_into().unwrap());
        if found != version {
            return Err(err(format!(
                "metadata version {found} (this trestle reads {version}): rebuild the program with this trestle-cc"
            )));
        }
        let len = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
        if bytes.len() < 12 + len {
            return Err(err(format!(
                "blob of {len} bytes runs past the section end"
            )));
        }
        let blob: T = bincode::deserialize(&bytes[12..12 + len])
            .map_err(|e| err(format!("undecodable blob: {e}")))?;
        blobs.push(blob);
        bytes = &bytes[12 + len..];
    }
    Ok(blobs)
}

/// The id of a binary: FNV-1a of its whole metadata section.
pub fn binary_id(meta_section: &[u8]) -> u64 {
    crate::ids::fnv1a64(meta_section)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blobs_round_trip_across_padding() {
        let m = ModuleMeta {
            version: META_VERSION,
            module: "a.c".into(),
            ..Default::default()
        };
        let mut sec = encode_module_meta(&m);
        sec.extend_from_slice(&[0, 0, 0]);
        sec.extend(encode_module_meta(&ModuleMeta {
            module: "b.c".into(),
            ..m.clone()
        }));
        let got = decode_meta_section(&sec).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].module, "b.c");
    }

    #[test]
    fn truncated_blob_names_offset() {
        let m = ModuleMeta {
            version: META_VERSION,
            ..Default::default()
        };
        let sec = encode_module_meta(&m);
        let e = decode_meta_section(&sec[..sec.len() - 1]).unwrap_err();
        assert_eq!(e.offset, 0);
        assert!(e.what.contains("past the section end"));
    }
}

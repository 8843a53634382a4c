//! What the unit fuzzer and the unit harness agree on: the request that sets a
//! harness up, and how a fuzzer input encodes new values for a unit's parameters.
//!
//! An input is the parameters' values one after another: an integer as 8 bytes little
//! endian (so input-to-state replacement finds the bytes a comparison saw; numbers
//! held as decimal text are integers here too), a string or stream as a 4-byte
//! little-endian length and its bytes. The last parameter, when it is a string or a
//! stream, takes every byte after its length word whatever the length says, so
//! that insertions and deletions of a byte-level mutator change its length.
//! Decoding never fails: a short or damaged input leaves the remaining parameters
//! at their recorded values, and a length past the end takes what is there.

use crate::context::Context;
use crate::unit::{InputRef, Param, ParamKind, Resize};
use serde::{Deserialize, Serialize};

/// Environment variable: path of a [`FuzzRequest`]; the program becomes a unit harness.
pub const ENV_FUZZ: &str = "TRESTLE_FUZZ";
/// Environment variable: run one input from this file instead of serving a fuzzer.
pub const ENV_FUZZ_INPUT: &str = "TRESTLE_FUZZ_INPUT";
/// Environment variable, with [`ENV_FUZZ_INPUT`]: a crash-stack library
/// (`libtrestle_crashstack.so`) the harness loads once the unit is restored. Loaded
/// then rather than preloaded, it leaves the C library where the recording had it:
/// a restored `FILE` holds pointers into the C library that a preload would move.
pub const ENV_CRASH_STACK_LIB: &str = "TRESTLE_CRASH_STACK_LIB";
/// Longest string value a harness accepts (longer ones are cut).
pub const MAX_STRING_VALUE: usize = 1 << 16;

/// Exit status of a harness that could not set its unit up (the reason is on stderr,
/// after [`HARNESS_MSG_PREFIX`]): not a finding, the unit does not work.
pub const EXIT_SETUP_FAILED: i32 = 3;
/// How a harness's own messages on stderr begin.
pub const HARNESS_MSG_PREFIX: &str = "trestle harness: ";

/// The crash-stack variable's name as a literal (the crash-stack library needs it as
/// a C string inside a signal handler): `crash_stack_env!()`.
#[macro_export]
macro_rules! crash_stack_env {
    () => {
        "TRESTLE_CRASH_STACK"
    };
}
/// Environment variable: file the crash-stack library writes a crashing program's
/// stack (and memory map) into.
pub const ENV_CRASH_STACK: &str = crash_stack_env!();

/// Environment variable, next to [`ENV_FUZZ`]: path of an in-process fuzzing plan.
/// The harness restores the context once, loads the fuzzer library
/// ([`ENV_FUZZ_INPROC_LIB`]) into itself and hands it an [`InProcessTarget`]; the
/// plan's format belongs to that library and the host, not to the runtime.
pub const ENV_FUZZ_INPROC: &str = "TRESTLE_FUZZ_INPROC";
/// Environment variable: path of the in-process fuzzer library (a shared object
/// exporting [`INPROC_ENTRY`]).
pub const ENV_FUZZ_INPROC_LIB: &str = "TRESTLE_FUZZ_INPROC_LIB";
/// Environment variable, next to [`ENV_FUZZ_INPROC`]: the CmpLog id (decimal) of the
/// comparison that decides the branch a unit is fuzzed to flip. After every
/// in-process execution the harness marks, in [`GOAL_DISTANCE_SLOTS`] slots past the
/// program's edges, how close the comparison's operands came (every slot from the
/// bit length of their least difference up): an input that brings them closer than
/// any before is new coverage to the fuzzer, so it climbs towards the boundary
/// instead of waiting for a jump across.
pub const ENV_FUZZ_GOAL_CMP: &str = "TRESTLE_FUZZ_GOAL_CMP";
/// Slots of the operand distance ([`ENV_FUZZ_GOAL_CMP`]): one per bit length of a
/// 64-bit difference, 0 to 64.
pub const GOAL_DISTANCE_SLOTS: usize = 65;
/// The in-process fuzzer library's entry point, an [`InProcessEntry`].
pub const INPROC_ENTRY: &str = "trestle_inproc_fuzz";
/// Version of [`InProcessTarget`]; the library refuses a harness of another.
pub const INPROC_ABI_VERSION: u32 = 1;
/// [`InProcessTarget::run`]: the function returned.
pub const EXEC_RETURNED: i32 = 0;
/// [`InProcessTarget::run`]: the function called `exit()`; the execution ended there.
pub const EXEC_EXITED: i32 = 1;
/// [`InProcessTarget::run`]: the function crashed (caught, see
/// [`InProcessTarget::catch_crashes`]); `EXEC_CRASHED + signal` is returned.
pub const EXEC_CRASHED: i32 = 2;

/// What the harness hands the in-process fuzzer: one execution as a callback, and
/// the maps its instrumentation writes (the library's observers read them in place).
#[repr(C)]
#[derive(Debug)]
pub struct InProcessTarget {
    /// [`INPROC_ABI_VERSION`].
    pub abi_version: u32,
    /// One execution: write the values encoded in `input[..len]` into the restored
    /// context, call the function, put the context back. Returns [`EXEC_RETURNED`],
    /// [`EXEC_EXITED`] or, for a crash caught by [`InProcessTarget::catch_crashes`]'s
    /// handlers, [`EXEC_CRASHED`] plus the signal. A hang, or a crash while those
    /// handlers are not installed, does not return (the fuzzer's handlers see it).
    pub run:
        unsafe extern "C" fn(session: *mut core::ffi::c_void, input: *const u8, len: usize) -> i32,
    /// Install the harness's crash signal handlers in front of the ones in place
    /// (the fuzzer's): a crash inside the function then ends just that execution
    /// (`run` returns [`EXEC_CRASHED`]), with the context put back; a crash anywhere
    /// else goes on to the handler that was there before. Call it after the fuzzer
    /// installed its own. Returns 0, or an errno.
    pub catch_crashes: unsafe extern "C" fn() -> i32,
    /// The restored unit, passed back to `run`.
    pub session: *mut core::ffi::c_void,
    /// SanitizerCoverage edge counters (hit counts), one byte per edge.
    pub edges: *mut u8,
    /// Edges the program has (the counters' length).
    pub edges_len: usize,
    /// The CmpLog map the `trace-cmp` hooks write (LibAFL's `CmpLogMap` layout).
    pub cmplog_map: *mut core::ffi::c_void,
    /// The hooks write `cmplog_map` only while this byte is non-zero.
    pub cmplog_enabled: *mut u8,
    /// The plan file (NUL-terminated path), from [`ENV_FUZZ_INPROC`].
    pub plan: *const core::ffi::c_char,
}

/// Environment variable, next to [`ENV_FUZZ`]: path of a [`ProbeRequest`]. The harness
/// runs each of its inputs once, in a fork of the restored unit, and writes what the
/// branch of interest saw into [`ProbeRequest::out`] (a bincode `Vec<ProbeRun>`).
pub const ENV_FUZZ_PROBE: &str = "TRESTLE_FUZZ_PROBE";

/// A probe: does changing the parameters change what one branch compares?
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeRequest {
    /// The CmpLog id of the branch's comparison, when it has one.
    pub cmp: Option<u32>,
    /// Edges to report hits of (the branch's directions).
    pub edges: Vec<u32>,
    /// Inputs, each run once.
    pub inputs: Vec<Vec<u8>>,
    /// Time limit per input, in milliseconds.
    pub timeout_ms: u64,
    /// Where the harness writes the runs.
    pub out: std::path::PathBuf,
}

/// How one probe input ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProbeEnd {
    /// The function returned, or called `exit` with this status (0 when it returned).
    Exited(i32),
    /// A signal ended it.
    Signaled(i32),
    /// It ran past its time and was killed.
    TimedOut,
}

/// What one probe input did at the branch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeRun {
    /// How it ended.
    pub end: ProbeEnd,
    /// Times the comparison ran (0 without a CmpLog id).
    pub hits: u32,
    /// The operands it compared, in order (at most as many as the map keeps per id).
    pub operands: Vec<(u64, u64)>,
    /// Which of [`ProbeRequest::edges`] were hit.
    pub edges: Vec<u32>,
}

/// Signature of [`INPROC_ENTRY`]: fuzz until the plan says stop; returns the exit
/// status the harness process ends with.
pub type InProcessEntry = unsafe extern "C" fn(target: *const InProcessTarget) -> i32;

/// Sets up a unit harness.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FuzzRequest {
    /// The binary the unit was carved from.
    pub binary_id: u64,
    /// The context, restored once.
    pub context: Context,
    /// The parameters an input gives values to.
    pub params: Vec<Param>,
    /// The system test's standard input: the harness reads it as its own, so a unit
    /// that reads on from stdin finds what the recording found.
    pub stdin: Option<Vec<u8>>,
}

/// A value for one parameter.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ParamValue {
    /// A string's bytes (without NUL).
    Bytes(Vec<u8>),
    /// An integer.
    Int(i64),
}

/// The recorded value of a parameter.
pub fn original_value(p: &Param) -> ParamValue {
    if p.kind.is_int() {
        ParamValue::Int(
            std::str::from_utf8(&p.original)
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0),
        )
    } else {
        ParamValue::Bytes(p.original.clone())
    }
}

/// Encode values (one per parameter, in order) as a fuzzer input.
pub fn encode_values(values: &[ParamValue]) -> Vec<u8> {
    let mut out = Vec::new();
    for v in values {
        match v {
            ParamValue::Int(i) => out.extend_from_slice(&i.to_le_bytes()),
            ParamValue::Bytes(b) => {
                out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                out.extend_from_slice(b);
            }
        }
    }
    out
}

/// Decode a fuzzer input into one value per parameter.
pub fn decode_values(params: &[Param], mut input: &[u8]) -> Vec<ParamValue> {
    // Both the harness and the lifter read values here: what a unit runs with is what
    // a lifted test carries (see [`liftable_len`]).
    let mut out = Vec::with_capacity(params.len());
    for (i, p) in params.iter().enumerate() {
        let last = i + 1 == params.len();
        match p.kind {
            ParamKind::Int { .. } | ParamKind::Decimal { .. } => {
                if input.len() >= 8 {
                    out.push(ParamValue::Int(i64::from_le_bytes(
                        input[..8].try_into().unwrap(),
                    )));
                    input = &input[8..];
                } else {
                    input = &[];
                    out.push(original_value(p));
                }
            }
            ParamKind::Bytes { .. } | ParamKind::Stream { .. } => {
                if input.len() >= 4 {
                    let n = u32::from_le_bytes(input[..4].try_into().unwrap()) as usize;
                    let n = if last {
                        input.len() - 4
                    } else {
                        n.min(input.len() - 4)
                    };
                    let n = n.min(MAX_STRING_VALUE);
                    let value = &input[4..4 + n];
                    out.push(ParamValue::Bytes(value[..liftable_len(p, value)].to_vec()));
                    input = &input[4 + n..];
                } else {
                    input = &[];
                    out.push(original_value(p));
                }
            }
        }
    }
    out
}

/// How much of a string value `p` can hold as the program would see it: a
/// NUL-terminated string ends at its first NUL, so does one that only ever comes from
/// command-line arguments (an argument cannot hold a NUL), and a token the program
/// cut out of a line at its first whitespace byte, unless the recorded token held
/// such a byte. Beyond that, the program given the lifted input would see another
/// string (tally's `strtok` split a word with a newline in it in two; sed's counted
/// replacement text, grown to 8 KiB with NULs in it, was cut short in the lifted
/// script), so a unit finding that needs the rest is no finding.
fn liftable_len(p: &Param, value: &[u8]) -> usize {
    let ParamKind::Bytes { nul, resize } = p.kind else {
        return value.len();
    };
    // Asked once a value, not once a byte: this runs for every unit execution.
    let from_args = !p.origins.is_empty()
        && p.origins
            .iter()
            .all(|o| matches!(o.input, InputRef::Arg(_)));
    let at_nul = (nul || from_args) && !p.original.contains(&0);
    let at_space =
        resize == Resize::Token && nul && !p.original.iter().any(u8::is_ascii_whitespace);
    if !at_nul && !at_space {
        return value.len();
    }
    value
        .iter()
        .position(|&b| (at_nul && b == 0) || (at_space && b.is_ascii_whitespace()))
        .unwrap_or(value.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unit::ParamSite;

    #[test]
    fn a_string_value_ends_where_the_program_would_end_it() {
        let token = param(
            ParamKind::Bytes {
                nul: true,
                resize: Resize::Token,
            },
            b"epsilon",
        );
        let spaced = param(
            ParamKind::Bytes {
                nul: true,
                resize: Resize::Token,
            },
            b"two words",
        );
        let line = param(
            ParamKind::Bytes {
                nul: false,
                resize: Resize::Extent,
            },
            b"a line\n",
        );
        let c_string = param(
            ParamKind::Bytes {
                nul: true,
                resize: Resize::Extent,
            },
            b"name",
        );
        let v = |b: &[u8]| encode_values(&[ParamValue::Bytes(b.to_vec())]);
        assert_eq!(
            decode_values(std::slice::from_ref(&token), &v(b"na\x01:b\nrest c")),
            vec![ParamValue::Bytes(b"na\x01:b".to_vec())]
        );
        assert_eq!(
            decode_values(&[token], &v(b"ab\0cd")),
            vec![ParamValue::Bytes(b"ab".to_vec())]
        );
        // A token recorded with a space in it was not cut at spaces.
        assert_eq!(
            decode_values(&[spaced], &v(b"x y\tz")),
            vec![ParamValue::Bytes(b"x y\tz".to_vec())]
        );
        // Not a token: whitespace stays; NUL ends only a NUL-terminated string.
        assert_eq!(
            decode_values(&[line], &v(b"x y\0z")),
            vec![ParamValue::Bytes(b"x y\0z".to_vec())]
        );
        assert_eq!(
            decode_values(&[c_string], &v(b"x y\0z")),
            vec![ParamValue::Bytes(b"x y".to_vec())]
        );
        // Counted bytes (no NUL after them) that only come from arguments end at a NUL
        // all the same, and are no strtok token: whitespace stays.
        let from = |input| crate::unit::Origin {
            input,
            offset: 0,
            len: 2,
        };
        let counted = Param {
            origins: vec![from(InputRef::Arg(3))],
            ..param(
                ParamKind::Bytes {
                    nul: false,
                    resize: Resize::Token,
                },
                b"at",
            )
        };
        assert_eq!(
            decode_values(std::slice::from_ref(&counted), &v(b"a b\0c")),
            vec![ParamValue::Bytes(b"a b".to_vec())]
        );
        // From stdin too, a NUL can be delivered.
        let read = Param {
            origins: vec![from(InputRef::Arg(3)), from(InputRef::Stdin)],
            ..counted
        };
        assert_eq!(
            decode_values(&[read], &v(b"a b\0c")),
            vec![ParamValue::Bytes(b"a b\0c".to_vec())]
        );
    }

    fn param(kind: ParamKind, original: &[u8]) -> Param {
        Param {
            site: ParamSite::Arg(0),
            kind,
            original: original.to_vec(),
            origins: vec![],
            companions: vec![],
        }
    }

    #[test]
    fn values_round_trip_and_damage_falls_back_to_the_recording() {
        let ps = vec![
            param(ParamKind::Int { bits: 32 }, b"-7"),
            param(
                ParamKind::Bytes {
                    nul: true,
                    resize: Resize::Extent,
                },
                b"guest",
            ),
        ];
        let vals = vec![
            ParamValue::Int(42342531),
            ParamValue::Bytes(b"admin".to_vec()),
        ];
        assert_eq!(decode_values(&ps, &encode_values(&vals)), vals);
        assert_eq!(
            decode_values(&ps, &[]),
            vec![ParamValue::Int(-7), ParamValue::Bytes(b"guest".to_vec())]
        );
        // A length running past the end takes what is there.
        let mut bad = encode_values(&vals);
        bad[8] = 200;
        assert_eq!(
            decode_values(&ps, &bad)[1],
            ParamValue::Bytes(b"admin".to_vec())
        );
    }

    #[test]
    fn the_last_string_takes_every_byte_after_its_length_word() {
        let ps = vec![
            param(
                ParamKind::Bytes {
                    nul: true,
                    resize: Resize::Token,
                },
                b"k",
            ),
            param(
                ParamKind::Decimal {
                    nul: true,
                    resize: Resize::Token,
                },
                b"5",
            ),
            param(ParamKind::Stream { cut: 0 }, b"get k\n"),
        ];
        assert_eq!(original_value(&ps[1]), ParamValue::Int(5));
        let mut input = encode_values(&[
            ParamValue::Bytes(b"key".to_vec()),
            ParamValue::Int(90210),
            ParamValue::Bytes(b"x".to_vec()),
        ]);
        // A byte-level mutator appended to the stream without fixing its length word.
        input.extend_from_slice(b"yz");
        let v = decode_values(&ps, &input);
        assert_eq!(
            v,
            vec![
                ParamValue::Bytes(b"key".to_vec()),
                ParamValue::Int(90210),
                ParamValue::Bytes(b"xyz".to_vec())
            ]
        );
    }
}

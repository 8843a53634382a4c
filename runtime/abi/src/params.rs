//! What a unit's parameter values do to its context, decided once.
//!
//! Two sides write parameter values: the unit harness, into the live memory it
//! restored (`runtime/src/fuzz.rs`), and `trestle export`, into a serialized
//! [`Context`](crate::context::Context) on the host. Both call [`apply`], which
//! decides what each (site, kind, value) pairing does; a [`ParamTarget`] carries the
//! writes out in its own representation.
//!
//! - An integer argument is cut to its width.
//! - A number held as text (`ParamKind::Decimal`) is written as its decimal digits.
//! - A string is written at its memory site ([`ParamTarget::write_string`] decides
//!   how a new length finds room); then each length companion takes the length
//!   written plus its delta: an argument is set, a memory companion is written as
//!   8 bytes if it is 64-bit wide, else as 4 (little endian, as the subject's
//!   memory holds it).
//! - A stream value is served as the rest of its stream.
//! - Any other pairing is left alone.

use crate::fuzz::ParamValue;
use crate::unit::{Param, ParamKind, ParamSite, Resize};

/// Where a string value goes: `len` bytes at `offset` in extent `extent` hold the
/// recorded string (plus a terminator if `nul`), and `resize` says how a value of
/// another length finds room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StringSite {
    /// Extent index.
    pub extent: u32,
    /// Byte offset in the extent.
    pub offset: u64,
    /// The recorded string's length (without a terminator).
    pub len: u64,
    /// A NUL terminator follows the string.
    pub nul: bool,
    /// How a value of another length finds room.
    pub resize: Resize,
}

/// A context that parameter values can be written into. [`apply`] decides what is
/// written where; an implementation only knows its representation. `param` is the
/// index of the parameter a write is for (for messages and per-parameter state).
pub trait ParamTarget {
    /// Why a write could not be made.
    type Error;

    /// Set argument `k` to `bits` (already cut to the argument's width). An argument
    /// the context does not have is left alone.
    fn set_arg(&mut self, k: usize, bits: u64);

    /// Write the string `bytes` at `site`; returns the length written, which the
    /// parameter's length companions then take.
    fn write_string(
        &mut self,
        param: usize,
        site: StringSite,
        bytes: &[u8],
    ) -> Result<usize, Self::Error>;

    /// Write a length companion's little-endian `word` (4 or 8 bytes) at `offset` in
    /// extent `extent`.
    fn write_companion(
        &mut self,
        param: usize,
        extent: u32,
        offset: u64,
        word: &[u8],
    ) -> Result<(), Self::Error>;

    /// Make `bytes` what is left to read of parameter `param`'s stream.
    fn serve_stream(&mut self, param: usize, bytes: &[u8]);
}

/// Write `values` (one per parameter, in order) into `target`; the first failed
/// write ends it. Extra parameters or values are left alone.
pub fn apply<T: ParamTarget + ?Sized>(
    target: &mut T,
    params: &[Param],
    values: &[ParamValue],
) -> Result<(), T::Error> {
    for (i, (p, v)) in params.iter().zip(values).enumerate() {
        let digits;
        let value = match (p.kind, v) {
            (ParamKind::Decimal { .. }, ParamValue::Int(x)) => {
                digits = ParamValue::Bytes(x.to_string().into_bytes());
                &digits
            }
            _ => v,
        };
        match (p.site, p.kind, value) {
            (ParamSite::Arg(k), ParamKind::Int { bits }, ParamValue::Int(x)) => {
                target.set_arg(k as usize, cut(*x, bits))
            }
            (ParamSite::Stream { .. }, _, ParamValue::Bytes(b)) => target.serve_stream(i, b),
            (
                ParamSite::Memory {
                    extent,
                    offset,
                    len,
                },
                ParamKind::Bytes { nul, resize } | ParamKind::Decimal { nul, resize },
                ParamValue::Bytes(b),
            ) => {
                let written = target.write_string(
                    i,
                    StringSite {
                        extent,
                        offset,
                        len,
                        nul,
                        resize,
                    },
                    b,
                )?;
                follow_length(target, i, p, written)?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Set parameter `param`'s length companions from the length `written`.
fn follow_length<T: ParamTarget + ?Sized>(
    target: &mut T,
    param: usize,
    p: &Param,
    written: usize,
) -> Result<(), T::Error> {
    for c in &p.companions {
        let value = written as i64 + c.delta;
        match c.site {
            ParamSite::Arg(k) => target.set_arg(k as usize, cut(value, c.bits)),
            ParamSite::Memory { extent, offset, .. } => {
                if c.bits == 64 {
                    target.write_companion(param, extent, offset, &value.to_le_bytes())?;
                } else {
                    target.write_companion(param, extent, offset, &(value as i32).to_le_bytes())?;
                }
            }
            ParamSite::Stream { .. } => {}
        }
    }
    Ok(())
}

/// `x`'s low `bits` bits.
fn cut(x: i64, bits: u16) -> u64 {
    let mask = if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    (x as u64) & mask
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unit::Companion;

    /// What `apply` asked for, in order.
    #[derive(Debug, PartialEq, Eq)]
    enum Op {
        Arg(usize, u64),
        String(usize, StringSite, Vec<u8>),
        Companion(usize, u32, u64, Vec<u8>),
        Stream(usize, Vec<u8>),
    }

    /// Records the writes; a string write returns `written`, or fails in extent 99.
    struct Log {
        ops: Vec<Op>,
        written: usize,
    }

    impl ParamTarget for Log {
        type Error = String;
        fn set_arg(&mut self, k: usize, bits: u64) {
            self.ops.push(Op::Arg(k, bits));
        }
        fn write_string(
            &mut self,
            param: usize,
            site: StringSite,
            bytes: &[u8],
        ) -> Result<usize, String> {
            if site.extent == 99 {
                return Err(format!("p{param}: no extent"));
            }
            self.ops.push(Op::String(param, site, bytes.to_vec()));
            Ok(self.written)
        }
        fn write_companion(
            &mut self,
            param: usize,
            extent: u32,
            offset: u64,
            word: &[u8],
        ) -> Result<(), String> {
            self.ops
                .push(Op::Companion(param, extent, offset, word.to_vec()));
            Ok(())
        }
        fn serve_stream(&mut self, param: usize, bytes: &[u8]) {
            self.ops.push(Op::Stream(param, bytes.to_vec()));
        }
    }

    fn param(site: ParamSite, kind: ParamKind) -> Param {
        Param {
            site,
            kind,
            original: vec![],
            origins: vec![],
            companions: vec![],
        }
    }

    const MEM: ParamSite = ParamSite::Memory {
        extent: 2,
        offset: 4,
        len: 3,
    };
    const STRING: ParamKind = ParamKind::Bytes {
        nul: true,
        resize: Resize::Extent,
    };

    #[test]
    fn integers_are_cut_and_decimals_become_digits() {
        let params = [
            param(ParamSite::Arg(0), ParamKind::Int { bits: 32 }),
            param(ParamSite::Arg(1), ParamKind::Int { bits: 64 }),
            param(
                MEM,
                ParamKind::Decimal {
                    nul: false,
                    resize: Resize::Token,
                },
            ),
        ];
        let values = [
            ParamValue::Int(-1),
            ParamValue::Int(-2),
            ParamValue::Int(-42),
        ];
        let mut log = Log {
            ops: vec![],
            written: 3,
        };
        apply(&mut log, &params, &values).unwrap();
        let site = StringSite {
            extent: 2,
            offset: 4,
            len: 3,
            nul: false,
            resize: Resize::Token,
        };
        assert_eq!(
            log.ops,
            [
                Op::Arg(0, 0xffff_ffff),
                Op::Arg(1, (-2i64) as u64),
                Op::String(2, site, b"-42".to_vec())
            ]
        );
    }

    #[test]
    fn companions_follow_the_length_written() {
        let mut p = param(MEM, STRING);
        p.companions = vec![
            Companion {
                site: ParamSite::Arg(3),
                bits: 32,
                delta: 1,
            },
            Companion {
                site: ParamSite::Memory {
                    extent: 0,
                    offset: 8,
                    len: 8,
                },
                bits: 64,
                delta: 0,
            },
            Companion {
                site: ParamSite::Memory {
                    extent: 0,
                    offset: 16,
                    len: 4,
                },
                bits: 16,
                delta: -1,
            },
        ];
        let mut log = Log {
            ops: vec![],
            written: 5,
        };
        apply(
            &mut log,
            &[p],
            &[ParamValue::Bytes(b"hello, world".to_vec())],
        )
        .unwrap();
        assert_eq!(
            log.ops[1..],
            [
                Op::Arg(3, 6),
                Op::Companion(0, 0, 8, 5u64.to_le_bytes().to_vec()),
                // Any width but 64 is written as 4 bytes.
                Op::Companion(0, 0, 16, 4u32.to_le_bytes().to_vec()),
            ]
        );
    }

    #[test]
    fn streams_are_served_and_other_pairings_left_alone() {
        let stream = ParamSite::Stream {
            fd: 0,
            file: None,
            buffered: true,
        };
        let params = [
            param(stream, ParamKind::Stream { cut: 0 }),
            // An integer value for a string, a string for an integer: nothing.
            param(MEM, STRING),
            param(ParamSite::Arg(0), ParamKind::Int { bits: 8 }),
            param(
                ParamSite::Memory {
                    extent: 99,
                    offset: 0,
                    len: 1,
                },
                ParamKind::Int { bits: 8 },
            ),
        ];
        let values = [
            ParamValue::Bytes(b"rest".to_vec()),
            ParamValue::Int(1),
            ParamValue::Bytes(b"x".to_vec()),
            ParamValue::Int(7),
        ];
        let mut log = Log {
            ops: vec![],
            written: 0,
        };
        apply(&mut log, &params, &values).unwrap();
        assert_eq!(log.ops, [Op::Stream(0, b"rest".to_vec())]);
    }

    #[test]
    fn a_failed_write_ends_the_application() {
        let params = [
            param(
                ParamSite::Memory {
                    extent: 99,
                    offset: 0,
                    len: 1,
                },
                STRING,
            ),
            param(ParamSite::Arg(0), ParamKind::Int { bits: 8 }),
        ];
        let mut log = Log {
            ops: vec![],
            written: 0,
        };
        let e = apply(
            &mut log,
            &params,
            &[ParamValue::Bytes(b"x".to_vec()), ParamValue::Int(1)],
        )
        .unwrap_err();
        assert_eq!(e, "p0: no extent");
        assert!(log.ops.is_empty());
    }
}

//! Parameter values written into a copy of a serialized context on the host, as the
//! unit harness writes them into live memory: both follow
//! [`trestle_abi::params::apply`]; this file only knows how a [`Context`] holds
//! bytes, extents and pointers.

use anyhow::{bail, Result};
use trestle_abi::context::{Context, Extent, ExtentKind, Value};
use trestle_abi::fuzz::ParamValue;
use trestle_abi::params::{self, ParamTarget, StringSite};
use trestle_abi::unit::{Param, Resize};

/// The context with `values` written at the parameters' sites
/// ([`trestle_abi::params`] decides what goes where). A string of a new length that
/// fills its extent replaces that extent (every pointer to it follows, since
/// pointers name extents by index), a token of a new length moves to an extent of its
/// own with the pointers into it, any other string is written in place, cut to the
/// room there is. Stream values are not memory: the caller serves them as the
/// program's input.
pub fn apply_values(ctx: &Context, params: &[Param], values: &[ParamValue]) -> Result<Context> {
    if values.len() != params.len() {
        bail!(
            "{} value(s) for {} parameter(s)",
            values.len(),
            params.len()
        );
    }
    let mut target = ContextTarget(ctx.clone());
    params::apply(&mut target, params, values)?;
    Ok(target.0)
}

/// A serialized context as the target of parameter values.
struct ContextTarget(Context);

impl ContextTarget {
    /// Extent `extent`, which parameter `param` writes into: it must exist and be
    /// writable.
    fn extent_mut(&mut self, extent: u32, param: usize) -> Result<&mut Extent> {
        let Some(e) = self.0.graph.extents.get_mut(extent as usize) else {
            bail!("parameter p{param} lies in extent e{extent}, which the context does not have");
        };
        if matches!(e.kind, ExtentKind::Global { constant: true, .. }) {
            bail!("parameter p{param} lies in read-only global e{extent}: it cannot take another value");
        }
        Ok(e)
    }

    /// Give token `site` of a new length an extent of its own holding `bytes`, and
    /// move the pointers into the token there.
    fn move_token(&mut self, site: StringSite, bytes: Vec<u8>) {
        let ctx = &mut self.0;
        let StringSite {
            extent,
            offset,
            len,
            ..
        } = site;
        let new = ctx.graph.extents.len() as u32;
        ctx.graph.extents.push(Extent {
            kind: ExtentKind::Heap,
            len: bytes.len() as u64,
            align: 16,
            bytes: Some(bytes),
            pointers: vec![],
        });
        let moved = |v: &mut Value| {
            if let Value::Ptr {
                extent: e,
                offset: o,
            } = *v
            {
                if e == extent && (offset..=offset + len).contains(&o) {
                    *v = Value::Ptr {
                        extent: new,
                        offset: o - offset,
                    };
                }
            }
        };
        ctx.args.iter_mut().for_each(moved);
        ctx.graph
            .extents
            .iter_mut()
            .flat_map(|x| x.pointers.iter_mut())
            .for_each(|p| moved(&mut p.target));
    }
}

impl ParamTarget for ContextTarget {
    type Error = anyhow::Error;

    fn set_arg(&mut self, k: usize, bits: u64) {
        if let Some(a) = self.0.args.get_mut(k) {
            *a = Value::Bits(bits);
        }
    }

    fn write_string(&mut self, param: usize, site: StringSite, b: &[u8]) -> Result<usize> {
        let StringSite {
            extent,
            offset,
            len,
            nul,
            resize,
        } = site;
        self.extent_mut(extent, param)?;
        let mut bytes = b.to_vec();
        if nul {
            bytes.push(0);
        }
        if b.len() as u64 != len {
            match resize {
                Resize::Extent => {
                    let e = &mut self.0.graph.extents[extent as usize];
                    e.len = bytes.len() as u64;
                    e.bytes = Some(bytes);
                    e.pointers.clear();
                    return Ok(b.len());
                }
                Resize::Token => {
                    self.move_token(site, bytes);
                    return Ok(b.len());
                }
                Resize::Fixed => {}
            }
        }
        let e = &mut self.0.graph.extents[extent as usize];
        let room = (e.len.saturating_sub(offset) as usize).saturating_sub(nul as usize);
        let n = b.len().min(room);
        let mut data = b[..n].to_vec();
        if nul {
            data.push(0);
        }
        write_bytes(e, offset, &data);
        Ok(n)
    }

    fn write_companion(
        &mut self,
        param: usize,
        extent: u32,
        offset: u64,
        word: &[u8],
    ) -> Result<()> {
        write_bytes(self.extent_mut(extent, param)?, offset, word);
        Ok(())
    }

    /// A stream is the program's input, not memory: the exported test reads it as
    /// given (its header says so).
    fn serve_stream(&mut self, _param: usize, _bytes: &[u8]) {}
}

/// Overwrite bytes of `e` (materialising bytes a cut-off recording lacks as zeros);
/// a pointer word the write touches is a pointer no more. Nothing is written past the
/// extent's end.
fn write_bytes(e: &mut Extent, offset: u64, data: &[u8]) {
    let end = (offset + data.len() as u64).min(e.len);
    if offset >= end {
        return;
    }
    let bytes = e.bytes.get_or_insert_with(Vec::new);
    bytes.resize(e.len as usize, 0);
    bytes[offset as usize..end as usize].copy_from_slice(&data[..(end - offset) as usize]);
    e.pointers
        .retain(|p| p.offset + 8 <= offset || p.offset >= end);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::fixtures::{context, heap, string_param};
    use trestle_abi::context::PtrSlot;
    use trestle_abi::unit::{Companion, ParamKind, ParamSite};

    #[test]
    fn a_token_of_a_new_length_moves_out_with_the_pointers_into_it() {
        // A line cut in place: "set\0ab\x005\0", with an array of pointers to its words.
        let mut words = heap(&[0; 24]);
        for (i, o) in [0u64, 4, 7].into_iter().enumerate() {
            words.pointers.push(PtrSlot {
                offset: 8 * i as u64,
                target: Value::Ptr {
                    extent: 1,
                    offset: o,
                },
            });
        }
        let ctx = context(
            vec![words, heap(b"set\0ab\x005\0")],
            vec![Value::Ptr {
                extent: 0,
                offset: 0,
            }],
        );
        let key = Param {
            kind: ParamKind::Bytes {
                nul: true,
                resize: Resize::Token,
            },
            ..string_param(1, 4, 2, false, b"ab")
        };
        let num = Param {
            kind: ParamKind::Decimal {
                nul: true,
                resize: Resize::Token,
            },
            ..string_param(1, 7, 1, false, b"5")
        };
        let got = apply_values(
            &ctx,
            &[key, num],
            &[
                ParamValue::Bytes(b"longkey".to_vec()),
                ParamValue::Int(90210),
            ],
        )
        .unwrap();
        // Each grown word has an extent of its own; the verb's pointer did not move.
        let p = &got.graph.extents[0].pointers;
        assert_eq!(
            p[0].target,
            Value::Ptr {
                extent: 1,
                offset: 0
            }
        );
        assert_eq!(
            p[1].target,
            Value::Ptr {
                extent: 2,
                offset: 0
            }
        );
        assert_eq!(
            p[2].target,
            Value::Ptr {
                extent: 3,
                offset: 0
            }
        );
        assert_eq!(
            got.graph.extents[2].bytes.as_deref(),
            Some(&b"longkey\0"[..])
        );
        assert_eq!(got.graph.extents[3].bytes.as_deref(), Some(&b"90210\0"[..]));
        // The rest of the line stays where it was.
        assert_eq!(
            got.graph.extents[1].bytes.as_deref(),
            Some(&b"set\0ab\x005\0"[..])
        );
    }

    #[test]
    fn integer_arguments_are_cut_to_their_width() {
        let ctx = context(vec![], vec![Value::Bits(7), Value::Bits(12)]);
        let params = vec![
            Param {
                site: ParamSite::Arg(0),
                kind: ParamKind::Int { bits: 32 },
                original: b"7".to_vec(),
                origins: vec![],
                companions: vec![],
            },
            Param {
                site: ParamSite::Arg(1),
                kind: ParamKind::Int { bits: 64 },
                original: b"12".to_vec(),
                origins: vec![],
                companions: vec![],
            },
        ];
        let got = apply_values(
            &ctx,
            &params,
            &[ParamValue::Int(-1), ParamValue::Int(42342531)],
        )
        .unwrap();
        assert_eq!(
            got.args,
            vec![Value::Bits(0xffff_ffff), Value::Bits(42342531)]
        );
    }

    #[test]
    fn a_string_of_a_new_length_replaces_its_extent_and_pointers_follow() {
        // e0 holds a pointer to the string e1; argument 0 points at e1 too.
        let mut holder = heap(&[0; 8]);
        holder.pointers.push(PtrSlot {
            offset: 0,
            target: Value::Ptr {
                extent: 1,
                offset: 0,
            },
        });
        let ctx = context(
            vec![holder, heap(b"pw12\0")],
            vec![
                Value::Ptr {
                    extent: 1,
                    offset: 0,
                },
                Value::Bits(4),
            ],
        );
        let mut p = string_param(1, 0, 4, true, b"pw12");
        p.companions.push(Companion {
            site: ParamSite::Arg(1),
            bits: 32,
            delta: 0,
        });
        let long = vec![b'a'; 30];
        let got = apply_values(&ctx, &[p], &[ParamValue::Bytes(long.clone())]).unwrap();
        let e = &got.graph.extents[1];
        assert_eq!(e.len, 31);
        assert_eq!(&e.bytes.as_ref().unwrap()[..30], &long[..]);
        assert_eq!(e.bytes.as_ref().unwrap()[30], 0);
        // Pointers name the extent by index, so they now reach the new string.
        assert_eq!(
            got.args[0],
            Value::Ptr {
                extent: 1,
                offset: 0
            }
        );
        assert_eq!(
            got.graph.extents[0].pointers[0].target,
            Value::Ptr {
                extent: 1,
                offset: 0
            }
        );
        // The length companion follows.
        assert_eq!(got.args[1], Value::Bits(30));
    }

    #[test]
    fn a_fixed_string_is_written_in_place_and_cut_to_its_room() {
        // "echo\0hello\0" then a pointer word at 11..19.
        let mut buf = heap(b"echo\0hello\0xxxxxxxx");
        buf.pointers.push(PtrSlot {
            offset: 11,
            target: Value::Ptr {
                extent: 0,
                offset: 0,
            },
        });
        let ctx = context(
            vec![buf],
            vec![Value::Ptr {
                extent: 0,
                offset: 5,
            }],
        );
        let p = string_param(0, 5, 5, false, b"hello");
        let got = apply_values(
            &ctx,
            std::slice::from_ref(&p),
            &[ParamValue::Bytes(b"hi".to_vec())],
        )
        .unwrap();
        assert_eq!(
            got.graph.extents[0].bytes.as_deref().unwrap(),
            b"echo\0hi\0lo\0xxxxxxxx"
        );
        assert_eq!(got.graph.extents[0].pointers.len(), 1);
        // A value longer than the room is cut, NUL included; the pointer word it
        // overwrote is a pointer no more.
        let got = apply_values(&ctx, &[p], &[ParamValue::Bytes(vec![b'z'; 40])]).unwrap();
        let bytes = got.graph.extents[0].bytes.as_deref().unwrap();
        assert_eq!(bytes.len(), 19);
        assert_eq!(&bytes[5..18], &[b'z'; 13]);
        assert_eq!(bytes[18], 0);
        assert!(got.graph.extents[0].pointers.is_empty());
    }

    #[test]
    fn a_parameter_in_a_read_only_global_is_an_error() {
        let mut g = heap(b"abc\0");
        g.kind = ExtentKind::Global {
            id: 9,
            constant: true,
        };
        let ctx = context(vec![g], vec![]);
        let e = apply_values(
            &ctx,
            &[string_param(0, 0, 3, true, b"abc")],
            &[ParamValue::Bytes(b"x".to_vec())],
        )
        .unwrap_err();
        assert!(e.to_string().contains("read-only"), "{e}");
        let e = apply_values(&ctx, &[], &[ParamValue::Int(1)]).unwrap_err();
        assert!(
            e.to_string().contains("1 value(s) for 0 parameter(s)"),
            "{e}"
        );
    }
}

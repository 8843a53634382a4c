//! Mapping: which values of a carved context also occur in the system input.
//!
//! A byte string of the context (from a pointer argument, a pointer inside the
//! context's memory, or the start of an extent, up to its NUL) that is a substring of
//! an argument, of stdin or of an input file becomes a *parameter*; so does an integer
//! argument whose decimal form occurs there as a whole token. Each parameter remembers
//! every place it occurs (its origins), so lifting can write a new value back; integer
//! arguments equal to a string parameter's length (or length + 1) become its length
//! companions. This is the string-comparison mapping of the bridge paper: quick, and
//! imprecise in ways lifting later filters out.

use std::collections::BTreeSet;
use trestle_abi::meta::{FnMeta, ValueKind};
use trestle_abi::unit::{Companion, InputRef, Origin, Param, ParamKind, ParamSite, SystemTest};
use trestle_abi::{Context, ExtentKind, Value};

/// Strings shorter than this are not mapped (too many chance matches).
pub const MIN_STRING: usize = 2;
/// Strings longer than this are not mapped (whole files and stream buffers).
pub const MAX_STRING: usize = 4096;
/// Origins kept per parameter.
pub const MAX_ORIGINS: usize = 16;

/// The inputs of a system test, each with its bytes.
pub fn inputs(test: &SystemTest) -> Vec<(InputRef, &[u8])> {
    let mut v: Vec<(InputRef, &[u8])> = test
        .args
        .iter()
        .enumerate()
        .map(|(i, a)| (InputRef::Arg(i as u32), a.as_bytes()))
        .collect();
    if let Some(s) = &test.stdin {
        v.push((InputRef::Stdin, s.as_slice()));
    }
    for (name, bytes) in &test.files {
        v.push((InputRef::File(name.clone()), bytes.as_slice()));
    }
    v
}

fn occurrences(inputs: &[(InputRef, &[u8])], needle: &[u8], token: bool) -> Vec<Origin> {
    let mut out = Vec::new();
    if needle.is_empty() {
        return out;
    }
    for (input, hay) in inputs {
        let mut from = 0;
        while from + needle.len() <= hay.len() && out.len() < MAX_ORIGINS {
            let Some(pos) = hay[from..].windows(needle.len()).position(|w| w == needle) else { break };
            let at = from + pos;
            let end = at + needle.len();
            let boundary_ok = !token || {
                let before_ok = at == 0 || !is_number_char(hay[at - 1]);
                let after_ok = end == hay.len() || !hay[end].is_ascii_digit();
                before_ok && after_ok
            };
            if boundary_ok {
                out.push(Origin { input: input.clone(), offset: at as u64, len: needle.len() as u64 });
            }
            from = at + 1;
        }
    }
    out
}

fn is_number_char(b: u8) -> bool {
    b.is_ascii_digit() || b == b'-' || b == b'+'
}

fn sign_extend(v: u64, bits: u16) -> i64 {
    if bits == 0 || bits >= 64 {
        return v as i64;
    }
    let shift = 64 - bits as u32;
    ((v << shift) as i64) >> shift
}

/// Find the parameters of `ctx` in `test`. `meta` gives the argument kinds.
pub fn map_params(ctx: &Context, meta: Option<&FnMeta>, test: &SystemTest) -> Vec<Param> {
    let inputs = inputs(test);
    let extents = &ctx.graph.extents;

    // Buffers of FILE objects hold whole stretches of input: not values of the program.
    let mut stream_buffers = BTreeSet::new();
    for e in extents.iter().filter(|e| e.kind == ExtentKind::File) {
        for p in &e.pointers {
            if let Value::Ptr { extent, .. } = p.target {
                stream_buffers.insert(extent);
            }
        }
    }

    // Where strings may start: pointer arguments, pointers in memory, extent starts.
    let mut starts = BTreeSet::new();
    for a in &ctx.args {
        if let Value::Ptr { extent, offset } = a {
            starts.insert((*extent, *offset));
        }
    }
    for e in extents {
        for p in &e.pointers {
            if let Value::Ptr { extent, offset } = p.target {
                starts.insert((extent, offset));
            }
        }
    }
    for (i, e) in extents.iter().enumerate() {
        if e.bytes.is_some() {
            starts.insert((i as u32, 0));
        }
    }

    let mut params = Vec::new();
    for (ext, off) in starts {
        let Some(e) = extents.get(ext as usize) else { continue };
        if stream_buffers.contains(&ext) || e.kind == ExtentKind::File {
            continue;
        }
        let Some(bytes) = &e.bytes else { continue };
        let Some(rest) = bytes.get(off as usize..) else { continue };
        let (s, nul) = match rest.iter().position(|&b| b == 0) {
            Some(n) => (&rest[..n], true),
            None => (rest, false),
        };
        if s.len() < MIN_STRING || s.len() > MAX_STRING {
            continue;
        }
        let origins = occurrences(&inputs, s, false);
        if origins.is_empty() {
            continue;
        }
        let resizable = off == 0
            && (s.len() as u64 + nul as u64) == e.len
            && !matches!(e.kind, ExtentKind::Global { .. });
        params.push(Param {
            site: ParamSite::Memory { extent: ext, offset: off, len: s.len() as u64 },
            kind: ParamKind::Bytes { nul, resizable },
            original: s.to_vec(),
            origins,
            companions: Vec::new(),
        });
    }

    // Integer arguments, and length companions of the strings.
    let kinds: Vec<ValueKind> = meta.map(|m| m.params.iter().map(|p| p.kind).collect()).unwrap_or_default();
    for (i, a) in ctx.args.iter().enumerate() {
        let Some(ValueKind::Int(bits)) = kinds.get(i).copied() else { continue };
        if bits < 8 {
            continue;
        }
        let Value::Bits(raw) = a else { continue };
        let v = sign_extend(*raw, bits);
        let site = ParamSite::Arg(i as u32);
        // A length companion: prefer an exact length over length + 1, and a string
        // that an argument points at over one elsewhere.
        let pointed: Vec<(u32, u64)> = ctx
            .args
            .iter()
            .filter_map(|a| match a {
                Value::Ptr { extent, offset } => Some((*extent, *offset)),
                _ => None,
            })
            .collect();
        let mut companion_of: Option<(usize, i64, u8)> = None;
        for (k, p) in params.iter().enumerate() {
            let (ParamKind::Bytes { .. }, ParamSite::Memory { extent, offset, .. }) = (p.kind, p.site) else { continue };
            let len = p.original.len() as i64;
            let delta = v - len;
            if delta != 0 && delta != 1 {
                continue;
            }
            let rank = (delta == 0) as u8 * 2 + pointed.contains(&(extent, offset)) as u8;
            if companion_of.is_none_or(|(_, _, r)| rank > r) {
                companion_of = Some((k, delta, rank));
            }
        }
        let companion_of = companion_of.map(|(k, d, _)| (k, d));
        if let Some((k, delta)) = companion_of {
            params[k].companions.push(Companion { site, bits, delta });
            continue;
        }
        let text = v.to_string();
        let origins = occurrences(&inputs, text.as_bytes(), true);
        if origins.is_empty() {
            continue;
        }
        params.push(Param { site, kind: ParamKind::Int { bits }, original: text.into_bytes(), origins, companions: Vec::new() });
    }
    params
}

#[cfg(test)]
mod tests {
    use super::*;
    use trestle_abi::context::Graph;
    use trestle_abi::meta::ParamMeta;
    use trestle_abi::Extent;

    fn heap(bytes: &[u8]) -> Extent {
        Extent { kind: ExtentKind::Heap, len: bytes.len() as u64, align: 16, bytes: Some(bytes.to_vec()), pointers: vec![] }
    }

    fn meta(kinds: &[ValueKind]) -> FnMeta {
        FnMeta {
            id: 1,
            name: "f".into(),
            demangled: None,
            file: None,
            line: 0,
            params: kinds.iter().map(|&kind| ParamMeta { name: None, kind, byval_size: None }).collect(),
            ret: ValueKind::Void,
            variadic: false,
            replayable: true,
            local: false,
            callees: vec![],
            globals: vec![],
            indirect_calls: false,
            address_taken: false,
            cmp_constants: vec![],
        }
    }

    #[test]
    fn strings_and_tokens_map_to_their_origins() {
        let ctx = Context {
            fn_id: 1,
            args: vec![Value::Ptr { extent: 0, offset: 0 }, Value::Bits(42342), Value::Bits(5), Value::Bits(7)],
            graph: Graph { extents: vec![heap(b"admin\0")], ..Graph::default() },
            locale: vec![],
            fds: vec![],
        };
        let test = SystemTest {
            args: vec!["login".into(), "admin".into()],
            stdin: Some(b"set 1423423 42342\n".to_vec()),
            ..Default::default()
        };
        let m = meta(&[ValueKind::Ptr, ValueKind::Int(32), ValueKind::Int(64), ValueKind::Int(32)]);
        let params = map_params(&ctx, Some(&m), &test);
        let s = &params[0];
        assert_eq!(s.original, b"admin");
        assert_eq!(s.kind, ParamKind::Bytes { nul: true, resizable: true });
        assert_eq!(s.origins, vec![Origin { input: InputRef::Arg(1), offset: 0, len: 5 }]);
        // 5 is the string's length: a companion, not a parameter of its own.
        assert_eq!(s.companions, vec![Companion { site: ParamSite::Arg(2), bits: 64, delta: 0 }]);
        // 42342 occurs as a whole token (offset 12), not inside 1423423.
        let n = &params[1];
        assert_eq!(n.site, ParamSite::Arg(1));
        assert_eq!(n.origins, vec![Origin { input: InputRef::Stdin, offset: 12, len: 5 }]);
        // 7 does not occur in the input: no parameter.
        assert_eq!(params.len(), 2);
    }

    #[test]
    fn a_processed_value_gets_no_parameter() {
        // A hash of the input never occurs in it.
        let ctx = Context { fn_id: 1, args: vec![Value::Bits(0x9e3779b97f4a7c15)], graph: Graph::default(), locale: vec![], fds: vec![] };
        let test = SystemTest { args: vec!["token".into(), "s3cret".into()], ..Default::default() };
        assert!(map_params(&ctx, Some(&meta(&[ValueKind::Int(64)])), &test).is_empty());
    }
}

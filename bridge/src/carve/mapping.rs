//! Mapping: which values of a carved context also occur in the system input.
//!
//! - A byte string of the context (from a pointer argument, a pointer inside the
//!   context's memory, or the start of an extent, up to its NUL) that is a substring
//!   of an argument, of stdin or of an input file becomes a *parameter*. A one-byte
//!   string counts only where it is a whole token of the input (between separators,
//!   argument boundaries or line ends), not wherever the byte happens to occur.
//! - A string that is a decimal integer and occurs as a whole number token is a
//!   *number* parameter: fuzzed as an integer, written back as decimal text.
//! - A NUL-terminated string inside a larger extent that something points at (a word
//!   `strtok` cut out of a line) is a *token*: a value of another length moves to
//!   room of its own with the pointers into it, the rest of the buffer stays.
//! - An integer argument whose decimal form occurs as a whole token is an integer
//!   parameter; one equal to a string parameter's length (or length + 1) is that
//!   string's length companion instead; and one right after a pointer argument that
//!   counts bytes there which occur in the input is the length companion of those
//!   counted bytes, which are the parameter (C's `(pointer, length)` pair: the
//!   call reads those bytes, not whatever NUL-terminated string starts there).
//! - An integer in memory that holds a string parameter's length is its length
//!   companion too: a 4- or 8-byte word beside a pointer to the string in the same
//!   object (`struct { char *s; size_t len; }`, either order), or a scalar global
//!   whose name shares its stem with the global that points at the string
//!   (`output_delimiter_string`, `output_delimiter_length`). A length cached beside
//!   its string would otherwise keep the recorded value while the fuzzer changes the
//!   string, and the code that trusts it never sees a new length.
//! - The unread rest of an input stream (stdin or an input file, from the point the
//!   program had consumed, read-ahead in a `FILE` buffer included) is a *stream*
//!   parameter of a unit whose call reads from it.
//!
//! Each parameter remembers every place it occurs (its origins), so lifting can write
//! a new value back. This is the string-comparison mapping of the bridge paper:
//! quick, and imprecise in ways lifting later filters out.

use std::collections::BTreeSet;
use trestle_abi::context::GlobalNames;
use trestle_abi::meta::{FnMeta, ValueKind};
use trestle_abi::unit::{
    Companion, InputRef, Origin, Param, ParamKind, ParamSite, Resize, SystemTest,
};
use trestle_abi::{Context, Extent, ExtentKind, Outcome, StreamPos, Value};

/// Strings shorter than this are mapped only where they are whole tokens.
pub const MIN_STRING: usize = 2;
/// Strings longer than this are not mapped (whole files and stream buffers).
pub const MAX_STRING: usize = 4096;
/// Origins kept per parameter.
pub const MAX_ORIGINS: usize = 16;
/// Occurrences looked at per value before the best [`MAX_ORIGINS`] are kept.
const SCAN_ORIGINS: usize = 256;
/// Bytes compared on each side of an occurrence with the memory around the value.
const SURROUNDINGS: usize = 32;
/// Bytes of agreeing surroundings that single out where a value came from.
const MIN_SURROUNDINGS: usize = 3;
/// A stream parameter covers at most this many bytes of what is left to read; the
/// rest stays as recorded (and the cut is kept in the parameter).
pub const STREAM_CAP: usize = 4096;

/// The parameters of one context, and the streams that could not be parameters.
#[derive(Debug, Default)]
pub struct Mapping {
    /// The parameters, stream parameters last.
    pub params: Vec<Param>,
    /// For each input stream the call read that is no parameter: why not.
    pub unmapped_streams: Vec<String>,
}

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

/// Which occurrences of a needle count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Match {
    /// Anywhere.
    Substring,
    /// Not inside a longer number.
    Number,
    /// Between separators (or the ends of the input).
    Token,
}

fn occurrences(inputs: &[(InputRef, &[u8])], needle: &[u8], rule: Match) -> Vec<Origin> {
    let mut out = Vec::new();
    if needle.is_empty() {
        return out;
    }
    for (input, hay) in inputs {
        let mut from = 0;
        while from + needle.len() <= hay.len() && out.len() < SCAN_ORIGINS {
            let Some(pos) = hay[from..].windows(needle.len()).position(|w| w == needle) else {
                break;
            };
            let at = from + pos;
            let end = at + needle.len();
            let boundary_ok = match rule {
                Match::Substring => true,
                Match::Number => {
                    (at == 0 || !is_number_char(hay[at - 1]))
                        && (end == hay.len() || !hay[end].is_ascii_digit())
                }
                Match::Token => {
                    (at == 0 || is_separator(hay[at - 1]))
                        && (end == hay.len() || is_separator(hay[end]))
                }
            };
            if boundary_ok {
                out.push(Origin {
                    input: input.clone(),
                    offset: at as u64,
                    len: needle.len() as u64,
                });
            }
            from = at + 1;
        }
    }
    out
}

/// The places a value of memory came from, of all its `found` occurrences: where the
/// bytes around an occurrence agree with the bytes around the value in its extent
/// (`around`, the value at `at`) on at least [`MIN_SURROUNDINGS`] bytes, only the
/// occurrences that agree most; otherwise all, in input order. At most
/// [`MAX_ORIGINS`]. A one-byte counted string ("x") occurs all over a sed script and
/// its input, but the copy of a line it points into agrees with the line it was
/// read from, not with the script.
fn by_surroundings(
    found: Vec<Origin>,
    inputs: &[(InputRef, &[u8])],
    around: &[u8],
    at: usize,
) -> Vec<Origin> {
    let agree = |o: &Origin| -> usize {
        let Some((_, hay)) = inputs.iter().find(|(i, _)| *i == o.input) else {
            return 0;
        };
        let (start, len) = (o.offset as usize, o.len as usize);
        let left = (1..=SURROUNDINGS)
            .take_while(|&k| k <= at && k <= start && around[at - k] == hay[start - k])
            .count();
        let right = (0..SURROUNDINGS)
            .take_while(|&k| {
                around
                    .get(at + len + k)
                    .is_some_and(|b| hay.get(start + len + k) == Some(b))
            })
            .count();
        left + right
    };
    let scores: Vec<usize> = found.iter().map(agree).collect();
    let best = scores.iter().copied().max().unwrap_or(0);
    let mut out: Vec<Origin> = if best >= MIN_SURROUNDINGS {
        found
            .into_iter()
            .zip(&scores)
            .filter(|(_, s)| **s == best)
            .map(|(o, _)| o)
            .collect()
    } else {
        found
    };
    out.truncate(MAX_ORIGINS);
    out
}

fn is_number_char(b: u8) -> bool {
    b.is_ascii_digit() || b == b'-' || b == b'+'
}

/// Bytes that end a token: anything but letters, digits, `_` and non-ASCII bytes.
fn is_separator(b: u8) -> bool {
    !(b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80)
}

/// The value of `s` if it is a decimal integer written the way the harness writes
/// one (no `+`, no leading zeros), so that writing the recorded value back gives
/// the same text.
fn canonical_decimal(s: &[u8]) -> Option<i64> {
    let v: i64 = std::str::from_utf8(s).ok()?.parse().ok()?;
    (v.to_string().as_bytes() == s).then_some(v)
}

fn sign_extend(v: u64, bits: u16) -> i64 {
    if bits == 0 || bits >= 64 {
        return v as i64;
    }
    let shift = 64 - bits as u32;
    ((v << shift) as i64) >> shift
}

/// Find the parameters of `ctx` in `test`. `meta` gives the argument kinds;
/// `outcome`, how the recorded call ended, tells which streams it read.
/// `names` names the globals (for the length companions among them).
pub fn map_params(
    ctx: &Context,
    meta: Option<&FnMeta>,
    names: &GlobalNames,
    test: &SystemTest,
    outcome: Option<&Outcome>,
) -> Mapping {
    map_rest(ctx, meta, names, test, map_streams(ctx, test, outcome))
}

/// The stream parameters alone (cheap: what carving needs to tell duplicates apart).
pub fn map_streams(ctx: &Context, test: &SystemTest, outcome: Option<&Outcome>) -> Mapping {
    let mut mapping = Mapping::default();
    stream_params(ctx, test, outcome, &mut mapping);
    mapping
}

/// The other parameters of `ctx`, before the stream parameters `streams` found.
pub fn map_rest(
    ctx: &Context,
    meta: Option<&FnMeta>,
    names: &GlobalNames,
    test: &SystemTest,
    streams: Mapping,
) -> Mapping {
    let inputs = inputs(test);
    let mut params = string_params(ctx, &inputs);
    int_params(ctx, meta, &inputs, &mut params);
    memory_companions(ctx, names, &mut params);
    params.extend(streams.params);
    Mapping {
        params,
        unmapped_streams: streams.unmapped_streams,
    }
}

/// Buffers of FILE objects: they hold whole stretches of input, not values of the
/// program.
fn stream_buffers(ctx: &Context) -> BTreeSet<u32> {
    let mut buffers = BTreeSet::new();
    for e in ctx
        .graph
        .extents
        .iter()
        .filter(|e| e.kind == ExtentKind::File)
    {
        for p in &e.pointers {
            if let Value::Ptr { extent, .. } = p.target {
                buffers.insert(extent);
            }
        }
    }
    buffers
}

fn string_params(ctx: &Context, inputs: &[(InputRef, &[u8])]) -> Vec<Param> {
    let extents = &ctx.graph.extents;
    let stream_buffers = stream_buffers(ctx);

    // Where strings may start: pointer arguments, pointers in memory, extent starts.
    // The first two are places something points at.
    let mut pointed = BTreeSet::new();
    for a in &ctx.args {
        if let Value::Ptr { extent, offset } = a {
            pointed.insert((*extent, *offset));
        }
    }
    for e in extents {
        for p in &e.pointers {
            if let Value::Ptr { extent, offset } = p.target {
                pointed.insert((extent, offset));
            }
        }
    }
    let mut starts = pointed.clone();
    for (i, e) in extents.iter().enumerate() {
        if e.bytes.is_some() {
            starts.insert((i as u32, 0));
        }
    }

    let mut params = Vec::new();
    for (ext, off) in starts {
        let Some(e) = extents.get(ext as usize) else {
            continue;
        };
        if stream_buffers.contains(&ext) || e.kind == ExtentKind::File {
            continue;
        }
        let Some(bytes) = &e.bytes else { continue };
        let Some(rest) = bytes.get(off as usize..) else {
            continue;
        };
        let (s, nul) = match rest.iter().position(|&b| b == 0) {
            Some(n) => (&rest[..n], true),
            None => (rest, false),
        };
        if s.is_empty() || s.len() > MAX_STRING || (s.len() < MIN_STRING && !nul) {
            continue;
        }
        let whole = off == 0
            && (s.len() as u64 + nul as u64) == e.len
            && !matches!(e.kind, ExtentKind::Global { .. });
        let resize = if whole {
            Resize::Extent
        } else if nul && pointed.contains(&(ext, off)) {
            Resize::Token
        } else {
            Resize::Fixed
        };
        let site = ParamSite::Memory {
            extent: ext,
            offset: off,
            len: s.len() as u64,
        };
        let number = canonical_decimal(s)
            .map(|_| occurrences(inputs, s, Match::Number))
            .filter(|o| !o.is_empty());
        let (kind, origins) = match number {
            Some(origins) => (ParamKind::Decimal { nul, resize }, origins),
            None => {
                let rule = if s.len() < MIN_STRING {
                    Match::Token
                } else {
                    Match::Substring
                };
                (
                    ParamKind::Bytes { nul, resize },
                    occurrences(inputs, s, rule),
                )
            }
        };
        if origins.is_empty() {
            continue;
        }
        let origins = by_surroundings(origins, inputs, bytes, off as usize);
        params.push(Param {
            site,
            kind,
            original: s.to_vec(),
            origins,
            companions: Vec::new(),
        });
    }
    params
}

/// Integer arguments, and length companions of the strings.
fn int_params(
    ctx: &Context,
    meta: Option<&FnMeta>,
    inputs: &[(InputRef, &[u8])],
    params: &mut Vec<Param>,
) {
    let kinds: Vec<ValueKind> = meta
        .map(|m| m.params.iter().map(|p| p.kind).collect())
        .unwrap_or_default();
    let pointed: Vec<(u32, u64)> = ctx
        .args
        .iter()
        .filter_map(|a| match a {
            Value::Ptr { extent, offset } => Some((*extent, *offset)),
            _ => None,
        })
        .collect();
    for (i, a) in ctx.args.iter().enumerate() {
        let Some(ValueKind::Int(bits)) = kinds.get(i).copied() else {
            continue;
        };
        if bits < 8 {
            continue;
        }
        let Value::Bits(raw) = a else { continue };
        let v = sign_extend(*raw, bits);
        let site = ParamSite::Arg(i as u32);
        // A length companion: prefer an exact length over length + 1, and a string
        // that an argument points at over one elsewhere.
        let mut companion_of: Option<(usize, i64, u8)> = None;
        for (k, p) in params.iter().enumerate() {
            let (
                ParamKind::Bytes { .. } | ParamKind::Decimal { .. },
                ParamSite::Memory { extent, offset, .. },
            ) = (p.kind, p.site)
            else {
                continue;
            };
            // One length per string: a flag after it that happens to equal it
            // (`str_append_modified (to, s, 2, 2)`) is no second one.
            if p.companions
                .iter()
                .any(|c| matches!(c.site, ParamSite::Arg(_)))
            {
                continue;
            }
            let len = p.original.len() as i64;
            // A one-byte value's length is 1: any flag or counter would match.
            if len < MIN_STRING as i64 {
                continue;
            }
            let delta = v - len;
            if delta != 0 && delta != 1 {
                continue;
            }
            let rank = (delta == 0) as u8 * 2 + pointed.contains(&(extent, offset)) as u8;
            if companion_of.is_none_or(|(_, _, r)| rank > r) {
                companion_of = Some((k, delta, rank));
            }
        }
        if let Some((k, delta, _)) = companion_of {
            params[k].companions.push(Companion { site, bits, delta });
            continue;
        }
        if let Some(span) = counted_span(ctx, i, v, inputs) {
            // The string the pointer's NUL ends runs past what the call reads: the
            // counted bytes replace it as the parameter there.
            let ParamSite::Memory { extent, offset, .. } = span.site else {
                unreachable!("a counted span lies in memory")
            };
            params.retain(|p| !matches!(p.site, ParamSite::Memory { extent: e, offset: o, len } if (e, o) == (extent, offset) && len > v as u64));
            params.push(Param {
                companions: vec![Companion {
                    site,
                    bits,
                    delta: 0,
                }],
                ..span
            });
            continue;
        }
        let text = v.to_string();
        let mut origins = occurrences(inputs, text.as_bytes(), Match::Number);
        if origins.is_empty() {
            continue;
        }
        origins.truncate(MAX_ORIGINS);
        params.push(Param {
            site,
            kind: ParamKind::Int { bits },
            original: text.into_bytes(),
            origins,
            companions: Vec::new(),
        });
    }
}

/// Words beside a pointer that may hold the length of what it points at: (offset
/// from the pointer's slot, width in bytes), wider first.
const SIBLINGS: [(i64, u64); 4] = [(8, 8), (8, 4), (-8, 8), (-4, 4)];
/// Characters two globals' names must share from their start to be one stem.
const MIN_STEM: usize = 3;

/// Length companions in memory (see the module comment): for each string parameter
/// of two bytes or more that has none there yet, the first word beside a pointer to
/// it that holds its length, else the one scalar global of its pointer global's stem
/// that does.
fn memory_companions(ctx: &Context, names: &GlobalNames, params: &mut [Param]) {
    let extents = &ctx.graph.extents;
    // The pointer slots at each target, found once (a context holds thousands).
    let mut slots_at: std::collections::HashMap<(u32, u64), Vec<(usize, u64)>> =
        std::collections::HashMap::new();
    for (i, e) in extents.iter().enumerate() {
        for s in &e.pointers {
            if let Value::Ptr { extent, offset } = s.target {
                slots_at
                    .entry((extent, offset))
                    .or_default()
                    .push((i, s.offset));
            }
        }
    }
    for p in params.iter_mut() {
        let (
            ParamKind::Bytes { .. } | ParamKind::Decimal { .. },
            ParamSite::Memory { extent, offset, .. },
        ) = (p.kind, p.site)
        else {
            continue;
        };
        let len = p.original.len() as u64;
        if len < MIN_STRING as u64
            || p.companions
                .iter()
                .any(|c| matches!(c.site, ParamSite::Memory { .. }))
        {
            continue;
        }
        let mut found = None;
        for &(holder, slot) in slots_at
            .get(&(extent, offset))
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            let e = &extents[holder];
            found = SIBLINGS.iter().find_map(|&(d, width)| {
                let at = slot.checked_add_signed(d)?;
                (word(e, at, width)? == len).then_some((holder, at, width))
            });
            if found.is_none() && matches!(e.kind, ExtentKind::Global { .. }) {
                found = stem_global(extents, names, e, len);
            }
            if found.is_some() {
                break;
            }
        }
        if let Some((holder, at, width)) = found {
            let site = ParamSite::Memory {
                extent: holder as u32,
                offset: at,
                len: width,
            };
            p.companions.push(Companion {
                site,
                bits: width as u16 * 8,
                delta: 0,
            });
        }
    }
}

/// The `width`-byte little-endian word at `at` in `e`, if `e` holds its bytes and
/// no pointer overlaps it.
fn word(e: &Extent, at: u64, width: u64) -> Option<u64> {
    let end = at.checked_add(width)?;
    let bytes = e.bytes.as_deref()?.get(at as usize..end as usize)?;
    if e.pointers
        .iter()
        .any(|s| s.offset < end && at < s.offset + 8)
    {
        return None;
    }
    let mut w = [0u8; 8];
    w[..width as usize].copy_from_slice(bytes);
    Some(u64::from_le_bytes(w))
}

/// The scalar global (4 or 8 bytes, writable, no pointer) holding `len` whose name
/// shares the longest stem with `pointer`'s, if that stem is [`MIN_STEM`] long and
/// no other such global shares it.
fn stem_global(
    extents: &[Extent],
    names: &GlobalNames,
    pointer: &Extent,
    len: u64,
) -> Option<(usize, u64, u64)> {
    let name_of = |e: &Extent| match e.kind {
        ExtentKind::Global {
            id,
            constant: false,
        } => names.get(&id),
        _ => None,
    };
    let stem = name_of(pointer)?;
    let mut best: Option<(usize, usize)> = None;
    let mut tied = false;
    for (i, g) in extents.iter().enumerate() {
        let Some(name) = name_of(g) else { continue };
        if name == stem || !(g.len == 4 || g.len == 8) || word(g, 0, g.len) != Some(len) {
            continue;
        }
        let shared = stem
            .bytes()
            .zip(name.bytes())
            .take_while(|(a, b)| a == b)
            .count();
        match best {
            Some((_, b)) if shared < b => {}
            Some((_, b)) if shared == b => tied = true,
            _ => {
                best = Some((i, shared));
                tied = false;
            }
        }
    }
    let (i, _) = best.filter(|&(_, shared)| shared >= MIN_STEM && !tied)?;
    Some((i, 0, extents[i].len))
}

/// The counted string of a `(pointer, length)` argument pair, C's most common way
/// to pass bytes that are not NUL-terminated (`str_append (to, s, len)`, `fwrite`):
/// the `v` bytes at the pointer argument just before argument `i` (one byte or
/// more), if they occur in the input. Its length argument follows the string's length; fuzzed on its own,
/// it would read past the buffer, a crash no input of the program can cause (sed's
/// `str_append_modified (to, "at concat cat.", 2, ...)` read 2 bytes of a word, and a
/// length of -2 "crashed" it).
fn counted_span(ctx: &Context, i: usize, v: i64, inputs: &[(InputRef, &[u8])]) -> Option<Param> {
    let Value::Ptr { extent, offset } = *ctx.args.get(i.checked_sub(1)?)? else {
        return None;
    };
    // Even one byte: the pair says it is a string, where a lone byte would be any
    // flag or digit.
    let n = usize::try_from(v)
        .ok()
        .filter(|n| (1..=MAX_STRING).contains(n))?;
    let e = ctx.graph.extents.get(extent as usize)?;
    if e.kind == ExtentKind::File || stream_buffers(ctx).contains(&extent) {
        return None;
    }
    let bytes = e.bytes.as_deref()?;
    let span = bytes.get(offset as usize..)?.get(..n)?;
    if span.contains(&0) {
        return None;
    }
    let whole = offset == 0 && n as u64 == e.len && !matches!(e.kind, ExtentKind::Global { .. });
    let resize = if whole { Resize::Extent } else { Resize::Token };
    // Bytes, even where they spell a number: a counted string is copied, compared
    // or converted byte by byte (sed's `ascii_only` looks for a byte above 0x7f in a
    // replacement that was "1"), where a number is parsed from a NUL-terminated one.
    let origins = occurrences(inputs, span, Match::Substring);
    if origins.is_empty() {
        return None;
    }
    let origins = by_surroundings(origins, inputs, bytes, offset as usize);
    let site = ParamSite::Memory {
        extent,
        offset,
        len: n as u64,
    };
    Some(Param {
        site,
        kind: ParamKind::Bytes { nul: false, resize },
        original: span.to_vec(),
        origins,
        companions: Vec::new(),
    })
}

/// The input a stream reads, if it is one of the system test's.
fn stream_input(s: &StreamPos, test: &SystemTest) -> Option<InputRef> {
    match &s.path {
        None if s.fd == 0 => test.stdin.as_ref().map(|_| InputRef::Stdin),
        None => None,
        Some(p) => {
            let p = p.strip_prefix("./").unwrap_or(p);
            test.files
                .contains_key(p)
                .then(|| InputRef::File(p.to_owned()))
        }
    }
}

/// True if the call moved the stream on: the rest of it is input the call reads.
/// A call whose end was not recorded (it crashed, or the process ended in it)
/// counts as reading.
fn reads(s: &StreamPos, outcome: Option<&Outcome>) -> bool {
    let after = match outcome {
        Some(Outcome::Returned(st)) | Some(Outcome::Exited { state: st, .. }) => &st.streams,
        Some(Outcome::Crashed { .. } | Outcome::Threw) | None => return true,
    };
    // A stream that is no input stream after the call was closed in it: closing
    // follows reading (cut's `main` reads stdin to its end, then closes it). A
    // descriptor that became something else during the call (a pipe put over
    // stdin, say) was replaced, not read.
    after.iter().find(|a| a.fd == s.fd).is_none_or(|a| {
        a.offset.is_some() == s.offset.is_some()
            && (a.consumed() != s.consumed()
                || a.offset != s.offset
                || a.mark != s.mark
                || a.pending != s.pending)
    })
}

/// Stream parameters: what was left to read of each input stream the call read.
fn stream_params(
    ctx: &Context,
    test: &SystemTest,
    outcome: Option<&Outcome>,
    mapping: &mut Mapping,
) {
    for s in &ctx.streams {
        let Some(input) = stream_input(s, test) else {
            continue;
        };
        if !reads(s, outcome) {
            continue;
        }
        if let Some(problem) = &s.problem {
            mapping.unmapped_streams.push(problem.clone());
            continue;
        }
        let bytes = match &input {
            InputRef::Stdin => test.stdin.as_deref().unwrap_or_default(),
            InputRef::File(n) => test.files.get(n).map(Vec::as_slice).unwrap_or_default(),
            InputRef::Arg(_) => continue,
        };
        let Some(consumed) = s.consumed().filter(|&c| c <= bytes.len() as u64) else {
            mapping.unmapped_streams.push(
                "read position outside the input (the file changed while it was read)".into(),
            );
            continue;
        };
        if s.file.is_some_and(|e| {
            ctx.graph
                .extents
                .get(e as usize)
                .is_none_or(|x| x.bytes.is_none())
        }) {
            mapping
                .unmapped_streams
                .push("its FILE was cut from the context".into());
            continue;
        }
        let rest = &bytes[consumed as usize..];
        let value = &rest[..rest.len().min(STREAM_CAP)];
        mapping.params.push(Param {
            site: ParamSite::Stream {
                fd: s.fd,
                file: s.file,
                buffered: s.buffered,
            },
            kind: ParamKind::Stream {
                cut: (rest.len() - value.len()) as u64,
            },
            original: value.to_vec(),
            origins: vec![Origin {
                input,
                offset: consumed,
                len: value.len() as u64,
            }],
            companions: Vec::new(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trestle_abi::context::Graph;
    use trestle_abi::meta::ParamMeta;
    use trestle_abi::{Extent, PtrSlot};

    fn heap(bytes: &[u8]) -> Extent {
        Extent {
            kind: ExtentKind::Heap,
            len: bytes.len() as u64,
            align: 16,
            bytes: Some(bytes.to_vec()),
            pointers: vec![],
        }
    }

    fn meta(kinds: &[ValueKind]) -> FnMeta {
        FnMeta {
            id: 1,
            name: "f".into(),
            demangled: None,
            file: None,
            line: 0,
            params: kinds
                .iter()
                .map(|&kind| ParamMeta {
                    name: None,
                    kind,
                    byval_size: None,
                })
                .collect(),
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
            args: vec![
                Value::Ptr {
                    extent: 0,
                    offset: 0,
                },
                Value::Bits(42342),
                Value::Bits(5),
                Value::Bits(7),
            ],
            graph: Graph {
                extents: vec![heap(b"admin\0")],
                ..Graph::default()
            },
            locale: vec![],
            stdio_modes: vec![],
            fds: vec![],
            streams: vec![],
        };
        let test = SystemTest {
            args: vec!["login".into(), "admin".into()],
            stdin: Some(b"set 1423423 42342\n".to_vec()),
            ..Default::default()
        };
        let m = meta(&[
            ValueKind::Ptr,
            ValueKind::Int(32),
            ValueKind::Int(64),
            ValueKind::Int(32),
        ]);
        let params = map_params(&ctx, Some(&m), &GlobalNames::new(), &test, None).params;
        let s = &params[0];
        assert_eq!(s.original, b"admin");
        assert_eq!(
            s.kind,
            ParamKind::Bytes {
                nul: true,
                resize: Resize::Extent
            }
        );
        assert_eq!(
            s.origins,
            vec![Origin {
                input: InputRef::Arg(1),
                offset: 0,
                len: 5
            }]
        );
        // 5 is the string's length: a companion, not a parameter of its own.
        assert_eq!(
            s.companions,
            vec![Companion {
                site: ParamSite::Arg(2),
                bits: 64,
                delta: 0
            }]
        );
        // 42342 occurs as a whole token (offset 12), not inside 1423423.
        let n = &params[1];
        assert_eq!(n.site, ParamSite::Arg(1));
        assert_eq!(
            n.origins,
            vec![Origin {
                input: InputRef::Stdin,
                offset: 12,
                len: 5
            }]
        );
        // 7 does not occur in the input: no parameter.
        assert_eq!(params.len(), 2);
    }

    #[test]
    fn a_length_after_a_pointer_counts_the_bytes_it_points_at() {
        // `str_append (to, s, 2)`, `s` pointing into a word of a line: the call reads
        // "at", not the NUL-terminated rest of the line.
        let ctx = Context {
            fn_id: 1,
            args: vec![
                Value::Ptr {
                    extent: 0,
                    offset: 0,
                },
                Value::Ptr {
                    extent: 1,
                    offset: 1,
                },
                Value::Bits(2),
                Value::Bits(2),
            ],
            graph: Graph {
                extents: vec![heap(&[0u8; 16]), heap(b"cat concat cat.\0")],
                ..Graph::default()
            },
            locale: vec![],
            stdio_modes: vec![],
            fds: vec![],
            streams: vec![],
        };
        let test = SystemTest {
            args: vec!["s/\\(a\\)/\\2/".into()],
            stdin: Some(b"cat concat cat.\n".to_vec()),
            ..Default::default()
        };
        let m = meta(&[
            ValueKind::Ptr,
            ValueKind::Ptr,
            ValueKind::Int(64),
            ValueKind::Int(32),
        ]);
        let params = map_params(&ctx, Some(&m), &GlobalNames::new(), &test, None).params;
        let at = params
            .iter()
            .find(|p| {
                p.site
                    == ParamSite::Memory {
                        extent: 1,
                        offset: 1,
                        len: 2,
                    }
            })
            .expect("the counted bytes");
        assert_eq!(
            (at.original.as_slice(), at.kind),
            (
                &b"at"[..],
                ParamKind::Bytes {
                    nul: false,
                    resize: Resize::Token
                }
            )
        );
        assert_eq!(
            at.companions,
            vec![Companion {
                site: ParamSite::Arg(2),
                bits: 64,
                delta: 0
            }]
        );
        // The length is no parameter of its own (it occurs as the "2" of "\2"), and
        // the rest of the line after the pointer is not one either.
        assert!(
            !params.iter().any(|p| p.site == ParamSite::Arg(2)),
            "{params:#?}"
        );
        assert!(
            !params.iter().any(
                |p| matches!(p.site, ParamSite::Memory { extent: 1, offset: 1, len } if len > 2)
            ),
            "{params:#?}"
        );
        // The last argument follows the length, not a pointer: an integer as before.
        assert!(
            params
                .iter()
                .any(|p| p.site == ParamSite::Arg(3) && p.kind == ParamKind::Int { bits: 32 }),
            "{params:#?}"
        );
        // The whole line, from its start, is still a parameter.
        assert!(
            params.iter().any(|p| p.original == b"cat concat cat."),
            "{params:#?}"
        );
        // Counted bytes that spell a number are bytes all the same.
        let mut digits = ctx.clone();
        digits.graph.extents[1] = heap(b"s/1/x/\0");
        digits.args[1] = Value::Ptr {
            extent: 1,
            offset: 2,
        };
        digits.args[2] = Value::Bits(1);
        let test = SystemTest {
            args: vec!["s/1/x/".into()],
            ..Default::default()
        };
        let params = map_params(&digits, Some(&m), &GlobalNames::new(), &test, None).params;
        let one = params
            .iter()
            .find(|p| p.original == b"1")
            .expect("the counted digit");
        assert_eq!(
            one.kind,
            ParamKind::Bytes {
                nul: false,
                resize: Resize::Token
            }
        );
    }

    #[test]
    fn a_value_found_at_many_places_comes_from_the_one_whose_surroundings_agree() {
        // `str_append_modified (to, s, 1, ...)`, `s` pointing at the "x" of the line
        // being edited: "x" occurs all over the script too, but only the line agrees
        // with the bytes around it.
        let line = b"say x to me";
        let ctx = Context {
            fn_id: 1,
            args: vec![
                Value::Ptr {
                    extent: 0,
                    offset: 0,
                },
                Value::Ptr {
                    extent: 1,
                    offset: 4,
                },
                Value::Bits(1),
            ],
            graph: Graph {
                extents: vec![heap(&[0u8; 16]), heap(&[&line[..], b"\0"].concat())],
                ..Graph::default()
            },
            locale: vec![],
            stdio_modes: vec![],
            fds: vec![],
            streams: vec![],
        };
        let script = "s/x/\\U&x/;/x/x;x;x;x;x;x;x;x;x;x;x;x;x;x;x;x;x;x";
        let test = SystemTest {
            args: vec![script.into()],
            stdin: Some([&b"no\n"[..], line, b"\n"].concat()),
            ..Default::default()
        };
        let m = meta(&[ValueKind::Ptr, ValueKind::Ptr, ValueKind::Int(64)]);
        let params = map_params(&ctx, Some(&m), &GlobalNames::new(), &test, None).params;
        let x = params
            .iter()
            .find(|p| p.original == b"x")
            .expect("the counted byte");
        assert_eq!(
            x.origins,
            vec![Origin {
                input: InputRef::Stdin,
                offset: 7,
                len: 1
            }]
        );
        // Where nothing around it agrees, every place stays (in input order).
        let mut alone = ctx.clone();
        alone.graph.extents[1] = heap(b"x\0");
        alone.args[1] = Value::Ptr {
            extent: 1,
            offset: 0,
        };
        let params = map_params(&alone, Some(&m), &GlobalNames::new(), &test, None).params;
        let x = params
            .iter()
            .find(|p| p.original == b"x")
            .expect("the counted byte");
        assert_eq!(x.origins.len(), MAX_ORIGINS);
        assert_eq!(
            x.origins[0],
            Origin {
                input: InputRef::Arg(0),
                offset: 2,
                len: 1
            }
        );
    }

    fn global(id: u64, bytes: &[u8]) -> Extent {
        Extent {
            kind: ExtentKind::Global {
                id,
                constant: false,
            },
            ..heap(bytes)
        }
    }

    fn ptr_to(extent: u32) -> Vec<PtrSlot> {
        vec![PtrSlot {
            offset: 0,
            target: Value::Ptr { extent, offset: 0 },
        }]
    }

    #[test]
    fn a_length_kept_beside_its_string_follows_it() {
        // `struct { char *s; size_t len; int flags; }` pointing at "admin", with a
        // flag that happens to equal the length too.
        let mut holder = heap(&[&[0u8; 8][..], &5u64.to_le_bytes(), &5u32.to_le_bytes()].concat());
        holder.pointers = ptr_to(1);
        let ctx = Context {
            fn_id: 1,
            args: vec![Value::Ptr {
                extent: 0,
                offset: 0,
            }],
            graph: Graph {
                extents: vec![holder, heap(b"admin\0")],
                ..Graph::default()
            },
            locale: vec![],
            stdio_modes: vec![],
            fds: vec![],
            streams: vec![],
        };
        let test = SystemTest {
            args: vec!["admin".into()],
            ..Default::default()
        };
        let params = map_params(&ctx, None, &GlobalNames::new(), &test, None).params;
        let admin = params
            .iter()
            .find(|p| p.original == b"admin")
            .expect("the string");
        assert_eq!(
            admin.companions,
            vec![Companion {
                site: ParamSite::Memory {
                    extent: 0,
                    offset: 8,
                    len: 8
                },
                bits: 64,
                delta: 0
            }]
        );
        // Length first, then the pointer, as a 4-byte count.
        let mut before = heap(&[&[0u8; 4][..], &5u32.to_le_bytes(), &[0u8; 8]].concat());
        before.pointers = vec![PtrSlot {
            offset: 8,
            target: Value::Ptr {
                extent: 1,
                offset: 0,
            },
        }];
        let mut ctx2 = ctx.clone();
        ctx2.graph.extents[0] = before;
        let params = map_params(&ctx2, None, &GlobalNames::new(), &test, None).params;
        let admin = params
            .iter()
            .find(|p| p.original == b"admin")
            .expect("the string");
        assert_eq!(
            admin.companions,
            vec![Companion {
                site: ParamSite::Memory {
                    extent: 0,
                    offset: 4,
                    len: 4
                },
                bits: 32,
                delta: 0
            }]
        );
        // A word of another value beside it is no length.
        let mut other = heap(&[&[0u8; 8][..], &6u64.to_le_bytes()].concat());
        other.pointers = ptr_to(1);
        ctx2.graph.extents[0] = other;
        let params = map_params(&ctx2, None, &GlobalNames::new(), &test, None).params;
        assert!(
            params.iter().all(|p| p.companions.is_empty()),
            "{params:#?}"
        );
    }

    #[test]
    fn a_global_length_of_the_same_stem_follows_its_string() {
        // cut's `output_delimiter_string` points at the argument's "<->";
        // `output_delimiter_length` caches its length, and an unrelated counter
        // holds 3 as well.
        let mut pointer = global(1, &[0u8; 8]);
        pointer.pointers = ptr_to(3);
        let mut arg = heap(b"--output-delimiter=<->\0");
        arg.kind = ExtentKind::Arg;
        let ctx = Context {
            fn_id: 1,
            args: vec![],
            graph: Graph {
                extents: vec![
                    pointer,
                    global(2, &3u64.to_le_bytes()),
                    global(4, &3u32.to_le_bytes()),
                    arg,
                ],
                ..Graph::default()
            },
            locale: vec![],
            stdio_modes: vec![],
            fds: vec![],
            streams: vec![],
        };
        // The pointer targets offset 0 here; aim it at the delimiter itself.
        let mut ctx = ctx;
        ctx.graph.extents[0].pointers[0].target = Value::Ptr {
            extent: 3,
            offset: 19,
        };
        let names: GlobalNames = [
            (1, "output_delimiter_string"),
            (2, "output_delimiter_length"),
            (4, "line_count"),
        ]
        .into_iter()
        .map(|(i, n)| (i, n.to_owned()))
        .collect();
        let test = SystemTest {
            args: vec!["--output-delimiter=<->".into()],
            ..Default::default()
        };
        let params = map_params(&ctx, None, &names, &test, None).params;
        let delim = params
            .iter()
            .find(|p| p.original == b"<->")
            .expect("the delimiter");
        assert_eq!(
            delim.companions,
            vec![Companion {
                site: ParamSite::Memory {
                    extent: 1,
                    offset: 0,
                    len: 8
                },
                bits: 64,
                delta: 0
            }]
        );
        // A global of another stem is no companion, however equal its value.
        let names: GlobalNames = [
            (1, "output_delimiter_string"),
            (2, "line_count"),
            (4, "column"),
        ]
        .into_iter()
        .map(|(i, n)| (i, n.to_owned()))
        .collect();
        let params = map_params(&ctx, None, &names, &test, None).params;
        assert!(
            params.iter().all(|p| p.companions.is_empty()),
            "{params:#?}"
        );
        // Nor are two of one stem: which one caches the length is not known.
        let names: GlobalNames = [
            (1, "output_delimiter_string"),
            (2, "output_delimiter_length"),
            (4, "output_delimiter_width"),
        ]
        .into_iter()
        .map(|(i, n)| (i, n.to_owned()))
        .collect();
        let params = map_params(&ctx, None, &names, &test, None).params;
        assert!(
            params.iter().all(|p| p.companions.is_empty()),
            "{params:#?}"
        );
    }

    #[test]
    fn a_processed_value_gets_no_parameter() {
        // A hash of the input never occurs in it.
        let ctx = Context {
            fn_id: 1,
            args: vec![Value::Bits(0x9e3779b97f4a7c15)],
            graph: Graph::default(),
            locale: vec![],
            stdio_modes: vec![],
            fds: vec![],
            streams: vec![],
        };
        let test = SystemTest {
            args: vec!["token".into(), "s3cret".into()],
            ..Default::default()
        };
        assert!(map_params(
            &ctx,
            Some(&meta(&[ValueKind::Int(64)])),
            &GlobalNames::new(),
            &test,
            None
        )
        .params
        .is_empty());
    }

    /// A line `strtok` cut in place, with an argv-like array pointing at its words.
    fn tokenized(line: &[u8], starts: &[u64]) -> Context {
        let mut words = heap(&vec![0u8; 8 * starts.len()]);
        words.pointers = starts
            .iter()
            .enumerate()
            .map(|(i, &o)| PtrSlot {
                offset: 8 * i as u64,
                target: Value::Ptr {
                    extent: 1,
                    offset: o,
                },
            })
            .collect();
        let mut buf = heap(line);
        buf.len = 64;
        buf.bytes.as_mut().unwrap().resize(64, 0);
        Context {
            fn_id: 1,
            args: vec![Value::Ptr {
                extent: 0,
                offset: 0,
            }],
            graph: Graph {
                extents: vec![words, buf],
                ..Graph::default()
            },
            locale: vec![],
            stdio_modes: vec![],
            fds: vec![],
            streams: vec![],
        }
    }

    #[test]
    fn words_inside_a_line_are_tokens_and_numbers_are_numbers() {
        let ctx = tokenized(b"set\0ab\x005\0", &[0, 4, 7]);
        let test = SystemTest {
            stdin: Some(b"get ab\nset ab 5\n".to_vec()),
            ..Default::default()
        };
        let params = map_params(
            &ctx,
            Some(&meta(&[ValueKind::Ptr])),
            &GlobalNames::new(),
            &test,
            None,
        )
        .params;
        let by_value = |v: &[u8]| {
            params
                .iter()
                .find(|p| p.original == v)
                .unwrap_or_else(|| panic!("no parameter {v:?}"))
        };
        // The verb starts the buffer but does not fill it: a token, not the extent.
        assert_eq!(
            by_value(b"set").kind,
            ParamKind::Bytes {
                nul: true,
                resize: Resize::Token
            }
        );
        assert_eq!(
            by_value(b"ab").kind,
            ParamKind::Bytes {
                nul: true,
                resize: Resize::Token
            }
        );
        assert_eq!(by_value(b"ab").origins.len(), 2);
        // The one-digit count is a whole token and a number.
        let n = by_value(b"5");
        assert_eq!(
            n.kind,
            ParamKind::Decimal {
                nul: true,
                resize: Resize::Token
            }
        );
        assert_eq!(
            n.origins,
            vec![Origin {
                input: InputRef::Stdin,
                offset: 14,
                len: 1
            }]
        );
    }

    #[test]
    fn a_single_byte_maps_only_where_it_is_a_whole_token() {
        let ctx = tokenized(b"x\0", &[0]);
        // "x" occurs inside "max" and "x1" but never alone.
        let test = SystemTest {
            stdin: Some(b"max x1\n".to_vec()),
            ..Default::default()
        };
        assert!(map_params(&ctx, None, &GlobalNames::new(), &test, None)
            .params
            .is_empty());
        let test = SystemTest {
            args: vec!["-d".into(), "x".into()],
            ..Default::default()
        };
        let params = map_params(&ctx, None, &GlobalNames::new(), &test, None).params;
        assert_eq!(params.len(), 1);
        assert_eq!(
            params[0].origins,
            vec![Origin {
                input: InputRef::Arg(1),
                offset: 0,
                len: 1
            }]
        );
    }

    fn stdin_at(offset: u64, pending: u64) -> StreamPos {
        StreamPos {
            fd: 0,
            file: None,
            buffered: true,
            path: None,
            offset: Some(offset),
            pending,
            mark: 0,
            problem: None,
        }
    }

    fn returned(streams: Vec<StreamPos>) -> Outcome {
        Outcome::Returned(trestle_abi::State {
            ret: Value::Bits(0),
            graph: Graph::default(),
            streams,
        })
    }

    #[test]
    fn the_unread_rest_of_a_stream_the_call_reads_is_a_parameter() {
        let input = b"set ab 5\nget ab\nlist\n".to_vec();
        let mut ctx = tokenized(b"", &[]);
        // The FILE read the whole input ahead; the program consumed the first line.
        ctx.streams = vec![stdin_at(input.len() as u64, input.len() as u64 - 9)];
        let test = SystemTest {
            stdin: Some(input.clone()),
            ..Default::default()
        };
        let after = returned(vec![stdin_at(input.len() as u64, 0)]);
        let m = map_params(&ctx, None, &GlobalNames::new(), &test, Some(&after));
        let p = m.params.last().expect("a stream parameter");
        assert_eq!(
            p.site,
            ParamSite::Stream {
                fd: 0,
                file: None,
                buffered: true
            }
        );
        assert_eq!(p.kind, ParamKind::Stream { cut: 0 });
        assert_eq!(p.original, b"get ab\nlist\n");
        assert_eq!(
            p.origins,
            vec![Origin {
                input: InputRef::Stdin,
                offset: 9,
                len: 12
            }]
        );
        // A call that left the stream where it was does not read it.
        let same = returned(ctx.streams.clone());
        assert!(
            map_params(&ctx, None, &GlobalNames::new(), &test, Some(&same))
                .params
                .iter()
                .all(|p| p.kind != ParamKind::Stream { cut: 0 })
        );
        // One that closed it did (a `main` reads its input to the end, then closes it).
        let closed = returned(vec![]);
        assert!(
            map_params(&ctx, None, &GlobalNames::new(), &test, Some(&closed))
                .params
                .iter()
                .any(|p| p.kind == ParamKind::Stream { cut: 0 })
        );
        // A long rest is capped, and the cut recorded.
        let long = vec![b'a'; STREAM_CAP + 100];
        let mut ctx2 = ctx.clone();
        ctx2.streams = vec![stdin_at(0, 0)];
        let test2 = SystemTest {
            stdin: Some(long),
            ..Default::default()
        };
        let p = map_params(&ctx2, None, &GlobalNames::new(), &test2, Some(&after))
            .params
            .pop()
            .unwrap();
        assert_eq!(
            (p.original.len(), p.kind),
            (STREAM_CAP, ParamKind::Stream { cut: 100 })
        );
    }

    #[test]
    fn a_stream_that_cannot_be_restored_is_no_parameter_and_says_why() {
        let mut ctx = tokenized(b"", &[]);
        ctx.streams = vec![StreamPos {
            offset: None,
            problem: Some("not seekable (a pipe, socket or terminal)".into()),
            ..stdin_at(0, 0)
        }];
        let test = SystemTest {
            stdin: Some(b"a\n".to_vec()),
            ..Default::default()
        };
        let m = map_params(&ctx, None, &GlobalNames::new(), &test, None);
        assert!(m.params.is_empty());
        assert_eq!(
            m.unmapped_streams,
            vec!["not seekable (a pipe, socket or terminal)".to_owned()]
        );
    }
}

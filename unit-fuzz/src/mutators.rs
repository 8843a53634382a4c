//! Parameter-aware mutators: the value mutations of the bridge paper, applied to one
//! decoded parameter at a time (0, INT_MIN, INT_MAX, bit flips and random values for
//! integers and numbers held as text; bit flips, random bytes, random ASCII, NUL
//! runs, 0xFF runs and repeated pieces of the recorded value for strings; a
//! dictionary word for either), and structure-keeping edits for the unread rest of
//! a stream (a word or number put in place of one, a line repeated, dropped or
//! swapped), which keep the rest of the input intact.
//!
//! Small steps rarely make a string thousands of bytes long, or a line repeat
//! hundreds of times, when nothing on the way covers anything new: a length
//! condition (a block boundary, a count kept in a byte) would stay out of reach. So
//! a string, a word or a line is also stretched to an [`interesting_length`] by
//! repeating a piece of itself ([`repeat_to`]), and a line repeated that many times.

use libafl::inputs::{BytesInput, HasMutatorBytes};
use libafl::mutators::{MutationResult, Mutator};
use libafl::state::HasRand;
use libafl::Error;
use libafl_bolts::rands::Rand;
use libafl_bolts::Named;
use std::borrow::Cow;
use std::num::NonZeroUsize;
use trestle_abi::fuzz::{decode_values, encode_values, ParamValue};
use trestle_abi::unit::{Param, ParamKind};

/// Longest string a mutation makes: past the 4 KiB where buffers and blocks often
/// end, so that a length condition beyond them is within reach.
const MAX_LEN: usize = 16 << 10;

/// Longest stream a mutation makes.
const MAX_STREAM: usize = 4 * MAX_LEN;

/// One mutation in this many changes a length (a stretch, a line repeated many
/// times). Long inputs run slowly: were it one in nine, the bridge's first unit of
/// `requests` ran 29,236 executions in a slice where it had run 206,830.
pub const LENGTH_ODDS: usize = 40;

/// Whether this mutation is to change a length: one in `odds`.
pub fn length_turn<R: Rand>(rand: &mut R, odds: usize) -> bool {
    rand.below(nz(odds)) == 0
}

/// A length that boundaries make interesting, at most `max`: one below, at or one
/// above a power of two from 8 to 8,192, or anywhere in the upper half of the octave
/// below it (where a count kept in a signed or unsigned byte goes wrong: 128-255).
/// Each power is 1/√2 as likely as the one below it, so that a long input's cost is
/// paid seldom: the mean is near 256, and 4,096 and 8,192 come two times in a
/// hundred.
pub fn interesting_length<R: Rand>(rand: &mut R, max: usize) -> usize {
    let mut k = 3;
    while k < 13 && rand.below(nz(1000)) < 707 {
        k += 1;
    }
    let p = 1usize << k;
    let n = match rand.below(nz(4)) {
        0 => p - 1,
        1 => p,
        2 => p + 1,
        _ => p / 2 + 1 + rand.below(nz(p / 2)),
    };
    n.min(max)
}

/// `piece` repeated to exactly `len` bytes, the last copy cut short (empty for an
/// empty piece).
pub fn repeat_to(piece: &[u8], len: usize) -> Vec<u8> {
    if piece.is_empty() {
        return Vec::new();
    }
    piece.iter().copied().cycle().take(len).collect()
}

/// `b` with the span `s..e` repeated in place (or cut) until the whole is `len`
/// bytes long; when the rest alone is longer, `b` cut to `len`.
pub fn stretch_span(b: &[u8], s: usize, e: usize, len: usize) -> Vec<u8> {
    let rest = b.len() - (e - s);
    if len <= rest || s == e {
        let mut out = b.to_vec();
        out.truncate(len);
        return out;
    }
    let mut out = b[..s].to_vec();
    out.extend(repeat_to(&b[s..e], len - rest));
    out.extend_from_slice(&b[e..]);
    out
}

/// A random non-empty span of `b` (which must not be empty).
fn some_span<R: Rand>(rand: &mut R, b: &[u8]) -> (usize, usize) {
    let s = rand.below(nz(b.len()));
    (s, s + 1 + rand.below(nz(b.len() - s)))
}

/// Mutates one parameter of an encoded input.
pub struct ParamValueMutator {
    params: Vec<Param>,
    words: Vec<Vec<u8>>,
    ints: Vec<i64>,
}

impl ParamValueMutator {
    /// A mutator for `params`, with dictionary words and integers.
    pub fn new(params: Vec<Param>, words: Vec<Vec<u8>>, ints: Vec<i64>) -> Self {
        ParamValueMutator {
            params,
            words,
            ints,
        }
    }
}

impl Named for ParamValueMutator {
    fn name(&self) -> &Cow<'static, str> {
        static NAME: Cow<'static, str> = Cow::Borrowed("ParamValueMutator");
        &NAME
    }
}

fn nz(n: usize) -> NonZeroUsize {
    NonZeroUsize::new(n.max(1)).expect("max(1) is non-zero")
}

fn int_limits(bits: u16) -> (i64, i64) {
    if bits >= 64 {
        (i64::MIN, i64::MAX)
    } else {
        (-(1i64 << (bits - 1)), (1i64 << (bits - 1)) - 1)
    }
}

impl<S: HasRand> Mutator<BytesInput, S> for ParamValueMutator {
    fn mutate(&mut self, state: &mut S, input: &mut BytesInput) -> Result<MutationResult, Error> {
        if self.params.is_empty() {
            return Ok(MutationResult::Skipped);
        }
        let mut values = decode_values(&self.params, input.mutator_bytes());
        let rand = state.rand_mut();
        let k = rand.below(nz(self.params.len()));
        let p = &self.params[k];
        let new = match (&values[k], p.kind) {
            (ParamValue::Int(v), ParamKind::Int { .. } | ParamKind::Decimal { .. }) => {
                let bits = match p.kind {
                    ParamKind::Int { bits } => bits,
                    _ => 64,
                };
                ParamValue::Int(mutate_int(rand, *v, bits, &self.ints))
            }
            (ParamValue::Bytes(b), ParamKind::Bytes { .. }) => {
                ParamValue::Bytes(mutate_bytes(rand, b, &p.original, &self.words))
            }
            (ParamValue::Bytes(b), ParamKind::Stream { .. }) => {
                ParamValue::Bytes(mutate_stream(rand, b, &self.words, &self.ints))
            }
            (v, _) => v.clone(),
        };
        if new == values[k] {
            return Ok(MutationResult::Skipped);
        }
        values[k] = new;
        *input = BytesInput::new(encode_values(&values));
        Ok(MutationResult::Mutated)
    }

    fn post_exec(
        &mut self,
        _state: &mut S,
        _new: Option<libafl::corpus::CorpusId>,
    ) -> Result<(), Error> {
        Ok(())
    }
}

/// An integer of `bits` bits (a number held as text counts as 64): zero, a limit, a
/// bit flipped, a random value, a dictionary integer or a small step from `v`.
fn mutate_int<R: Rand>(rand: &mut R, v: i64, bits: u16, ints: &[i64]) -> i64 {
    let (lo, hi) = int_limits(bits.max(8));
    match rand.below(nz(7)) {
        0 => 0,
        1 => lo,
        2 => hi,
        3 => v ^ (1i64 << rand.below(nz(bits.max(8) as usize))),
        4 => rand.next() as i64,
        5 if !ints.is_empty() => ints[rand.below(nz(ints.len()))],
        _ => v.wrapping_add(rand.below(nz(33)) as i64 - 16),
    }
}

/// A string: a bit flipped, random bytes or ASCII, a run of NULs or 0xFFs appended,
/// a piece of the recorded value repeated, a dictionary word, a piece of it stretched
/// to an interesting length, or nothing; at most [`MAX_LEN`] bytes.
fn mutate_bytes<R: Rand>(rand: &mut R, b: &[u8], original: &[u8], words: &[Vec<u8>]) -> Vec<u8> {
    let mut b = b.to_vec();
    if length_turn(rand, LENGTH_ODDS) && (!b.is_empty() || !original.is_empty()) {
        // Half the time the recorded value grows: its bytes are ones the program took
        // at that place in the system input. sed's case-block crash came from
        // "ELLO" grown to 8 KiB out of mutated bytes, which the lifted script's `\w*`
        // no longer matched as a whole; "LLLL…" it would have.
        if b.is_empty() || (!original.is_empty() && rand.below(nz(2)) == 0) {
            b = original.to_vec();
        }
        let (s, e) = some_span(rand, &b);
        return stretch_span(&b, s, e, interesting_length(rand, MAX_LEN));
    }
    match rand.below(nz(8)) {
        0 if !b.is_empty() => {
            let i = rand.below(nz(b.len()));
            b[i] ^= 1 << rand.below(nz(8));
        }
        1 => {
            let n = rand.below(nz(64)) + 1;
            b = (0..n).map(|_| rand.next() as u8).collect();
        }
        2 => {
            let n = rand.below(nz(64)) + 1;
            b = (0..n).map(|_| 0x20 + (rand.below(nz(95)) as u8)).collect();
        }
        3 => {
            let n = rand.below(nz(64)) + 1;
            b.extend(std::iter::repeat_n(0u8, n));
        }
        4 => {
            let n = rand.below(nz(64)) + 1;
            b.extend(std::iter::repeat_n(0xffu8, n));
        }
        5 if !original.is_empty() => {
            // Repeat a piece of the recorded value.
            let o = original;
            let s = rand.below(nz(o.len()));
            let e = s + 1 + rand.below(nz(o.len() - s));
            let times = rand.below(nz(32)) + 1;
            b = o.to_vec();
            for _ in 0..times {
                b.extend_from_slice(&o[s..e]);
            }
        }
        6 if !words.is_empty() => {
            b = words[rand.below(nz(words.len()))].clone();
        }
        _ => {
            b = Vec::new();
        }
    }
    b.truncate(MAX_LEN);
    b
}

/// Runs of bytes that are not separators: the words and numbers of a stream.
fn words_of(b: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, &c) in b.iter().chain(std::iter::once(&b' ')).enumerate() {
        let sep = !(c.is_ascii_alphanumeric() || c == b'_' || c == b'-' || c == b'.' || c >= 0x80);
        match (sep, start) {
            (false, None) => start = Some(i),
            (true, Some(s)) => {
                out.push((s, i));
                start = None;
            }
            _ => {}
        }
    }
    out
}

/// Line spans (each with its newline).
fn lines_of(b: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut s = 0;
    for (i, &c) in b.iter().enumerate() {
        if c == b'\n' {
            out.push((s, i + 1));
            s = i + 1;
        }
    }
    if s < b.len() {
        out.push((s, b.len()));
    }
    out
}

/// One structure-keeping edit of a stream's unread rest.
fn mutate_stream<R: Rand>(rand: &mut R, b: &[u8], words: &[Vec<u8>], ints: &[i64]) -> Vec<u8> {
    let mut out = b.to_vec();
    let toks = words_of(b);
    let lines = lines_of(b);
    if length_turn(rand, LENGTH_ODDS) && !lines.is_empty() {
        return stretch_stream(rand, b, &toks, &lines);
    }
    match rand.below(nz(6)) {
        // A word of the stream becomes a dictionary word.
        0 if !toks.is_empty() && !words.is_empty() => {
            let (s, e) = toks[rand.below(nz(toks.len()))];
            out.splice(s..e, words[rand.below(nz(words.len()))].iter().copied());
        }
        // A word becomes an interesting number.
        1 if !toks.is_empty() => {
            let (s, e) = toks[rand.below(nz(toks.len()))];
            let n = match rand.below(nz(5)) {
                0 if !ints.is_empty() => ints[rand.below(nz(ints.len()))],
                1 => -1,
                2 => i32::MAX as i64 + 1,
                3 => rand.below(nz(100000)) as i64,
                _ => 0,
            };
            out.splice(s..e, n.to_string().into_bytes());
        }
        // A line is repeated.
        2 if !lines.is_empty() => {
            let (s, e) = lines[rand.below(nz(lines.len()))];
            let line = b[s..e].to_vec();
            let at = lines[rand.below(nz(lines.len()))].0;
            out.splice(at..at, line);
        }
        // A line is dropped.
        3 if lines.len() > 1 => {
            let (s, e) = lines[rand.below(nz(lines.len()))];
            out.drain(s..e);
        }
        // A dictionary word starts a line of its own.
        4 if !words.is_empty() => {
            let at = lines
                .get(rand.below(nz(lines.len().max(1))))
                .map_or(0, |l| l.0);
            let mut line = words[rand.below(nz(words.len()))].clone();
            line.push(b' ');
            out.splice(at..at, line);
        }
        // Two words swap places.
        _ if toks.len() > 1 => {
            let (a, b2) = (
                toks[rand.below(nz(toks.len()))],
                toks[rand.below(nz(toks.len()))],
            );
            let (first, second) = if a.0 <= b2.0 { (a, b2) } else { (b2, a) };
            if first.1 <= second.0 {
                let w1 = b[first.0..first.1].to_vec();
                let w2 = b[second.0..second.1].to_vec();
                out.splice(second.0..second.1, w1);
                out.splice(first.0..first.1, w2);
            }
        }
        _ => {}
    }
    out.truncate(MAX_STREAM);
    out
}

/// A line of a stream repeated an interesting number of times, or a word or a line
/// (without its newline) stretched to an interesting length.
fn stretch_stream<R: Rand>(
    rand: &mut R,
    b: &[u8],
    toks: &[(usize, usize)],
    lines: &[(usize, usize)],
) -> Vec<u8> {
    let mut out = b.to_vec();
    if rand.coinflip(0.5) {
        let (s, e) = lines[rand.below(nz(lines.len()))];
        let times = interesting_length(rand, MAX_STREAM.saturating_sub(b.len()) / (e - s));
        let at = lines[rand.below(nz(lines.len()))].0;
        out.splice(at..at, repeat_to(&b[s..e], times * (e - s)));
    } else {
        let (s, e) = if !toks.is_empty() && rand.coinflip(0.5) {
            toks[rand.below(nz(toks.len()))]
        } else {
            let (s, e) = lines[rand.below(nz(lines.len()))];
            (
                s,
                if b[e - 1] == b'\n' && e - 1 > s {
                    e - 1
                } else {
                    e
                },
            )
        };
        let len = interesting_length(rand, MAX_STREAM.saturating_sub(b.len() - (e - s)));
        out.splice(s..e, repeat_to(&b[s..e], len));
    }
    out.truncate(MAX_STREAM);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use libafl_bolts::rands::StdRand;

    #[test]
    fn interesting_lengths_sit_at_and_below_powers_of_two_and_respect_the_cap() {
        let mut rand = StdRand::with_seed(7);
        let lens: Vec<usize> = (0..20_000)
            .map(|_| interesting_length(&mut rand, 1 << 20))
            .collect();
        assert!(
            lens.iter().all(|&n| (5..=8193).contains(&n)),
            "{:?} {:?}",
            lens.iter().min(),
            lens.iter().max()
        );
        for want in [8193, 4095, 4096, 4097, 255, 256] {
            assert!(lens.contains(&want), "never {want}");
        }
        // The upper half of an octave: a byte-sized count that wrapped.
        assert!(lens.iter().any(|&n| (129..255).contains(&n)));
        assert!((0..1000).all(|_| interesting_length(&mut rand, 300) <= 300));
    }

    #[test]
    fn a_span_is_repeated_in_place_to_the_length_asked() {
        assert_eq!(repeat_to(b"ab", 5), b"ababa");
        assert_eq!(repeat_to(b"", 5), b"");
        assert_eq!(stretch_span(b"x=12;", 2, 4, 9), b"x=121212;");
        assert_eq!(stretch_span(b"x=12;", 2, 4, 8), b"x=12121;");
        // Shorter than the rest around the span: the whole is cut.
        assert_eq!(stretch_span(b"x=12;", 2, 4, 2), b"x=");
    }

    #[test]
    fn strings_grow_past_4096_bytes_and_lines_repeat_hundreds_of_times() {
        let mut rand = StdRand::with_seed(1);
        let longest = (0..20_000)
            .map(|_| mutate_bytes(&mut rand, b"abc", b"abc", &[]).len())
            .max()
            .unwrap();
        assert!(longest > 4096, "longest string {longest}");
        // From a mutated value too, some long ones are the recorded bytes grown.
        let grown = (0..20_000)
            .map(|_| mutate_bytes(&mut rand, b"&<nI-Q)", b"ELLO", &[]))
            .filter(|v| v.len() > 256 && v.iter().all(|c| b"ELLO".contains(c)))
            .count();
        assert!(grown > 0, "no long value made of the recorded bytes");
        let stream = b"one\n\ntwo\n";
        let most_blank_lines = (0..20_000)
            .map(|_| {
                let out = mutate_stream(&mut rand, stream, &[], &[]);
                out.split(|&c| c == b'\n').filter(|l| l.is_empty()).count()
            })
            .max()
            .unwrap();
        assert!(
            most_blank_lines >= 128,
            "at most {most_blank_lines} empty lines"
        );
    }
}

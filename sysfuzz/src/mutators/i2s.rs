//! Input-to-state replacement on system inputs (CmpLog, as AFL++'s `-c` and
//! LibAFL's `I2SRandReplace`, for inputs that are arguments, stdin and files).
//!
//! A tracing run of the queue entry (the program's trace-cmp hooks logging every
//! comparison's operands into shared memory) leaves [`CmpValuesMetadata`] in the
//! state. [`I2SMutator`] takes one logged comparison and looks for one operand in the
//! input, then writes the other in its place. An integer operand is looked for in
//! three spellings: as decimal text that is a whole number (what `strtol` and
//! `atoi` read, so `n == 90210` after parsing `5` is solved in one step and the
//! replacement may be longer than what it replaces), and as its little- and
//! big-endian bytes. Byte-string operands (from `memcmp`-like routines) are replaced
//! as they are, and as C strings (up to a NUL, past which a counted compare may read
//! stale bytes the input does not hold).

use super::parts::{below, part_limit, part_mut, Part};
use crate::input::SysInput;
use libafl::corpus::CorpusId;
use libafl::mutators::{MutationResult, Mutator};
use libafl::observers::cmp::{CmpValues, CmpValuesMetadata};
use libafl::state::HasRand;
use libafl::HasMetadata;
use libafl_bolts::{Named, ToSlice as _};
use std::borrow::Cow;

/// How a looked-for operand must sit in the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fit {
    /// Anywhere.
    Bytes,
    /// As a whole decimal number: no digit right before or after it.
    Number,
}

/// One way to make a comparison come out differently: where the input holds `from`,
/// write `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Replacement {
    from: Vec<u8>,
    to: Vec<u8>,
    fit: Fit,
}

/// The integer operands of a comparison with their width in bytes.
fn integers(cmp: &CmpValues) -> Option<(u64, u64, usize)> {
    Some(match cmp {
        CmpValues::U8((a, b, _)) => (u64::from(*a), u64::from(*b), 1),
        CmpValues::U16((a, b, _)) => (u64::from(*a), u64::from(*b), 2),
        CmpValues::U32((a, b, _)) => (u64::from(*a), u64::from(*b), 4),
        CmpValues::U64((a, b, _)) => (*a, *b, 8),
        CmpValues::Bytes(_) => return None,
    })
}

/// `v`, `width` bytes wide, read as a signed number.
fn signed(v: u64, width: usize) -> i64 {
    let shift = 64 - 8 * width as u32;
    ((v << shift) as i64) >> shift
}

/// Every replacement one comparison suggests, both directions.
fn replacements(cmp: &CmpValues) -> Vec<Replacement> {
    let mut out = Vec::new();
    let mut push = |from: Vec<u8>, to: Vec<u8>, fit| {
        let r = Replacement { from, to, fit };
        if !r.from.is_empty() && r.from != r.to && !out.contains(&r) {
            out.push(r);
        }
    };
    if let Some((a, b, width)) = integers(cmp) {
        for (x, y) in [(a, b), (b, a)] {
            // As text: what the program parsed; the other operand and its
            // neighbours (a `<` or `>` comparison is passed one off).
            let (sx, sy) = (signed(x, width), signed(y, width));
            for to in [sy, sy.wrapping_add(1), sy.wrapping_sub(1)] {
                push(
                    sx.to_string().into_bytes(),
                    to.to_string().into_bytes(),
                    Fit::Number,
                );
            }
            if sx < 0 || sy < 0 {
                push(
                    x.to_string().into_bytes(),
                    y.to_string().into_bytes(),
                    Fit::Number,
                );
            }
            // As bytes; one-byte operands are characters the program compares.
            push(
                x.to_le_bytes()[..width].to_vec(),
                y.to_le_bytes()[..width].to_vec(),
                Fit::Bytes,
            );
            if width > 1 {
                push(
                    x.to_be_bytes()[8 - width..].to_vec(),
                    y.to_be_bytes()[8 - width..].to_vec(),
                    Fit::Bytes,
                );
            }
        }
    } else if let CmpValues::Bytes((a, b)) = cmp {
        // A routine's operands come zero-padded to the map's width: a string is what
        // comes before the padding, and may be replaced by one of another length.
        let unpadded =
            |v: &[u8]| v[..v.iter().rposition(|&c| c != 0).map_or(0, |i| i + 1)].to_vec();
        // A counted compare (`memcmp(line + 6, ":unlock", 7)`, or a `strncmp` the
        // compiler turned into one) also reads what lies past a short string's NUL:
        // stale bytes of an earlier, longer line, never in this input. So the string
        // before the first NUL is looked for too.
        let c_string = |v: &[u8]| v[..v.iter().position(|&c| c == 0).unwrap_or(v.len())].to_vec();
        let (a, b) = (a.to_slice(), b.to_slice());
        for (x, y) in [(a, b), (b, a)] {
            for (from, to) in [(unpadded(x), unpadded(y)), (c_string(x), c_string(y))] {
                if !to.is_empty() {
                    push(from, to, Fit::Bytes);
                }
            }
        }
    }
    out
}

/// Where `r.from` occurs in `buf`, as `r.fit` asks.
fn occurrences(buf: &[u8], r: &Replacement) -> Vec<usize> {
    let n = r.from.len();
    if n > buf.len() {
        return Vec::new();
    }
    (0..=buf.len() - n)
        .filter(|&i| buf[i..i + n] == r.from[..])
        .filter(|&i| {
            r.fit == Fit::Bytes
                || ((i == 0 || !buf[i - 1].is_ascii_digit())
                    && buf.get(i + n).is_none_or(|c| !c.is_ascii_digit()))
        })
        .collect()
}

/// Replaces one operand of a logged comparison found in the input by the other.
#[derive(Debug, Default)]
pub struct I2SMutator;

impl Named for I2SMutator {
    fn name(&self) -> &Cow<'static, str> {
        static NAME: Cow<'static, str> = Cow::Borrowed("I2SMutator");
        &NAME
    }
}

impl<S: HasRand + HasMetadata> Mutator<SysInput, S> for I2SMutator {
    fn mutate(
        &mut self,
        state: &mut S,
        input: &mut SysInput,
    ) -> Result<MutationResult, libafl::Error> {
        let n = state
            .metadata_map()
            .get::<CmpValuesMetadata>()
            .map_or(0, |m| m.list.len());
        if n == 0 {
            return Ok(MutationResult::Skipped);
        }
        let pick = below(state.rand_mut(), n);
        let cmp = state
            .metadata_map()
            .get::<CmpValuesMetadata>()
            .expect("checked above")
            .list[pick]
            .clone();
        let mut candidates = replacements(&cmp);
        let mut parts: Vec<Part> = vec![Part::Stdin];
        parts.extend((0..input.files.len()).map(Part::File));
        parts.extend((0..input.args.len()).map(Part::Arg));
        let rand = state.rand_mut();
        // Every (replacement, part) pair in a random order; the first that fits wins.
        let mut pairs: Vec<(usize, Part)> = (0..candidates.len())
            .flat_map(|c| parts.iter().map(move |&p| (c, p)))
            .collect();
        for i in (1..pairs.len()).rev() {
            pairs.swap(i, below(rand, i + 1));
        }
        for (c, part) in pairs {
            let limit = part_limit(part);
            let buf = part_mut(input, part);
            let at = occurrences(buf, &candidates[c]);
            if at.is_empty() {
                continue;
            }
            let i = at[below(rand, at.len())];
            let r = std::mem::replace(
                &mut candidates[c],
                Replacement {
                    from: Vec::new(),
                    to: Vec::new(),
                    fit: Fit::Bytes,
                },
            );
            buf.splice(i..i + r.from.len(), r.to);
            buf.truncate(limit);
            input.normalise();
            return Ok(MutationResult::Mutated);
        }
        Ok(MutationResult::Skipped)
    }

    fn post_exec(&mut self, _state: &mut S, _new: Option<CorpusId>) -> Result<(), libafl::Error> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(input: &[u8], cmp: CmpValues) -> Vec<Vec<u8>> {
        replacements(&cmp)
            .iter()
            .flat_map(|r| {
                occurrences(input, r).into_iter().map(move |i| {
                    let mut v = input.to_vec();
                    v.splice(i..i + r.from.len(), r.to.clone());
                    v
                })
            })
            .collect()
    }

    #[test]
    fn a_parsed_number_is_replaced_as_whole_decimal_text_of_any_length() {
        // `strtol("5") == 90210`, logged as a 64-bit comparison.
        let out = apply(b"set k 5\nset k2 15\n", CmpValues::U64((5, 90210, false)));
        assert!(
            out.contains(&b"set k 90210\nset k2 15\n".to_vec()),
            "{out:?}"
        );
        // `15` is not `5`.
        assert!(!out.iter().any(|v| v.windows(6).any(|w| w == b"190210")));
        // Negative numbers as the program's signed type sees them.
        let out = apply(b"-3", CmpValues::U32((-3i32 as u32, 7, false)));
        assert!(out.contains(&b"7".to_vec()), "{out:?}");
    }

    #[test]
    fn compared_strings_replace_each_other_whatever_their_lengths() {
        // `strcmp("bob", "admin")`, logged zero-padded as a routine's operands.
        let padded = |s: &[u8]| {
            let mut v = s.to_vec();
            v.resize(32, 0);
            libafl::observers::cmp::CmplogBytes::from_buf_and_len(v.try_into().unwrap(), 32)
        };
        let cmp = CmpValues::Bytes((padded(b"bob"), padded(b"admin")));
        let out = apply(b"login bob secret\n", cmp.clone());
        assert!(out.contains(&b"login admin secret\n".to_vec()), "{out:?}");
        let out = apply(b"x admin y", cmp);
        assert!(out.contains(&b"x bob y".to_vec()), "{out:?}");
        // Bytes past a short string's NUL (stale, from an earlier line) are not
        // looked for with it: `memcmp(line + 6, ":unlock", 7)` on "MAGIC7?\n".
        let stale = apply(
            b"MAGIC7\xbf\n",
            CmpValues::Bytes((padded(b"\xbf\n\0ock"), padded(b":unlock"))),
        );
        assert!(stale.contains(&b"MAGIC7:unlock".to_vec()), "{stale:?}");
        // An empty string is not looked for.
        assert!(apply(b"abc", CmpValues::Bytes((padded(b""), padded(b"zz")))).is_empty());
    }

    #[test]
    fn characters_and_wide_integers_are_replaced_as_bytes() {
        let out = apply(b"a:b", CmpValues::U8((b':', b'=', true)));
        assert!(out.contains(&b"a=b".to_vec()));
        let out = apply(
            b"\x01\x02\x03\x04rest",
            CmpValues::U32((0x0403_0201, 0xdead_beef, false)),
        );
        assert!(out.contains(&b"\xef\xbe\xad\xderest".to_vec()), "{out:?}");
    }
}

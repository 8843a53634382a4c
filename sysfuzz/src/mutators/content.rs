//! Mutations inside one component (an argument, stdin, a file): bytes
//! ([`ByteMutator`]), lines ([`LineMutator`]), numbers in text ([`NumberMutator`])
//! and dictionary tokens ([`TokenMutator`]).
//!
//! Besides havoc's small steps, a range is stretched and a line repeated to an
//! interesting length or count (the unit fuzzer's [`interesting_length`]): inputs
//! that grow without covering anything new on the way are not kept, so small steps
//! alone seldom meet a length condition thousands of bytes or hundreds of lines out.

use super::parts::{
    below, lines, numbers, other_input, part_limit, part_mut, pick_part, small_len, some_component,
    with_newline, words,
};
use crate::input::{SysInput, MAX_CONTENT};
use libafl::corpus::CorpusId;
use libafl::mutators::{MutationResult, Mutator};
use libafl::state::{HasCorpus, HasRand};
use libafl::HasMetadata;
use libafl_bolts::rands::Rand;
use libafl_bolts::Named;
use std::borrow::Cow;
use trestle_unit_fuzz::mutators::{interesting_length, length_turn, repeat_to, stretch_span};

/// One byte or line mutation in this many changes a length. Rarer than in the unit
/// fuzzer ([`trestle_unit_fuzz::mutators::LENGTH_ODDS`]): up to eight mutations are
/// stacked per execution here, and a long input joins the queue more often (sed's
/// system fuzzer, 90 s: 84,351 executions at one in 40, 89,416 at one in 80, 92,833
/// to 105,687 without; single runs).
const LENGTH_ODDS: usize = 80;

/// Byte-level mutations of one component: bit flip, random byte, interesting byte
/// (0, 0xff, 0x7f, 0x80), random printable byte, insert / delete / duplicate a range,
/// a range repeated in place until the component has an interesting length.
pub struct ByteMutator;

impl<S: HasRand> Mutator<SysInput, S> for ByteMutator {
    fn mutate(
        &mut self,
        state: &mut S,
        input: &mut SysInput,
    ) -> Result<MutationResult, libafl::Error> {
        let rand = state.rand_mut();
        let part = pick_part(rand, input, false);
        let max = part_limit(part);
        let buf = part_mut(input, part);
        let len = buf.len();
        // Deleting is twice as likely as inserting or duplicating (as in AFL's havoc):
        // inputs stay small, and small inputs run fast.
        let op = if len == 0 {
            4
        } else if length_turn(rand, LENGTH_ODDS) {
            8
        } else {
            below(rand, 8)
        };
        match op {
            0 => {
                let i = below(rand, len);
                buf[i] ^= 1 << below(rand, 8);
            }
            1 => {
                let i = below(rand, len);
                buf[i] = rand.next() as u8;
            }
            2 => {
                let i = below(rand, len);
                buf[i] = [0u8, 0xff, 0x7f, 0x80][below(rand, 4)];
            }
            3 => {
                let i = below(rand, len);
                buf[i] = 0x20 + below(rand, 0x5f) as u8;
            }
            4 => {
                // Insert random bytes, printable ones or a copy of a range.
                let pos = below(rand, len + 1);
                let n = small_len(rand, 32);
                let bytes: Vec<u8> = match (len, below(rand, 3)) {
                    (l, 0) if l > 0 => {
                        let start = below(rand, l);
                        buf[start..(start + n).min(l)].to_vec()
                    }
                    (_, 1) => (0..n).map(|_| 0x20 + below(rand, 0x5f) as u8).collect(),
                    _ => (0..n).map(|_| rand.next() as u8).collect(),
                };
                buf.splice(pos..pos, bytes);
            }
            5 | 6 => {
                let start = below(rand, len);
                let n = small_len(rand, len - start);
                buf.drain(start..start + n);
            }
            7 => {
                let start = below(rand, len);
                let n = small_len(rand, (len - start).min(256));
                let copy = buf[start..start + n].to_vec();
                for _ in 0..small_len(rand, 4) {
                    buf.splice(start + n..start + n, copy.iter().copied());
                }
            }
            _ => {
                let start = below(rand, len);
                let n = small_len(rand, len - start);
                *buf = stretch_span(buf, start, start + n, interesting_length(rand, max));
            }
        }
        buf.truncate(max);
        input.normalise();
        Ok(MutationResult::Mutated)
    }
    fn post_exec(&mut self, _state: &mut S, _new: Option<CorpusId>) -> Result<(), libafl::Error> {
        Ok(())
    }
}

impl Named for ByteMutator {
    fn name(&self) -> &Cow<'static, str> {
        static NAME: Cow<'static, str> = Cow::Borrowed("ByteMutator");
        &NAME
    }
}

/// Radamsa-like line mutations of stdin or a file: repeat a line (a few times or an
/// interesting number of times), delete one, swap two, insert or replace one with a
/// line from elsewhere (any test in the corpus).
pub struct LineMutator;

impl<S: HasRand + HasCorpus<SysInput> + HasMetadata> Mutator<SysInput, S> for LineMutator {
    fn mutate(
        &mut self,
        state: &mut S,
        input: &mut SysInput,
    ) -> Result<MutationResult, libafl::Error> {
        // Op 5 deletes, like op 1: deleting twice as likely as repeating or inserting.
        let op = if length_turn(state.rand_mut(), LENGTH_ODDS) {
            6
        } else {
            below(state.rand_mut(), 6)
        };
        // A line from elsewhere, for ops 3 and 4.
        let mut lender = None;
        let foreign = if op == 3 || op == 4 {
            let other = if state.rand_mut().coinflip(0.5) {
                other_input(state)
            } else {
                None
            };
            let owned;
            let source: &SysInput = match other {
                Some((o, l)) => {
                    lender = Some(l);
                    owned = o;
                    &owned
                }
                None => input,
            };
            let rand = state.rand_mut();
            let Some(comp) = some_component(rand, source) else {
                return Ok(MutationResult::Skipped);
            };
            let ls = lines(&comp);
            Some(with_newline(ls[below(rand, ls.len())].to_vec()))
        } else {
            None
        };
        let rand = state.rand_mut();
        let part = pick_part(rand, input, true);
        let buf = part_mut(input, part);
        let mut ls: Vec<Vec<u8>> = lines(buf).into_iter().map(<[u8]>::to_vec).collect();
        if let Some(last) = ls.last_mut() {
            // Lines move around: each needs its newline.
            if last.last() != Some(&b'\n') {
                last.push(b'\n');
            }
        }
        let n = ls.len();
        match (op, foreign) {
            (0 | 6, _) if n > 0 => {
                let i = below(rand, n);
                let line = ls[i].clone();
                let times = if op == 6 {
                    let room = MAX_CONTENT.saturating_sub(ls.iter().map(Vec::len).sum());
                    interesting_length(rand, room / line.len())
                } else {
                    small_len(rand, 16)
                };
                ls.splice(i..i, std::iter::repeat_n(line, times));
            }
            (1 | 5, _) if n > 0 => {
                ls.remove(below(rand, n));
            }
            (2, _) if n > 1 => {
                let (i, j) = (below(rand, n), below(rand, n));
                ls.swap(i, j);
            }
            (3, Some(line)) => {
                ls.insert(below(rand, n + 1), line);
            }
            (4, Some(line)) if n > 0 => {
                ls[below(rand, n)] = line;
            }
            _ => return Ok(MutationResult::Skipped),
        }
        *buf = ls.concat();
        buf.truncate(MAX_CONTENT);
        // A line from another entry (ops 3 and 4 only draw one): it lent to the mutant.
        if let Some(lender) = lender {
            lender.lent(state);
        }
        Ok(MutationResult::Mutated)
    }
    fn post_exec(&mut self, _state: &mut S, _new: Option<CorpusId>) -> Result<(), libafl::Error> {
        Ok(())
    }
}

impl Named for LineMutator {
    fn name(&self) -> &Cow<'static, str> {
        static NAME: Cow<'static, str> = Cow::Borrowed("LineMutator");
        &NAME
    }
}

/// Values at the edges of integer types.
const BOUNDARIES: &[i128] = &[
    0,
    -1,
    1,
    2,
    7,
    8,
    16,
    32,
    64,
    100,
    127,
    128,
    -128,
    255,
    256,
    1000,
    1024,
    4096,
    32767,
    -32768,
    65535,
    65536,
    i32::MAX as i128,
    i32::MIN as i128,
    1 << 31,
    u32::MAX as i128,
    1 << 32,
    i64::MAX as i128,
    i64::MIN as i128,
    1 << 63,
    u64::MAX as i128,
];

/// Numbers in text: a decimal token becomes itself ± a small delta, a boundary value,
/// a compared constant of the program, its negation, double or half, a random
/// number, or a number wider than a machine word ([`wide_digits`]).
pub struct NumberMutator {
    pub(super) ints: Vec<i128>,
}

impl<S: HasRand> Mutator<SysInput, S> for NumberMutator {
    fn mutate(
        &mut self,
        state: &mut S,
        input: &mut SysInput,
    ) -> Result<MutationResult, libafl::Error> {
        let rand = state.rand_mut();
        let part = pick_part(rand, input, false);
        let buf = part_mut(input, part);
        let nums = numbers(buf);
        if nums.is_empty() {
            return Ok(MutationResult::Skipped);
        }
        let (start, end) = nums[below(rand, nums.len())];
        let old: i128 = std::str::from_utf8(&buf[start..end])
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        if below(rand, 8) == 7 {
            let wide = wide_digits(rand, &buf[start..end]);
            buf.splice(start..end, wide);
            input.normalise();
            return Ok(MutationResult::Mutated);
        }
        let new = match below(rand, 7) {
            0 | 1 => {
                let d = small_len(rand, 16) as i128;
                if rand.coinflip(0.5) {
                    old.saturating_add(d)
                } else {
                    old.saturating_sub(d)
                }
            }
            2 | 3 => BOUNDARIES[below(rand, BOUNDARIES.len())],
            4 if !self.ints.is_empty() => self.ints[below(rand, self.ints.len())],
            5 => match below(rand, 3) {
                0 => old.saturating_neg(),
                1 => old.saturating_mul(2),
                _ => old / 2,
            },
            _ => (rand.next() >> below(rand, 64)) as i128,
        };
        buf.splice(start..end, new.to_string().into_bytes());
        input.normalise();
        Ok(MutationResult::Mutated)
    }
    fn post_exec(&mut self, _state: &mut S, _new: Option<CorpusId>) -> Result<(), libafl::Error> {
        Ok(())
    }
}

/// Digit counts around the limits of machine words: 2^32, 2^53 (a double's exact
/// integers), 2^56, 2^63 and 2^64, 2^128.
const WORD_DIGITS: &[usize] = &[10, 16, 17, 19, 20, 39, 40];
/// The most digits a wide number gets.
const WIDE_DIGITS: usize = 1024;

/// A decimal number wider than any the other number mutations write (they stay within
/// i128): as many digits as one of [`WORD_DIGITS`] or an interesting length (a power of
/// two or beside one, up to [`WIDE_DIGITS`]), the old number's digits repeated or
/// random ones, its sign kept. Arbitrary-precision arithmetic (dc, bc) and fixed
/// buffers for decimal text fail at digit counts no machine word reaches, and small
/// steps seldom get there: a longer number covers nothing new on the way.
fn wide_digits<R: Rand>(rand: &mut R, old: &[u8]) -> Vec<u8> {
    let (mut out, digits) = match old.split_first() {
        Some((b'-', rest)) => (vec![b'-'], rest),
        _ => (Vec::new(), old),
    };
    let n = if rand.coinflip(0.5) {
        WORD_DIGITS[below(rand, WORD_DIGITS.len())]
    } else {
        interesting_length(rand, WIDE_DIGITS)
    };
    if rand.coinflip(0.5) && digits.first().is_some_and(|&d| d != b'0') {
        out.extend(repeat_to(digits, n));
    } else {
        out.push(b'1' + below(rand, 9) as u8);
        out.extend((1..n).map(|_| b'0' + below(rand, 10) as u8));
    }
    out
}

impl Named for NumberMutator {
    fn name(&self) -> &Cow<'static, str> {
        static NAME: Cow<'static, str> = Cow::Borrowed("NumberMutator");
        &NAME
    }
}

/// Dictionary tokens (string literals of the program, its compared constants in
/// decimal): replace a word, insert at a word boundary or anywhere, overwrite.
pub struct TokenMutator {
    pub(super) tokens: Vec<Vec<u8>>,
}

impl<S: HasRand> Mutator<SysInput, S> for TokenMutator {
    fn mutate(
        &mut self,
        state: &mut S,
        input: &mut SysInput,
    ) -> Result<MutationResult, libafl::Error> {
        if self.tokens.is_empty() {
            return Ok(MutationResult::Skipped);
        }
        let rand = state.rand_mut();
        let token = self.tokens[below(rand, self.tokens.len())].clone();
        let part = pick_part(rand, input, false);
        let buf = part_mut(input, part);
        let ws = words(buf);
        match below(rand, 4) {
            0 | 1 if !ws.is_empty() => {
                let (s, e) = ws[below(rand, ws.len())];
                buf.splice(s..e, token);
            }
            2 => {
                // At a word boundary, with a separating space.
                let mut bounds = vec![0, buf.len()];
                bounds.extend(ws.iter().flat_map(|&(s, e)| [s, e]));
                let pos = bounds[below(rand, bounds.len())];
                let mut t = token;
                if pos > 0 && !buf[pos - 1].is_ascii_whitespace() {
                    t.insert(0, b' ');
                }
                if pos < buf.len() && !buf[pos].is_ascii_whitespace() {
                    t.push(b' ');
                }
                buf.splice(pos..pos, t);
            }
            _ => {
                let pos = below(rand, buf.len() + 1);
                let end = (pos + token.len()).min(buf.len());
                if rand.coinflip(0.5) {
                    buf.splice(pos..end, token);
                } else {
                    buf.splice(pos..pos, token);
                }
            }
        }
        input.normalise();
        Ok(MutationResult::Mutated)
    }
    fn post_exec(&mut self, _state: &mut S, _new: Option<CorpusId>) -> Result<(), libafl::Error> {
        Ok(())
    }
}

impl Named for TokenMutator {
    fn name(&self) -> &Cow<'static, str> {
        static NAME: Cow<'static, str> = Cow::Borrowed("TokenMutator");
        &NAME
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::tests::input;
    use crate::input::MAX_ARG_LEN;
    use crate::mutators::tests::state;

    #[test]
    fn line_and_number_mutations_do_what_they_say() {
        let (_dir, mut s) = state();
        let mut seen_repeat = false;
        let mut seen_boundary = false;
        for _ in 0..400 {
            let mut i = input(&[], "aa\nbb\ncc\n");
            if LineMutator.mutate(&mut s, &mut i).unwrap() == MutationResult::Mutated {
                let text = String::from_utf8(i.stdin.clone()).unwrap();
                seen_repeat |= text.matches("bb\n").count() > 1;
            }
            let mut j = input(&[], "set 7 12\n");
            let mut nm = NumberMutator {
                ints: vec![42342531],
            };
            nm.mutate(&mut s, &mut j).unwrap();
            let text = String::from_utf8(j.stdin.clone()).unwrap();
            seen_boundary |= text.contains("2147483647") || text.contains("42342531");
        }
        assert!(seen_repeat && seen_boundary);
    }

    #[test]
    fn numbers_grow_wider_than_a_machine_word() {
        let (_dir, mut s) = state();
        let mut nm = NumberMutator { ints: vec![] };
        let (mut widths, mut negative_wide, mut repeated) =
            (std::collections::BTreeSet::new(), false, false);
        for _ in 0..4000 {
            let mut j = input(&[], "10P -25 x\n");
            nm.mutate(&mut s, &mut j).unwrap();
            let text = String::from_utf8(j.stdin.clone()).unwrap();
            let nums: Vec<&str> = text
                .split(|c: char| !c.is_ascii_digit() && c != '-')
                .filter(|w| w.len() > 1)
                .collect();
            for n in nums {
                let digits = n.trim_start_matches('-');
                assert!(
                    !digits.starts_with('0') || digits.len() == 1,
                    "no leading zero: {text:?}"
                );
                if digits.len() > 39 || digits.parse::<i128>().is_err() {
                    widths.insert(digits.len());
                    negative_wide |= n.starts_with('-');
                    repeated |= digits.starts_with("1010") || digits.starts_with("2525");
                }
            }
            assert!(
                text.ends_with(" x\n") && text.contains('P'),
                "only the number changes: {text:?}"
            );
        }
        assert!(widths.contains(&40), "the 2^128 neighbourhood: {widths:?}");
        assert!(
            widths.iter().any(|&w| w >= 64),
            "a power-of-two count of digits: {widths:?}"
        );
        assert!(widths.iter().all(|&w| w <= WIDE_DIGITS), "{widths:?}");
        assert!(negative_wide && repeated, "signs kept, old digits repeated");
    }

    #[test]
    fn components_grow_to_interesting_lengths_and_lines_repeat_hundreds_of_times() {
        let (_dir, mut s) = state();
        let (mut longest_arg, mut longest_stdin, mut most_lines) = (0, 0, 0);
        for _ in 0..20_000 {
            let mut i = input(&["-d:"], "a\nb\n");
            ByteMutator.mutate(&mut s, &mut i).unwrap();
            longest_arg = longest_arg.max(i.args.first().map_or(0, Vec::len));
            longest_stdin = longest_stdin.max(i.stdin.len());
            let mut j = input(&[], "a\n\nb\n");
            LineMutator.mutate(&mut s, &mut j).unwrap();
            most_lines = most_lines.max(j.stdin.iter().filter(|&&c| c == b'\n').count());
        }
        assert!(
            (128..=MAX_ARG_LEN).contains(&longest_arg),
            "longest argument {longest_arg}"
        );
        assert!(longest_stdin > 4096, "longest stdin {longest_stdin}");
        assert!(most_lines >= 128, "at most {most_lines} lines");
    }
}

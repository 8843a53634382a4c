//! What the mutators share: picking a component of an input and addressing it,
//! finding its lines, numbers and words, and drawing another corpus entry to take
//! material from.

use crate::input::{SysInput, MAX_ARG_LEN, MAX_CONTENT};
use libafl::corpus::Corpus;
use libafl::state::{HasCorpus, HasRand};
use libafl::HasMetadata;
use libafl_bolts::rands::Rand;
use std::num::NonZeroUsize;

/// One component of an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Part {
    Arg(usize),
    Stdin,
    File(usize),
}

pub(super) fn below<R: Rand>(rand: &mut R, n: usize) -> usize {
    match NonZeroUsize::new(n) {
        Some(n) if n.get() > 1 => rand.below(n),
        _ => 0,
    }
}

/// A length from 1 to `max`, small ones likelier.
pub(super) fn small_len<R: Rand>(rand: &mut R, max: usize) -> usize {
    let bound = 1 + below(rand, max.max(1));
    1 + below(rand, bound)
}

pub(super) fn part_mut(input: &mut SysInput, p: Part) -> &mut Vec<u8> {
    match p {
        Part::Arg(i) => &mut input.args[i],
        Part::Stdin => &mut input.stdin,
        Part::File(k) => input
            .files
            .values_mut()
            .nth(k)
            .expect("a file part names an existing file"),
    }
}

pub(super) fn part_limit(p: Part) -> usize {
    match p {
        Part::Arg(_) => MAX_ARG_LEN,
        _ => MAX_CONTENT,
    }
}

/// A component to mutate: non-empty ones three times likelier; stdin always a
/// candidate (a program may read it although the seed gave none). With `content`,
/// stdin and files only.
pub(super) fn pick_part<R: Rand>(rand: &mut R, input: &SysInput, content: bool) -> Part {
    let mut parts = vec![(Part::Stdin, if input.stdin.is_empty() { 1 } else { 3 })];
    for (k, v) in input.files.values().enumerate() {
        parts.push((Part::File(k), if v.is_empty() { 1 } else { 3 }));
    }
    if !content {
        for (i, a) in input.args.iter().enumerate() {
            parts.push((Part::Arg(i), if a.is_empty() { 1 } else { 3 }));
        }
    }
    let total: usize = parts.iter().map(|p| p.1).sum();
    let mut r = below(rand, total);
    for (p, w) in &parts {
        if r < *w {
            return *p;
        }
        r -= w;
    }
    Part::Stdin
}

/// Lines of `b`, each with its terminating newline (the last may have none).
pub(super) fn lines(b: &[u8]) -> Vec<&[u8]> {
    b.split_inclusive(|&c| c == b'\n').collect()
}

pub(super) fn with_newline(mut line: Vec<u8>) -> Vec<u8> {
    if line.last() != Some(&b'\n') {
        line.push(b'\n');
    }
    line
}

/// The corpus entry [`other_input`] drew, by its file name in the queue (none for an
/// entry kept only in memory).
pub(super) struct Lender(Option<String>);

impl Lender {
    /// Say that the mutant took material from this entry: the lineage counts the
    /// mutant as descending from it too ([`Donors`]).
    pub(super) fn lent<S: HasMetadata>(&self, state: &mut S) {
        let Some(name) = &self.0 else { return };
        let donors = &mut state.metadata_or_insert_with(Donors::default).0;
        if !donors.contains(name) {
            donors.push(name.clone());
        }
    }
}

pub use crate::lineage::Donors;

/// A random corpus entry's input, and who lent it (the entry being mutated when it is
/// drawn: `None`).
pub(super) fn other_input<S: HasRand + HasCorpus<SysInput>>(
    state: &mut S,
) -> Option<(SysInput, Lender)> {
    let n = state.corpus().count();
    if n == 0 {
        return None;
    }
    let k = below(state.rand_mut(), n);
    let corpus = state.corpus();
    let id = corpus.nth(k);
    // The entry being mutated is borrowed already. An input not among those the
    // queue keeps in memory is read back from its file; where that fails, a mutator
    // without another input uses its own: no error is lost that would matter.
    let mut tc = corpus.get(id).ok()?.try_borrow_mut().ok()?;
    let name = tc
        .file_path()
        .as_ref()
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned());
    let input = tc.load_input(corpus).ok().cloned()?;
    Some((input, Lender(name)))
}

/// A random non-empty component of `input`, as bytes.
pub(super) fn some_component<R: Rand>(rand: &mut R, input: &SysInput) -> Option<Vec<u8>> {
    let mut parts: Vec<&[u8]> = Vec::new();
    if !input.stdin.is_empty() {
        parts.push(&input.stdin);
    }
    parts.extend(
        input
            .files
            .values()
            .filter(|v| !v.is_empty())
            .map(Vec::as_slice),
    );
    if parts.is_empty() {
        parts.extend(
            input
                .args
                .iter()
                .filter(|a| !a.is_empty())
                .map(Vec::as_slice),
        );
    }
    if parts.is_empty() {
        return None;
    }
    Some(parts[below(rand, parts.len())].to_vec())
}

/// Decimal numbers in `b`: (start, end) of each, with a leading minus sign when it
/// does not follow a letter or digit.
pub(super) fn numbers(b: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            let mut start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            if start > 0
                && b[start - 1] == b'-'
                && (start < 2 || !b[start - 2].is_ascii_alphanumeric())
            {
                start -= 1;
            }
            out.push((start, i));
        } else {
            i += 1;
        }
    }
    out
}

/// Whitespace-separated words of `b`: (start, end) of each.
pub(super) fn words(b: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !b[i].is_ascii_whitespace() {
            i += 1;
        }
        out.push((start, i));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_words_are_found() {
        assert_eq!(
            numbers(b"set 7 -12 a-3 x99"),
            vec![(4, 5), (6, 9), (12, 13), (15, 17)]
        );
        assert_eq!(words(b" ab  c\nd"), vec![(1, 3), (5, 6), (7, 8)]);
        assert_eq!(lines(b"a\nb"), vec![&b"a\n"[..], &b"b"[..]]);
    }
}

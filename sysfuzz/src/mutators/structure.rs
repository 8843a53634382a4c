//! Mutations of a test's structure: its argument list ([`ArgListMutator`]) and
//! crossover with another test of the corpus ([`CrossoverMutator`]).

use super::parts::{below, other_input, part_mut, pick_part, small_len, some_component, Part};
use crate::input::{SysInput, MAX_ARGS};
use libafl::corpus::CorpusId;
use libafl::mutators::{MutationResult, Mutator};
use libafl::state::{HasCorpus, HasRand};
use libafl::HasMetadata;
use libafl_bolts::rands::Rand;
use libafl_bolts::Named;
use std::borrow::Cow;

/// The argument list: replace an argument by another test's (or a dictionary token),
/// insert one (another test's, a token, a copy), delete one (never one that names a
/// file of the test), swap two, repeat a run of them.
pub struct ArgListMutator {
    pub(super) tokens: Vec<Vec<u8>>,
}

impl<S: HasRand + HasCorpus<SysInput> + HasMetadata> Mutator<SysInput, S> for ArgListMutator {
    fn mutate(
        &mut self,
        state: &mut S,
        input: &mut SysInput,
    ) -> Result<MutationResult, libafl::Error> {
        let op = below(state.rand_mut(), 5);
        let n = input.args.len();
        // A new argument, for ops 0 and 1.
        let fresh = if op <= 1 {
            let other = if state.rand_mut().coinflip(0.6) {
                other_input(state)
            } else {
                None
            };
            let rand = state.rand_mut();
            match other.filter(|(o, _)| !o.args.is_empty()) {
                Some((o, lender)) => {
                    Some((o.args[below(rand, o.args.len())].clone(), Some(lender)))
                }
                None if !self.tokens.is_empty() && rand.coinflip(0.5) => {
                    Some((self.tokens[below(rand, self.tokens.len())].clone(), None))
                }
                None if n > 0 => Some((input.args[below(rand, n)].clone(), None)),
                None => None,
            }
        } else {
            None
        };
        // Where the new argument came from another entry, the mutant descends from it too.
        match (op, fresh) {
            (0, Some((a, from))) if n > 0 => {
                if let Some(lender) = from {
                    lender.lent(state);
                }
                input.args[below(state.rand_mut(), n)] = a;
            }
            (1, Some((a, from))) if n < MAX_ARGS => {
                if let Some(lender) = from {
                    lender.lent(state);
                }
                input.args.insert(below(state.rand_mut(), n + 1), a);
            }
            (2, _) => {
                let rand = state.rand_mut();
                let deletable: Vec<usize> = (0..n)
                    .filter(|&i| {
                        !input
                            .files
                            .contains_key(&*String::from_utf8_lossy(&input.args[i]))
                    })
                    .collect();
                if deletable.is_empty() {
                    return Ok(MutationResult::Skipped);
                }
                input.args.remove(deletable[below(rand, deletable.len())]);
            }
            (3, _) if n > 1 => {
                let rand = state.rand_mut();
                let (i, j) = (below(rand, n), below(rand, n));
                input.args.swap(i, j);
            }
            (4, _) if n > 0 => {
                let rand = state.rand_mut();
                let start = below(rand, n);
                let len = small_len(rand, (n - start).min(8));
                let run = input.args[start..start + len].to_vec();
                for _ in 0..small_len(rand, 4) {
                    input
                        .args
                        .splice(start + len..start + len, run.iter().cloned());
                }
            }
            _ => return Ok(MutationResult::Skipped),
        }
        input.normalise();
        Ok(MutationResult::Mutated)
    }
    fn post_exec(&mut self, _state: &mut S, _new: Option<CorpusId>) -> Result<(), libafl::Error> {
        Ok(())
    }
}

impl Named for ArgListMutator {
    fn name(&self) -> &Cow<'static, str> {
        static NAME: Cow<'static, str> = Cow::Borrowed("ArgListMutator");
        &NAME
    }
}

/// Crossover with another corpus entry: take its stdin, a file's content (the same
/// file's if it has one), its whole argument list (with the files its arguments name),
/// or splice: the head of one of our components and the tail of one of its.
pub struct CrossoverMutator;

impl<S: HasRand + HasCorpus<SysInput> + HasMetadata> Mutator<SysInput, S> for CrossoverMutator {
    fn mutate(
        &mut self,
        state: &mut S,
        input: &mut SysInput,
    ) -> Result<MutationResult, libafl::Error> {
        let Some((other, lender)) = other_input(state) else {
            return Ok(MutationResult::Skipped);
        };
        if other == *input {
            return Ok(MutationResult::Skipped);
        }
        let rand = state.rand_mut();
        match below(rand, 4) {
            0 => {
                // Whole arguments, and the files they name.
                if other.args == input.args {
                    return Ok(MutationResult::Skipped);
                }
                for a in &other.args {
                    let name = String::from_utf8_lossy(a);
                    if let Some(content) = other.files.get(&*name) {
                        // Not beside a file of this input it would have to be inside
                        // of, or hold (`a` and `a/a` from two of sed's captured tests).
                        let names = input
                            .files
                            .keys()
                            .map(String::as_str)
                            .chain(std::iter::once(&*name));
                        if trestle_exec::systest::layout_conflict(names).is_none() {
                            input
                                .files
                                .entry(name.into_owned())
                                .or_insert_with(|| content.clone());
                        }
                    }
                }
                input.args = other.args;
            }
            1 => {
                let part = pick_part(rand, input, true);
                let same = match part {
                    Part::File(k) => input
                        .files
                        .keys()
                        .nth(k)
                        .and_then(|name| other.files.get(name))
                        .cloned(),
                    _ => (!other.stdin.is_empty()).then(|| other.stdin.clone()),
                };
                let Some(content) = same.or_else(|| some_component(rand, &other)) else {
                    return Ok(MutationResult::Skipped);
                };
                *part_mut(input, part) = content;
            }
            _ => {
                let Some(tail_src) = some_component(rand, &other) else {
                    return Ok(MutationResult::Skipped);
                };
                let part = pick_part(rand, input, true);
                let buf = part_mut(input, part);
                // Cut at line starts half the time: records stay whole.
                let cut = |rand: &mut _, b: &[u8], lines_only: bool| -> usize {
                    if lines_only {
                        let starts: Vec<usize> = std::iter::once(0)
                            .chain(
                                b.iter()
                                    .enumerate()
                                    .filter(|(_, &c)| c == b'\n')
                                    .map(|(i, _)| i + 1),
                            )
                            .collect();
                        starts[below(rand, starts.len())]
                    } else {
                        below(rand, b.len() + 1)
                    }
                };
                let lines_only = rand.coinflip(0.5);
                let a = cut(rand, buf, lines_only);
                let b = cut(rand, &tail_src, lines_only);
                buf.truncate(a);
                buf.extend_from_slice(&tail_src[b..]);
            }
        }
        lender.lent(state);
        input.normalise();
        Ok(MutationResult::Mutated)
    }
    fn post_exec(&mut self, _state: &mut S, _new: Option<CorpusId>) -> Result<(), libafl::Error> {
        Ok(())
    }
}

impl Named for CrossoverMutator {
    fn name(&self) -> &Cow<'static, str> {
        static NAME: Cow<'static, str> = Cow::Borrowed("CrossoverMutator");
        &NAME
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::tests::input;
    use crate::mutators::tests::state;
    use libafl::corpus::{Corpus, Testcase};
    use libafl::mutators::Mutator;
    use libafl::state::HasCorpus;

    #[test]
    fn crossover_never_puts_a_file_beside_one_it_would_be_inside() {
        let (_dir, mut s) = state();
        let mut other = input(&["a/a"], "");
        other.files.insert("a/a".into(), b"inside".to_vec());
        s.corpus_mut().add(Testcase::from(other)).unwrap();
        let mut m = CrossoverMutator;
        let mut took_args = 0;
        for _ in 0..400 {
            let mut i = input(&["a"], "x\n");
            i.files.insert("a".into(), b"file".to_vec());
            m.mutate(&mut s, &mut i).unwrap();
            took_args += usize::from(i.args == [b"a/a".to_vec()]);
            assert!(
                crate::input::SysInput::check(&i.to_test()).is_ok(),
                "{:?}",
                i.files.keys()
            );
        }
        assert!(
            took_args > 0,
            "the other input's arguments were never taken"
        );
    }
}

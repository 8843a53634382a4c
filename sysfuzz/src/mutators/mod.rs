//! Everything that changes a [`SysInput`]: the structured mutations stacked a few per
//! execution ([`SysMutator`]: bytes, lines, numbers, dictionary tokens inside one
//! component; argument lists and crossover between tests), and input-to-state
//! replacement from the program's logged comparisons ([`I2SMutator`], its own stage).
//!
//! Every mutation leaves the input normalised and within [`MAX_ARGS`],
//! [`MAX_ARG_LEN`] and [`MAX_CONTENT`].
//!
//! [`MAX_ARGS`]: crate::MAX_ARGS
//! [`MAX_ARG_LEN`]: crate::MAX_ARG_LEN
//! [`MAX_CONTENT`]: crate::MAX_CONTENT
//! [`SysInput`]: crate::SysInput

mod content;
mod i2s;
mod parts;
mod structure;

pub use content::{ByteMutator, LineMutator, NumberMutator, TokenMutator};
pub use i2s::I2SMutator;
pub use structure::{ArgListMutator, CrossoverMutator};

pub use parts::Donors;

use crate::input::SysInput;
use libafl::corpus::{Corpus, CorpusId};
use libafl::mutators::{HavocScheduledMutator, MutationResult, Mutator};
use libafl::state::HasCorpus;
use libafl::HasMetadata;
use libafl_bolts::tuples::tuple_list;
use libafl_bolts::Named;
use std::borrow::Cow;

type Stack = HavocScheduledMutator<(
    ByteMutator,
    (
        LineMutator,
        (
            NumberMutator,
            (TokenMutator, (ArgListMutator, (CrossoverMutator, ()))),
        ),
    ),
)>;

/// The system-level mutations, two to eight stacked per execution. Which other
/// corpus entries a mutant took material from ([`Donors`]) is kept in the state while
/// it is made and run (a finding takes it from there), and on its queue entry if it
/// joins the queue.
pub struct SysMutator<M = Stack> {
    stack: M,
}

impl<M, S> Mutator<SysInput, S> for SysMutator<M>
where
    M: Mutator<SysInput, S>,
    S: HasMetadata + HasCorpus<SysInput>,
{
    fn mutate(
        &mut self,
        state: &mut S,
        input: &mut SysInput,
    ) -> Result<MutationResult, libafl::Error> {
        let _stale = state.metadata_map_mut().remove::<Donors>();
        self.stack.mutate(state, input)
    }

    fn post_exec(&mut self, state: &mut S, new: Option<CorpusId>) -> Result<(), libafl::Error> {
        self.stack.post_exec(state, new)?;
        let donors = state.metadata_map_mut().remove::<Donors>();
        if let (Some(donors), Some(id)) = (donors, new) {
            state.corpus().get(id)?.borrow_mut().add_metadata(*donors);
        }
        Ok(())
    }
}

impl<M> Named for SysMutator<M> {
    fn name(&self) -> &Cow<'static, str> {
        static NAME: Cow<'static, str> = Cow::Borrowed("SysMutator");
        &NAME
    }
}

/// The system-level mutator over a dictionary of tokens.
pub fn sys_mutator(dictionary: &[Vec<u8>]) -> SysMutator {
    let tokens: Vec<Vec<u8>> = dictionary
        .iter()
        .filter(|t| !t.is_empty() && t.len() <= 256)
        .cloned()
        .collect();
    let ints: Vec<i128> = tokens
        .iter()
        .filter_map(|t| std::str::from_utf8(t).ok())
        .filter_map(|s| s.parse::<i128>().ok())
        .collect();
    let stack = HavocScheduledMutator::with_max_stack_pow(
        tuple_list!(
            ByteMutator,
            LineMutator,
            NumberMutator { ints },
            TokenMutator {
                tokens: tokens.clone()
            },
            ArgListMutator { tokens },
            CrossoverMutator
        ),
        3,
    );
    SysMutator { stack }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::engine::SysState;
    use crate::input::tests::input;
    use crate::input::{SysInput, MAX_ARGS, MAX_ARG_LEN, MAX_CONTENT};
    use libafl::corpus::{CachedOnDiskCorpus, Corpus, InMemoryCorpus, Testcase};
    use libafl::mutators::Mutator;
    use libafl::state::{HasCorpus, StdState};
    use libafl_bolts::rands::StdRand;

    /// A state with a corpus, enough for every mutator (and the queue directory it writes to).
    pub(crate) fn state() -> (tempfile::TempDir, SysState) {
        let dir = tempfile::tempdir().unwrap();
        let mut feedback = ();
        let mut objective = ();
        let mut s = StdState::new(
            StdRand::with_seed(7),
            CachedOnDiskCorpus::with_meta_format_and_prefix(
                dir.path(),
                crate::engine::QUEUE_INPUTS_IN_MEMORY,
                None,
                None,
                false,
            )
            .unwrap(),
            InMemoryCorpus::new(),
            &mut feedback,
            &mut objective,
        )
        .unwrap();
        let mut other = input(&["login", "guest", "pw"], "set 1 2\nhelp\n");
        other.files.insert("f.txt".into(), b"x 1\ny 2\n".to_vec());
        s.corpus_mut().add(Testcase::from(other)).unwrap();
        (dir, s)
    }

    #[test]
    fn mutations_stay_within_bounds_and_valid() {
        let (_dir, mut s) = state();
        let mut m = sys_mutator(&[b"admin".to_vec(), b"42342531".to_vec()]);
        let mut changed = 0;
        for k in 0..3000 {
            let mut i = input(&["set", "7", "12"], "boot\nset 3 4\n");
            if k % 2 == 0 {
                i.files.insert("in.txt".into(), b"1 2 3\n".to_vec());
                i.args.push(b"in.txt".to_vec());
            }
            let before = i.clone();
            for _ in 0..8 {
                let _ = m.mutate(&mut s, &mut i).unwrap();
            }
            changed += usize::from(i != before);
            assert!(i.args.len() <= MAX_ARGS);
            assert!(i.args.iter().all(|a| a.len() <= MAX_ARG_LEN + 3
                && !a.contains(&0)
                && std::str::from_utf8(a).is_ok()));
            assert!(
                i.stdin.len() <= MAX_CONTENT && i.files.values().all(|v| v.len() <= MAX_CONTENT)
            );
            // The round trip through JSON is exact: what runs is what is saved.
            assert_eq!(SysInput::from_test(&i.to_test()), i);
        }
        assert!(changed > 2900, "only {changed} of 3000 inputs changed");
    }

    /// What a mutant takes from another entry is named as that entry's, on the mutant's
    /// queue entry if it joins; a mutant that took nothing names no donor.
    #[test]
    fn a_mutant_names_the_entries_it_took_material_from() {
        use libafl::HasMetadata as _;
        let (_dir, mut s) = state();
        let lender = s.corpus().first().unwrap();
        let lender_name = {
            let tc = s.corpus().get(lender).unwrap().borrow();
            tc.file_path()
                .as_ref()
                .unwrap()
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        };
        // Crossover always takes from the other entry when it mutates.
        let mut i = input(&["q"], "zzz\n");
        while CrossoverMutator.mutate(&mut s, &mut i).unwrap() == MutationResult::Skipped {}
        assert_eq!(s.metadata::<Donors>().unwrap().0, vec![lender_name.clone()]);
        // Bytes come from nowhere else: no donor is left from the mutant before.
        let mut m = SysMutator {
            stack: HavocScheduledMutator::new(tuple_list!(ByteMutator)),
        };
        let mut i = input(&["q"], "zzz\n");
        let _ = m.mutate(&mut s, &mut i).unwrap();
        assert!(!s.has_metadata::<Donors>());
        // Through the stack: a mutant that joins the queue carries its donors there.
        let mut m = SysMutator {
            stack: HavocScheduledMutator::new(tuple_list!(CrossoverMutator)),
        };
        let mut i = input(&["q"], "zzz\n");
        while m.mutate(&mut s, &mut i).unwrap() == MutationResult::Skipped {}
        let joined = s.corpus_mut().add(Testcase::from(i)).unwrap();
        m.post_exec(&mut s, Some(joined)).unwrap();
        assert!(!s.has_metadata::<Donors>(), "moved to the entry");
        let tc = s.corpus().get(joined).unwrap().borrow();
        assert_eq!(tc.metadata::<Donors>().unwrap().0, vec![lender_name]);
    }
}

//! The edges each queue entry reached, as the minimizing scheduler keeps them.
//! LibAFL's `MapIndexesMetadata` holds a `usize` per edge, on every entry that is still
//! the best (smallest and fastest) for some edge: over hours of fuzzing that grows
//! with the queue and becomes most of the fuzzer's memory (the two-hour sed soak: about
//! 30 KB more per entry). [`CompactIndexes`] holds the same indices sorted, as LEB128
//! deltas: a byte or two each. [`Compacting`] wraps the feedback that writes the
//! indices and converts them as each entry joins the queue, before the scheduler reads
//! them.

use libafl::corpus::Testcase;
use libafl::feedbacks::{Feedback, MapIndexesMetadata, StateInitializer};
use libafl::{Error, HasMetadata as _};
use libafl_bolts::{AsIter, HasRefCnt, Named};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::ops::Deref;

/// Edge indices, ascending and distinct, each stored as its distance from the one
/// before in LEB128; with the scheduler's reference count.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactIndexes {
    deltas: Vec<u8>,
    tcref: isize,
}

libafl_bolts::impl_serdeany!(CompactIndexes);

impl CompactIndexes {
    /// The indices of `list`, in any order, repeats dropped.
    pub fn new(mut list: Vec<usize>) -> CompactIndexes {
        list.sort_unstable();
        list.dedup();
        let mut deltas = Vec::with_capacity(list.len() + list.len() / 4);
        let mut last = 0;
        for (k, &i) in list.iter().enumerate() {
            // The first is stored whole (it may be 0); each next one is above the last.
            let mut d = if k == 0 { i } else { i - last };
            last = i;
            loop {
                let byte = (d & 0x7f) as u8;
                d >>= 7;
                if d == 0 {
                    deltas.push(byte);
                    break;
                }
                deltas.push(byte | 0x80);
            }
        }
        deltas.shrink_to_fit();
        CompactIndexes { deltas, tcref: 0 }
    }

    /// The indices, ascending.
    pub fn iter(&self) -> Indexes<'_> {
        Indexes {
            bytes: &self.deltas,
            at: 0,
            last: None,
        }
    }

    /// The bytes the indices take.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.deltas.len()
    }
}

/// The indices of a [`CompactIndexes`], ascending.
#[derive(Debug, Clone)]
pub struct Indexes<'a> {
    bytes: &'a [u8],
    at: usize,
    last: Option<usize>,
}

/// One index, as LibAFL's iteration over indices wants it (something that derefs to
/// a `usize`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Index(usize);

impl Deref for Index {
    type Target = usize;
    fn deref(&self) -> &usize {
        &self.0
    }
}

impl Iterator for Indexes<'_> {
    type Item = Index;

    fn next(&mut self) -> Option<Index> {
        let mut d = 0usize;
        let mut shift = 0;
        loop {
            let byte = *self.bytes.get(self.at)?;
            self.at += 1;
            d |= usize::from(byte & 0x7f) << shift;
            shift += 7;
            if byte & 0x80 == 0 {
                break;
            }
        }
        let i = self.last.map_or(d, |last| last + d);
        self.last = Some(i);
        Some(Index(i))
    }
}

impl<'it> AsIter<'it> for CompactIndexes {
    type Item = usize;
    type Ref = Index;
    type IntoIter = Indexes<'it>;

    fn as_iter(&'it self) -> Indexes<'it> {
        self.iter()
    }
}

impl HasRefCnt for CompactIndexes {
    fn refcnt(&self) -> isize {
        self.tcref
    }

    fn refcnt_mut(&mut self) -> &mut isize {
        &mut self.tcref
    }
}

/// A feedback whose new entries get their `MapIndexesMetadata` as [`CompactIndexes`].
#[derive(Debug)]
pub struct Compacting<F> {
    inner: F,
}

impl<F> Compacting<F> {
    pub fn new(inner: F) -> Compacting<F> {
        Compacting { inner }
    }
}

impl<F: Named> Named for Compacting<F> {
    fn name(&self) -> &Cow<'static, str> {
        self.inner.name()
    }
}

impl<S, F: StateInitializer<S>> StateInitializer<S> for Compacting<F> {
    fn init_state(&mut self, state: &mut S) -> Result<(), Error> {
        self.inner.init_state(state)
    }
}

impl<EM, I, OT, S, F: Feedback<EM, I, OT, S>> Feedback<EM, I, OT, S> for Compacting<F> {
    fn is_interesting(
        &mut self,
        state: &mut S,
        manager: &mut EM,
        input: &I,
        observers: &OT,
        exit_kind: &libafl::executors::ExitKind,
    ) -> Result<bool, Error> {
        self.inner
            .is_interesting(state, manager, input, observers, exit_kind)
    }

    fn append_metadata(
        &mut self,
        state: &mut S,
        manager: &mut EM,
        observers: &OT,
        testcase: &mut Testcase<I>,
    ) -> Result<(), Error> {
        self.inner
            .append_metadata(state, manager, observers, testcase)?;
        if let Some(m) = testcase.metadata_map_mut().remove::<MapIndexesMetadata>() {
            // Their count, kept whatever the minimizer later drops: the entry's energy
            // weighs it.
            testcase.add_metadata(super::energy::EntryEdges(m.list.len() as u64));
            testcase.add_metadata(CompactIndexes::new(m.list));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_come_back_ascending_and_distinct_in_a_byte_or_two_each() {
        let list = vec![70_000, 0, 5, 127, 128, 5, 129, 16_511, 1 << 40];
        let c = CompactIndexes::new(list);
        let back: Vec<usize> = c.iter().map(|i| *i).collect();
        assert_eq!(back, vec![0, 5, 127, 128, 129, 16_511, 70_000, 1 << 40]);
        // 0, +5, +122, +1, +1: a byte each; +16,382: two; +53,489: three; +2^40-70,000: six.
        assert_eq!(c.bytes(), 5 + 2 + 3 + 6);
        let dense = CompactIndexes::new((1000..3000).step_by(3).collect());
        assert_eq!(
            dense.bytes(),
            2 + 666,
            "the first whole, then a byte per index"
        );
        assert_eq!(dense.iter().count(), 667);
        assert_eq!(CompactIndexes::new(Vec::new()).iter().count(), 0);
    }

    #[test]
    fn the_feedback_replaces_the_index_list_and_the_minimizer_reads_it() {
        use libafl::corpus::{Corpus, InMemoryCorpus};
        use libafl::feedbacks::ConstFeedback;
        use libafl::inputs::BytesInput;
        use libafl::observers::{CanTrack, StdMapObserver};
        use libafl::schedulers::{LenTimeMinimizerScheduler, QueueScheduler, Scheduler};
        use libafl::state::{HasCorpus, StdState};
        use libafl_bolts::rands::StdRand;

        let mut map = [0u8; 16];
        // SAFETY: the map outlives the observer, which lives in this test only.
        let observer =
            unsafe { StdMapObserver::from_mut_ptr("edges", map.as_mut_ptr(), map.len()) }
                .track_indices();
        let mut feedback = ConstFeedback::new(true);
        let mut objective = ConstFeedback::new(false);
        let mut state = StdState::new(
            StdRand::with_seed(1),
            InMemoryCorpus::<BytesInput>::new(),
            InMemoryCorpus::new(),
            &mut feedback,
            &mut objective,
        )
        .unwrap();
        let mut compacting = Compacting::new(ConstFeedback::new(true));
        let mut scheduler = LenTimeMinimizerScheduler::<_, BytesInput, CompactIndexes, _>::new(
            &observer,
            QueueScheduler::new(),
        );
        // Two entries: the second is the only one at edge 9, the first at 3.
        for (edges, len) in [(vec![3usize, 7], 1usize), (vec![7, 9], 2)] {
            let mut tc = Testcase::new(BytesInput::new(vec![0; len]));
            tc.add_metadata(MapIndexesMetadata::new(edges.clone()));
            tc.set_exec_time(std::time::Duration::from_millis(1));
            let mut mgr = libafl::events::NopEventManager::new();
            Feedback::<_, BytesInput, (), _>::append_metadata(
                &mut compacting,
                &mut state,
                &mut mgr,
                &(),
                &mut tc,
            )
            .unwrap();
            assert!(!tc.has_metadata::<MapIndexesMetadata>());
            assert_eq!(
                tc.metadata::<CompactIndexes>()
                    .unwrap()
                    .iter()
                    .map(|i| *i)
                    .collect::<Vec<_>>(),
                edges
            );
            let id = state.corpus_mut().add(tc).unwrap();
            scheduler.on_add(&mut state, id).unwrap();
        }
        let top = state
            .metadata::<libafl::schedulers::minimizer::TopRatedsMetadata>()
            .unwrap();
        let ids: Vec<_> = state.corpus().ids().collect();
        assert_eq!(top.map.get(&3), Some(&ids[0]));
        assert_eq!(
            top.map.get(&7),
            Some(&ids[0]),
            "the shorter entry is best at the edge both reach"
        );
        assert_eq!(top.map.get(&9), Some(&ids[1]));
    }
}

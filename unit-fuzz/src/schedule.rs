//! Which queue entry to fuzz next: AFL++'s favoured entries (per edge the smallest,
//! fastest entry that reaches it) with two faults of LibAFL's minimizing scheduler
//! put right, which matter for every program that runs in under a millisecond:
//!
//! - LibAFL's length × time penalty takes the run time in whole milliseconds, so a
//!   run of 0.3 ms counts as 0 and every entry's penalty is 0. A new entry then
//!   always beats the old one at each edge it reaches ("not worse"), and the
//!   favoured entries are the newest, which are the longest: mutations grow inputs.
//!   [`LenMicros`] takes microseconds, as AFL++ does.
//! - Its cull marks the entries that are top-rated now as favoured but never unmarks
//!   those that were, so over a campaign nearly every entry is favoured and skipping
//!   the others (95 of 100 picks) does nothing. [`Refavour`] clears the marks before
//!   each cull, as AFL++ recomputes its favoured set.

use libafl::corpus::{Corpus, CorpusId, Testcase};
use libafl::schedulers::minimizer::IsFavoredMetadata;
use libafl::schedulers::{MinimizerScheduler, RemovableScheduler, Scheduler, TestcasePenalty};
use libafl::state::HasCorpus;
use libafl::{Error, HasMetadata};
use libafl_bolts::tuples::MatchName;
use libafl_bolts::HasLen;

/// AFL++'s favour factor: run time in microseconds × length (lower is better).
#[derive(Debug, Clone, Copy)]
pub struct LenMicros;

impl<I: HasLen, S: HasCorpus<I>> TestcasePenalty<I, S> for LenMicros {
    fn compute(state: &S, entry: &mut Testcase<I>) -> Result<f64, Error> {
        let micros = entry
            .exec_time()
            .map_or(1.0, |d| d.as_secs_f64() * 1e6)
            .max(1.0);
        Ok(micros * entry.load_len(state.corpus())?.max(1) as f64)
    }
}

/// A minimizing scheduler whose favoured entries are recomputed at every pick (see
/// the module documentation).
#[derive(Debug, Clone)]
pub struct Refavour<CS>(pub CS);

impl<CS, I, S> Scheduler<I, S> for Refavour<CS>
where
    CS: Scheduler<I, S>,
    S: HasCorpus<I>,
{
    fn on_add(&mut self, state: &mut S, id: CorpusId) -> Result<(), Error> {
        self.0.on_add(state, id)
    }

    fn on_evaluation<OT: MatchName>(
        &mut self,
        state: &mut S,
        input: &I,
        observers: &OT,
    ) -> Result<(), Error> {
        self.0.on_evaluation(state, input, observers)
    }

    fn next(&mut self, state: &mut S) -> Result<CorpusId, Error> {
        let ids: Vec<CorpusId> = state.corpus().ids().collect();
        for id in ids {
            let mut tc = state.corpus().get(id)?.borrow_mut();
            if tc.has_metadata::<IsFavoredMetadata>() {
                drop(tc.metadata_map_mut().remove::<IsFavoredMetadata>());
            }
        }
        self.0.next(state)
    }

    fn set_current_scheduled(
        &mut self,
        state: &mut S,
        next_id: Option<CorpusId>,
    ) -> Result<(), Error> {
        self.0.set_current_scheduled(state, next_id)
    }
}

impl<CS, I, S> RemovableScheduler<I, S> for Refavour<CS>
where
    CS: RemovableScheduler<I, S>,
{
    fn on_remove(
        &mut self,
        state: &mut S,
        id: CorpusId,
        testcase: &Option<Testcase<I>>,
    ) -> Result<(), Error> {
        self.0.on_remove(state, id, testcase)
    }

    fn on_replace(&mut self, state: &mut S, id: CorpusId, prev: &Testcase<I>) -> Result<(), Error> {
        self.0.on_replace(state, id, prev)
    }
}

/// The minimizing scheduler over `base`, favouring per edge the entry with the least
/// run time × length, with the edges of each entry kept as metadata `M`.
pub type SmallFastScheduler<CS, I, M, O> = Refavour<MinimizerScheduler<CS, LenMicros, I, M, O>>;

/// [`SmallFastScheduler`] over `base`, reading the edges `observer` tracks.
pub fn small_fast<CS, I, M, O>(observer: &O, base: CS) -> SmallFastScheduler<CS, I, M, O>
where
    O: libafl::observers::CanTrack,
{
    Refavour(MinimizerScheduler::new(observer, base))
}

#[cfg(test)]
mod tests {
    use super::*;
    use libafl::corpus::InMemoryCorpus;
    use libafl::feedbacks::ConstFeedback;
    use libafl::feedbacks::MapIndexesMetadata;
    use libafl::inputs::BytesInput;
    use libafl::observers::{CanTrack, StdMapObserver};
    use libafl::schedulers::minimizer::TopRatedsMetadata;
    use libafl::schedulers::QueueScheduler;
    use libafl::state::StdState;
    use libafl_bolts::rands::StdRand;
    use std::time::Duration;

    type State =
        StdState<InMemoryCorpus<BytesInput>, BytesInput, StdRand, InMemoryCorpus<BytesInput>>;

    fn add(
        state: &mut State,
        scheduler: &mut impl Scheduler<BytesInput, State>,
        edges: &[usize],
        len: usize,
        micros: u64,
    ) -> CorpusId {
        let mut tc = Testcase::new(BytesInput::new(vec![b'a'; len]));
        tc.add_metadata(MapIndexesMetadata::new(edges.to_vec()));
        tc.set_exec_time(Duration::from_micros(micros));
        let id = state.corpus_mut().add(tc).unwrap();
        scheduler.on_add(state, id).unwrap();
        id
    }

    fn favoured(state: &State) -> Vec<CorpusId> {
        state
            .corpus()
            .ids()
            .filter(|id| {
                state
                    .corpus()
                    .get(*id)
                    .unwrap()
                    .borrow()
                    .has_metadata::<IsFavoredMetadata>()
            })
            .collect()
    }

    /// Entries that run in well under a millisecond: the short one stays best at the
    /// edge a longer, newer one also reaches, and an entry that is no longer best
    /// anywhere is no longer favoured after the next pick.
    #[test]
    fn the_smallest_entry_per_edge_is_favoured_and_a_replaced_one_no_longer() {
        let mut map = [0u8; 16];
        // SAFETY: the map outlives the observer, which lives in this test only.
        let observer =
            unsafe { StdMapObserver::from_mut_ptr("edges", map.as_mut_ptr(), map.len()) }
                .track_indices();
        let (mut feedback, mut objective) = (ConstFeedback::new(true), ConstFeedback::new(false));
        let mut state: State = StdState::new(
            StdRand::with_seed(1),
            InMemoryCorpus::new(),
            InMemoryCorpus::new(),
            &mut feedback,
            &mut objective,
        )
        .unwrap();
        let mut s: SmallFastScheduler<_, BytesInput, MapIndexesMetadata, _> =
            small_fast(&observer, QueueScheduler::new());
        let short = add(&mut state, &mut s, &[3, 7], 10, 300);
        let long = add(&mut state, &mut s, &[3, 7], 900, 310);
        let top = state.metadata::<TopRatedsMetadata>().unwrap();
        assert_eq!(
            top.map.get(&3),
            Some(&short),
            "the newer, longer entry does not win"
        );
        s.next(&mut state).unwrap();
        assert_eq!(favoured(&state), vec![short]);
        let _ = long;
        // A shorter entry at both edges takes over; the first is favoured no more.
        let shorter = add(&mut state, &mut s, &[3, 7], 4, 290);
        s.next(&mut state).unwrap();
        assert_eq!(favoured(&state), vec![shorter]);
    }
}

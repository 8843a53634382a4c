//! How many mutations a picked queue entry gets: AFL++'s energy (`perf_score` under its
//! default "fast" schedule, as LibAFL's power score computes it) instead of a fixed few.
//! A fast entry, one that reaches more edges than most, a new one, and one whose path
//! the fuzzer rarely ran get more; a slow one, or one on a path run thousands of times,
//! fewer. With a fixed 1-32 mutations an entry, dc's dump-bytes bug, one byte away from
//! a seed on which AFL++ spends a burst of havoc first, took 25 s against AFL++'s 3.
//!
//! The score needs each entry's run time and edge count, and their means over the
//! queue. LibAFL's calibration stage gets them by running every new entry four to eight
//! times more; here they come from the run that made the entry (its time, and the edges
//! the queue feedback listed, [`EntryEdges`]) and are entered once, when the entry is
//! first picked ([`RateStage`]).

use crate::input::SysInput;
use libafl::corpus::{Corpus, HasCurrentCorpusId, SchedulerTestcaseMetadata, Testcase};
use libafl::schedulers::powersched::SchedulerMetadata;
use libafl::schedulers::testcase_score::{CorpusPowerTestcaseScore, TestcaseScore};
use libafl::stages::{Restartable, Stage};
use libafl::state::HasCorpus;
use libafl::{Error, HasMetadata};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The most mutations one pick of an entry gets (AFL++ allows 6,400).
pub const MAX_ENERGY: f64 = 2048.0;

/// The longest one pick may take, by the entry's run time: a pick is not interrupted,
/// and a campaign's system slice must end near its time. (Uncapped, a program that
/// takes a tenth of a second a run held one pick for 50 s of a 75 s campaign, and
/// the bridge's unit rounds never came again.)
pub const PICK_TIME: Duration = Duration::from_secs(1);

/// The edges the run that made an entry reached (the queue feedback's list, counted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryEdges(pub u64);

libafl_bolts::impl_serdeany!(EntryEdges);

/// An entry's energy: LibAFL's power score, at least one mutation and at most
/// [`MAX_ENERGY`], or as many as its run time fits into [`PICK_TIME`].
#[derive(Debug, Clone, Copy)]
pub struct Energy;

impl<I, S> TestcaseScore<I, S> for Energy
where
    S: HasCorpus<I> + HasMetadata,
{
    fn compute(state: &S, entry: &mut Testcase<I>) -> Result<f64, Error> {
        let fits = entry.exec_time().map_or(MAX_ENERGY, |t| {
            PICK_TIME.as_secs_f64() / t.as_secs_f64().max(1e-6)
        });
        Ok(CorpusPowerTestcaseScore::compute(state, entry)?
            .min(MAX_ENERGY)
            .min(fits)
            .max(1.0))
    }
}

/// Enters a newly picked entry's time and edges into the power schedule's figures (its
/// own and the queue's means), once per entry, before its mutations.
#[derive(Debug, Clone, Copy, Default)]
pub struct RateStage;

impl<E, EM, S, Z> Stage<E, EM, S, Z> for RateStage
where
    S: HasCorpus<SysInput> + HasCurrentCorpusId + HasMetadata,
{
    fn perform(
        &mut self,
        _fuzzer: &mut Z,
        _executor: &mut E,
        state: &mut S,
        _manager: &mut EM,
    ) -> Result<(), Error> {
        let Some(id) = state.current_corpus_id()? else {
            return Ok(());
        };
        let (edges, time) = {
            let tc = state.corpus().get(id)?.borrow();
            match tc.metadata::<SchedulerTestcaseMetadata>() {
                Ok(m) if m.bitmap_size() == 0 => {}
                _ => return Ok(()), // rated already, or not the power scheduler's
            }
            (
                tc.metadata::<EntryEdges>().map_or(1, |e| e.0.max(1)),
                tc.exec_time().unwrap_or(Duration::from_millis(1)),
            )
        };
        let handicap = rate(state.metadata_mut::<SchedulerMetadata>()?, edges, time);
        let mut tc = state.corpus().get(id)?.borrow_mut();
        let m = tc.metadata_mut::<SchedulerTestcaseMetadata>()?;
        m.set_bitmap_size(edges);
        m.set_cycle_and_time((time, 1));
        m.set_handicap(handicap);
        Ok(())
    }
}

impl<S> Restartable<S> for RateStage {
    fn should_restart(&mut self, _state: &mut S) -> Result<bool, Error> {
        Ok(true)
    }

    fn clear_progress(&mut self, _state: &mut S) -> Result<(), Error> {
        Ok(())
    }
}

/// Add one entry of `edges` edges and run time `time` to the queue's figures; returns
/// its handicap (the queue cycles done before it came: a late entry is fuzzed more).
fn rate(m: &mut SchedulerMetadata, edges: u64, time: Duration) -> u64 {
    m.set_exec_time(m.exec_time() + time);
    m.set_cycles(m.cycles() + 1);
    m.set_bitmap_size(m.bitmap_size() + edges);
    m.set_bitmap_size_log(m.bitmap_size_log() + (edges as f64).log2());
    m.set_bitmap_entries(m.bitmap_entries() + 1);
    m.queue_cycles()
}

#[cfg(test)]
mod tests {
    use super::*;
    use libafl::corpus::InMemoryCorpus;
    use libafl::inputs::BytesInput;
    use libafl::schedulers::powersched::PowerSchedule;

    struct Queue {
        corpus: InMemoryCorpus<BytesInput>,
        meta: libafl_bolts::serdeany::SerdeAnyMap,
    }

    impl HasCorpus<BytesInput> for Queue {
        type Corpus = InMemoryCorpus<BytesInput>;
        fn corpus(&self) -> &Self::Corpus {
            &self.corpus
        }
        fn corpus_mut(&mut self) -> &mut Self::Corpus {
            &mut self.corpus
        }
    }

    impl HasMetadata for Queue {
        fn metadata_map(&self) -> &libafl_bolts::serdeany::SerdeAnyMap {
            &self.meta
        }
        fn metadata_map_mut(&mut self) -> &mut libafl_bolts::serdeany::SerdeAnyMap {
            &mut self.meta
        }
    }

    fn entry(edges: u64, ms: u64) -> Testcase<BytesInput> {
        let mut t = Testcase::new(BytesInput::new(vec![0]));
        t.set_exec_time(Duration::from_millis(ms));
        let mut m = SchedulerTestcaseMetadata::new(1);
        m.set_bitmap_size(edges);
        m.set_cycle_and_time((Duration::from_millis(ms), 1));
        t.add_metadata(m);
        t
    }

    #[test]
    fn fast_small_entries_get_more_and_every_pick_stays_within_bounds() {
        let mut q = Queue {
            corpus: InMemoryCorpus::new(),
            meta: libafl_bolts::serdeany::SerdeAnyMap::new(),
        };
        let mut m = SchedulerMetadata::new(Some(PowerSchedule::fast()));
        for (edges, ms) in [(100, 1), (100, 1), (100, 1), (100, 40)] {
            rate(&mut m, edges, Duration::from_millis(ms));
        }
        q.meta.insert(m);
        let fast = Energy::compute(&q, &mut entry(100, 1)).unwrap();
        let slow = Energy::compute(&q, &mut entry(100, 40)).unwrap();
        let wide = Energy::compute(&q, &mut entry(400, 1)).unwrap();
        assert!(
            fast > slow,
            "a fast entry gets more than a slow one: {fast} vs {slow}"
        );
        assert!(
            wide > fast,
            "an entry reaching more edges gets more: {wide} vs {fast}"
        );
        for e in [fast, slow, wide] {
            assert!((1.0..=MAX_ENERGY).contains(&e), "{e}");
        }
        // A pick of an entry that runs 40 ms takes at most a second.
        assert!(slow * 0.040 <= PICK_TIME.as_secs_f64(), "{slow}");
        // One that runs for seconds still gets a mutation.
        assert_eq!(Energy::compute(&q, &mut entry(100, 3000)).unwrap(), 1.0);
    }

    #[test]
    fn the_queue_means_count_each_entry_once() {
        let mut m = SchedulerMetadata::new(Some(PowerSchedule::fast()));
        rate(&mut m, 10, Duration::from_millis(2));
        m.set_queue_cycles(3);
        assert_eq!(
            rate(&mut m, 30, Duration::from_millis(4)),
            3,
            "the handicap is the queue cycles before it"
        );
        assert_eq!(
            (m.cycles(), m.bitmap_entries(), m.bitmap_size()),
            (2, 2, 40)
        );
        assert_eq!(m.exec_time(), Duration::from_millis(6));
    }
}

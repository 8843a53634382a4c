//! The observer and stage adapters the in-process fuzzer needs around LibAFL's: the
//! runtime's own CmpLog switch, stages that a crashing unit does not wear out, and
//! one tracing run per queue entry.

use libafl::corpus::{CorpusId, HasCurrentCorpusId};
use libafl::executors::ExitKind;
use libafl::observers::{CmpValues, CmpValuesMetadata, Observer};
use libafl::stages::{Restartable, Stage};
use libafl::{Error, HasMetadata};
use libafl_bolts::Named;
use libafl_targets::CmpLogObserver;
use std::borrow::Cow;

/// The unit's CmpLog observer: LibAFL's, over the map the runtime's `trace-cmp`
/// hooks write, switching those hooks on for the tracing run only (the runtime has
/// its own switch, not the one `CmpLogObserver` flips in this library).
pub(crate) struct HarnessCmpLogObserver {
    inner: CmpLogObserver,
    enabled: *mut u8,
}

impl HarnessCmpLogObserver {
    /// `inner` over the runtime's map, `enabled` the runtime's switch byte.
    pub(crate) fn new(inner: CmpLogObserver, enabled: *mut u8) -> Self {
        HarnessCmpLogObserver { inner, enabled }
    }
}

impl Named for HarnessCmpLogObserver {
    fn name(&self) -> &Cow<'static, str> {
        self.inner.name()
    }
}

impl<I, S: HasMetadata> Observer<I, S> for HarnessCmpLogObserver {
    fn pre_exec(&mut self, state: &mut S, input: &I) -> Result<(), Error> {
        self.inner.pre_exec(state, input)?;
        // SAFETY: the runtime's switch byte, valid for the process's life.
        unsafe { self.enabled.write_volatile(1) };
        Ok(())
    }

    fn post_exec(&mut self, state: &mut S, input: &I, exit_kind: &ExitKind) -> Result<(), Error> {
        // SAFETY: as above.
        unsafe { self.enabled.write_volatile(0) };
        self.inner.post_exec(state, input, exit_kind)
    }
}

/// A stage the unit interrupted (a crash, a hang) is simply performed again by the
/// next fuzzer process. LibAFL's own stages give up on a corpus entry after a few
/// interrupted runs, which suits stages that crash the fuzzer, not a unit that
/// crashes under mutation all the time: with a small queue, every stage would soon
/// be skipped for every entry and the fuzzer would spin without executing.
pub(crate) struct RetryAlways<ST>(pub(crate) ST);

impl<E, EM, S, Z, ST: Stage<E, EM, S, Z>> Stage<E, EM, S, Z> for RetryAlways<ST> {
    fn perform(
        &mut self,
        fuzzer: &mut Z,
        executor: &mut E,
        state: &mut S,
        manager: &mut EM,
    ) -> Result<(), Error> {
        self.0.perform(fuzzer, executor, state, manager)
    }
}

impl<S, ST> Restartable<S> for RetryAlways<ST> {
    fn should_restart(&mut self, _state: &mut S) -> Result<bool, Error> {
        Ok(true)
    }

    fn clear_progress(&mut self, _state: &mut S) -> Result<(), Error> {
        Ok(())
    }
}

/// The CmpLog tracing run, once per queue entry: an entry traced before gets its
/// comparisons back from a cache instead (the unit is deterministic, so a second
/// trace would find the same ones). A tracing run reads the whole CmpLog map, the
/// largest cost per round once executions are cheap.
pub(crate) struct TraceOnceEach<ST> {
    inner: ST,
    seen: std::collections::HashMap<CorpusId, Vec<CmpValues>>,
}

impl<ST> TraceOnceEach<ST> {
    /// Trace with `inner`, once per entry.
    pub(crate) fn new(inner: ST) -> Self {
        TraceOnceEach {
            inner,
            seen: Default::default(),
        }
    }
}

/// Entries whose comparisons [`TraceOnceEach`] keeps; past that, it traces again.
const TRACES_KEPT: usize = 4096;

impl<E, EM, S, Z, ST> Stage<E, EM, S, Z> for TraceOnceEach<ST>
where
    S: HasCurrentCorpusId + HasMetadata,
    ST: Stage<E, EM, S, Z>,
{
    fn perform(
        &mut self,
        fuzzer: &mut Z,
        executor: &mut E,
        state: &mut S,
        manager: &mut EM,
    ) -> Result<(), Error> {
        let id = state.current_corpus_id()?;
        if let Some(list) = id.and_then(|id| self.seen.get(&id)) {
            state
                .metadata_or_insert_with(CmpValuesMetadata::new)
                .list
                .clone_from(list);
            return Ok(());
        }
        self.inner.perform(fuzzer, executor, state, manager)?;
        if let (Some(id), Ok(meta)) = (id, state.metadata::<CmpValuesMetadata>()) {
            if self.seen.len() < TRACES_KEPT {
                self.seen.insert(id, meta.list.clone());
            }
        }
        Ok(())
    }
}

impl<S, ST> Restartable<S> for TraceOnceEach<ST> {
    fn should_restart(&mut self, _state: &mut S) -> Result<bool, Error> {
        Ok(true)
    }

    fn clear_progress(&mut self, _state: &mut S) -> Result<(), Error> {
        Ok(())
    }
}

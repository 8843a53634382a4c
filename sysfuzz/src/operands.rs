//! Which comparisons the input moves: after each tracing (CmpLog) run, the operands
//! every logged comparison saw are compared with those it saw first, over all traced
//! runs of the campaign. A comparison whose operands never changed tests a setting
//! (sed's `mb_cur_max > 1`: the locale; a flag no queue entry sets), not a value the
//! input carries; one whose operands changed compares something the input decides,
//! and a unit whose parameters reach it may decide it too.
//!
//! Kept in the state as [`OperandVariation`]; the campaign ranks roadblocks by it
//! ([`super::SysFuzzer::operands_vary`]).

use libafl::observers::cmp::{CmpMap, CmpValues};
use libafl::stages::{Restartable, Stage};
use libafl::HasMetadata;
use libafl_bolts::ToSlice as _;
use libafl_targets::{CmpLogMap, CMPLOG_MAP_W};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::hash::{Hash as _, Hasher as _};
use trestle_abi::lean::CMPLOG_SEEN_WORDS;

/// Per CmpLog id: the operands seen first (hashed) and whether any others were seen.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct OperandVariation {
    first: HashMap<u32, u64>,
    varied: HashSet<u32>,
}

libafl_bolts::impl_serdeany!(OperandVariation);

impl OperandVariation {
    /// Note one logged execution of comparison `id`.
    pub fn note(&mut self, id: u32, operands: u64) {
        if *self.first.entry(id).or_insert(operands) != operands {
            self.varied.insert(id);
        }
    }

    /// Whether comparison `id` was seen with more than one pair of operands; `None`
    /// if no traced run logged it.
    pub fn varies(&self, id: u32) -> Option<bool> {
        self.first
            .contains_key(&id)
            .then(|| self.varied.contains(&id))
    }
}

/// A hash of one logged execution's operands (LibAFL's flag for a constant first
/// operand left out: the values alone say what was compared).
fn operands_hash(v: &CmpValues) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    match v {
        CmpValues::U8((a, b, _)) => (0u8, u64::from(*a), u64::from(*b)).hash(&mut h),
        CmpValues::U16((a, b, _)) => (1u8, u64::from(*a), u64::from(*b)).hash(&mut h),
        CmpValues::U32((a, b, _)) => (2u8, u64::from(*a), u64::from(*b)).hash(&mut h),
        CmpValues::U64((a, b, _)) => (3u8, *a, *b).hash(&mut h),
        CmpValues::Bytes((a, b)) => (4u8, a.to_slice(), b.to_slice()).hash(&mut h),
    }
    h.finish()
}

/// What one traced run logged at one comparison: how often it ran and the
/// operands (hashed) of the executions the map holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperandSample {
    /// Executions of the comparison in the run.
    pub hits: usize,
    /// The operands of the executions the map holds (32 at most).
    pub operands: Vec<u64>,
    /// The set of every execution's operands, hashed to bits, that the lean runtime
    /// notes past the map; all zero from a runtime that does not.
    pub seen: [u64; CMPLOG_SEEN_WORDS],
}

impl OperandSample {
    /// Whether the run executed the comparison more often than the map logs and no
    /// set of all it saw says more: a change past the logged executions would not
    /// show. A set with every bit set says nothing either.
    pub fn saturated(&self) -> bool {
        let set_known = self.noted() && self.seen.iter().any(|&w| w != u64::MAX);
        self.hits > self.operands.len() && !set_known
    }

    /// Whether the runtime noted a set of all operands (the lean one does).
    fn noted(&self) -> bool {
        self.seen.iter().any(|&w| w != 0)
    }

    /// Whether `other` (a run of a changed input) saw anything this did not, or
    /// missed anything this saw: the distinct operands logged in the map, and the
    /// sets of all operands when both runs noted one.
    pub fn differs(&self, other: &OperandSample) -> bool {
        self.distinct() != other.distinct()
            || (self.noted() && other.noted() && self.seen != other.seen)
    }

    /// The distinct operands: what the comparison saw, whatever how often or in what
    /// order (a changed input that only runs it more or less often, as a command
    /// added or dropped does, changes nothing it compares).
    pub fn distinct(&self) -> std::collections::BTreeSet<u64> {
        self.operands.iter().copied().collect()
    }
}

/// What `map` logged at comparison `id`, with the set `seen` noted past it.
pub(super) fn sample(map: &CmpLogMap, id: u32, seen: [u64; CMPLOG_SEEN_WORDS]) -> OperandSample {
    let id = id as usize;
    if id >= map.len() {
        return OperandSample {
            hits: 0,
            operands: Vec::new(),
            seen,
        };
    }
    let operands = (0..map.usable_executions_for(id))
        .filter_map(|k| map.values_of(id, k))
        .map(|v| operands_hash(&v))
        .collect();
    OperandSample {
        hits: map.executions_for(id),
        operands,
        seen,
    }
}

/// Where comparison `id`'s set of operands seen lies in the CmpLog segment (bytes
/// from its start), and its length: rows of [`CMPLOG_SEEN_WORDS`] words right after
/// LibAFL's map (`runtime/lean/lean.c`). `None` past a segment of `segment` bytes.
pub(super) fn seen_row(id: u32, segment: usize) -> Option<std::ops::Range<usize>> {
    let row = CMPLOG_SEEN_WORDS * 8;
    let start = std::mem::size_of::<CmpLogMap>() + (id as usize % CMPLOG_MAP_W) * row;
    let end = std::mem::size_of::<CmpLogMap>() + CMPLOG_MAP_W * row;
    (end <= segment).then_some(start..start + row)
}

/// The stage after the tracing run: reads the CmpLog map it left and updates the
/// state's [`OperandVariation`].
pub struct OperandWatch {
    map: *const CmpLogMap,
}

impl OperandWatch {
    /// # Safety
    /// `map` must stay valid (and hold a CmpLog map) as long as the stage lives.
    pub unsafe fn new(map: *const CmpLogMap) -> Self {
        OperandWatch { map }
    }
}

/// Read every comparison `map` logged into `into` (but those already seen to vary:
/// nothing more can be learnt of them, and the stage runs on every pick).
pub(super) fn note_map(map: &CmpLogMap, into: &mut OperandVariation) {
    for id in 0..map.len() {
        let logged = map.usable_executions_for(id);
        if logged == 0 || into.varied.contains(&(id as u32)) {
            continue;
        }
        for k in 0..logged {
            if let Some(v) = map.values_of(id, k) {
                into.note(id as u32, operands_hash(&v));
            }
        }
    }
}

impl<E, EM, S: HasMetadata, Z> Stage<E, EM, S, Z> for OperandWatch {
    fn perform(
        &mut self,
        _fuzzer: &mut Z,
        _executor: &mut E,
        state: &mut S,
        _manager: &mut EM,
    ) -> Result<(), libafl::Error> {
        // SAFETY: `new`'s contract; the tracing run that wrote it has ended.
        let map = unsafe { &*self.map };
        note_map(
            map,
            state.metadata_or_insert_with(OperandVariation::default),
        );
        Ok(())
    }
}

impl<S> Restartable<S> for OperandWatch {
    fn should_restart(&mut self, _state: &mut S) -> Result<bool, libafl::Error> {
        Ok(true)
    }

    fn clear_progress(&mut self, _state: &mut S) -> Result<(), libafl::Error> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_set_of_operands_seen_fits_after_the_map_in_the_segment_the_host_makes() {
        // The lean runtime's `struct cmp_map`: 4-byte headers, 32 operand rows of 24.
        assert_eq!(
            std::mem::size_of::<CmpLogMap>(),
            CMPLOG_MAP_W * 4 + CMPLOG_MAP_W * 32 * 24
        );
        let segment = std::mem::size_of::<libafl_targets::AflppCmpLogMap>();
        let last = seen_row(CMPLOG_MAP_W as u32 - 1, segment).expect("room for the set");
        assert_eq!(
            last.end,
            std::mem::size_of::<CmpLogMap>() + CMPLOG_MAP_W * CMPLOG_SEEN_WORDS * 8
        );
        assert!(
            seen_row(0, std::mem::size_of::<CmpLogMap>()).is_none(),
            "a segment of LibAFL's size has no room"
        );
    }

    #[test]
    fn a_hot_comparison_is_told_apart_by_its_set_of_operands() {
        let s = |hits: usize, operands: Vec<u64>, seen: [u64; CMPLOG_SEEN_WORDS]| OperandSample {
            hits,
            operands,
            seen,
        };
        let logged = vec![1; 32];
        let base = s(200, logged.clone(), [0b1, 0, 0, 0]);
        assert!(
            !base.saturated(),
            "the set says what the 32 logged runs do not"
        );
        assert!(
            base.differs(&s(200, logged.clone(), [0b11, 0, 0, 0])),
            "a new operand past the logged runs"
        );
        assert!(
            !base.differs(&s(150, logged.clone(), [0b1, 0, 0, 0])),
            "run less often, the same operands"
        );
        let unnoted = s(200, logged.clone(), [0; CMPLOG_SEEN_WORDS]);
        assert!(
            unnoted.saturated(),
            "no set (the program's own runtime): past 32 runs, no telling"
        );
        assert!(
            !unnoted.differs(&s(200, logged.clone(), [0b11, 0, 0, 0])),
            "a set on one side only says nothing"
        );
        assert!(
            s(200, logged, [u64::MAX; CMPLOG_SEEN_WORDS]).saturated(),
            "every bit set"
        );
        assert!(
            base.differs(&s(3, vec![1, 2, 1], [0b1, 0, 0, 0])),
            "another operand among those logged"
        );
    }

    #[test]
    fn a_comparison_varies_once_it_is_seen_with_other_operands() {
        let mut v = OperandVariation::default();
        assert_eq!(v.varies(7), None, "never logged");
        v.note(7, 1);
        v.note(7, 1);
        assert_eq!(
            v.varies(7),
            Some(false),
            "the same operands every time: a setting"
        );
        v.note(7, 2);
        v.note(7, 1);
        assert_eq!(v.varies(7), Some(true));
        assert_eq!(v.varies(8), None);
    }

    #[test]
    fn the_operands_alone_decide_the_hash() {
        let a = operands_hash(&CmpValues::U32((5, 9, false)));
        assert_eq!(a, operands_hash(&CmpValues::U32((5, 9, true))));
        assert_ne!(a, operands_hash(&CmpValues::U32((6, 9, false))));
        assert_ne!(
            a,
            operands_hash(&CmpValues::U64((5, 9, false))),
            "a wider comparison is another one"
        );
    }
}

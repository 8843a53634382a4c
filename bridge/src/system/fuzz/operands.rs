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
use libafl_targets::CmpLogMap;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::hash::{Hash as _, Hasher as _};

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
        self.first.contains_key(&id).then(|| self.varied.contains(&id))
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
    fn perform(&mut self, _fuzzer: &mut Z, _executor: &mut E, state: &mut S, _manager: &mut EM) -> Result<(), libafl::Error> {
        // SAFETY: `new`'s contract; the tracing run that wrote it has ended.
        let map = unsafe { &*self.map };
        note_map(map, state.metadata_or_insert_with(OperandVariation::default));
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
    fn a_comparison_varies_once_it_is_seen_with_other_operands() {
        let mut v = OperandVariation::default();
        assert_eq!(v.varies(7), None, "never logged");
        v.note(7, 1);
        v.note(7, 1);
        assert_eq!(v.varies(7), Some(false), "the same operands every time: a setting");
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
        assert_ne!(a, operands_hash(&CmpValues::U64((5, 9, false))), "a wider comparison is another one");
    }
}

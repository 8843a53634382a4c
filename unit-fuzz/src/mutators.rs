//! Parameter-aware mutators: the value mutations of the bridge paper, applied to one
//! decoded parameter at a time (0, INT_MIN, INT_MAX, bit flips and random values for
//! integers; bit flips, random bytes, random ASCII, NUL runs, 0xFF runs and repeated
//! pieces of the recorded value for strings; a dictionary word for either).

use libafl::inputs::{BytesInput, HasMutatorBytes};
use libafl::mutators::{MutationResult, Mutator};
use libafl::state::HasRand;
use libafl::Error;
use libafl_bolts::rands::Rand;
use libafl_bolts::Named;
use std::borrow::Cow;
use std::num::NonZeroUsize;
use trestle_abi::fuzz::{decode_values, encode_values, ParamValue};
use trestle_abi::unit::{Param, ParamKind};

/// Longest string a mutation makes.
const MAX_LEN: usize = 4096;

/// Mutates one parameter of an encoded input.
pub struct ParamValueMutator {
    params: Vec<Param>,
    words: Vec<Vec<u8>>,
    ints: Vec<i64>,
}

impl ParamValueMutator {
    /// A mutator for `params`, with dictionary words and integers.
    pub fn new(params: Vec<Param>, words: Vec<Vec<u8>>, ints: Vec<i64>) -> Self {
        ParamValueMutator { params, words, ints }
    }
}

impl Named for ParamValueMutator {
    fn name(&self) -> &Cow<'static, str> {
        static NAME: Cow<'static, str> = Cow::Borrowed("ParamValueMutator");
        &NAME
    }
}

fn nz(n: usize) -> NonZeroUsize {
    NonZeroUsize::new(n.max(1)).expect("max(1) is non-zero")
}

fn int_limits(bits: u16) -> (i64, i64) {
    if bits >= 64 {
        (i64::MIN, i64::MAX)
    } else {
        (-(1i64 << (bits - 1)), (1i64 << (bits - 1)) - 1)
    }
}

impl<S: HasRand> Mutator<BytesInput, S> for ParamValueMutator {
    fn mutate(&mut self, state: &mut S, input: &mut BytesInput) -> Result<MutationResult, Error> {
        if self.params.is_empty() {
            return Ok(MutationResult::Skipped);
        }
        let mut values = decode_values(&self.params, input.mutator_bytes());
        let rand = state.rand_mut();
        let k = rand.below(nz(self.params.len()));
        let p = &self.params[k];
        let new = match (&values[k], p.kind) {
            (ParamValue::Int(v), ParamKind::Int { bits }) => {
                let (lo, hi) = int_limits(bits.max(8));
                let x = match rand.below(nz(7)) {
                    0 => 0,
                    1 => lo,
                    2 => hi,
                    3 => v ^ (1i64 << rand.below(nz(bits.max(8) as usize))),
                    4 => rand.next() as i64,
                    5 if !self.ints.is_empty() => self.ints[rand.below(nz(self.ints.len()))],
                    _ => v.wrapping_add(rand.below(nz(33)) as i64 - 16),
                };
                ParamValue::Int(x)
            }
            (ParamValue::Bytes(b), ParamKind::Bytes { .. }) => {
                let mut b = b.clone();
                match rand.below(nz(8)) {
                    0 if !b.is_empty() => {
                        let i = rand.below(nz(b.len()));
                        b[i] ^= 1 << rand.below(nz(8));
                    }
                    1 => {
                        let n = rand.below(nz(64)) + 1;
                        b = (0..n).map(|_| rand.next() as u8).collect();
                    }
                    2 => {
                        let n = rand.below(nz(64)) + 1;
                        b = (0..n).map(|_| 0x20 + (rand.below(nz(95)) as u8)).collect();
                    }
                    3 => {
                        let n = rand.below(nz(64)) + 1;
                        b.extend(std::iter::repeat_n(0u8, n));
                    }
                    4 => {
                        let n = rand.below(nz(64)) + 1;
                        b.extend(std::iter::repeat_n(0xffu8, n));
                    }
                    5 if !p.original.is_empty() => {
                        // Repeat a piece of the recorded value.
                        let o = &p.original;
                        let s = rand.below(nz(o.len()));
                        let e = s + 1 + rand.below(nz(o.len() - s));
                        let times = rand.below(nz(32)) + 1;
                        b = o.clone();
                        for _ in 0..times {
                            b.extend_from_slice(&o[s..e]);
                        }
                    }
                    6 if !self.words.is_empty() => {
                        b = self.words[rand.below(nz(self.words.len()))].clone();
                    }
                    _ => {
                        b = Vec::new();
                    }
                }
                b.truncate(MAX_LEN);
                ParamValue::Bytes(b)
            }
            (v, _) => v.clone(),
        };
        if new == values[k] {
            return Ok(MutationResult::Skipped);
        }
        values[k] = new;
        *input = BytesInput::new(encode_values(&values));
        Ok(MutationResult::Mutated)
    }

    fn post_exec(&mut self, _state: &mut S, _new: Option<libafl::corpus::CorpusId>) -> Result<(), Error> {
        Ok(())
    }
}

//! Trimming queue entries (AFL's trim stage, for system inputs).
//!
//! Mutations that repeat lines and splice inputs together make queue entries grow,
//! and a long input costs the program time on every one of the thousands of
//! executions made from it. The first time an entry is picked, [`TrimStage`] removes
//! what it can while the run covers exactly the same edges with the same hit-count
//! buckets: blocks of lines, halving the block size, then byte ranges, from stdin and
//! from each file. The entry (and its file in the queue) is replaced by the trimmed
//! input, so that everything fuzzed from it starts small.

use crate::input::SysInput;
use libafl::corpus::{Corpus, HasCurrentCorpusId};
use libafl::executors::ExitKind;
use libafl::fuzzer::ExecutesInput;
use libafl::inputs::Input;
use libafl::stages::{Restartable, Stage};
use libafl::state::HasCorpus;
use libafl::HasMetadata;
use serde::{Deserialize, Serialize};

/// Marks a queue entry as trimmed already.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, Default)]
pub struct Trimmed;

libafl_bolts::impl_serdeany!(Trimmed);

/// Executions at most for trimming one queue entry.
const MAX_TRIM_RUNS: usize = 256;

/// Time at most for trimming one queue entry: a program that starts slowly (a tenth
/// of a second a run) would otherwise hold a slice for most of a minute, past the
/// campaign's budget.
const MAX_TRIM_TIME: std::time::Duration = std::time::Duration::from_secs(1);

/// Inputs with less content than this are left as they are.
const MIN_TRIM: usize = 16;

/// See the module documentation. `map` is the edge map the executor's observer
/// fills (hit counts classified into buckets after each run).
pub struct TrimStage {
    map: *const u8,
    len: usize,
}

impl TrimStage {
    /// # Safety
    /// `map` must point to `len` readable bytes for as long as the stage is used.
    pub unsafe fn new(map: *const u8, len: usize) -> Self {
        TrimStage { map, len }
    }

    /// The classified map of the last run (compared whole: cheaper than hashing it).
    fn trace(&self) -> &[u8] {
        // SAFETY: the caller of `new` keeps the map alive and readable.
        unsafe { std::slice::from_raw_parts(self.map, self.len) }
    }
}

/// The byte ranges of one content buffer to try removing next: line blocks of
/// halving size, then byte blocks of halving size down to 4 bytes.
fn removals(buf: &[u8]) -> Vec<Vec<(usize, usize)>> {
    let mut rounds = Vec::new();
    let starts: Vec<usize> = std::iter::once(0)
        .chain(
            buf.iter()
                .enumerate()
                .filter(|(_, &c)| c == b'\n')
                .map(|(i, _)| i + 1),
        )
        .filter(|&i| i < buf.len())
        .collect();
    let mut block = starts.len() / 2;
    while block >= 1 {
        let round: Vec<(usize, usize)> = (0..starts.len())
            .step_by(block)
            .map(|i| {
                (
                    starts[i],
                    starts.get(i + block).copied().unwrap_or(buf.len()),
                )
            })
            .collect();
        rounds.push(round);
        block /= 2;
    }
    let mut step = buf.len().next_power_of_two() / 16;
    while step >= 4 {
        rounds.push(
            (0..buf.len())
                .step_by(step)
                .map(|s| (s, (s + step).min(buf.len())))
                .collect(),
        );
        step /= 2;
    }
    rounds
}

/// The content buffers of an input that can shrink: stdin, then each file.
fn contents(input: &mut SysInput) -> Vec<&mut Vec<u8>> {
    std::iter::once(&mut input.stdin)
        .chain(input.files.values_mut())
        .collect()
}

impl<E, EM, S, Z> Stage<E, EM, S, Z> for TrimStage
where
    S: HasCorpus<SysInput> + HasCurrentCorpusId,
    Z: ExecutesInput<E, EM, SysInput, S>,
{
    fn perform(
        &mut self,
        fuzzer: &mut Z,
        executor: &mut E,
        state: &mut S,
        manager: &mut EM,
    ) -> Result<(), libafl::Error> {
        let Some(id) = state.current_corpus_id()? else {
            return Ok(());
        };
        let mut input = {
            let mut tc = state.corpus().get(id)?.borrow_mut();
            if tc.has_metadata::<Trimmed>() {
                return Ok(());
            }
            tc.add_metadata(Trimmed);
            if tc.input().is_none() {
                state.corpus().load_input_into(&mut tc)?;
            }
            match tc.input() {
                Some(i) => i.clone(),
                None => return Ok(()),
            }
        };
        if input.stdin.len() + input.files.values().map(Vec::len).sum::<usize>() < MIN_TRIM {
            return Ok(());
        }
        if fuzzer.execute_input(state, executor, manager, &input)? != ExitKind::Ok {
            return Ok(());
        }
        let reference = self.trace().to_vec();
        let started = std::time::Instant::now();
        let mut runs = 1;
        let mut changed = false;
        let parts = 1 + input.files.len();
        'parts: for k in 0..parts {
            let mut round = 0;
            loop {
                let plan = removals(contents(&mut input)[k]);
                let Some(cuts) = plan.get(round) else { break };
                let mut progressed = false;
                // Back to front, so earlier ranges stay where they were.
                for &(a, b) in cuts.iter().rev() {
                    if runs >= MAX_TRIM_RUNS || started.elapsed() >= MAX_TRIM_TIME {
                        break 'parts;
                    }
                    let mut trial = input.clone();
                    let buf = &mut contents(&mut trial)[k];
                    if b > buf.len() || a >= b {
                        continue;
                    }
                    buf.drain(a..b);
                    runs += 1;
                    if fuzzer.execute_input(state, executor, manager, &trial)? == ExitKind::Ok
                        && self.trace() == &reference[..]
                    {
                        input = trial;
                        progressed = true;
                        changed = true;
                    }
                }
                // Ranges shifted: plan this size again on what is left, else go finer.
                if !progressed {
                    round += 1;
                }
            }
        }
        if changed {
            let mut tc = state.corpus().get(id)?.borrow_mut();
            if let Some(path) = tc.file_path().clone() {
                input.to_file(&path)?;
            }
            tc.set_input(input);
        }
        Ok(())
    }
}

impl<S> Restartable<S> for TrimStage {
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
    fn removals_go_from_line_blocks_to_small_byte_ranges() {
        let buf = b"a 1\nb 2\nc 3\nd 4\n";
        let plan = removals(buf);
        // Two blocks of two lines, then each line, then byte ranges.
        assert_eq!(plan[0], vec![(0, 8), (8, 16)]);
        assert_eq!(plan[1], vec![(0, 4), (4, 8), (8, 12), (12, 16)]);
        assert!(plan[2..]
            .iter()
            .all(|r| r.iter().all(|&(a, b)| b - a <= 4 && b <= buf.len())));
    }
}

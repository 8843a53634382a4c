//! Before a unit is fuzzed at a roadblock: do its parameters decide the branch?
//!
//! The harness runs the recorded values twice and, for each parameter, a few values
//! changed in ways a mutator would change them, each once in a fork of the restored
//! unit (`TRESTLE_FUZZ_PROBE`), and reports the operands the branch's comparison logged
//! under its fixed CmpLog id and which of the branch's edges each run hit. A unit whose
//! runs never reach the branch, or reach it with the same operands whatever its
//! parameters, cannot flip it: fuzzing it would spend a slice for nothing.

use crate::{io, lay_out, FuzzError};
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;
use trestle_abi::fuzz::{
    encode_values, original_value, ParamValue, ProbeRequest, ProbeRun, ENV_FUZZ_PROBE,
};
use trestle_abi::unit::Unit;

/// What the probe found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Influence {
    /// Changing these parameters (indices) changed the operands, or the branch's edges.
    Decides(Vec<usize>),
    /// The unit reaches the branch, but nothing it varies changes what the branch sees.
    Unmoved,
    /// No run reached the branch.
    Unreached,
    /// The runs disagree with themselves (the operands change between two runs of the
    /// recorded values) or the branch logs no operands: no telling, so fuzz it.
    Unknown(String),
}

impl Influence {
    /// Whether the unit is worth a slice at the branch.
    pub fn worth_fuzzing(&self) -> bool {
        matches!(self, Influence::Decides(_) | Influence::Unknown(_))
    }

    /// In words, for a pick's reason or a log line.
    pub fn describe(&self) -> String {
        match self {
            Influence::Decides(p) => format!(
                "parameter{} {} change{} what the branch compares",
                if p.len() == 1 { "" } else { "s" },
                p.iter()
                    .map(|i| format!("#{i}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                if p.len() == 1 { "s" } else { "" }
            ),
            Influence::Unmoved => "its parameters do not change what the branch compares".into(),
            Influence::Unreached => "it does not reach the branch".into(),
            Influence::Unknown(why) => format!("influence unknown ({why})"),
        }
    }
}

/// Places of a longer string changed one at a time by [`variants`].
const LOCAL_CHANGES: usize = 4;

/// The values a probe tries for one parameter besides the recorded one `v`.
pub fn variants(v: &ParamValue) -> Vec<ParamValue> {
    match v {
        ParamValue::Int(i) => vec![
            ParamValue::Int(i.wrapping_add(1)),
            ParamValue::Int(i.wrapping_mul(3).wrapping_add(7)),
            ParamValue::Int(0),
        ],
        ParamValue::Bytes(b) => {
            let mut longer = b.clone();
            longer.push(b'x');
            let mut out = vec![
                ParamValue::Bytes(b.iter().map(|c| c ^ 1).collect()),
                ParamValue::Bytes(longer),
                ParamValue::Bytes(b[..b.len() / 2].to_vec()),
            ];
            // Changes at single places too: a program text (dc's, a sed script) changed
            // everywhere or cut in half no longer reaches the branch at all, and says
            // nothing; one byte changed (a digit stays a digit under ^1) or dropped
            // mostly does.
            if b.len() > 4 {
                for k in 1..=LOCAL_CHANGES {
                    let at = b.len() * k / (LOCAL_CHANGES + 1);
                    let mut one = b.clone();
                    one[at] ^= 1;
                    out.push(ParamValue::Bytes(one));
                }
                let mut dropped = b.clone();
                dropped.remove(b.len() / 2);
                out.push(ParamValue::Bytes(dropped));
            }
            out
        }
    }
}

/// Probe `unit` at the branch with CmpLog id `cmp` and edges `edges` (its directions),
/// laying the harness out in `dir`. `timeout` bounds each run.
pub fn probe(
    program: &Path,
    unit: &Unit,
    dir: &Path,
    cmp: Option<u32>,
    edges: &[u32],
    timeout: Duration,
) -> Result<Influence, FuzzError> {
    let out = lay_out(unit, dir)?;
    let original: Vec<ParamValue> = unit.params.iter().map(original_value).collect();
    // Two runs of the recorded values, then each parameter's variants.
    let mut inputs = vec![encode_values(&original), encode_values(&original)];
    let mut owner = vec![None, None];
    for (k, v) in original.iter().enumerate() {
        for changed in variants(v) {
            let mut values = original.clone();
            values[k] = changed;
            inputs.push(encode_values(&values));
            owner.push(Some(k));
        }
    }
    let runs = run_probe(program, &out, cmp, edges, inputs, timeout)?;
    Ok(judge(&runs, &owner, cmp.is_some()))
}

/// Which of `edges` the unit's recorded values take, in one run of the harness laid
/// out in `dir` (a probe of the recorded values alone).
pub fn recorded_edges(
    program: &Path,
    unit: &Unit,
    dir: &Path,
    edges: &[u32],
    timeout: Duration,
) -> Result<Vec<u32>, FuzzError> {
    let out = lay_out(unit, dir)?;
    let original: Vec<ParamValue> = unit.params.iter().map(original_value).collect();
    let runs = run_probe(
        program,
        &out,
        None,
        edges,
        vec![encode_values(&original)],
        timeout,
    )?;
    Ok(runs.into_iter().next().map(|r| r.edges).unwrap_or_default())
}

/// Run `inputs` through the harness laid out in `out` (by [`lay_out`]), each once in
/// a fork, and read what each did at the comparison `cmp` and which of `edges` it hit.
pub(crate) fn run_probe(
    program: &Path,
    out: &Path,
    cmp: Option<u32>,
    edges: &[u32],
    inputs: Vec<Vec<u8>>,
    timeout: Duration,
) -> Result<Vec<ProbeRun>, FuzzError> {
    let n = inputs.len();
    let runs_path = out.join("probe.runs");
    let req = ProbeRequest {
        cmp,
        edges: edges.to_vec(),
        inputs,
        timeout_ms: timeout.as_millis() as u64,
        out: runs_path.clone(),
    };
    let req_path = out.join("probe.bin");
    std::fs::write(
        &req_path,
        bincode::serialize(&req).map_err(|e| FuzzError::Libafl(e.to_string()))?,
    )
    .map_err(io("cannot write", &req_path))?;
    let mut cmd = crate::harness(program, &out.join("request.bin"), &out.join("cwd"));
    cmd.env(ENV_FUZZ_PROBE, &req_path);
    let limit = timeout * (n as u32 + 2) + Duration::from_secs(2);
    let ended = crate::wait_bounded(&mut cmd, program, limit)?;
    let runs: Vec<ProbeRun> = match std::fs::read(&runs_path) {
        Ok(bytes) => bincode::deserialize(&bytes).map_err(|e| {
            FuzzError::Harness(format!(
                "the probe's runs in {} are corrupt: {e}",
                runs_path.display()
            ))
        })?,
        Err(_) => {
            return Err(FuzzError::Harness(format!(
                "the probe ended ({ended:?}) without writing its runs"
            )))
        }
    };
    // Read, the files have served.
    let _ = std::fs::remove_file(&runs_path);
    let _ = std::fs::remove_file(&req_path);
    if runs.len() != n {
        return Err(FuzzError::Harness(format!(
            "the probe ran {} of {n} inputs",
            runs.len()
        )));
    }
    Ok(runs)
}

/// What the runs say: `owner[i]` is the parameter run `i` changed (none for the
/// recorded values, runs 0 and 1). A parameter decides the branch when a run that
/// changed it reached the branch and compared other values there, or took other
/// edges of it; a changed count of the same comparisons (a loop running once more)
/// or a run that no longer reaches the branch says nothing about its operands.
fn judge(runs: &[ProbeRun], owner: &[Option<usize>], compared: bool) -> Influence {
    let reached = |r: &ProbeRun| r.hits > 0 || !r.edges.is_empty();
    if !runs.iter().any(reached) {
        return Influence::Unreached;
    }
    let seen = |r: &ProbeRun| {
        (
            r.operands.iter().copied().collect::<BTreeSet<_>>(),
            r.edges.iter().copied().collect::<BTreeSet<_>>(),
        )
    };
    let recorded = seen(&runs[0]);
    if recorded != seen(&runs[1]) {
        return Influence::Unknown("two runs of the recorded values differ at the branch".into());
    }
    let mut params: Vec<usize> = runs
        .iter()
        .zip(owner)
        .filter(|(r, o)| o.is_some() && reached(r) && seen(r) != recorded)
        .filter_map(|(_, o)| *o)
        .collect();
    params.dedup();
    if !params.is_empty() {
        Influence::Decides(params)
    } else if compared {
        Influence::Unmoved
    } else {
        Influence::Unknown("the branch logs no operands".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trestle_abi::fuzz::ProbeEnd;

    fn run(operands: &[(u64, u64)], edges: &[u32]) -> ProbeRun {
        ProbeRun {
            end: ProbeEnd::Exited(0),
            hits: operands.len() as u32,
            operands: operands.to_vec(),
            edges: edges.to_vec(),
        }
    }

    #[test]
    fn a_longer_string_is_also_changed_at_single_places() {
        let v = ParamValue::Bytes(b"1 2 + p 3 4 * p".to_vec());
        let vs = variants(&v);
        let single: Vec<_> = vs
            .iter()
            .filter_map(|x| match x {
                ParamValue::Bytes(b) if b.len() == 15 => Some(
                    b.iter()
                        .zip(b"1 2 + p 3 4 * p")
                        .filter(|(a, o)| a != o)
                        .count(),
                ),
                _ => None,
            })
            .collect();
        assert_eq!(
            single.iter().filter(|&&d| d == 1).count(),
            LOCAL_CHANGES,
            "{vs:?}"
        );
        assert!(
            vs.iter()
                .any(|x| matches!(x, ParamValue::Bytes(b) if b.len() == 14)),
            "one byte dropped: {vs:?}"
        );
        assert_eq!(
            variants(&ParamValue::Bytes(b"ab".to_vec())).len(),
            3,
            "a short string: the three changes only"
        );
    }

    #[test]
    fn a_parameter_decides_a_branch_when_changing_it_changes_the_operands() {
        let owner = [None, None, Some(0), Some(0), Some(1)];
        let same = run(&[(5, 0xbeef)], &[3]);
        let runs = [
            same.clone(),
            same.clone(),
            same.clone(),
            run(&[(6, 0xbeef)], &[3]),
            same.clone(),
        ];
        assert_eq!(judge(&runs, &owner, true), Influence::Decides(vec![0]));
        let runs = [
            same.clone(),
            same.clone(),
            same.clone(),
            same.clone(),
            same.clone(),
        ];
        assert_eq!(judge(&runs, &owner, true), Influence::Unmoved);
        // The same comparison once more (a longer loop), or not reached at all: the
        // parameter does not move the operands.
        let twice = run(&[(5, 0xbeef), (5, 0xbeef)], &[3]);
        let runs = [
            same.clone(),
            same.clone(),
            twice,
            run(&[], &[]),
            same.clone(),
        ];
        assert_eq!(judge(&runs, &owner, true), Influence::Unmoved);
        assert!(!Influence::Unmoved.worth_fuzzing());
        let none = run(&[], &[]);
        assert_eq!(
            judge(
                &[none.clone(), none.clone(), none.clone(), none.clone(), none],
                &owner,
                true
            ),
            Influence::Unreached
        );
        // The recorded values disagreeing with themselves: no telling.
        let runs = [
            same.clone(),
            run(&[(9, 0xbeef)], &[3]),
            same.clone(),
            same.clone(),
            same,
        ];
        assert!(matches!(judge(&runs, &owner, true), Influence::Unknown(_)));
    }
}

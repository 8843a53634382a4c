//! Which unit findings to lift, and in what order: the inputs a unit fuzzer saved,
//! and, in a campaign, the queue entries ranked by the edges they reach that the
//! system fuzzer has not (read from the metadata LibAFL keeps beside each entry).

use anyhow::Result;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A unit finding to lift.
#[derive(Debug, Clone)]
pub(super) struct Candidate {
    pub(super) input: PathBuf,
    pub(super) crash: bool,
    /// For a queue entry, when the system fuzzer's edges are known: the edges it
    /// reaches that the system had not (at the time the unit's lifting began).
    pub(super) new_edges: Option<Vec<usize>>,
}

/// Queue entries of one unit lifted at most for the same set of edges new to the
/// system (when the system fuzzer's edges are known).
pub const LIFTS_PER_NEW_EDGES: usize = 2;

/// Raw fuzzer inputs in `dir` (not hidden files, not the JSON descriptions).
pub(super) fn inputs_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Ok(Vec::new()) };
    let mut out: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            p.is_file() && !name.starts_with('.') && !name.ends_with(".json") && !name.ends_with(".metadata") && !name.ends_with(".lafl_lock")
        })
        .collect();
    out.sort();
    Ok(out)
}

/// The edge indices a unit fuzzer's queue entry reached, from the metadata LibAFL
/// keeps beside it (`.NAME_N.metadata`, MapIndexesMetadata); `None` if there is none.
/// `metadata` lists the metadata files of the entry's directory (read once per queue).
fn entry_edges(input: &Path, metadata: &[PathBuf]) -> Option<Vec<usize>> {
    let name = input.file_name()?.to_str()?;
    let meta = metadata.iter().find(|p| {
        p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.strip_prefix('.').and_then(|n| n.strip_prefix(name)).is_some_and(|r| r.starts_with(['_', '.'])))
    })?;
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(meta).ok()?).ok()?;
    // The map's keys are type ids; the entry with a `list` and a `tcref` is the
    // indexes metadata.
    v.get("metadata")?.get("map")?.as_object()?.values().find_map(|e| {
        let m = e.get(1)?;
        m.get("tcref")?;
        m.get("list")?.as_array()?.iter().map(|i| i.as_u64().map(|i| i as usize)).collect()
    })
}

/// The queue entries that reach an edge neither `covered` (the system fuzzer's) nor
/// the unit's own starting point holds, those reaching more of them first; entries
/// whose edges are unknown are kept, after those. The starting point is what the
/// recorded values reach (the queue entry equal to the dry run's input, `seed`) and
/// what every entry reaches: edges a replayed context takes whatever the values
/// (the harness's own way into the function) say nothing about the system.
pub(super) fn beyond_system_edges(queue: Vec<PathBuf>, covered: &[bool], seed: Option<&[u8]>) -> Vec<(PathBuf, Option<Vec<usize>>)> {
    let mut known: Vec<(PathBuf, Vec<usize>)> = Vec::new();
    let mut unknown = Vec::new();
    let metadata: Vec<PathBuf> = match queue.first().and_then(|p| p.parent()).and_then(|d| std::fs::read_dir(d).ok()) {
        Some(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with('.') && n.ends_with(".metadata")))
            .collect(),
        None => Vec::new(),
    };
    for input in queue {
        match entry_edges(&input, &metadata) {
            Some(edges) => known.push((input, edges)),
            None => unknown.push(input),
        }
    }
    let mut start: BTreeSet<usize> = match known.split_first() {
        Some(((_, first), rest)) => {
            let mut all: BTreeSet<usize> = first.iter().copied().collect();
            for (_, e) in rest {
                let e: BTreeSet<usize> = e.iter().copied().collect();
                all.retain(|i| e.contains(i));
            }
            all
        }
        None => BTreeSet::new(),
    };
    if let Some(seed) = seed {
        if let Some((_, e)) = known.iter().find(|(p, _)| std::fs::read(p).is_ok_and(|b| b == seed)) {
            start.extend(e.iter().copied());
        }
    }
    let mut ranked: Vec<(Vec<usize>, PathBuf)> = known
        .into_iter()
        .filter_map(|(input, edges)| {
            let new: Vec<usize> =
                edges.into_iter().filter(|&i| !covered.get(i).copied().unwrap_or(false) && !start.contains(&i)).collect();
            (!new.is_empty()).then_some((new, input))
        })
        .collect();
    ranked.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.1.cmp(&b.1)));
    // Entries that reach the same new edges mostly lift to the same system
    // behaviour: a few of each kind.
    let mut per_kind: BTreeMap<Vec<usize>, usize> = BTreeMap::new();
    ranked
        .into_iter()
        .filter(|(new, _)| {
            let n = per_kind.entry(new.clone()).or_default();
            *n += 1;
            *n <= LIFTS_PER_NEW_EDGES
        })
        .map(|(new, p)| (p, Some(new)))
        .chain(unknown.into_iter().map(|p| (p, None)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A queue entry as LibAFL leaves it: the input, and beside it a metadata file
    /// whose indexes entry lists the edges the input reached.
    fn entry(dir: &Path, name: &str, bytes: &[u8], edges: &[usize]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        let meta = serde_json::json!({"metadata": {"map": {"1234": [1234, {"list": edges, "tcref": 0}]}}, "executions": 0});
        std::fs::write(dir.join(format!(".{name}_1.metadata")), meta.to_string()).unwrap();
        p
    }

    #[test]
    fn only_queue_entries_reaching_edges_new_to_the_system_are_lifted_richest_first() {
        let d = tempfile::tempdir().unwrap();
        let seed = entry(d.path(), "seed", b"s", &[1, 2, 9]);
        // 9: every entry reaches it (the harness's way in); 7: the system reached it.
        let old = entry(d.path(), "old", b"o", &[1, 7, 9]);
        let one = entry(d.path(), "one", b"a", &[1, 3, 9]);
        let two = entry(d.path(), "two", b"b", &[3, 4, 9]);
        let same = [entry(d.path(), "same1", b"c", &[3, 9]), entry(d.path(), "same2", b"d", &[3, 9])];
        let unknown = d.path().join("unknown");
        std::fs::write(&unknown, b"u").unwrap();
        let mut covered = vec![false; 16];
        covered[7] = true;
        let all = vec![seed, old, one.clone(), two.clone(), same[0].clone(), same[1].clone(), unknown.clone()];
        let picked: Vec<PathBuf> = beyond_system_edges(all, &covered, Some(b"s")).into_iter().map(|(p, _)| p).collect();
        // two reaches 3 and 4; one, same1 and same2 reach only 3: two of those.
        assert_eq!(picked, vec![two, one, same[0].clone(), unknown]);
    }
}

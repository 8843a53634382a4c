//! Which unit findings to lift, and in what order: the inputs a unit fuzzer saved,
//! and, in a campaign, the queue entries ranked by the edges they reach that the
//! system fuzzer has not (read from the metadata LibAFL keeps beside each entry).

use anyhow::{Context as _, Result};
use serde::de::IgnoredAny;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A unit finding to lift.
#[derive(Debug, Clone)]
pub(super) struct Candidate {
    /// The fuzzer's input file.
    pub(super) input: PathBuf,
    /// Whether it crashed the unit (else it is a queue entry or a hang).
    pub(super) crash: bool,
    /// Whether it ran past the unit's time limit: in a harness, reading past a
    /// buffer often runs on through restored memory where the program would fault
    /// at once (cut's delimiter loop read 231 bytes past its argument).
    pub(super) hang: bool,
    /// For a queue entry, when the system fuzzer's edges are known: the edges it
    /// reaches that the system had not (at the time the unit's lifting began).
    pub(super) new_edges: Option<Vec<usize>>,
}

/// Hangs of one unit lifted at most: a lifted test that hangs costs the lifted
/// test's time limit on the validation build.
pub const HANGS_PER_UNIT: usize = 4;

/// Queue entries of one unit lifted at most for the same set of edges new to the
/// system (when the system fuzzer's edges are known).
pub const LIFTS_PER_NEW_EDGES: usize = 2;

/// Raw fuzzer inputs in `dir` (not hidden files, not the JSON descriptions); none if
/// `dir` does not exist.
pub(super) fn inputs_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
    };
    let mut out = Vec::new();
    for e in rd {
        let p = e
            .with_context(|| format!("cannot list {}", dir.display()))?
            .path();
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if p.is_file()
            && !name.starts_with('.')
            && !name.ends_with(".json")
            && !name.ends_with(".metadata")
            && !name.ends_with(".lafl_lock")
        {
            out.push(p);
        }
    }
    out.sort();
    Ok(out)
}

/// A LibAFL testcase's `.metadata` file, as far as lifting reads it: its metadata
/// map (a type id, as text, to the type id and the value).
#[derive(Deserialize)]
struct TestcaseMetadata {
    metadata: MetadataMap,
}

/// LibAFL's `SerdeAnyMap`.
#[derive(Deserialize)]
struct MetadataMap {
    map: BTreeMap<String, (IgnoredAny, serde_json::Value)>,
}

/// LibAFL's `MapIndexesMetadata`: the edges the entry reached.
#[derive(Deserialize)]
struct MapIndexes {
    list: Vec<usize>,
    /// Not read, but a value without it is some other metadata.
    #[serde(rename = "tcref")]
    _tcref: IgnoredAny,
}

/// What the metadata beside a queue entry says about the edges it reached.
enum EntryEdges {
    /// The edge indices (MapIndexesMetadata).
    Known(Vec<usize>),
    /// No metadata file for it.
    NoMetadata,
    /// A metadata file without MapIndexesMetadata (the minimizing scheduler drops it
    /// from entries no longer needed for an edge).
    NoIndexes,
    /// A metadata file that is not what LibAFL writes, as far as trestle knows: why.
    Unreadable(String),
}

/// The edge indices a unit fuzzer's queue entry reached, from the metadata LibAFL
/// keeps beside it (`.NAME_N.metadata`). `metadata` lists the metadata files of the
/// entry's directory (read once per queue).
fn entry_edges(input: &Path, metadata: &[PathBuf]) -> Result<EntryEdges> {
    let Some(name) = input.file_name().and_then(|n| n.to_str()) else {
        return Ok(EntryEdges::NoMetadata);
    };
    let meta = metadata.iter().find(|p| {
        p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
            n.strip_prefix('.')
                .and_then(|n| n.strip_prefix(name))
                .is_some_and(|r| r.starts_with(['_', '.']))
        })
    });
    let Some(meta) = meta else {
        return Ok(EntryEdges::NoMetadata);
    };
    let bytes = std::fs::read(meta).with_context(|| format!("cannot read {}", meta.display()))?;
    let parsed: TestcaseMetadata = match serde_json::from_slice(&bytes) {
        Ok(m) => m,
        Err(e) => return Ok(EntryEdges::Unreadable(format!("{}: {e}", meta.display()))),
    };
    // The map's keys are type ids; the value with a `list` and a `tcref` is the
    // indexes metadata.
    let indexes = parsed
        .metadata
        .map
        .into_values()
        .find_map(|(_, v)| serde_json::from_value::<MapIndexes>(v).ok());
    Ok(indexes.map_or(EntryEdges::NoIndexes, |m| EntryEdges::Known(m.list)))
}

/// A unit fuzzer's queue, ranked for lifting by [`beyond_system_edges`].
pub(super) struct RankedQueue {
    /// The entries to lift in this order, with the edges new to the system each
    /// reaches (`None`: not known).
    pub(super) entries: Vec<(PathBuf, Option<Vec<usize>>)>,
    /// How many entries have metadata that is not what trestle knows LibAFL to
    /// write, and why (the first reason); those entries are in `entries`, unranked.
    pub(super) unreadable: Option<(usize, String)>,
}

/// The queue's entries by what their metadata says: with edges known, and not.
struct QueueEdges {
    known: Vec<(PathBuf, Vec<usize>)>,
    unknown: Vec<PathBuf>,
    unreadable: Option<(usize, String)>,
}

/// Read the edges of each queue entry from the metadata in its directory.
fn queue_edges(queue: Vec<PathBuf>) -> Result<QueueEdges> {
    let mut metadata = Vec::new();
    if let Some(dir) = queue.first().and_then(|p| p.parent()) {
        for e in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
            let p = e
                .with_context(|| format!("cannot list {}", dir.display()))?
                .path();
            if p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with('.') && n.ends_with(".metadata"))
            {
                metadata.push(p);
            }
        }
    }
    let mut q = QueueEdges {
        known: Vec::new(),
        unknown: Vec::new(),
        unreadable: None,
    };
    let mut no_indexes = 0;
    for input in queue {
        match entry_edges(&input, &metadata)? {
            EntryEdges::Known(edges) => q.known.push((input, edges)),
            EntryEdges::NoMetadata => q.unknown.push(input),
            EntryEdges::NoIndexes => {
                no_indexes += 1;
                q.unknown.push(input);
            }
            EntryEdges::Unreadable(why) => {
                let (n, _) = q.unreadable.get_or_insert((0, why));
                *n += 1;
                q.unknown.push(input);
            }
        }
    }
    // Some entries lose their indexes to the scheduler, but not all of them: then
    // LibAFL writes them differently now.
    if q.known.is_empty() && no_indexes > 0 {
        let (n, _) = q.unreadable.get_or_insert((
            0,
            "no MapIndexesMetadata (`list`, `tcref`) in any entry's metadata map".into(),
        ));
        *n += no_indexes;
    }
    Ok(q)
}

/// The queue entries that reach an edge neither `covered` (the system fuzzer's) nor
/// the unit's own starting point holds, those reaching more of them first; entries
/// whose edges are unknown are kept, after those. The starting point is what the
/// recorded values reach (the queue entry equal to the dry run's input, `seed`) and
/// what every entry reaches: edges a replayed context takes whatever the values
/// (the harness's own way into the function) say nothing about the system.
pub(super) fn beyond_system_edges(
    queue: Vec<PathBuf>,
    covered: &[bool],
    seed: Option<&[u8]>,
) -> Result<RankedQueue> {
    let QueueEdges {
        known,
        unknown,
        unreadable,
    } = queue_edges(queue)?;
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
        for (p, e) in &known {
            if std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))? == seed {
                start.extend(e.iter().copied());
                break;
            }
        }
    }
    let mut ranked: Vec<(Vec<usize>, PathBuf)> = known
        .into_iter()
        .filter_map(|(input, edges)| {
            let new: Vec<usize> = edges
                .into_iter()
                .filter(|&i| !covered.get(i).copied().unwrap_or(false) && !start.contains(&i))
                .collect();
            (!new.is_empty()).then_some((new, input))
        })
        .collect();
    ranked.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.1.cmp(&b.1)));
    // Entries that reach the same new edges mostly lift to the same system
    // behaviour: a few of each kind.
    let mut per_kind: BTreeMap<Vec<usize>, usize> = BTreeMap::new();
    let entries = ranked
        .into_iter()
        .filter(|(new, _)| {
            let n = per_kind.entry(new.clone()).or_default();
            *n += 1;
            *n <= LIFTS_PER_NEW_EDGES
        })
        .map(|(new, p)| (p, Some(new)))
        .chain(unknown.into_iter().map(|p| (p, None)))
        .collect();
    Ok(RankedQueue {
        entries,
        unreadable,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A queue entry as LibAFL leaves it: the input, and beside it a metadata file
    /// whose indexes entry lists the edges the input reached (type ids are u128).
    fn entry(dir: &Path, name: &str, bytes: &[u8], edges: &[usize]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        let id = "25494890662301023057250717996766898536";
        let indexes = serde_json::json!({"list": edges, "tcref": 0});
        let meta =
            format!(r#"{{"metadata": {{"map": {{"{id}": [{id}, {indexes}]}}}}, "executions": 0}}"#);
        std::fs::write(dir.join(format!(".{name}_1.metadata")), meta).unwrap();
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
        let same = [
            entry(d.path(), "same1", b"c", &[3, 9]),
            entry(d.path(), "same2", b"d", &[3, 9]),
        ];
        let unknown = d.path().join("unknown");
        std::fs::write(&unknown, b"u").unwrap();
        let mut covered = vec![false; 16];
        covered[7] = true;
        let all = vec![
            seed,
            old,
            one.clone(),
            two.clone(),
            same[0].clone(),
            same[1].clone(),
            unknown.clone(),
        ];
        let picked: Vec<PathBuf> = beyond_system_edges(all, &covered, Some(b"s"))
            .unwrap()
            .entries
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        // two reaches 3 and 4; one, same1 and same2 reach only 3: two of those.
        assert_eq!(picked, vec![two, one, same[0].clone(), unknown]);
    }

    #[test]
    fn metadata_that_does_not_parse_is_reported_and_its_entry_kept_unranked() {
        let d = tempfile::tempdir().unwrap();
        let one = entry(d.path(), "one", b"a", &[3, 7]);
        let two = entry(d.path(), "two", b"c", &[4, 7]);
        let bad = d.path().join("bad");
        std::fs::write(&bad, b"b").unwrap();
        std::fs::write(d.path().join(".bad_1.metadata"), b"{\"metadata\": 3}").unwrap();
        let ranked = beyond_system_edges(
            vec![bad.clone(), one.clone(), two.clone()],
            &[false; 8],
            None,
        )
        .unwrap();
        assert_eq!(
            ranked
                .entries
                .into_iter()
                .map(|(p, _)| p)
                .collect::<Vec<_>>(),
            vec![one, two, bad]
        );
        let (n, why) = ranked.unreadable.expect("reported");
        assert_eq!(n, 1);
        assert!(why.contains(".bad_1.metadata"), "{why}");
    }

    #[test]
    fn a_queue_whose_metadata_all_lacks_edge_indexes_is_reported() {
        // What a LibAFL that renamed MapIndexesMetadata's fields would leave.
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x");
        std::fs::write(&p, b"x").unwrap();
        let meta =
            serde_json::json!({"metadata": {"map": {"1": [1, {"indexes": [3], "refs": 0}]}}});
        std::fs::write(d.path().join(".x_1.metadata"), meta.to_string()).unwrap();
        let ranked = beyond_system_edges(vec![p.clone()], &[false; 8], None).unwrap();
        assert_eq!(ranked.entries, vec![(p, None)]);
        assert!(ranked
            .unreadable
            .is_some_and(|(n, why)| n == 1 && why.contains("MapIndexesMetadata")));
    }
}

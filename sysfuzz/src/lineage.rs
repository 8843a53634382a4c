//! Where each queue entry and finding came from ([`Lineage`]): the entry it was
//! mutated from, or, for a test the campaign lifted from a unit and ran through the
//! system fuzzer, that unit (and the roadblock its slice was at). A system find then
//! says whether it descends from a lifted test: the question "did the units help the
//! system fuzzer" asked of the files, not guessed from timing.
//!
//! Kept in `lineage.jsonl` beside the queue, one line per entry or finding as it is
//! kept (appended, so a killed fuzzer loses at most the lines not yet flushed), and
//! read back on resume. Entries are named by their file name in `queue/`, findings by
//! theirs in `crashes/` or `timeouts/`.

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::{BufRead as _, BufWriter, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The file it is kept in, in the system fuzzer's output directory.
pub const LINEAGE_FILE: &str = "lineage.jsonl";

/// A lifted test the system fuzzer took in: the unit it came from and the roadblock
/// (`file:line`) of that unit's slice, if it had one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiftedOrigin {
    /// The unit's function.
    pub unit: String,
    /// The roadblock its slice was at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roadblock: Option<String>,
}

/// That something descends from a lifted test, and how far.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Descent {
    /// The lifted test's origin.
    #[serde(flatten)]
    pub origin: LiftedOrigin,
    /// Mutations between the lifted test and this one (0: the lifted test itself).
    pub generations: u32,
}

/// One line of `lineage.jsonl`.
#[derive(Debug, Serialize, Deserialize)]
struct Line {
    entry: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parent: Option<String>,
    /// Other entries it took material from (crossover, a line or an argument).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    donors: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lifted: Option<LiftedOrigin>,
    /// The entry this one is, under another name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    same_as: Option<String>,
}

/// The lineage of a system fuzzer's queue and findings.
pub struct Lineage {
    path: PathBuf,
    out: Option<BufWriter<std::fs::File>>,
    /// Each known name's descent from a lifted test (`None`: from seeds alone).
    known: HashMap<String, Option<Arc<Descent>>>,
    /// How many of them descend from a lifted test.
    from_lifted: usize,
}

impl Lineage {
    /// The lineage kept in `dir` (read back if there is one).
    pub fn open(dir: &Path) -> Result<Lineage> {
        let path = dir.join(LINEAGE_FILE);
        let mut l = Lineage {
            path,
            out: None,
            known: HashMap::new(),
            from_lifted: 0,
        };
        match std::fs::File::open(&l.path) {
            Ok(f) => {
                for (n, line) in std::io::BufReader::new(f).lines().enumerate() {
                    let line = line.with_context(|| format!("cannot read {}", l.path.display()))?;
                    if line.trim().is_empty() {
                        continue;
                    }
                    // A last line a kill cut short is dropped; one damaged elsewhere
                    // is named (the rest is still good).
                    match serde_json::from_str::<Line>(&line) {
                        Ok(r) => l.note(r),
                        Err(e) => eprintln!(
                            "trestle: {}:{}: passed over a damaged line: {e}",
                            l.path.display(),
                            n + 1
                        ),
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", l.path.display())),
        }
        Ok(l)
    }

    fn note(&mut self, r: Line) {
        let descent = match r.lifted {
            _ if r.same_as.is_some() => r
                .same_as
                .as_ref()
                .and_then(|e| self.known.get(e))
                .cloned()
                .flatten(),
            Some(origin) => Some(Arc::new(Descent {
                origin,
                generations: 0,
            })),
            // From its parent's lifted test if it has one, else from a donor's: a seed's
            // mutant that took a lifted test's arguments owes them to that unit.
            None => r
                .parent
                .iter()
                .chain(&r.donors)
                .find_map(|n| self.known.get(n).cloned().flatten())
                .map(|d| {
                    let generations = d.generations.saturating_add(1);
                    Arc::new(Descent {
                        origin: d.origin.clone(),
                        generations,
                    })
                }),
        };
        let lifted = descent.is_some();
        if let Some(before) = self.known.insert(r.entry, descent) {
            self.from_lifted -= before.is_some() as usize;
        }
        self.from_lifted += lifted as usize;
    }

    fn append(&mut self, r: Line) -> Result<()> {
        if self.known.contains_key(&r.entry) {
            return Ok(());
        }
        if self.out.is_none() {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .read(true)
                .append(true)
                .open(&self.path)
                .with_context(|| format!("cannot write {}", self.path.display()))?;
            // A last line a kill cut short ends here, so the next one starts whole.
            if ends_mid_line(&mut f)? {
                f.write_all(b"\n")
                    .with_context(|| format!("cannot write {}", self.path.display()))?;
            }
            self.out = Some(BufWriter::new(f));
        }
        let out = self.out.as_mut().expect("opened above");
        serde_json::to_writer(&mut *out, &r)?;
        out.write_all(b"\n")
            .with_context(|| format!("cannot write {}", self.path.display()))?;
        self.note(r);
        Ok(())
    }

    /// `entry` was mutated from `parent`, taking material from `donors` too.
    pub fn child(&mut self, entry: &str, parent: &str, donors: &[String]) -> Result<()> {
        self.append(Line {
            entry: entry.into(),
            parent: Some(parent.into()),
            donors: donors.to_vec(),
            lifted: None,
            same_as: None,
        })
    }

    /// `entry` came from outside the fuzzer: a seed, a test shared by another node
    /// (`lifted` `None`), or a test lifted from a unit.
    pub fn root(&mut self, entry: &str, lifted: Option<LiftedOrigin>) -> Result<()> {
        self.append(Line {
            entry: entry.into(),
            parent: None,
            donors: Vec::new(),
            lifted,
            same_as: None,
        })
    }

    /// `renamed` is `entry` under a new name (a trimmed entry, named anew when a
    /// resumed queue is read back).
    pub fn alias(&mut self, entry: &str, renamed: &str) -> Result<()> {
        if entry == renamed {
            return Ok(());
        }
        self.append(Line {
            entry: renamed.into(),
            parent: None,
            donors: Vec::new(),
            lifted: None,
            same_as: Some(entry.into()),
        })
    }

    /// Write what was appended.
    pub fn flush(&mut self) -> Result<()> {
        if let Some(out) = self.out.as_mut() {
            out.flush()
                .with_context(|| format!("cannot write {}", self.path.display()))?;
        }
        Ok(())
    }

    /// How `name` descends from a lifted test, if it does (`None` also for a name
    /// the lineage does not know).
    pub fn descent(&self, name: &str) -> Option<Descent> {
        self.known
            .get(name)
            .cloned()
            .flatten()
            .map(|d| (*d).clone())
    }

    /// Names known, and how many of them descend from a lifted test.
    pub fn counts(&self) -> (usize, usize) {
        (self.known.len(), self.from_lifted)
    }
}

/// Whether `f` is not empty and does not end with a newline.
fn ends_mid_line(f: &mut std::fs::File) -> Result<bool> {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let len = f.metadata()?.len();
    if len == 0 {
        return Ok(false);
    }
    let mut last = [0u8];
    f.seek(SeekFrom::Start(len - 1))?;
    f.read_exact(&mut last)?;
    Ok(last[0] != b'\n')
}

impl Drop for Lineage {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

/// The corpus entries (by file name in the queue) the mutant being made took material
/// from, besides the entry it was mutated from: kept in the state while the mutant is
/// made and run, then on its queue entry ([`crate::SysMutator`]) or with its finding.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Donors(pub Vec<String>);
libafl_bolts::impl_serdeany!(Donors);

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(unit: &str) -> LiftedOrigin {
        LiftedOrigin {
            unit: unit.into(),
            roadblock: Some("a.c:7".into()),
        }
    }

    #[test]
    fn a_mutant_of_a_lifted_test_descends_from_it_and_a_seeds_mutant_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Lineage::open(dir.path()).unwrap();
        l.root("seed", None).unwrap();
        l.child("s1", "seed", &[]).unwrap();
        l.root("lifted", Some(origin("parse"))).unwrap();
        l.child("m1", "lifted", &[]).unwrap();
        l.child("m2", "m1", &[]).unwrap();
        l.child("crash", "m2", &[]).unwrap();
        assert_eq!(l.descent("s1"), None);
        assert_eq!(
            l.descent("lifted"),
            Some(Descent {
                origin: origin("parse"),
                generations: 0
            })
        );
        assert_eq!(
            l.descent("crash"),
            Some(Descent {
                origin: origin("parse"),
                generations: 3
            })
        );
        assert_eq!(l.descent("unknown"), None);
        assert_eq!(l.counts(), (6, 4));
        // A name seen before keeps its first origin: a lifted test the fuzzer had
        // found itself is not the unit's.
        l.root("s1", Some(origin("other"))).unwrap();
        assert_eq!(l.descent("s1"), None);
    }

    #[test]
    fn a_seeds_mutant_that_took_a_lifted_tests_material_descends_from_that_unit() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Lineage::open(dir.path()).unwrap();
        l.root("seed", None).unwrap();
        l.root("lifted", Some(origin("parse"))).unwrap();
        l.child("m1", "lifted", &[]).unwrap();
        l.child("s1", "seed", &["m1".into()]).unwrap();
        l.child("s2", "seed", &["seed".into()]).unwrap();
        assert_eq!(
            l.descent("s1"),
            Some(Descent {
                origin: origin("parse"),
                generations: 2
            })
        );
        assert_eq!(l.descent("s2"), None);
        drop(l);
        let text = std::fs::read_to_string(dir.path().join(LINEAGE_FILE)).unwrap();
        assert!(text.contains(r#""donors":["m1"]"#), "{text}");
        let l = Lineage::open(dir.path()).unwrap();
        assert_eq!(l.descent("s1").map(|d| d.generations), Some(2), "read back");
    }

    #[test]
    fn the_lineage_reads_back_and_a_line_cut_short_is_passed_over() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut l = Lineage::open(dir.path()).unwrap();
            l.root("lifted", Some(origin("parse"))).unwrap();
            l.child("m1", "lifted", &[]).unwrap();
            l.alias("m1", "m1-trimmed").unwrap();
        }
        let mut text = std::fs::read_to_string(dir.path().join(LINEAGE_FILE)).unwrap();
        text.push_str("{\"entry\":\"cut");
        std::fs::write(dir.path().join(LINEAGE_FILE), text).unwrap();
        let mut l = Lineage::open(dir.path()).unwrap();
        assert_eq!(l.descent("m1").map(|d| d.generations), Some(1));
        assert_eq!(
            l.descent("m1-trimmed").map(|d| d.generations),
            Some(1),
            "a renamed entry is the same entry"
        );
        l.child("m2", "m1-trimmed", &[]).unwrap();
        assert_eq!(l.descent("m2").map(|d| d.generations), Some(2));
    }
}

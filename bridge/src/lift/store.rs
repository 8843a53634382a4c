//! The alarm store: an output directory's alarms and false positives on disk, and
//! the index files that list them (`alarms.json`, `lift.json`). An alarm's or a false
//! positive's directory is filled under a `.tmp-` name and renamed into place; the
//! index files are written atomically: a reader (a report, a resumed campaign, a
//! campaign killed mid-write) never sees half of one. It runs nothing: what is an
//! alarm is the judge's ([`super::Lifter`]).

use super::{AlarmEntry, AlarmList, FalsePositive, LiftStats};
use anyhow::{Context as _, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use trestle_abi::unit::SystemTest;
use trestle_exec::files;
use trestle_exec::signature::CrashSignature;
use trestle_exec::systest::save_test;

/// The alarms and false positives of one output directory.
pub struct AlarmStore {
    out: PathBuf,
    /// The alarms listed, by crash key.
    alarms: BTreeMap<String, AlarmEntry>,
    /// False positives recorded, earlier runs' included (their directories are
    /// numbered on).
    fp_count: usize,
}

impl AlarmStore {
    /// The store in `out`, with what an earlier run left there (a resumed campaign
    /// keeps it): its alarms, and its figures when it wrote any.
    pub fn open(out: &Path) -> Result<(AlarmStore, Option<LiftStats>)> {
        for d in [files::ALARMS_DIR, files::FALSE_POSITIVES_DIR] {
            std::fs::create_dir_all(out.join(d))
                .with_context(|| format!("cannot create {}", out.join(d).display()))?;
        }
        let mut alarms = BTreeMap::new();
        if let Some(list) = files::read_if_present::<AlarmList>(&out.join(files::ALARMS))? {
            for a in list.alarms {
                alarms.insert(a.key.clone(), a);
            }
        }
        let stats = files::read_if_present::<LiftStats>(&out.join(files::LIFT))?;
        let fps = out.join(files::FALSE_POSITIVES_DIR);
        let fp_count = std::fs::read_dir(&fps)
            .with_context(|| format!("cannot list {}", fps.display()))?
            .count();
        let store = AlarmStore {
            out: out.to_owned(),
            alarms,
            fp_count,
        };
        Ok((store, stats))
    }

    /// The alarms, in key order.
    pub fn alarms(&self) -> impl Iterator<Item = &AlarmEntry> {
        self.alarms.values()
    }

    /// How many alarms are listed.
    pub fn len(&self) -> usize {
        self.alarms.len()
    }

    /// The alarm listed under exactly `key`, to update.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut AlarmEntry> {
        self.alarms.get_mut(key)
    }

    /// The alarm whose crash key matches `key` ([`CrashSignature::keys_match`]).
    pub fn matching_mut(&mut self, key: &str) -> Option<&mut AlarmEntry> {
        self.alarms
            .values_mut()
            .find(|a| CrashSignature::keys_match(&a.key, key))
    }

    /// The directory of the alarm `id`.
    pub fn alarm_dir(&self, id: &str) -> PathBuf {
        self.out.join(files::ALARMS_DIR).join(id)
    }

    /// A fresh, empty staging directory for the alarm `id` (`alarms/.tmp-<id>`).
    pub fn stage(&self, id: &str) -> Result<PathBuf> {
        let tmp = self.out.join(files::ALARMS_DIR).join(format!(".tmp-{id}"));
        files::remove_dir_if_present(&tmp)?;
        std::fs::create_dir_all(&tmp)
            .with_context(|| format!("cannot create {}", tmp.display()))?;
        Ok(tmp)
    }

    /// Move the staged directory `tmp` to the alarm's own (replacing one an earlier
    /// run left) and list `entry`.
    pub fn publish(&mut self, tmp: &Path, entry: AlarmEntry) -> Result<()> {
        let final_dir = self.alarm_dir(&entry.id);
        files::remove_dir_if_present(&final_dir)?;
        std::fs::rename(tmp, &final_dir)
            .with_context(|| format!("cannot move {} to {}", tmp.display(), final_dir.display()))?;
        self.alarms.insert(entry.key.clone(), entry);
        Ok(())
    }

    /// Record a false positive of `function`: why (`record`), and the lifted test
    /// that showed it, when there was one, in `false-positives/<n>-<function>`.
    pub fn false_positive(
        &mut self,
        function_dir_name: &str,
        lifted: Option<&SystemTest>,
        record: &FalsePositive,
    ) -> Result<()> {
        self.fp_count += 1;
        let fps = self.out.join(files::FALSE_POSITIVES_DIR);
        let id = format!("{:04}-{function_dir_name}", self.fp_count);
        let tmp = fps.join(format!(".tmp-{id}"));
        std::fs::create_dir_all(&tmp)
            .with_context(|| format!("cannot create {}", tmp.display()))?;
        if let Some(t) = lifted {
            save_test(t, &tmp.join(files::LIFTED))?;
        }
        files::write(&tmp.join(files::REASON), record)?;
        let dir = fps.join(&id);
        std::fs::rename(&tmp, &dir)
            .with_context(|| format!("cannot move {} to {}", tmp.display(), dir.display()))
    }

    /// Write `alarms.json` and `lift.json` (with `stats`), atomically.
    pub fn write_index(&self, stats: &LiftStats) -> Result<()> {
        files::write(
            &self.out.join(files::ALARMS),
            &AlarmList {
                alarms: self.alarms.values().cloned().collect(),
            },
        )?;
        files::write(&self.out.join(files::LIFT), stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, key: &str) -> AlarmEntry {
        serde_json::from_value(serde_json::json!({
            "id": id, "key": key, "signature": key, "function": "f",
            "matches_unit": true, "candidates": 1, "size_lifted": 3, "size_reduced": 3,
        }))
        .expect("an alarm entry")
    }

    #[test]
    fn a_published_alarm_and_a_false_positive_are_there_when_the_store_is_opened_again() {
        let d = tempfile::tempdir().unwrap();
        let (mut store, stats) = AlarmStore::open(d.path()).unwrap();
        assert!(stats.is_none() && store.len() == 0);
        let tmp = store.stage("0001-f").unwrap();
        std::fs::write(tmp.join("reduced.json"), b"{}").unwrap();
        store.publish(&tmp, entry("0001-f", "SIGSEGV|f")).unwrap();
        assert!(!tmp.exists(), "the staging directory is moved, not copied");
        assert!(store.alarm_dir("0001-f").join("reduced.json").exists());
        let fp: FalsePositive = serde_json::from_value(serde_json::json!({
            "function": "g", "reason": "no crash", "unit_input": "x", "values": [],
            "unit_signature": null, "system": null, "seed_test": "t",
        }))
        .unwrap();
        store.false_positive("g", None, &fp).unwrap();
        let stats = LiftStats {
            alarms: store.len(),
            ..LiftStats::default()
        };
        store.write_index(&stats).unwrap();
        let (mut again, stats) = AlarmStore::open(d.path()).unwrap();
        assert_eq!(stats.unwrap().alarms, 1);
        assert_eq!(again.len(), 1);
        assert!(again.matching_mut("SIGSEGV|f").is_some());
        // False positives are numbered on from those already there.
        again.false_positive("g", None, &fp).unwrap();
        assert!(d.path().join("false-positives/0002-g").is_dir());
        // Nothing half-written is left behind.
        let leftovers: Vec<_> = std::fs::read_dir(d.path().join("alarms"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp-"))
            .collect();
        assert!(leftovers.is_empty());
    }
}

//! The campaign directory against `--max-disk`: what a long campaign may drop when it
//! grows, and what it never drops.
//!
//! A unit slice leaves its corpus in `fuzz/<function>-<k>/queue` (hundreds of inputs,
//! 13 MB for one sed unit), and every round's carving a batch of units in `units/`;
//! the corpus serves nothing once the slice's finds are lifted, and a batch only
//! the picks that may still choose it. When the directory holds more than
//! [`EVICT_AT`] of the budget, the oldest lifted corpora go first, then the oldest
//! batches of units (never the seeds', which `trestle export` and `replay --check`
//! read, and never while workers may still send finds of their units). The system
//! queue, alarms, lifted tests, crashes of units, `campaign.json` and the tests a
//! batch was recorded from are never evicted: a resume, the alarms and the report
//! need them.

use super::runner::Runner;
use crate::carve::units::UnitIndex;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// `--max-disk` when none is given.
pub const DEFAULT_MAX_DISK: u64 = 2_000_000_000;

/// Share of the budget past which eviction begins (headroom for the next round's
/// growth before the next look).
pub const EVICT_AT: f64 = 0.8;

/// What eviction takes from a fuzzed unit's directory: its corpus and the fuzzer's
/// own files. Its unit, crashes and report stay.
const CORPUS_PARTS: [&str; 4] = ["queue", ".solutions", "cwd", "timeouts"];

/// Below this much free space on its file system the campaign stops, saved, rather
/// than fail half-way through a write: 5% of the file system, at most 32 MB.
fn free_floor(total: u64) -> u64 {
    (total / 20).min(32_000_000)
}

/// The file system holding the campaign is (nearly) full: the campaign stopped, and
/// what it saved last is what `--resume` goes on from.
#[derive(Debug, Clone)]
pub struct DiskFull {
    /// The campaign directory.
    pub dir: PathBuf,
    /// Bytes free there.
    pub free: u64,
}

impl std::fmt::Display for DiskFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the disk holding {} is full ({} free): the campaign stopped, saved as of its last step; free some space, then `trestle run --resume {}`",
            self.dir.display(),
            human(self.free),
            self.dir.display()
        )
    }
}

impl std::error::Error for DiskFull {}

/// (bytes free to an unprivileged writer, bytes in all) of the file system holding
/// `path`.
pub fn space(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt as _;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a statvfs to fill.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    let unit = s.f_frsize as u64;
    Some((s.f_bavail as u64 * unit, s.f_blocks as u64 * unit))
}

/// `Some` when the file system holding `dir` has less free space than the campaign
/// needs to go on safely.
pub fn full(dir: &Path) -> Option<DiskFull> {
    let (free, total) = space(dir)?;
    (free < free_floor(total)).then(|| DiskFull {
        dir: dir.to_owned(),
        free,
    })
}

/// The directory's size and what was evicted to keep it under the budget.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Disk {
    /// Bytes of the campaign directory at the last look.
    pub bytes: u64,
    /// The most it held at a look.
    pub peak: u64,
    /// Fuzzed units whose corpus was evicted.
    pub corpora_evicted: usize,
    /// Batches of carved units evicted.
    pub batches_evicted: Vec<PathBuf>,
    /// Bytes evicted, all told.
    pub bytes_evicted: u64,
    /// Whether what is never evicted alone held more than the budget at the last look.
    pub over: bool,
}

/// Bytes of the files under `path` (apparent sizes, as `du --apparent-size` counts),
/// 0 when it does not exist; files removed meanwhile do not count.
pub fn dir_bytes(path: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    let mut total = 0;
    for e in entries.flatten() {
        let Ok(meta) = e.path().symlink_metadata() else {
            continue;
        };
        total += if meta.is_dir() {
            dir_bytes(&e.path())
        } else {
            meta.len()
        };
    }
    total
}

/// A size with an optional unit, `500M`, `2G`, `1.5G`, `64K` or bytes (powers of 1000,
/// as `df -H` and disk vendors count).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, scale) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let scale = match c.to_ascii_uppercase() {
                'K' => 1e3,
                'M' => 1e6,
                'G' => 1e9,
                'T' => 1e12,
                'B' => 1.0,
                _ => return Err(format!("{s:?}: the unit must be K, M, G or T")),
            };
            (&t[..i], scale)
        }
        _ => (t, 1.0),
    };
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is no size (say 500M or 2G)"))?;
    if !n.is_finite() || n <= 0.0 {
        return Err(format!("{s:?}: a size must be more than 0"));
    }
    Ok((n * scale) as u64)
}

/// `n` bytes for people.
pub fn human(n: u64) -> String {
    match n {
        n if n >= 1_000_000_000 => format!("{:.1} GB", n as f64 / 1e9),
        n if n >= 10_000_000 => format!("{:.0} MB", n as f64 / 1e6),
        n if n >= 1_000_000 => format!("{:.1} MB", n as f64 / 1e6),
        n if n >= 1_000 => format!("{:.0} kB", n as f64 / 1e3),
        n => format!("{n} B"),
    }
}

impl Runner {
    /// Look at the directory's size and evict what may go until it is under
    /// [`EVICT_AT`] of the budget; said once when what may not go alone is over. A
    /// [`DiskFull`] error when its file system has too little space left to go on.
    pub(super) fn keep_within_disk(&mut self) -> Result<()> {
        let budget = self.c.settings.max_disk;
        let mut bytes = dir_bytes(&self.out);
        self.c.disk.peak = self.c.disk.peak.max(bytes);
        let goal = (budget as f64 * EVICT_AT) as u64;
        // Lifted corpora, oldest first.
        let mut k = 0;
        while bytes > goal && k < self.c.fuzzed.len() {
            let f = &self.c.fuzzed[k];
            k += 1;
            if !f.lifted || f.corpus_evicted {
                continue;
            }
            let dir = f.dir.clone();
            let mut freed = 0;
            for part in CORPUS_PARTS {
                let p = dir.join(part);
                freed += dir_bytes(&p);
                trestle_exec::files::remove_dir_if_present(&p)?;
            }
            self.c.fuzzed[k - 1].corpus_evicted = true;
            self.c.disk.corpora_evicted += 1;
            self.c.disk.bytes_evicted += freed;
            bytes = bytes.saturating_sub(freed);
        }
        // Batches of units, oldest first: not the seeds' (the first), and none while
        // workers are attached (they may still send finds of any unit they were given).
        if self.cluster.is_none() {
            let mut i = 1;
            while bytes > goal && i < self.c.unit_dirs.len() {
                let dir = self.c.unit_dirs[i].clone();
                i += 1;
                if self.c.disk.batches_evicted.contains(&dir) {
                    continue;
                }
                let freed = dir_bytes(&dir);
                trestle_exec::files::remove_dir_if_present(&dir)?;
                self.unit_indexes[i - 1] = UnitIndex::default();
                self.c.disk.batches_evicted.push(dir);
                self.c.disk.bytes_evicted += freed;
                bytes = bytes.saturating_sub(freed);
            }
        }
        let over = bytes > budget;
        if over && !self.c.disk.over {
            log::info!(
                "trestle run: the campaign directory holds {}, over --max-disk {}, in what is never evicted (the system queue, alarms, lifted tests); it goes on",
                human(bytes),
                human(budget)
            );
        }
        self.c.disk.over = over;
        self.c.disk.bytes = bytes;
        match full(&self.out) {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_with_or_without_a_unit() {
        assert_eq!(parse_size("500M"), Ok(500_000_000));
        assert_eq!(parse_size("2G"), Ok(2_000_000_000));
        assert_eq!(parse_size("1.5g"), Ok(1_500_000_000));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("2X").unwrap_err().contains("K, M, G or T"));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("0").is_err());
    }

    #[test]
    fn a_directory_counts_the_bytes_of_its_files_at_any_depth() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("a/b")).unwrap();
        std::fs::write(d.path().join("x"), [0u8; 10]).unwrap();
        std::fs::write(d.path().join("a/b/y"), [0u8; 32]).unwrap();
        assert_eq!(dir_bytes(d.path()), 42);
        assert_eq!(dir_bytes(&d.path().join("none")), 0);
    }
}

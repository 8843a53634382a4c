//! System-test layouts a replay server keeps between replays. A captured testsuite's
//! units come from a few hundred tests, and making each unit's working directory
//! afresh and removing it again (directories, the test's files, its stdin) was a
//! fifth of the time of a replay of a small unit. A kept layout is handed out again
//! only while it is as it was made: every file and directory in it is given a
//! modification time a second before it was made, so whatever a replay writes,
//! truncates, creates or removes there leaves a newer one behind (as would a change
//! of mode or a file replaced under the same name: the inode is compared too), and
//! a layout found changed after a replay is removed.

use anyhow::{Context as _, Result};
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash as _, Hasher as _};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use trestle_abi::unit::SystemTest;
use trestle_exec::launch::Layout;

/// Layouts kept at most, and bytes of test files and stdin in them; the one used
/// longest ago goes first. A captured testsuite's units come from all its tests in
/// turn (sed's: 853), so the bound is the number of tests of a large one.
const KEPT: usize = 2048;
const KEPT_BYTES: usize = 64 << 20;

/// Layouts of the tests replayed last, by a digest of their files and stdin.
#[derive(Default)]
pub(super) struct Layouts {
    kept: HashMap<u64, Vec<Kept>>,
    count: usize,
    bytes: usize,
    /// Replays so far: when each kept layout was used last.
    clock: u64,
}

/// A test's layout and what it held when made.
pub(super) struct Kept {
    files: BTreeMap<String, Vec<u8>>,
    stdin: Option<Vec<u8>>,
    /// The layout (removed when dropped).
    pub layout: Layout,
    made: Vec<Stamp>,
    used: u64,
}

impl Kept {
    fn bytes(&self) -> usize {
        self.files.values().map(Vec::len).sum::<usize>() + self.stdin.as_ref().map_or(0, Vec::len)
    }
}

/// One file or directory of a layout, as `lstat` sees it.
#[derive(Debug, PartialEq, Eq)]
struct Stamp {
    path: PathBuf,
    ino: u64,
    size: u64,
    mode: u32,
    mtime: (i64, i64),
}

/// What a kept layout is found by: its test's files and stdin, hashed.
fn digest(files: &BTreeMap<String, Vec<u8>>, stdin: &Option<Vec<u8>>) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    (files, stdin).hash(&mut h);
    h.finish()
}

impl Layouts {
    /// A layout of `test` as it was made: one kept from an earlier replay of the same
    /// test, or a new one. Give it back with [`Layouts::give_back`] after the run.
    pub fn take(&mut self, test: &SystemTest) -> Result<Kept> {
        let key = digest(&test.files, &test.stdin);
        if let Some(list) = self.kept.get_mut(&key) {
            if let Some(i) = list
                .iter()
                .position(|k| k.files == test.files && k.stdin == test.stdin)
            {
                let k = list.swap_remove(i);
                if list.is_empty() {
                    self.kept.remove(&key);
                }
                self.count -= 1;
                self.bytes -= k.bytes();
                return Ok(k);
            }
        }
        let layout = Layout::new(test)?;
        let made = age(&layout)?;
        Ok(Kept {
            files: test.files.clone(),
            stdin: test.stdin.clone(),
            layout,
            made,
            used: 0,
        })
    }

    /// Keep `kept` for the next replay of its test, unless the run changed it (then
    /// it is removed).
    pub fn give_back(&mut self, mut kept: Kept) {
        if !stamps(&kept.layout).is_ok_and(|now| now == kept.made) {
            return;
        }
        self.clock += 1;
        kept.used = self.clock;
        self.count += 1;
        self.bytes += kept.bytes();
        self.kept
            .entry(digest(&kept.files, &kept.stdin))
            .or_default()
            .push(kept);
        while self.count > KEPT || self.bytes > KEPT_BYTES {
            self.forget_oldest();
        }
    }

    /// Remove the layout used longest ago.
    fn forget_oldest(&mut self) {
        let Some((&key, i)) = self
            .kept
            .iter()
            .flat_map(|(key, list)| {
                list.iter()
                    .enumerate()
                    .map(move |(i, k)| ((key, i), k.used))
            })
            .min_by_key(|&(_, used)| used)
            .map(|(at, _)| at)
        else {
            return;
        };
        let list = self.kept.get_mut(&key).expect("found above");
        let k = list.swap_remove(i);
        if list.is_empty() {
            self.kept.remove(&key);
        }
        self.count -= 1;
        self.bytes -= k.bytes();
    }
}

/// Set the modification time of everything in `layout` a second before now, and
/// return its stamps.
fn age(layout: &Layout) -> Result<Vec<Stamp>> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let then = libc::timespec {
        tv_sec: now - 1,
        tv_nsec: 0,
    };
    let omit = libc::timespec {
        tv_sec: 0,
        tv_nsec: libc::UTIME_OMIT,
    };
    for s in stamps(layout)? {
        let c = std::ffi::CString::new(s.path.as_os_str().as_bytes())
            .context("a layout path with a NUL byte")?;
        // SAFETY: a NUL-terminated path and two timespecs, as utimensat takes them.
        let r = unsafe {
            libc::utimensat(
                libc::AT_FDCWD,
                c.as_ptr(),
                [omit, then].as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("cannot set the time of {}", s.path.display()));
        }
    }
    stamps(layout)
}

/// What `lstat` says of every file and directory of `layout` (its working
/// directory, all in it, and its side directory with the stdin file), in order.
fn stamps(layout: &Layout) -> Result<Vec<Stamp>> {
    let mut out = Vec::new();
    for root in [&layout.cwd, &layout.side] {
        walk(root, &mut out)?;
    }
    Ok(out)
}

fn walk(path: &Path, out: &mut Vec<Stamp>) -> Result<()> {
    let m = std::fs::symlink_metadata(path)
        .with_context(|| format!("cannot look at {}", path.display()))?;
    out.push(Stamp {
        path: path.to_owned(),
        ino: m.ino(),
        size: m.size(),
        mode: m.mode(),
        mtime: (m.mtime(), m.mtime_nsec()),
    });
    if m.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .with_context(|| format!("cannot list {}", path.display()))?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()
            .with_context(|| format!("cannot list {}", path.display()))?;
        entries.sort();
        for e in entries {
            walk(&e, out)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_with(files: &[(&str, &str)], stdin: &str) -> SystemTest {
        SystemTest {
            args: vec![],
            stdin: Some(stdin.as_bytes().to_vec()),
            files: files
                .iter()
                .map(|(n, c)| (n.to_string(), c.as_bytes().to_vec()))
                .collect(),
            env: BTreeMap::new(),
        }
    }

    #[test]
    fn an_untouched_layout_is_handed_out_again_and_a_changed_one_is_not() {
        let test = test_with(&[("in.txt", "abc\n"), ("d/more.txt", "xyz\n")], "input\n");
        let mut layouts = Layouts::default();
        let first = layouts.take(&test).unwrap();
        let cwd = first.layout.cwd.clone();
        layouts.give_back(first);
        // Nothing changed: the same directory.
        let again = layouts.take(&test).unwrap();
        assert_eq!(again.layout.cwd, cwd);
        // Changes a replay may make, each within the same second as the layout was
        // made: the layout is not handed out again.
        type Change = fn(&Path);
        let changes: [(&str, Change); 5] = [
            ("same-size rewrite", |d| {
                std::fs::write(d.join("in.txt"), "xyz\n").unwrap()
            }),
            ("new file", |d| {
                std::fs::write(d.join("out.txt"), "").unwrap()
            }),
            ("removed file", |d| {
                std::fs::remove_file(d.join("d/more.txt")).unwrap()
            }),
            ("replaced", |d| {
                std::fs::write(d.join("tmp"), "abc\n").unwrap();
                std::fs::rename(d.join("tmp"), d.join("in.txt")).unwrap();
            }),
            ("mode", |d| {
                use std::os::unix::fs::PermissionsExt as _;
                std::fs::set_permissions(d.join("in.txt"), std::fs::Permissions::from_mode(0o600))
                    .unwrap()
            }),
        ];
        layouts.give_back(again);
        for (what, change) in changes {
            let k = layouts.take(&test).unwrap();
            let dir = k.layout.cwd.clone();
            change(&dir);
            layouts.give_back(k);
            let next = layouts.take(&test).unwrap();
            assert_ne!(next.layout.cwd, dir, "{what}: a changed layout was kept");
            assert_eq!(
                std::fs::read(next.layout.cwd.join("in.txt")).unwrap(),
                b"abc\n",
                "{what}"
            );
            assert!(!dir.exists(), "{what}: the changed layout was not removed");
            layouts.give_back(next);
        }
        // Another test gets a layout of its own.
        let other = test_with(&[("in.txt", "abd\n")], "input\n");
        assert_ne!(layouts.take(&other).unwrap().layout.cwd, cwd);
    }
}

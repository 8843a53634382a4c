//! One process's raw capture record (written by the runtime, layout in
//! `trestle_abi::capture`) read back, and turned into a system test.

use anyhow::{anyhow, bail, Context as _, Result};
use sha2::{Digest as _, Sha256};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt as _;
use std::path::{Component, Path, PathBuf};
use trestle_abi::capture::*;
use trestle_exec::systest::{Content, Expect, JsonTest, Output};

/// A standard stream as the record has it.
#[derive(Debug, Clone)]
pub struct Stream {
    /// What it was connected to.
    pub kind: StreamKind,
    /// Bytes that went through it in all.
    pub total: u64,
    /// The bytes kept (all of them unless `total` is larger).
    pub bytes: Vec<u8>,
}

impl Stream {
    /// Not all of it was kept.
    pub fn cut(&self) -> bool {
        self.total > self.bytes.len() as u64
    }
}

/// A file the program opened.
#[derive(Debug, Clone)]
pub struct Opened {
    /// [`ACCESS_READ`] and the other access words.
    pub access: String,
    /// The path as the program gave it.
    pub given: Vec<u8>,
    /// The path it resolved to.
    pub resolved: Vec<u8>,
    /// Its content when first opened, if kept.
    pub stored: Option<PathBuf>,
    /// Its size then.
    pub size: u64,
    /// The path as given is a symbolic link (a test holds only plain files).
    pub symlink: bool,
}

/// One captured process.
#[derive(Debug, Clone)]
pub struct Record {
    /// The record's directory.
    pub dir: PathBuf,
    /// `argv`, the program's name first.
    pub argv: Vec<Vec<u8>>,
    /// Its working directory.
    pub cwd: PathBuf,
    /// Its executable.
    pub exe: PathBuf,
    /// The executable of the process that started it.
    pub parent_exe: PathBuf,
    /// Variables that shaped the run, in the order seen (the first value of a name wins).
    pub env: Vec<(Vec<u8>, Vec<u8>)>,
    /// Files opened, in order.
    pub opened: Vec<Opened>,
    /// How it ended: `exit N` or `signal N`.
    pub status: String,
    /// The trestle version of the runtime that wrote it.
    pub version: String,
    /// stdin, stdout and stderr.
    pub streams: [Stream; 3],
}

/// Why a record is no test.
#[derive(Debug)]
pub enum Unusable {
    /// The supervisor never wrote its last file: killed before the program ended.
    Unfinished,
    /// Written by a runtime with another record layout.
    OtherFormat(u32, String),
}

fn read(dir: &Path, name: &str) -> Result<Vec<u8>> {
    std::fs::read(dir.join(name))
        .with_context(|| format!("capture record {}: cannot read {name}", dir.display()))
}

fn path_of(bytes: Vec<u8>) -> PathBuf {
    PathBuf::from(OsString::from_vec(bytes))
}

/// Read the record in `dir`: `Ok(Err(why))` for one that is no test.
pub fn read_record(dir: &Path) -> Result<std::result::Result<Record, Unusable>> {
    let process = match std::fs::read_to_string(dir.join(PROCESS)) {
        Ok(p) => p,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Err(Unusable::Unfinished)),
        Err(e) => {
            return Err(e).with_context(|| {
                format!("capture record {}: cannot read {PROCESS}", dir.display())
            })
        }
    };
    let mut fields: BTreeMap<&str, &str> = BTreeMap::new();
    for line in process.lines() {
        let (k, v) = line.split_once(' ').ok_or_else(|| {
            anyhow!(
                "capture record {}: malformed line {line:?} in {PROCESS}",
                dir.display()
            )
        })?;
        fields.insert(k, v);
    }
    let field = |k: &str| {
        fields
            .get(k)
            .copied()
            .ok_or_else(|| anyhow!("capture record {}: {PROCESS} has no {k}", dir.display()))
    };
    let format: u32 = field("format")?
        .parse()
        .map_err(|_| anyhow!("capture record {}: malformed format", dir.display()))?;
    let version = field("version")?.to_owned();
    if format != CAPTURE_FORMAT {
        return Ok(Err(Unusable::OtherFormat(format, version)));
    }
    let stream = |name: &str| -> Result<Stream> {
        let v = field(name)?;
        let (kind, total) = v
            .split_once(' ')
            .ok_or_else(|| anyhow!("capture record {}: malformed {name} {v:?}", dir.display()))?;
        let kind = StreamKind::from_word(kind).ok_or_else(|| {
            anyhow!(
                "capture record {}: unknown {name} kind {kind:?}",
                dir.display()
            )
        })?;
        let total = total.parse().map_err(|_| {
            anyhow!(
                "capture record {}: malformed {name} size {total:?}",
                dir.display()
            )
        })?;
        Ok(Stream {
            kind,
            total,
            bytes: read(dir, name)?,
        })
    };
    let streams = [stream(STDIN)?, stream(STDOUT)?, stream(STDERR)?];
    let argv = split_fields(&read(dir, ARGV)?)
        .into_iter()
        .map(<[u8]>::to_vec)
        .collect();
    let env_bytes = read(dir, ENV)?;
    let env_fields = split_fields(&env_bytes);
    if !env_fields.len().is_multiple_of(2) {
        bail!(
            "capture record {}: {ENV} has a name without a value",
            dir.display()
        );
    }
    let mut env: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    for pair in env_fields.chunks(2) {
        if !env.iter().any(|(k, _)| k == pair[0]) {
            env.push((pair[0].to_vec(), pair[1].to_vec()));
        }
    }
    let opened_bytes = match std::fs::read(dir.join(OPENED)) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            return Err(e)
                .with_context(|| format!("capture record {}: cannot read {OPENED}", dir.display()))
        }
    };
    let opened_fields = split_fields(&opened_bytes);
    if !opened_fields.len().is_multiple_of(OPENED_FIELDS) {
        bail!(
            "capture record {}: {OPENED} has a partial entry",
            dir.display()
        );
    }
    let opened = opened_fields
        .chunks(OPENED_FIELDS)
        .map(|f| {
            let stored =
                (!f[3].is_empty()).then(|| dir.join(String::from_utf8_lossy(f[3]).as_ref()));
            Ok(Opened {
                access: String::from_utf8_lossy(f[0]).into_owned(),
                given: f[1].to_vec(),
                resolved: f[2].to_vec(),
                stored,
                size: String::from_utf8_lossy(f[4]).parse().map_err(|_| {
                    anyhow!(
                        "capture record {}: malformed size in {OPENED}",
                        dir.display()
                    )
                })?,
                symlink: f[5] == OPENED_SYMLINK.as_bytes(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Ok(Record {
        dir: dir.to_owned(),
        argv,
        cwd: path_of(read(dir, CWD)?),
        exe: path_of(read(dir, EXE)?),
        parent_exe: path_of(read(dir, PARENT_EXE)?),
        env,
        opened,
        status: field("status")?.to_owned(),
        version,
        streams,
    }))
}

/// Directories whose files belong to the machine, not to a test.
const SYSTEM_DIRS: &[&str] = &[
    "/dev/", "/proc/", "/sys/", "/etc/", "/usr/", "/lib/", "/lib64/", "/bin/", "/sbin/", "/run/",
    "/var/",
];

/// A name a file can have inside a test's directory as given: relative, going
/// nowhere above it.
fn inside_name(given: &[u8]) -> Option<String> {
    let s = std::str::from_utf8(given).ok()?;
    let p = Path::new(s);
    (!s.is_empty()
        && !p.is_absolute()
        && p.components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir)))
    .then(|| {
        p.components()
            .filter(|c| matches!(c, Component::Normal(_)))
            .collect::<PathBuf>()
            .to_string_lossy()
            .into_owned()
    })
    .filter(|n| !n.is_empty())
}

/// Digest of output bytes, hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn output(s: &Stream) -> Option<Output> {
    match s.kind {
        StreamKind::Terminal | StreamKind::Device | StreamKind::Nothing => None,
        _ => Some(Output {
            bytes: s.total,
            sha256: (!s.cut()).then(|| sha256_hex(&s.bytes)),
        }),
    }
}

/// A record as a system test, with what the test could not keep.
#[derive(Debug, Clone)]
pub struct Captured {
    /// The test, with its expectation.
    pub test: JsonTest,
    /// What of the run the test does not hold ("stdin was a terminal", "file X cut at
    /// N of M bytes", "reads the FIFO X"): the likely causes if it replays otherwise.
    pub notes: Vec<String>,
    /// The name the program was started by (`argv[0]`), which a test does not hold:
    /// it runs under its path.
    pub name: String,
}

/// The record as a system test; `Err` names what cannot be written as one.
pub fn to_test(r: &Record) -> Result<Captured> {
    let mut notes = Vec::new();
    let mut args: Vec<String> = r
        .argv
        .iter()
        .skip(1)
        .enumerate()
        .map(|(i, a)| {
            String::from_utf8(a.clone()).map_err(|_| anyhow!("argument {} is not UTF-8", i + 1))
        })
        .collect::<Result<_>>()?;
    let mut env = BTreeMap::new();
    for (k, v) in &r.env {
        let (Ok(k), Ok(v)) = (std::str::from_utf8(k), std::str::from_utf8(v)) else {
            bail!("variable {} is not UTF-8", String::from_utf8_lossy(k));
        };
        if k.starts_with("TRESTLE_") || k.starts_with("__AFL") || k.starts_with("LD_") {
            continue;
        }
        env.insert(k.to_owned(), v.to_owned());
    }
    let mut files: BTreeMap<String, Content> = BTreeMap::new();
    let mut written: Vec<&[u8]> = Vec::new();
    let mut taken: Vec<&[u8]> = Vec::new();
    let mut dirs: Vec<String> = Vec::new();
    let mut writes: Vec<String> = Vec::new();
    for o in &r.opened {
        let shown = String::from_utf8_lossy(&o.given).into_owned();
        match o.access.as_str() {
            ACCESS_WRITE => {
                written.push(&o.resolved);
                // The directory a file is written into must be there, as in the suite.
                if let Some(dir) = inside_name(&o.given).and_then(|n| {
                    Path::new(&n)
                        .parent()
                        .map(|d| d.to_string_lossy().into_owned())
                }) {
                    if !dir.is_empty() {
                        dirs.push(format!("{dir}/"));
                    }
                }
                writes.push(shown);
                continue;
            }
            ACCESS_STREAM => {
                notes.push(format!(
                    "reads the FIFO or socket {shown}, whose content is not kept"
                ));
                continue;
            }
            ACCESS_READ | ACCESS_READ_WRITE => {}
            _ => continue,
        }
        let resolved = String::from_utf8_lossy(&o.resolved);
        // A file first seen as output is the run's own; one seen before (by a program
        // started from this one, which noted it too) is in the test already.
        let key = o.resolved.as_slice();
        if SYSTEM_DIRS.iter().any(|d| resolved.starts_with(d))
            || written.contains(&key)
            || taken.contains(&key)
        {
            continue;
        }
        let Some(stored) = &o.stored else { continue };
        taken.push(key);
        let bytes = std::fs::read(stored).with_context(|| {
            format!(
                "capture record {}: cannot read {}",
                r.dir.display(),
                stored.display()
            )
        })?;
        if o.size > bytes.len() as u64 {
            notes.push(format!(
                "file {shown} cut at {} of {} bytes",
                bytes.len(),
                o.size
            ));
        }
        if o.symlink {
            notes.push(format!(
                "{shown} was a symbolic link; the test holds a copy of its target"
            ));
        }
        let name = match inside_name(&o.given) {
            Some(n) => n,
            None => {
                // An absolute path or one above the working directory: the file gets a
                // place in the test's directory and the arguments naming it that name.
                let base = Path::new(resolved.as_ref())
                    .file_name()
                    .map_or("file".into(), |b| b.to_string_lossy().into_owned());
                let mut name = format!("files/{base}");
                let mut n = 2;
                while files.contains_key(&name) {
                    name = format!("files/{n}-{base}");
                    n += 1;
                }
                rename_in_args(&mut args, &shown, &name);
                name
            }
        };
        files
            .entry(name)
            .or_insert_with(|| Content::from_bytes(&bytes));
    }
    for d in dirs {
        // A directory that holds an input file is there already.
        if !files.keys().any(|f| f.starts_with(&d)) {
            files
                .entry(d)
                .or_insert_with(|| Content::Text(String::new()));
        }
    }
    let [stdin, stdout, stderr] = &r.streams;
    let stdin_content = match stdin.kind {
        StreamKind::File | StreamKind::Pipe => Some(Content::from_bytes(&stdin.bytes)),
        StreamKind::Terminal => {
            notes.push("stdin was a terminal".into());
            None
        }
        _ => None,
    };
    if stdin.cut() {
        notes.push(format!(
            "stdin cut at {} of {} bytes",
            stdin.bytes.len(),
            stdin.total
        ));
    }
    // A signal no program raises on itself: the suite stopped it (`timeout`, `kill`).
    if let Some(sig) = r
        .status
        .strip_prefix("signal ")
        .and_then(|n| n.parse::<i32>().ok())
    {
        if [
            libc::SIGHUP,
            libc::SIGINT,
            libc::SIGKILL,
            libc::SIGALRM,
            libc::SIGTERM,
        ]
        .contains(&sig)
        {
            notes.push(format!(
                "it was stopped from outside (signal {sig}: a timeout or kill in the suite)"
            ));
        }
    }
    let expect = Expect {
        status: r.status.clone(),
        stdout: output(stdout),
        stderr: if stderr.kind == StreamKind::Merged {
            None
        } else {
            output(stderr)
        },
        merged: stderr.kind == StreamKind::Merged,
        writes,
    };
    let name = r
        .argv
        .first()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .unwrap_or_default();
    Ok(Captured {
        test: JsonTest {
            args,
            stdin: stdin_content,
            files,
            env,
            expect: Some(expect),
        },
        notes,
        name,
    })
}

/// Replace `path` where an argument names it: the whole argument, or after an
/// option's `=` or a one-letter option's letter (`--file=PATH`, `-fPATH`).
fn rename_in_args(args: &mut [String], path: &str, name: &str) {
    for a in args.iter_mut() {
        if a == path {
            *a = name.to_owned();
        } else if let Some(head) = a.strip_suffix(path) {
            let short_option = head.len() == 2 && head.starts_with('-') && head != "--";
            if head.ends_with('=') || short_option {
                *a = format!("{head}{name}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_inside_the_test_directory_stay_and_others_do_not() {
        assert_eq!(inside_name(b"in/a.txt").as_deref(), Some("in/a.txt"));
        assert_eq!(inside_name(b"./a.txt").as_deref(), Some("a.txt"));
        assert_eq!(inside_name(b"../a.txt"), None);
        assert_eq!(inside_name(b"/tmp/a.txt"), None);
        assert_eq!(inside_name(b"."), None);
    }

    #[test]
    fn arguments_naming_a_moved_file_follow_it() {
        let mut args: Vec<String> = [
            "/src/t/a.sed",
            "--file=/src/t/a.sed",
            "-f/src/t/a.sed",
            "x/src/t/a.sed",
            "--/src/t/a.sed",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        rename_in_args(&mut args, "/src/t/a.sed", "files/a.sed");
        assert_eq!(
            args,
            [
                "files/a.sed",
                "--file=files/a.sed",
                "-ffiles/a.sed",
                "x/src/t/a.sed",
                "--/src/t/a.sed"
            ]
        );
    }
}

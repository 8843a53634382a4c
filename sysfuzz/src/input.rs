//! The fuzzer's input: a system test as bytes ([`SysInput`]), always normalised so
//! that what runs is what its JSON file says, and the bounds mutations keep to.
//!
//! It owns the input's form and its file on disk; how inputs change is the mutators'
//! ([`super::mutators`]), how they run the executor's ([`super::executor`]).

use anyhow::{bail, Result};
use libafl::corpus::CorpusId;
use libafl::inputs::Input;
use libafl_bolts::HasLen;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use trestle_abi::unit::SystemTest;
use trestle_exec::systest;

/// Longest stdin or file content a mutation makes.
pub const MAX_CONTENT: usize = 64 << 10;
/// Most arguments a mutation makes.
pub const MAX_ARGS: usize = 64;
/// Longest argument a mutation makes.
pub const MAX_ARG_LEN: usize = 4096;

/// A system test as the fuzzer sees it: arguments, stdin and file contents as bytes;
/// the environment fixed from the seed it descends from.
///
/// Always normalised ([`SysInput::from_test`]), so that it and the JSON file written for
/// it run the same: arguments are UTF-8 without NUL bytes, and sizes are bounded.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SysInput {
    /// Command-line arguments after the program name.
    pub args: Vec<Vec<u8>>,
    /// Standard input (empty: none).
    pub stdin: Vec<u8>,
    /// Files created in the working directory, by relative path (names come from seeds).
    pub files: BTreeMap<String, Vec<u8>>,
    /// Environment variables.
    pub env: BTreeMap<String, String>,
}

impl SysInput {
    /// The input for a system test.
    pub fn from_test(t: &SystemTest) -> SysInput {
        let mut input = SysInput {
            args: t.args.iter().map(|a| a.as_bytes().to_vec()).collect(),
            stdin: t.stdin.clone().unwrap_or_default(),
            files: t.files.clone(),
            env: t.env.clone(),
        };
        input.normalise();
        input
    }

    /// Whether `t` is an input as it stands: within the bounds [`Self::from_test`]
    /// cuts to. One that is not would run as another test here (a lifted sed script
    /// with an 8 KiB replacement, cut at 4 KiB, loses its closing `/`).
    pub fn fits(t: &SystemTest) -> bool {
        t.args.len() <= MAX_ARGS
            && t.args
                .iter()
                .all(|a| a.len() <= MAX_ARG_LEN && !a.contains('\0'))
            && t.stdin.as_ref().is_none_or(|s| s.len() <= MAX_CONTENT)
            && t.files.values().all(|v| v.len() <= MAX_CONTENT)
    }

    /// The system test this input is.
    pub fn to_test(&self) -> SystemTest {
        SystemTest {
            args: self
                .args
                .iter()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect(),
            stdin: (!self.stdin.is_empty()).then(|| self.stdin.clone()),
            files: self.files.clone(),
            env: self.env.clone(),
        }
    }

    /// The JSON system test.
    pub fn to_json(&self) -> Vec<u8> {
        // Plain strings and maps always serialise (and an empty file would give every
        // input the same name).
        serde_json::to_vec_pretty(&systest::to_json(&self.to_test()))
            .expect("a JSON test serialises")
    }

    /// Its file name: a stable hash of its JSON form.
    pub fn file_name(&self) -> String {
        format!("{:016x}.json", trestle_abi::ids::fnv1a64(&self.to_json()))
    }

    /// A test whose files would land outside its working directory is refused (the
    /// loader refuses such files too; tests made in memory are checked here).
    pub(super) fn check(t: &SystemTest) -> Result<()> {
        for name in t.files.keys() {
            let p = Path::new(name);
            if name.is_empty()
                || p.is_absolute()
                || p.components()
                    .any(|c| !matches!(c, std::path::Component::Normal(_)))
            {
                bail!("file name {name:?} must be a relative path inside the test directory");
            }
        }
        if let Some((f, g)) =
            trestle_exec::systest::layout_conflict(t.files.keys().map(String::as_str))
        {
            bail!("files {f:?} and {g:?} cannot both be made (one is inside the other)");
        }
        Ok(())
    }

    /// Bound the sizes; make arguments what a command line can carry and JSON can hold.
    pub(super) fn normalise(&mut self) {
        self.args.truncate(MAX_ARGS);
        for a in &mut self.args {
            a.retain(|&b| b != 0);
            a.truncate(MAX_ARG_LEN);
            if std::str::from_utf8(a).is_err() {
                // Each bad byte becomes U+FFFD, three bytes: cut again, at a character.
                let mut s = String::from_utf8_lossy(a).into_owned();
                let mut end = s.len().min(MAX_ARG_LEN);
                while !s.is_char_boundary(end) {
                    end -= 1;
                }
                s.truncate(end);
                *a = s.into_bytes();
            }
        }
        self.stdin.truncate(MAX_CONTENT);
        for v in self.files.values_mut() {
            v.truncate(MAX_CONTENT);
        }
    }
}

impl Input for SysInput {
    fn to_file<P: AsRef<Path>>(&self, path: P) -> Result<(), libafl::Error> {
        // Whole or not at all, through a temporary file that a write cut short (a kill,
        // a full disk) may leave behind: replaced next time, where LibAFL's own
        // `write_file_atomic` refuses to ("File exists") once one is left.
        trestle_exec::files::write_atomic(path.as_ref(), &self.to_json())
            .map_err(|e| libafl::Error::unknown(format!("{e:#}")))
    }

    fn from_file<P: AsRef<Path>>(path: P) -> Result<Self, libafl::Error> {
        systest::load_test(path.as_ref())
            .map(|t| SysInput::from_test(&t))
            .map_err(|e| libafl::Error::illegal_argument(format!("{e:#}")))
    }

    fn generate_name(&self, _id: Option<CorpusId>) -> String {
        self.file_name()
    }
}

impl HasLen for SysInput {
    fn len(&self) -> usize {
        self.args.iter().map(|a| a.len() + 1).sum::<usize>()
            + self.stdin.len()
            + self.files.values().map(Vec::len).sum::<usize>()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(crate) fn input(args: &[&str], stdin: &str) -> SysInput {
        SysInput::from_test(&SystemTest {
            args: args.iter().map(|s| s.to_string()).collect(),
            stdin: Some(stdin.as_bytes().to_vec()),
            ..Default::default()
        })
    }

    #[test]
    fn inputs_round_trip_through_their_json_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut i = input(&["-n", "in.txt"], "a\nb\n");
        i.files.insert("in.txt".into(), vec![0, 1, 2, 0xff]);
        i.env.insert("LC_ALL".into(), "C".into());
        let p = dir.path().join(i.file_name());
        i.to_file(&p).unwrap();
        assert_eq!(SysInput::from_file(&p).unwrap(), i);
        assert_eq!(systest::load_test(&p).unwrap(), i.to_test());
    }

    #[test]
    fn a_test_over_the_bounds_does_not_fit_as_it_stands() {
        let mut t = input(&["-e", "s/a/b/"], "abc\n").to_test();
        assert!(SysInput::fits(&t));
        // A lifted replacement of 8 KiB: cut at 4 KiB it would be another script.
        t.args[1] = format!("s/a/{}/", "b".repeat(2 * MAX_ARG_LEN));
        assert!(!SysInput::fits(&t));
        assert!(SysInput::fits(&SysInput::from_test(&t).to_test()));
        let mut big = input(&[], "").to_test();
        big.stdin = Some(vec![b'x'; MAX_CONTENT + 1]);
        assert!(!SysInput::fits(&big));
    }

    #[test]
    fn arguments_are_normalised_to_what_a_command_line_carries() {
        let mut i = input(&[], "");
        i.args = vec![
            b"a\0b".to_vec(),
            vec![0xff, b'x'],
            vec![b'y'; MAX_ARG_LEN + 10],
        ];
        i.args.extend((0..100).map(|_| b"z".to_vec()));
        i.normalise();
        assert_eq!(i.args[0], b"ab");
        assert!(std::str::from_utf8(&i.args[1]).is_ok());
        assert_eq!(i.args[2].len(), MAX_ARG_LEN);
        assert_eq!(i.args.len(), MAX_ARGS);
    }

    #[test]
    fn tests_with_files_outside_their_directory_are_refused() {
        let mut t = SystemTest::default();
        t.files.insert("d/in.txt".into(), vec![]);
        assert!(SysInput::check(&t).is_ok());
        for bad in ["/etc/passwd", "../x", "a/../../x", ""] {
            let mut t = SystemTest::default();
            t.files.insert(bad.into(), vec![]);
            assert!(SysInput::check(&t).is_err(), "{bad:?} accepted");
        }
    }
}

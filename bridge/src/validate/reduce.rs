//! Test-case reduction: delta debugging (ddmin) over a system test's arguments,
//! stdin and file contents, keeping whatever property the caller checks (for an
//! alarm: the program still crashes with the same signature).
//!
//! Each input is reduced coarse to fine: whole arguments, then the characters of
//! each argument; stdin and files by lines, then by bytes; then the environment.
//! Passes repeat until one changes nothing (the test is then 1-minimal: no single
//! argument, character, line or byte can go) or the run budget or the time bound is
//! spent. Every candidate is checked by actually running it; a result is never
//! assumed.

use anyhow::Result;
use std::collections::HashSet;
use trestle_abi::unit::SystemTest;

/// What a reduction did.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ReduceStats {
    /// Candidates run.
    pub runs: usize,
    /// Whether the run budget or the time bound ran out before the test was
    /// 1-minimal.
    pub budget_exhausted: bool,
    /// Size before and after (arguments + stdin + files + environment, in bytes).
    pub size_before: usize,
    /// Size after.
    pub size_after: usize,
    /// Whether the reduction is still to come (a campaign reduces its alarms once its
    /// fuzzing budget is spent): until then the "reduced" test is the one found.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pending: bool,
}

impl ReduceStats {
    /// No reduction (yet): `test` as it was found.
    pub fn none(test: &SystemTest, pending: bool) -> ReduceStats {
        let size = test_size(test);
        ReduceStats {
            runs: 0,
            budget_exhausted: false,
            size_before: size,
            size_after: size,
            pending,
        }
    }
}

/// Bytes a test holds, for comparing sizes.
pub fn test_size(t: &SystemTest) -> usize {
    t.args.iter().map(|a| a.len() + 1).sum::<usize>()
        + t.stdin.as_ref().map_or(0, |s| s.len())
        + t.files
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>()
        + t.env.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
}

struct Checker<'a> {
    keep: &'a mut dyn FnMut(&SystemTest) -> Result<bool>,
    budget: usize,
    deadline: Option<std::time::Instant>,
    runs: usize,
    seen: HashSet<Vec<u8>>,
}

impl Checker<'_> {
    fn spent(&self) -> bool {
        self.runs >= self.budget
            || self
                .deadline
                .is_some_and(|d| std::time::Instant::now() >= d)
    }

    fn check(&mut self, t: &SystemTest) -> Result<bool> {
        let key = bincode::serialize(t).expect("a system test is plain data");
        if !self.seen.insert(key) || self.spent() {
            return Ok(false);
        }
        self.runs += 1;
        (self.keep)(t)
    }
}

/// Smallest subsequence of `items` (by removing chunks) for which `test` holds,
/// assuming it holds for `items`.
fn ddmin<T: Clone>(
    mut items: Vec<T>,
    test: &mut dyn FnMut(&[T]) -> Result<bool>,
) -> Result<Vec<T>> {
    if items.is_empty() {
        return Ok(items);
    }
    if test(&[])? {
        return Ok(Vec::new());
    }
    let mut n = 2usize;
    while items.len() >= 2 {
        let chunk = items.len().div_ceil(n);
        let mut reduced = false;
        let mut start = 0;
        while start < items.len() {
            let end = (start + chunk).min(items.len());
            let mut rest = items[..start].to_vec();
            rest.extend_from_slice(&items[end..]);
            if test(&rest)? {
                items = rest;
                n = (n - 1).max(2);
                reduced = true;
                break;
            }
            start = end;
        }
        if !reduced {
            if n >= items.len() {
                break;
            }
            n = (n * 2).min(items.len());
        }
    }
    Ok(items)
}

fn lines(b: &[u8]) -> Vec<Vec<u8>> {
    b.split_inclusive(|c| *c == b'\n')
        .map(|l| l.to_vec())
        .collect()
}

/// Reduce `test` while `keep` holds (it must hold for `test` itself), running at
/// most `budget` candidates and none after `deadline`.
pub fn reduce(
    test: &SystemTest,
    budget: usize,
    deadline: Option<std::time::Instant>,
    keep: &mut dyn FnMut(&SystemTest) -> Result<bool>,
) -> Result<(SystemTest, ReduceStats)> {
    let size_before = test_size(test);
    let mut c = Checker {
        keep,
        budget,
        deadline,
        runs: 0,
        seen: HashSet::new(),
    };
    c.seen
        .insert(bincode::serialize(test).expect("a system test is plain data"));
    let mut best = test.clone();
    // Whole parts first, a run each: stdin, each file's content, the environment.
    // Picking at an argument's characters can take the whole time a slow finding
    // allows (a mawk blow-up, seconds a run, kept its stdin, two files and a variable
    // through 43 runs, all spent on the program text).
    enum Whole {
        Stdin,
        File(String),
        Env,
    }
    let mut wholes = Vec::new();
    if best.stdin.as_ref().is_some_and(|s| !s.is_empty()) {
        wholes.push(Whole::Stdin);
    }
    wholes.extend(
        best.files
            .iter()
            .filter(|(_, c)| !c.is_empty())
            .map(|(n, _)| Whole::File(n.clone())),
    );
    if !best.env.is_empty() {
        wholes.push(Whole::Env);
    }
    for whole in wholes {
        let mut t = best.clone();
        match whole {
            Whole::Stdin => t.stdin = Some(Vec::new()),
            Whole::File(name) => {
                t.files.insert(name, Vec::new());
            }
            Whole::Env => t.env = Default::default(),
        }
        if c.check(&t)? {
            best = t;
        }
    }
    loop {
        let before = best.clone();
        // Whole arguments.
        let args = ddmin(best.args.clone(), &mut |a| {
            let t = SystemTest {
                args: a.to_vec(),
                ..best.clone()
            };
            c.check(&t)
        })?;
        best.args = args;
        // Characters of each argument.
        for i in 0..best.args.len() {
            let chars: Vec<char> = best.args[i].chars().collect();
            let kept = ddmin(chars, &mut |cs| {
                let mut t = best.clone();
                t.args[i] = cs.iter().collect();
                c.check(&t)
            })?;
            best.args[i] = kept.into_iter().collect();
        }
        // Stdin: lines, then bytes.
        if let Some(stdin) = best.stdin.clone() {
            let kept = ddmin(lines(&stdin), &mut |ls| {
                let t = SystemTest {
                    stdin: Some(ls.concat()),
                    ..best.clone()
                };
                c.check(&t)
            })?;
            best.stdin = Some(kept.concat());
            let bytes = best.stdin.clone().unwrap_or_default();
            let kept = ddmin(bytes, &mut |bs| {
                let t = SystemTest {
                    stdin: Some(bs.to_vec()),
                    ..best.clone()
                };
                c.check(&t)
            })?;
            best.stdin = Some(kept);
        }
        // Files: lines, then bytes (the files themselves stay: arguments name them).
        let names: Vec<String> = best.files.keys().cloned().collect();
        for name in names {
            let content = best.files[&name].clone();
            let kept = ddmin(lines(&content), &mut |ls| {
                let mut t = best.clone();
                t.files.insert(name.clone(), ls.concat());
                c.check(&t)
            })?;
            best.files.insert(name.clone(), kept.concat());
            let bytes = best.files[&name].clone();
            let kept = ddmin(bytes, &mut |bs| {
                let mut t = best.clone();
                t.files.insert(name.clone(), bs.to_vec());
                c.check(&t)
            })?;
            best.files.insert(name, kept);
        }
        // Environment variables.
        let env: Vec<(String, String)> = best.env.clone().into_iter().collect();
        let kept = ddmin(env, &mut |e| {
            let t = SystemTest {
                env: e.iter().cloned().collect(),
                ..best.clone()
            };
            c.check(&t)
        })?;
        best.env = kept.into_iter().collect();
        if best == before || c.spent() {
            break;
        }
    }
    let stats = ReduceStats {
        runs: c.runs,
        budget_exhausted: c.spent(),
        size_before,
        size_after: test_size(&best),
        pending: false,
    };
    Ok((best, stats))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_what_the_property_needs() {
        let t = SystemTest {
            args: vec![
                "-x".into(),
                "set".into(),
                "7".into(),
                "42342531".into(),
                "junk".into(),
            ],
            stdin: Some(b"line one\nboom here\nline three\n".to_vec()),
            ..Default::default()
        };
        // Property: an argument containing "423" and stdin containing "boom".
        let mut keep = |t: &SystemTest| -> Result<bool> {
            let stdin = t.stdin.clone().unwrap_or_default();
            Ok(t.args.iter().any(|a| a.contains("423")) && stdin.windows(4).any(|w| w == b"boom"))
        };
        let (r, stats) = reduce(&t, 1000, None, &mut keep).unwrap();
        assert_eq!(r.args, vec!["423".to_string()]);
        assert_eq!(r.stdin.unwrap(), b"boom");
        assert!(stats.size_after < stats.size_before);
        assert!(!stats.budget_exhausted);
    }

    #[test]
    fn whole_parts_go_first_when_the_budget_is_short() {
        let mut files = std::collections::BTreeMap::new();
        files.insert("data.txt".to_owned(), b"10\n20\n30\n".to_vec());
        let mut env = std::collections::BTreeMap::new();
        env.insert("LC_ALL".to_owned(), "C".to_owned());
        let t = SystemTest {
            args: vec!["{print $703700576} # a long program text".into()],
            stdin: Some(b"a\nb\n".to_vec()),
            files,
            env,
        };
        // Only the argument's field index matters.
        let mut keep =
            |t: &SystemTest| -> Result<bool> { Ok(t.args.iter().any(|a| a.contains("$7037"))) };
        let (r, stats) = reduce(&t, 4, None, &mut keep).unwrap();
        assert_eq!(stats.runs, 4);
        assert_eq!(
            (
                r.stdin.as_deref(),
                r.files["data.txt"].as_slice(),
                r.env.len()
            ),
            (Some(&b""[..]), &b""[..], 0),
            "{r:?}"
        );
        assert_eq!(r.args, t.args, "no run was left for the argument");
    }

    #[test]
    fn respects_the_budget() {
        let t = SystemTest {
            stdin: Some(vec![b'a'; 1000]),
            ..Default::default()
        };
        let mut keep =
            |t: &SystemTest| -> Result<bool> { Ok(t.stdin.as_ref().is_some_and(|s| s.len() > 10)) };
        let (_, stats) = reduce(&t, 5, None, &mut keep).unwrap();
        assert_eq!(stats.runs, 5);
        assert!(stats.budget_exhausted);
        let past = std::time::Instant::now();
        let (_, stats) = reduce(&t, 1000, Some(past), &mut keep).unwrap();
        assert_eq!(stats.runs, 0);
        assert!(stats.budget_exhausted);
    }

    #[test]
    fn the_result_is_one_minimal_by_lines_and_bytes() {
        // Property: stdin holds "ab" somewhere before "cd" on a later line.
        let t = SystemTest {
            stdin: Some(b"xx\nzzabq\nyy\nqcdz\nww\n".to_vec()),
            ..Default::default()
        };
        let holds = |s: &[u8]| {
            let a = s.windows(2).position(|w| w == b"ab");
            let c = s.windows(2).rposition(|w| w == b"cd");
            matches!((a, c), (Some(a), Some(c)) if a < c && s[a..c].contains(&b'\n'))
        };
        let mut keep =
            |t: &SystemTest| -> Result<bool> { Ok(holds(t.stdin.as_deref().unwrap_or_default())) };
        let (r, stats) = reduce(&t, 100_000, None, &mut keep).unwrap();
        let s = r.stdin.unwrap();
        assert!(!stats.budget_exhausted);
        for i in 0..s.len() {
            let mut less = s.clone();
            less.remove(i);
            assert!(!holds(&less), "byte {i} of {s:?} can go");
        }
    }
}

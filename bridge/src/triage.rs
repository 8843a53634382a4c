//! `trestle triage`: crashes trestle did not find, sorted into bugs.
//!
//! Takes what another fuzzer left (AFL++'s `crashes/` with the target's command line
//! from `fuzzer_stats`, libFuzzer's `crash-*` files, trestle system tests, or plain
//! files of input bytes) and the program as shipped, and does to each input what a
//! campaign does to a crash of its own system fuzzer ([`Lifter::confirm_crash`]): runs
//! it in the sandbox, keeps it only if it crashes there, groups it with the crashes of
//! the same bug (crash class and faulting line), and reduces one member per group.
//! The output directory holds the same `alarms/<id>/` folders and `alarms.json` a
//! campaign writes, and `triage.json`: every group with all its members, and every
//! input dropped with the reason.

use crate::lift::{Confirmed, LiftConfig, Lifter, Origin};
use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use trestle_abi::unit::SystemTest;
use trestle_exec::files;
use trestle_exec::launch::RunOptions;
use trestle_exec::sandbox::{cpu_limit, Limits, Sandbox, CPU_LIMIT};
use trestle_exec::signature::CrashSignature;
use trestle_exec::systest::load_test;

/// Options of `trestle triage`.
#[derive(Debug, Clone)]
pub struct Options {
    /// Inputs: AFL++ output or instance directories, directories of crash files,
    /// single files.
    pub inputs: Vec<PathBuf>,
    /// The program to confirm crashes with (as shipped; with -g for source lines).
    pub program: PathBuf,
    /// Its arguments, `@@` standing for the input file; `None`: AFL++'s command line
    /// from `fuzzer_stats`, `@@` alone for libFuzzer crash files, else the input on
    /// stdin.
    pub command: Option<Vec<String>>,
    /// Output directory.
    pub out: PathBuf,
    /// Wall-clock limit per run.
    pub timeout: Duration,
    /// CPU time after which a run of a hang input counts as hanging (whole seconds).
    pub hang_timeout: Duration,
    /// Address-space limit per run, MiB.
    pub memory_mb: u64,
    /// Run without bubblewrap.
    pub no_sandbox: bool,
    /// Time allowed for reducing each group's reproducer (`None`: no reduction).
    pub reduce_time: Option<Duration>,
    /// An earlier triage (or campaign) directory: groups whose bug is not among its
    /// alarms are new.
    pub fail_on_new: Option<PathBuf>,
    /// Print progress lines.
    pub progress: bool,
    /// Other builds of the program, by role (`asan`, `coverage`, ...): every bug's
    /// reproducer runs on each too, and one that some lack is build-dependent.
    pub also_on: Vec<(String, PathBuf)>,
    /// Also write the bugs to this file as SARIF.
    pub sarif: Option<PathBuf>,
}

/// Where an input came from, as its provenance says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InputKind {
    /// A file of AFL++'s `crashes/`.
    AflCrash,
    /// A file of AFL++'s `hangs/`.
    AflHang,
    /// libFuzzer's `crash-*` (or `leak-*`).
    LibfuzzerCrash,
    /// libFuzzer's `timeout-*` or `oom-*`.
    LibfuzzerHang,
    /// A trestle system test (JSON).
    SystemTest,
    /// A file of input bytes.
    Raw,
}

impl InputKind {
    fn words(self) -> &'static str {
        match self {
            InputKind::AflCrash => "an AFL++ crash",
            InputKind::AflHang => "an AFL++ hang",
            InputKind::LibfuzzerCrash => "a libFuzzer crash",
            InputKind::LibfuzzerHang => "a libFuzzer timeout or out-of-memory input",
            InputKind::SystemTest => "a trestle system test",
            InputKind::Raw => "an input file",
        }
    }

    /// Inputs that hang (or blow up memory) rather than crash: confirmed as hangs.
    fn is_hang(self) -> bool {
        matches!(self, InputKind::AflHang | InputKind::LibfuzzerHang)
    }

    /// Inputs whose name does not say whether they crash or hang (a campaign's
    /// alarms, a folder of tests): one that runs into the CPU limit is tried as a hang.
    fn may_hang(self) -> bool {
        matches!(self, InputKind::SystemTest | InputKind::Raw)
    }
}

/// One input found under the given paths.
#[derive(Debug, Clone)]
struct Input {
    path: PathBuf,
    kind: InputKind,
    /// The command line it runs with (`@@` for the input file), when it has its own
    /// (an AFL++ directory's `fuzzer_stats`).
    command: Option<Vec<String>>,
}

/// One bug: the alarm and every input that crashed (or hung) with it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Group {
    /// The alarm's id (`alarms/<id>/`).
    pub id: String,
    /// Its deduplication key (crash class and faulting place).
    pub key: String,
    /// The crash, as the program showed it.
    pub signature: String,
    /// Every input that crashed with it, in name order.
    pub members: Vec<PathBuf>,
    /// The first of them by name (AFL++ and libFuzzer name inputs in finding order).
    pub first: PathBuf,
    /// The smallest, the one reduced.
    pub smallest: PathBuf,
    /// Not among the alarms of the `--fail-on-new` directory.
    pub new: bool,
    /// The builds of `--also-on` its reproducer does not crash (or hang): a bug of
    /// one build (often undefined behaviour) when not empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_on: Vec<String>,
}

/// An input that was not confirmed, and why.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Dropped {
    /// The input.
    pub input: PathBuf,
    /// What it is.
    pub kind: InputKind,
    /// Why it is not in any group.
    pub reason: String,
}

/// `triage.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    /// The program that confirmed the crashes.
    pub program: PathBuf,
    /// Inputs looked at.
    pub inputs: usize,
    /// Of those, confirmed as crashes or hangs.
    pub reproduced: usize,
    /// The bugs, first found first.
    pub groups: Vec<Group>,
    /// Inputs not confirmed (a crash input that does not crash, a hang input that
    /// does not hang), with why.
    pub dropped: Vec<Dropped>,
    /// Seconds the triage took.
    pub seconds: f64,
}

/// The file name `@@` becomes in a test's directory.
const INPUT_FILE: &str = "input";
/// Runs of an input before it counts as not reproducing (a crash that depends on
/// timing or address layout does not show every time).
const TRIES: usize = 2;

/// Run `trestle triage`. Returns the summary (also in `OUT/triage.json`).
pub fn run(opts: &Options) -> Result<Summary> {
    let started = Instant::now();
    let mut inputs = Vec::new();
    for p in &opts.inputs {
        let found = collect(p)?;
        if found.is_empty() {
            bail!(
                "{} holds no inputs to triage (expected AFL++'s output or an instance directory with crashes/, \
                 libFuzzer's crash-* files, trestle system tests or files of input bytes)",
                p.display()
            );
        }
        inputs.extend(found);
    }
    let limits = Limits {
        wall: opts.timeout,
        cpu_secs: cpu_limit(opts.timeout),
        memory: opts.memory_mb << 20,
        ..Limits::default()
    };
    let sandbox = Sandbox::new(limits, !opts.no_sandbox)?;
    let program = std::fs::canonicalize(&opts.program)
        .with_context(|| format!("program {}", opts.program.display()))?;
    check_program_starts(&program)?;
    std::fs::create_dir_all(&opts.out)
        .with_context(|| format!("cannot create {}", opts.out.display()))?;
    let earlier = match &opts.fail_on_new {
        Some(d) => Some(earlier_keys(d)?),
        None => None,
    };
    let config = LiftConfig {
        hang_limit: Some(opts.hang_timeout),
        reduce_budget: opts.reduce_time.map(|_| 100_000),
        reduce_time: opts.reduce_time.unwrap_or(Duration::from_secs(120)),
        also_on: opts.also_on.clone(),
        ..LiftConfig::new(&program, sandbox)
    };
    let mut lifter = Lifter::new(config, &opts.out, &[])?;

    // Smallest first: the first member of a group is the one reduced.
    let mut sized: Vec<(u64, Input)> = inputs
        .into_iter()
        .map(|i| (std::fs::metadata(&i.path).map(|m| m.len()).unwrap_or(0), i))
        .collect();
    sized.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.path.cmp(&b.1.path)));
    let total = sized.len();
    // By alarm id, in the order run: smallest first.
    let mut members: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    let mut dropped = Vec::new();
    let mut last_line = Instant::now();
    for (n, (_, input)) in sized.iter().enumerate() {
        let test = test_of(input, opts.command.as_deref())?;
        let name = input
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let origin = Origin {
            found_by: Some(input.kind.words().to_owned()),
            ..Origin::default()
        };
        let mut outcome = Confirmed::NotReproduced(String::new());
        // A hang is run twice by its confirmation already.
        for _ in 0..if input.kind.is_hang() { 1 } else { TRIES } {
            let confirmed = if input.kind.is_hang() {
                lifter.confirm_hang(&test, &name, &input.path, &origin)
            } else {
                lifter.confirm_crash(&test, &name, &input.path, &origin)
            };
            outcome = confirmed.with_context(|| format!("triaging {}", input.path.display()))?;
            match &outcome {
                Confirmed::NotReproduced(how)
                    if input.kind.may_hang() && how.contains(&format!("({CPU_LIMIT}")) =>
                {
                    let how = how.clone();
                    outcome = lifter
                        .confirm_hang(&test, &name, &input.path, &origin)
                        .with_context(|| format!("triaging {}", input.path.display()))?;
                    if let Confirmed::NotReproduced(h) = &outcome {
                        outcome = Confirmed::NotReproduced(format!("{how}; as a hang: {h}"));
                    }
                    break;
                }
                Confirmed::NotReproduced(_) => {}
                _ => break,
            }
        }
        match outcome {
            Confirmed::New(id) => {
                if opts.progress {
                    log::info!(
                        "[triage {}/{total}] {}: a new bug, alarms/{id}",
                        n + 1,
                        input.path.display()
                    );
                    last_line = Instant::now();
                }
                members.entry(id).or_default().push(input.path.clone());
            }
            Confirmed::Known(id) => members.entry(id).or_default().push(input.path.clone()),
            Confirmed::NotReproduced(how) => dropped.push(Dropped {
                input: input.path.clone(),
                kind: input.kind,
                reason: if input.kind.is_hang() {
                    format!(
                        "does not hang the program ({how}; {} of CPU time)",
                        humantime_secs(opts.hang_timeout)
                    )
                } else {
                    format!("does not crash the program ({how}, {TRIES} runs)")
                },
            }),
        }
        if opts.progress && last_line.elapsed() > Duration::from_secs(5) {
            log::info!(
                "[triage {}/{total}] {} bug(s), {} dropped",
                n + 1,
                members.len(),
                dropped.len()
            );
            last_line = Instant::now();
        }
    }

    let alarms = lifter.alarms();
    let mut groups: Vec<Group> = Vec::new();
    for a in &alarms {
        let Some(mut m) = members.remove(&a.id) else {
            continue;
        };
        let smallest = m[0].clone();
        m.sort();
        let new = earlier
            .as_ref()
            .is_some_and(|keys| !keys.iter().any(|k| CrashSignature::keys_match(k, &a.key)));
        groups.push(Group {
            id: a.id.clone(),
            key: a.key.clone(),
            signature: a.signature.clone(),
            first: m[0].clone(),
            smallest,
            members: m,
            new,
            not_on: a.builds_without().into_iter().map(str::to_owned).collect(),
        });
    }
    groups.sort_by(|a, b| a.first.cmp(&b.first));
    let summary = Summary {
        program,
        inputs: total,
        reproduced: groups.iter().map(|g| g.members.len()).sum(),
        groups,
        dropped,
        seconds: started.elapsed().as_secs_f64(),
    };
    files::write(&opts.out.join(TRIAGE), &summary)?;
    let report = opts.out.join(REPORT);
    files::write_atomic(&report, report_md(&summary, &alarms).as_bytes())?;
    if let Some(file) = &opts.sarif {
        let details = crate::report::alarm_details(&opts.out, &alarms)?;
        let findings = crate::sarif::Findings {
            dir: &opts.out,
            program: &summary.program,
            elapsed: summary.seconds,
            alarms: &alarms,
            details: &details,
        };
        crate::sarif::write(&findings, file)?;
    }
    Ok(summary)
}

/// The triage's report for people, in its output directory.
pub const REPORT: &str = "report.md";

/// `report.md`: each bug (its kind and place, how many inputs, the smallest and its
/// reduction, the builds it is not on) and each dropped input with why.
fn report_md(s: &Summary, alarms: &[crate::lift::AlarmEntry]) -> String {
    let mut md = format!(
        "# trestle triage\n\nProgram `{}`: {} input(s), {} reproduced as {} bug(s), {} dropped, in {:.0} s.\n\n",
        s.program.display(),
        s.inputs,
        s.reproduced,
        s.groups.len(),
        s.dropped.len(),
        s.seconds
    );
    if !s.groups.is_empty() {
        md += "## Bugs\n\n| bug | inputs | smallest | reproducer | note |\n|---|---|---|---|---|\n";
        for g in &s.groups {
            let a = alarms.iter().find(|a| a.id == g.id);
            let reduced = a.map_or(String::new(), |a| {
                if a.reduction_pending || a.size_reduced == a.size_lifted {
                    format!("{} bytes", a.size_reduced)
                } else {
                    format!("{} bytes (from {})", a.size_reduced, a.size_lifted)
                }
            });
            let mut note = Vec::new();
            if g.new {
                note.push("new".to_owned());
            }
            if !g.not_on.is_empty() {
                note.push(format!("build-dependent: not on {}", g.not_on.join(", ")));
            }
            md += &format!(
                "| [{}](alarms/{}/summary.md) `{}` | {} | `{}` | {} | {} |\n",
                g.id,
                g.id,
                g.signature,
                g.members.len(),
                g.smallest.display(),
                reduced,
                note.join("; ")
            );
        }
        md += "\n";
    }
    if !s.dropped.is_empty() {
        md += "## Dropped\n\n";
        for d in &s.dropped {
            md += &format!(
                "- `{}` ({}): {}\n",
                d.input.display(),
                d.kind.words(),
                d.reason
            );
        }
    }
    md
}

/// The triage's own record in its output directory.
pub const TRIAGE: &str = "triage.json";

/// The alarm keys of an earlier triage or campaign directory.
fn earlier_keys(dir: &Path) -> Result<Vec<String>> {
    let list: crate::lift::AlarmList =
        files::read(&dir.join(files::ALARMS)).with_context(|| {
            format!(
                "--fail-on-new: {} is no earlier triage or campaign directory",
                dir.display()
            )
        })?;
    Ok(list.alarms.into_iter().map(|a| a.key).collect())
}

/// Fail early, in one line, for a program that cannot run at all.
fn check_program_starts(program: &Path) -> Result<()> {
    let meta =
        std::fs::metadata(program).with_context(|| format!("program {}", program.display()))?;
    use std::os::unix::fs::PermissionsExt as _;
    if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
        bail!("program {} is not an executable file", program.display());
    }
    let opts = RunOptions {
        timeout: Duration::from_secs(10),
        env: Vec::new(),
        capture_stdout: false,
    };
    let r = trestle_exec::launch::run_test(program, &SystemTest::default(), &opts)
        .with_context(|| format!("program {} does not start", program.display()))?;
    if let trestle_exec::systest::RunStatus::Exited(code @ (126 | 127)) = r.status {
        let err = String::from_utf8_lossy(&r.stderr);
        bail!(
            "program {} does not start (exit {code}): {}",
            program.display(),
            err.lines().last().unwrap_or("").trim()
        );
    }
    Ok(())
}

/// Every input under `path`.
fn collect(path: &Path) -> Result<Vec<Input>> {
    if path.is_file() {
        return Ok(vec![file_input(path, None)]);
    }
    if !path.is_dir() {
        bail!("{}: no such file or directory", path.display());
    }
    // An AFL++ instance directory (crashes/, hangs/, fuzzer_stats), or an output
    // directory of instances (default/, main/, secondary ones).
    if path.join("crashes").is_dir() || path.join("fuzzer_stats").is_file() {
        return afl_instance(path);
    }
    let mut instances = Vec::new();
    for e in list(path)? {
        if e.is_dir() && (e.join("crashes").is_dir() || e.join("fuzzer_stats").is_file()) {
            instances.extend(afl_instance(&e)?);
        }
    }
    if !instances.is_empty() {
        return Ok(instances);
    }
    Ok(list(path)?
        .into_iter()
        .filter(|p| p.is_file() && !is_note(p))
        .map(|p| file_input(&p, None))
        .collect())
}

/// The entries of a directory, sorted.
fn list(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()
        .with_context(|| format!("cannot list {}", dir.display()))?;
    v.sort();
    Ok(v)
}

/// Files fuzzers leave beside their inputs.
fn is_note(p: &Path) -> bool {
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    name == "README.txt" || name.starts_with('.')
}

fn afl_instance(dir: &Path) -> Result<Vec<Input>> {
    let command = afl_command(dir)?;
    let mut out = Vec::new();
    for (sub, kind) in [
        ("crashes", InputKind::AflCrash),
        ("hangs", InputKind::AflHang),
    ] {
        let d = dir.join(sub);
        if d.is_dir() {
            out.extend(
                list(&d)?
                    .into_iter()
                    .filter(|p| p.is_file() && !is_note(p))
                    .map(|path| Input {
                        path,
                        kind,
                        command: command.clone(),
                    }),
            );
        }
    }
    Ok(out)
}

/// The target's arguments from an AFL++ instance's `fuzzer_stats` (`command_line :
/// afl-fuzz ... -- /path/prog ARGS`), without the program itself.
fn afl_command(dir: &Path) -> Result<Option<Vec<String>>> {
    let stats = dir.join("fuzzer_stats");
    let text = match std::fs::read_to_string(&stats) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", stats.display())),
    };
    let Some(line) = text.lines().find_map(|l| {
        l.split_once(':')
            .filter(|(k, _)| k.trim() == "command_line")
            .map(|(_, v)| v.trim().to_owned())
    }) else {
        return Ok(None);
    };
    let words: Vec<&str> = line.split_whitespace().collect();
    // Options of afl-fuzz end at `--` or at the first word that is not one (or an
    // option's value); without `--`, the target is the word after the last option.
    let target_at = match words.iter().position(|w| *w == "--") {
        Some(i) => i + 1,
        None => {
            let mut i = 1;
            while i < words.len() && words[i].starts_with('-') {
                i += if afl_option_takes_value(words[i]) {
                    2
                } else {
                    1
                };
            }
            i
        }
    };
    Ok(words
        .get(target_at + 1..)
        .map(|rest| rest.iter().map(|s| s.to_string()).collect()))
}

/// afl-fuzz options that take a value (`-i DIR`), as opposed to flags (`-d`).
fn afl_option_takes_value(opt: &str) -> bool {
    opt.len() == 2 && "iofmtxclsSMFpgGeILPwTVEba".contains(&opt[1..])
}

fn file_input(path: &Path, command: Option<Vec<String>>) -> Input {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let kind = if name.starts_with("crash-") || name.starts_with("leak-") {
        InputKind::LibfuzzerCrash
    } else if name.starts_with("timeout-")
        || name.starts_with("oom-")
        || name.starts_with("slow-unit-")
    {
        InputKind::LibfuzzerHang
    } else if name.ends_with(".json") && load_test(path).is_ok() {
        InputKind::SystemTest
    } else {
        InputKind::Raw
    };
    Input {
        path: path.to_owned(),
        kind,
        command,
    }
}

/// The system test an input runs as: a trestle test as it is; otherwise its bytes
/// as the file `@@` names in the command (`command` given, else the input's own,
/// else `@@` alone for a libFuzzer file), or on stdin when the command has no `@@`.
fn test_of(input: &Input, command: Option<&[String]>) -> Result<SystemTest> {
    if input.kind == InputKind::SystemTest {
        return load_test(&input.path);
    }
    let bytes = std::fs::read(&input.path)
        .with_context(|| format!("cannot read {}", input.path.display()))?;
    let libfuzzer = [String::from("@@")];
    let args: &[String] = match (command, &input.command) {
        (Some(c), _) => c,
        (None, Some(c)) => c,
        (None, None) if matches!(input.kind, InputKind::LibfuzzerCrash) => &libfuzzer,
        (None, None) => &[],
    };
    let mut test = SystemTest {
        args: args.iter().map(|a| a.replace("@@", INPUT_FILE)).collect(),
        ..Default::default()
    };
    if args.iter().any(|a| a.contains("@@")) {
        test.files.insert(INPUT_FILE.into(), bytes);
    } else {
        test.stdin = Some(bytes);
    }
    Ok(test)
}

/// Whole seconds, as in `2s`.
fn humantime_secs(d: Duration) -> String {
    format!("{}s", d.as_secs_f64().ceil().max(1.0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_command_line_comes_from_fuzzer_stats() {
        let dir = tempfile::tempdir().unwrap();
        let stats = |line: &str| {
            std::fs::write(
                dir.path().join("fuzzer_stats"),
                format!("start_time : 1\ncommand_line : {line}\n"),
            )
            .unwrap()
        };
        stats("afl-fuzz -i in -o out -V 600 -c /b/cmplog/dc -l 2AT -x dict.txt -- /b/afl/dc -f @@");
        assert_eq!(
            afl_command(dir.path()).unwrap(),
            Some(vec!["-f".to_owned(), "@@".to_owned()])
        );
        stats("afl-fuzz -i in -o out -d /b/afl/prog");
        assert_eq!(afl_command(dir.path()).unwrap(), Some(vec![]));
        std::fs::remove_file(dir.path().join("fuzzer_stats")).unwrap();
        assert_eq!(afl_command(dir.path()).unwrap(), None);
    }

    #[test]
    fn an_input_runs_as_the_file_its_command_names_or_on_stdin() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("id:000000,sig:11");
        std::fs::write(&f, b"5 0:r\n").unwrap();
        let raw = Input {
            path: f.clone(),
            kind: InputKind::AflCrash,
            command: Some(vec!["-f".into(), "@@".into()]),
        };
        let t = test_of(&raw, None).unwrap();
        assert_eq!(t.args, ["-f", INPUT_FILE]);
        assert_eq!(t.files[INPUT_FILE], b"5 0:r\n");
        assert_eq!(t.stdin, None);
        // A command given on the command line wins; without `@@` the bytes are stdin.
        let t = test_of(&raw, Some(&["-x".into()])).unwrap();
        assert_eq!(
            (t.args.as_slice(), t.stdin.as_deref()),
            (&["-x".to_owned()][..], Some(&b"5 0:r\n"[..]))
        );
        // A libFuzzer crash file is the target's one argument.
        let lf = file_input(&dir.path().join("crash-0a1b"), None);
        std::fs::write(&lf.path, b"x").unwrap();
        assert_eq!(lf.kind, InputKind::LibfuzzerCrash);
        assert_eq!(test_of(&lf, None).unwrap().args, [INPUT_FILE]);
    }
}

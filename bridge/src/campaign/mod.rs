//! `trestle run`: the whole bridge as one campaign.
//!
//! Rounds until the time is up: system-level fuzzing from the seeds (a slice) →
//! record and carve the system tests that reached new coverage → pick a unit (the
//! function with the most code still uncovered; or the `--focus` functions; or those
//! changed since a git revision, first) → unit fuzzing (a slice) → lift and validate
//! its findings → the effective lifted tests go back to the system fuzzer. System
//! coverage (SanitizerCoverage edges of the program) is sampled throughout into
//! `timeline.csv`; `--system-only` runs the same loop without the bridge.
//!
//! The output directory is the campaign's whole state and survives interruption:
//! every alarm is written when found (atomically), the system fuzzer's queue is on
//! disk, and `campaign.json` says which tests were recorded, which units fuzzed and
//! lifted; `trestle run --resume DIR` goes on from there.

use crate::binary::Binary;
use crate::carve;
use crate::files;
use crate::lift::Lifter;
use crate::record;
use crate::validate::sandbox::{cpu_limit, Limits, Sandbox};
use crate::system::systest::{load_test, load_tests, NamedTest};
use crate::system::fuzz::{SysFuzzConfig, SysFuzzer};
use crate::carve::units::{read_unit, UnitIndex, UNIT_INDEX};
use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Options of `trestle run`.
#[derive(Debug, Clone)]
pub struct Options {
    /// The program, built with trestle-cc.
    pub program: Option<PathBuf>,
    /// Seed system tests: a JSON file or a directory of them.
    pub seeds: Option<PathBuf>,
    /// Time budget of the whole campaign.
    pub time: Duration,
    /// Output directory (must not exist or be empty).
    pub out: Option<PathBuf>,
    /// Go on with the campaign in this directory, with its settings, for the time it
    /// has left.
    pub resume: Option<PathBuf>,
    /// Cores for unit fuzzing (LibAFL launcher, one client per core).
    pub cores: usize,
    /// Unit fuzzing through the persistent forkserver (a round trip between fuzzer
    /// and harness per execution) instead of in-process, where the fuzzer runs inside
    /// the harness (`trestle fuzz --in-process`, about ten times the executions).
    /// Implied by --cores above 1.
    pub forkserver: bool,
    /// Fuzz only units of these functions.
    pub focus: Vec<String>,
    /// Fuzz first the functions whose source lines changed since this git revision
    /// (needs --source).
    pub changed_since: Option<String>,
    /// The source tree (a git work tree) for --changed-since.
    pub source: Option<PathBuf>,
    /// The program to validate lifted tests with (built without trestle-cc, with -g;
    /// a coverage build also decides "effective"). Default: the program itself, run
    /// with trestle's runtime passive.
    pub validate_with: Option<PathBuf>,
    /// Only system-level fuzzing: the baseline the bridge is compared with.
    pub system_only: bool,
    /// Length of a system fuzzing slice.
    pub system_slice: Duration,
    /// Length of a unit fuzzing slice.
    pub unit_slice: Duration,
    /// Time limit per execution (system test or unit).
    pub timeout: Duration,
    /// Random seed.
    pub seed: u64,
    /// Run the program without bubblewrap, both when fuzzing it and when validating
    /// lifted tests (still in fresh directories, with rlimits).
    pub no_sandbox: bool,
    /// Plain progress lines even on a terminal.
    pub plain: bool,
    /// Run a one-core campaign (fuzzers and the program) on this core (default: a
    /// free one, that no other fuzzer is bound to; none if all are taken).
    pub pin: Option<usize>,
    /// Do not bind a one-core campaign to a core.
    pub no_pin: bool,
    /// Exit with status 1 when the campaign found a true alarm (for CI jobs).
    pub fail_on_alarm: bool,
}

/// How a campaign ended.
#[derive(Debug)]
pub struct RunOutcome {
    /// The campaign's state.
    pub campaign: Campaign,
    /// True alarms found (over all its sessions).
    pub alarms: usize,
}

/// The settings a campaign keeps for `--resume`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Settings {
    /// Instrumented program.
    pub program: PathBuf,
    /// Seeds.
    pub seeds: PathBuf,
    /// Budget, seconds.
    pub budget: f64,
    /// Unit fuzzing cores.
    pub cores: usize,
    /// Unit fuzzing in-process (else the forkserver; campaigns of earlier versions
    /// used only that).
    #[serde(default)]
    pub in_process: bool,
    /// --focus.
    pub focus: Vec<String>,
    /// Functions changed since the revision, when --changed-since was given.
    pub changed: Vec<String>,
    /// The revision.
    pub changed_since: Option<String>,
    /// Validation program.
    pub validate_with: PathBuf,
    /// System-only baseline.
    pub system_only: bool,
    /// Slice lengths, seconds.
    pub system_slice: f64,
    /// Unit slice, seconds.
    pub unit_slice: f64,
    /// Execution timeout, seconds.
    pub timeout: f64,
    /// Random seed.
    pub seed: u64,
    /// Sandbox off.
    pub no_sandbox: bool,
}

/// One unit fuzzed by the campaign.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FuzzedUnit {
    /// The unit file.
    pub unit: PathBuf,
    /// Its function.
    pub function: String,
    /// Its fuzz directory.
    pub dir: PathBuf,
    /// Unit executions.
    pub executions: u64,
    /// Unit crashes found.
    pub crashes: usize,
    /// Whether its findings were lifted.
    pub lifted: bool,
    /// Alarms after lifting it, minus before.
    pub new_alarms: usize,
    /// Effective lifted tests it gave.
    pub effective: usize,
    /// Why it could not be fuzzed, if it could not.
    pub error: Option<String>,
    /// Why it was picked.
    #[serde(default)]
    pub reason: String,
    /// Its value hashes ([`crate::carve::units::UnitRow::value_hashes`]).
    #[serde(default)]
    pub value_hashes: Vec<u64>,
}

/// A unit chosen to fuzz next.
struct Pick {
    path: PathBuf,
    function: String,
    reason: String,
    value_hashes: Vec<u64>,
}

/// One pick in this many goes to a function never fuzzed, whatever its coverage.
const EXPLORE_EVERY: usize = 3;

/// Added to the score of a changed function not fuzzed yet: above any other.
const CHANGED_FIRST: f64 = 1e12;

/// How much a unit's parameters promise, between its function's units: more input
/// covered and more kinds of parameter, with streams and numbers above the rest.
fn unit_weight(row: &crate::carve::units::UnitRow) -> f64 {
    let kinds = row.param_kinds.len().max(usize::from(row.params > 0)) as f64;
    let stream = row.param_kinds.iter().any(|k| k == "stream") as u8 as f64;
    let number = row.param_kinds.iter().any(|k| k == "number") as u8 as f64;
    (1.0 + 0.1 * row.params.min(5) as f64) * (1.0 + 0.2 * kinds + 0.5 * stream + 0.3 * number) * (1.0 + (1.0 + row.input_bytes as f64).log2() / 16.0)
}

/// `campaign.json`: everything needed to report on or resume a campaign.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Campaign {
    /// Settings.
    pub settings: Settings,
    /// Seconds spent so far (over all sessions).
    pub elapsed: f64,
    /// Rounds done.
    pub rounds: u64,
    /// System executions.
    pub system_executions: u64,
    /// Unit executions.
    pub unit_executions: u64,
    /// System queue files already recorded and carved.
    pub recorded: BTreeSet<String>,
    /// Unit directories written by carving, one per round.
    pub unit_dirs: Vec<PathBuf>,
    /// Units carved.
    pub units_carved: usize,
    /// Units with parameters.
    pub units_parameterized: usize,
    /// Units fuzzed, in order.
    pub fuzzed: Vec<FuzzedUnit>,
    /// System crashes validated.
    pub system_crashes: usize,
    /// Whether the budget is used up.
    pub finished: bool,
}

/// Samples of `timeline.csv`.
pub const TIMELINE_HEADER: &str = "seconds,system_execs,unit_execs,edges,units_carved,units_fuzzed,candidates,alarms";

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_sig: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

struct Live {
    tty: bool,
    started: Instant,
    last_plain: Instant,
    lines: usize,
}

/// What the status screen shows.
struct Status<'a> {
    c: &'a Campaign,
    edges: usize,
    phase: String,
    alarms: usize,
    candidates: usize,
    false_positives: usize,
    effective: usize,
    sys_rate: f64,
    unit_rate: f64,
}

impl Live {
    fn show(&mut self, s: &Status) {
        let el = s.c.elapsed;
        let budget = s.c.settings.budget;
        if self.tty {
            let mode = if s.c.settings.system_only { "system only" } else { "bridge" };
            let text = format!(
                "\x1b[1mtrestle run\x1b[0m ({mode})  {:>5.0}s of {:.0}s  round {}\n\
                 \x20 now       : {}\n\
                 \x20 system    : {} execs ({:.0}/s), {} edges\n\
                 \x20 units     : {} carved, {} with parameters, {} fuzzed ({} skipped), {} execs ({:.0}/s)\n\
                 \x20 findings  : {} unit crash(es), {} effective lifted test(s), {} false positive(s) suppressed\n\
                 \x20 \x1b[1malarms    : {}\x1b[0m\n",
                el,
                budget,
                s.c.rounds,
                s.phase,
                s.c.system_executions,
                s.sys_rate,
                s.edges,
                s.c.units_carved,
                s.c.units_parameterized,
                s.c.fuzzed.len(),
                s.c.fuzzed.iter().filter(|f| f.error.is_some()).count(),
                s.c.unit_executions,
                s.unit_rate,
                s.candidates,
                s.effective,
                s.false_positives,
                s.alarms
            );
            let mut err = std::io::stderr().lock();
            if self.lines > 0 {
                let _ = write!(err, "\x1b[{}A", self.lines);
            }
            for line in text.lines() {
                let _ = writeln!(err, "\x1b[2K{line}");
            }
            self.lines = text.lines().count();
        } else if self.last_plain.elapsed() >= Duration::from_secs(5) || self.lines == 0 {
            self.last_plain = Instant::now();
            self.lines = 1;
            eprintln!(
                "[run {:>5.0}s/{:.0}s] {} | system {} execs, {} edges | units {} carved, {} fuzzed ({} skipped), {} execs | {} candidates, {} alarm(s)",
                el,
                budget,
                s.phase,
                s.c.system_executions,
                s.edges,
                s.c.units_carved,
                s.c.fuzzed.len(),
                s.c.fuzzed.iter().filter(|f| f.error.is_some()).count(),
                s.c.unit_executions,
                s.candidates,
                s.alarms
            );
        }
        let _ = self.started;
    }
}

/// Functions whose source lines changed since `rev` in the work tree `source`.
pub fn changed_functions(binary: &Binary, source: &Path, rev: &str) -> Result<Vec<String>> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(source)
        .args(["diff", "--no-color", "-U0", rev, "--", "."])
        .output()
        .context("cannot run git")?;
    if !out.status.success() {
        bail!("git diff {rev} in {} failed: {}", source.display(), String::from_utf8_lossy(&out.stderr).trim());
    }
    let top = std::process::Command::new("git").arg("-C").arg(source).args(["rev-parse", "--show-toplevel"]).output()?;
    let top = PathBuf::from(String::from_utf8_lossy(&top.stdout).trim());
    let mut changed: BTreeMap<PathBuf, Vec<u32>> = BTreeMap::new();
    let mut file: Option<PathBuf> = None;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some(f) = line.strip_prefix("+++ ") {
            file = f.strip_prefix("b/").map(|f| top.join(f));
        } else if let (Some(h), Some(f)) = (line.strip_prefix("@@ "), &file) {
            // @@ -a,b +c,d @@
            let Some(plus) = h.split_whitespace().find(|p| p.starts_with('+')) else { continue };
            let mut it = plus[1..].split(',');
            let start: u32 = it.next().and_then(|x| x.parse().ok()).unwrap_or(0);
            let len: u32 = it.next().and_then(|x| x.parse().ok()).unwrap_or(1);
            let lines = changed.entry(f.clone()).or_default();
            // A pure deletion changes the code around line `start`.
            lines.extend(start..start + len.max(1));
        }
    }
    Ok(functions_at(binary, &changed))
}

/// The functions (by display name) whose definitions contain the given lines: a
/// function runs from its first line to the next function's in the same file.
fn functions_at(binary: &Binary, lines: &BTreeMap<PathBuf, Vec<u32>>) -> Vec<String> {
    let mut by_file: BTreeMap<String, Vec<(u32, String)>> = BTreeMap::new();
    for f in binary.functions.values() {
        if let Some(file) = &f.file {
            if f.line > 0 {
                by_file.entry(file.clone()).or_default().push((f.line, f.display_name().to_owned()));
            }
        }
    }
    let mut out = BTreeSet::new();
    for (file, mut fns) in by_file {
        fns.sort();
        let Some(changed) = lines.iter().find(|(p, _)| same_source(p, &file)).map(|(_, l)| l) else { continue };
        for (i, (start, name)) in fns.iter().enumerate() {
            let end = fns.get(i + 1).map_or(u32::MAX, |n| n.0);
            if changed.iter().any(|l| (*start..end).contains(l)) {
                out.insert(name.clone());
            }
        }
    }
    out.into_iter().collect()
}

fn same_source(a: &Path, debug_file: &str) -> bool {
    let b = Path::new(debug_file);
    if a == b {
        return true;
    }
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a.ends_with(b) || b.ends_with(a.strip_prefix("/").unwrap_or(a)),
    }
}

/// The lines each function spans, for scoring by uncovered code.
fn function_lines(binary: &Binary) -> BTreeMap<u64, (String, u32, u32)> {
    let mut by_file: BTreeMap<String, Vec<(u32, u64)>> = BTreeMap::new();
    for f in binary.functions.values() {
        if let Some(file) = &f.file {
            by_file.entry(file.clone()).or_default().push((f.line, f.id));
        }
    }
    let mut out = BTreeMap::new();
    for (file, mut fns) in by_file {
        fns.sort();
        for (i, (start, id)) in fns.iter().enumerate() {
            let end = fns.get(i + 1).map_or(u32::MAX, |n| n.0);
            out.insert(*id, (file.clone(), *start, end));
        }
    }
    out
}

struct Runner {
    out: PathBuf,
    c: Campaign,
    /// The index of each of `c.unit_dirs`, in the same order.
    unit_indexes: Vec<UnitIndex>,
    binary: Binary,
    sys: SysFuzzer,
    lifter: Option<Lifter>,
    live: Live,
    session_start: Instant,
    elapsed_before: f64,
    sys_execs_session: u64,
    unit_execs_session: u64,
    unit_time_session: f64,
    sys_time_session: f64,
}

impl Runner {
    fn save(&mut self) -> Result<()> {
        self.c.elapsed = self.elapsed_before + self.session_start.elapsed().as_secs_f64();
        files::write(&self.out.join(files::CAMPAIGN), &self.c)
    }

    fn remaining(&self) -> f64 {
        self.c.settings.budget - (self.elapsed_before + self.session_start.elapsed().as_secs_f64())
    }

    fn sample(&mut self) -> Result<()> {
        self.c.elapsed = self.elapsed_before + self.session_start.elapsed().as_secs_f64();
        let (candidates, alarms) = self.findings();
        let line = format!(
            "{:.1},{},{},{},{},{},{},{}\n",
            self.c.elapsed,
            self.c.system_executions,
            self.c.unit_executions,
            self.sys.edges(),
            self.c.units_carved,
            self.c.fuzzed.len(),
            candidates,
            alarms
        );
        let path = self.out.join("timeline.csv");
        let mut f = std::fs::OpenOptions::new().append(true).create(true).open(&path)?;
        f.write_all(line.as_bytes())?;
        Ok(())
    }

    fn findings(&self) -> (usize, usize) {
        match &self.lifter {
            Some(l) => (l.stats.unit_crashes, l.alarms().len()),
            None => (0, 0),
        }
    }

    fn status(&mut self, phase: &str) {
        self.c.elapsed = self.elapsed_before + self.session_start.elapsed().as_secs_f64();
        let (candidates, alarms) = self.findings();
        let (fps, eff) = self.lifter.as_ref().map_or((0, 0), |l| (l.stats.false_positives, l.stats.effective));
        let s = Status {
            c: &self.c,
            edges: self.sys.edges(),
            phase: phase.to_owned(),
            alarms,
            candidates,
            false_positives: fps,
            effective: eff,
            sys_rate: self.sys_execs_session as f64 / self.sys_time_session.max(1e-3),
            unit_rate: self.unit_execs_session as f64 / self.unit_time_session.max(1e-3),
        };
        self.live.show(&s);
    }

    /// System fuzzing for `d`, in short chunks so the status stays live.
    fn system_slice(&mut self, d: Duration) -> Result<()> {
        let end = Instant::now() + d;
        while Instant::now() < end && !STOP.load(Ordering::SeqCst) && self.remaining() > 0.0 {
            let chunk = (end - Instant::now()).min(Duration::from_secs(2)).min(Duration::from_secs_f64(self.remaining().max(0.1)));
            let t = Instant::now();
            let rep = self.sys.fuzz_for(chunk)?;
            self.sys_time_session += t.elapsed().as_secs_f64();
            self.sys_execs_session += rep.executions;
            self.c.system_executions += rep.executions;
            for crash in &rep.new_crashes {
                self.system_crash(crash)?;
            }
            self.status("system fuzzing");
            self.sample()?;
        }
        self.save()
    }

    fn system_crash(&mut self, path: &Path) -> Result<()> {
        let Some(lifter) = self.lifter.as_mut() else { return Ok(()) };
        let test = load_test(path)?;
        let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        lifter.system_crash(&test, &name, path)?;
        self.c.system_crashes += 1;
        Ok(())
    }

    /// Record and carve the queue entries not carved yet.
    fn carve_new(&mut self) -> Result<()> {
        let queue = self.out.join("system").join("queue");
        let mut fresh: Vec<PathBuf> = std::fs::read_dir(&queue)
            .with_context(|| format!("cannot list {}", queue.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .filter(|p| !self.c.recorded.contains(&p.file_name().unwrap_or_default().to_string_lossy().into_owned()))
            .collect();
        fresh.sort();
        fresh.truncate(40);
        if fresh.is_empty() {
            return Ok(());
        }
        self.status(&format!("recording {} new system test(s)", fresh.len()));
        let round = self.c.unit_dirs.len();
        let batch = self.out.join("traces").join(format!("batch-{round:04}"));
        let tests_dir = batch.join("tests");
        crate::files::remove_dir_if_present(&batch)?;
        std::fs::create_dir_all(&tests_dir)?;
        for p in &fresh {
            std::fs::copy(p, tests_dir.join(p.file_name().unwrap_or_default()))?;
        }
        let traces = batch.join("traces");
        record::run(&record::Options {
            program: self.c.settings.program.clone(),
            tests: tests_dir,
            out: traces.clone(),
            timeout: Duration::from_secs_f64(self.c.settings.timeout * 5.0),
            max_per_fn: 5,
            quiet: true,
        })?;
        let units = self.out.join("units").join(format!("batch-{round:04}"));
        crate::files::remove_dir_if_present(&units)?;
        self.status("carving");
        let summary = carve::run(&carve::Options { traces, out: units.clone(), program: None, quiet: true })
            .with_context(|| format!("carving batch {round} into {}", units.display()))?;
        let index = summary.index;
        if summary.bad_traces > 0 {
            // Nothing carved from the seeds is no campaign: the program and this
            // trestle disagree (another trestle's runtime, say). Later batches keep
            // the units of their readable traces.
            if round == 0 && index.units.is_empty() {
                bail!("carving the seeds failed ({} unreadable trace file(s)), so the bridge would have no unit to fuzz", summary.bad_traces);
            }
            eprintln!("trestle run: carving batch {round}: {} trace file(s) could not be read", summary.bad_traces);
        }
        self.c.units_carved += index.units.len();
        self.c.units_parameterized += index.units.iter().filter(|u| u.params > 0).count();
        if self.lifter.as_ref().is_some_and(|l| l.measures_coverage()) {
            self.status("measuring coverage");
        }
        if let Some(lifter) = self.lifter.as_mut().filter(|l| l.measures_coverage()) {
            let tests: Vec<_> = fresh.iter().filter_map(|p| load_test(p).ok()).collect();
            lifter.observe(&tests)?;
        }
        for p in &fresh {
            self.c.recorded.insert(p.file_name().unwrap_or_default().to_string_lossy().into_owned());
        }
        self.c.unit_dirs.push(units);
        self.unit_indexes.push(index);
        self.save()
    }

    /// The next unit to fuzz.
    ///
    /// Functions are ranked by the code still uncovered in them and (at a fifth) in
    /// what they call, less each time they were fuzzed; changed functions come first.
    /// Every [`EXPLORE_EVERY`]th pick goes to a function not fuzzed yet, larger first,
    /// whatever its coverage: a buffer overflow in code the seeds run is no less a bug.
    /// Among the units of a function, those whose parameters cover more of the input
    /// and more kinds (streams and numbers above all) come first, and a unit whose
    /// parameter values all occur in a unit of the function already fuzzed is skipped.
    fn pick(&self) -> Option<Pick> {
        let mut fuzzed_units: BTreeSet<&Path> = BTreeSet::new();
        let mut times: BTreeMap<&str, usize> = BTreeMap::new();
        let mut seen_values: BTreeMap<&str, Vec<&[u64]>> = BTreeMap::new();
        for f in &self.c.fuzzed {
            fuzzed_units.insert(&f.unit);
            *times.entry(&f.function).or_default() += 1;
            seen_values.entry(&f.function).or_default().push(&f.value_hashes);
        }
        let uncovered = self.lifter.as_ref().and_then(|l| l.uncovered_lines());
        // Each function's own score once per pick (uncovered lines in its span; without
        // coverage, its compared constants), and each function's reach once: a campaign
        // carves thousands of units of a few hundred functions.
        let own: HashMap<u64, f64> = match &uncovered {
            Some(unc) => {
                let mut by_debug_file: HashMap<&str, Option<&Vec<u32>>> = HashMap::new();
                function_lines(&self.binary)
                    .iter()
                    .map(|(id, (file, start, end))| {
                        let lines = *by_debug_file
                            .entry(file.as_str())
                            .or_insert_with(|| unc.iter().find(|(f, _)| same_source(Path::new(f), file)).map(|(_, ls)| ls));
                        let n = lines.map_or(0, |ls| ls.iter().filter(|l| (*start..*end).contains(*l)).count());
                        (*id, n as f64)
                    })
                    .collect()
            }
            None => self.binary.functions.values().map(|f| (f.id, 1.0 + f.cmp_constants.len() as f64)).collect(),
        };
        let measure = if uncovered.is_some() { "uncovered lines" } else { "compared constants" };
        let mut reach_memo: HashMap<u64, f64> = HashMap::new();
        let mut reach = |id: u64| -> f64 {
            *reach_memo.entry(id).or_insert_with(|| {
                // Code still uncovered in the function, and (less) in what it calls.
                self.binary
                    .callees_closure(id)
                    .iter()
                    .map(|f| own.get(&f.id).copied().unwrap_or(0.0) * if f.id == id { 1.0 } else { 0.2 })
                    .sum::<f64>()
                    + 0.1
            })
        };
        // Every third pick explores: a function never fuzzed, covered or not (memory
        // errors hide in code the system tests already run), larger ones first.
        let explore = self.c.fuzzed.len() % EXPLORE_EVERY == EXPLORE_EVERY - 1;
        let spans: HashMap<u64, f64> = if explore {
            function_lines(&self.binary).into_iter().map(|(id, (_, start, end))| (id, end.saturating_sub(start).min(200) as f64)).collect()
        } else {
            HashMap::new()
        };
        let mut best: Option<(f64, Pick)> = None;
        let mut best_new: Option<(f64, Pick)> = None;
        for (dir, index) in self.c.unit_dirs.iter().zip(&self.unit_indexes) {
            for row in index.units.iter().filter(|r| r.params > 0) {
                let path = dir.join(&row.file);
                if fuzzed_units.contains(path.as_path()) {
                    continue;
                }
                let s = &self.c.settings;
                if !s.focus.is_empty() && !s.focus.contains(&row.function) {
                    continue;
                }
                let near_copy = seen_values
                    .get(row.function.as_str())
                    .is_some_and(|seen| seen.iter().any(|v| !v.is_empty() && row.value_hashes.iter().all(|h| v.binary_search(h).is_ok())));
                if near_copy {
                    continue;
                }
                let id = u64::from_str_radix(&row.fn_id, 16).unwrap_or(0);
                let reach = reach(id);
                let n = *times.get(row.function.as_str()).unwrap_or(&0) as f64;
                let mut score = reach / (1.0 + 2.0 * n) * unit_weight(row);
                let changed = s.changed.contains(&row.function) && n == 0.0;
                if changed {
                    score += CHANGED_FIRST;
                }
                if explore && n == 0.0 {
                    let span = spans.get(&id).copied().unwrap_or(0.0);
                    let score = unit_weight(row) * (1.0 + span / 20.0);
                    if best_new.as_ref().is_none_or(|b| score > b.0) {
                        let reason = format!(
                            "exploring (one pick in {EXPLORE_EVERY}): a function not fuzzed before, {span:.0} source line(s), {reach:.1} {measure} in reach; parameters: {} covering {} input byte(s)",
                            if row.param_kinds.is_empty() { format!("{}", row.params) } else { row.param_kinds.join(", ") },
                            row.input_bytes
                        );
                        best_new = Some((score, Pick { path: path.clone(), function: row.function.clone(), reason, value_hashes: row.value_hashes.clone() }));
                    }
                }
                if best.as_ref().is_none_or(|b| score > b.0) {
                    let reason = format!(
                        "{}{reach:.1} {measure} in reach, fuzzed {n} time(s) before; parameters: {} covering {} input byte(s)",
                        if changed { "changed since the given revision; " } else { "" },
                        if row.param_kinds.is_empty() { format!("{}", row.params) } else { row.param_kinds.join(", ") },
                        row.input_bytes
                    );
                    best = Some((score, Pick { path, function: row.function.clone(), reason, value_hashes: row.value_hashes.clone() }));
                }
            }
        }
        // A changed function not fuzzed yet still comes first.
        match (best, best_new) {
            (Some(b), _) if b.0 >= CHANGED_FIRST => Some(b.1),
            (b, n) => n.or(b).map(|(_, p)| p),
        }
    }

    fn unit_round(&mut self) -> Result<bool> {
        let Some(Pick { path: unit_path, function, reason, value_hashes }) = self.pick() else { return Ok(false) };
        let unit = read_unit(&unit_path)?;
        let k = self.c.fuzzed.iter().filter(|f| f.function == function).count();
        let dir = self.out.join("fuzz").join(format!("{}-{k}", crate::carve::units::safe_name(&function)));
        crate::files::remove_dir_if_present(&dir)?;
        let slice = Duration::from_secs_f64(self.c.settings.unit_slice.min(self.remaining().max(1.0)));
        let (words, ints) = self.binary.dictionary_for(unit.context.fn_id);
        let cfg = trestle_unit_fuzz::FuzzConfig {
            program: self.binary.path.clone(),
            unit,
            out: dir.clone(),
            time: slice,
            timeout: Duration::from_secs_f64(self.c.settings.timeout),
            seed: self.c.settings.seed.wrapping_add(self.c.fuzzed.len() as u64),
            cmplog: true,
            dictionary: trestle_unit_fuzz::Dictionary { words, ints },
            progress: false,
            stop_on_crash: false,
            persistent: true,
            pin_core: None,
            cores: self.c.settings.cores,
            // A unit that stops finding anything gives the rest of its slice to the
            // next round.
            plateau: Some(Duration::from_secs(3)),
        };
        self.c.fuzzed.push(FuzzedUnit {
            unit: unit_path.clone(),
            function: function.clone(),
            dir: dir.clone(),
            executions: 0,
            crashes: 0,
            lifted: false,
            new_alarms: 0,
            effective: 0,
            error: None,
            reason,
            value_hashes,
        });
        self.save()?;
        let phase = format!("unit fuzzing {function}");
        let in_process = self.c.settings.in_process;
        let t = Instant::now();
        let result = std::thread::scope(|scope| {
            let h = scope.spawn(|| {
                if in_process {
                    trestle_unit_fuzz::fuzz_in_process(&cfg)
                } else {
                    trestle_unit_fuzz::fuzz(&cfg)
                }
            });
            while !h.is_finished() {
                std::thread::sleep(Duration::from_millis(500));
                self.status(&phase);
            }
            h.join()
        });
        let spent = t.elapsed().as_secs_f64();
        let last = self.c.fuzzed.last_mut().expect("pushed above");
        match result {
            Ok(Ok(rep)) => {
                last.executions = rep.executions;
                last.crashes = rep.crashes.len();
                self.c.unit_executions += rep.executions;
                self.unit_execs_session += rep.executions;
                self.unit_time_session += spent;
            }
            Ok(Err(e)) => last.error = Some(format!("{e:#}")),
            Err(_) => last.error = Some("the unit fuzzer panicked".into()),
        }
        self.save()?;
        self.lift_pending()?;
        Ok(true)
    }

    /// Lift every fuzzed unit not lifted yet (after a resume, those a kill cut short).
    fn lift_pending(&mut self) -> Result<()> {
        let Some(mut lifter) = self.lifter.take() else { return Ok(()) };
        let pending: Vec<usize> = (0..self.c.fuzzed.len()).filter(|&i| !self.c.fuzzed[i].lifted).collect();
        // Lifting gets a slice of its own: at most a minute, at least 5 s even when
        // the budget is spent (what is left stays in the fuzz directory, counted).
        let slice = self.remaining().clamp(5.0, 60.0);
        lifter.set_deadline(Some(Instant::now() + Duration::from_secs_f64(slice)));
        let mut result = Ok(());
        for i in pending {
            let f = self.c.fuzzed[i].clone();
            if f.dir.join("unit.unit").exists() {
                self.status(&format!("lifting {}", f.function));
                let before = lifter.alarms().len();
                let eff_before = lifter.stats.effective;
                // The system fuzzer runs the very build the units were carved from:
                // its edges and the units' are the same map.
                lifter.set_system_edges(Some(self.sys.covered_edges()));
                if let Err(e) = lifter.lift_dir(&f.dir, 50) {
                    // A unit the harness cannot set up again is that unit's problem,
                    // not the campaign's.
                    self.c.fuzzed[i].error = Some(format!("lifting: {e:#}"));
                }
                self.c.fuzzed[i].new_alarms = lifter.alarms().len() - before;
                self.c.fuzzed[i].effective = lifter.stats.effective - eff_before;
            }
            self.c.fuzzed[i].lifted = true;
            for t in lifter.take_effective() {
                if let Err(e) = self.sys.add_test(&t) {
                    result = Err(e);
                }
            }
            self.save()?;
        }
        self.lifter = Some(lifter);
        result
    }
}

fn settings_from(args: &Options) -> Result<Settings> {
    let program = args.program.clone().context("--program is required")?;
    let program = std::fs::canonicalize(&program).with_context(|| format!("program {}", program.display()))?;
    let seeds = args.seeds.clone().context("--seeds is required")?;
    let seeds = std::fs::canonicalize(&seeds).with_context(|| format!("seeds {}", seeds.display()))?;
    let binary = Binary::load(&program)?;
    let changed = match (&args.changed_since, &args.source) {
        (Some(rev), Some(src)) => changed_functions(&binary, src, rev)?,
        _ => Vec::new(),
    };
    for f in &args.focus {
        if !binary.functions.values().any(|m| m.display_name() == f) {
            bail!("--focus {f}: {} has no instrumented function of that name", program.display());
        }
    }
    if args.cores == 0 {
        bail!("--cores must be at least 1");
    }
    let validate_with = match &args.validate_with {
        Some(v) => std::fs::canonicalize(v).with_context(|| format!("validation program {}", v.display()))?,
        None => program.clone(),
    };
    Ok(Settings {
        program,
        seeds,
        budget: args.time.as_secs_f64(),
        cores: args.cores,
        in_process: !args.forkserver && args.cores == 1,
        focus: args.focus.clone(),
        changed,
        changed_since: args.changed_since.clone(),
        validate_with,
        system_only: args.system_only,
        system_slice: args.system_slice.as_secs_f64(),
        unit_slice: args.unit_slice.as_secs_f64(),
        timeout: args.timeout.as_secs_f64(),
        seed: args.seed,
        no_sandbox: args.no_sandbox,
    })
}

/// Run `trestle run`; returns the campaign as it ended.
pub fn run(args: &Options) -> Result<RunOutcome> {
    let (out, campaign) = match &args.resume {
        Some(dir) => {
            let path = dir.join(files::CAMPAIGN);
            if !path.exists() {
                bail!("{} is not a campaign directory (no {})", dir.display(), files::CAMPAIGN);
            }
            let c: Campaign = files::read(&path)?;
            if c.finished || c.elapsed >= c.settings.budget {
                bail!("the campaign in {} has used its {:.0}s budget; `trestle report {}` shows it", dir.display(), c.settings.budget, dir.display());
            }
            (std::fs::canonicalize(dir)?, c)
        }
        None => {
            let out = args.out.clone().context("--out is required")?;
            if out.exists() && std::fs::read_dir(&out).map(|mut d| d.next().is_some()).unwrap_or(true) {
                bail!("{} exists and is not empty: choose another --out, or --resume it", out.display());
            }
            std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
            let settings = settings_from(args)?;
            let c = Campaign {
                settings,
                elapsed: 0.0,
                rounds: 0,
                system_executions: 0,
                unit_executions: 0,
                recorded: BTreeSet::new(),
                unit_dirs: Vec::new(),
                units_carved: 0,
                units_parameterized: 0,
                fuzzed: Vec::new(),
                system_crashes: 0,
                finished: false,
            };
            let out = std::fs::canonicalize(&out)?;
            files::write(&out.join(files::CAMPAIGN), &c)?;
            std::fs::write(out.join(files::TIMELINE), format!("{TIMELINE_HEADER}\n"))?;
            (out, c)
        }
    };
    let s = campaign.settings.clone();
    let binary = Binary::load(&s.program)?;
    let seeds: Vec<NamedTest> = load_tests(&s.seeds)?;
    // One core: everything the campaign runs takes turns on it (with --cores N the
    // unit fuzzing clients are bound to cores 0..N by the launcher).
    if s.cores == 1 {
        crate::fuzz::bind_core(args.pin, args.no_pin)?;
    }
    let sys = SysFuzzer::new(SysFuzzConfig {
        program: s.program.clone(),
        seeds: seeds.clone(),
        out: out.join("system"),
        timeout: Duration::from_secs_f64(s.timeout),
        seed: s.seed,
        // What a user of a system fuzzer would give it (as AFL++'s compile-time
        // dictionary does): the program's string literals and the constants it
        // compares against. The same in both modes: the baseline is at full strength.
        dictionary: crate::system::fuzz::dictionary(&binary),
        no_forkserver: false,
        // Input-to-state on the system input, as AFL++'s -c: also in both modes.
        cmplog: true,
        memory: if crate::validate::sandbox::is_sanitizer_build(&s.program) { 0 } else { Limits::default().memory },
        sandbox: !s.no_sandbox,
    })
    .context("starting the system-level fuzzer")?;
    // Validation and lifting, also in system-only mode: a system crash is reported
    // only once the validation program confirms it.
    let limits = Limits {
        wall: Duration::from_secs_f64(s.timeout * 5.0),
        cpu_secs: cpu_limit(Duration::from_secs_f64(s.timeout * 5.0)),
        ..Limits::default()
    };
    let sandbox = Sandbox::new(limits, !s.no_sandbox)?;
    let baseline: Vec<_> = seeds.iter().map(|n| n.test.clone()).collect();
    let mut lifter = Lifter::new(&s.validate_with, &out, sandbox, &baseline, false)?;
    // Reduced to 1-minimal while the campaign waits: bounded in time, not in runs.
    lifter.set_reduce_budget(Some(100_000));
    lifter.set_reduce_time(Duration::from_secs(30));
    lifter.set_harness(Some(s.program.clone()));
    lifter.set_epoch(Instant::now() - Duration::from_secs_f64(campaign.elapsed.max(0.0)));
    lifter.set_seeds(seeds.iter().map(|n| (n.name.clone(), n.test.clone())).collect());

    STOP.store(false, Ordering::SeqCst);
    // SAFETY: installing a handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_stop as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_stop as *const () as libc::sighandler_t);
    }
    let tty = !args.plain && std::io::stderr().is_terminal();
    // A resumed campaign's unit directories, as carving left them.
    let unit_indexes =
        campaign.unit_dirs.iter().map(|d| files::read::<UnitIndex>(&d.join(UNIT_INDEX))).collect::<Result<Vec<_>>>()?;
    let mut r = Runner {
        out: out.clone(),
        unit_indexes,
        elapsed_before: campaign.elapsed,
        c: campaign,
        binary,
        sys,
        lifter: Some(lifter),
        live: Live { tty, started: Instant::now(), last_plain: Instant::now(), lines: 0 },
        session_start: Instant::now(),
        sys_execs_session: 0,
        unit_execs_session: 0,
        unit_time_session: 0.0,
        sys_time_session: 0.0,
    };
    if !s.changed.is_empty() && r.c.rounds == 0 {
        eprintln!("trestle run: changed since {}: {}", s.changed_since.as_deref().unwrap_or("?"), s.changed.join(", "));
    }
    r.sample()?;
    // Findings a kill cut short.
    r.lift_pending()?;
    let system_slice = Duration::from_secs_f64(s.system_slice);
    while r.remaining() > 0.0 && !STOP.load(Ordering::SeqCst) {
        if s.system_only {
            r.system_slice(Duration::from_secs_f64(r.remaining().max(0.0)))?;
        } else {
            // The first round lets the seeds be carved at once; the changed functions
            // and the seeds' units go first.
            let slice = if r.c.rounds == 0 { system_slice / 4 } else { system_slice };
            r.system_slice(slice)?;
            if STOP.load(Ordering::SeqCst) || r.remaining() <= 0.0 {
                break;
            }
            r.carve_new()?;
            if r.remaining() > 1.0 && !STOP.load(Ordering::SeqCst) && !r.unit_round()? {
                r.status("no unit to fuzz yet: system fuzzing");
            }
        }
        r.c.rounds += 1;
        r.sample()?;
        r.save()?;
    }
    let interrupted = STOP.load(Ordering::SeqCst);
    r.c.finished = !interrupted && r.remaining() <= 0.0;
    r.sample()?;
    r.save()?;
    r.status(if interrupted { "interrupted" } else { "done" });
    if interrupted {
        eprintln!("trestle run: interrupted; go on with `trestle run --resume {}`", out.display());
    }
    let alarms = r.lifter.as_ref().map(|l| l.alarms()).unwrap_or_default();
    eprintln!(
        "trestle run: {:.0}s, {} system and {} unit executions, {} edges; {} alarm(s){}",
        r.c.elapsed,
        r.c.system_executions,
        r.c.unit_executions,
        r.sys.edges(),
        alarms.len(),
        if alarms.is_empty() { String::new() } else { ":".into() }
    );
    for a in &alarms {
        eprintln!("  {}: {}", out.join("alarms").join(&a.id).display(), a.signature);
    }
    eprintln!("report: trestle report {}", out.display());
    Ok(RunOutcome { campaign: r.c, alarms: alarms.len() })
}

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

mod changed;
pub mod disk;
mod nodes;
mod pick;
mod program;
mod runner;
pub mod schedule;
mod status;

pub use changed::changed_functions;

use anyhow::{bail, Context as _, Result};
use runner::Runner;
use serde::{Deserialize, Serialize};
use status::{on_stop, Live, STOP};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;
use trestle_exec::binary::Binary;
use trestle_exec::files;

/// The time limit of a unit's run: a unit call is part of a system run, so twice
/// where the system fuzzer stops runs (calibrated from the seeds), at least 100 ms
/// (a harness run has its own start-up), never more than `--timeout`. A unit that
/// Where a campaign starts.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // one value per process
pub enum Start {
    /// A new campaign in `out` (which must not exist or be empty), with these
    /// settings as given: [`run`] checks them and makes their paths absolute.
    New {
        /// The campaign directory.
        out: PathBuf,
        /// What it does; `changed` is filled in from `changed_since` and `source`.
        settings: Settings,
        /// The source tree (a git work tree) that `changed_since` is a revision of.
        source: Option<PathBuf>,
    },
    /// The campaign in this directory, with its own settings, for the time it has left.
    Resume(PathBuf),
}

/// How this session of a campaign runs: chosen again at every start, never kept.
#[derive(Debug, Clone, Default)]
pub struct Session {
    /// The core a one-core campaign runs on (default: a free one).
    pub pin: Option<usize>,
    /// Leave a one-core campaign unbound.
    pub no_pin: bool,
    /// A status line redrawn in place (a terminal) rather than plain progress lines.
    pub live: bool,
    /// Workers on other machines, when the campaign accepts them.
    pub listen: Option<Listen>,
}

/// A campaign that accepts workers (`trestle join`).
#[derive(Debug, Clone)]
pub struct Listen {
    /// Where, `HOST:PORT`.
    pub addr: String,
    /// Leave all fuzzing to the workers: this node records, carves, validates, reports.
    pub delegate: bool,
    /// The cluster's key file (default `OUT/cluster.key`, made when missing).
    pub key: Option<PathBuf>,
}

/// How a campaign ended.
#[derive(Debug)]
pub struct RunOutcome {
    /// The campaign directory.
    pub dir: PathBuf,
    /// The campaign's state.
    pub campaign: Campaign,
    /// The true alarms found (over all its sessions).
    pub alarms: Vec<crate::lift::AlarmEntry>,
}

/// What a campaign does, as `trestle run` was told (the CLI's help says what each
/// means), kept in `campaign.json` for `--resume`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Settings {
    /// Instrumented program.
    pub program: PathBuf,
    /// Seeds.
    pub seeds: PathBuf,
    /// Budget (campaign.json: seconds).
    #[serde(with = "seconds")]
    pub budget: Duration,
    /// Unit fuzzing cores.
    pub cores: usize,
    /// Unit fuzzing in-process (else the forkserver; campaigns of earlier versions
    /// used only that).
    #[serde(default)]
    pub in_process: bool,
    /// --focus.
    pub focus: Vec<String>,
    /// Functions changed since the revision, when --changed-since was given (found
    /// when the campaign starts).
    #[serde(default)]
    pub changed: Vec<String>,
    /// The revision.
    pub changed_since: Option<String>,
    /// Validation program.
    pub validate_with: PathBuf,
    /// Coverage build, when it is not the validation program.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage_with: Option<PathBuf>,
    /// System-only baseline.
    pub system_only: bool,
    /// System fuzzing slice (campaign.json: seconds).
    #[serde(with = "seconds")]
    pub system_slice: Duration,
    /// Unit slice (campaign.json: seconds).
    #[serde(with = "seconds")]
    pub unit_slice: Duration,
    /// Execution timeout (campaign.json: seconds).
    #[serde(with = "seconds")]
    pub timeout: Duration,
    /// Random seed.
    pub seed: u64,
    /// Sandbox off.
    pub no_sandbox: bool,
    /// The system fuzzer runs the program itself, not its lean sibling.
    #[serde(default)]
    pub no_lean: bool,
    /// The most the campaign directory should hold, bytes (`--max-disk`).
    #[serde(default = "default_max_disk")]
    pub max_disk: u64,
}

fn default_max_disk() -> u64 {
    disk::DEFAULT_MAX_DISK
}

/// A [`Duration`] kept in campaign.json as a number of seconds, as it always was.
mod seconds {
    use serde::{Deserialize as _, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Duration::try_from_secs_f64(f64::deserialize(d)?).map_err(serde::de::Error::custom)
    }
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
    /// Its parameters' kinds ([`crate::carve::units::UnitRow::param_kinds`]).
    #[serde(default)]
    pub param_kinds: Vec<String>,
    /// The worker that fuzzed it (`None`: this machine).
    #[serde(default)]
    pub node: Option<String>,
    /// System queue entries its stream parameters started from besides the recorded
    /// values ([`crate::fuzz::stream_seeds`]).
    #[serde(default)]
    pub started_from: usize,
    /// Whether its corpus was evicted under `--max-disk` (its crashes stay).
    #[serde(default)]
    pub corpus_evicted: bool,
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
    /// The nodes of a campaign across machines (`--listen`), the main node first.
    #[serde(default)]
    pub nodes: Vec<crate::cluster::hub::NodeRecord>,
    /// What the main node found itself: queue entries, system and unit crashes.
    #[serde(default)]
    pub main_finds: u64,
    /// Seconds spent in each phase (system fuzzing, recording, carving, unit fuzzing,
    /// lifting, ...), over all sessions: where the campaign's time went.
    #[serde(default)]
    pub phase_seconds: BTreeMap<String, f64>,
    /// Seconds spent reducing alarms once the fuzzing budget was spent (not part of
    /// `elapsed`: the budget is fuzzing time).
    #[serde(default)]
    pub reduction_seconds: f64,
    /// How the time is split between the system fuzzer and unit rounds ([`schedule`]).
    #[serde(default)]
    pub schedule: schedule::Schedule,
    /// The system fuzzer's roadblocks and the units fuzzed at them.
    #[serde(default)]
    pub roadblocks: Roadblocks,
    /// The system fuzzer's hangs and their confirmation.
    #[serde(default)]
    pub hangs: Hangs,
    /// The build the system fuzzer ran in the last session: `lean` (the program's
    /// lean sibling) or `program`, with the path or the reason.
    #[serde(default)]
    pub system_build: String,
    /// The directory's size against `--max-disk`, and what was evicted.
    #[serde(default)]
    pub disk: disk::Disk,
    /// Where the system fuzzer's queue entries and findings came from (its
    /// `lineage.jsonl`): how many there are, and how many descend by mutation from a
    /// test lifted from a unit.
    #[serde(default)]
    pub lineage: QueueLineage,
}

impl Campaign {
    /// Bring a `campaign.json` of an earlier trestle up to this one's reading of it.
    pub fn upgrade(&mut self) {
        self.roadblocks.upgrade();
    }
}

/// The system fuzzer's queue entries and findings, and those among them that descend
/// from a lifted test ([`trestle_sysfuzz::Descent`]).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct QueueLineage {
    /// Queue entries and findings.
    pub entries: usize,
    /// Those that descend from a lifted test.
    pub from_lifted: usize,
}

/// The system tests the system fuzzer kept for running into its time limit
/// (`system/timeouts`), confirmed as hangs on the validation program while that takes
/// at most [`runner::HANG_SHARE`] of the campaign's time: each runs to the hang limit,
/// twice when it is a new one.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Hangs {
    /// Run on the validation program (a finding, one more of a listed one, or no hang).
    pub validated: usize,
    /// Kept by the system fuzzer, not validated yet (oldest first).
    pub pending: Vec<PathBuf>,
    /// Seconds their validation took.
    pub seconds: f64,
}

/// The roadblocks of a campaign ([`crate::roadblocks`]): branches of the program's own
/// code the system fuzzer reached with a direction never taken.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Roadblocks {
    /// Roadblocks at the last look.
    pub seen: usize,
    /// Units fuzzed at a roadblock, in order.
    pub attempts: Vec<RoadblockAttempt>,
    /// The newest units probed at a roadblock before a slice there
    /// (`trestle_unit_fuzz::probe`), in order, at most [`PROBE_LOG`]: those whose
    /// parameters do not decide the branch are not fuzzed there. Every probe, however
    /// old, is counted in `probed`.
    #[serde(default)]
    pub probes: Vec<RoadblockProbe>,
    /// What the probes at each roadblock found, over the whole campaign, by key.
    #[serde(default)]
    pub probed: BTreeMap<String, ProbeTally>,
    /// Roadblocks recorded for, each as `key@queue entry`: recorded once.
    #[serde(default)]
    pub recorded: BTreeSet<String>,
}

/// How often a roadblock is attempted before it is left to the system fuzzer. An
/// attempt whose unit flipped the branch while its lifted tests did not take it
/// counts too: trying it again with other units (other calls, other contexts, up to
/// four) found nothing new in ten sed and dc campaigns (sed's `ascii_only`: the flips
/// that lifted came on the first unit), and on `tally` it took the slice the digest
/// gate with the bug behind it needed (an empty word flips the digest loop in the
/// unit; no input gives one).
const ROADBLOCK_TRIES: usize = 2;

/// How many probes `roadblocks.probes` keeps in full. A probe is a record of a few
/// hundred bytes and a pick makes up to 32 (sed: 70 in a 10-minute campaign, 31 KB of
/// `campaign.json`); kept whole, a day's would be thousands, rewritten at every save.
pub const PROBE_LOG: usize = 256;

/// The probes at one roadblock, counted.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ProbeTally {
    /// Where it is, `file:line`.
    pub location: String,
    /// Units probed there.
    pub probes: usize,
    /// Of them, those whose parameters may decide the branch (then fuzzed there).
    pub worth: usize,
    /// Those that did not reach the branch at all.
    pub unreached: usize,
    /// Those that reached it and could not move it: the roadblock's failures.
    pub failed: usize,
    /// Seconds the probes took.
    pub seconds: f64,
    /// The units passed over there, by [`unit_key`]: none is probed there twice.
    pub passed_over: BTreeSet<u64>,
}

/// A unit file's key in [`ProbeTally::passed_over`]: the FNV-1a hash of its path, eight
/// bytes where the path takes a hundred.
pub fn unit_key(unit: &Path) -> u64 {
    unit.as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
}

impl Roadblocks {
    /// Keep a probe: counted at its roadblock, and in the log of the newest.
    pub fn note_probe(&mut self, probe: RoadblockProbe) {
        let t = self.probed.entry(probe.key.clone()).or_default();
        t.location.clone_from(&probe.location);
        t.probes += 1;
        t.seconds += probe.seconds;
        if probe.worth {
            t.worth += 1;
        } else {
            t.passed_over.insert(unit_key(&probe.unit));
            if probe.unreached {
                t.unreached += 1;
            } else {
                t.failed += 1;
            }
        }
        self.probes.push(probe);
        if self.probes.len() > PROBE_LOG {
            let over = self.probes.len() - PROBE_LOG;
            self.probes.drain(..over);
        }
    }

    /// The attempts at the roadblock `key` so far.
    pub fn tries_at(&self, key: &str) -> usize {
        self.attempts.iter().filter(|a| a.key == key).count()
    }

    /// Whether the roadblock `key` is left to the system fuzzer: [`ROADBLOCK_TRIES`]
    /// attempts were made at it, or one solved it. A roadblock solved by an alarm
    /// (the lifted test crashed, and a crashing test joins no queue) stays one in the
    /// system fuzzer's map: sed's `ascii_only`, solved so with the case-conversion bug
    /// behind it, took more slices that found nothing new.
    pub fn left_to_system(&self, key: &str) -> bool {
        self.tries_at(key) >= ROADBLOCK_TRIES
            || self
                .attempts
                .iter()
                .any(|a| a.key == key && a.solved_at.is_some())
    }

    /// Probes at the roadblock `key` whose unit reached the branch and could not move it.
    pub fn failures_at(&self, key: &str) -> usize {
        self.probed.get(key).map_or(0, |t| t.failed)
    }

    /// Whether `unit` was probed at the roadblock `key` and passed over.
    pub fn passed_over(&self, key: &str, unit: &Path) -> bool {
        self.probed
            .get(key)
            .is_some_and(|t| t.passed_over.contains(&unit_key(unit)))
    }

    /// A `campaign.json` written before the tallies: count its probes (all of them
    /// were kept then).
    fn upgrade(&mut self) {
        if self.probed.is_empty() && !self.probes.is_empty() {
            let log = std::mem::take(&mut self.probes);
            for p in log {
                self.note_probe(p);
            }
        }
    }

    /// Roadblocks whose missing direction a unit round's lifted tests made the system
    /// fuzzer take.
    pub fn solved(&self) -> usize {
        self.attempts
            .iter()
            .filter(|a| a.solved_at.is_some())
            .count()
    }
}

/// A unit fuzzed at a roadblock.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RoadblockAttempt {
    /// The roadblock ([`crate::roadblocks::Roadblock::key`]).
    pub key: String,
    /// Where it is, `file:line`.
    pub location: String,
    /// The function it is in.
    pub function: String,
    /// Guarded blocks behind its missing direction.
    pub behind: u32,
    /// The unit fuzzed (index into `fuzzed`).
    pub fuzzed: usize,
    /// Campaign seconds when the attempt started.
    pub at: f64,
    /// Campaign seconds when an input of the unit fuzzer first took the direction.
    #[serde(default)]
    pub flipped_at: Option<f64>,
    /// Campaign seconds when its lifted tests took the missing direction at system level.
    pub solved_at: Option<f64>,
}

/// A unit probed at a roadblock.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RoadblockProbe {
    /// The roadblock ([`crate::roadblocks::Roadblock::key`]).
    pub key: String,
    /// Where it is, `file:line`.
    pub location: String,
    /// The unit probed.
    pub unit: PathBuf,
    /// Its function.
    pub function: String,
    /// Whether its parameters may decide the branch (then it is fuzzed there).
    pub worth: bool,
    /// Whether it did not reach the branch at all (not counted against the
    /// roadblock: only units that reach it and cannot move it count as its failures).
    #[serde(default)]
    pub unreached: bool,
    /// What the probe found, in words.
    pub verdict: String,
    /// Seconds the probe took.
    pub seconds: f64,
}

/// Samples of `timeline.csv`.
pub const TIMELINE_HEADER: &str =
    "seconds,system_execs,unit_execs,edges,units_carved,units_fuzzed,candidates,alarms";

impl Settings {
    /// The settings as given, checked, with absolute paths and the changed functions
    /// found; `source` is the git work tree `changed_since` is a revision of. With
    /// the program, read.
    fn checked(mut self, source: Option<&Path>) -> Result<(Settings, Binary)> {
        self.program = std::fs::canonicalize(&self.program)
            .with_context(|| format!("program {}", self.program.display()))?;
        self.seeds = std::fs::canonicalize(&self.seeds)
            .with_context(|| format!("seeds {}", self.seeds.display()))?;
        let binary = Binary::load(&self.program)?;
        self.changed = match (&self.changed_since, source) {
            (Some(rev), Some(src)) => changed_functions(&binary, src, rev)?,
            (Some(_), None) => bail!("--changed-since needs --source, the git work tree"),
            _ => Vec::new(),
        };
        for f in &self.focus {
            if !binary.functions.values().any(|m| m.display_name() == f) {
                bail!(
                    "--focus {f}: {} has no instrumented function of that name",
                    self.program.display()
                );
            }
        }
        if self.cores == 0 {
            bail!("--cores must be at least 1");
        }
        self.validate_with = std::fs::canonicalize(&self.validate_with)
            .with_context(|| format!("validation program {}", self.validate_with.display()))?;
        if let Some(c) = &self.coverage_with {
            let c = std::fs::canonicalize(c)
                .with_context(|| format!("coverage build {}", c.display()))?;
            if !crate::system::coverage::is_coverage_build(&c) {
                bail!("--coverage-with {}: no coverage build (build it with clang-19 -g -fprofile-instr-generate -fcoverage-mapping)", c.display());
            }
            self.coverage_with = Some(c);
        }
        Ok((self, binary))
    }
}

/// Run `trestle run`; returns the campaign as it ended.
pub fn run(start: Start, session: &Session) -> Result<RunOutcome> {
    let (out, campaign, binary) = match start {
        Start::Resume(dir) => {
            let (out, campaign) = resume(&dir)?;
            let binary = Binary::load(&campaign.settings.program)?;
            (out, campaign, binary)
        }
        Start::New {
            out,
            settings,
            source,
        } => {
            let (settings, binary) = settings.checked(source.as_deref())?;
            let (out, campaign) = begin(&out, settings)?;
            (out, campaign, binary)
        }
    };
    let s = campaign.settings.clone();
    // One core: everything the campaign runs takes turns on it (with --cores N the
    // unit fuzzing clients are bound to cores 0..N by the launcher).
    if s.cores == 1 {
        crate::fuzz::bind_core(session.pin, session.no_pin)?;
    }
    let mut r = Runner::new(out.clone(), campaign, binary, Live::new(session.live))?;
    if let Some(l) = &session.listen {
        r.listen(&l.addr, l.delegate, l.key.as_deref())?;
    }
    if !s.changed.is_empty() && r.c.rounds == 0 {
        log::info!(
            "trestle run: changed since {}: {}",
            s.changed_since.as_deref().unwrap_or("?"),
            s.changed.join(", ")
        );
    }
    STOP.store(false, Ordering::SeqCst);
    // SAFETY: installing a handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_stop as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_stop as *const () as libc::sighandler_t);
    }
    // Findings a kill cut short are lifted first.
    let went = r
        .sample()
        .and_then(|()| r.keep_within_disk())
        .and_then(|()| r.lift_pending())
        .and_then(|()| r.rounds());
    if let Err(e) = went {
        // A write that failed for want of space ends the campaign with one line (what
        // it saved last stands: every file is replaced whole or not at all).
        if let Some(full) = e
            .downcast_ref::<disk::DiskFull>()
            .cloned()
            .or_else(|| disk::full(&out))
        {
            let _ = r.save();
            r.close_cluster("the main node's disk is full").ok();
            return Err(full.into());
        }
        return Err(e);
    }
    let interrupted = STOP.load(Ordering::SeqCst);
    let alarms = r.finish(interrupted)?;
    Ok(RunOutcome {
        dir: out,
        campaign: r.c,
        alarms,
    })
}

/// Open the campaign in `dir` to go on with it.
fn resume(dir: &Path) -> Result<(PathBuf, Campaign)> {
    let path = dir.join(files::CAMPAIGN);
    if !path.exists() {
        bail!(
            "{} is not a campaign directory (no {})",
            dir.display(),
            files::CAMPAIGN
        );
    }
    let mut c: Campaign = files::read(&path)?;
    c.upgrade();
    if c.finished || c.elapsed >= c.settings.budget.as_secs_f64() {
        // Killed while reducing its alarms: a resume only reduces what is left.
        let unreduced = unreduced_alarms(dir)?;
        if unreduced == 0 {
            bail!(
                "the campaign in {} has used its {:.0}s budget; `trestle report {}` shows it",
                dir.display(),
                c.settings.budget.as_secs_f64(),
                dir.display()
            );
        }
        log::info!("trestle run: the campaign's budget is spent; reducing the {unreduced} alarm(s) it left unreduced");
    }
    Ok((std::fs::canonicalize(dir)?, c))
}

/// Alarms of the campaign in `dir` whose reduction is still to be done.
fn unreduced_alarms(dir: &Path) -> Result<usize> {
    let path = dir.join(files::ALARMS);
    if !path.exists() {
        return Ok(0);
    }
    let v: serde_json::Value = files::read(&path)?;
    Ok(v["alarms"].as_array().map_or(0, |a| {
        a.iter().filter(|x| x["reduction_pending"] == true).count()
    }))
}

/// Begin a campaign in `out` (which must not exist or be empty).
fn begin(out: &Path, settings: Settings) -> Result<(PathBuf, Campaign)> {
    if out.exists() {
        let mut entries =
            std::fs::read_dir(out).with_context(|| format!("cannot list {}", out.display()))?;
        if entries.next().is_some() {
            bail!(
                "{} exists and is not empty: choose another --out, or --resume it",
                out.display()
            );
        }
    }
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
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
        nodes: Vec::new(),
        main_finds: 0,
        phase_seconds: BTreeMap::new(),
        reduction_seconds: 0.0,
        schedule: schedule::Schedule::default(),
        roadblocks: Roadblocks::default(),
        hangs: Hangs::default(),
        system_build: String::new(),
        disk: disk::Disk::default(),
        lineage: QueueLineage::default(),
    };
    let out = std::fs::canonicalize(out)?;
    files::write(&out.join(files::CAMPAIGN), &c)?;
    std::fs::write(out.join(files::TIMELINE), format!("{TIMELINE_HEADER}\n"))?;
    Ok((out, c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_durations_stay_seconds_in_campaign_json() {
        let old = serde_json::json!({
            "program": "/p", "seeds": "/s", "budget": 600.0, "cores": 1, "focus": [],
            "changed": [], "changed_since": null, "validate_with": "/p",
            "system_only": false, "system_slice": 60, "unit_slice": 7.5, "timeout": 0.25,
            "seed": 1, "no_sandbox": false
        });
        let s: Settings = serde_json::from_value(old).unwrap();
        assert_eq!(s.budget, Duration::from_secs(600));
        assert_eq!(s.system_slice, Duration::from_secs(60));
        assert_eq!(s.unit_slice, Duration::from_millis(7500));
        assert_eq!(s.timeout, Duration::from_millis(250));
        let back = serde_json::to_value(&s).unwrap();
        assert_eq!(back["budget"], 600.0);
        assert_eq!(back["unit_slice"], 7.5);
        assert_eq!(back["timeout"], 0.25);
        let bad = serde_json::json!({"budget": -1.0});
        let e = serde_json::from_value::<Settings>(bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("negative"), "{e}");
    }

    fn probe(key: &str, unit: usize, worth: bool, unreached: bool) -> RoadblockProbe {
        RoadblockProbe {
            key: key.into(),
            location: format!("{key}.c:1"),
            unit: PathBuf::from(format!("/c/units/batch-0001/f/{unit:016x}.unit")),
            function: "f".into(),
            worth,
            unreached,
            verdict: String::new(),
            seconds: 0.5,
        }
    }

    #[test]
    fn probes_are_counted_forever_and_listed_for_the_newest_only() {
        let mut r = Roadblocks::default();
        for i in 0..2000 {
            r.note_probe(probe(&format!("b{}", i % 4), i, i % 10 == 0, i % 3 == 0));
        }
        assert_eq!(r.probes.len(), PROBE_LOG);
        assert_eq!(
            r.probes.last().unwrap().unit,
            probe("b3", 1999, false, false).unit
        );
        assert_eq!(r.probed.len(), 4);
        let t = &r.probed["b1"];
        assert_eq!(t.probes, 500);
        assert_eq!(t.probes, t.worth + t.unreached + t.failed);
        assert!((t.seconds - 250.0).abs() < 1e-9);
        // The first probes left the log, but what they found still decides.
        assert!(r.passed_over("b1", &probe("b1", 1, false, false).unit));
        assert!(
            !r.passed_over("b2", &probe("b1", 1, false, false).unit),
            "another roadblock"
        );
        assert!(
            !r.passed_over("b0", &probe("b0", 0, true, true).unit),
            "worth fuzzing"
        );
        assert_eq!(r.failures_at("b1"), t.failed);
        assert_eq!(r.failures_at("nowhere"), 0);
        let json = serde_json::to_string(&r).unwrap();
        assert!(json.len() < 300_000, "{} bytes", json.len());
    }

    #[test]
    fn a_campaign_written_before_the_tallies_counts_its_probes_on_reading() {
        let mut old = Roadblocks::default();
        for i in 0..40 {
            old.probes.push(probe("b", i, i == 7, i % 2 == 0));
        }
        old.upgrade();
        assert_eq!(old.probes.len(), 40);
        assert_eq!(old.probed["b"].probes, 40);
        assert_eq!(old.probed["b"].worth, 1);
        assert_eq!(old.failures_at("b"), 19);
        assert!(old.passed_over("b", &probe("b", 3, false, false).unit));
        // Reading it again changes nothing.
        let before = old.probed.clone();
        old.upgrade();
        assert_eq!(old.probed, before);
    }
}

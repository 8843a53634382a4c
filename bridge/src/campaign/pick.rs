//! Which unit the campaign fuzzes next.
//!
//! Functions are ranked by the code still uncovered in them (lines not run, branch
//! directions not taken) and in what they call, counted less with each call further
//! down ([`DEPTH_DECAY`]), and less each time they were fuzzed; changed functions come
//! first. The program's own code (the directory tree of the file that defines `main`)
//! counts in full, library code bundled beside it ([`LIBRARY_WEIGHT`]) much less. A
//! unit whose parameters include a kind no fuzzed unit of its function had (a width
//! argument where before only the text was a parameter) counts as if its function was
//! not fuzzed yet. Every [`EXPLORE_EVERY`]th pick goes to a function not fuzzed yet,
//! larger first, whatever its coverage: a buffer overflow in code the seeds run is no
//! less a bug. Among the units of a function, those whose parameters cover more of the
//! input and more kinds (streams and numbers above all) come first, and a unit whose
//! parameter values all occur in a unit of the function already fuzzed is skipped.

use super::changed::{matching_source, FunctionLines};
use super::program::Program;
use super::runner::Runner;
use super::{FuzzedUnit, Roadblocks};
use crate::carve::units::{UnitIndex, UnitRow};
use crate::roadblocks::Roadblock;
use anyhow::Result;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;
use trestle_abi::fuzz::{original_value, ParamValue};
use trestle_exec::binary::Binary;

/// A unit chosen to fuzz next.
pub(super) struct Pick {
    pub(super) path: PathBuf,
    pub(super) function: String,
    pub(super) reason: String,
    pub(super) value_hashes: Vec<u64>,
    pub(super) param_kinds: Vec<String>,
    /// The roadblock it was picked for.
    pub(super) roadblock: Option<Roadblock>,
}

/// Units probed at most per pick: a probe starts the harness and runs a few inputs,
/// 0.01-0.1 s on programs like sed and dc. Six were too few: on dc the one unit of
/// `dc_register_pop` probed at its roadblock did not reach the branch and the other
/// five probes went to its callers, so the roadblock with a planted bug behind it was
/// never fuzzed.
const PROBES_PER_PICK: usize = 32;

/// Failed probes (of units that reach the branch) after which a roadblock is left to
/// the system fuzzer.
const PROBE_FAILURES: usize = 12;

/// The time a pick's probes may take together, whatever their number.
const PROBE_TIME: Duration = Duration::from_secs(3);

/// Units of a roadblock's function probed at most, best first (those recorded for it
/// first); of its callers, [`CALLER_CANDIDATES`].
const CANDIDATES_PER_LEVEL: usize = 8;
const CALLER_CANDIDATES: usize = 3;

/// Time limit of one probe run (the campaign's own per-execution limit if lower).
const PROBE_RUN_LIMIT: Duration = Duration::from_secs(1);

/// One pick in this many goes to a function never fuzzed, whatever its coverage.
const EXPLORE_EVERY: usize = 3;

/// What uncovered code one call further down counts for, against the function's own:
/// each call between a unit and that code adds conditions its parameters must meet on
/// the way. (Counted flat over every function reachable, `main` and the dispatchers
/// under it outranked every function doing the work: a sed campaign fuzzed `main`,
/// `process_files` and `execute_program` and never `do_list`, whose `l N` width meets a
/// comparison no seed made false.)
const DEPTH_DECAY: f64 = 0.3;

/// What uncovered code outside the program's own directory tree counts for, against
/// its own: gnulib, a bundled regex engine and the like are large, half covered and
/// well tested elsewhere, and their crashes rarely reach the program's input. (Counted
/// alike, a campaign on paste fuzzed gnulib's `quotearg_buffer_restyled` nine times in
/// ten minutes and `paste_serial` once; one on sed, regex internals instead of the
/// functions that run its commands.) Exploration picks still reach it.
const LIBRARY_WEIGHT: f64 = 0.1;

/// How the reason of a changed function's pick starts.
const CHANGED_REASON: &str = "changed since the given revision; ";

/// A branch direction, for the reason of a pick.
fn direction_name(b: &crate::roadblocks::Branch, k: usize) -> String {
    match b.directions[k].case {
        Some(c) => format!("case {c}"),
        None if b.directions.len() == 2 => (if k == 0 {
            "the true side"
        } else {
            "the false side"
        })
        .to_owned(),
        None if k == 0 => "the default".to_owned(),
        None => format!("direction {k}"),
    }
}

/// Added to the score of a changed function not fuzzed yet: above any other.
const CHANGED_FIRST: f64 = 1e12;

/// How much a unit's parameters promise, between its function's units: more input
/// covered and more kinds of parameter, with streams and numbers above the rest.
fn unit_weight(row: &UnitRow) -> f64 {
    let kinds = row.param_kinds.len().max(usize::from(row.params > 0)) as f64;
    let stream = row.param_kinds.iter().any(|k| k == "stream") as u8 as f64;
    let number = row.param_kinds.iter().any(|k| k == "number") as u8 as f64;
    (1.0 + 0.1 * row.params.min(5) as f64)
        * (1.0 + 0.2 * kinds + 0.5 * stream + 0.3 * number)
        * (1.0 + (1.0 + row.input_bytes as f64).log2() / 16.0)
}

/// A unit's parameters, for the reason of a pick.
fn describe_params(row: &UnitRow) -> String {
    let kinds = if row.param_kinds.is_empty() {
        row.params.to_string()
    } else {
        row.param_kinds.join(", ")
    };
    format!(
        "parameters: {kinds} covering {} input byte(s)",
        row.input_bytes
    )
}

/// What the campaign fuzzed so far.
struct History<'a> {
    units: BTreeSet<&'a Path>,
    times: BTreeMap<&'a str, usize>,
    values: BTreeMap<&'a str, Vec<&'a [u64]>>,
    kinds: BTreeMap<&'a str, BTreeSet<&'a str>>,
}

impl<'a> History<'a> {
    fn of(fuzzed: &'a [FuzzedUnit]) -> Self {
        let mut h = History {
            units: BTreeSet::new(),
            times: BTreeMap::new(),
            values: BTreeMap::new(),
            kinds: BTreeMap::new(),
        };
        for f in fuzzed {
            h.units.insert(&f.unit);
            *h.times.entry(&f.function).or_default() += 1;
            h.values
                .entry(&f.function)
                .or_default()
                .push(&f.value_hashes);
            h.kinds
                .entry(&f.function)
                .or_default()
                .extend(f.param_kinds.iter().map(String::as_str));
        }
        h
    }

    /// Whether `row` has a kind of parameter no fuzzed unit of its function had.
    fn new_kind(&self, row: &UnitRow) -> bool {
        let seen = self.kinds.get(row.function.as_str());
        row.param_kinds
            .iter()
            .any(|k| seen.is_none_or(|s| !s.contains(k.as_str())))
    }

    /// How often `function` was fuzzed.
    fn times(&self, function: &str) -> f64 {
        self.times.get(function).copied().unwrap_or(0) as f64
    }

    /// Whether every parameter value of `row` occurs in a unit of its function already fuzzed.
    fn near_copy(&self, row: &UnitRow) -> bool {
        self.values.get(row.function.as_str()).is_some_and(|seen| {
            seen.iter().any(|v| {
                !v.is_empty() && row.value_hashes.iter().all(|h| v.binary_search(h).is_ok())
            })
        })
    }
}

/// How much each function's code counts: 1 in the directory tree of the file that
/// defines `main`, [`LIBRARY_WEIGHT`] elsewhere; 1 for all when `main` or its file is
/// unknown (a library's tests, a build without debug info).
pub(super) fn code_weights(binary: &Binary) -> HashMap<u64, f64> {
    let home = binary
        .functions
        .values()
        .find(|f| f.name == "main")
        .and_then(|f| f.file.as_deref())
        .and_then(|file| lexical(Path::new(file)).parent().map(Path::to_path_buf));
    binary
        .functions
        .values()
        .map(|f| {
            let own = match (&home, &f.file) {
                (Some(home), Some(file)) => lexical(Path::new(file)).starts_with(home),
                _ => true,
            };
            (f.id, if own { 1.0 } else { LIBRARY_WEIGHT })
        })
        .collect()
}

/// `path` with `.` and `dir/..` taken out, without asking the file system (the
/// build's tree may be gone): debug info names files as `build-dir/../lib/x.c`.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir
                if matches!(
                    out.components().next_back(),
                    Some(std::path::Component::Normal(_))
                ) =>
            {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

/// Code still uncovered in a function and (less) in what it calls.
struct Reach<'a> {
    binary: &'a Binary,
    /// Each function's own score: uncovered lines and branch directions in its span,
    /// or without coverage, its compared constants. Computed once per pick: a campaign
    /// carves thousands of units of a few hundred functions.
    own: HashMap<u64, f64>,
    memo: HashMap<u64, f64>,
    /// What `own` counts, for the reason of a pick.
    measure: &'static str,
}

impl<'a> Reach<'a> {
    fn new(
        binary: &'a Binary,
        lines: &FunctionLines,
        weights: &HashMap<u64, f64>,
        uncovered: Option<&BTreeMap<String, Vec<u32>>>,
    ) -> Self {
        let (mut own, measure) = match uncovered {
            Some(unc) => (
                Self::uncovered_in_span(lines, unc),
                "uncovered lines and branch directions",
            ),
            None => (
                binary
                    .functions
                    .values()
                    .map(|f| (f.id, 1.0 + f.cmp_constants.len() as f64))
                    .collect(),
                "compared constants",
            ),
        };
        for (id, score) in own.iter_mut() {
            *score *= weights.get(id).copied().unwrap_or(1.0);
        }
        Reach {
            binary,
            own,
            memo: HashMap::new(),
            measure,
        }
    }

    fn uncovered_in_span(
        lines: &FunctionLines,
        unc: &BTreeMap<String, Vec<u32>>,
    ) -> HashMap<u64, f64> {
        let mut by_debug_file: HashMap<&str, Option<&Vec<u32>>> = HashMap::new();
        lines
            .iter()
            .map(|(id, (file, start, end))| {
                let lines = *by_debug_file.entry(file.as_str()).or_insert_with(|| {
                    matching_source(unc.iter().map(|(f, ls)| (f.as_str(), ls)), file)
                });
                let n = lines.map_or(0, |ls| {
                    ls.iter().filter(|l| (*start..*end).contains(*l)).count()
                });
                (*id, n as f64)
            })
            .collect()
    }

    fn of(&mut self, id: u64) -> f64 {
        let (binary, own) = (self.binary, &self.own);
        *self.memo.entry(id).or_insert_with(|| {
            binary
                .callees_by_depth(id)
                .iter()
                .map(|(f, depth)| {
                    own.get(&f.id).copied().unwrap_or(0.0) * DEPTH_DECAY.powi(*depth as i32)
                })
                .sum::<f64>()
                + 0.1
        })
    }
}

/// How much a roadblock's comparison makes it worth a unit: its operands seen to
/// change across the system fuzzer's tracing runs (`varies`: the input decides them,
/// and a unit whose parameters carry the input may too) four times; seen, but always
/// the same (a setting: sed's roadblocks in a 10-minute campaign were the locale's
/// `mb_cur_max > 1` and a flag no entry set, and all 74 units probed there were passed
/// over) a quarter; a comparison not logged yet half again (input-to-state may solve
/// it); a branch without one (a plain truth value) as it is.
pub(super) fn operand_weight(has_cmp: bool, varies: Option<bool>) -> f64 {
    match (has_cmp, varies) {
        (_, Some(true)) => 4.0,
        (_, Some(false)) => 0.25,
        (true, None) => 1.5,
        (false, None) => 1.0,
    }
}

/// What the system-level probe ([`Runner::system_probe`]) saw.
enum SystemInfluence {
    /// Changing the mapped input changed the operands the comparison saw.
    Moves,
    /// No change of the mapped input changed them.
    Unmoved,
    /// No telling, and why.
    Unknown(String),
}

/// Parameters of a unit tried at most by the system-level probe.
const SYSTEM_PROBE_PARAMS: usize = 8;

/// The best candidate so far, by score.
#[derive(Default)]
struct Best(Option<(f64, Pick)>);

impl Best {
    fn offer(&mut self, score: f64, pick: impl FnOnce() -> Pick) {
        if self.0.as_ref().is_none_or(|b| score > b.0) {
            self.0 = Some((score, pick()));
        }
    }
}

impl Runner {
    /// What a roadblock promises before any try: its score, weighted by what the
    /// system fuzzer's tracing runs saw of the comparison deciding it
    /// ([`operand_weight`]).
    pub(super) fn promise(&self, rb: &Roadblock) -> f64 {
        let cmp = self.program.branches.branches[rb.branch].cmp;
        rb.score * operand_weight(cmp.is_some(), cmp.and_then(|id| self.sys.operands_vary(id)))
    }

    /// The next unit to fuzz: a changed function's first; then, but for every
    /// [`EXPLORE_EVERY`]th pick, one at the best roadblock (of `roadblocks`, best first)
    /// that has a unit of its function or of a caller whose parameters the probe shows
    /// deciding the branch; else by the code in reach (see the module's documentation).
    pub(super) fn pick(&mut self, roadblocks: &[Roadblock]) -> Option<Pick> {
        let by_reach = self.pick_by_reach();
        let explore = self.c.fuzzed.len() % EXPLORE_EVERY == EXPLORE_EVERY - 1;
        let changed_first = by_reach
            .as_ref()
            .is_some_and(|p| p.reason.starts_with(CHANGED_REASON));
        if changed_first || explore {
            return by_reach;
        }
        self.pick_roadblock(roadblocks).or(by_reach)
    }

    /// The first unit at a roadblock, in order, whose parameters may decide it: each
    /// candidate is probed first (at most [`PROBES_PER_PICK`] a pick), and one that
    /// does not reach the branch, or reaches it with the same operands whatever its
    /// parameters, is passed over, for good at that roadblock.
    fn pick_roadblock(&mut self, roadblocks: &[Roadblock]) -> Option<Pick> {
        let promised: Vec<(f64, &Roadblock)> =
            roadblocks.iter().map(|rb| (self.promise(rb), rb)).collect();
        let candidates = roadblock_candidates(
            &self.pick_state(None),
            &self.program,
            &self.c.roadblocks,
            &promised,
        );
        let started = std::time::Instant::now();
        for (probed, mut pick) in candidates.into_iter().enumerate() {
            if probed == PROBES_PER_PICK || started.elapsed() > PROBE_TIME {
                break;
            }
            let rb = pick.roadblock.clone().expect("a roadblock's candidate");
            self.status(&format!(
                "probing a unit of {} at a roadblock",
                pick.function
            ));
            let t = std::time::Instant::now();
            let influence = self.probe(&pick, &rb);
            let (mut worth, mut verdict) = match &influence {
                Ok(i) => (i.worth_fuzzing(), i.describe()),
                // A unit the harness cannot set up is no unit to fuzz either.
                Err(e) => (false, format!("the probe failed: {e:#}")),
            };
            if let (true, Ok(i)) = (worth, &influence) {
                match self.system_probe(&pick, &rb, i) {
                    Ok(SystemInfluence::Moves) => {
                        verdict.push_str("; at system level, its mapped input moves the comparison")
                    }
                    Ok(SystemInfluence::Unmoved) => {
                        worth = false;
                        verdict.push_str(", but at system level the input it was mapped from does not change what the branch compares");
                    }
                    Ok(SystemInfluence::Unknown(why)) => {
                        verdict.push_str(&format!("; at system level: {why}"))
                    }
                    // The unit's own probe said yes: fuzz it.
                    Err(e) => verdict.push_str(&format!("; the system-level probe failed: {e:#}")),
                }
            }
            let unreached = matches!(influence, Ok(trestle_unit_fuzz::Influence::Unreached));
            let b = &self.program.branches.branches[rb.branch];
            self.c.roadblocks.note_probe(super::RoadblockProbe {
                key: rb.key(&self.program.branches),
                location: format!("{}:{}", b.file.as_deref().unwrap_or("?"), b.line),
                unit: pick.path.clone(),
                function: pick.function.clone(),
                worth,
                unreached,
                verdict: verdict.clone(),
                seconds: t.elapsed().as_secs_f64(),
            });
            if worth {
                pick.reason = format!("{}; probed: {verdict}", pick.reason);
                return Some(pick);
            }
        }
        None
    }

    /// Whether the system input that `pick`'s unit parameters were mapped from moves
    /// the comparison deciding `rb` at system level: its system test runs with CmpLog
    /// on, then again with each parameter the unit probe found deciding (`influence`)
    /// changed as that probe changes it, written back where the mapping found it. A
    /// unit whose parameters decide the branch only in the harness (dc's value type,
    /// an enum 1 mapped to a "1" of the script by chance; every flip of it was a
    /// defensive branch no input takes) is not worth a slice: nothing it finds lifts.
    fn system_probe(
        &mut self,
        pick: &Pick,
        rb: &Roadblock,
        influence: &trestle_unit_fuzz::Influence,
    ) -> Result<SystemInfluence> {
        let Some(cmp) = self.program.branches.branches[rb.branch].cmp else {
            return Ok(SystemInfluence::Unknown(
                "the branch logs no operands".into(),
            ));
        };
        let unit = crate::carve::units::read_unit(&pick.path)?;
        let Some(base) = self.sys.operands_at(&unit.system_test, cmp)? else {
            return Ok(SystemInfluence::Unknown(
                "no CmpLog, or its system test runs past the run limit".into(),
            ));
        };
        if base.hits == 0 {
            return Ok(SystemInfluence::Unknown(
                "its system test does not run the comparison".into(),
            ));
        }
        if self
            .sys
            .operands_at(&unit.system_test, cmp)?
            .is_none_or(|again| base.differs(&again))
        {
            return Ok(SystemInfluence::Unknown(
                "its system test compares other operands each run".into(),
            ));
        }
        let original: Vec<ParamValue> = unit.params.iter().map(original_value).collect();
        let deciding: Vec<usize> = match influence {
            trestle_unit_fuzz::Influence::Decides(p) => p.clone(),
            _ => (0..original.len()).collect(),
        };
        let mut tried = 0;
        for k in deciding.into_iter().take(SYSTEM_PROBE_PARAMS) {
            for v in trestle_unit_fuzz::probe::variants(&original[k]) {
                let mut values = original.clone();
                values[k] = v;
                let Some((test, _)) = crate::lift::lift_variants(&unit, &values)
                    .into_iter()
                    .next()
                else {
                    continue;
                };
                // A test the system fuzzer cannot hold (too many or too long
                // arguments), or one that runs past the limit, is no test of the
                // mapping either.
                if !trestle_sysfuzz::SysInput::fits(&test) {
                    continue;
                }
                let Some(seen) = self.sys.operands_at(&test, cmp)? else {
                    continue;
                };
                tried += 1;
                if base.differs(&seen) {
                    return Ok(SystemInfluence::Moves);
                }
            }
        }
        Ok(if tried == 0 {
            SystemInfluence::Unknown("no changed value could be written back".into())
        } else if base.saturated() {
            SystemInfluence::Unknown("the comparison runs more often than CmpLog logs".into())
        } else {
            SystemInfluence::Unmoved
        })
    }

    /// Probe the unit of `pick` at `rb`'s branch.
    fn probe(&self, pick: &Pick, rb: &Roadblock) -> Result<trestle_unit_fuzz::Influence> {
        let unit = crate::carve::units::read_unit(&pick.path)?;
        let b = &self.program.branches.branches[rb.branch];
        let edges: Vec<u32> = b
            .directions
            .iter()
            .flat_map(|d| d.edges.iter().copied())
            .collect();
        let dir = self.out.join("probe");
        trestle_exec::files::remove_dir_if_present(&dir)?;
        let timeout = self.c.settings.timeout.min(PROBE_RUN_LIMIT);
        let result = trestle_unit_fuzz::probe(
            &self.c.settings.program,
            &unit,
            &dir,
            b.cmp,
            &edges,
            timeout,
        );
        trestle_exec::files::remove_dir_if_present(&dir)?;
        Ok(result?)
    }

    /// The next unit by the code in its reach ([`pick_by_reach`]).
    fn pick_by_reach(&self) -> Option<Pick> {
        let uncovered = self.lifter.as_ref().and_then(|l| l.uncovered());
        pick_by_reach(&self.pick_state(uncovered.as_ref()))
    }

    /// The campaign's state as picking reads it.
    fn pick_state<'a>(
        &'a self,
        uncovered: Option<&'a BTreeMap<String, Vec<u32>>>,
    ) -> PickState<'a> {
        PickState {
            fuzzed: &self.c.fuzzed,
            changed: &self.c.settings.changed,
            focus: &self.c.settings.focus,
            unit_dirs: &self.c.unit_dirs,
            unit_indexes: &self.unit_indexes,
            uncovered,
            binary: &self.program.binary,
            lines: &self.program.lines,
            weights: &self.program.weights,
        }
    }
}

/// What picking by reach looks at: the campaign's state, read only.
#[derive(Clone, Copy)]
pub(super) struct PickState<'a> {
    /// The units fuzzed so far.
    pub fuzzed: &'a [FuzzedUnit],
    /// Functions changed (`--changed-since`): fuzzed first.
    pub changed: &'a [String],
    /// Functions to keep to (`--focus`); empty for all.
    pub focus: &'a [String],
    /// The campaign's unit directories, one per carving batch...
    pub unit_dirs: &'a [PathBuf],
    /// ...and their indexes, in the same order.
    pub unit_indexes: &'a [UnitIndex],
    /// What is not covered yet, by file (`None` without a coverage build).
    pub uncovered: Option<&'a BTreeMap<String, Vec<u32>>>,
    /// The program.
    pub binary: &'a Binary,
    /// The lines each function spans.
    pub lines: &'a FunctionLines,
    /// How much each function's code counts (library code less).
    pub weights: &'a HashMap<u64, f64>,
}

/// The next unit by the code in its reach (see the module's documentation): a pure
/// function of the campaign's state.
pub(super) fn pick_by_reach(st: &PickState) -> Option<Pick> {
    let history = History::of(st.fuzzed);
    let mut reach_of = Reach::new(st.binary, st.lines, st.weights, st.uncovered);
    let measure = reach_of.measure;
    // Every third pick explores: a function never fuzzed, covered or not (memory
    // errors hide in code the system tests already run), larger ones first.
    let explore = st.fuzzed.len() % EXPLORE_EVERY == EXPLORE_EVERY - 1;
    let spans: HashMap<u64, f64> = if explore {
        st.lines
            .iter()
            .map(|(id, (_, start, end))| {
                let weight = st.weights.get(id).copied().unwrap_or(1.0);
                (*id, end.saturating_sub(*start).min(200) as f64 * weight)
            })
            .collect()
    } else {
        HashMap::new()
    };
    let (mut best, mut best_new) = (Best::default(), Best::default());
    for (path, row) in candidates(st, &history) {
        let pick = |reason: String| Pick {
            path: path.clone(),
            function: row.function.clone(),
            reason,
            value_hashes: row.value_hashes.clone(),
            param_kinds: row.param_kinds.clone(),
            roadblock: None,
        };
        let id = u64::from_str_radix(&row.fn_id, 16).unwrap_or(0);
        let reach = reach_of.of(id);
        let fuzzed = history.times(&row.function);
        // Fuzzed before, but never along this kind of parameter: as good as new.
        let new_kind = fuzzed > 0.0 && history.new_kind(row);
        let n = if new_kind { 0.0 } else { fuzzed };
        let changed = st.changed.contains(&row.function) && n == 0.0;
        let score =
            reach / (1.0 + 2.0 * n) * unit_weight(row) + if changed { CHANGED_FIRST } else { 0.0 };
        if explore && fuzzed == 0.0 {
            let span = spans.get(&id).copied().unwrap_or(0.0);
            best_new.offer(unit_weight(row) * (1.0 + span / 20.0), || {
                    pick(format!(
                        "exploring (one pick in {EXPLORE_EVERY}): a function not fuzzed before, {span:.0} source line(s), {reach:.1} {measure} in reach; {}",
                        describe_params(row)
                    ))
                });
        }
        best.offer(score, || {
            pick(format!(
                "{}{reach:.1} {measure} in reach, fuzzed {fuzzed} time(s) before{}; {}",
                if changed { CHANGED_REASON } else { "" },
                if new_kind {
                    " (never with a parameter of this kind)"
                } else {
                    ""
                },
                describe_params(row)
            ))
        });
    }
    // A changed function not fuzzed yet still comes first.
    match (best.0, best_new.0) {
        (Some(b), _) if b.0 >= CHANGED_FIRST => Some(b.1),
        (b, n) => n.or(b).map(|(_, p)| p),
    }
}

/// Units to probe at the roadblocks, best roadblock first: for each, the best few
/// ([`CANDIDATES_PER_LEVEL`]) of the function holding it, then of its callers,
/// but for units already found not to decide it or fuzzed at it before.
pub(super) fn roadblock_candidates(
    st: &PickState,
    program: &Program,
    known: &Roadblocks,
    roadblocks: &[(f64, &Roadblock)],
) -> Vec<Pick> {
    let history = History::of(st.fuzzed);
    // Each attempt halves a roadblock's promise and more than [`super::ROADBLOCK_TRIES`]
    // leave it to the system fuzzer; one decided by a comparison whose operands
    // CmpLog sees counts more (input-to-state can solve it).
    let mut order: Vec<(f64, &Roadblock)> = roadblocks
        .iter()
        .filter_map(|&(promise, rb)| {
            let key = rb.key(&program.branches);
            if known.left_to_system(&key) {
                return None;
            }
            let tries = known.tries_at(&key);
            // One whose units keep failing the probe is the system fuzzer's: on sed,
            // 24 probes of a pick after pick went to one branch in `str_append`.
            // A unit that does not reach the branch says nothing of the others
            // (most are carved for other branches): it is passed over alone.
            if known.failures_at(&key) >= PROBE_FAILURES {
                return None;
            }
            Some((promise / (1.0 + tries as f64), rb))
        })
        .collect();
    order.sort_by(|a, b| b.0.total_cmp(&a.0));
    // The candidates by function, once: a campaign has thousands of units and
    // hundreds of roadblocks.
    let mut by_function: HashMap<u64, Vec<(PathBuf, &UnitRow)>> = HashMap::new();
    // A unit fuzzed before is a candidate still, at any other roadblock: a slice
    // at one ends the moment its branch flips (tally's `tally_word` unit flipped
    // digest's gate in 4 ms, and was then never tried at its own gate, the one
    // with the bug behind it).
    let everything = History::of(&[]);
    // `main` among them: its unit is the whole run, its arguments and stdin the
    // parameters, and in process it runs several times as fast as the system
    // fuzzer's forkserver (cut: 6,900 against 1,200 executions a second).
    for (path, row) in candidates(st, &everything) {
        by_function
            .entry(u64::from_str_radix(&row.fn_id, 16).unwrap_or(0))
            .or_default()
            .push((path, row));
    }
    let mut out = Vec::new();
    for (_, rb) in order {
        if out.len() >= PROBES_PER_PICK {
            break;
        }
        let key = rb.key(&program.branches);
        let tried_here: BTreeSet<&Path> = known
            .attempts
            .iter()
            .filter(|a| a.key == key)
            .filter_map(|a| st.fuzzed.get(a.fuzzed))
            .map(|f| f.unit.as_path())
            .collect();
        let own_entries: BTreeSet<&str> = known
            .recorded
            .iter()
            .filter_map(|m| m.rsplit_once('@'))
            .filter(|(k, _)| *k == key)
            .map(|(_, entry)| entry.trim_end_matches(".json"))
            .collect();
        let id = program.branch_functions[rb.branch];
        // The function whose optimised code holds the branch first: where the
        // source function was inlined (tally's `digest` into `tally_word` at -O2),
        // only calls of the holder run these edges; the out-of-line copy has its own.
        let holder = program.branches.branches[rb.branch].function;
        let own: Vec<u64> = if holder != id && program.binary.functions.contains_key(&holder) {
            vec![holder, id]
        } else {
            vec![id]
        };
        let mut callers: Vec<u64> = own
            .iter()
            .flat_map(|f| program.callers.get(f).into_iter().flatten().copied())
            .filter(|c| !own.contains(c))
            .collect();
        callers.dedup();
        // Two calls up too: the parameter that decides the branch may live there
        // (dc's `dc_register_pop` and `dc_func` units hold no part of the program
        // text; `dc_evalfile`'s stream, two calls up, is it).
        let mut grand: Vec<u64> = callers
            .iter()
            .flat_map(|c| program.callers.get(c).into_iter().flatten().copied())
            .filter(|g| !own.contains(g) && !callers.contains(g))
            .collect();
        grand.sort_unstable();
        grand.dedup();
        for (level, ids) in [(0, own), (1, callers), (2, grand)] {
            let b = &program.branches.branches[rb.branch];
            let d = &b.directions[rb.missing];
            let mut level_picks: Vec<(f64, &PathBuf, &UnitRow)> = ids
                .iter()
                .filter_map(|f| by_function.get(f))
                .flatten()
                .filter(|(path, _)| {
                    !known.passed_over(&key, path) && !tried_here.contains(path.as_path())
                })
                // A unit carved from the queue entry recorded for this very
                // roadblock reached its branch in that run: those first.
                .map(|(path, row)| {
                    let recorded_here = std::iter::once(&row.test)
                        .chain(&row.also_from)
                        .any(|t| own_entries.contains(t.as_str()));
                    let ours = if recorded_here { 1e6 } else { 0.0 };
                    (
                        ours + unit_weight(row) / (1.0 + history.times(&row.function)),
                        path,
                        *row,
                    )
                })
                .collect();
            level_picks.sort_by(|a, b| b.0.total_cmp(&a.0));
            for (_, path, row) in level_picks.into_iter().take(if level == 0 {
                CANDIDATES_PER_LEVEL
            } else {
                CALLER_CANDIDATES
            }) {
                out.push(Pick {
                    path: path.clone(),
                    function: row.function.clone(),
                    reason: format!(
                        "roadblock at {}:{} in {}: {} never taken, {} block(s) behind it{}; {}",
                        b.file.as_deref().unwrap_or("?"),
                        b.line,
                        program.binary.function_name(id),
                        direction_name(b, rb.missing),
                        d.behind,
                        match level {
                            0 => "",
                            1 => " (a unit of a caller)",
                            _ => " (a unit of a caller's caller)",
                        },
                        describe_params(row)
                    ),
                    value_hashes: row.value_hashes.clone(),
                    param_kinds: row.param_kinds.clone(),
                    roadblock: Some(rb.clone()),
                });
            }
        }
    }
    out
}

/// Units with parameters not fuzzed yet, within `--focus`, that are not near copies
/// of one fuzzed before.
fn candidates<'a>(
    st: &'a PickState<'a>,
    history: &'a History<'a>,
) -> impl Iterator<Item = (PathBuf, &'a UnitRow)> + 'a {
    let focus = st.focus;
    st.unit_dirs
        .iter()
        .zip(st.unit_indexes)
        .flat_map(|(dir, index)| {
            index
                .units
                .iter()
                .filter(|r| r.params > 0)
                .map(move |row| (dir.join(&row.file), row))
        })
        .filter(|(path, row)| {
            !history.units.contains(path.as_path())
                && (focus.is_empty() || focus.contains(&row.function))
                && !history.near_copy(row)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use trestle_abi::meta::{FnMeta, ValueKind};

    fn function(id: u64, name: &str, file: Option<&str>) -> FnMeta {
        FnMeta {
            id,
            name: name.into(),
            demangled: None,
            file: file.map(Into::into),
            line: 1,
            params: vec![],
            ret: ValueKind::Void,
            variadic: false,
            replayable: true,
            local: false,
            callees: vec![],
            globals: vec![],
            indirect_calls: false,
            address_taken: false,
            cmp_constants: vec![],
        }
    }

    fn binary(functions: Vec<FnMeta>) -> Binary {
        Binary {
            path: PathBuf::from("prog"),
            id: 0,
            build: 0,
            functions: functions.into_iter().map(|f| (f.id, f)).collect(),
            strings: HashMap::new(),
            global_names: HashMap::new(),
        }
    }

    #[test]
    fn library_code_beside_the_program_counts_less_than_its_own() {
        let b = binary(vec![
            function(1, "main", Some("/b/coreutils/src/../src/cut.c")),
            function(2, "cut_fields", Some("/b/coreutils/src/cut.c")),
            function(3, "to_uchar", Some("/b/coreutils/./src/system.h")),
            function(
                4,
                "quotearg_buffer_restyled",
                Some("/b/coreutils/src/../lib/quotearg.c"),
            ),
            function(5, "blake2b", Some("/b/coreutils/src/blake2/blake2b-ref.c")),
            function(6, "no_debug_info", None),
        ]);
        let w = code_weights(&b);
        for id in [1, 2, 3, 5, 6] {
            assert_eq!(w[&id], 1.0, "function {id} is the program's own");
        }
        assert_eq!(w[&4], LIBRARY_WEIGHT, "lib/ beside src/ is library code");
    }

    #[test]
    fn without_a_main_every_function_counts_alike() {
        let b = binary(vec![
            function(1, "parse", Some("/p/src/parse.c")),
            function(2, "helper", Some("/p/lib/helper.c")),
        ]);
        assert!(code_weights(&b).values().all(|&w| w == 1.0));
    }

    fn row(function: &str, kinds: &[&str]) -> UnitRow {
        UnitRow {
            file: format!("{function}/1.unit"),
            function: function.into(),
            fn_id: "1".into(),
            test: "t".into(),
            call_index: 0,
            pid: None,
            has_oracle: true,
            params: kinds.len(),
            param_kinds: kinds.iter().map(|k| k.to_string()).collect(),
            input_bytes: 4,
            value_hashes: vec![1],
            also_from: Vec::new(),
        }
    }

    /// A unit fuzzed once, of `function`, with these value hashes and kinds.
    fn fuzzed_unit(
        unit: &str,
        function: &str,
        value_hashes: Vec<u64>,
        kinds: &[&str],
    ) -> FuzzedUnit {
        FuzzedUnit {
            unit: PathBuf::from(unit),
            function: function.into(),
            dir: PathBuf::from(format!("fuzz/{function}-0")),
            executions: 1,
            crashes: 0,
            lifted: true,
            new_alarms: 0,
            effective: 0,
            error: None,
            reason: String::new(),
            value_hashes,
            param_kinds: kinds.iter().map(|k| k.to_string()).collect(),
            node: None,
            started_from: 0,
            corpus_evicted: false,
        }
    }

    #[test]
    fn a_parameter_kind_new_to_a_fuzzed_function_is_news() {
        // do_list was fuzzed with the pattern space as its parameters; a unit carved
        // from `l 5` has the width argument too.
        let fuzzed = vec![fuzzed_unit(
            "u/do_list/0.unit",
            "do_list",
            vec![7],
            &["heap string", "token string"],
        )];
        let h = History::of(&fuzzed);
        assert!(h.new_kind(&row("do_list", &["argument int", "heap string"])));
        assert!(!h.new_kind(&row("do_list", &["heap string"])));
        assert!(
            h.new_kind(&row("do_subst", &["heap string"])),
            "a function never fuzzed has nothing seen"
        );
    }

    /// One carved batch of units, and what picking reads besides: no coverage, no
    /// line spans, every function's code counting alike.
    struct Batch {
        dirs: Vec<PathBuf>,
        indexes: Vec<UnitIndex>,
        lines: FunctionLines,
        weights: HashMap<u64, f64>,
    }

    impl Batch {
        fn of(units: Vec<UnitRow>) -> Batch {
            Batch {
                dirs: vec![PathBuf::from("units/batch-0000")],
                indexes: vec![UnitIndex {
                    units,
                    ..UnitIndex::default()
                }],
                lines: FunctionLines::new(),
                weights: HashMap::new(),
            }
        }

        /// A campaign that carved this batch of `binary` and fuzzed nothing yet.
        fn state<'a>(&'a self, binary: &'a Binary) -> PickState<'a> {
            PickState {
                fuzzed: &[],
                changed: &[],
                focus: &[],
                unit_dirs: &self.dirs,
                unit_indexes: &self.indexes,
                uncovered: None,
                binary,
                lines: &self.lines,
                weights: &self.weights,
            }
        }
    }

    #[test]
    fn picking_by_reach_is_a_function_of_the_campaigns_state() {
        // Without coverage, a function's reach is its compared constants (and its
        // callees'): parse compares against five, log against none.
        let mut parse = function(1, "parse", Some("/p/src/parse.c"));
        parse.cmp_constants = vec![1, 2, 3, 4, 5];
        let log = function(2, "log", Some("/p/src/log.c"));
        let b = binary(vec![parse, log]);
        let unit = |function: &str, id: &str, hash: u64| UnitRow {
            fn_id: id.into(),
            value_hashes: vec![hash],
            ..row(function, &["heap string"])
        };
        let batch = Batch::of(vec![unit("parse", "1", 10), unit("log", "2", 20)]);
        let base = batch.state(&b);
        let first = pick_by_reach(&base).expect("a unit to pick");
        assert_eq!(first.function, "parse", "{}", first.reason);
        assert_eq!(first.path, PathBuf::from("units/batch-0000/parse/1.unit"));
        // The same state, the same pick: nothing but the state decides.
        assert_eq!(pick_by_reach(&base).unwrap().path, first.path);
        // A changed function comes first, whatever its reach.
        let changed = ["log".to_string()];
        let pick = pick_by_reach(&PickState {
            changed: &changed,
            ..base
        })
        .unwrap();
        assert_eq!(pick.function, "log");
        assert!(pick.reason.starts_with(CHANGED_REASON), "{}", pick.reason);
        // A unit fuzzed already is not picked again.
        let fuzzed = [fuzzed_unit(
            first.path.to_str().unwrap(),
            "parse",
            vec![10],
            &["heap string"],
        )];
        let pick = pick_by_reach(&PickState {
            fuzzed: &fuzzed,
            ..base
        });
        assert_eq!(pick.unwrap().function, "log");
    }

    #[test]
    fn roadblock_candidates_are_a_function_of_the_campaigns_state() {
        use crate::roadblocks::{Branch, BranchTable, Direction};
        // `parse` holds a branch whose `true` side, five blocks, no run took; `main`
        // calls `parse`; `log` has nothing to do with it.
        let mut main = function(2, "main", Some("/p/src/main.c"));
        main.callees = vec![1];
        let b = binary(vec![
            function(1, "parse", Some("/p/src/parse.c")),
            main,
            function(3, "log", Some("/p/src/log.c")),
        ]);
        let direction = |edge: u32, behind: u32| Direction {
            edges: vec![edge],
            behind,
            case: None,
            ends: false,
        };
        let branches = BranchTable {
            branches: vec![Branch {
                function: 1,
                file: Some("/p/src/parse.c".into()),
                line: 10,
                cmp: None,
                directions: vec![direction(1, 0), direction(2, 5)],
            }],
        };
        let program = Program {
            binary: b,
            lines: FunctionLines::new(),
            weights: HashMap::new(),
            branches,
            branch_functions: vec![1],
            callers: HashMap::from([(1, vec![2])]),
        };
        let unit = |function: &str, id: &str| UnitRow {
            fn_id: id.into(),
            value_hashes: vec![id.parse().unwrap()],
            ..row(function, &["heap string"])
        };
        let batch = Batch::of(vec![
            unit("parse", "1"),
            unit("main", "2"),
            unit("log", "3"),
        ]);
        let st = batch.state(&program.binary);
        let rb = Roadblock {
            branch: 0,
            missing: 1,
            score: 5.0,
        };
        let key = rb.key(&program.branches);
        let functions = |known: &Roadblocks| -> Vec<String> {
            roadblock_candidates(&st, &program, known, &[(5.0, &rb)])
                .into_iter()
                .map(|p| p.function)
                .collect()
        };
        let none = Roadblocks::default();
        // The branch's own function first, then its caller; not the unrelated one.
        let picks = roadblock_candidates(&st, &program, &none, &[(5.0, &rb)]);
        assert_eq!(functions(&none), ["parse", "main"]);
        assert!(
            picks[0].reason.contains("parse.c:10"),
            "{}",
            picks[0].reason
        );
        assert!(
            picks[1].reason.contains("a unit of a caller"),
            "{}",
            picks[1].reason
        );
        assert!(picks.iter().all(|p| p.roadblock.is_some()));
        // The same state, the same candidates.
        assert_eq!(functions(&none), functions(&none));
        // A unit probed there and passed over is not a candidate there again.
        let mut passed = Roadblocks::default();
        passed.note_probe(super::super::RoadblockProbe {
            key: key.clone(),
            location: "parse.c:10".into(),
            unit: picks[0].path.clone(),
            function: "parse".into(),
            worth: false,
            unreached: false,
            verdict: String::new(),
            seconds: 0.1,
        });
        assert_eq!(functions(&passed), ["main"]);
        // Tried as often as a roadblock is, it is the system fuzzer's.
        let mut tried = Roadblocks::default();
        for k in 0..super::super::ROADBLOCK_TRIES {
            tried.attempts.push(super::super::RoadblockAttempt {
                key: key.clone(),
                location: "parse.c:10".into(),
                function: "parse".into(),
                behind: 5,
                fuzzed: k,
                at: 0.0,
                flipped_at: None,
                solved_at: None,
            });
        }
        assert!(functions(&tried).is_empty());
    }

    #[test]
    fn relative_paths_are_tidied_without_the_file_system() {
        assert_eq!(
            lexical(Path::new("dc/../lib/number.c")),
            PathBuf::from("lib/number.c")
        );
        assert_eq!(
            lexical(Path::new("../lib/./x.c")),
            PathBuf::from("../lib/x.c")
        );
        assert_eq!(lexical(Path::new("/a/b/../../c.c")), PathBuf::from("/c.c"));
    }
}

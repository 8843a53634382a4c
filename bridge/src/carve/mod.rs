//! `trestle carve`: turn recorded traces into unit files, deduplicated.

pub mod mapping;
pub mod show;
pub mod units;

use crate::record::{RecordIndex, RecordedTest, RECORD_INDEX};
use anyhow::{Context as _, Result};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use trestle_abi::meta::FnMeta;
use trestle_abi::trace::{decode_trace, Record, Trace};
use trestle_abi::unit::{Provenance, SystemTest, Unit, UNIT_MAGIC, UNIT_VERSION};
use trestle_abi::{Context, Outcome};
use trestle_exec::binary::Binary;
use units::{safe_name, UnitIndex, UnitRow, UNIT_EXT, UNIT_INDEX};

/// What `trestle carve` reads and writes (the command line's flags, as values).
#[derive(Debug)]
pub struct Options {
    /// The trace directory to carve.
    pub traces: PathBuf,
    /// The unit directory.
    pub out: PathBuf,
    /// The recorded build; `None` for the one the trace directory names.
    pub program: Option<PathBuf>,
    /// Print nothing but errors (for campaigns, which show their own progress).
    pub quiet: bool,
}

/// Figures of one carve.
#[derive(Debug, Default)]
pub struct CarveSummary {
    /// Invocations found in traces.
    pub invocations: usize,
    /// Units written (after deduplication).
    pub units: usize,
    /// Distinct functions among them.
    pub functions: usize,
    /// Invocations dropped as duplicates of another unit.
    pub duplicates: usize,
    /// Trace files that could not be read.
    pub bad_traces: usize,
    /// Instrumented functions the recorded processes called.
    pub called: usize,
    /// Functions called but not carved, with why.
    pub not_carved: Vec<(String, String)>,
    /// Units with at least one parameter.
    pub parameterized: usize,
    /// Parameters over all units.
    pub params: usize,
    /// Parameters by where they live and what they hold, e.g. "heap string".
    pub param_kinds: BTreeMap<String, usize>,
    /// Units with at least one parameter of each kind.
    pub units_by_kind: BTreeMap<String, usize>,
    /// Input streams read by a call but not made parameters, by reason.
    pub unmapped_streams: BTreeMap<String, usize>,
    /// Invocations not carved because their context was larger than the snapshot
    /// bound (a replay would restore only part of it), by function id.
    pub over_bound: BTreeMap<u64, usize>,
    /// Invocations not carved because a replay could not repeat what they did, by
    /// reason.
    pub unreplayable: BTreeMap<String, usize>,
    /// The same, by function id: the reason of its first such invocation and how
    /// many there were.
    pub unreplayable_fns: BTreeMap<u64, (String, usize)>,
    /// Invocations recorded for a branch (`trestle record --reach`, a campaign at a
    /// roadblock) that did not reach it: not carved.
    pub missed_branch: usize,
    /// The index written into the unit directory.
    pub index: UnitIndex,
}

/// "argument int", "heap string", "token string", "number", "stream" for a
/// parameter of a context: where a string lives, unless it is a token cut out of a
/// larger buffer; numbers and streams by kind alone.
pub fn param_class(ctx: &trestle_abi::Context, p: &trestle_abi::unit::Param) -> String {
    use trestle_abi::unit::{ParamKind, ParamSite, Resize};
    match (p.kind, p.site) {
        (ParamKind::Stream { .. }, _) => "stream".into(),
        (ParamKind::Decimal { .. }, _) => "number".into(),
        (
            ParamKind::Bytes {
                resize: Resize::Token,
                ..
            },
            _,
        ) => "token string".into(),
        (ParamKind::Int { .. }, _) => "argument int".into(),
        (ParamKind::Bytes { .. }, ParamSite::Memory { extent, .. }) => {
            let site = match ctx.graph.extents.get(extent as usize).map(|e| e.kind) {
                Some(trestle_abi::ExtentKind::Global { .. }) => "global",
                Some(trestle_abi::ExtentKind::Stack) => "stack",
                Some(trestle_abi::ExtentKind::Arg) => "argv",
                _ => "heap",
            };
            format!("{site} string")
        }
        (ParamKind::Bytes { .. }, _) => "string".into(),
    }
}

/// Bytes of the system input that `params` cover, overlaps counted once.
pub fn input_bytes(params: &[trestle_abi::unit::Param]) -> u64 {
    let mut ranges: BTreeMap<&trestle_abi::unit::InputRef, Vec<(u64, u64)>> = BTreeMap::new();
    for o in params.iter().flat_map(|p| &p.origins) {
        ranges
            .entry(&o.input)
            .or_default()
            .push((o.offset, o.offset + o.len));
    }
    let mut total = 0;
    for list in ranges.values_mut() {
        list.sort();
        let mut reach = 0;
        for &(a, b) in list.iter() {
            let a = a.max(reach);
            if b > a {
                total += b - a;
                reach = b;
            }
        }
    }
    total
}

/// Run `trestle carve`. Trace files that cannot be read are reported on stderr and
/// counted in [`CarveSummary::bad_traces`]; the units of the others are written.
pub fn run(opts: &Options) -> Result<CarveSummary> {
    let index = read_record_index(&opts.traces)?;
    let program = opts
        .program
        .clone()
        .unwrap_or_else(|| index.program.clone());
    let binary = Binary::load(&program)?;
    let summary = carve(&binary, &opts.traces, &index, &opts.out)?;
    if !opts.quiet {
        print_summary(&summary, &opts.out);
    }
    Ok(summary)
}

/// Carve the recording `index` describes (its traces under `traces`), made by
/// `binary`, into units under `out`, with their index. Trace files that cannot be read
/// are said and counted in [`CarveSummary::bad_traces`]; the units of the others are
/// written.
pub fn carve(
    binary: &Binary,
    traces: &Path,
    index: &RecordIndex,
    out: &Path,
) -> Result<CarveSummary> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut carver = Carver {
        traces,
        out,
        binary,
        summary: CarveSummary::default(),
        seen: HashMap::new(),
        functions: HashSet::new(),
        called: HashSet::new(),
        rows: Vec::new(),
    };
    for t in &index.tests {
        carver.test(t)?;
    }
    carver.finish()
}

/// The index `trestle record` wrote into the trace directory `traces`.
pub fn read_record_index(traces: &Path) -> Result<RecordIndex> {
    let index_path = traces.join(RECORD_INDEX);
    let text = std::fs::read_to_string(&index_path).with_context(|| {
        format!(
            "{} is not a trace directory written by `trestle record` (cannot read {})",
            traces.display(),
            index_path.display()
        )
    })?;
    serde_json::from_str(&text).with_context(|| format!("corrupted {}", index_path.display()))
}

/// One carve in progress: the units written so far and what was seen.
struct Carver<'a> {
    traces: &'a Path,
    out: &'a Path,
    binary: &'a Binary,
    summary: CarveSummary,
    /// Keys of the units written, with their rows: a context equal to one of them is a
    /// duplicate.
    seen: HashMap<u64, usize>,
    /// Functions with a unit.
    functions: HashSet<u64>,
    /// Functions the recorded processes called.
    called: HashSet<u64>,
    rows: Vec<UnitRow>,
}

/// Where an invocation was recorded.
struct Origin<'a> {
    test: &'a str,
    system_test: &'a SystemTest,
    trace: &'a Path,
    pid: u32,
}

impl Carver<'_> {
    /// Carve the traces of one recorded system test.
    fn test(&mut self, t: &RecordedTest) -> Result<()> {
        let dir = self.traces.join(&t.name);
        let system_test: SystemTest = trestle_exec::systest::load_test(&dir.join("test.json"))?;
        for tf in &t.traces {
            let path = dir.join(tf);
            let Some(trace) = self.read_trace(&path) else {
                self.summary.bad_traces += 1;
                continue;
            };
            let origin = Origin {
                test: &t.name,
                system_test: &system_test,
                trace: &path,
                pid: trace.header.pid,
            };
            self.trace(&origin, trace.records)?;
        }
        Ok(())
    }

    /// A trace of this program, or `None` (said on stderr) when it cannot be used.
    fn read_trace(&self, path: &Path) -> Option<Trace> {
        let trace = std::fs::read(path)
            .map_err(|e| format!("cannot read trace {}: {e}", path.display()))
            .and_then(|bytes| {
                decode_trace(&bytes).map_err(|e| format!("corrupt trace {} {e}", path.display()))
            });
        match trace {
            Ok(t) if t.header.binary_id == self.binary.id => Some(t),
            Ok(t) => {
                log::info!(
                    "error: trace {} was written by another binary (id {:016x}; {} is {:016x})",
                    path.display(),
                    t.header.binary_id,
                    self.binary.path.display(),
                    self.binary.id
                );
                None
            }
            Err(e) => {
                log::info!("error: {e}");
                None
            }
        }
    }

    fn trace(&mut self, origin: &Origin, records: Vec<(u64, Record)>) -> Result<()> {
        let mut exits = HashMap::new();
        let mut unreplayable = HashMap::new();
        let mut missed = std::collections::HashSet::new();
        for (_, r) in &records {
            match r {
                Record::Exit { seq, outcome } => {
                    exits.insert(*seq, outcome.clone());
                }
                Record::Stats(st) => self.called.extend(st.called.iter().map(|(id, _)| *id)),
                Record::Unreplayable { seq, why } => {
                    unreplayable.entry(*seq).or_insert_with(|| why.to_string());
                }
                Record::Reach {
                    seq,
                    reached: false,
                } => {
                    missed.insert(*seq);
                }
                Record::Enter { .. } | Record::Reach { .. } => {}
            }
        }
        for (_, r) in records {
            let Record::Enter {
                seq,
                call_index,
                context,
            } = r
            else {
                continue;
            };
            self.summary.invocations += 1;
            if missed.contains(&seq) {
                // Recorded for a branch it did not reach.
                self.summary.missed_branch += 1;
                continue;
            }
            if let Some(why) = unreplayable.remove(&seq) {
                // Carved, its replay would differ for a reason the unit cannot hold.
                *self.summary.unreplayable.entry(why.clone()).or_default() += 1;
                self.summary
                    .unreplayable_fns
                    .entry(context.fn_id)
                    .or_insert((why, 0))
                    .1 += 1;
                continue;
            }
            let expected = exits.remove(&seq);
            if context.graph.partial {
                // The walk stopped at the size bound: some extents have no bytes.
                // Replaying that would be a half-restored context, so no unit.
                *self.summary.over_bound.entry(context.fn_id).or_default() += 1;
                continue;
            }
            self.invocation(origin, (seq, call_index), context, expected)?;
        }
        Ok(())
    }

    /// Map one recorded invocation and write it as a unit, unless it is a duplicate.
    fn invocation(
        &mut self,
        origin: &Origin,
        (seq, call_index): (u64, u64),
        context: Context,
        expected: Option<Outcome>,
    ) -> Result<()> {
        // Equal contexts that read different rests of their input are different
        // units: the unread input they read belongs to the key.
        let streams = mapping::map_streams(&context, origin.system_test, expected.as_ref());
        let mut keyed = bincode::serialize(&context)?;
        for p in &streams.params {
            keyed.extend_from_slice(&p.original);
        }
        let key = trestle_abi::ids::fnv1a64(&keyed);
        if let Some(&row) = self.seen.get(&key) {
            self.summary.duplicates += 1;
            // The same context from another test: that test's run reached it too (a
            // roadblock's own recording, whose units it probes first).
            let r = &mut self.rows[row];
            if r.test != origin.test && !r.also_from.iter().any(|t| t == origin.test) {
                r.also_from.push(origin.test.to_owned());
            }
            return Ok(());
        }
        let mapping = mapping::map_rest(
            &context,
            self.binary.functions.get(&context.fn_id),
            &self.binary.global_names,
            origin.system_test,
            streams,
        );
        for why in mapping.unmapped_streams {
            *self.summary.unmapped_streams.entry(why).or_default() += 1;
        }
        let classes = self.count_params(&context, &mapping.params);
        let function = self.binary.function_name(context.fn_id);
        let unit = Unit {
            magic: UNIT_MAGIC,
            version: UNIT_VERSION,
            binary_id: self.binary.id,
            function: function.clone(),
            expected,
            provenance: Provenance {
                program: self.binary.path.display().to_string(),
                test: origin.test.to_owned(),
                trace: origin.trace.display().to_string(),
                pid: origin.pid,
                seq,
                call_index,
            },
            system_test: origin.system_test.clone(),
            context,
            params: mapping.params,
        };
        let rel = format!("{}/{key:016x}.{UNIT_EXT}", safe_name(&function));
        let out = self.out.join(&rel);
        std::fs::create_dir_all(out.parent().expect("unit path has a parent"))?;
        units::write_unit(&out, &unit)?;
        self.functions.insert(unit.context.fn_id);
        self.seen.insert(key, self.rows.len());
        self.rows.push(UnitRow {
            file: rel,
            function,
            fn_id: format!("{:016x}", unit.context.fn_id),
            test: origin.test.to_owned(),
            call_index,
            pid: Some(origin.pid),
            has_oracle: unit.expected.is_some(),
            params: unit.params.len(),
            param_kinds: classes,
            input_bytes: input_bytes(&unit.params),
            value_hashes: units::value_hashes(&unit.params),
            also_from: Vec::new(),
        });
        Ok(())
    }

    /// Count a unit's parameters by class; returns its classes, sorted and distinct.
    fn count_params(
        &mut self,
        context: &Context,
        params: &[trestle_abi::unit::Param],
    ) -> Vec<String> {
        self.summary.params += params.len();
        self.summary.parameterized += usize::from(!params.is_empty());
        let mut classes: Vec<String> = params.iter().map(|p| param_class(context, p)).collect();
        for c in &classes {
            *self.summary.param_kinds.entry(c.clone()).or_default() += 1;
        }
        classes.sort();
        classes.dedup();
        for c in &classes {
            *self.summary.units_by_kind.entry(c.clone()).or_default() += 1;
        }
        classes
    }

    /// Say why each function called but not carved was not, and write the index.
    fn finish(self) -> Result<CarveSummary> {
        let Carver {
            out,
            binary,
            mut summary,
            functions,
            called,
            rows,
            ..
        } = self;
        summary.units = rows.len();
        summary.functions = functions.len();
        summary.called = called.len();
        for id in called.difference(&functions) {
            let reason = not_carved_reason(
                binary.functions.get(id),
                summary.over_bound.get(id).copied(),
                summary.unreplayable_fns.get(id),
            );
            summary.not_carved.push((binary.function_name(*id), reason));
        }
        summary.not_carved.sort();
        summary.index = UnitIndex {
            program: binary.path.clone(),
            binary_id: format!("{:016x}", binary.id),
            called_functions: summary.called,
            not_carved: summary
                .not_carved
                .iter()
                .map(|(n, r)| format!("{n}: {r}"))
                .collect(),
            parameterized_units: summary.parameterized,
            param_kinds: summary.param_kinds.clone(),
            units_by_param_kind: summary.units_by_kind.clone(),
            unmapped_streams: summary.unmapped_streams.clone(),
            over_bound: summary.over_bound.values().sum(),
            unreplayable: summary.unreplayable.clone(),
            units: rows,
        };
        trestle_exec::files::write(&out.join(UNIT_INDEX), &summary.index)?;
        Ok(summary)
    }
}

/// Why a function that was called has no unit; `over_bound` counts its calls whose
/// context was over the snapshot bound, `unreplayable` its calls a replay could not
/// repeat (the first reason, and how many).
fn not_carved_reason(
    meta: Option<&FnMeta>,
    over_bound: Option<usize>,
    unreplayable: Option<&(String, usize)>,
) -> String {
    match (meta, over_bound, unreplayable) {
        (Some(f), _, _) if f.variadic && !f.replayable => {
            "variadic: no replay thunk on this target".to_owned()
        }
        (Some(f), _, _) if !f.replayable => {
            "a parameter or return type a 64-bit slot cannot carry".to_owned()
        }
        (Some(_), Some(n), _) => format!(
            "its context exceeded the snapshot size bound in every call ({n} of them; raise {})",
            trestle_abi::hooks::ENV_CONTEXT_LIMIT
        ),
        (Some(_), None, Some((why, n))) => format!("every carvable call {why} ({n} of them)"),
        (Some(_), None, None) => {
            "every call ended without a carvable context (or was only called at exit)".to_owned()
        }
        (None, _, _) => "unknown function".to_owned(),
    }
}

fn print_summary(summary: &CarveSummary, out: &Path) {
    let counts = |m: &BTreeMap<String, usize>, number_first: bool| {
        let parts: Vec<String> = m
            .iter()
            .map(|(k, n)| {
                if number_first {
                    format!("{n} {k}")
                } else {
                    format!("{k} {n}")
                }
            })
            .collect();
        parts.join(", ")
    };
    log::info!(
        "carved {} unit(s) of {} function(s) from {} invocation(s) ({} duplicate(s) dropped) into {}",
        summary.units,
        summary.functions,
        summary.invocations,
        summary.duplicates,
        out.display()
    );
    log::info!(
        "{} of {} called function(s) carved",
        summary.called - summary.not_carved.len(),
        summary.called
    );
    log::info!(
        "{} unit(s) have parameters mapped to the system input ({} parameters: {})",
        summary.parameterized,
        summary.params,
        counts(&summary.param_kinds, true)
    );
    if !summary.units_by_kind.is_empty() {
        log::info!(
            "units with a parameter of each kind: {}",
            counts(&summary.units_by_kind, false)
        );
    }
    for (why, n) in &summary.unmapped_streams {
        log::info!("  {n} stream(s) read but not mapped: {why}");
    }
    let over = summary.index.over_bound;
    if over > 0 {
        log::info!(
            "  {over} invocation(s) of {} function(s) not carved: context over the snapshot size bound ({})",
            summary.over_bound.len(),
            trestle_abi::hooks::ENV_CONTEXT_LIMIT
        );
    }
    for (why, n) in &summary.unreplayable {
        log::info!("  {n} invocation(s) not carved: {why}");
    }
    if summary.missed_branch > 0 {
        log::info!(
            "  {} invocation(s) not carved: recorded for a branch they did not reach",
            summary.missed_branch
        );
    }
    for (name, why) in &summary.not_carved {
        log::info!("  not carved: {name} ({why})");
    }
}

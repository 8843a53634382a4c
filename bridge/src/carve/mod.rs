//! `trestle carve`: turn recorded traces into unit files, deduplicated.

pub mod mapping;
pub mod show;
pub mod units;

use crate::binary::Binary;
use crate::record::{RecordIndex, RECORD_INDEX};
use crate::carve::units::{safe_name, UnitIndex, UnitRow, UNIT_EXT, UNIT_INDEX};
use anyhow::{Context as _, Result};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use trestle_abi::trace::{decode_trace, Record};
use trestle_abi::unit::{Provenance, SystemTest, Unit, UNIT_MAGIC, UNIT_VERSION};

/// Options of `trestle carve`.
#[derive(Debug)]
pub struct Options {
    /// A trace directory written by `trestle record`.
    pub traces: PathBuf,
    /// Directory to write units to.
    pub out: PathBuf,
    /// The program (default: the one named in the trace directory).
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
        (ParamKind::Bytes { resize: Resize::Token, .. }, _) => "token string".into(),
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
        ranges.entry(&o.input).or_default().push((o.offset, o.offset + o.len));
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
pub fn run(args: &Options) -> Result<CarveSummary> {
    let index_path = args.traces.join(RECORD_INDEX);
    let text = std::fs::read_to_string(&index_path).with_context(|| {
        format!("{} is not a trace directory written by `trestle record` (cannot read {})", args.traces.display(), index_path.display())
    })?;
    let index: RecordIndex =
        serde_json::from_str(&text).with_context(|| format!("corrupted {}", index_path.display()))?;
    let program = args.program.clone().unwrap_or_else(|| index.program.clone());
    let binary = Binary::load(&program)?;
    std::fs::create_dir_all(&args.out).with_context(|| format!("cannot create {}", args.out.display()))?;

    let mut summary = CarveSummary::default();
    let mut seen = HashSet::new();
    let mut functions = HashSet::new();
    let mut rows = Vec::new();
    let mut called = HashSet::new();
    for t in &index.tests {
        let dir = args.traces.join(&t.name);
        let test_path = dir.join("test.json");
        let system_test: SystemTest = crate::system::systest::load_test(&test_path)?;
        for tf in &t.traces {
            let path = dir.join(tf);
            let bytes = match std::fs::read(&path) {
                Ok(b) => b,
                Err(e) => {
                    eprintln!("error: cannot read trace {}: {e}", path.display());
                    summary.bad_traces += 1;
                    continue;
                }
            };
            let trace = match decode_trace(&bytes) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("error: corrupt trace {} {e}", path.display());
                    summary.bad_traces += 1;
                    continue;
                }
            };
            if trace.header.binary_id != binary.id {
                eprintln!(
                    "error: trace {} was written by another binary (id {:016x}; {} is {:016x})",
                    path.display(),
                    trace.header.binary_id,
                    binary.path.display(),
                    binary.id
                );
                summary.bad_traces += 1;
                continue;
            }
            let mut exits = HashMap::new();
            for (_, r) in &trace.records {
                match r {
                    Record::Exit { seq, outcome } => {
                        exits.insert(*seq, outcome.clone());
                    }
                    Record::Stats(st) => called.extend(st.called.iter().map(|(id, _)| *id)),
                    Record::Enter { .. } => {}
                }
            }
            for (_, r) in trace.records {
                let Record::Enter { seq, call_index, context } = r else { continue };
                summary.invocations += 1;
                let expected = exits.remove(&seq);
                if context.graph.partial {
                    // The walk stopped at the size bound: some extents have no bytes.
                    // Replaying that would be a half-restored context, so no unit.
                    *summary.over_bound.entry(context.fn_id).or_default() += 1;
                    continue;
                }
                // Equal contexts that read different rests of their input are
                // different units: the unread input they read belongs to the key.
                let streams = crate::carve::mapping::map_streams(&context, &system_test, expected.as_ref());
                let mut keyed = bincode::serialize(&context)?;
                for p in &streams.params {
                    keyed.extend_from_slice(&p.original);
                }
                let key = trestle_abi::ids::fnv1a64(&keyed);
                if !seen.insert(key) {
                    summary.duplicates += 1;
                    continue;
                }
                let mapping = crate::carve::mapping::map_rest(&context, binary.functions.get(&context.fn_id), &system_test, streams);
                let function = binary.function_name(context.fn_id);
                let params = mapping.params;
                for why in mapping.unmapped_streams {
                    *summary.unmapped_streams.entry(why).or_default() += 1;
                }
                summary.params += params.len();
                let mut classes: Vec<String> = params.iter().map(|p| param_class(&context, p)).collect();
                for c in &classes {
                    *summary.param_kinds.entry(c.clone()).or_default() += 1;
                }
                classes.sort();
                classes.dedup();
                for c in &classes {
                    *summary.units_by_kind.entry(c.clone()).or_default() += 1;
                }
                if !params.is_empty() {
                    summary.parameterized += 1;
                }
                let unit = Unit {
                    magic: UNIT_MAGIC,
                    version: UNIT_VERSION,
                    binary_id: binary.id,
                    function: function.clone(),
                    expected,
                    provenance: Provenance {
                        program: binary.path.display().to_string(),
                        test: t.name.clone(),
                        trace: path.display().to_string(),
                        pid: trace.header.pid,
                        seq,
                        call_index,
                    },
                    system_test: system_test.clone(),
                    context,
                    params,
                };
                let sub = safe_name(&function);
                let rel = format!("{sub}/{key:016x}.{UNIT_EXT}");
                let out = args.out.join(&rel);
                std::fs::create_dir_all(out.parent().expect("unit path has a parent"))?;
                std::fs::write(&out, unit.encode()).with_context(|| format!("cannot write {}", out.display()))?;
                functions.insert(unit.context.fn_id);
                rows.push(UnitRow {
                    file: rel,
                    function,
                    fn_id: format!("{:016x}", unit.context.fn_id),
                    test: t.name.clone(),
                    call_index,
                    has_oracle: unit.expected.is_some(),
                    params: unit.params.len(),
                    param_kinds: classes,
                    input_bytes: input_bytes(&unit.params),
                    value_hashes: crate::carve::units::value_hashes(&unit.params),
                });
            }
        }
    }
    summary.units = rows.len();
    summary.functions = functions.len();
    summary.called = called.len();
    for id in called.difference(&functions) {
        let reason = match binary.functions.get(id) {
            Some(f) if f.variadic && !f.replayable => "variadic: no replay thunk on this target".to_owned(),
            Some(f) if !f.replayable => "a parameter or return type a 64-bit slot cannot carry".to_owned(),
            Some(_) if summary.over_bound.contains_key(id) => format!(
                "its context exceeded the snapshot size bound in every call ({} of them; raise {})",
                summary.over_bound[id],
                trestle_abi::hooks::ENV_CONTEXT_LIMIT
            ),
            Some(_) => "every call ended without a carvable context (or was only called at exit)".to_owned(),
            None => "unknown function".to_owned(),
        };
        summary.not_carved.push((binary.function_name(*id), reason));
    }
    summary.not_carved.sort();
    let uindex = UnitIndex {
        program: binary.path.clone(),
        binary_id: format!("{:016x}", binary.id),
        called_functions: summary.called,
        not_carved: summary.not_carved.iter().map(|(n, r)| format!("{n}: {r}")).collect(),
        parameterized_units: summary.parameterized,
        param_kinds: summary.param_kinds.clone(),
        units_by_param_kind: summary.units_by_kind.clone(),
        unmapped_streams: summary.unmapped_streams.clone(),
        over_bound: summary.over_bound.values().sum(),
        units: rows,
    };
    crate::files::write(&args.out.join(UNIT_INDEX), &uindex)?;
    let mut per_fn: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &uindex.units {
        *per_fn.entry(&r.function).or_default() += 1;
    }
    if !args.quiet {
        eprintln!(
            "carved {} unit(s) of {} function(s) from {} invocation(s) ({} duplicate(s) dropped) into {}",
            summary.units,
            summary.functions,
            summary.invocations,
            summary.duplicates,
            args.out.display()
        );
        eprintln!("{} of {} called function(s) carved", summary.called - summary.not_carved.len(), summary.called);
        eprintln!(
            "{} unit(s) have parameters mapped to the system input ({} parameters: {})",
            summary.parameterized,
            summary.params,
            summary.param_kinds.iter().map(|(k, n)| format!("{n} {k}")).collect::<Vec<_>>().join(", ")
        );
        if !summary.units_by_kind.is_empty() {
            eprintln!(
                "units with a parameter of each kind: {}",
                summary.units_by_kind.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ")
            );
        }
        for (why, n) in &summary.unmapped_streams {
            eprintln!("  {n} stream(s) read but not mapped: {why}");
        }
        let over = uindex.over_bound;
        if over > 0 {
            eprintln!(
                "  {over} invocation(s) of {} function(s) not carved: context over the snapshot size bound ({})",
                summary.over_bound.len(),
                trestle_abi::hooks::ENV_CONTEXT_LIMIT
            );
        }
        for (name, why) in &summary.not_carved {
            eprintln!("  not carved: {name} ({why})");
        }
    }
    summary.index = uindex;
    Ok(summary)
}

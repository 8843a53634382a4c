//! `trestle record`: run system tests with recording on, one fresh directory each.

use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;
use trestle_abi::hooks;
use trestle_exec::binary::Binary;
use trestle_exec::launch::{run_test, RunOptions};
use trestle_exec::systest::{load_tests, NamedTest, RunStatus};

/// What `trestle record` records and where (the command line's flags, as values:
/// `trestle record --help` has the user's view).
#[derive(Debug)]
pub struct Options {
    /// The trestle-cc build to record in.
    pub program: PathBuf,
    /// Where the tests are read from (one file or a directory).
    pub tests: PathBuf,
    /// The trace directory (absent or empty).
    pub out: PathBuf,
    /// Upper bound of one test's run.
    pub timeout: Duration,
    /// Contexts kept per function and process at most.
    pub max_per_fn: u32,
    /// Record only these functions (symbol ids) and those named in `functions`;
    /// both empty for all.
    pub only: Vec<u64>,
    /// Record only the functions of these names (and those in `only`).
    pub functions: Vec<String>,
    /// Keep only the invocations that reach one of these edges (a branch's) before
    /// they end; empty for all ([`hooks::ENV_RECORD_REACH`]).
    pub reach: Vec<u32>,
    /// The same, for the tests of these names (file stems) alone, instead of `reach`.
    pub reach_by_test: std::collections::HashMap<String, Vec<u32>>,
    /// The same for the conditional branches at these source lines (`FILE:LINE`, the
    /// file as a name or a path suffix), read from the program's branch table.
    pub reach_lines: Vec<String>,
    /// Bytes each process's trace may reach before it records no new call
    /// ([`hooks::ENV_TRACE_LIMIT`]); `None` for no bound.
    pub max_trace_bytes: Option<u64>,
    /// Print nothing but warnings (for campaigns, which show their own progress).
    pub quiet: bool,
}

/// `record.json`: what was recorded, for `carve`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecordIndex {
    /// The program (absolute path).
    pub program: PathBuf,
    /// Its binary id, hex.
    pub binary_id: String,
    /// One entry per system test.
    pub tests: Vec<RecordedTest>,
}

/// One recorded system test.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecordedTest {
    /// Test name (its directory under the trace directory).
    pub name: String,
    /// The JSON file it was loaded from.
    pub source: PathBuf,
    /// How the program ended.
    pub status: RunStatus,
    /// Trace files written (relative to the test's directory).
    pub traces: Vec<String>,
}

/// File name of the index in a trace directory.
pub const RECORD_INDEX: &str = "record.json";

fn prepare_out(out: &Path) -> Result<()> {
    if out.exists() {
        let empty = std::fs::read_dir(out)
            .with_context(|| format!("cannot list {}", out.display()))?
            .next()
            .is_none();
        if !empty {
            bail!(
                "output directory {} already exists and is not empty; choose another --out",
                out.display()
            );
        }
    }
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))
}

/// Run `trestle record`.
pub fn run(args: &Options) -> Result<()> {
    let binary = Binary::load(&args.program)?;
    let mut only = args.only.clone();
    for name in &args.functions {
        let ids: Vec<u64> = binary
            .functions
            .values()
            .filter(|f| f.display_name() == name || f.name == *name)
            .map(|f| f.id)
            .collect();
        if ids.is_empty() {
            bail!(
                "--function {name}: {} has no instrumented function of that name",
                args.program.display()
            );
        }
        only.extend(ids);
    }
    let mut reach = args.reach.clone();
    if !args.reach_lines.is_empty() {
        let table = crate::roadblocks::BranchTable::load(&args.program)?;
        for loc in &args.reach_lines {
            let edges = table.edges_at(loc)?;
            if edges.is_empty() {
                bail!(
                    "--reach {loc}: {} has no conditional branch there ({})",
                    args.program.display(),
                    table.lines_of(loc)
                );
            }
            reach.extend(edges);
        }
    }
    let tests = load_tests(&args.tests)?;
    let plan = Plan {
        timeout: args.timeout,
        max_per_fn: args.max_per_fn,
        only,
        reach,
        reach_by_test: args.reach_by_test.clone(),
        max_trace_bytes: args.max_trace_bytes,
        progress: !args.quiet,
    };
    record(&binary, &tests, &plan, &args.out)?;
    Ok(())
}

/// How to record: what `trestle record`'s options come to once function names and
/// source lines are resolved in the program.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Upper bound of one test's run.
    pub timeout: Duration,
    /// Contexts kept per function and process at most.
    pub max_per_fn: u32,
    /// Record only these functions (symbol ids); empty for all.
    pub only: Vec<u64>,
    /// Keep only the invocations that reach one of these edges; empty for all.
    pub reach: Vec<u32>,
    /// The same, for the tests of these names alone, instead of `reach`.
    pub reach_by_test: std::collections::HashMap<String, Vec<u32>>,
    /// Bytes each process's trace may reach before it records no new call.
    pub max_trace_bytes: Option<u64>,
    /// Say each test's outcome as it is recorded.
    pub progress: bool,
}

/// Run `binary` on each of `tests` with recording on, each into a directory of its
/// own under `out` (which must not exist, or be empty), as `plan` says; the index of
/// what was recorded, also written to `out` ([`RECORD_INDEX`]) as it grows.
pub fn record(
    binary: &Binary,
    tests: &[NamedTest],
    plan: &Plan,
    out: &Path,
) -> Result<RecordIndex> {
    let (only, reach) = (&plan.only, &plan.reach);
    prepare_out(out)?;
    let out = std::fs::canonicalize(out)?;
    let mut index = RecordIndex {
        program: binary.path.clone(),
        binary_id: format!("{:016x}", binary.id),
        tests: Vec::new(),
    };
    let n = tests.len();
    for (i, t) in tests.iter().enumerate() {
        let dir = out.join(&t.name);
        std::fs::create_dir_all(&dir)?;
        trestle_exec::systest::save_test(&t.test, &dir.join("test.json"))?;
        let mut env = vec![
            (hooks::ENV_TRACE_DIR.into(), dir.display().to_string()),
            (hooks::ENV_MAX_PER_FN.into(), plan.max_per_fn.to_string()),
        ];
        if let Some(max) = plan.max_trace_bytes {
            env.push((hooks::ENV_TRACE_LIMIT.into(), max.to_string()));
        }
        if !only.is_empty() {
            env.push((
                hooks::ENV_RECORD_ONLY.into(),
                only.iter()
                    .map(|id| format!("{id:x}"))
                    .collect::<Vec<_>>()
                    .join(","),
            ));
        }
        let reach = plan.reach_by_test.get(&t.name).unwrap_or(reach);
        if !reach.is_empty() {
            env.push((
                hooks::ENV_RECORD_REACH.into(),
                reach
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            ));
        }
        let opts = RunOptions {
            timeout: plan.timeout,
            env,
            capture_stdout: false,
        };
        let r = run_test(&binary.path, &t.test, &opts)?;
        let mut traces = Vec::new();
        for e in
            std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))?
        {
            let name = e
                .with_context(|| format!("cannot list {}", dir.display()))?
                .file_name()
                .to_string_lossy()
                .into_owned();
            if Path::new(&name)
                .extension()
                .is_some_and(|x| x == trestle_abi::trace::TRACE_EXT)
            {
                traces.push(name);
            }
        }
        traces.sort();
        let bytes: u64 = traces
            .iter()
            .filter_map(|f| std::fs::metadata(dir.join(f)).ok())
            .map(|m| m.len())
            .sum();
        if plan.progress {
            log::info!(
                "[{}/{n}] {}: {}, {} trace file(s), {} KiB",
                i + 1,
                t.name,
                r.status,
                traces.len(),
                bytes.div_ceil(1024)
            );
        }
        if traces.is_empty() && plan.progress {
            let err = String::from_utf8_lossy(&r.stderr);
            log::info!(
                "    warning: no trace written{}",
                if err.is_empty() {
                    String::new()
                } else {
                    format!("; stderr: {}", err.trim())
                }
            );
        }
        index.tests.push(RecordedTest {
            name: t.name.clone(),
            source: t.path.clone(),
            status: r.status,
            traces,
        });
        // Keep the index current, so an interrupted run still describes what it did.
        std::fs::write(out.join(RECORD_INDEX), serde_json::to_vec_pretty(&index)?)?;
    }
    if plan.progress {
        log::info!("recorded {n} system test(s) into {}", out.display());
    }
    Ok(index)
}

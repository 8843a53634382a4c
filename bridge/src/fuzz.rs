//! `trestle fuzz`: run the unit fuzzer on one carved unit.

use trestle_exec::binary::Binary;

use crate::carve::mapping::STREAM_CAP;
use crate::carve::units::read_unit;
use anyhow::{bail, Context as _, Result};
use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;
use trestle_abi::fuzz::{encode_values, original_value, ParamValue};
use trestle_abi::unit::{InputRef, ParamKind, SystemTest, Unit};
use trestle_unit_fuzz::{Dictionary, FuzzConfig, FuzzReport};

/// Inputs `--start-from` gives the fuzzer at most.
const MAX_START_FROM: usize = 1024;

/// What one unit-fuzzing campaign runs and how (the command line's flags, as values:
/// `trestle fuzz --help` has the user's view).
#[derive(Debug)]
pub struct Options {
    /// The unit to fuzz (a file `trestle carve` wrote).
    pub unit: PathBuf,
    /// Fuzzing time.
    pub time: Duration,
    /// The fuzzer's directory (`queue/`, `crashes/`, `timeouts/`).
    pub out: PathBuf,
    /// Number of fuzzer clients, each bound to its own core, sharing finds over LLMP.
    pub cores: usize,
    /// The build the unit runs in; `None` for the one it was carved from.
    pub program: Option<PathBuf>,
    /// Upper bound of one execution.
    pub timeout: Duration,
    /// Seed of the fuzzer's random numbers.
    pub seed: u64,
    /// Turn off the CmpLog stage.
    pub no_cmplog: bool,
    /// Return at the first crash.
    pub stop_on_crash: bool,
    /// A process per execution rather than the persistent harness.
    pub fork_per_exec: bool,
    /// The fuzzer inside the harness process, calling the unit directly (one core).
    pub in_process: bool,
    /// Core to bind the fuzzer and harness to (one client only); `None` picks a free one.
    pub pin: Option<usize>,
    /// Bind to no core (one client only).
    pub no_pin: bool,
    /// Show the fuzzer's status line while it runs.
    pub progress: bool,
    /// A branch to flip (`FILE:LINE`): see [`goal_at`].
    pub goal: Option<String>,
    /// With `goal`: without the operand distance as feedback.
    pub no_distance: bool,
    /// With `goal`: how long to go on once the direction is taken.
    pub after_goal: Duration,
    /// System tests whose inputs the unit's stream parameters start from too
    /// ([`stream_seeds`]).
    pub start_from: Option<PathBuf>,
}

/// Unit inputs made of system tests' inputs (a system fuzzer's queue, say), at most
/// `max`: a stream parameter (what was left to read of an input when the call began)
/// takes a test's same input from the same place, when the test's bytes before that
/// place are the recorded ones; the other parameters keep their recorded values. A
/// unit whose parameter is the program text of an interpreter (dc's `dc_evalfile`)
/// then starts from the programs the system fuzzer found, not from one seed's.
/// Tests that change no stream parameter, or whose input runs past what a parameter
/// holds ([`STREAM_CAP`]), give none. `tests` is asked for only when the unit has a
/// stream parameter (a campaign's queue is copied out for it).
pub fn stream_seeds(
    unit: &Unit,
    tests: impl FnOnce() -> Vec<SystemTest>,
    max: usize,
) -> Vec<Vec<u8>> {
    let streams: Vec<usize> = (0..unit.params.len())
        .filter(|&i| {
            matches!(unit.params[i].kind, ParamKind::Stream { cut: 0 })
                && !unit.params[i].origins.is_empty()
        })
        .collect();
    if streams.is_empty() {
        return Vec::new();
    }
    let original: Vec<ParamValue> = unit.params.iter().map(original_value).collect();
    let mut seen = HashSet::new();
    let mut seeds = Vec::new();
    for test in &tests() {
        if seeds.len() >= max {
            break;
        }
        let mut values = original.clone();
        for &i in &streams {
            let origin = &unit.params[i].origins[0];
            let (Some(ours), Some(theirs)) = (
                input_bytes(&unit.system_test, &origin.input),
                input_bytes(test, &origin.input),
            ) else {
                continue;
            };
            let at = origin.offset as usize;
            if theirs.len() < at
                || theirs.len() - at > STREAM_CAP
                || ours.get(..at) != theirs.get(..at)
            {
                continue;
            }
            values[i] = ParamValue::Bytes(theirs[at..].to_vec());
        }
        if values != original {
            let input = encode_values(&values);
            if seen.insert(input.clone()) {
                seeds.push(input);
            }
        }
    }
    seeds
}

/// The bytes of one input of `test` (not of an argument: a stream reads stdin or a file).
fn input_bytes<'a>(test: &'a SystemTest, input: &InputRef) -> Option<&'a [u8]> {
    match input {
        InputRef::Stdin => Some(test.stdin.as_deref().unwrap_or_default()),
        InputRef::File(name) => test.files.get(name).map(Vec::as_slice),
        InputRef::Arg(_) => None,
    }
}

/// The goal at the branch on `loc`: the edges of the directions the unit's recorded
/// values do not take there, and the CmpLog id of its comparison.
fn goal_at(
    binary: &Binary,
    unit: &trestle_abi::unit::Unit,
    loc: &str,
    timeout: Duration,
) -> Result<(Vec<u32>, Option<u32>)> {
    let table = crate::roadblocks::BranchTable::load(&binary.path)?;
    let branches = table.branches_at(loc)?;
    if branches.is_empty() {
        bail!(
            "--goal {loc}: {} has no conditional branch there ({})",
            binary.path.display(),
            table.lines_of(loc)
        );
    }
    let all: Vec<u32> = branches
        .iter()
        .flat_map(|b| b.directions.iter().flat_map(|d| d.edges.iter().copied()))
        .collect();
    let dir = tempfile::tempdir()?;
    let taken = trestle_unit_fuzz::recorded_edges(&binary.path, unit, dir.path(), &all, timeout)?;
    let reached: Vec<&crate::roadblocks::Branch> = branches
        .into_iter()
        .filter(|b| {
            b.directions
                .iter()
                .any(|d| d.edges.iter().any(|e| taken.contains(e)))
        })
        .collect();
    if reached.is_empty() {
        bail!("--goal {loc}: the unit's recorded values do not reach that branch (`trestle record --reach {loc}` records calls that do)");
    }
    let mut goal = Vec::new();
    let mut cmp = None;
    for b in &reached {
        for d in &b.directions {
            if !d.edges.iter().any(|e| taken.contains(e)) {
                goal.extend(d.edges.iter().copied());
                cmp = cmp.or(b.cmp);
            }
        }
    }
    if goal.is_empty() {
        bail!(
            "--goal {loc}: the unit's recorded values take every direction of that branch already"
        );
    }
    Ok((goal, cmp))
}

/// Bind this thread (and the programs it starts from now on) to core `pin`, or to a
/// free core unless `no_pin`; says which on stderr. A fuzzer and the program it runs
/// take turns, so one core serves both best (see [`trestle_unit_fuzz::affinity`]).
pub fn bind_core(pin: Option<usize>, no_pin: bool) -> Result<Option<usize>> {
    if no_pin {
        return Ok(None);
    }
    let Some(core) = pin.or_else(trestle_unit_fuzz::affinity::free_core) else {
        log::info!("trestle: every core is taken by another fuzzer: running unbound");
        return Ok(None);
    };
    trestle_unit_fuzz::affinity::pin(core)
        .with_context(|| format!("cannot bind to core {core}"))?;
    log::info!("trestle: running on core {core}");
    Ok(Some(core))
}

/// What `trestle fuzz` did: the unit fuzzer's report, and the function fuzzed.
#[derive(Debug)]
pub struct Fuzzed {
    /// The function of the unit.
    pub function: String,
    /// The unit fuzzer's report.
    pub report: FuzzReport,
}

/// Run `trestle fuzz`.
pub fn run(args: &Options) -> Result<Fuzzed> {
    let available = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    if args.cores == 0 || args.cores > available {
        bail!(
            "--cores {}: choose 1 to {available}, the cores this process may run on",
            args.cores
        );
    }
    if args.cores > 1 && args.in_process {
        bail!(
            "--in-process runs on one core; --cores {} needs the forkserver harness",
            args.cores
        );
    }
    if args.cores > 1 && (args.pin.is_some() || args.no_pin) {
        bail!("--pin and --no-pin apply to single-core fuzzing; with --cores {} client i runs on core i", args.cores);
    }
    let unit = read_unit(&args.unit)?;
    let program = args
        .program
        .clone()
        .unwrap_or_else(|| PathBuf::from(&unit.provenance.program));
    let binary =
        Binary::load(&program).with_context(|| format!("fuzzing {}", args.unit.display()))?;
    binary.check_unit(&unit, &args.unit)?;
    let (words, ints) = binary.dictionary_for(unit.context.fn_id);
    let (goal, goal_cmp) = match &args.goal {
        Some(loc) => goal_at(&binary, &unit, loc, args.timeout)?,
        None => (Vec::new(), None),
    };
    let seeds = match &args.start_from {
        Some(dir) => {
            let tests: Vec<SystemTest> = trestle_exec::systest::load_tests(dir)?
                .into_iter()
                .map(|t| t.test)
                .collect();
            let seeds = stream_seeds(&unit, || tests, MAX_START_FROM);
            if seeds.is_empty() {
                bail!(
                    "--start-from {}: no test there gives the unit's stream parameters another value (the unit has {} stream parameter(s); a test must have the same input, alike up to where the call began reading)",
                    dir.display(),
                    unit.params.iter().filter(|p| matches!(p.kind, ParamKind::Stream { .. })).count()
                );
            }
            seeds
        }
        None => Vec::new(),
    };
    let cfg = FuzzConfig {
        program: binary.path.clone(),
        unit,
        out: args.out.clone(),
        time: args.time,
        timeout: args.timeout,
        seed: args.seed,
        cmplog: !args.no_cmplog,
        dictionary: Dictionary { words, ints },
        progress: args.progress,
        stop_on_crash: args.stop_on_crash,
        persistent: !args.fork_per_exec,
        pin_core: if args.no_pin || args.cores > 1 {
            None
        } else {
            args.pin.or_else(trestle_unit_fuzz::affinity::free_core)
        },
        cores: args.cores,
        plateau: None,
        goal,
        goal_cmp: goal_cmp.filter(|_| !args.no_distance),
        after_goal: args.after_goal,
        seeds,
    };
    let report = if args.in_process {
        trestle_unit_fuzz::fuzz_in_process(&cfg)
    } else {
        trestle_unit_fuzz::fuzz(&cfg)
    }
    .with_context(|| format!("fuzzing {}", args.unit.display()))?;
    Ok(Fuzzed {
        function: cfg.unit.function.clone(),
        report,
    })
}

/// loops then costs a fraction of a second of its slice, not seconds.
pub fn unit_limit(system_limit: Duration, timeout: Duration) -> Duration {
    (system_limit * 2)
        .max(Duration::from_millis(100))
        .min(timeout)
}

/// How a campaign fuzzes one unit for a slice, the same on the main node and on a
/// worker: CmpLog, the function's dictionary, the persistent harness, the run limit of
/// [`unit_limit`], and the rest of the slice given up once the unit stops finding.
#[allow(clippy::too_many_arguments)]
pub fn unit_fuzz_config(
    binary: &Binary,
    unit: trestle_abi::unit::Unit,
    out: PathBuf,
    time: Duration,
    system_limit: Duration,
    timeout: Duration,
    seed: u64,
    cores: usize,
) -> trestle_unit_fuzz::FuzzConfig {
    let (words, ints) = binary.dictionary_for(unit.context.fn_id);
    trestle_unit_fuzz::FuzzConfig {
        program: binary.path.clone(),
        unit,
        out,
        time,
        timeout: unit_limit(system_limit, timeout),
        seed,
        cmplog: true,
        dictionary: trestle_unit_fuzz::Dictionary { words, ints },
        progress: false,
        stop_on_crash: false,
        persistent: true,
        pin_core: None,
        cores,
        plateau: Some(Duration::from_secs(3)),
        goal: Vec::new(),
        goal_cmp: None,
        after_goal: Duration::ZERO,
        seeds: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trestle_abi::unit::{Origin, Param, ParamSite, Provenance, UNIT_MAGIC, UNIT_VERSION};

    /// A unit whose one parameter is stdin's rest from byte 4 of "set 1 2 +\n".
    fn stream_unit() -> Unit {
        let stdin = b"set 1 2 +\n".to_vec();
        Unit {
            magic: UNIT_MAGIC,
            version: UNIT_VERSION,
            binary_id: 1,
            function: "eval".into(),
            context: trestle_abi::Context {
                fn_id: 1,
                args: vec![],
                graph: Default::default(),
                locale: vec![],
                stdio_modes: vec![],
                fds: vec![],
                streams: vec![],
            },
            expected: None,
            provenance: Provenance {
                program: "/p".into(),
                test: "seed".into(),
                trace: "t".into(),
                pid: 1,
                seq: 0,
                call_index: 0,
            },
            params: vec![Param {
                site: ParamSite::Stream {
                    fd: 0,
                    file: None,
                    buffered: true,
                },
                kind: ParamKind::Stream { cut: 0 },
                original: stdin[4..].to_vec(),
                origins: vec![Origin {
                    input: InputRef::Stdin,
                    offset: 4,
                    len: 6,
                }],
                companions: vec![],
            }],
            system_test: SystemTest {
                stdin: Some(stdin),
                ..Default::default()
            },
        }
    }

    fn stdin(s: &[u8]) -> SystemTest {
        SystemTest {
            stdin: Some(s.to_vec()),
            ..Default::default()
        }
    }

    #[test]
    fn a_stream_parameter_takes_the_rest_of_tests_that_read_alike_up_to_it() {
        let unit = stream_unit();
        let long = [b"set ".as_slice(), &vec![b'9'; STREAM_CAP + 1]].concat();
        let tests = [
            stdin(b"set 7 7 * p\n"),
            stdin(b"get 7 7 * p\n"), // read differently before the call
            stdin(b"set 1 2 +\n"),   // the recorded value: nothing new
            stdin(&long),            // more than a parameter holds
            stdin(b"set 7 7 * p\n"), // the same again
            stdin(b"set q\n"),
        ];
        let seeds = stream_seeds(&unit, || tests.to_vec(), 10);
        let values: Vec<Vec<ParamValue>> = seeds
            .iter()
            .map(|s| trestle_abi::fuzz::decode_values(&unit.params, s))
            .collect();
        assert_eq!(
            values,
            vec![
                vec![ParamValue::Bytes(b"7 7 * p\n".to_vec())],
                vec![ParamValue::Bytes(b"q\n".to_vec())]
            ]
        );
        assert_eq!(
            stream_seeds(&unit, || tests.to_vec(), 1).len(),
            1,
            "at most max"
        );
        // A unit without a stream parameter starts from its recorded values only.
        let mut plain = unit.clone();
        plain.params[0].kind = ParamKind::Bytes {
            nul: false,
            resize: trestle_abi::unit::Resize::Fixed,
        };
        assert!(stream_seeds(&plain, || panic!("asked for tests"), 10).is_empty());
    }
}

//! `trestle lift`: its command-line arguments.

use super::parse_duration;
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `trestle lift`.
#[derive(Debug, Clone, clap::Args)]
pub struct LiftArgs {
    /// Output directories of `trestle fuzz` (each holds unit.unit, crashes/, queue/).
    #[arg(required = true)]
    pub fuzz_dirs: Vec<PathBuf>,
    /// The program to validate with, built without trestle-cc: plain, with
    /// AddressSanitizer, or for source-based coverage (-fprofile-instr-generate
    /// -fcoverage-mapping, which also decides "effective"). Build it with -g: crash
    /// signatures compare function names, inlined ones included.
    #[arg(long)]
    pub program: PathBuf,
    /// Output directory: alarms/, false-positives/, alarms.json, lift.json.
    #[arg(long)]
    pub out: PathBuf,
    /// Seed system tests (file or directory): with a coverage build, what they cover is
    /// the baseline a lifted test must add to in order to count as effective (default:
    /// the units' own system tests).
    #[arg(long)]
    pub seeds: Option<PathBuf>,
    /// The instrumented program the units run in, to read crash signatures of unit
    /// findings (default: the program each unit was carved from).
    #[arg(long)]
    pub harness: Option<PathBuf>,
    /// Wall-clock limit per system run.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Address-space limit per system run, MiB (not applied to sanitizer builds).
    #[arg(long, default_value_t = 4096)]
    pub memory_mb: u64,
    /// Lift at most this many queue entries per fuzz directory (0: crashes only).
    #[arg(long, default_value_t = 200)]
    pub max_queue: usize,
    /// Runs allowed for reducing each alarm (the time bound usually ends it first).
    #[arg(long, default_value_t = 100_000)]
    pub reduce_budget: usize,
    /// Time allowed for reducing each alarm to 1-minimal.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    pub reduce_time: std::time::Duration,
    /// Do not reduce alarms.
    #[arg(long)]
    pub no_reduce: bool,
    /// Run lifted tests without bubblewrap (still in a fresh directory, with rlimits).
    #[arg(long)]
    pub no_sandbox: bool,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

impl LiftArgs {
    /// The stage's options from the command line.
    pub fn options(&self) -> crate::lift::Options {
        crate::lift::Options {
            fuzz_dirs: self.fuzz_dirs.clone(),
            program: self.program.clone(),
            out: self.out.clone(),
            seeds: self.seeds.clone(),
            harness: self.harness.clone(),
            timeout: self.timeout,
            memory_mb: self.memory_mb,
            max_queue: self.max_queue,
            reduce_budget: self.reduce_budget,
            reduce_time: self.reduce_time,
            no_reduce: self.no_reduce,
            no_sandbox: self.no_sandbox,
            progress: !self.json,
        }
    }
}

/// Run `trestle lift` and say what it found: a summary on stderr, or JSON on stdout.
pub fn run(args: &LiftArgs) -> anyhow::Result<()> {
    let l = crate::lift::run(&args.options())?;
    let s = &l.stats;
    if args.json {
        crate::outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"stats": s, "alarms": l.alarms}))?
        );
    } else {
        eprintln!(
            "lifted {} unit crash(es), {} hang(s) and {} queue input(s) into {} system test(s): {} true alarm(s) ({} distinct; {} alarm(s) in all), {} effective ({:.1}% productive), {} false positive(s) suppressed{}",
            s.unit_crashes,
            s.unit_hangs,
            s.unit_queue,
            s.lifted_tests,
            s.true_alarm_tests,
            l.alarms.iter().filter(|a| a.matches_unit).count(),
            l.alarms.len(),
            s.effective,
            100.0 * s.productive_share(),
            s.false_positives,
            if s.coverage_measured { String::new() } else { " (coverage not measured: not a coverage build)".into() }
        );
        for a in l.alarms {
            eprintln!(
                "  alarm {}: {}",
                args.out.join("alarms").join(&a.id).display(),
                a.signature
            );
        }
    }
    Ok(())
}

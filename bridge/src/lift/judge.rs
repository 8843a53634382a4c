//! Lifting one fuzz directory: each unit finding becomes lifted system tests, which
//! run on the validation program and are judged a true alarm, another crash,
//! effective (new system coverage) or, for a unit crash, a false positive.

use super::queue::{beyond_system_edges, inputs_in, Candidate, HANGS_PER_UNIT};
use super::substitute::lift_variants;
use super::{Lifter, Origin, Probe, Probed, Substitution, SystemOutcome};
use crate::carve::units::read_unit;
use anyhow::{Context as _, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;
use trestle_abi::fuzz::{decode_values, ParamValue};
use trestle_abi::unit::{SystemTest, Unit};
use trestle_exec::sandbox::SandboxRun;
use trestle_exec::signature::{signal_number, CrashSignature};
use trestle_exec::systest::save_test;

/// Unit crashes of one unit with the same crash signature lifted at most this often
/// unless one of them is confirmed (then the rest are duplicates of that alarm).
pub const LIFTS_PER_UNIT_SIGNATURE: usize = 4;

/// What became of the unit crashes of one signature in one fuzz directory.
#[derive(Default)]
struct SignatureTally {
    tried: usize,
    confirmed: bool,
}

/// A unit finding being lifted: where it was found, the values lifted and, for a
/// crash, the unit's crash signature.
pub(super) struct Finding<'a> {
    /// The fuzz directory.
    pub(super) dir: &'a Path,
    /// The unit fuzzed.
    pub(super) unit: &'a Unit,
    /// The fuzzer's input.
    pub(super) candidate: &'a Candidate,
    /// The parameter values lifted.
    pub(super) values: &'a [ParamValue],
    /// The unit-level crash, for a crash.
    pub(super) unit_sig: Option<&'a CrashSignature>,
    /// Where the unit's findings came from.
    pub(super) origin: &'a Origin,
}

fn outcome_of(run: &SandboxRun, new_coverage: Option<usize>) -> SystemOutcome {
    let err = String::from_utf8_lossy(&run.stderr);
    let tail: String = err
        .lines()
        .rev()
        .take(12)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect::<Vec<_>>()
        .join("\n");
    SystemOutcome {
        status: run.status.to_string(),
        crash: run.crash.clone(),
        limit: run.limit.clone(),
        new_coverage,
        stderr_tail: tail,
    }
}

/// How a lifted test the probe settled ended, for a false positive's record.
fn probed_outcome(p: Probed) -> SystemOutcome {
    SystemOutcome {
        status: "no crash on the fuzzing build".into(),
        crash: None,
        limit: None,
        new_coverage: Some(usize::from(p == Probed::NewCoverage)),
        stderr_tail: String::new(),
    }
}

impl Lifter {
    /// Lift everything one fuzz directory holds: its crashes, then up to
    /// `max_queue` queue entries; with `probe`, each lifted test runs there first
    /// ([`Probe`]).
    pub fn lift_dir<'p>(
        &mut self,
        dir: &Path,
        max_queue: usize,
        origin: &Origin,
        probe: Option<&mut (dyn Probe + 'p)>,
    ) -> Result<()> {
        let unit = read_unit(&dir.join("unit.unit"))
            .with_context(|| format!("{} is not a trestle fuzz directory", dir.display()))?;
        self.lift_findings(&unit, dir, max_queue, origin, probe)
    }

    /// Lift what fuzzing `unit` left in `dir` (its fuzz directory): as
    /// [`Lifter::lift_dir`], with the unit as the caller holds it.
    pub fn lift_findings<'p>(
        &mut self,
        unit: &Unit,
        dir: &Path,
        max_queue: usize,
        origin: &Origin,
        mut probe: Option<&mut (dyn Probe + 'p)>,
    ) -> Result<()> {
        let dir = &std::fs::canonicalize(dir)
            .with_context(|| format!("fuzz directory {}", dir.display()))?;
        // An interrupted fuzz run leaves its objectives unsorted in .solutions.
        let mut candidates: Vec<Candidate> = inputs_in(&dir.join("crashes"))?
            .into_iter()
            .chain(inputs_in(&dir.join(".solutions"))?)
            .map(|input| Candidate {
                input,
                crash: true,
                hang: false,
                new_edges: None,
            })
            .collect();
        candidates.extend(
            inputs_in(&dir.join("timeouts"))?
                .into_iter()
                .take(HANGS_PER_UNIT)
                .map(|input| Candidate {
                    input,
                    crash: false,
                    hang: true,
                    new_edges: None,
                }),
        );
        let queue = self.queue_to_lift(dir)?;
        candidates.extend(
            queue
                .into_iter()
                .take(max_queue)
                .map(|(input, new_edges)| Candidate {
                    input,
                    crash: false,
                    hang: false,
                    new_edges,
                }),
        );
        let started = Instant::now();
        let total = candidates.len();
        self.lifting
            .total
            .store(total, std::sync::atomic::Ordering::Relaxed);
        self.lifting
            .done
            .store(0, std::sync::atomic::Ordering::Relaxed);
        let mut tally: BTreeMap<String, SignatureTally> = BTreeMap::new();
        for (k, c) in candidates.iter().enumerate() {
            if self.deadline.is_some_and(|d| Instant::now() >= d) {
                self.stats.not_lifted_for_time += total - k;
                break;
            }
            // An entry whose new edges a test lifted before it reached already (one
            // that was effective) adds nothing now.
            if let (Some(new), Some(covered)) = (&c.new_edges, &self.system_edges) {
                if new
                    .iter()
                    .all(|&i| covered.get(i).copied().unwrap_or(false))
                {
                    self.stats.queue_already_covered += 1;
                    continue;
                }
            }
            self.lifting
                .done
                .store(k, std::sync::atomic::Ordering::Relaxed);
            let effective_before = self.stats.effective;
            self.lift_one(dir, unit, c, origin, &mut tally, probe.as_deref_mut())
                .with_context(|| format!("lifting {}", c.input.display()))?;
            if let (true, Some(new), Some(covered)) = (
                self.stats.effective > effective_before,
                &c.new_edges,
                &mut self.system_edges,
            ) {
                for &i in new {
                    if let Some(e) = covered.get_mut(i) {
                        *e = true;
                    }
                }
            }
            if self.progress && (k + 1 == total || (k + 1) % 20 == 0) {
                log::info!(
                    "[lift {:>4.0}s] {}: {}/{} inputs, {} lifted tests, {} alarm(s), {} effective, {} false positive(s)",
                    started.elapsed().as_secs_f64(),
                    unit.function,
                    k + 1,
                    total,
                    self.stats.lifted_tests,
                    self.store.len(),
                    self.stats.effective,
                    self.stats.false_positives
                );
            }
        }
        self.write_index()
    }

    /// The queue entries of the fuzz directory `dir` to lift, in order: with the
    /// system fuzzer's edges known, those reaching edges new to it, ranked, with
    /// those new edges; otherwise all of them.
    fn queue_to_lift(&mut self, dir: &Path) -> Result<Vec<(PathBuf, Option<Vec<usize>>)>> {
        let queue = inputs_in(&dir.join("queue"))?;
        Ok(match &self.system_edges {
            Some(covered) => {
                let before = queue.len();
                let seed_path = dir.join(trestle_unit_fuzz::DRY_RUN_INPUT);
                let seed = match std::fs::read(&seed_path) {
                    Ok(bytes) => Some(bytes),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                    Err(e) => {
                        return Err(e)
                            .with_context(|| format!("cannot read {}", seed_path.display()))
                    }
                };
                let ranked = beyond_system_edges(queue, covered, seed.as_deref())?;
                self.stats.queue_already_covered += before - ranked.entries.len();
                if let Some((n, why)) = &ranked.unreadable {
                    self.stats.queue_metadata_unreadable += n;
                    if !std::mem::replace(&mut self.metadata_warned, true) {
                        log::info!(
                            "trestle lift: warning: the LibAFL metadata of {n} queue entries in {} could not be read ({why}); they are lifted unranked (further cases are counted in lift.json)",
                            dir.display()
                        );
                    }
                }
                ranked.entries
            }
            None => queue.into_iter().map(|p| (p, None)).collect(),
        })
    }

    /// Lift one unit finding `c` of `unit` and record what its lifted tests show.
    fn lift_one<'p>(
        &mut self,
        dir: &Path,
        unit: &Unit,
        c: &Candidate,
        origin: &Origin,
        tally: &mut BTreeMap<String, SignatureTally>,
        mut probe: Option<&mut (dyn Probe + 'p)>,
    ) -> Result<()> {
        let Some((values, unit_sig)) = self.prepare(dir, unit, c, tally)? else {
            return Ok(());
        };
        let f = Finding {
            dir,
            unit,
            candidate: c,
            values: &values,
            unit_sig: unit_sig.as_ref(),
            origin,
        };
        let variants = lift_variants(unit, &values);
        if variants.is_empty() {
            if c.crash {
                self.false_positive(
                    &f,
                    None,
                    "the parameter values equal the recorded ones: nothing to lift",
                )?;
            }
            return Ok(());
        }
        // Queue entries: the all-places variant only (they are many); hangs, the
        // first two (each may wait for the time limit).
        let variants: Vec<_> = match (c.crash, c.hang) {
            (true, _) => variants,
            (false, true) => variants.into_iter().take(2).collect(),
            (false, false) => variants.into_iter().take(1).collect(),
        };
        let mut last: Option<(SystemTest, SystemOutcome)> = None;
        for (test, subs) in variants {
            match self.judge(&f, test, &subs, tally, probe.as_deref_mut())? {
                Some(unsettled) => last = Some(unsettled),
                None => return Ok(()),
            }
        }
        if c.crash {
            let reason = match &last {
                Some((_, o)) => match &o.limit {
                    Some(limit) => format!("no crash at system level: ran into the {limit} limit"),
                    None => format!("no crash at system level ({})", o.status),
                },
                None => "nothing lifted".into(),
            };
            self.false_positive(&f, last.as_ref().map(|(t, o)| (t, o)), &reason)?;
        }
        Ok(())
    }

    /// Count a unit finding and read what lifting it needs: the values to lift (for
    /// a crash, only those the crash needs, when the harness can tell) and a crash's
    /// unit-level signature. `None`: not lifted, as enough unit crashes with its
    /// signature were.
    fn prepare(
        &mut self,
        dir: &Path,
        unit: &Unit,
        c: &Candidate,
        tally: &mut BTreeMap<String, SignatureTally>,
    ) -> Result<Option<(Vec<ParamValue>, Option<CrashSignature>)>> {
        let bytes = std::fs::read(&c.input)
            .with_context(|| format!("cannot read {}", c.input.display()))?;
        let values = decode_values(&unit.params, &bytes);
        if c.hang {
            self.stats.unit_hangs += 1;
            return Ok(Some((values, None)));
        }
        if !c.crash {
            self.stats.unit_queue += 1;
            return Ok(Some((values, None)));
        }
        let Some(sig) = self.unit_signature(dir, unit, &c.input)? else {
            // A hang, not a crash: trying which values it needs would wait for the
            // limit once per value (on dc, most of a lifting slice went so).
            self.stats.unit_hangs += 1;
            return Ok(None);
        };
        self.stats.unit_crashes += 1;
        let t = tally.entry(sig.key()).or_default();
        if t.confirmed || t.tried >= LIFTS_PER_UNIT_SIGNATURE {
            self.stats.same_signature_skipped += 1;
            return Ok(None);
        }
        t.tried += 1;
        let values = match signal_number(&sig.kind) {
            Some(signal) => self.essential_values(dir, unit, &values, signal)?,
            None => values,
        };
        Ok(Some((values, Some(sig))))
    }

    /// Run one lifted test of `f` and act on what it shows: a crash is an alarm, new
    /// coverage an effective test (and, for a unit crash, a false positive). `None`
    /// when that settled the finding; otherwise the test and how it went.
    fn judge(
        &mut self,
        f: &Finding,
        test: SystemTest,
        subs: &[Substitution],
        tally: &mut BTreeMap<String, SignatureTally>,
        probe: Option<&mut (dyn Probe + '_)>,
    ) -> Result<Option<(SystemTest, SystemOutcome)>> {
        if let Some(probe) = probe {
            match probe.probe(&test)? {
                // The validation build decides.
                Probed::Objective | Probed::Unfit => {}
                Probed::NewCoverage => {
                    self.stats.lifted_tests += 1;
                    self.stats.settled_by_probe += 1;
                    // The system fuzzer has it in its queue already.
                    self.keep_effective(&test, false)?;
                    if f.candidate.crash {
                        let outcome = probed_outcome(Probed::NewCoverage);
                        self.false_positive(
                            f,
                            Some((&test, &outcome)),
                            "no crash at system level (the lifted test is effective: new coverage)",
                        )?;
                    }
                    return Ok(None);
                }
                Probed::Nothing => {
                    self.stats.lifted_tests += 1;
                    self.stats.settled_by_probe += 1;
                    return Ok(Some((test, probed_outcome(Probed::Nothing))));
                }
            }
        }
        self.stats.lifted_tests += 1;
        let (run, new_cov) = self.run_system(&test)?;
        if run.limit.is_some() {
            self.stats.limited += 1;
        }
        let outcome = outcome_of(&run, new_cov);
        if let Some(sys) = &run.crash {
            let same = f
                .unit_sig
                .is_some_and(|u| same_crash(u, sys, &f.unit.function));
            if same {
                self.stats.true_alarm_tests += 1;
                if let Some(u) = f.unit_sig {
                    tally.entry(u.key()).or_default().confirmed = true;
                }
            } else {
                self.stats.other_crash_tests += 1;
            }
            self.alarm(f, &test, subs, sys, same)?;
            return Ok(None);
        }
        // A unit crash whose lifted test the validation program survives may crash
        // the coverage build (undefined behaviour the optimiser hides): an alarm,
        // flagged build-dependent, as for a system crash.
        if f.candidate.crash && self.alarm_elsewhere(f, &test, subs, &outcome.status)? {
            return Ok(None);
        }
        if new_cov.is_some_and(|n| n > 0) {
            self.keep_effective(&test, true)?;
            if f.candidate.crash {
                // Real coverage, but not the unit's crash.
                self.false_positive(
                    f,
                    Some((&test, &outcome)),
                    "no crash at system level (the lifted test is effective: new coverage)",
                )?;
            }
            return Ok(None);
        }
        Ok(Some((test, outcome)))
    }

    /// Count an effective lifted test and keep it on disk (the system tests a
    /// campaign produced are its queue, its crashes and these) and, with
    /// `for_campaign`, for the campaign's system fuzzer.
    fn keep_effective(&mut self, test: &SystemTest, for_campaign: bool) -> Result<()> {
        self.stats.effective += 1;
        let eff_dir = self.out.join("effective");
        std::fs::create_dir_all(&eff_dir)
            .with_context(|| format!("cannot create {}", eff_dir.display()))?;
        save_test(
            test,
            &eff_dir.join(format!("{:06}.json", self.stats.effective)),
        )?;
        if for_campaign {
            self.effective_tests.push(test.clone());
        }
        Ok(())
    }
}

/// Whether the system crash `sys` is the unit's crash `unit` (of `function`). A unit
/// crash whose stack could not be read (a handler of the program's own took the
/// signal) still names its function. A system crash named by a stack scan
/// ([`CrashSignature::from_scan`]) is judged as one without frames: the scan names
/// callers above the smashed part, which a unit's stack, cut at its function, does
/// not reach.
pub(super) fn same_crash(unit: &CrashSignature, sys: &CrashSignature, function: &str) -> bool {
    let unwound;
    let sys = if sys.from_scan() {
        unwound = CrashSignature {
            frames: Vec::new(),
            ..sys.clone()
        };
        &unwound
    } else {
        sys
    };
    unit.matches(sys)
        || (unit.frames.is_empty()
            && unit.class() == sys.class()
            && sys.frames.first().is_some_and(|f| f == function))
}

#[cfg(test)]
mod tests {
    use super::*;
    use trestle_exec::signature::Frame;

    fn sig(frames: &[&str], scanned: bool) -> CrashSignature {
        CrashSignature {
            kind: "SIGSEGV".into(),
            frames: frames.iter().map(|f| f.to_string()).collect(),
            stack: frames
                .iter()
                .map(|f| Frame {
                    function: f.to_string(),
                    file: Some("smash.c".into()),
                    line: 3,
                    module: "/bin/smash".into(),
                    own: true,
                    scanned,
                })
                .collect(),
            origin: None,
        }
    }

    #[test]
    fn a_system_crash_named_by_a_stack_scan_is_judged_as_one_without_frames() {
        let scanned = sig(&["process_input", "main"], true);
        // A unit that could not read its stack either: the same crash, as two crashes
        // without frames were before the scan.
        assert!(same_crash(&sig(&[], false), &scanned, "parse_field"));
        // The callers a scan found say nothing of where a unit with frames crashed.
        assert!(!same_crash(
            &sig(&["process_input"], false),
            &scanned,
            "process_input"
        ));
        // Unwound, the same frames match.
        assert!(same_crash(
            &sig(&["process_input"], false),
            &sig(&["process_input", "main"], false),
            "process_input"
        ));
    }
}

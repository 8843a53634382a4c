//! Recording what lifting confirmed or refuted: an alarm (deduplicated by crash
//! signature, reduced, with its provenance, reproducer and the unit as C) under
//! `alarms/<id>/`, and a false positive with its reason under `false-positives/`.
//! Each is written in a temporary directory and renamed into place whole.

use super::judge::Finding;
use super::records::{self, unit_source};
use super::summary::{origin_words, summary_md, system_summary_md, with_reproducer, write_script};
use super::{
    AlarmEntry, BuildCheck, FalsePositive, Lifter, Origin, Provenance, Substitution, SystemOutcome,
};
use crate::carve::units::safe_name;
use crate::validate::reduce::{reduce, test_size, ReduceStats};
use anyhow::{Context as _, Result};
use std::path::{Path, PathBuf};
use std::time::Instant;
use trestle_abi::fuzz::ParamValue;
use trestle_abi::unit::{SystemTest, Unit};
use trestle_exec::binary::Binary;
use trestle_exec::files;
use trestle_exec::sandbox::{SandboxRun, FILE_SIZE_LIMIT};
use trestle_exec::signature::{CrashSignature, FrameFilter, HANG, OUT_OF_MEMORY};
use trestle_exec::systest::{load_test, save_test, to_json};

impl Lifter {
    /// A crash system-level fuzzing found (`name`, in `source`): validated with the
    /// validation program like a lifted test, and reported if it reproduces. Returns
    /// whether it did.
    pub fn system_crash(
        &mut self,
        test: &SystemTest,
        name: &str,
        source: &Path,
        origin: &Origin,
    ) -> Result<bool> {
        Ok(!matches!(
            self.confirm_crash(test, name, source, origin)?,
            Confirmed::NotReproduced(_)
        ))
    }

    /// Validate a crashing system test found elsewhere (`name`, in `source`) with the
    /// validation program and report it if it reproduces, as a new alarm or one more
    /// finding of a listed one. `origin.found_by` says where it came from when it was
    /// not this campaign's system fuzzer (a triaged AFL++ crash, say).
    pub fn confirm_crash(
        &mut self,
        test: &SystemTest,
        name: &str,
        source: &Path,
        origin: &Origin,
    ) -> Result<Confirmed> {
        self.confirm(test, name, source, origin, false)
    }

    /// Validate a system test that ran into the time limit (`name`, in `source`), as
    /// [`Lifter::confirm_crash`] does a crash: it is a finding when the validation
    /// program hangs on it too, twice; its alarm is named
    /// by where (the stack the CPU limit stopped it at).
    pub fn confirm_hang(
        &mut self,
        test: &SystemTest,
        name: &str,
        source: &Path,
        origin: &Origin,
    ) -> Result<Confirmed> {
        self.confirm(test, name, source, origin, true)
    }

    fn confirm(
        &mut self,
        test: &SystemTest,
        name: &str,
        source: &Path,
        origin: &Origin,
        hang: bool,
    ) -> Result<Confirmed> {
        let found_by = origin.found_by.as_deref();
        let run = self.run_for(&self.program, test, hang)?;
        // The build it is confirmed on: the validation program, or where it does not
        // reproduce there, the coverage build if that crashes (or hangs) on it, which
        // makes it a build-dependent finding (`not_on_validation` says how the
        // validation program ended).
        let mut on = self.program.clone();
        let mut not_on_validation = None;
        let sys = match finding(&run, hang) {
            Some(sys) => sys,
            None => {
                let how = match &run.limit {
                    Some(limit) => format!("{} ({limit})", run.status),
                    None => run.status.to_string(),
                };
                match self.reproduce_elsewhere(test, hang)? {
                    Some((program, sys)) => {
                        on = program;
                        not_on_validation = Some(how);
                        sys
                    }
                    None => return Ok(Confirmed::NotReproduced(how)),
                }
            }
        };
        let (sys, named_by) = self.frames_from_elsewhere(sys, test, &on)?;
        let key = sys.key();
        if let Some(id) = self.count_duplicate(&key)? {
            return Ok(Confirmed::Known(id));
        }
        if sys.kind == HANG || sys.kind == OUT_OF_MEMORY {
            // A hang once may be a slow machine: it must hang again. Not necessarily
            // in the same place: a slow regex match is stopped in a different function
            // of the matcher each time (sed's hangs of the 2-hour soak, two of them
            // dropped as "hung once, then signal 24"); the first place names it. So
            // must running out of memory (wherever the last allocation was).
            let filter = FrameFilter::of(&on);
            let again = self
                .sandbox_for(&sys.kind)
                .run_once(&on, test, &[], &filter, None)?;
            if finding_like(again.clone(), &sys.key()).is_none() {
                let what = if sys.kind == HANG {
                    "hung"
                } else {
                    "ran out of memory"
                };
                return Ok(Confirmed::NotReproduced(format!(
                    "{what} once, then {}",
                    again.status
                )));
            }
        }
        let confirmed = self.epoch.elapsed().as_secs_f64();
        let function = sys
            .frames
            .first()
            .cloned()
            .unwrap_or_else(|| "unknown".into());
        let id = format!("{}-{:08x}", safe_name(&function), fnv32(&key));
        let (tmp, reduced, rstats) = self.stage_alarm(&id, test, &key, &on)?;
        let provenance = Provenance::System(Box::new(records::SystemFind {
            system_test: records::FoundTest {
                name: name.to_owned(),
                file: source.to_owned(),
                test: to_json(test),
            },
            signature: sys.to_string(),
            stack: records::stack_lines(&sys),
            frames: sys.stack.clone(),
            reduced_test: records::ReducedTest {
                file: files::REDUCED.into(),
                reduction: rstats.clone(),
            },
            validated_with: on.clone(),
            sandboxed: self.sandbox.isolated(),
            found_on: origin.node.clone(),
            triaged_from: found_by.map(str::to_owned),
        }));
        files::write(&tmp.join(files::PROVENANCE), &provenance)?;
        // A find of this campaign's system fuzzer: whether it descends from a lifted test.
        let descent = origin.descent.clone().filter(|_| found_by.is_none());
        let mut md = system_summary_md(
            &sys,
            &on,
            &reduced,
            &rstats,
            name,
            source,
            found_by,
            descent.as_ref(),
        );
        md += &named_by_md(named_by.as_deref());
        std::fs::write(tmp.join("summary.md"), md)?;
        let entry = AlarmEntry {
            id: id.clone(),
            function,
            unit_function: None,
            signature: sys.to_string(),
            key,
            matches_unit: true,
            source: if found_by.is_some() {
                "triage"
            } else {
                "system"
            }
            .into(),
            candidates: 1,
            size_lifted: test_size(test),
            size_reduced: test_size(&reduced),
            found_at: Some(confirmed),
            reduction_pending: rstats.pending,
            found_on: origin.node.clone(),
            roadblock: None,
            descends_from: descent,
            builds: Vec::new(),
        };
        self.publish_alarm(&tmp, entry, not_on_validation)?;
        Ok(Confirmed::New(id))
    }

    /// The coverage build and how it crashes on `test` (with `hang`, hangs on it), if
    /// it does. Only a build the user gave confirms a finding: one that crashes
    /// nothing but trestle's own fuzzing build is not reported (it may be the
    /// instrumentation's doing, a deeper stack, say).
    fn reproduce_elsewhere(
        &self,
        test: &SystemTest,
        hang: bool,
    ) -> Result<Option<(PathBuf, CrashSignature)>> {
        let Some(program) = &self.coverage_program else {
            return Ok(None);
        };
        let run = self.run_for(program, test, hang)?;
        Ok(finding(&run, hang).map(|sys| (program.clone(), sys)))
    }

    /// A run of `program` on a candidate: a crash, or with `hang` a test that ran
    /// into the time limit, in the hang sandbox. One that spun there while its memory
    /// grew past an eighth of the memory limit runs again with the crash sandbox's
    /// longer limits, where it may run out of memory instead: a runaway allocation
    /// is found as a hang first (mawk's `$99999999999` allocates a gigabyte a second).
    fn run_for(&self, program: &Path, test: &SystemTest, hang: bool) -> Result<SandboxRun> {
        let filter = FrameFilter::of(program);
        let sandbox = self.sandbox_for(if hang { HANG } else { "" });
        let run = sandbox.run(program, test, &[], &filter, None)?;
        let memory = self.sandbox.limits.memory;
        // (No limit, as for a sanitizer build: nothing to run out of.)
        if hang && run.hang.is_some() && memory > 0 && run.max_rss_kib * 1024 * 8 >= memory {
            let longer = self.sandbox.run(program, test, &[], &filter, None)?;
            if longer.memory.is_some() {
                return Ok(longer);
            }
        }
        Ok(run)
    }

    /// The sandbox that confirms and reduces findings of `class`: the hang sandbox
    /// for hangs, the crash sandbox for the rest.
    fn sandbox_for(&self, class: &str) -> &trestle_exec::sandbox::Sandbox {
        match &self.hang_sandbox {
            Some(s) if class == HANG => s,
            _ => &self.sandbox,
        }
    }

    /// A crash whose stack shows none of the program's own frames on the build that
    /// confirmed it (`on`; a smashed stack unwinds to nothing on one build and not on
    /// another) takes its frames from the first other build the campaign knows that
    /// crashes the same way (the same class) on `test` with frames, so that the alarm
    /// is named by the code and merges with the same bug found with frames: tac's
    /// long-record overflow came out as `SIGSEGV (no frames)` on the coverage build
    /// beside its named alarm. The kind stays the confirming build's; the role of the
    /// build that gave the frames is returned with it. Hangs and running out of memory
    /// keep theirs (where one spins is that build's). Frames from a stack scan
    /// ([`CrashSignature::from_scan`]) are a weaker source than another build's
    /// unwinder: they give way to those, and stay when no build has them.
    fn frames_from_elsewhere(
        &self,
        sys: CrashSignature,
        test: &SystemTest,
        on: &Path,
    ) -> Result<(CrashSignature, Option<String>)> {
        if (!sys.frames.is_empty() && !sys.from_scan())
            || sys.kind == HANG
            || sys.kind == OUT_OF_MEMORY
        {
            return Ok((sys, None));
        }
        let coverage = self
            .coverage_program
            .iter()
            .map(|p| ("coverage".to_owned(), p.clone()));
        let mut tried = vec![on.to_path_buf()];
        for (role, program) in self.other_builds.iter().cloned().chain(coverage) {
            if tried.contains(&program) {
                continue;
            }
            tried.push(program.clone());
            let Some(other) = finding(&self.run_for(&program, test, false)?, false) else {
                continue;
            };
            if other.class() == sys.class() && !other.frames.is_empty() && !other.from_scan() {
                return Ok((
                    CrashSignature {
                        kind: sys.kind,
                        frames: other.frames,
                        stack: other.stack,
                        origin: sys.origin,
                    },
                    Some(role),
                ));
            }
        }
        Ok((sys, None))
    }

    /// If an alarm with the crash `key` is listed already, count one more finding of
    /// it and return its id.
    fn count_duplicate(&mut self, key: &str) -> Result<Option<String>> {
        let Some(a) = self.store.matching_mut(key) else {
            return Ok(None);
        };
        a.candidates += 1;
        let id = a.id.clone();
        self.write_index()?;
        Ok(Some(id))
    }

    /// A fresh `alarms/.tmp-<id>` holding `test` (`lifted.json`), its reduction
    /// (`reduced.json`; `test` itself while the reduction is deferred) and
    /// `reproduce.sh`; returns it with the reduced test.
    fn stage_alarm(
        &self,
        id: &str,
        test: &SystemTest,
        key: &str,
        on: &Path,
    ) -> Result<(PathBuf, SystemTest, ReduceStats)> {
        let tmp = self.store.stage(id)?;
        save_test(test, &tmp.join("lifted.json"))?;
        let (reduced, rstats) = if self.defer_reduction && self.reduce_budget.is_some() {
            (test.clone(), ReduceStats::none(test, true))
        } else {
            self.reduce_alarm(test, key, Instant::now() + self.reduce_time, on)?
        };
        save_test(&reduced, &tmp.join("reduced.json"))?;
        write_script(&tmp.join("reproduce.sh"), on, &reduced)?;
        Ok((tmp, reduced, rstats))
    }

    /// Move a staged alarm directory to `alarms/<id>` (replacing one left by an
    /// earlier run) and list the alarm, with how its test ran on the other builds.
    /// `not_on_validation` says how the validation program ended when the alarm was
    /// confirmed on another build.
    fn publish_alarm(
        &mut self,
        tmp: &Path,
        mut entry: AlarmEntry,
        not_on_validation: Option<String>,
    ) -> Result<()> {
        if !self.other_builds.is_empty() {
            // The reduced test (the lifted one while its reduction waits): a lifted
            // test may hold more than one bug, and a build without this one would
            // stop at another.
            entry.builds = self.check_builds(
                &load_test(&tmp.join(files::REDUCED))?,
                &entry,
                not_on_validation,
            )?;
            if entry.build_dependent() {
                let md = with_builds_md(
                    std::fs::read_to_string(tmp.join("summary.md")).unwrap_or_default(),
                    &entry,
                );
                std::fs::write(tmp.join("summary.md"), md).with_context(|| {
                    format!("cannot write {}", tmp.join("summary.md").display())
                })?;
            }
        }
        self.store.publish(tmp, entry)?;
        self.stats.alarms = self.store.len();
        self.write_index()
    }

    /// Run `test`, which crashed (or hung) a build as `entry` says, on each other
    /// build: the validation build first (whether it reproduced there, said by
    /// `not_on_validation`), then whether each reproduces (the same crash, see
    /// [`same_crash`], or a hang), twice before it counts as not. A crash of the same
    /// class whose stack could not be read there (or was named by a stack scan, which
    /// names callers above the damage) counts as the same, and so does a hang
    /// for an out-of-memory alarm and the reverse ([`runaway`]): nothing says
    /// otherwise (mawk's `sprintf("%663163082.1f")` overruns the stack of the plain
    /// build's `do_printf`, and leaves the coverage and fuzzing builds without frames;
    /// calling that build-dependent sent the reader after undefined behaviour).
    fn check_builds(
        &self,
        test: &SystemTest,
        entry: &AlarmEntry,
        not_on_validation: Option<String>,
    ) -> Result<Vec<BuildCheck>> {
        let class = entry.key.split('@').next().unwrap_or_default();
        let sandbox = self.sandbox_for(class);
        let mut checks = vec![BuildCheck {
            role: "validation".into(),
            program: self.program.clone(),
            reproduces: not_on_validation.is_none(),
            ended: not_on_validation.unwrap_or_else(|| entry.signature.clone()),
        }];
        for (role, program) in &self.other_builds {
            let filter = FrameFilter::of(program);
            let mut ended = String::new();
            let mut reproduces = false;
            for _ in 0..2 {
                let run = sandbox.run(program, test, &[], &filter, None)?;
                let found = on_other_build(&run, entry);
                ended = match (&found, &run.crash, &run.limit) {
                    (Some(how), _, _) => how.clone(),
                    (None, Some(other), _) => other.to_string(),
                    (None, None, Some(limit)) => format!("{} ({limit})", run.status),
                    (None, None, None) => run.status.to_string(),
                };
                if found.is_some() {
                    reproduces = true;
                    break;
                }
            }
            checks.push(BuildCheck {
                role: role.clone(),
                program: program.clone(),
                reproduces,
                ended,
            });
        }
        Ok(checks)
    }

    /// `test` reduced (until `until` at the latest) to a smaller one crashing `on` (a
    /// build of the program) with `key`.
    pub(super) fn reduce_alarm(
        &self,
        test: &SystemTest,
        key: &str,
        until: Instant,
        on: &Path,
    ) -> Result<(SystemTest, ReduceStats)> {
        match self.reduce_budget {
            Some(budget) => {
                let sandbox = self.sandbox_for(key.split('@').next().unwrap_or_default());
                let filter = FrameFilter::of(on);
                let mut keep = |t: &SystemTest| -> Result<bool> {
                    let run = sandbox.run_once(on, t, &[], &filter, None)?;
                    Ok(finding_like(run, key)
                        .is_some_and(|s| CrashSignature::keys_match(&s.key(), key)))
                };
                reduce(test, budget, Some(until), &mut keep)
            }
            None => Ok((test.clone(), ReduceStats::none(test, false))),
        }
    }

    /// The alarms whose reduction is still to come (their ids), first found first.
    pub fn pending_reductions(&self) -> Vec<String> {
        let mut pending: Vec<&AlarmEntry> = self
            .store
            .alarms()
            .filter(|a| a.reduction_pending)
            .collect();
        pending.sort_by(|a, b| {
            a.found_at
                .unwrap_or(f64::MAX)
                .total_cmp(&b.found_at.unwrap_or(f64::MAX))
        });
        pending.into_iter().map(|a| a.id.clone()).collect()
    }

    /// Reduce the alarm `id`, whose reduction was deferred, for at most the reduce
    /// time and not past `deadline`. Returns false, doing nothing, when there is no
    /// time left for it (under a second).
    pub fn reduce_pending(&mut self, id: &str, deadline: Instant) -> Result<bool> {
        let until = (Instant::now() + self.reduce_time).min(deadline);
        if until <= Instant::now() + std::time::Duration::from_secs(1) {
            return Ok(false);
        }
        let Some(entry) = self
            .store
            .alarms()
            .find(|a| a.id == id && a.reduction_pending)
            .cloned()
        else {
            return Ok(true);
        };
        self.reduce_one(&entry, until)?;
        Ok(true)
    }

    /// Reduce one deferred alarm and rewrite its files: `reduced.json`,
    /// `reproduce.sh`, the reduction in `provenance.json` and `summary.md`.
    fn reduce_one(&mut self, entry: &AlarmEntry, until: Instant) -> Result<()> {
        let dir = self.store.alarm_dir(&entry.id);
        let found = load_test(&dir.join(files::LIFTED))?;
        let on = entry.confirmed_on().unwrap_or(&self.program).to_owned();
        let (reduced, rstats) = self.reduce_alarm(&found, &entry.key, until, &on)?;
        files::write_atomic(
            &dir.join(files::REDUCED),
            &serde_json::to_vec_pretty(&to_json(&reduced))?,
        )?;
        write_script(&dir.join("reproduce.sh"), &on, &reduced)?;
        let mut provenance: Provenance = files::read(&dir.join(files::PROVENANCE))?;
        provenance.reduced_test_mut().reduction = rstats.clone();
        files::write(&dir.join(files::PROVENANCE), &provenance)?;
        let md_path = dir.join("summary.md");
        let mut md = std::fs::read_to_string(&md_path)
            .with_context(|| format!("cannot read {}", md_path.display()))?;
        if let Some(with) = with_reproducer(
            &md,
            (&found, &ReduceStats::none(&found, true)),
            (&reduced, &rstats),
        ) {
            md = with;
        }
        // The other builds were checked on the lifted test, which may have stopped
        // at another bug first on one of them; check them again on the reduced one.
        let mut checked = entry.clone();
        if !entry.builds.is_empty() {
            let not_on_validation = entry
                .builds
                .iter()
                .find(|b| b.role == "validation" && !b.reproduces)
                .map(|b| b.ended.clone());
            checked.builds = self.check_builds(&reduced, entry, not_on_validation)?;
            md = with_builds_md(md, &checked);
        }
        files::write_atomic(&md_path, md.as_bytes())?;
        if let Some(a) = self.store.get_mut(&entry.key) {
            a.size_reduced = rstats.size_after;
            a.reduction_pending = false;
            a.builds = checked.builds;
        }
        self.write_index()
    }

    fn binary(&mut self, path: &Path) -> Result<&Binary> {
        if !self.binaries.contains_key(path) {
            self.binaries.insert(path.to_owned(), Binary::load(path)?);
        }
        Ok(&self.binaries[path])
    }

    /// Record a unit finding that did not hold at system level, with `reason` and the
    /// lifted test that showed it, when there was one.
    pub(super) fn false_positive(
        &mut self,
        f: &Finding,
        lifted: Option<(&SystemTest, &SystemOutcome)>,
        reason: &str,
    ) -> Result<()> {
        self.stats.false_positives += 1;
        let record = FalsePositive {
            function: f.unit.function.clone(),
            reason: reason.to_owned(),
            unit_input: f.candidate.input.clone(),
            values: describe_values(f.unit, f.values),
            unit_signature: f.unit_sig.map(|s| s.to_string()),
            system: lifted.map(|(_, o)| o.clone()),
            seed_test: self.origin_of(f.unit).0,
        };
        self.store.false_positive(
            &safe_name(&f.unit.function),
            lifted.map(|(t, _)| t),
            &record,
        )
    }

    /// Record a lifted test that crashed the program with `sys` (`matches_unit`: the
    /// unit's crash), unless an alarm with that crash is listed already.
    pub(super) fn alarm(
        &mut self,
        f: &Finding,
        lifted: &SystemTest,
        subs: &[Substitution],
        sys: &CrashSignature,
        matches_unit: bool,
    ) -> Result<()> {
        self.alarm_on(f, lifted, subs, sys, matches_unit, None)
    }

    /// A lifted test that does not crash the validation program (it ended `how`):
    /// an alarm confirmed on the coverage build, flagged build-dependent, when that
    /// build crashes on it; `false` when it does not (or there is none).
    pub(super) fn alarm_elsewhere(
        &mut self,
        f: &Finding,
        lifted: &SystemTest,
        subs: &[Substitution],
        how: &str,
    ) -> Result<bool> {
        let Some((program, sys)) = self.reproduce_elsewhere(lifted, false)? else {
            return Ok(false);
        };
        let matches_unit = f
            .unit_sig
            .is_some_and(|u| super::judge::same_crash(u, &sys, &f.unit.function));
        self.alarm_on(
            f,
            lifted,
            subs,
            &sys,
            matches_unit,
            Some((program, how.to_owned())),
        )?;
        Ok(true)
    }

    /// [`Lifter::alarm`], confirmed on the validation program or, with `elsewhere`,
    /// on that build where the validation program ended as it says.
    fn alarm_on(
        &mut self,
        f: &Finding,
        lifted: &SystemTest,
        subs: &[Substitution],
        sys: &CrashSignature,
        matches_unit: bool,
        elsewhere: Option<(PathBuf, String)>,
    ) -> Result<()> {
        let (program, not_on_validation) = match elsewhere {
            Some((program, how)) => (program, Some(how)),
            None => (self.program.clone(), None),
        };
        let (sys, named_by) = self.frames_from_elsewhere(sys.clone(), lifted, &program)?;
        let sys = &sys;
        let key = sys.key();
        if self.count_duplicate(&key)?.is_some() {
            return Ok(());
        }
        let confirmed = self.epoch.elapsed().as_secs_f64();
        let unit = f.unit;
        let crash_fn = sys
            .frames
            .first()
            .cloned()
            .unwrap_or_else(|| unit.function.clone());
        let id = format!("{}-{:08x}", safe_name(&crash_fn), fnv32(&key));
        let (tmp, reduced, rstats) = self.stage_alarm(&id, lifted, &key, &program)?;
        std::fs::copy(&f.candidate.input, tmp.join("unit-input.bin"))
            .with_context(|| format!("cannot copy {}", f.candidate.input.display()))?;
        let source = self.write_unit_c(&tmp, f)?;
        let (seed, mutation) = self.origin_of(unit);
        let provenance = Provenance::Lifted(Box::new(records::LiftedFind {
            seed_test: seed.clone(),
            system_mutation: mutation.clone(),
            system_test: records::CarvedFrom {
                name: unit.provenance.test.clone(),
                test: to_json(&unit.system_test),
                trace: unit.provenance.trace.clone(),
                pid: unit.provenance.pid,
            },
            carved_invocation: records::CarvedInvocation {
                function: unit.function.clone(),
                call_index: unit.provenance.call_index,
                carve_sequence: unit.provenance.seq,
                source: source.clone(),
                program: unit.provenance.program.clone(),
            },
            unit_input: records::UnitInput {
                fuzz_dir: f.dir.to_owned(),
                file: f.candidate.input.clone(),
                values: describe_values(unit, f.values),
                signature: f.unit_sig.map(|s| s.to_string()),
                stack: f.unit_sig.map(records::stack_lines),
            },
            lifted_test: records::LiftedTest {
                file: files::LIFTED.into(),
                substitutions: subs.to_vec(),
                signature: sys.to_string(),
                stack: records::stack_lines(sys),
                frames: sys.stack.clone(),
            },
            reduced_test: records::ReducedTest {
                file: files::REDUCED.into(),
                reduction: rstats.clone(),
            },
            validated_with: program.clone(),
            sandboxed: self.sandbox.isolated(),
            found_on: f.origin.node.clone(),
        }));
        files::write(&tmp.join(files::PROVENANCE), &provenance)?;
        let origin = origin_words(&seed, mutation.as_deref());
        let mut summary = summary_md(
            unit,
            f.values,
            f.unit_sig,
            sys,
            matches_unit,
            lifted,
            &reduced,
            &rstats,
            subs,
            source.as_deref(),
            &program,
            &origin,
        );
        summary += &named_by_md(named_by.as_deref());
        std::fs::write(tmp.join("summary.md"), summary)?;
        let entry = AlarmEntry {
            id,
            function: crash_fn,
            unit_function: Some(unit.function.clone()),
            signature: sys.to_string(),
            key,
            matches_unit,
            source: unit_source(),
            candidates: 1,
            size_lifted: test_size(lifted),
            size_reduced: test_size(&reduced),
            found_at: Some(confirmed),
            reduction_pending: rstats.pending,
            found_on: f.origin.node.clone(),
            roadblock: f.origin.roadblock.clone(),
            descends_from: None,
            builds: Vec::new(),
        };
        self.publish_alarm(&tmp, entry, not_on_validation)
    }

    /// The unit itself as C with the finding's values (`unit.c` and `build.sh` in
    /// `dir`, or `unit-export-error.txt` saying why not); returns the function's
    /// `file:line` when the harness knows it.
    fn write_unit_c(&mut self, dir: &Path, f: &Finding) -> Result<Option<String>> {
        let harness = self.harness_for(f.unit);
        let binary = self.binary(&harness)?;
        let source = binary
            .functions
            .get(&f.unit.context.fn_id)
            .and_then(|func| {
                func.file
                    .as_deref()
                    .map(|file| format!("{file}:{}", func.line))
            });
        match crate::export::export_c(f.unit, Some(binary), Some(f.values)) {
            Ok(c_src) => {
                std::fs::write(dir.join("unit.c"), c_src)?;
                let script = dir.join("build.sh");
                std::fs::write(&script, crate::export::build_script("unit.c"))?;
                use std::os::unix::fs::PermissionsExt as _;
                std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
            }
            Err(e) => std::fs::write(dir.join("unit-export-error.txt"), format!("{e:#}\n"))?,
        }
        Ok(source)
    }
}

/// What validating a crash found elsewhere came to ([`Lifter::confirm_crash`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirmed {
    /// A new alarm, with this id.
    New(String),
    /// One more finding of the listed alarm with this id.
    Known(String),
    /// The program did not crash on it: how the run ended instead.
    NotReproduced(String),
}

fn fnv32(s: &str) -> u32 {
    let mut h: u32 = 0x811c9dc5;
    for b in s.bytes() {
        h ^= b as u32;
        h = h.wrapping_mul(0x01000193);
    }
    h
}

pub(super) fn describe_values(unit: &Unit, values: &[ParamValue]) -> Vec<String> {
    unit.params
        .iter()
        .zip(values)
        .map(|(p, v)| trestle_unit_fuzz::describe(p, v))
        .collect()
}

/// Where `summary.md`'s part on the builds begins; it is the last part.
const BUILDS_HEADING: &str = "\n## Build-dependent\n";

/// `md`, an alarm's `summary.md`, with its part on the builds as `entry` has them
/// now: written when the alarm does not reproduce on every build, else none.
fn with_builds_md(mut md: String, entry: &AlarmEntry) -> String {
    md.truncate(md.find(BUILDS_HEADING).unwrap_or(md.len()));
    if entry.build_dependent() {
        md.push_str(&builds_md(entry));
    }
    md
}

/// The part of an alarm's `summary.md` that says it does not reproduce on every build.
fn builds_md(entry: &AlarmEntry) -> String {
    let mut md = String::from(BUILDS_HEADING);
    md.push_str("\nThe test does not crash every build of the program the same way: the crash depends on how\nthe program was built (optimisation, instrumentation), as undefined behaviour often does.\nCheck it on the build you ship.\n\n");
    for b in &entry.builds {
        let verdict = if b.reproduces {
            "reproduces"
        } else {
            "does not reproduce"
        };
        md.push_str(&format!(
            "- {} build `{}`: {verdict} ({})\n",
            b.role,
            b.program.display(),
            b.ended
        ));
    }
    md
}

/// What `summary.md` says of frames another build gave ([`Lifter::frames_from_elsewhere`]).
fn named_by_md(role: Option<&str>) -> String {
    match role {
        Some(role) => format!(
            "\nThe build that confirmed it left no frames of the program's own code on the stack (a smashed stack unwinds to nothing); the frames above are the {role} build's, which crashes the same way on this test.\n"
        ),
        None => String::new(),
    }
}

/// What a run of a candidate found: a crash (or with `hang`, a hang), or running out
/// of memory.
fn finding(run: &SandboxRun, hang: bool) -> Option<CrashSignature> {
    if hang {
        run.hang.clone()
    } else {
        run.crash.clone()
    }
    .or_else(|| run.memory.clone())
}

/// Whether `sig`, how another build of the program crashed on an alarm's test, is
/// that alarm's crash: the keys match (the class and the faulting line, or the
/// frames where a build has no line). A crash of the class elsewhere, even in the
/// same function, is another bug.
fn same_crash(sig: &CrashSignature, entry: &AlarmEntry) -> bool {
    CrashSignature::keys_match(&sig.key(), &entry.key)
}

/// How `run` of an alarm's test on another build than the one that confirmed it shows
/// the alarm, if it does: the same crash ([`same_crash`]), or one of the class whose
/// stack that build left unreadable; for a hang or running out of memory, the same
/// class wherever it was stopped (a build of other speed or inlining spins or
/// allocates its last in another function, as confirming a hang on the validation
/// build already allows), or another limit stopping it ([`runaway`]).
fn on_other_build(run: &SandboxRun, entry: &AlarmEntry) -> Option<String> {
    let class = entry.key.split('@').next().unwrap_or_default();
    let anywhere = class == HANG || class == OUT_OF_MEMORY;
    finding_like(run.clone(), &entry.key)
        .filter(|sig| {
            anywhere || same_crash(sig, entry) || sig.frames.is_empty() || sig.from_scan()
        })
        .map(|sig| sig.to_string())
        .or_else(|| runaway(run, &entry.key))
}

/// For an alarm of `key`'s class that is a hang or out of memory: how `run`, on another
/// build, was stopped by another limit instead. The same runaway loop runs out of
/// memory on a fast build and out of time on a slow one (mawk's `getline` loop filling
/// an array: out of memory on the plain and fuzzing builds, at its CPU limit on the -O0
/// coverage build), and a loop that prints as it goes reaches the file-size limit on
/// the build that runs it fastest (mawk's print loop, a hang on the plain build, wrote
/// 64 MB on the fuzzing build first); that is the build's speed, not a bug it lacks.
fn runaway(run: &SandboxRun, key: &str) -> Option<String> {
    let other = match key.split('@').next().unwrap_or_default() {
        HANG => run.memory.as_ref(),
        OUT_OF_MEMORY => run.hang.as_ref(),
        _ => return None,
    };
    other.map(|sig| sig.to_string()).or_else(|| {
        let limit = run.limit.as_deref()?;
        limit.starts_with(FILE_SIZE_LIMIT).then(|| {
            format!(
                "{} ({limit}): stopped writing, the same runaway",
                run.status
            )
        })
    })
}

/// What of `run` is a finding of the class of `key` ([`CrashSignature::key`]): a
/// crash of that class, a hang, or running out of memory.
fn finding_like(run: SandboxRun, key: &str) -> Option<CrashSignature> {
    match key.split('@').next().unwrap_or_default() {
        HANG => run.hang,
        OUT_OF_MEMORY => run.memory,
        class => run.crash.filter(|c| c.class() == class),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trestle_exec::systest::RunStatus;

    fn stopped(hang: bool, memory: bool) -> SandboxRun {
        let sig = |kind: &str| CrashSignature {
            kind: kind.into(),
            frames: vec!["grow".into()],
            stack: Vec::new(),
            origin: None,
        };
        SandboxRun {
            status: RunStatus::TimedOut,
            stdout: Vec::new(),
            stderr: Vec::new(),
            stdout_bytes: 0,
            stderr_bytes: 0,
            max_rss_kib: 0,
            cpu_ms: 0,
            wall: std::time::Duration::ZERO,
            limit: None,
            crash: None,
            hang: hang.then(|| sig(HANG)),
            memory: memory.then(|| sig(OUT_OF_MEMORY)),
            forked: false,
        }
    }

    #[test]
    fn a_hang_reproduces_on_another_build_wherever_it_spins_and_a_crash_only_where_it_was() {
        let entry = |key: &str| -> AlarmEntry {
            serde_json::from_value(serde_json::json!({
                "id": "a", "key": key, "signature": key, "function": "f",
                "matches_unit": true, "candidates": 1, "size_lifted": 3, "size_reduced": 3,
            }))
            .expect("an alarm entry")
        };
        // The alarm hung in `array_find`; the -O0 build is stopped in `grow`.
        let hang = entry("hang@zmalloc<find_by_ival<array_find");
        assert!(on_other_build(&stopped(true, false), &hang).is_some());
        assert!(
            on_other_build(&stopped(false, true), &hang).is_some(),
            "a runaway"
        );
        assert!(on_other_build(&stopped(false, false), &hang).is_none());
        let oom = entry("out-of-memory@zmalloc<slow_field_ptr<yylex");
        assert!(on_other_build(&stopped(false, true), &oom).is_some());
        // A crash elsewhere is another bug.
        let mut run = stopped(false, false);
        run.crash = Some(CrashSignature {
            kind: "SIGSEGV".into(),
            frames: vec!["grow".into()],
            stack: Vec::new(),
            origin: None,
        });
        let crash = entry("memory@parse:a.c:9|parse");
        assert!(on_other_build(&run, &crash).is_none());
        let same = entry(&run.crash.as_ref().unwrap().key());
        assert!(on_other_build(&run, &same).is_some());
    }

    #[test]
    fn a_hang_and_running_out_of_memory_stand_for_each_other_on_another_build_only() {
        let oom = "out-of-memory@grow:a.c:3|grow";
        let hang = "hang@grow:a.c:3|grow";
        assert!(
            runaway(&stopped(true, false), oom).is_some(),
            "a slow build's hang"
        );
        assert!(
            runaway(&stopped(false, true), hang).is_some(),
            "a fast build's blow-up"
        );
        assert!(runaway(&stopped(false, false), oom).is_none());
        assert!(
            runaway(&stopped(true, true), "memory@grow:a.c:3|grow").is_none(),
            "a crash is not stood for"
        );
        // The class itself is finding_like's, not runaway's.
        assert!(runaway(&stopped(false, true), oom).is_none());
        // A loop that writes as it spins, stopped at the file-size limit.
        let mut wrote = stopped(false, false);
        wrote.status = RunStatus::Signaled(libc::SIGXFSZ);
        wrote.limit = Some(format!("{FILE_SIZE_LIMIT} (67108864 bytes)"));
        assert!(runaway(&wrote, hang).is_some(), "a loop that prints");
        assert!(runaway(&wrote, oom).is_some());
        assert!(runaway(&wrote, "memory@grow:a.c:3|grow").is_none());
    }
}

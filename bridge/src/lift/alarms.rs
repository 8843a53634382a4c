//! Recording what lifting confirmed or refuted: an alarm (deduplicated by crash
//! signature, reduced, with its provenance, reproducer and the unit as C) under
//! `alarms/<id>/`, and a false positive with its reason under `false-positives/`.
//! Each is written in a temporary directory and renamed into place whole.

use super::queue::Candidate;
use super::records::{self, unit_source};
use super::summary::{show_test, summary_md, write_script};
use super::{AlarmEntry, FalsePositive, Lifter, Provenance, Substitution, SystemOutcome};
use crate::binary::Binary;
use crate::carve::units::safe_name;
use crate::files;
use crate::system::systest::{save_test, to_json};
use crate::validate::reduce::{reduce, test_size, ReduceStats};
use crate::validate::signature::CrashSignature;
use anyhow::Result;
use std::path::Path;
use std::time::Instant;
use trestle_abi::fuzz::ParamValue;
use trestle_abi::unit::{SystemTest, Unit};

impl Lifter {
    /// A crash system-level fuzzing found (`name`, in `source`): validated with the
    /// validation program like a lifted test, and reported if it reproduces. Returns
    /// whether it did.
    pub fn system_crash(&mut self, test: &SystemTest, name: &str, source: &Path) -> Result<bool> {
        let run = self.sandbox.run(&self.program, test, &[], &self.filter, None)?;
        let Some(sys) = run.crash else { return Ok(false) };
        let key = sys.key();
        if let Some(a) = self.alarms.values_mut().find(|a| CrashSignature::keys_match(&a.key, &key)) {
            a.candidates += 1;
            self.write_index()?;
            return Ok(true);
        }
        let function = sys.frames.first().cloned().unwrap_or_else(|| "unknown".into());
        let id = format!("{}-{:08x}", safe_name(&function), fnv32(&key));
        let tmp = self.out.join("alarms").join(format!(".tmp-{id}"));
        crate::files::remove_dir_if_present(&tmp)?;
        std::fs::create_dir_all(&tmp)?;
        save_test(test, &tmp.join("lifted.json"))?;
        let (reduced, rstats) = self.reduce_alarm(test, &key)?;
        save_test(&reduced, &tmp.join("reduced.json"))?;
        write_script(&tmp.join("reproduce.sh"), &self.program, &reduced)?;
        let provenance = Provenance::System(Box::new(records::SystemFind {
            system_test: records::FoundTest { name: name.to_owned(), file: source.to_owned(), test: to_json(test) },
            signature: sys.to_string(),
            stack: records::stack_lines(&sys),
            reduced_test: records::ReducedTest { file: files::REDUCED.into(), reduction: rstats.clone() },
            validated_with: self.program.clone(),
            sandboxed: self.sandbox.isolated(),
        }));
        files::write(&tmp.join(files::PROVENANCE), &provenance)?;
        let mut md = format!("# Crash found by system-level fuzzing\n\n**{sys}** when running `{}`.\n\n## Stack\n\n", self.program.display());
        for f in sys.stack.iter().take(12) {
            md += &format!("- {f}\n");
        }
        md += "\n## Reduced reproducer (`reduced.json`, run `./reproduce.sh`)\n\n";
        md += &show_test(&reduced);
        md += &format!("\nReduced from {} to {} bytes in {} runs. Found as `{}` ({}).\n", rstats.size_before, rstats.size_after, rstats.runs, name, source.display());
        std::fs::write(tmp.join("summary.md"), md)?;
        let final_dir = self.out.join("alarms").join(&id);
        crate::files::remove_dir_if_present(&final_dir)?;
        std::fs::rename(&tmp, &final_dir)?;
        self.alarms.insert(
            key.clone(),
            AlarmEntry {
                id,
                function,
                unit_function: None,
                signature: sys.to_string(),
                key,
                matches_unit: true,
                source: "system".into(),
                candidates: 1,
                size_lifted: test_size(test),
                size_reduced: test_size(&reduced),
                found_at: Some(self.epoch.elapsed().as_secs_f64()),
            },
        );
        self.stats.alarms = self.alarms.len();
        self.write_index()?;
        Ok(true)
    }

    pub(super) fn reduce_alarm(&self, test: &SystemTest, key: &str) -> Result<(SystemTest, ReduceStats)> {
        match self.reduce_budget {
            Some(budget) => {
                let mut keep = |t: &SystemTest| -> Result<bool> {
                    let run = self.sandbox.run(&self.program, t, &[], &self.filter, None)?;
                    Ok(run.crash.is_some_and(|s| s.key() == key))
                };
                reduce(test, budget, Some(Instant::now() + self.reduce_time), &mut keep)
            }
            None => Ok((
                test.clone(),
                ReduceStats { runs: 0, budget_exhausted: false, size_before: test_size(test), size_after: test_size(test) },
            )),
        }
    }

    fn binary(&mut self, path: &Path) -> Result<&Binary> {
        if !self.binaries.contains_key(path) {
            self.binaries.insert(path.to_owned(), Binary::load(path)?);
        }
        Ok(&self.binaries[path])
    }

    pub(super) fn false_positive(
        &mut self,
        unit: &Unit,
        c: &Candidate,
        values: &[ParamValue],
        unit_sig: Option<&CrashSignature>,
        lifted: Option<(&SystemTest, &SystemOutcome)>,
        reason: &str,
    ) -> Result<()> {
        self.stats.false_positives += 1;
        self.fp_count += 1;
        let id = format!("{:04}-{}", self.fp_count, safe_name(&unit.function));
        let tmp = self.out.join("false-positives").join(format!(".tmp-{id}"));
        std::fs::create_dir_all(&tmp)?;
        if let Some((t, _)) = lifted {
            save_test(t, &tmp.join("lifted.json"))?;
        }
        let record = FalsePositive {
            function: unit.function.clone(),
            reason: reason.to_owned(),
            unit_input: c.input.clone(),
            values: describe_values(unit, values),
            unit_signature: unit_sig.map(|s| s.to_string()),
            system: lifted.map(|(_, o)| o.clone()),
            seed_test: self.origin_of(unit).0,
        };
        files::write(&tmp.join(files::REASON), &record)?;
        std::fs::rename(&tmp, self.out.join("false-positives").join(&id))?;
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn alarm(
        &mut self,
        dir: &Path,
        unit: &Unit,
        c: &Candidate,
        values: &[ParamValue],
        unit_sig: Option<&CrashSignature>,
        lifted: &SystemTest,
        subs: &[Substitution],
        sys: &CrashSignature,
        matches_unit: bool,
    ) -> Result<()> {
        let key = sys.key();
        if let Some(a) = self.alarms.values_mut().find(|a| CrashSignature::keys_match(&a.key, &key)) {
            a.candidates += 1;
            return self.write_index();
        }
        let crash_fn = sys.frames.first().cloned().unwrap_or_else(|| unit.function.clone());
        let id = format!("{}-{:08x}", safe_name(&crash_fn), fnv32(&key));
        let final_dir = self.out.join("alarms").join(&id);
        let tmp = self.out.join("alarms").join(format!(".tmp-{id}"));
        crate::files::remove_dir_if_present(&tmp)?;
        std::fs::create_dir_all(&tmp)?;
        save_test(lifted, &tmp.join("lifted.json"))?;
        std::fs::copy(&c.input, tmp.join("unit-input.bin"))?;
        let (reduced, rstats) = self.reduce_alarm(lifted, &key)?;
        save_test(&reduced, &tmp.join("reduced.json"))?;
        write_script(&tmp.join("reproduce.sh"), &self.program, &reduced)?;
        // The unit itself, as C, with the crashing values.
        let harness = self.harness_for(unit);
        let binary = Some(self.binary(&harness)?.clone());
        let source = binary
            .as_ref()
            .and_then(|b| b.functions.get(&unit.context.fn_id))
            .and_then(|f| f.file.as_deref().map(|file| format!("{file}:{}", f.line)));
        match crate::export::export_c(unit, binary.as_ref(), Some(values)) {
            Ok(c_src) => {
                std::fs::write(tmp.join("unit.c"), c_src)?;
                let script = tmp.join("build.sh");
                std::fs::write(&script, crate::export::build_script("unit.c"))?;
                use std::os::unix::fs::PermissionsExt as _;
                std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
            }
            Err(e) => std::fs::write(tmp.join("unit-export-error.txt"), format!("{e:#}\n"))?,
        }
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
                fuzz_dir: dir.to_owned(),
                file: c.input.clone(),
                values: describe_values(unit, values),
                signature: unit_sig.map(|s| s.to_string()),
                stack: unit_sig.map(records::stack_lines),
            },
            lifted_test: records::LiftedTest {
                file: files::LIFTED.into(),
                substitutions: subs.to_vec(),
                signature: sys.to_string(),
                stack: records::stack_lines(sys),
            },
            reduced_test: records::ReducedTest { file: files::REDUCED.into(), reduction: rstats.clone() },
            validated_with: self.program.clone(),
            sandboxed: self.sandbox.isolated(),
        }));
        files::write(&tmp.join(files::PROVENANCE), &provenance)?;
        let origin = match &mutation {
            Some(m) => format!("system test `{m}`, made from the seeds by system-level fuzzing"),
            None => format!("seed system test `{seed}`"),
        };
        let summary = summary_md(unit, values, unit_sig, sys, matches_unit, lifted, &reduced, &rstats, subs, source.as_deref(), &self.program, &origin);
        std::fs::write(tmp.join("summary.md"), summary)?;
        crate::files::remove_dir_if_present(&final_dir)?;
        std::fs::rename(&tmp, &final_dir)?;
        self.alarms.insert(
            key.clone(),
            AlarmEntry {
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
                found_at: Some(self.epoch.elapsed().as_secs_f64()),
            },
        );
        self.stats.alarms = self.alarms.len();
        self.write_index()
    }
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
    unit.params.iter().zip(values).map(|(p, v)| trestle_unit_fuzz::describe(p, v)).collect()
}

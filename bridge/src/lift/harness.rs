//! Running a unit finding again in the unit harness: the crash signature it has at
//! unit level, and which of its parameter values the crash needs.

use super::Lifter;
use anyhow::{bail, Context as _, Result};
use std::path::{Path, PathBuf};
use trestle_abi::fuzz::{encode_values, original_value, ParamValue};
use trestle_abi::unit::Unit;
use trestle_exec::signature::{crash_kind, parse_stack, symbolise, CrashSignature, FrameFilter};
use trestle_exec::tools::find_tool;

impl Lifter {
    /// The program the unit runs in: `--harness`, or the one it was carved from.
    pub(super) fn harness_for(&self, unit: &Unit) -> PathBuf {
        self.harness
            .clone()
            .unwrap_or_else(|| PathBuf::from(&unit.provenance.program))
    }

    /// The unit harness running `input` once (no output, no address randomisation).
    fn harness_command(
        &self,
        dir: &Path,
        unit: &Unit,
        input: &Path,
    ) -> Result<std::process::Command> {
        let harness = self.harness_for(unit);
        if !harness.exists() {
            bail!(
                "the unit harness {} is missing (pass --harness)",
                harness.display()
            );
        }
        let cwd = dir.join("cwd");
        let cwd = if cwd.is_dir() { cwd } else { dir.to_owned() };
        let cmd =
            trestle_unit_fuzz::harness_command(&harness, &dir.join("request.bin"), input, &cwd);
        Ok(cmd)
    }

    /// Run the harness to its end or to the wall limit; `None` when it ran into the
    /// limit (and was killed).
    fn wait_harness(
        &self,
        mut cmd: std::process::Command,
        harness: &Path,
    ) -> Result<Option<std::process::ExitStatus>> {
        let limit = self.harness_wall.unwrap_or(self.sandbox.limits.wall);
        let waited = trestle_exec::spawn::run_bounded(&mut cmd, limit)
            .with_context(|| format!("cannot run the unit harness {}", harness.display()))?;
        Ok(waited.status)
    }

    /// The parameter values of a unit crash that it needs: each changed value is put
    /// back to the recorded one while the unit still dies of the same signal. Values
    /// the crash does not depend on (a verb the function never looks at, mutated
    /// freely) would otherwise be lifted too and steer the system test off the path.
    pub(super) fn essential_values(
        &self,
        dir: &Path,
        unit: &Unit,
        values: &[ParamValue],
        signal: i32,
    ) -> Result<Vec<ParamValue>> {
        use std::os::unix::process::ExitStatusExt as _;
        let harness = self.harness_for(unit);
        let side = tempfile::tempdir()?;
        let input = side.path().join("input");
        let mut cur = values.to_vec();
        for (i, p) in unit.params.iter().enumerate().take(32) {
            let original = original_value(p);
            if cur[i] == original {
                continue;
            }
            let mut trial = cur.clone();
            trial[i] = original;
            std::fs::write(&input, encode_values(&trial))
                .with_context(|| format!("cannot write {}", input.display()))?;
            let status = self.wait_harness(self.harness_command(dir, unit, &input)?, &harness)?;
            if status.is_some_and(|s| s.signal() == Some(signal)) {
                cur = trial;
            }
        }
        Ok(cur)
    }

    /// The unit's crash, read by running the input once more in the harness with the
    /// crash-stack library preloaded; `None` when the input hangs there instead (an
    /// objective the unit fuzzer had no time to sort: no crash to lift).
    pub(super) fn unit_signature(
        &mut self,
        dir: &Path,
        unit: &Unit,
        input: &Path,
    ) -> Result<Option<CrashSignature>> {
        let harness = self.harness_for(unit);
        let preload = find_tool("libtrestle_crashstack.so")?;
        let side = tempfile::tempdir()?;
        let stack = side.path().join("stack");
        let mut cmd = self.harness_command(dir, unit, input)?;
        cmd.env(trestle_abi::fuzz::ENV_CRASH_STACK_LIB, &preload)
            .env(trestle_abi::fuzz::ENV_CRASH_STACK, &stack);
        let Some(status) = self.wait_harness(cmd, &harness)? else {
            return Ok(None);
        };
        use std::os::unix::process::ExitStatusExt as _;
        let filter = FrameFilter {
            program: Some(std::fs::canonicalize(&harness).unwrap_or(harness.clone())),
            stop_after: Some(unit.function.clone()),
        };
        let raw = match std::fs::read_to_string(&stack) {
            Ok(text) => Some(parse_stack(&text)?),
            // No stack file: the harness did not crash (or died before it could write).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("cannot read the crash stack {}", stack.display()))
            }
        };
        let frames = raw
            .as_ref()
            // Unwound frames only: a unit's crash is matched to the system's by its
            // innermost frames, which a stack scan does not give.
            .map(|raw| symbolise(raw, filter.program.as_deref()))
            .transpose()?
            .unwrap_or_default();
        match (status.signal(), status.code()) {
            (Some(s), _) => Ok(Some(filter.signature(crash_kind(s, raw.as_ref()), frames))),
            (None, Some(trestle_abi::fuzz::EXIT_SETUP_FAILED)) => {
                bail!(
                    "the unit harness {} cannot set this unit up again (exit status {})",
                    harness.display(),
                    trestle_abi::fuzz::EXIT_SETUP_FAILED
                )
            }
            (None, code) => Ok(Some(CrashSignature {
                kind: format!("no crash (exit {}) when run alone", code.unwrap_or(-1)),
                frames: Vec::new(),
                stack: Vec::new(),
                origin: None,
            })),
        }
    }
}

//! Keeping what fails: [`FindingFeedback`], the first half of the objective (a crash
//! or a timeout at the hang limit), writes each finding to `crashes/` or `timeouts/` as it is found and
//! lists it in [`Found`] for the next slice report.
//!
//! It owns the finding files only; the queue is LibAFL's on-disk corpus.

use crate::input::SysInput;
use crate::lineage::Donors;
use libafl::corpus::Testcase;
use libafl::executors::ExitKind;
use libafl::feedbacks::{Feedback, StateInitializer};
use libafl::inputs::Input;
use libafl::HasMetadata;
use libafl_bolts::Named;
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Findings written since the last slice report.
#[derive(Debug, Default)]
pub(super) struct Found {
    pub(super) crashes: Vec<PathBuf>,
    pub(super) timeouts: Vec<PathBuf>,
    /// The corpus entries each finding took material from besides its parent.
    pub(super) donors: HashMap<PathBuf, Vec<String>>,
}

/// The objective's first half: a crash or a timeout. When the whole objective holds
/// (with new coverage among findings), writes the input to `crashes/` or `timeouts/`
/// at once, so that a killed fuzzer loses nothing it found.
pub struct FindingFeedback {
    crashes: PathBuf,
    timeouts: PathBuf,
    last: ExitKind,
    found: Arc<Mutex<Found>>,
    /// Whether the last timeout was one at the hang limit (the executor's
    /// [`super::executor::SysExecutor::hung`]); a run only stopped at the short
    /// limit is no finding.
    hung: Arc<AtomicBool>,
}

impl FindingFeedback {
    /// Writing to `out`'s `crashes/` and `timeouts/`, listing in `found`.
    pub(super) fn new(
        out: &Path,
        found: Arc<Mutex<Found>>,
        hung: Arc<AtomicBool>,
    ) -> FindingFeedback {
        FindingFeedback {
            crashes: out.join("crashes"),
            timeouts: out.join("timeouts"),
            last: ExitKind::Ok,
            found,
            hung,
        }
    }
}

impl Named for FindingFeedback {
    fn name(&self) -> &Cow<'static, str> {
        static NAME: Cow<'static, str> = Cow::Borrowed("FindingFeedback");
        &NAME
    }
}

impl<S> StateInitializer<S> for FindingFeedback {}

impl<EM, OT, S: HasMetadata> Feedback<EM, SysInput, OT, S> for FindingFeedback {
    fn is_interesting(
        &mut self,
        _state: &mut S,
        _manager: &mut EM,
        _input: &SysInput,
        _observers: &OT,
        exit_kind: &ExitKind,
    ) -> Result<bool, libafl::Error> {
        self.last = *exit_kind;
        Ok(match exit_kind {
            ExitKind::Crash => true,
            ExitKind::Timeout => self.hung.load(Ordering::Relaxed),
            _ => false,
        })
    }

    fn append_metadata(
        &mut self,
        state: &mut S,
        _manager: &mut EM,
        _observers: &OT,
        testcase: &mut Testcase<SysInput>,
    ) -> Result<(), libafl::Error> {
        let Some(input) = testcase.input() else {
            return Ok(());
        };
        let timeout = self.last == ExitKind::Timeout;
        let path = if timeout {
            &self.timeouts
        } else {
            &self.crashes
        }
        .join(input.file_name());
        input.to_file(&path)?;
        let mut found = self.found.lock().unwrap_or_else(|p| p.into_inner());
        if let Ok(donors) = state.metadata::<Donors>() {
            found.donors.insert(path.clone(), donors.0.clone());
        }
        if timeout {
            found.timeouts.push(path);
        } else {
            found.crashes.push(path);
        }
        Ok(())
    }
}

/// The queue's gate: only a run that ended by itself within the short limit may join
/// the queue, as in AFL++. An input stopped at the short limit whose edges an earlier
/// stopped run had already shown is no hang finding, and without this gate its
/// truncated run could still look new to the coverage feedback; one that ran on to end
/// within the hang limit is slow (AFL++ drops it too, unless told to keep timeouts).
/// Either in the queue would make every later mutation, recording and coverage run pay
/// for it up to the limit: a sed campaign whose queue took in eight inputs that write
/// until the file-size limit (1.3-2 s each) ran at a third of its speed for a minute.
pub struct CompletedRun {
    /// The executor's [`super::executor::SysExecutor::stopped`].
    stopped: Arc<AtomicBool>,
}

impl CompletedRun {
    pub(super) fn new(stopped: Arc<AtomicBool>) -> CompletedRun {
        CompletedRun { stopped }
    }
}

impl Named for CompletedRun {
    fn name(&self) -> &Cow<'static, str> {
        static NAME: Cow<'static, str> = Cow::Borrowed("CompletedRun");
        &NAME
    }
}

impl<S> StateInitializer<S> for CompletedRun {}

impl<EM, OT, S> Feedback<EM, SysInput, OT, S> for CompletedRun {
    fn is_interesting(
        &mut self,
        _state: &mut S,
        _manager: &mut EM,
        _input: &SysInput,
        _observers: &OT,
        exit_kind: &ExitKind,
    ) -> Result<bool, libafl::Error> {
        Ok(*exit_kind != ExitKind::Timeout && !self.stopped.load(Ordering::Relaxed))
    }
}

//! The campaign's live status: a screen redrawn in place on a terminal, a line every
//! few seconds otherwise; and the stop flag Ctrl-C sets.

use super::Campaign;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub(super) static STOP: AtomicBool = AtomicBool::new(false);

pub(super) extern "C" fn on_stop(_sig: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// For fault tests: with `TRESTLE_FAULT=PHASE:MS` the campaign kills itself (SIGKILL,
/// as `kill -9` would) MS milliseconds after a phase whose status begins with PHASE
/// (`recording`, `carving`, `unit fuzzing`, `lifting`, `reducing`, ...) first shows.
pub(super) fn fault_point(phase: &str) {
    static ARMED: std::sync::OnceLock<Option<(String, u64)>> = std::sync::OnceLock::new();
    static FIRED: AtomicBool = AtomicBool::new(false);
    let armed = ARMED.get_or_init(|| {
        let v = std::env::var("TRESTLE_FAULT").ok()?;
        let (p, ms) = v.rsplit_once(':')?;
        Some((p.to_owned(), ms.parse().ok()?))
    });
    let Some((p, ms)) = armed else { return };
    if phase.starts_with(p.as_str()) && !FIRED.swap(true, Ordering::SeqCst) {
        let ms = *ms;
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(ms));
            // SAFETY: signalling this very process.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        });
    }
}

pub(super) struct Live {
    pub(super) tty: bool,
    pub(super) last_plain: Instant,
    pub(super) lines: usize,
}

/// What the status screen shows.
pub(super) struct Status<'a> {
    pub(super) c: &'a Campaign,
    /// The campaign's clock now.
    pub(super) elapsed: f64,
    pub(super) edges: usize,
    pub(super) phase: String,
    pub(super) alarms: usize,
    pub(super) candidates: usize,
    pub(super) false_positives: usize,
    pub(super) effective: usize,
    pub(super) sys_rate: f64,
    pub(super) unit_rate: f64,
}

/// What was evicted under `--max-disk`, if anything, for the status.
fn evicted(c: &Campaign) -> String {
    let d = &c.disk;
    match (d.corpora_evicted, d.batches_evicted.len()) {
        (0, 0) => String::new(),
        (k, b) => format!(" ({k} unit corpora, {b} unit batch(es) evicted)"),
    }
}

impl Live {
    pub(super) fn new(tty: bool) -> Live {
        Live {
            tty,
            last_plain: Instant::now(),
            lines: 0,
        }
    }

    pub(super) fn show(&mut self, s: &Status) {
        let el = s.elapsed;
        let budget = s.c.settings.budget.as_secs_f64();
        if self.tty {
            let mode = if s.c.settings.system_only {
                "system only"
            } else {
                "bridge"
            };
            let text = format!(
                "\x1b[1mtrestle run\x1b[0m ({mode})  {:>5.0}s of {:.0}s  round {}\n\
                 \x20 now       : {}\n\
                 \x20 system    : {} execs ({:.0}/s), {} edges\n\
                 \x20 units     : {} carved, {} with parameters, {} fuzzed ({} skipped), {} execs ({:.0}/s)\n\
                 \x20 findings  : {} unit crash(es), {} effective lifted test(s), {} false positive(s) suppressed\n\
                 \x20 disk      : {}{}\n\
                 \x20 \x1b[1malarms    : {}\x1b[0m\n",
                el,
                budget,
                s.c.rounds,
                s.phase,
                s.c.system_executions,
                s.sys_rate,
                s.edges,
                s.c.units_carved,
                s.c.units_parameterized,
                s.c.fuzzed.len(),
                s.c.fuzzed.iter().filter(|f| f.error.is_some()).count(),
                s.c.unit_executions,
                s.unit_rate,
                s.candidates,
                s.effective,
                s.false_positives,
                super::disk::human(s.c.disk.bytes),
                evicted(s.c),
                s.alarms
            );
            let mut err = std::io::stderr().lock();
            if self.lines > 0 {
                let _ = write!(err, "\x1b[{}A", self.lines);
            }
            for line in text.lines() {
                let _ = writeln!(err, "\x1b[2K{line}");
            }
            self.lines = text.lines().count();
        } else if self.last_plain.elapsed() >= Duration::from_secs(5) || self.lines == 0 {
            self.last_plain = Instant::now();
            self.lines = 1;
            log::info!(
                "[run {:>5.0}s/{:.0}s] {} | system {} execs, {} edges | units {} carved, {} fuzzed ({} skipped), {} execs | {} candidates, {} alarm(s) | disk {}{}",
                el,
                budget,
                s.phase,
                s.c.system_executions,
                s.edges,
                s.c.units_carved,
                s.c.fuzzed.len(),
                s.c.fuzzed.iter().filter(|f| f.error.is_some()).count(),
                s.c.unit_executions,
                s.candidates,
                s.alarms,
                super::disk::human(s.c.disk.bytes),
                evicted(s.c)
            );
        }
    }
}

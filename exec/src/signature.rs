//! Crash signatures: how a crash is recognised again at another level.
//!
//! A signature is the kind of crash (the signal, or the sanitizer's report kind) plus
//! the innermost frames of the stack that lie in the subject's own code, as function
//! names. Names, not addresses: the unit harness (built with trestle-cc) and the
//! validation build (plain, coverage or sanitizer) place code differently, but they
//! name it the same way, inlined frames included when there is debug info.
//!
//! Stacks come from two places: the preloaded `libtrestle_crashstack.so` (signal, pc,
//! return addresses and the memory map, symbolised here with `llvm-symbolizer`), or a
//! sanitizer's own report on stderr. When the return addresses hold nothing of the
//! subject's code (it smashed its stack), the words the preload found on the stack
//! that follow a call into the program stand in for them, marked as scanned
//! ([`FrameFilter::symbolise`]).

use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// How many frames of the subject's code a signature keeps.
pub const SIGNATURE_FRAMES: usize = 3;

/// One symbolised frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frame {
    /// Function name (as the symboliser prints it).
    pub function: String,
    /// Source file, if debug info has it.
    pub file: Option<String>,
    /// Source line (0 if unknown).
    pub line: u32,
    /// The module (executable or library) the code is in.
    pub module: String,
    /// Whether the frame is in the subject's own code (what signatures are made of;
    /// not libc, the runtime, or the unit harness).
    #[serde(default)]
    pub own: bool,
    /// Whether the frame comes from a scan of the stack for return addresses
    /// ([`RawStack::scan`]) rather than from the unwinder: a weaker source, used only
    /// when the unwinder found nothing of the subject's code (a smashed stack).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub scanned: bool,
}

impl std::fmt::Display for Frame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.file {
            Some(file) => write!(f, "{} ({}:{})", self.function, file, self.line)?,
            None => write!(f, "{} ({})", self.function, self.module)?,
        }
        if self.scanned {
            write!(f, " [stack scan]")?;
        }
        Ok(())
    }
}

/// What a crash looks like: its kind and where in the subject it happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrashSignature {
    /// `SIGSEGV`, `SIGABRT`, ..., or `asan:heap-buffer-overflow` and the like.
    pub kind: String,
    /// Innermost frames in the subject's code, innermost first (at most
    /// [`SIGNATURE_FRAMES`]).
    pub frames: Vec<String>,
    /// The whole stack as symbolised, innermost first, for people.
    pub stack: Vec<Frame>,
    /// For a memory error, the global variable the faulting pointer was loaded from
    /// ([`crate::origin`]): crashes at different lines through one bad pointer are one
    /// bug.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
}

impl CrashSignature {
    /// A short stable text for deduplication, naming the bug rather than the stack:
    /// the class of crash and where it faulted, the innermost frame of the subject's
    /// own code with its source line (`dc_array_set:array.c:88`), whatever called it
    /// (dc's one planted bug came out as two alarms, reached from a file and from a
    /// string), and after `~` the global the faulting pointer came from, if known
    /// (`~output_delimiter_string`), followed after `|` by the innermost frames (a heap
    /// overflow that faults in `strcpy` one time and at the overwritten pointer's call
    /// the next is one bug by the path that reached both); a stack overflow by the
    /// functions that recur; without a source line, the innermost frames alone.
    pub fn key(&self) -> String {
        match self.place() {
            Some(place) => format!(
                "{}@{place}{PLACE_END}{}",
                self.class(),
                self.frames.join("<")
            ),
            None => format!("{}@{}", self.class(), self.frames.join("<")),
        }
    }

    /// The part of a deduplication key that stays the same for one bug from run to
    /// run (the faulting place when there is one, the pointer's origin when there is
    /// that: either line may fault first): what a fingerprint is made of.
    pub fn stable_key(key: &str) -> std::borrow::Cow<'_, str> {
        let head = key.split_once(PLACE_END).map_or(key, |(k, _)| k);
        match (head.split_once('@'), head.split_once(ORIGIN)) {
            (Some((class, _)), Some((_, origin))) => format!("{class}@{ORIGIN}{origin}").into(),
            _ => head.into(),
        }
    }

    /// The faulting place, `function:file:line`, when the innermost frame of the
    /// subject's code has a source line (not for a stack overflow: where the stack
    /// ran out is chance), with the faulting pointer's origin after it when known.
    fn place(&self) -> Option<String> {
        let origin = self.origin.as_ref().filter(|_| self.is_memory_error());
        match (self.line_place(), origin) {
            (Some(line), Some(origin)) => Some(format!("{line}{ORIGIN}{origin}")),
            (None, Some(origin)) => Some(format!("{ORIGIN}{origin}")),
            (line, None) => line,
        }
    }

    /// The faulting line of [`CrashSignature::place`].
    fn line_place(&self) -> Option<String> {
        // Nor for a hang: the line a loop was stopped at is chance too.
        // Nor where memory ran out: the allocation that failed is whichever came
        // last, and the program's allocation wrapper (`xmalloc`) is where most fail.
        if is_stack_overflow(&self.kind) || self.kind == HANG || self.kind == OUT_OF_MEMORY {
            return None;
        }
        let f = self.stack.iter().find(|f| f.own)?;
        let file = f
            .file
            .as_deref()
            .filter(|_| f.line > 0 && self.frames.first() == Some(&f.function))?;
        let file = Path::new(file)
            .file_name()
            .map_or(file.into(), |n| n.to_string_lossy());
        Some(format!("{}:{}:{}", f.function, file, f.line))
    }

    /// Whether the frames naming the crash come from a stack scan
    /// ([`Frame::scanned`]): the unwinder found none of the subject's code.
    pub fn from_scan(&self) -> bool {
        let mut own = self.stack.iter().filter(|f| f.own).peekable();
        own.peek().is_some() && own.all(|f| f.scanned)
    }

    /// Memory errors are one class whichever way they show (a SIGSEGV without a
    /// sanitizer is a heap overflow with one); so are stack overflows; other kinds
    /// stand for themselves.
    pub fn class(&self) -> &str {
        if is_stack_overflow(&self.kind) {
            STACK_OVERFLOW
        } else if self.is_memory_error() {
            "memory"
        } else {
            &self.kind
        }
    }

    fn is_memory_error(&self) -> bool {
        !is_stack_overflow(&self.kind)
            && (matches!(self.kind.as_str(), "SIGSEGV" | "SIGBUS")
                || (self.kind.starts_with("asan:") && !self.kind.contains("leak")))
    }

    /// Whether two deduplication keys ([`CrashSignature::key`]) name the same crash:
    /// the same class, and the same faulting place, or the same full path of
    /// [`SIGNATURE_FRAMES`] innermost frames to it; keys without a place match when
    /// their innermost frames agree as far as both reach; hangs, when one's frames
    /// are a run of the other's.
    pub fn keys_match(a: &str, b: &str) -> bool {
        struct Parts<'a> {
            class: &'a str,
            place: Option<&'a str>,
            frames: Vec<&'a str>,
        }
        fn split(k: &str) -> Parts<'_> {
            let (class, rest) = k.split_once('@').unwrap_or((k, ""));
            let (place, frames) = match rest.split_once(PLACE_END) {
                Some((place, frames)) => (Some(place), frames),
                None => (None, rest),
            };
            Parts {
                class,
                place,
                frames: frames.split('<').filter(|f| !f.is_empty()).collect(),
            }
        }
        let (a, b) = (split(a), split(b));
        if a.class != b.class {
            return false;
        }
        if a.class == HANG || a.class == OUT_OF_MEMORY {
            // Stopped at any point of its loop: the innermost frames may be the loop's
            // function or one it calls from there, so one path inside the other
            // (two frames at least, or the whole of one). Where it spins is the
            // function it was stopped in and that function's caller, whatever called
            // them: sed's regex matcher, slow on one pattern, spins in `dfaexec_main <
            // match_regex` whether an address or a substitution asked.
            let (short, long) = if a.frames.len() <= b.frames.len() {
                (&a.frames, &b.frames)
            } else {
                (&b.frames, &a.frames)
            };
            return if short.is_empty() || (short.len() < 2 && short.len() < long.len()) {
                short == long
            } else {
                long.windows(short.len()).any(|w| w == &short[..]) || short[..2] == long[..2]
            };
        }
        match (a.place, b.place) {
            (Some(pa), Some(pb)) => {
                // The same line, or the same bad pointer read at either.
                let (la, oa) = pa.split_once(ORIGIN).unwrap_or((pa, ""));
                let (lb, ob) = pb.split_once(ORIGIN).unwrap_or((pb, ""));
                (!la.is_empty() && la == lb)
                    || (!oa.is_empty() && oa == ob)
                    || (a.frames.len() == SIGNATURE_FRAMES && a.frames == b.frames)
            }
            // An older key of frames alone against one with a place: by the frames.
            _ => {
                let n = a.frames.len().min(b.frames.len());
                if n == 0 {
                    a.frames.is_empty() && b.frames.is_empty()
                } else {
                    a.frames[..n] == b.frames[..n]
                }
            }
        }
    }

    /// Whether `other` (seen at system level) is the crash this one (seen in the
    /// unit) describes: the same class, and the same innermost frames as far as both
    /// stacks reach. A stack of no frames matches nothing but the same kind.
    pub fn matches(&self, other: &CrashSignature) -> bool {
        let kinds = self.kind == other.kind
            || self.class() == other.class() && matches!(self.class(), "memory" | STACK_OVERFLOW);
        if !kinds {
            return false;
        }
        let k = self.frames.len().min(other.frames.len());
        if k == 0 {
            return self.frames.is_empty() && other.frames.is_empty() && self.kind == other.kind;
        }
        self.frames[..k] == other.frames[..k]
    }
}

impl std::fmt::Display for CrashSignature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.frames.is_empty() {
            write!(f, "{} (no frames)", self.kind)
        } else if self.from_scan() {
            write!(
                f,
                "{} in {} (stack scan)",
                self.kind,
                self.frames.join(" < ")
            )
        } else {
            write!(f, "{} in {}", self.kind, self.frames.join(" < "))
        }
    }
}

/// The kind of a run stopped at its time limit: a hang, named by where it was
/// spinning.
pub const HANG: &str = "hang";

/// The kind of a run that ran into its memory limit: named by where it was
/// allocating when an allocation first failed.
pub const OUT_OF_MEMORY: &str = "out-of-memory";

/// The file name of the preloaded crash-stack library, whose own frames a record of
/// a failed allocation begins with.
const PRELOAD_NAME: &str = "libtrestle_crashstack.so";

/// What separates the faulting place from the frames in a deduplication key.
const PLACE_END: char = '|';

/// What separates the faulting line from the pointer's origin in a key's place.
const ORIGIN: char = '~';

/// The kind of a crash that ran out of stack (ASan calls it `asan:stack-overflow`).
pub const STACK_OVERFLOW: &str = "stack-overflow";

fn is_stack_overflow(kind: &str) -> bool {
    kind.strip_prefix("asan:").unwrap_or(kind) == STACK_OVERFLOW
}

/// How near the stack pointer a fault is taken for the stack running out (ASan
/// uses the same window).
const STACK_OVERFLOW_WINDOW: u64 = 64 << 10;

/// The kind of a crash by signal `sig` that left `raw`: a stack overflow when the
/// fault was next to the stack pointer (no valid access near it faults unless the
/// stack has run out), else the signal's name. A fault at or past the end of the
/// mapping that holds the stack pointer is no stack running out, which happens at
/// its other end: it is a write off the top of the stack, a stack buffer overflow
/// (mawk's `sprintf` into a stack buffer with a `CONVFMT` of width 20000).
pub fn crash_kind(sig: i32, raw: Option<&RawStack>) -> String {
    let overflow = raw.is_some_and(|r| match (r.fault_addr, r.sp) {
        (Some(addr), Some(sp)) => {
            matches!(sig, libc::SIGSEGV | libc::SIGBUS)
                && addr.abs_diff(sp) <= STACK_OVERFLOW_WINDOW
                && r.sp_mapping.is_none_or(|(_, end)| addr < end)
        }
        _ => false,
    });
    if overflow {
        STACK_OVERFLOW.to_owned()
    } else {
        signal_name(sig)
    }
}

/// The name of a signal, as in `SIGSEGV`.
pub fn signal_name(sig: i32) -> String {
    match sig {
        libc::SIGSEGV => "SIGSEGV".into(),
        libc::SIGBUS => "SIGBUS".into(),
        libc::SIGABRT => "SIGABRT".into(),
        libc::SIGFPE => "SIGFPE".into(),
        libc::SIGILL => "SIGILL".into(),
        libc::SIGKILL => "SIGKILL".into(),
        libc::SIGXCPU => "SIGXCPU".into(),
        libc::SIGXFSZ => "SIGXFSZ".into(),
        libc::SIGTRAP => "SIGTRAP".into(),
        s => format!("signal {s}"),
    }
}

/// The signal [`signal_name`] named, if it named one.
pub fn signal_number(name: &str) -> Option<i32> {
    [
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGABRT,
        libc::SIGFPE,
        libc::SIGILL,
        libc::SIGKILL,
        libc::SIGXCPU,
        libc::SIGXFSZ,
        libc::SIGTRAP,
    ]
    .into_iter()
    .find(|&s| signal_name(s) == name)
}

/// Which frames of a stack belong to the subject.
#[derive(Debug, Clone, Default)]
pub struct FrameFilter {
    /// The subject's executable: frames elsewhere (libc, the dynamic loader, the
    /// crash-stack library) are not the subject's.
    pub program: Option<PathBuf>,
    /// Cut the stack after this function (the unit's function, for a unit: what
    /// called it is the harness).
    pub stop_after: Option<String>,
}

impl FrameFilter {
    /// The filter for the frames of `program`, the whole stack kept.
    pub fn of(program: &std::path::Path) -> FrameFilter {
        FrameFilter {
            program: Some(program.to_owned()),
            stop_after: None,
        }
    }

    fn keeps(&self, f: &Frame) -> bool {
        let name = f.function.as_str();
        if name == "??" || name.is_empty() {
            return false;
        }
        // The trestle runtime and SanitizerCoverage callbacks live in instrumented
        // executables; the C runtime's start files and sanitizer interceptors in any.
        const RUNTIME: [&str; 9] = [
            trestle_abi::hooks::RESERVED_PREFIX,
            "trestle_runtime",
            "__sanitizer",
            "__asan",
            "__ubsan",
            "__interceptor_",
            "libafl",
            "_start",
            "__libc_",
        ];
        if RUNTIME.iter().any(|p| name.contains(p))
            || name.starts_with("_ZN") && name.contains("trestle")
        {
            return false;
        }
        if let Some(file) = &f.file {
            if file.starts_with("csu/")
                || file.contains("sysdeps/")
                || file.contains("compiler-rt/")
                || file.starts_with("/rustc/")
            {
                return false;
            }
        }
        match &self.program {
            Some(p) => same_file(Path::new(&f.module), p),
            None => true,
        }
    }

    /// The frames of a record ([`symbolise`]), and when they hold none of the
    /// subject's own code but the record has a stack scan (a smashed stack: the
    /// unwinder followed an overwritten return address, or faulted), the return
    /// addresses the scan found into the program ([`RawStack::scanned_returns`])
    /// after them, symbolised and marked [`Frame::scanned`]: a crash that would
    /// have no frames is named by the callers left above the damage.
    pub fn symbolise(&self, raw: &RawStack) -> Result<Vec<Frame>> {
        let mut frames = symbolise(raw, self.program.as_deref())?;
        let Some(program) = self.program.as_deref() else {
            return Ok(frames);
        };
        if raw.scan.is_empty() || self.has_own(&frames) {
            return Ok(frames);
        }
        let returns: Vec<(u64, bool)> = raw
            .scanned_returns(program)
            .into_iter()
            .map(|a| (a, false))
            .collect();
        let scanned = look_up(raw, &returns, Some(program))?;
        frames.extend(
            scanned
                .into_iter()
                .flatten()
                .map(|f| Frame { scanned: true, ..f }),
        );
        Ok(frames)
    }

    /// Whether `stack` has a frame [`FrameFilter::signature`] would count as the
    /// subject's own.
    fn has_own(&self, stack: &[Frame]) -> bool {
        let with_source = stack.iter().any(|f| f.file.is_some());
        stack
            .iter()
            .any(|f| self.keeps(f) && (!with_source || f.file.is_some()))
    }

    /// The signature of a crash of `kind` with this stack.
    pub fn signature(&self, kind: String, stack: Vec<Frame>) -> CrashSignature {
        let mut frames = Vec::new();
        // In a unit harness, what called the function's thunk is the harness.
        let unit_end = match self.stop_after {
            Some(_) => stack
                .iter()
                .position(|f| f.function.starts_with(trestle_abi::hooks::THUNK_PREFIX))
                .unwrap_or(stack.len()),
            None => stack.len(),
        };
        // With debug info, code without a source line is not the subject's own (start
        // files, PLT stubs, or where a wild jump landed).
        let with_source = stack.iter().any(|f| f.file.is_some());
        let mut stack = stack;
        for (i, f) in stack.iter_mut().enumerate() {
            f.own = i < unit_end && self.keeps(f) && (!with_source || f.file.is_some());
        }
        let own = stack.iter().filter(|f| f.own);
        if is_stack_overflow(&kind) {
            let frames = recursion(own.map(|f| f.function.as_str()));
            return CrashSignature {
                kind,
                frames,
                stack,
                origin: None,
            };
        }
        for f in own {
            frames.push(f.function.clone());
            if self.stop_after.as_deref() == Some(f.function.as_str()) {
                break;
            }
        }
        frames.truncate(SIGNATURE_FRAMES);
        CrashSignature {
            kind,
            frames,
            stack,
            origin: None,
        }
    }

    /// The signature of a hang stopped at the stack `first` and sampled again
    /// (`samples`, a few milliseconds apart): named by the frames of the subject's
    /// code that every sample shares with the first, counted from the outermost, so
    /// by where it spins rather than by whichever function of its loop one moment
    /// caught (dc's endless multiplication was named by `_bc_shift_addsub` one time
    /// and `_bc_simp_mul` the next, both called from `_bc_rec_mul`). A sample without
    /// frames of the subject says nothing; none in common, the first stack names it.
    pub fn hang_signature(&self, first: Vec<Frame>, samples: Vec<Vec<Frame>>) -> CrashSignature {
        let mut sig = self.signature(HANG.into(), first);
        let own = |stack: &[Frame]| {
            stack
                .iter()
                .filter(|f| f.own)
                .map(|f| f.function.clone())
                .collect::<Vec<_>>()
        };
        let whole = own(&sig.stack);
        let mut shared = whole.len();
        for sample in samples {
            let theirs = own(&self.signature(HANG.into(), sample).stack);
            if !theirs.is_empty() {
                shared = shared.min(
                    whole
                        .iter()
                        .rev()
                        .zip(theirs.iter().rev())
                        .take_while(|(a, b)| a == b)
                        .count(),
                );
            }
        }
        if shared > 0 {
            sig.frames = whole[whole.len() - shared..]
                .iter()
                .take(SIGNATURE_FRAMES)
                .cloned()
                .collect();
        }
        sig
    }
}

/// Where a stack overflow is: the functions that recur on the stack, in name order
/// (the innermost frames of a runaway recursion are wherever it happened to run out,
/// which differs from run to run; the cycle does not); the innermost frames if none
/// recurs (one huge frame).
fn recursion<'a>(functions: impl Iterator<Item = &'a str>) -> Vec<String> {
    let functions: Vec<&str> = functions.collect();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for f in &functions {
        *counts.entry(f).or_default() += 1;
    }
    let recurring: Vec<String> = counts
        .iter()
        .filter(|(_, &n)| n > 1)
        .map(|(f, _)| f.to_string())
        .collect();
    let mut frames = if recurring.is_empty() {
        functions.iter().map(|f| f.to_string()).collect()
    } else {
        recurring
    };
    frames.truncate(SIGNATURE_FRAMES);
    frames
}

pub(crate) fn same_file(a: &Path, b: &Path) -> bool {
    if a == b {
        return true;
    }
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a.file_name() == b.file_name(),
    }
}

/// A crash as the preload library wrote it.
#[derive(Debug, Clone, Default)]
pub struct RawStack {
    /// The signal (0 for a record of a failed allocation).
    pub signal: i32,
    /// The size of the allocation that failed, for a record of one (the preload
    /// writes it when the run ran out of memory, and no crash followed).
    pub alloc_failed: Option<u64>,
    /// Where it happened.
    pub pc: Option<u64>,
    /// The faulting address (SIGSEGV, SIGBUS).
    pub fault_addr: Option<u64>,
    /// The stack pointer.
    pub sp: Option<u64>,
    /// The word at the stack pointer (a return address after a wild call).
    pub sp_word: Option<u64>,
    /// Return addresses from `backtrace()`, innermost first (including the handler's
    /// own frames and the signal trampoline).
    pub frames: Vec<u64>,
    /// Memory map: (start, end, file offset, path) of file-backed mappings.
    pub maps: Vec<(u64, u64, u64, String)>,
    /// A hang's further stacks, taken a few milliseconds apart after the first.
    pub samples: Vec<Sample>,
    /// The words on the stack from the stack pointer up that point into executable
    /// code, innermost first (`scan` lines; a crash's record only, none in older
    /// ones): where return addresses are looked for when the unwinder finds none of
    /// the program's ([`RawStack::scanned_returns`]).
    pub scan: Vec<u64>,
    /// Executable file-backed mappings, `[start, end)`.
    pub executable: Vec<(u64, u64)>,
    /// The mapping that holds the stack pointer (any mapping, not only file-backed
    /// ones), `[start, end)`.
    pub sp_mapping: Option<(u64, u64)>,
    /// The program's writable data at the crash, by start address (`data` blocks;
    /// SIGSEGV and SIGBUS only, none in older records).
    pub data: Vec<(u64, Vec<u8>)>,
    /// Every mapping of the memory map, file-backed or not, `[start, end)`.
    pub mapped: Vec<(u64, u64)>,
}

/// One more stack of a hang: where it was at that moment.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// The interrupted program counter.
    pub pc: Option<u64>,
    /// Return addresses, innermost first, the sampling handler's own included.
    pub frames: Vec<u64>,
}

fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()
}

/// Parse the crash-stack file.
pub fn parse_stack(text: &str) -> Result<RawStack> {
    let mut raw = RawStack::default();
    let mut saw_signal = false;
    let mut in_maps = false;
    let mut in_data = false;
    let mut ranges = Vec::new();
    for line in text.lines() {
        if in_data {
            if line == "end-data" {
                in_data = false;
            } else if let Some((_, bytes)) = raw.data.last_mut() {
                bytes.extend(unhex(line).context("bad data line")?);
            }
            continue;
        }
        if in_maps {
            if line == "end-maps" {
                in_maps = false;
            } else if let Some(m) = parse_map_line(line) {
                ranges.push((m.start, m.end));
                if let Some(path) = m.path {
                    if m.executable {
                        raw.executable.push((m.start, m.end));
                    }
                    raw.maps.push((m.start, m.end, m.offset, path));
                }
            }
            continue;
        }
        let (key, value) = line.split_once(' ').unwrap_or((line, ""));
        if key == "sample" {
            raw.samples.push(Sample::default());
            continue;
        }
        if let Some(sample) = raw.samples.last_mut() {
            // Past the first record, lines belong to the sample they follow.
            match key {
                "pc" => sample.pc = hex(value),
                "frame" => sample.frames.extend(hex(value)),
                _ => {}
            }
            continue;
        }
        match key {
            "signal" => {
                raw.signal = value.trim().parse().context("bad signal line")?;
                saw_signal = true;
            }
            "alloc-failed" => {
                raw.alloc_failed = Some(hex(value).context("bad alloc-failed line")?);
                saw_signal = true;
            }
            "pc" => raw.pc = hex(value),
            "addr" => raw.fault_addr = hex(value),
            "sp" => raw.sp = hex(value),
            "spword" => raw.sp_word = hex(value),
            "frame" => raw.frames.extend(hex(value)),
            "scan" => raw.scan.extend(hex(value)),
            "maps" => in_maps = true,
            "data" => {
                raw.data
                    .push((hex(value).context("bad data line")?, Vec::new()));
                in_data = true;
            }
            _ => {}
        }
    }
    if !saw_signal {
        bail!("no signal or alloc-failed line");
    }
    raw.sp_mapping = raw
        .sp
        .and_then(|sp| ranges.iter().copied().find(|(a, b)| (*a..*b).contains(&sp)));
    raw.mapped = ranges;
    Ok(raw)
}

/// The bytes a line of hex digits spells.
fn unhex(line: &str) -> Option<Vec<u8>> {
    let digits = line.trim().as_bytes();
    if !digits.len().is_multiple_of(2) {
        return None;
    }
    digits
        .chunks(2)
        .map(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 16).ok())
        .collect()
}

/// One line of `/proc/self/maps`.
struct MapLine {
    start: u64,
    end: u64,
    /// The file offset of `start`.
    offset: u64,
    /// Whether its code may run (`x` in its permissions).
    executable: bool,
    /// The file it maps, if any (`[stack]` and anonymous mappings have none).
    path: Option<String>,
}

/// `555c1fe58000-555c1fe59000 r-xp 00000000 fe:00 10273081   /path`.
fn parse_map_line(line: &str) -> Option<MapLine> {
    let mut parts = line.split_whitespace();
    let (range, perms, off, _dev, _inode) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    let path: Vec<&str> = parts.collect();
    let (a, b) = range.split_once('-')?;
    Some(MapLine {
        start: hex(a)?,
        end: hex(b)?,
        offset: hex(off)?,
        executable: perms.as_bytes().get(2) == Some(&b'x'),
        path: path
            .first()
            .is_some_and(|p| p.starts_with('/'))
            .then(|| path.join(" ")),
    })
}

impl RawStack {
    /// The 8-byte word at `addr` in the program's data as the record copied it.
    pub fn word_at(&self, addr: u64) -> Option<u64> {
        let (start, bytes) = self
            .data
            .iter()
            .find(|(start, bytes)| (*start..*start + bytes.len() as u64).contains(&addr))?;
        let at = (addr - start) as usize;
        let word = bytes.get(at..at + 8)?;
        Some(u64::from_ne_bytes(word.try_into().ok()?))
    }

    /// The module containing `addr` and the address to give the symboliser for it
    /// (relative to the module's load base for position-independent code).
    fn locate(&self, addr: u64) -> Option<(String, u64)> {
        let (_, _, _, path) = self
            .maps
            .iter()
            .find(|(a, b, _, _)| (*a..*b).contains(&addr))?;
        let base = self
            .maps
            .iter()
            .filter(|m| &m.3 == path)
            .map(|m| m.0 - m.2)
            .min()?;
        let pie = elf_is_dyn(Path::new(path));
        Some((path.clone(), if pie { addr - base } else { addr }))
    }

    /// The crash's stack, innermost first: the faulting pc, then the callers.
    pub fn addresses(&self) -> Vec<(u64, bool)> {
        let mut out = Vec::new();
        let in_module = |a: u64| self.maps.iter().any(|(s, e, _, _)| (*s..*e).contains(&a));
        let callers: &[u64] = match self
            .pc
            .and_then(|pc| self.frames.iter().position(|f| *f == pc))
        {
            Some(i) => &self.frames[i + 1..],
            // A failed allocation: the frames past the preload's own (its allocator
            // and the record's writing) are the program's request and its callers.
            None if self.alloc_failed.is_some() => {
                let preload = |a: &u64| {
                    self.maps
                        .iter()
                        .any(|(s, e, _, path)| (*s..*e).contains(a) && path.ends_with(PRELOAD_NAME))
                };
                let first = self
                    .frames
                    .iter()
                    .position(|a| !preload(a))
                    .unwrap_or(self.frames.len());
                // Unless nothing in the record is the preload's (a program that has
                // its own allocator): then the frames are all of interest.
                if first == 0 || self.frames.iter().any(preload) {
                    &self.frames[first..]
                } else {
                    &self.frames[..]
                }
            }
            None => &[],
        };
        if let Some(pc) = self.pc {
            if in_module(pc) {
                out.push((pc, true));
            } else if let Some(ret) = self.sp_word.filter(|w| in_module(*w)) {
                // A call to a wild address: the return address names the caller.
                out.push((ret, false));
            }
        }
        out.extend(callers.iter().map(|&a| (a, false)));
        out
    }

    /// A sample's stack, innermost first, as [`RawStack::addresses`] gives the first's:
    /// the interrupted pc, then its callers (none if the unwinder did not reach the pc
    /// through the signal frame).
    fn sample_addresses(&self, s: &Sample) -> Vec<(u64, bool)> {
        let Some(pc) = s.pc else { return Vec::new() };
        let callers = s
            .frames
            .iter()
            .position(|f| *f == pc)
            .map_or(&[][..], |i| &s.frames[i + 1..]);
        let in_module = self.maps.iter().any(|(b, e, _, _)| (*b..*e).contains(&pc));
        in_module
            .then_some((pc, true))
            .into_iter()
            .chain(callers.iter().map(|&a| (a, false)))
            .collect()
    }
}

/// The most frames a stack scan adds.
const MAX_SCANNED_FRAMES: usize = 16;

impl RawStack {
    /// The words of the stack scan ([`RawStack::scan`]) that are return addresses
    /// into `program`: in one of its executable mappings and right after a call
    /// instruction there, as the program's file has it ([`follows_call`]); innermost
    /// first, each once, [`MAX_SCANNED_FRAMES`] at most. The rest of what the scan
    /// found (pointers to functions, return addresses into libraries, a value that
    /// happens to look like code) names no caller of the program's. A program that
    /// cannot be read gives none.
    pub fn scanned_returns(&self, program: &Path) -> Vec<u64> {
        use std::os::unix::fs::FileExt as _;
        let code: Vec<(u64, u64, u64)> = self
            .maps
            .iter()
            .filter(|(start, end, _, path)| {
                self.executable.contains(&(*start, *end)) && same_file(Path::new(path), program)
            })
            .map(|(start, end, offset, _)| (*start, *end, *offset))
            .collect();
        let Ok(file) = std::fs::File::open(program) else {
            return Vec::new();
        };
        let in_code = |a: u64| {
            code.iter()
                .any(|(start, end, _)| (*start..*end).contains(&a))
        };
        let mut out = Vec::new();
        for &word in &self.scan {
            if out.len() == MAX_SCANNED_FRAMES {
                break;
            }
            if out.contains(&word) {
                continue;
            }
            let Some((start, _, offset)) = code.iter().find(|(s, e, _)| (*s..*e).contains(&word))
            else {
                continue;
            };
            let mut before = [0u8; CALL_MAX];
            let at = (word - start + offset).checked_sub(CALL_MAX as u64);
            if at.is_some_and(|at| file.read_exact_at(&mut before, at).is_ok())
                && follows_call(&before, word, in_code)
            {
                out.push(word);
            }
        }
        out
    }
}

/// The longest call instruction [`follows_call`] knows (`ff /2` with a SIB byte
/// and a 32-bit displacement).
const CALL_MAX: usize = 7;

/// Whether the bytes `before` a return address `ret` end in an x86-64 call: `e8
/// rel32` whose target `in_code` accepts, or an indirect `ff /2` (through a register
/// or memory) whose ModRM, SIB and displacement take it exactly to `ret`.
fn follows_call(before: &[u8; CALL_MAX], ret: u64, in_code: impl Fn(u64) -> bool) -> bool {
    let direct = before[CALL_MAX - 5] == 0xe8 && {
        let rel = i32::from_le_bytes([before[3], before[4], before[5], before[6]]);
        in_code(ret.wrapping_add_signed(rel.into()))
    };
    direct
        || (2..=CALL_MAX).any(|len| {
            let at = CALL_MAX - len;
            before[at] == 0xff && indirect_call_len(&before[at + 1..]) == Some(len)
        })
}

/// The length of an `ff /2` call whose ModRM byte begins `rest` (the opcode
/// included), or `None` if the ModRM byte is not that of a near call.
fn indirect_call_len(rest: &[u8]) -> Option<usize> {
    let modrm = *rest.first()?;
    if (modrm >> 3) & 7 != 2 {
        return None;
    }
    let (mode, rm) = (modrm >> 6, modrm & 7);
    let sib = usize::from(mode != 3 && rm == 4);
    let disp = match mode {
        0 if rm == 5 => 4,
        0 if rm == 4 => {
            if rest.get(1)? & 7 == 5 {
                4
            } else {
                0
            }
        }
        0 | 3 => 0,
        1 => 1,
        _ => 4,
    };
    Some(2 + sib + disp)
}

pub(crate) fn elf_is_dyn(path: &Path) -> bool {
    use std::io::Read as _;
    let mut head = [0u8; 18];
    match std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head)) {
        Ok(()) => &head[..4] == b"\x7fELF" && u16::from_le_bytes([head[16], head[17]]) == 3,
        Err(_) => true,
    }
}

/// What `llvm-symbolizer --output-style=JSON` prints: a reply per address, or one
/// error when it cannot read the module (not an object file, gone).
#[derive(Deserialize)]
#[serde(untagged)]
enum SymOutput {
    Replies(Vec<SymReply>),
    Failed {
        #[serde(rename = "Error")]
        _error: serde_json::Value,
    },
}

#[derive(Deserialize)]
struct SymReply {
    #[serde(rename = "Symbol", default)]
    symbol: Vec<SymFrame>,
}

#[derive(Deserialize)]
struct SymFrame {
    #[serde(rename = "FunctionName", default)]
    function: String,
    #[serde(rename = "FileName", default)]
    file: String,
    #[serde(rename = "Line", default)]
    line: u32,
}

/// Symbolise a raw stack: every address becomes one frame per inlined function.
/// With `only`, addresses in other modules (the C library, the loader) are not looked
/// up, only named by module and offset: one symboliser run instead of several.
pub fn symbolise(raw: &RawStack, only: Option<&Path>) -> Result<Vec<Frame>> {
    let mut addrs = raw.addresses();
    // The word at the stack pointer, looked up too: when the pc turns out to be
    // somewhere without source (a jump through a corrupted pointer that happened to
    // land inside the program), it is the way back to the caller.
    let sp_index = match raw.sp_word.filter(|w| raw.locate(*w).is_some()) {
        Some(w) if addrs.first().is_some_and(|a| a.1) => {
            addrs.push((w, false));
            Some(addrs.len() - 1)
        }
        _ => None,
    };
    let mut frames = look_up(raw, &addrs, only)?;
    if let Some(i) = sp_index {
        let sp_frames = std::mem::take(&mut frames[i]);
        let pc_without_source = frames
            .first()
            .is_some_and(|f| f.iter().all(|f| f.file.is_none()));
        if pc_without_source && sp_frames.iter().any(|f| f.file.is_some()) {
            frames.insert(1, sp_frames);
        }
    }
    Ok(frames.into_iter().flatten().collect())
}

/// A hang's further stacks ([`RawStack::samples`]), each symbolised as [`symbolise`]
/// does the first, in one run of the symboliser for all.
pub fn symbolise_samples(raw: &RawStack, only: Option<&Path>) -> Result<Vec<Vec<Frame>>> {
    let lists: Vec<Vec<(u64, bool)>> = raw
        .samples
        .iter()
        .map(|s| raw.sample_addresses(s))
        .collect();
    let mut frames = look_up(raw, &lists.concat(), only)?.into_iter();
    Ok(lists
        .iter()
        .map(|l| frames.by_ref().take(l.len()).flatten().collect())
        .collect())
}

/// The frames at each of `addrs` (more than one where functions were inlined), by
/// the memory map of `raw`.
fn look_up(raw: &RawStack, addrs: &[(u64, bool)], only: Option<&Path>) -> Result<Vec<Vec<Frame>>> {
    let mut by_module: BTreeMap<String, Vec<(usize, u64)>> = BTreeMap::new();
    for (i, (a, exact)) in addrs.iter().enumerate() {
        if let Some((module, rel)) = raw.locate(*a) {
            // A return address points after the call: look up the call itself.
            let rel = if *exact { rel } else { rel.saturating_sub(1) };
            by_module.entry(module).or_default().push((i, rel));
        }
    }
    let mut frames: Vec<Vec<Frame>> = vec![Vec::new(); addrs.len()];
    let tool = crate::tools::symbolizer();
    for (module, list) in &by_module {
        let wanted = only.is_none_or(|p| same_file(Path::new(module), p));
        let replies: Vec<SymReply> = match &tool {
            Some(tool) if wanted => {
                let out = crate::tools::output(
                    Command::new(tool)
                        .arg(format!("--obj={module}"))
                        .args([
                            "--output-style=JSON",
                            "--inlining",
                            "--functions=linkage",
                            "--demangle",
                        ])
                        .args(list.iter().map(|(_, a)| format!("0x{a:x}"))),
                )?;
                // Frames it cannot name stay addresses, as do those of a module it
                // cannot read (its one error object); a reply that is not its JSON
                // at all is a symbolizer we do not understand, and says so.
                let reply: SymOutput = serde_json::from_slice(&out.stdout).with_context(|| {
                    format!(
                        "{} gave no JSON for {module}: {}",
                        tool.display(),
                        String::from_utf8_lossy(&out.stderr).trim()
                    )
                })?;
                match reply {
                    SymOutput::Replies(replies) => replies,
                    SymOutput::Failed { .. } => Vec::new(),
                }
            }
            _ => Vec::new(),
        };
        for (k, (i, rel)) in list.iter().enumerate() {
            let syms = replies
                .get(k)
                .map(|r| r.symbol.as_slice())
                .unwrap_or_default();
            if syms.is_empty() {
                frames[*i].push(Frame {
                    function: format!("{}+0x{rel:x}", short(module)),
                    file: None,
                    line: 0,
                    module: module.clone(),
                    own: false,
                    scanned: false,
                });
            }
            for s in syms {
                frames[*i].push(Frame {
                    function: if s.function.is_empty() {
                        "??".into()
                    } else {
                        s.function.clone()
                    },
                    file: (!s.file.is_empty() && s.file != "??").then(|| s.file.clone()),
                    line: s.line,
                    module: module.clone(),
                    own: false,
                    scanned: false,
                });
            }
        }
    }
    Ok(frames)
}

fn short(module: &str) -> &str {
    module.rsplit('/').next().unwrap_or(module)
}

/// A sanitizer's report on stderr: its kind and the first stack it prints.
pub fn parse_sanitizer(stderr: &str, program: &Path) -> Option<(String, Vec<Frame>)> {
    let mut kind = None;
    let mut frames = Vec::new();
    let mut in_stack = false;
    for line in stderr.lines() {
        let t = line.trim();
        if kind.is_none() {
            for (tool, tag) in [
                ("AddressSanitizer", "asan"),
                ("UndefinedBehaviorSanitizer", "ubsan"),
                ("LeakSanitizer", "lsan"),
                ("MemorySanitizer", "msan"),
            ] {
                if let Some(rest) = t.split_once(&format!("ERROR: {tool}: ")).map(|x| x.1) {
                    let what = rest.split_whitespace().next().unwrap_or("error");
                    kind = Some(format!("{tag}:{what}"));
                }
            }
            if kind.is_none() && t.contains("runtime error:") && t.contains(".c") {
                kind = Some("ubsan:runtime-error".into());
            }
            continue;
        }
        if let Some(rest) = t.strip_prefix('#') {
            in_stack = true;
            // #1 0x557f45bd2c4a in check_login /path/requests.c:104:9
            let Some((_, after)) = rest.split_once(" in ") else {
                continue;
            };
            let (function, loc) = after.split_once(' ').unwrap_or((after, ""));
            let (file, line, module) = if loc.starts_with('(') {
                let inner = loc.trim_start_matches('(').split(')').next().unwrap_or("");
                (None, 0, inner.split('+').next().unwrap_or("").to_owned())
            } else {
                let mut parts = loc.split(':');
                let file = parts.next().unwrap_or("").to_owned();
                let line = parts.next().and_then(|l| l.parse().ok()).unwrap_or(0);
                (Some(file), line, program.display().to_string())
            };
            frames.push(Frame {
                function: function.to_owned(),
                file,
                line,
                module,
                own: false,
                scanned: false,
            });
        } else if in_stack {
            break;
        }
    }
    // Frames without source locations inside the program are the sanitizer's own
    // interceptors (strcpy, memcpy): not the subject's code.
    frames.retain(|f| f.file.is_some());
    kind.map(|k| (k, frames))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(kind: &str, frames: &[&str]) -> CrashSignature {
        CrashSignature {
            kind: kind.into(),
            frames: frames.iter().map(|s| s.to_string()).collect(),
            stack: vec![],
            origin: None,
        }
    }

    #[test]
    fn matching_follows_the_shorter_stack() {
        let unit = sig("SIGSEGV", &["store_value"]);
        assert!(unit.matches(&sig(
            "SIGSEGV",
            &["store_value", "handle_set", "dispatch_request"]
        )));
        assert!(unit.matches(&sig("asan:SEGV", &["store_value", "handle_set"])));
        assert!(!unit.matches(&sig("SIGSEGV", &["handle_set", "store_value"])));
        assert!(!unit.matches(&sig("SIGFPE", &["store_value"])));
        assert!(!unit.matches(&sig("SIGSEGV", &[])));
        assert!(sig("SIGABRT", &[]).matches(&sig("SIGABRT", &[])));
        assert_eq!(unit.key(), "memory@store_value");
        assert!(CrashSignature::keys_match(
            "memory@check_login",
            "memory@check_login<handle_login<dispatch_request"
        ));
        assert!(!CrashSignature::keys_match(
            "memory@check_login",
            "SIGFPE@check_login"
        ));
        assert!(!CrashSignature::keys_match(
            "memory@main",
            "memory@store_value<main"
        ));
    }

    #[test]
    fn one_faulting_line_is_one_bug_whatever_called_it() {
        let frame = |f: &str, line: u32| Frame {
            function: f.into(),
            file: Some("/src/dc/array.c".into()),
            line,
            module: "/bin/dc".into(),
            own: false,
            scanned: false,
        };
        let filter = FrameFilter {
            program: None,
            stop_after: None,
        };
        let from_file = filter.signature(
            "SIGSEGV".into(),
            vec![
                frame("dc_array_set", 88),
                frame("dc_func", 310),
                frame("dc_evalfile", 700),
            ],
        );
        let from_string = filter.signature(
            "SIGSEGV".into(),
            vec![
                frame("dc_array_set", 88),
                frame("dc_func", 310),
                frame("dc_evalstr", 512),
            ],
        );
        assert_ne!(from_file.frames, from_string.frames);
        assert_eq!(
            from_file.key(),
            "memory@dc_array_set:array.c:88|dc_array_set<dc_func<dc_evalfile"
        );
        assert_eq!(
            CrashSignature::stable_key(&from_file.key()),
            "memory@dc_array_set:array.c:88"
        );
        assert!(CrashSignature::keys_match(
            &from_file.key(),
            &from_string.key()
        ));
        // Another line of the same function reached another way is another bug.
        let other_line = filter.signature(
            "SIGSEGV".into(),
            vec![frame("dc_array_set", 95), frame("dc_func", 310)],
        );
        assert!(!CrashSignature::keys_match(
            &other_line.key(),
            &from_file.key()
        ));
        let other_path = filter.signature(
            "SIGSEGV".into(),
            vec![
                frame("dc_array_set", 95),
                frame("dc_func", 310),
                frame("dc_evalstr", 512),
            ],
        );
        assert!(!CrashSignature::keys_match(
            &other_path.key(),
            &from_file.key()
        ));
        // So is another kind of crash at the same line.
        let abort = filter.signature(
            "SIGABRT".into(),
            vec![frame("dc_array_set", 88), frame("dc_func", 310)],
        );
        assert!(!CrashSignature::keys_match(&abort.key(), &from_file.key()));
        // One heap overflow that faults once inside strcpy (the call at line 104) and
        // once at the overwritten pointer's call (line 113), on one path: one bug.
        let path = |line: u32| {
            vec![
                frame("check_login", line),
                frame("handle_login", 161),
                frame("dispatch_request", 206),
                frame("process", 223),
            ]
        };
        let (in_strcpy, at_call) = (
            filter.signature("SIGSEGV".into(), path(104)),
            filter.signature("SIGSEGV".into(), path(113)),
        );
        assert_ne!(
            CrashSignature::stable_key(&in_strcpy.key()),
            CrashSignature::stable_key(&at_call.key())
        );
        assert!(CrashSignature::keys_match(&in_strcpy.key(), &at_call.key()));
        // One NULL read from a global and dereferenced on two lines of two functions:
        // one bug, fingerprinted by the global; read from another global, another.
        let through = |function: &str, line: u32, global: &str| CrashSignature {
            origin: Some(global.into()),
            ..filter.signature(
                "SIGSEGV".into(),
                vec![frame(function, line), frame("main", 9)],
            )
        };
        let (compared, written) = (through("same_sep", 19, "sep"), through("emit", 24, "sep"));
        assert_eq!(
            compared.key(),
            "memory@same_sep:array.c:19~sep|same_sep<main"
        );
        assert!(CrashSignature::keys_match(&compared.key(), &written.key()));
        assert_eq!(
            CrashSignature::stable_key(&compared.key()),
            CrashSignature::stable_key(&written.key())
        );
        let other = through("tally", 29, "tallies");
        assert!(!CrashSignature::keys_match(&other.key(), &compared.key()));
        // Without the origin (a build whose record has no data), by the line as before.
        let plain_line = filter.signature(
            "SIGSEGV".into(),
            vec![frame("same_sep", 19), frame("main", 9)],
        );
        assert!(CrashSignature::keys_match(
            &plain_line.key(),
            &compared.key()
        ));
        assert!(!CrashSignature::keys_match(
            &plain_line.key(),
            &written.key()
        ));
        // A hang stopped inside a helper its loop calls is the loop's hang; another
        // loop's is not.
        let hang =
            |f: &[&str]| filter.signature(HANG.into(), f.iter().map(|f| frame(f, 7)).collect());
        let (in_loop, in_helper) = (
            hang(&["spin", "main"]),
            hang(&["strlen_ish", "spin", "main"]),
        );
        assert_eq!(in_loop.key(), "hang@spin<main");
        assert!(CrashSignature::keys_match(&in_loop.key(), &in_helper.key()));
        assert!(!CrashSignature::keys_match(
            &in_loop.key(),
            &hang(&["other_loop", "main"]).key()
        ));
        assert!(!CrashSignature::keys_match(
            &hang(&["main"]).key(),
            &in_loop.key()
        ));
        // The same spin reached from two places is one hang; the same function's
        // spin under another caller is not.
        let (from_address, from_subst) = (
            hang(&["dfaexec_main", "match_regex", "match_address_p"]),
            hang(&["dfaexec_main", "match_regex", "do_subst"]),
        );
        assert!(CrashSignature::keys_match(
            &from_address.key(),
            &from_subst.key()
        ));
        assert!(!CrashSignature::keys_match(
            &from_address.key(),
            &hang(&["dfaexec_main", "dfa_supported", "do_subst"]).key()
        ));
        assert!(!CrashSignature::keys_match(
            &in_loop.key(),
            "memory@spin<main"
        ));
        // A key from before places were kept matches by its frames.
        assert!(CrashSignature::keys_match(
            "memory@dc_array_set<dc_func",
            &from_file.key()
        ));
    }

    #[test]
    fn asan_reports_give_kind_and_subject_frames() {
        let report = "==1==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x5 at pc 0x1\n\
            WRITE of size 45 at 0x5 thread T0\n\
            \x20   #0 0x557f45b78f59 in strcpy (/tmp/req+0xb2f59) (BuildId: fc)\n\
            \x20   #1 0x557f45bd2c4a in check_login /src/requests.c:104:9\n\
            \x20   #2 0x557f45bd2c4a in handle_login /src/requests.c:161:43\n\
            \x20   #6 0x7efd633fe249 in __libc_start_call_main csu/../sysdeps/nptl/libc_start_call_main.h:58:16\n\
            \n\
            allocated by thread T0 here:\n\
            \x20   #0 0x557f45b91799 in calloc (/tmp/req+0xcb799)\n";
        let (kind, frames) = parse_sanitizer(report, Path::new("/tmp/req")).unwrap();
        assert_eq!(kind, "asan:heap-buffer-overflow");
        let s = FrameFilter {
            program: Some("/tmp/req".into()),
            stop_after: None,
        }
        .signature(kind, frames);
        assert_eq!(s.frames, vec!["check_login", "handle_login"]);
    }

    #[test]
    fn stack_files_parse() {
        let text = "signal 11\npc 0x1010\nspword 0x0\nmaps\n\
            1000-2000 r-xp 00000000 fe:00 1 /bin/prog\n7000-8000 r-xp 00000000 fe:00 2 /lib/x.so\nend-maps\n\
            frame 0x7000\nframe 0x1010\nframe 0x1200\n";
        let raw = parse_stack(text).unwrap();
        assert_eq!(raw.signal, 11);
        assert_eq!(raw.addresses(), vec![(0x1010, true), (0x1200, false)]);
        assert!(parse_stack("garbage").is_err());
    }

    #[test]
    fn records_without_scan_lines_parse_as_before() {
        let raw = parse_stack(
            "signal 11\naddr 0x0\npc 0x0\nsp 0x7ffd00010000\nspword 0x0\nmaps\n\
             1000-2000 r-xp 00000000 fe:00 1 /bin/prog\nend-maps\n",
        )
        .unwrap();
        assert!(raw.scan.is_empty());
        assert_eq!(raw.executable, [(0x1000, 0x2000)]);
        assert_eq!(raw.sp_mapping, None, "[stack] was not in the map");
    }

    /// A program image whose code mapping (file offset 0x1000 at 0x555555555000)
    /// holds, in order: a direct call into itself, a direct call far outside it, an
    /// indirect call through a register, an indirect call through memory with a SIB
    /// byte and a 32-bit displacement, and bytes that are no call.
    fn program_with_calls(dir: &Path) -> (PathBuf, [u64; 5]) {
        let mut image = vec![0x90u8; 0x2000];
        let base = 0x555555555000u64;
        let mut at = 0x1100usize;
        let mut put = |bytes: &[u8]| {
            image[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len() + 16;
            base + (at - 16 - 0x1000) as u64
        };
        let near = put(&[0xe8, 0x00, 0xff, 0xff, 0xff]); // call .-0x100+5
        let far = put(&[0xe8, 0x00, 0x00, 0x00, 0x40]); // call +1 GiB: no code there
        let reg = put(&[0x41, 0xff, 0xd3]); // call *%r11
        let mem = put(&[0xff, 0x94, 0xc8, 0x10, 0x20, 0x00, 0x00]); // call *0x2010(%rax,%rcx,8)
        let none = put(&[0x48, 0x89, 0xc7]); // mov %rax,%rdi
        let path = dir.join("prog");
        std::fs::write(&path, &image).unwrap();
        (path, [near, far, reg, mem, none])
    }

    #[test]
    fn a_stack_scan_keeps_only_return_addresses_after_calls_into_the_program() {
        let dir = tempfile::tempdir().unwrap();
        let (prog, [near, far, reg, mem, none]) = program_with_calls(dir.path());
        let text = format!(
            "signal 11\naddr 0x4141414141\npc 0x7f0000000010\nsp 0x7ffd00010000\nmaps\n\
             555555554000-555555555000 r--p 00000000 fe:00 1 {p}\n\
             555555555000-555555556000 r-xp 00001000 fe:00 1 {p}\n\
             7f0000000000-7f0000001000 r-xp 00000000 fe:00 2 /lib/libc.so.6\n\
             7ffcffff0000-7ffd00020000 rw-p 00000000 00:00 0 [stack]\nend-maps\n\
             scan 0x{none:x}\nscan 0x{near:x}\nscan 0x7f0000000123\nscan 0x{far:x}\n\
             scan 0x{reg:x}\nscan 0x{near:x}\nscan 0x555555554100\nscan 0x{mem:x}\n\
             frame 0x7f0000000010\n",
            p = prog.display()
        );
        let raw = parse_stack(&text).unwrap();
        assert_eq!(raw.scan.len(), 8);
        assert_eq!(raw.sp_mapping, Some((0x7ffcffff0000, 0x7ffd00020000)));
        // Not after a call, in a library, after a call to nowhere, repeated, or in
        // the program's data: none of those.
        assert_eq!(raw.scanned_returns(&prog), [near, reg, mem]);
        assert!(raw.scanned_returns(&dir.path().join("missing")).is_empty());
        // Symbolised (without debug info, by module and offset) as frames of the
        // program marked as scanned, after the unwound ones.
        let frames = FrameFilter::of(&prog).symbolise(&raw).unwrap();
        let scanned: Vec<&Frame> = frames.iter().filter(|f| f.scanned).collect();
        assert_eq!(scanned.len(), 3, "{frames:?}");
        assert!(scanned
            .iter()
            .all(|f| same_file(Path::new(&f.module), &prog)));
        let unwound: Vec<&Frame> = frames.iter().take_while(|f| !f.scanned).collect();
        assert_eq!(unwound.len(), 1, "the pc in the C library: {frames:?}");
        assert_eq!(unwound[0].module, "/lib/libc.so.6");
    }

    #[test]
    fn a_crash_named_by_scanned_frames_says_so_and_keys_as_any_other() {
        let frame = |f: &str, line, scanned| Frame {
            function: f.into(),
            file: Some("/src/smash.c".into()),
            line,
            module: "/bin/smash".into(),
            own: false,
            scanned,
        };
        let filter = FrameFilter {
            program: None,
            stop_after: None,
        };
        let libc = Frame {
            function: "libc.so.6+0x1234".into(),
            file: None,
            line: 0,
            module: "/lib/libc.so.6".into(),
            own: false,
            scanned: false,
        };
        let s = filter.signature(
            "SIGSEGV".into(),
            vec![libc, frame("run_job", 30, true), frame("main", 44, true)],
        );
        assert!(s.from_scan());
        assert_eq!(s.to_string(), "SIGSEGV in run_job < main (stack scan)");
        assert_eq!(s.key(), "memory@run_job:smash.c:30|run_job<main");
        assert!(s.stack[1].to_string().ends_with("[stack scan]"));
        let unwound = filter.signature("SIGSEGV".into(), vec![frame("run_job", 30, false)]);
        assert!(!unwound.from_scan());
        assert!(!filter.signature("SIGSEGV".into(), Vec::new()).from_scan());
    }

    #[test]
    fn a_fault_past_the_top_of_the_stack_is_no_stack_overflow() {
        // mawk's sprintf wrote spaces up to the end of the stack, 11 KiB above sp.
        let text = "signal 11\naddr 0x7fffb1482000\npc 0x7f1868908275\nsp 0x7fffb147f520\nmaps\n\
            7fffb1461000-7fffb1482000 rw-p 00000000 00:00 0 [stack]\nend-maps\n";
        let raw = parse_stack(text).unwrap();
        assert_eq!(crash_kind(libc::SIGSEGV, Some(&raw)), "SIGSEGV");
        // Below the stack pointer, at the guard: the stack ran out.
        let low = parse_stack(
            &text
                .replace("addr 0x7fffb1482000", "addr 0x7fffb1460ff8")
                .replace("sp 0x7fffb147f520", "sp 0x7fffb1461000"),
        )
        .unwrap();
        assert_eq!(crash_kind(libc::SIGSEGV, Some(&low)), STACK_OVERFLOW);
    }

    #[test]
    fn a_failed_allocation_is_named_by_the_frames_past_the_preload() {
        let text = "alloc-failed 0x4000000\nmaps\n\
            1000-2000 r-xp 00000000 fe:00 1 /bin/prog\n7000-8000 r-xp 00000000 fe:00 2 /opt/trestle/libtrestle_crashstack.so\n\
            9000-a000 r-xp 00000000 fe:00 3 /lib/libc.so.6\nend-maps\n\
            frame 0x7010\nframe 0x7020\nframe 0x1100\nframe 0x1200\nframe 0x9100\n";
        let raw = parse_stack(text).unwrap();
        assert_eq!((raw.signal, raw.alloc_failed), (0, Some(0x4000000)));
        assert_eq!(
            raw.addresses(),
            vec![(0x1100, false), (0x1200, false), (0x9100, false)]
        );
        // Without the preload's frames (a program with its own allocator), all of them.
        let own = parse_stack("alloc-failed 0x10\nmaps\n1000-2000 r-xp 00000000 fe:00 1 /bin/prog\nend-maps\nframe 0x1100\n").unwrap();
        assert_eq!(own.addresses(), vec![(0x1100, false)]);
        // Two blow-ups that failed in the same allocating function under one caller
        // are one bug; another caller is another. The line plays no part.
        let frame = |f: &str, line| Frame {
            function: f.into(),
            file: Some("grow.c".into()),
            line,
            module: "/bin/prog".into(),
            own: false,
            scanned: false,
        };
        let filter = FrameFilter {
            program: None,
            stop_after: None,
        };
        let a = filter.signature(
            OUT_OF_MEMORY.into(),
            vec![frame("xmalloc", 10), frame("grow", 20), frame("main", 30)],
        );
        let b = filter.signature(
            OUT_OF_MEMORY.into(),
            vec![
                frame("xmalloc", 11),
                frame("grow", 21),
                frame("parse", 40),
                frame("main", 30),
            ],
        );
        let c = filter.signature(
            OUT_OF_MEMORY.into(),
            vec![frame("xmalloc", 10), frame("copy", 50), frame("main", 30)],
        );
        assert!(
            a.key().starts_with("out-of-memory@xmalloc<grow"),
            "{}",
            a.key()
        );
        assert!(CrashSignature::keys_match(&a.key(), &b.key()));
        assert!(!CrashSignature::keys_match(&a.key(), &c.key()));
        assert!(
            !CrashSignature::keys_match(
                &a.key(),
                &filter.signature(HANG.into(), a.stack.clone()).key()
            ),
            "a hang in the same place is another class"
        );
    }

    #[test]
    fn a_fault_at_the_stack_pointer_is_a_stack_overflow_named_by_its_recursion() {
        let raw =
            parse_stack("signal 11\naddr 0x7ffd0000fff8\npc 0x1010\nsp 0x7ffd00010000\n").unwrap();
        assert_eq!(crash_kind(libc::SIGSEGV, Some(&raw)), STACK_OVERFLOW);
        // A fault far from the stack pointer is a memory error; no stack file, the signal.
        let far = parse_stack("signal 11\naddr 0x10\npc 0x1010\nsp 0x7ffd00010000\n").unwrap();
        assert_eq!(crash_kind(libc::SIGSEGV, Some(&far)), "SIGSEGV");
        assert_eq!(crash_kind(libc::SIGSEGV, None), "SIGSEGV");
        assert_eq!(crash_kind(libc::SIGABRT, Some(&raw)), "SIGABRT");
        // Two overflows of one runaway recursion that ran out in different places
        // are one crash: the recurring functions name it, not the innermost frames.
        let frame = |f: &str| Frame {
            function: f.into(),
            file: Some("dc/eval.c".into()),
            line: 1,
            module: "/bin/dc".into(),
            own: false,
            scanned: false,
        };
        let filter = FrameFilter {
            program: None,
            stop_after: None,
        };
        let a = filter.signature(
            STACK_OVERFLOW.into(),
            [
                "bc_new_num",
                "_bc_do_add",
                "bc_add",
                "dc_evalstr",
                "dc_func",
                "dc_evalstr",
                "dc_func",
                "main",
            ]
            .map(frame)
            .to_vec(),
        );
        let b = filter.signature(
            STACK_OVERFLOW.into(),
            [
                "malloc_hook",
                "dc_func",
                "dc_evalstr",
                "dc_func",
                "dc_evalstr",
                "main",
            ]
            .map(frame)
            .to_vec(),
        );
        assert_eq!(a.frames, ["dc_evalstr", "dc_func"]);
        assert_eq!(a.key(), b.key());
        assert!(a.matches(&b));
        assert!(a.matches(&sig("asan:stack-overflow", &["dc_evalstr"])));
        assert!(!a.matches(&sig("SIGSEGV", &["dc_evalstr", "dc_func"])));
        // No recursion (one huge frame): the innermost frames.
        let c = filter.signature(
            STACK_OVERFLOW.into(),
            ["big_frame", "main"].map(frame).to_vec(),
        );
        assert_eq!(c.frames, ["big_frame", "main"]);
    }

    #[test]
    fn a_hangs_samples_follow_its_first_record() {
        let text = "signal 24\npc 0x1010\nsp 0x7ffd00010000\nmaps\n\
            1000-2000 r-xp 00000000 fe:00 1 /bin/prog\n7000-8000 r-xp 00000000 fe:00 2 /lib/x.so\nend-maps\n\
            frame 0x7000\nframe 0x1010\nframe 0x1200\n\
            sample\npc 0x1400\nframe 0x7010\nframe 0x7020\nframe 0x1400\nframe 0x1210\nframe 0x1300\n\
            sample\npc 0x7100\nframe 0x7010\nframe 0x7100\nframe 0x1220\n\
            sample\npc 0x1500\nframe 0x7010\n";
        let raw = parse_stack(text).unwrap();
        assert_eq!(raw.signal, 24);
        assert_eq!(
            raw.frames,
            [0x7000, 0x1010, 0x1200],
            "the samples' frames are not the first record's"
        );
        assert_eq!(raw.samples.len(), 3);
        assert_eq!(
            raw.sample_addresses(&raw.samples[0]),
            [(0x1400, true), (0x1210, false), (0x1300, false)]
        );
        // Stopped in the C library: there, then the program's call.
        assert_eq!(
            raw.sample_addresses(&raw.samples[1]),
            [(0x7100, true), (0x1220, false)]
        );
        // The unwinder did not reach the pc: the pc alone.
        assert_eq!(raw.sample_addresses(&raw.samples[2]), [(0x1500, true)]);
    }

    #[test]
    fn a_hang_is_named_by_what_every_sample_of_it_shares() {
        let frame = |f: &str| Frame {
            function: f.into(),
            file: Some("dc/number.c".into()),
            line: 1,
            module: "/bin/dc".into(),
            own: false,
            scanned: false,
        };
        let stack = |fs: &[&str]| fs.iter().map(|f| frame(f)).collect::<Vec<_>>();
        let filter = FrameFilter {
            program: None,
            stop_after: None,
        };
        // One endless multiplication, stopped in a function its loop calls, another
        // each time; the samples agree on the loop.
        let first = stack(&[
            "_bc_shift_addsub",
            "_bc_rec_mul",
            "_bc_rec_mul",
            "bc_multiply",
            "dc_binop",
            "main",
        ]);
        let again = stack(&[
            "_bc_simp_mul",
            "_bc_rec_mul",
            "_bc_rec_mul",
            "_bc_rec_mul",
            "bc_multiply",
            "dc_binop",
            "main",
        ]);
        assert_ne!(
            filter.signature(HANG.into(), first.clone()).key(),
            filter.signature(HANG.into(), again.clone()).key()
        );
        let samples = |fs: &[&[&str]]| fs.iter().map(|s| stack(s)).collect::<Vec<_>>();
        let a = filter.hang_signature(
            first,
            samples(&[
                &[
                    "_bc_rec_mul",
                    "_bc_rec_mul",
                    "bc_multiply",
                    "dc_binop",
                    "main",
                ],
                &[
                    "_bc_simp_mul",
                    "_bc_rec_mul",
                    "bc_multiply",
                    "dc_binop",
                    "main",
                ],
            ]),
        );
        assert_eq!(a.frames, ["_bc_rec_mul", "bc_multiply", "dc_binop"]);
        let b = filter.hang_signature(
            again,
            samples(&[
                &[
                    "_bc_shift_addsub",
                    "_bc_rec_mul",
                    "bc_multiply",
                    "dc_binop",
                    "main",
                ],
                &[],
            ]),
        );
        assert_eq!(a.key(), b.key(), "one hang, one name");
        assert_eq!(
            b.stack[0].function, "_bc_simp_mul",
            "the stack shown is the first record's"
        );
        // Samples with nothing in common (another thread's, say) leave the first's name.
        let c = filter.hang_signature(
            stack(&["spin", "main"]),
            samples(&[&["poll_loop", "worker_main"]]),
        );
        assert_eq!(c.frames, ["spin", "main"]);
        // No samples: the first stack alone, as before.
        assert_eq!(
            filter
                .hang_signature(stack(&["spin", "main"]), Vec::new())
                .frames,
            ["spin", "main"]
        );
    }
}

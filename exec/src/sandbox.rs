//! Running a program on a system test where it can do no harm: bubblewrap with a
//! read-only view of the machine, a fresh working directory, no network, its own
//! process tree; rlimits on CPU time, address space, file size and open files; a
//! wall-clock timeout. Lifted tests are untrusted input by design: they were made to
//! crash things.
//!
//! A program built with `trestle-cc` is started once, as a forkserver inside the
//! sandbox, and each run is a fork of it ([`served`]). Any other program is started
//! for each run: inside the sandbox `trestle-exec` runs it and writes how it ended
//! (bubblewrap alone turns a death by signal into an exit status). Either way
//! `libtrestle_crashstack.so` is preloaded so a crash leaves its stack, and
//! everything the run created is deleted when it ends.

mod served;

use crate::launch::{run_to_end, Capture, Ended, Layout};
use crate::origin::pointer_origin;
use crate::signature::{
    crash_kind, parse_sanitizer, parse_stack, symbolise_samples, CrashSignature, Frame,
    FrameFilter, RawStack, HANG, OUT_OF_MEMORY,
};
use crate::systest::RunStatus;
use anyhow::{bail, Context as _, Result};
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use trestle_abi::unit::SystemTest;

/// Resource limits for one run.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    /// Wall-clock time.
    pub wall: Duration,
    /// CPU seconds (RLIMIT_CPU).
    pub cpu_secs: u64,
    /// Address space in bytes (RLIMIT_AS; not applied to sanitizer builds, which
    /// reserve terabytes of shadow memory).
    pub memory: u64,
    /// Largest file the program may write, in bytes (RLIMIT_FSIZE).
    pub file_size: u64,
    /// Open descriptors (RLIMIT_NOFILE).
    pub open_files: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            wall: Duration::from_secs(10),
            cpu_secs: 10,
            memory: 4 << 30,
            file_size: 64 << 20,
            open_files: 256,
        }
    }
}

/// Runs again of a crash that left no stack, for one that does.
const STACK_RETRIES: usize = 2;

/// The CPU limit for a wall-clock limit: a little less, so that a program spinning
/// on the CPU is told apart from one that waits.
pub fn cpu_limit(wall: Duration) -> u64 {
    ((wall.as_secs_f64() * 0.8).ceil() as u64).max(1)
}

/// How a sandboxed run went.
#[derive(Debug, Clone)]
pub struct SandboxRun {
    /// How the program ended.
    pub status: RunStatus,
    /// The end of its stdout (64 KiB at most).
    pub stdout: Vec<u8>,
    /// The end of its stderr (64 KiB at most).
    pub stderr: Vec<u8>,
    /// How many bytes it wrote to stdout in all.
    pub stdout_bytes: u64,
    /// How many bytes it wrote to stderr in all.
    pub stderr_bytes: u64,
    /// Peak resident memory, KiB (0 if unknown).
    pub max_rss_kib: u64,
    /// CPU time, milliseconds.
    pub cpu_ms: u64,
    /// Wall time.
    pub wall: Duration,
    /// A limit the run ran into, in words.
    pub limit: Option<String>,
    /// The crash, if it crashed (signal or sanitizer report).
    pub crash: Option<CrashSignature>,
    /// Where it was spinning, if it ran into the time limit (kind [`HANG`]; no frames
    /// when the wall-clock limit stopped it, or it was not spinning on the CPU).
    pub hang: Option<CrashSignature>,
    /// Where it was allocating, if it ran into the memory limit (kind
    /// [`OUT_OF_MEMORY`]; the frames of the first allocation that failed, none when
    /// no allocation failed through the C library's allocator).
    pub memory: Option<CrashSignature>,
    /// It was forked from the program's forkserver (not started for this run).
    pub forked: bool,
}

impl SandboxRun {
    /// A crash, as opposed to a clean exit, an error exit or a limit.
    pub fn crashed(&self) -> bool {
        self.crash.is_some()
    }
}

/// Runs programs on system tests, isolated.
#[derive(Debug, Clone)]
pub struct Sandbox {
    bwrap: Option<PathBuf>,
    exec: PathBuf,
    preload: PathBuf,
    /// The limits of every run.
    pub limits: Limits,
    /// Whether a program built with trestle-cc is served (forked from its
    /// forkserver) rather than started for every run.
    serve: bool,
    /// The forkserver of the program run last (shared by clones of the sandbox).
    served: std::sync::Arc<std::sync::Mutex<Option<served::Served>>>,
}

/// What a program is, as far as running it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProgramKind {
    /// It carries a sanitizer runtime.
    pub sanitizer: bool,
    /// It was built with `trestle-cc` (and can serve system tests).
    pub trestle: bool,
}

/// Read what `program` is from its symbols.
pub fn program_kind(program: &Path) -> ProgramKind {
    use object::{Object as _, ObjectSymbol as _};
    let Ok(data) = std::fs::read(program) else {
        return ProgramKind::default();
    };
    let Ok(obj) = object::File::parse(&*data) else {
        return ProgramKind::default();
    };
    let mut kind = ProgramKind::default();
    for s in obj.symbols().chain(obj.dynamic_symbols()) {
        match s.name() {
            Ok("__asan_init" | "__msan_init" | "__ubsan_handle_builtin_unreachable") => {
                kind.sanitizer = true
            }
            Ok(name) if name == trestle_abi::hooks::MAIN => kind.trestle = true,
            _ => {}
        }
    }
    kind
}

/// Whether `program` carries a sanitizer runtime.
pub fn is_sanitizer_build(program: &Path) -> bool {
    program_kind(program).sanitizer
}

/// The environment a sanitizer build runs with: reports symbolised, no leak checks.
fn sanitizer_env(cmd: &mut Command) {
    let sym = crate::tools::symbolizer()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    cmd.env(
        "ASAN_OPTIONS",
        "detect_leaks=0:symbolize=1:allocator_may_return_null=1:detect_stack_use_after_return=0",
    )
    .env("ASAN_SYMBOLIZER_PATH", &sym)
    .env("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
    .env("UBSAN_SYMBOLIZER_PATH", &sym);
}

/// bubblewrap, checked to work on this machine; `what` names what it is for in the
/// error that says how to do without it.
pub fn find_bwrap(what: &str) -> Result<PathBuf> {
    let bwrap = crate::tools::find_program(
        &["bwrap"],
        None,
        &format!("`apt-get install bubblewrap`, or pass --no-sandbox to {what} without isolation"),
    )?;
    let out = Command::new(&bwrap)
        .args([
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--unshare-all",
            "--die-with-parent",
            "--",
            "/bin/true",
        ])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {}", bwrap.display()))?;
    if !out.status.success() {
        bail!(
            "bubblewrap does not work on this machine ({}); pass --no-sandbox to {what} without isolation",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(bwrap)
}

/// `program` as a forkserver inside bubblewrap: the machine read-only with a private
/// `/tmp` (`ro` are bound again over it: what lives there), `rw` bound read-write,
/// network, host name, user and (unless `share_ipc`, for a System V shared coverage
/// map) IPC namespaces of its own, its own session, ended with trestle. The process-id
/// namespace stays trestle's, so that a hung child's process group can be killed from
/// outside by the pid the server reports.
pub fn bwrap_command(
    bwrap: &Path,
    program: &Path,
    ro: &[&Path],
    rw: &[&Path],
    share_ipc: bool,
) -> Command {
    bwrap_command_as(bwrap, program, program, ro, rw, share_ipc)
}

/// [`bwrap_command`] running the executable `file` under the path `name`, mounted
/// there: the program's `argv[0]` (and `/proc/self/exe`) is `name`, as when the lean
/// sibling runs for the program the user gave (bubblewrap 0.8 has no `--argv0`).
pub fn bwrap_command_as(
    bwrap: &Path,
    file: &Path,
    name: &Path,
    ro: &[&Path],
    rw: &[&Path],
    share_ipc: bool,
) -> Command {
    let mut c = Command::new(bwrap);
    c.args(["--ro-bind", "/", "/", "--dev", "/dev", "--tmpfs", "/tmp"]);
    c.arg("--ro-bind").arg(file).arg(name);
    for p in ro {
        c.arg("--ro-bind").arg(p).arg(p);
    }
    for p in rw {
        c.arg("--bind").arg(p).arg(p);
    }
    c.args([
        "--unshare-user-try",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]);
    if !share_ipc {
        c.arg("--unshare-ipc");
    }
    c.args(["--die-with-parent", "--new-session", "--"])
        .arg(name);
    c
}

/// How a run ended, before the sandbox reads a limit or a crash out of it.
struct Outcome {
    status: RunStatus,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    /// Bytes written to stdout and stderr in all.
    output_len: (u64, u64),
    max_rss_kib: u64,
    cpu_ms: u64,
    wall: Duration,
}

/// Files a run leaves beside its working directory.
struct SidePaths {
    /// `trestle-exec`'s report: lines `exit N` / `signal N`, `maxrss KiB`, `cpu_ms N`.
    status: PathBuf,
    /// The crash stack the preload writes.
    stack: PathBuf,
    /// The coverage profile of a coverage build.
    profile: PathBuf,
}

/// What `trestle-exec` reported about the run (nothing when it died first).
struct ExecReport(String);

impl ExecReport {
    fn read(path: &Path) -> Result<ExecReport> {
        match std::fs::read_to_string(path) {
            Ok(text) => Ok(ExecReport(text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ExecReport(String::new())),
            Err(e) => {
                Err(e).with_context(|| format!("cannot read the run's status {}", path.display()))
            }
        }
    }

    fn field(&self, key: &str) -> Option<i64> {
        self.0.lines().find_map(|l| {
            l.strip_prefix(key)
                .and_then(|v| v.trim().parse::<i64>().ok())
        })
    }
}

/// Resource limits for the child, set between fork and exec.
fn apply_limits(cmd: &mut Command, limits: Limits, sanitizer: bool) {
    // SAFETY: setrlimit is async-signal-safe and affects only the child.
    unsafe {
        cmd.pre_exec(move || {
            let set = |res, v: u64| {
                let l = libc::rlimit {
                    rlim_cur: v,
                    rlim_max: v,
                };
                libc::setrlimit(res, &l);
            };
            // The soft CPU limit a second below the hard one: SIGXCPU first, which the
            // preloaded handler turns into the stack of where the run was spinning
            // (at the hard limit the kernel sends SIGKILL).
            let cpu = limits.cpu_secs.max(1);
            libc::setrlimit(
                libc::RLIMIT_CPU,
                &libc::rlimit {
                    rlim_cur: cpu,
                    rlim_max: cpu + 1,
                },
            );
            if !sanitizer {
                set(libc::RLIMIT_AS, limits.memory);
            }
            set(libc::RLIMIT_FSIZE, limits.file_size);
            set(libc::RLIMIT_NOFILE, limits.open_files);
            set(libc::RLIMIT_CORE, 0);
            Ok(())
        });
    }
}

impl Sandbox {
    /// A sandbox with these limits; `isolate` uses bubblewrap (checked to work here),
    /// otherwise runs only get a fresh directory and the rlimits.
    pub fn new(limits: Limits, isolate: bool) -> Result<Sandbox> {
        let exec = crate::tools::find_tool("trestle-exec")?;
        let preload = crate::tools::find_tool("libtrestle_crashstack.so")?;
        let bwrap = if isolate {
            Some(find_bwrap("run lifted tests")?)
        } else {
            None
        };
        Ok(Sandbox {
            bwrap,
            exec,
            preload,
            limits,
            serve: true,
            served: Default::default(),
        })
    }

    /// The same sandbox starting the program for every run, as recording does, even
    /// when it could serve it (to measure or compare what the forkserver saves).
    pub fn without_forkserver(mut self) -> Sandbox {
        self.serve = false;
        self
    }

    /// Whether runs are isolated with bubblewrap.
    pub fn isolated(&self) -> bool {
        self.bwrap.is_some()
    }

    /// Run `program` on `test`. `filter` says which frames of a crash are the
    /// subject's; `profile` receives the LLVM profile if the program writes one.
    pub fn run(
        &self,
        program: &Path,
        test: &SystemTest,
        extra_env: &[(String, String)],
        filter: &FrameFilter,
        profile: Option<&Path>,
    ) -> Result<SandboxRun> {
        let first = self.run_once(program, test, extra_env, filter, profile)?;
        // A crash that left no stack (the process died before the preload wrote all
        // of it: 8 of 96 alarms of a benchmark's coreutils runs, each with frames when
        // run again) is run again, so that the alarm names where it happened.
        if first.crash.as_ref().is_some_and(|c| c.stack.is_empty()) {
            for _ in 0..STACK_RETRIES {
                let again = self.run_once(program, test, extra_env, filter, profile)?;
                if again.crash.as_ref().is_some_and(|c| !c.stack.is_empty()) {
                    return Ok(again);
                }
            }
        }
        Ok(first)
    }

    /// One run, as [`Sandbox::run`] but never again for a missing stack: for the
    /// many runs of a reduction, where a run without one just does not keep a step.
    pub fn run_once(
        &self,
        program: &Path,
        test: &SystemTest,
        extra_env: &[(String, String)],
        filter: &FrameFilter,
        profile: Option<&Path>,
    ) -> Result<SandboxRun> {
        let program = std::fs::canonicalize(program)
            .with_context(|| format!("program {}", program.display()))?;
        let mut served = self.served.lock().unwrap_or_else(|p| p.into_inner());
        if served.as_ref().is_none_or(|s| s.program != program) {
            let mut kind = program_kind(&program);
            kind.trestle &= self.serve;
            *served = Some(served::Served::start(
                &program,
                kind,
                self.bwrap.as_deref(),
                &self.preload,
                &self.limits,
            )?);
        }
        let served = served.as_mut().expect("set above");
        let kind = served.kind;
        // A coverage profile is named when the program starts: those runs are spawned.
        if profile.is_none() && served.serving() {
            if let Some(r) = served.run(
                test,
                extra_env,
                self.bwrap.as_deref(),
                &self.preload,
                &self.limits,
            )? {
                let mut run =
                    self.conclude(&program, test, r.outcome, &r.stack, kind.sanitizer, filter)?;
                run.forked = true;
                return Ok(run);
            }
        }
        self.spawn(&program, kind.sanitizer, test, extra_env, filter, profile)
    }

    /// Start `program` for this run alone (`trestle-exec` inside the sandbox).
    fn spawn(
        &self,
        program: &Path,
        sanitizer: bool,
        test: &SystemTest,
        extra_env: &[(String, String)],
        filter: &FrameFilter,
        profile: Option<&Path>,
    ) -> Result<SandboxRun> {
        let layout = Layout::new(test)?;
        let side = SidePaths {
            status: layout.side.join("status"),
            stack: layout.side.join("stack"),
            profile: layout.side.join("profile.profraw"),
        };
        let mut cmd = self.command(program, &layout, &side);
        cmd.args(&test.args);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("TRESTLE_") || k == "LD_PRELOAD" {
                cmd.env_remove(k);
            }
        }
        // The caller's environment may name the profile (a coverage run of its own).
        cmd.envs(test.env.iter())
            .env("LLVM_PROFILE_FILE", &side.profile)
            .envs(extra_env.iter().map(|(k, v)| (k, v)));
        if sanitizer {
            sanitizer_env(&mut cmd);
        } else {
            cmd.env("LD_PRELOAD", &self.preload)
                .env(trestle_abi::fuzz::ENV_CRASH_STACK, &side.stack);
        }
        apply_limits(&mut cmd, self.limits.clone(), sanitizer);
        let capture = Capture {
            stdout: true,
            stderr: true,
        };
        let ended = run_to_end(&mut cmd, &layout.stdin, capture, self.limits.wall)
            .with_context(|| format!("cannot start {}", self.exec.display()))?;
        let report = ExecReport::read(&side.status)?;
        let status = self.status_of(&ended, &report)?;
        if let Some(dest) = profile {
            if side.profile.exists() {
                std::fs::copy(&side.profile, dest)
                    .with_context(|| format!("cannot write {}", dest.display()))?;
            }
        }
        let max_rss_kib = match report.field("maxrss ") {
            Some(kib) => kib.max(0) as u64,
            // Killed at the time limit before trestle-exec could say: what /proc said.
            None => ended.peak_rss_kib,
        };
        let cpu_ms = report.field("cpu_ms ").unwrap_or(0).max(0) as u64;
        let outcome = Outcome {
            status,
            stdout: ended.stdout,
            stderr: ended.stderr,
            output_len: ended.output_len,
            max_rss_kib,
            cpu_ms,
            wall: ended.wall,
        };
        self.conclude(program, test, outcome, &side.stack, sanitizer, filter)
    }

    /// `trestle-exec STATUS -- PROGRAM`, inside bubblewrap when the sandbox isolates.
    fn command(&self, program: &Path, layout: &Layout, side: &SidePaths) -> Command {
        let (work, side_dir) = (&layout.cwd, &layout.side);
        let mut cmd = match &self.bwrap {
            Some(bwrap) => {
                let mut c = Command::new(bwrap);
                c.args([
                    "--ro-bind",
                    "/",
                    "/",
                    "--dev",
                    "/dev",
                    "--proc",
                    "/proc",
                    "--tmpfs",
                    "/tmp",
                ]);
                // What lives under /tmp must be mounted again over the fresh /tmp.
                for p in [program, &self.exec, &self.preload] {
                    c.arg("--ro-bind").arg(p).arg(p);
                }
                c.arg("--bind").arg(work).arg(work);
                c.arg("--bind").arg(side_dir).arg(side_dir);
                c.arg("--chdir").arg(work);
                c.args(["--unshare-all", "--die-with-parent", "--new-session", "--"]);
                c.arg(&self.exec);
                c
            }
            None => {
                let mut c = Command::new(&self.exec);
                c.current_dir(work);
                c
            }
        };
        cmd.arg(&side.status).arg("--").arg(program);
        cmd
    }

    /// How the program ended, from `trestle-exec`'s report, else from how
    /// `trestle-exec` itself ended (a limit, or a sandbox that failed to start).
    fn status_of(&self, ended: &Ended, report: &ExecReport) -> Result<RunStatus> {
        if ended.status == RunStatus::TimedOut {
            return Ok(RunStatus::TimedOut);
        }
        if let Some(s) = report.field("signal ") {
            return Ok(RunStatus::Signaled(s as i32));
        }
        if let Some(c) = report.field("exit ") {
            return Ok(RunStatus::Exited(c as i32));
        }
        let outer = ended
            .raw
            .expect("a run that did not time out has an exit status");
        Ok(match (outer.code(), outer.signal()) {
            (_, Some(s)) => RunStatus::Signaled(s),
            (Some(c), _) => {
                let stderr = String::from_utf8_lossy(&ended.stderr);
                if c != 0 && self.bwrap.is_some() && stderr.contains("bwrap:") {
                    bail!("the sandbox failed to start: {}", stderr.trim());
                }
                RunStatus::Exited(c)
            }
            _ => RunStatus::Exited(-1),
        })
    }

    /// The run as the caller sees it: a limit it ran into, else the crash (from a
    /// sanitizer report, else from the signal and the stack the preload left in
    /// `stack`); a run stopped at its time limit is a hang, with the stack of where
    /// it was spinning when the CPU limit stopped it.
    fn conclude(
        &self,
        program: &Path,
        test: &SystemTest,
        o: Outcome,
        stack: &Path,
        sanitizer: bool,
        filter: &FrameFilter,
    ) -> Result<SandboxRun> {
        let err_text = String::from_utf8_lossy(&o.stderr).into_owned();
        // The preload's record of a failed allocation, when the run ended by itself
        // with an error after it (a crash or a stop writes its own record over it; a
        // program that tries a large buffer and goes on with a smaller one, as sort
        // does, ends well).
        let failed_alloc = match o.status {
            RunStatus::Exited(c) if c != 0 && !sanitizer => match read_stack(stack, filter)? {
                (Some(raw), frames) if raw.alloc_failed.is_some() => Some(frames),
                _ => None,
            },
            _ => None,
        };
        let said = says_out_of_memory(&err_text, test);
        let limit = self.limit_hit(
            &o.status,
            o.max_rss_kib,
            o.cpu_ms,
            said,
            sanitizer,
            failed_alloc.is_some(),
        );
        let stopped_in_time = o.status == RunStatus::TimedOut
            || limit.as_deref().is_some_and(|l| l.starts_with(CPU_LIMIT));
        let crash = if limit.is_some() {
            None
        } else if let Some((kind, frames)) = parse_sanitizer(&err_text, program) {
            Some(filter.signature(kind, frames))
        } else if let RunStatus::Signaled(sig) = o.status {
            let (raw, frames) = read_stack(stack, filter)?;
            is_crash_signal(sig).then(|| {
                let mut crash = filter.signature(crash_kind(sig, raw.as_ref()), frames);
                crash.origin = raw
                    .as_ref()
                    .zip(filter.program.as_deref())
                    .and_then(|(raw, program)| pointer_origin(raw, program));
                crash
            })
        } else {
            None
        };
        let hang = if !stopped_in_time {
            None
        } else if matches!(
            o.status,
            RunStatus::Signaled(libc::SIGXCPU | libc::SIGKILL) | RunStatus::TimedOut
        ) {
            // At its CPU limit, or (served) stopped past its wall-clock limit with
            // SIGXCPU first: the handler wrote where it was, if it could, and where it
            // was a few times more (killed at the hard limit while it sampled, what
            // it wrote by then).
            let (raw, first) = read_stack(stack, filter)?;
            let samples = match &raw {
                Some(raw) => symbolise_samples(raw, filter.program.as_deref())?,
                None => Vec::new(),
            };
            Some(filter.hang_signature(first, samples))
        } else {
            Some(filter.signature(HANG.into(), Vec::new()))
        };
        // Stopped by the clock with over half the address-space limit resident: the
        // blow-up a faster build, or a longer limit, ends at the memory limit (mawk's
        // `$214748364` ran out of memory at 3 s on one build and was stopped at 2 s
        // on another), named by where it was when stopped.
        let blown_up =
            stopped_in_time && !sanitizer && o.max_rss_kib * 1024 * 2 >= self.limits.memory;
        let memory = if limit
            .as_deref()
            .is_some_and(|l| l.starts_with(MEMORY_LIMIT))
        {
            Some(filter.signature(OUT_OF_MEMORY.into(), failed_alloc.unwrap_or_default()))
        } else if blown_up {
            let frames = hang.as_ref().map(|h| h.stack.clone()).unwrap_or_default();
            Some(filter.signature(OUT_OF_MEMORY.into(), frames))
        } else {
            None
        };
        let (stdout_bytes, stderr_bytes) = o.output_len;
        Ok(SandboxRun {
            status: o.status,
            stdout: o.stdout,
            stderr: o.stderr,
            stdout_bytes,
            stderr_bytes,
            max_rss_kib: o.max_rss_kib,
            cpu_ms: o.cpu_ms,
            wall: o.wall,
            limit,
            crash,
            hang,
            memory,
            forked: false,
        })
    }

    /// The limit a run ran into, in words; `said`: its stderr says it ran out of
    /// memory ([`says_out_of_memory`]); `failed_alloc`: an allocation failed and the
    /// run then ended with an error.
    fn limit_hit(
        &self,
        status: &RunStatus,
        rss_kib: u64,
        cpu_ms: u64,
        said: bool,
        sanitizer: bool,
        failed_alloc: bool,
    ) -> Option<String> {
        let l = &self.limits;
        match status {
            RunStatus::TimedOut => {
                return Some(format!("wall-clock time ({:.1}s)", l.wall.as_secs_f64()))
            }
            RunStatus::Signaled(s) if *s == libc::SIGXCPU => {
                return Some(format!("{CPU_LIMIT} ({}s)", l.cpu_secs))
            }
            // The kernel kills at the hard CPU limit; the CPU time the run's usage
            // reports can lag it by over half a second (seen: 7.4 s at an 8 s limit).
            RunStatus::Signaled(s)
                if *s == libc::SIGKILL && cpu_ms * 10 >= l.cpu_secs * 1000 * 9 =>
            {
                return Some(format!("{CPU_LIMIT} ({}s)", l.cpu_secs))
            }
            RunStatus::Signaled(s) if *s == libc::SIGXFSZ => {
                return Some(format!("{FILE_SIZE_LIMIT} ({} bytes)", l.file_size))
            }
            _ => {}
        }
        let near = !sanitizer && rss_kib * 1024 >= l.memory / 10 * 8;
        (near || said || failed_alloc)
            .then(|| format!("{MEMORY_LIMIT} ({} MiB address space)", l.memory >> 20))
    }
}

/// What programs and sanitizers print when memory runs out.
const OUT_OF_MEMORY_SAID: [&str; 5] = [
    "memory exhausted",
    "Cannot allocate memory",
    "out of memory",
    "allocation-size-too-big",
    "requested allocation size",
];

/// Whether `stderr` says the run ran out of memory in words its input did not give
/// it: an error message that quotes an argument or a line of input says nothing of
/// the run's memory. (tac, given a file name the fuzzer had spelt `...$ memory
/// exhausted`, said it could not open it and went on to crash with SIGSEGV; the crash
/// was reported as running out of memory, without frames.)
fn says_out_of_memory(stderr: &str, test: &SystemTest) -> bool {
    let given = |m: &str| {
        let m = m.as_bytes();
        let holds = |b: &[u8]| b.windows(m.len()).any(|w| w == m);
        test.args.iter().any(|a| holds(a.as_bytes()))
            || test.stdin.as_deref().is_some_and(holds)
            || test
                .files
                .iter()
                .any(|(name, b)| holds(name.as_bytes()) || holds(b))
            || test.env.values().any(|v| holds(v.as_bytes()))
    };
    OUT_OF_MEMORY_SAID
        .iter()
        .any(|m| stderr.contains(m) && !given(m))
}

/// How a run stopped at its CPU limit is described (`limit`).
pub const CPU_LIMIT: &str = "CPU time";

/// How a run that ran out of memory is described (`limit`).
pub const MEMORY_LIMIT: &str = "memory";

/// How a run stopped at its file-size limit is described (`limit`).
pub const FILE_SIZE_LIMIT: &str = "file size";

/// The stack file a crashed (or stopped) run left, parsed and symbolised; nothing
/// when the process died before the preload wrote it.
fn read_stack(stack: &Path, filter: &FrameFilter) -> Result<(Option<RawStack>, Vec<Frame>)> {
    let raw = match std::fs::read_to_string(stack) {
        // A crash that killed the process before the preload wrote its stack (or
        // wrote all of it) has a signature of the signal alone.
        Ok(text) => parse_stack(&text).ok(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(e)
                .with_context(|| format!("cannot read the crash stack {}", stack.display()))
        }
    };
    let frames = raw
        .as_ref()
        .map(|raw| filter.symbolise(raw))
        .transpose()?
        .unwrap_or_default();
    Ok((raw, frames))
}

/// Signals that mean the program crashed, rather than was stopped from outside.
pub fn is_crash_signal(sig: i32) -> bool {
    [
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGABRT,
        libc::SIGFPE,
        libc::SIGILL,
        libc::SIGTRAP,
        libc::SIGSYS,
    ]
    .contains(&sig)
}

//! trestle's runtime: the library linked into every instrumented program.
//!
//! It implements the hooks the pass inserts (names in `trestle_abi::hooks`) and runs in
//! one of four modes, chosen once from the environment:
//!
//! - **passive** (no trestle variable set): every hook returns at once; the program
//!   behaves as if uninstrumented. Under a system-level fuzzer (`__AFL_SHM_ID` set)
//!   its SanitizerCoverage edges go to the fuzzer's shared map
//!   ([`forkserver::attach_edge_map`]).
//! - **record** (`TRESTLE_TRACE_DIR`): keeps the extent map, snapshots the context of
//!   carved invocations at entry and the state they leave at return, and appends both
//!   to a crash-safe trace ([`writer`]).
//! - **replay** (`TRESTLE_REPLAY`): at the start of `main`, restores a recorded context
//!   into fresh memory, relocates its pointers, calls the function through its thunk,
//!   writes how it ended, and exits.
//! - **fuzz** (`TRESTLE_FUZZ`): at the start of `main`, restores a carved unit's
//!   context once and serves executions with new parameter values ([`fuzz`]):
//!   through the forkserver protocol to a fuzzer on the host ([`forkserver`]), or to
//!   a fuzzer library loaded into this process (`TRESTLE_FUZZ_INPROC`, [`inproc`]).
//!
//! It owns nothing on the host side and must stay lean: it runs inside the subject.
//! Every `extern "C"` entry point catches panics and aborts; nothing unwinds into C.

pub mod alloc;
pub mod extents;
pub mod files;
pub mod forkserver;
pub mod fuzz;
pub mod sysserver;
pub mod inproc;
pub mod unit_heap;
pub mod walk;
pub mod writer;

mod program;
pub mod replay;

use extents::ExtentMap;
use program::Program;
use std::cell::Cell;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use trestle_abi::context::{Graph, State};
use trestle_abi::hooks;
use trestle_abi::trace::{Record, RuntimeStats, TraceHeader, TRACE_MAGIC, TRACE_VERSION};
use trestle_abi::{Context, ExtentKind, Outcome, Value, ValueKind};
use walk::{Limits, Walker};
use writer::TraceWriter;

const MODE_UNINIT: u8 = 0;
const MODE_PASSIVE: u8 = 1;
const MODE_RECORD: u8 = 2;
const MODE_REPLAY: u8 = 3;
const MODE_FUZZ: u8 = 4;

static MODE: AtomicU8 = AtomicU8::new(MODE_UNINIT);
static INIT: std::sync::Once = std::sync::Once::new();
/// Carved invocations currently open (lets the exit hook skip the lock).
static OPEN_FRAMES: AtomicUsize = AtomicUsize::new(0);
static RT: Mutex<Option<Runtime>> = Mutex::new(None);

/// Bit in a function's state word: stop carving it.
const EXHAUSTED: u32 = 1 << 31;

thread_local! {
    /// The frame marker of the most recent function entry on this thread: stack
    /// extents below it belong to frames that have returned.
    static STACK_MARK: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Tunables, from the environment.
#[derive(Debug, Clone)]
struct Config {
    max_per_fn: u32,
    max_attempts: u32,
    limits: Limits,
}

impl Config {
    fn from_env() -> Self {
        let num = |name: &str, default: u64| {
            std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok()).unwrap_or(default)
        };
        let bytes = num(hooks::ENV_CONTEXT_LIMIT, 4 << 20) as usize;
        Config {
            max_per_fn: num(hooks::ENV_MAX_PER_FN, 5) as u32,
            max_attempts: num(hooks::ENV_MAX_ATTEMPTS, 100) as u32,
            limits: Limits { bytes, extent_bytes: bytes.min(1 << 20), extents: 50_000 },
        }
    }
}

#[derive(Default)]
struct FnState {
    calls: u64,
    carved: u32,
    attempts: u32,
    seen: HashSet<u64>,
    roots: Option<Vec<u64>>,
}

/// A carved invocation that has not returned yet.
#[derive(Debug, Clone)]
struct OpenFrame {
    seq: u64,
    fn_idx: usize,
    /// Address of the invocation's slot array: its identity.
    marker: usize,
    /// Stack pointer at entry.
    sp: usize,
    args: Vec<u64>,
    stack_seq: u64,
    /// A C++ exception was thrown while it was open: if it is left without
    /// returning, the exception left it.
    threw: bool,
}

struct Runtime {
    program: Program,
    config: Config,
    extents: ExtentMap,
    files: files::FileTable,
    fds: std::collections::HashMap<i32, files::FdInfo>,
    /// Descriptors the program mapped into memory.
    mapped_fds: HashSet<i32>,
    fns: Vec<FnState>,
    frames: Vec<OpenFrame>,
    writer: Option<TraceWriter>,
    writer_pid: u32,
    trace_dir: Option<PathBuf>,
    next_seq: u64,
    stats: RuntimeStats,
    /// `setlocale` calls so far.
    locale: Vec<(i32, String)>,
    /// `setvbuf` calls on the standard streams so far (see `Context::stdio_modes`).
    stdio_modes: Vec<(i32, i32, u64)>,
}

/// Run `f`, turning a panic into an abort with a message: nothing may unwind into C.
fn guard<R>(what: &str, f: impl FnOnce() -> R) -> R {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            eprintln!("trestle runtime: internal error in {what}; aborting");
            std::process::abort()
        }
    }
}

fn lock() -> MutexGuard<'static, Option<Runtime>> {
    RT.lock().unwrap_or_else(|p| p.into_inner())
}

/// True when the extent map must follow every allocation (record and replay mode;
/// a fuzzing harness skips it for speed).
fn tracking() -> bool {
    matches!(mode(), MODE_RECORD | MODE_REPLAY)
}

/// The current mode, initialising on first use.
fn mode() -> u8 {
    let m = MODE.load(Ordering::Acquire);
    if m != MODE_UNINIT {
        return m;
    }
    INIT.call_once(init);
    MODE.load(Ordering::Acquire)
}

fn init() {
    let record_dir = std::env::var_os(hooks::ENV_TRACE_DIR).map(PathBuf::from);
    let replay = std::env::var_os(hooks::ENV_REPLAY).is_some();
    let fuzz = std::env::var_os(trestle_abi::fuzz::ENV_FUZZ).is_some();
    if record_dir.is_none() && !replay && !fuzz {
        forkserver::attach_edge_map();
        MODE.store(MODE_PASSIVE, Ordering::Release);
        return;
    }
    let program = match Program::load() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("trestle runtime: {e}; recording disabled");
            MODE.store(MODE_PASSIVE, Ordering::Release);
            return;
        }
    };
    let mut extents = program.extent_map();
    let mut file_table = files::FileTable::new();
    files::register_std_streams(&mut file_table, &mut extents);
    let fns = (0..program.functions.len()).map(|_| FnState::default()).collect();
    let mut rt = Runtime {
        program,
        config: Config::from_env(),
        extents,
        files: file_table,
        fds: std::collections::HashMap::new(),
        mapped_fds: HashSet::new(),
        fns,
        frames: Vec::new(),
        writer: None,
        writer_pid: 0,
        trace_dir: record_dir,
        next_seq: 0,
        stats: RuntimeStats::default(),
        locale: Vec::new(),
        stdio_modes: Vec::new(),
    };
    let mode = if fuzz {
        MODE_FUZZ
    } else if replay {
        MODE_REPLAY
    } else {
        if let Err(e) = rt.open_writer() {
            eprintln!("trestle runtime: {e}; recording disabled");
            MODE.store(MODE_PASSIVE, Ordering::Release);
            return;
        }
        // SAFETY: registering plain extern "C" functions.
        unsafe {
            libc::atexit(at_exit);
            install_crash_handlers();
        }
        MODE_RECORD
    };
    *lock() = Some(rt);
    MODE.store(mode, Ordering::Release);
}

impl Runtime {
    fn open_writer(&mut self) -> Result<(), String> {
        let dir = self.trace_dir.clone().ok_or("no trace directory")?;
        // SAFETY: plain libc queries.
        let (pid, ppid) = unsafe { (libc::getpid() as u32, libc::getppid() as u32) };
        let path = dir.join(format!("{pid}.{}", trestle_abi::trace::TRACE_EXT));
        let mut w = TraceWriter::create(&path)
            .map_err(|e| format!("cannot create trace file {}: {e}", path.display()))?;
        let header = TraceHeader {
            magic: TRACE_MAGIC,
            version: TRACE_VERSION,
            binary_id: self.program.binary_id,
            pid,
            ppid,
        };
        w.append(&bincode::serialize(&header).map_err(|e| e.to_string())?)
            .map_err(|e| format!("cannot write trace file {}: {e}", path.display()))?;
        self.writer = Some(w);
        self.writer_pid = pid;
        Ok(())
    }

    fn write(&mut self, rec: &Record) {
        // SAFETY: plain libc query.
        let pid = unsafe { libc::getpid() as u32 };
        if self.writer.is_some() && pid != self.writer_pid {
            // A forked child: its records go to a file of its own; the parent's open
            // invocations are not the child's to close.
            if let Some(w) = self.writer.take() {
                w.abandon();
            }
            OPEN_FRAMES.fetch_sub(self.frames.len(), Ordering::AcqRel);
            self.frames.clear();
            if let Err(e) = self.open_writer() {
                eprintln!("trestle runtime: {e}");
            }
        }
        let Some(w) = self.writer.as_mut() else { return };
        let body = match bincode::serialize(rec) {
            Ok(b) => b,
            Err(_) => return,
        };
        if let Err(e) = w.append(&body) {
            eprintln!("trestle runtime: writing {}: {e}; recording stops", w.path().display());
            self.writer = None;
            return;
        }
        self.stats.trace_bytes = w.used() as u64;
    }

    /// The globals a function can reach: those it and its transitive callees refer
    /// to (through calls by pointer, every address-taken function), writable ones only.
    fn roots(&mut self, idx: usize) -> Vec<u64> {
        if let Some(r) = &self.fns[idx].roots {
            return r.clone();
        }
        let r = self.program.reachable_globals(idx);
        self.fns[idx].roots = Some(r.clone());
        r
    }

    /// Walk the memory reachable from `args` (as passed to the function at `fn_idx`),
    /// `ret` (when it is a pointer) and the function's root globals.
    fn walk(&mut self, fn_idx: usize, args: &[u64], ret: Option<u64>, stack_cutoff: u64) -> (Vec<Value>, Value, Graph, Vec<trestle_abi::StreamPos>) {
        let roots = self.roots(fn_idx);
        files::refresh_buffers(&mut self.files, &mut self.extents);
        let meta = &self.program.functions[fn_idx];
        let mut w = Walker::new(&self.extents, stack_cutoff, self.config.limits).with_files(&self.files);
        let argv = args
            .iter()
            .zip(&meta.params)
            .map(|(&a, p)| match p.kind {
                ValueKind::Ptr | ValueKind::Word => w.value_of(a),
                _ => Value::Bits(a),
            })
            .collect();
        let retv = match (ret, meta.ret) {
            // An aggregate's copy is registered by `post_state`.
            (Some(r), ValueKind::Ptr | ValueKind::Aggregate(_)) => w.value_of(r),
            (Some(r), _) => Value::Bits(r),
            (None, _) => Value::Bits(0),
        };
        for g in roots {
            w.visit_global(g);
        }
        let (graph, found) = w.finish_with_streams();
        (argv, retv, graph, files::stream_positions(found, &self.fds, &self.mapped_fds))
    }

    fn post_state(&mut self, frame: &OpenFrame, ret: Option<u64>) -> State {
        // A returned aggregate (in the returning frame, or in the replay's slots) is an
        // extent for the length of this walk: its bytes and pointers are compared.
        let aggregate = match (ret, self.program.functions[frame.fn_idx].ret) {
            (Some(r), ValueKind::Aggregate(size)) => Some((r as usize, size as usize)),
            _ => None,
        };
        self.extents.set_return_copy(aggregate);
        let (_, ret, graph, streams) = self.walk(frame.fn_idx, &frame.args, ret, frame.stack_seq);
        self.extents.set_return_copy(None);
        if graph.partial {
            self.stats.partial += 1;
        }
        State { ret, graph, streams }
    }

    fn enter(&mut self, id: u64, state: &AtomicU32, slots: *const u64, nslots: u32, sp: usize) {
        let s = state.load(Ordering::Relaxed);
        let idx = if s == 0 {
            match self.program.index_of(id) {
                Some(i) => {
                    state.store(i as u32 + 1, Ordering::Relaxed);
                    i
                }
                None => {
                    state.store(EXHAUSTED, Ordering::Relaxed);
                    return;
                }
            }
        } else {
            (s & !EXHAUSTED) as usize - 1
        };
        self.stats.calls += 1;
        let meta = &self.program.functions[idx];
        let nparams = meta.params.len().min(nslots as usize);
        let replayable = meta.replayable;
        let f = &mut self.fns[idx];
        let call_index = f.calls;
        f.calls += 1;
        if !replayable || f.carved >= self.config.max_per_fn || f.attempts >= self.config.max_attempts {
            state.store(s | EXHAUSTED, Ordering::Relaxed);
            return;
        }
        f.attempts += 1;
        let marker = slots as usize;
        self.extents.purge_stack_below(sp);
        // SAFETY: the pass passes an array of `nslots` words.
        let args: Vec<u64> = unsafe { std::slice::from_raw_parts(slots, nparams) }.to_vec();
        for (a, p) in args.iter().zip(&self.program.functions[idx].params) {
            if let Some(size) = p.byval_size {
                self.extents.insert_stack(*a as usize, size as usize);
            }
        }
        let (argv, _, graph, streams) = self.walk(idx, &args, None, u64::MAX);
        let partial = graph.partial;
        let fds = files::open_fds(&self.fds);
        let mut context = Context {
            fn_id: id,
            args: argv,
            graph,
            locale: self.locale.clone(),
            stdio_modes: self.stdio_modes.clone(),
            fds,
            streams: Vec::new(),
        };
        // Contexts that differ only in how far the input was read are duplicates:
        // the first one's stream positions stand for them.
        let key = trestle_abi::ids::fnv1a64(&bincode::serialize(&context).unwrap_or_default());
        if !self.fns[idx].seen.insert(key) {
            self.stats.duplicates += 1;
            return;
        }
        context.streams = streams;
        self.fns[idx].carved += 1;
        self.stats.carved += 1;
        if partial {
            self.stats.partial += 1;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.write(&Record::Enter { seq, call_index, context });
        let stack_seq = self.extents.stack_seq();
        self.frames.push(OpenFrame { seq, fn_idx: idx, marker, sp, args, stack_seq, threw: false });
        OPEN_FRAMES.fetch_add(1, Ordering::AcqRel);
    }

    fn exit(&mut self, id: u64, ret: u64, marker: usize, sp: usize) {
        // Frames below this one were left by an exception (if one was thrown while
        // they were open) or by longjmp (no outcome).
        while self.frames.last().is_some_and(|f| f.sp < sp) {
            let Some(left) = self.frames.pop() else { break };
            OPEN_FRAMES.fetch_sub(1, Ordering::AcqRel);
            if left.threw {
                self.write(&Record::Exit { seq: left.seq, outcome: Outcome::Threw });
            }
        }
        let Some(top) = self.frames.last() else { return };
        if top.marker != marker || self.program.functions[top.fn_idx].id != id {
            return;
        }
        let frame = top.clone();
        let state = self.post_state(&frame, Some(ret));
        self.frames.pop();
        OPEN_FRAMES.fetch_sub(1, Ordering::AcqRel);
        self.write(&Record::Exit { seq: frame.seq, outcome: Outcome::Returned(state) });
    }

    /// A C++ exception is being thrown: any open invocation may be left by it.
    fn throwing(&mut self) {
        for f in &mut self.frames {
            f.threw = true;
        }
    }

    /// `exit(code)` was called: every open invocation ends here.
    fn exited(&mut self, code: i32) {
        while let Some(frame) = self.frames.pop() {
            OPEN_FRAMES.fetch_sub(1, Ordering::AcqRel);
            let state = self.post_state(&frame, None);
            self.write(&Record::Exit { seq: frame.seq, outcome: Outcome::Exited { code, state } });
        }
    }

    fn register_main_args(&mut self, argc: i32, argv: *const *const libc::c_char, envp: *const *const libc::c_char) {
        // SAFETY: argv has argc entries plus a null; envp is null-terminated; the
        // strings are NUL-terminated. Both come straight from the C runtime.
        unsafe {
            let mut reg_vec = |v: *const *const libc::c_char, n: Option<usize>| {
                if v.is_null() {
                    return;
                }
                let mut i = 0;
                loop {
                    let s = *v.add(i);
                    if s.is_null() || n.is_some_and(|n| i >= n) {
                        break;
                    }
                    self.extents.insert_heap(s as usize, libc::strlen(s) + 1, ExtentKind::Arg);
                    i += 1;
                }
                self.extents.insert_heap(v as usize, (i + 1) * 8, ExtentKind::Arg);
            };
            reg_vec(argv, Some(argc.max(0) as usize));
            reg_vec(envp, None);
        }
    }
}

// ---------------------------------------------------------------------------------
// Hooks called by instrumented code
// ---------------------------------------------------------------------------------

/// Function entry. See `trestle_abi::hooks::ENTER`.
///
/// # Safety
/// `state` must point to the function's own state word and `slots` to `nslots` words,
/// as the pass arranges.
#[no_mangle]
pub unsafe extern "C" fn __trestle_enter(id: u64, state: *mut u32, slots: *const u64, nslots: u32, sp: *const u8) {
    let m = mode();
    if m == MODE_PASSIVE {
        return;
    }
    STACK_MARK.with(|c| c.set(sp as usize));
    if m != MODE_RECORD {
        return;
    }
    // SAFETY: the state word is a plain, suitably aligned i32 global.
    let state = unsafe { &*(state as *const AtomicU32) };
    if state.load(Ordering::Relaxed) & EXHAUSTED != 0 {
        return;
    }
    guard("the entry hook", || {
        if let Some(rt) = lock().as_mut() {
            rt.enter(id, state, slots, nslots, sp as usize);
        }
    })
}

/// Function return. See `trestle_abi::hooks::EXIT`.
///
/// # Safety
/// Called by instrumented code only.
#[no_mangle]
pub unsafe extern "C" fn __trestle_exit(id: u64, _state: *mut u32, ret: u64, slots: *const u64, sp: *const u8) {
    if OPEN_FRAMES.load(Ordering::Acquire) == 0 || MODE.load(Ordering::Acquire) != MODE_RECORD {
        return;
    }
    guard("the exit hook", || {
        if let Some(rt) = lock().as_mut() {
            rt.exit(id, ret, slots as usize, sp as usize);
        }
    })
}

/// Stack allocation whose address escapes. See `trestle_abi::hooks::ALLOCA`.
///
/// # Safety
/// `addr` must be a live stack allocation of `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn __trestle_alloca(addr: *mut u8, size: u64) {
    if !tracking() {
        return;
    }
    guard("the alloca hook", || {
        // Zero it, for the reason fresh heap memory is zeroed (see `alloc`): the hook
        // runs before the function has stored anything there.
        // SAFETY: a live stack allocation of `size` bytes.
        unsafe { std::ptr::write_bytes(addr, 0, size as usize) };
        let mark = STACK_MARK.with(|c| c.get());
        if let Some(rt) = lock().as_mut() {
            rt.extents.purge_stack_below(mark);
            rt.extents.insert_stack(addr as usize, size as usize);
        }
        // A dynamic alloca lies below the frame's marker; keep it alive.
        STACK_MARK.with(|c| c.set(mark.min(addr as usize)));
    })
}

/// Start of `main`. See `trestle_abi::hooks::MAIN`.
///
/// # Safety
/// The arguments must be `main`'s own.
#[no_mangle]
pub unsafe extern "C" fn __trestle_main(argc: i32, argv: *const *const libc::c_char, envp: *const *const libc::c_char) {
    let m = mode();
    if m == MODE_PASSIVE {
        // A host may ask for system tests to be served from here (returns in every
        // child, and at once when not asked).
        sysserver::maybe_serve();
        return;
    }
    guard("the main hook", || {
        if let Some(rt) = lock().as_mut() {
            rt.register_main_args(argc, argv, envp);
        }
    });
    // Replaying `main` itself brings us here a second time: run the unit once.
    static REPLAY_STARTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if m == MODE_REPLAY && !REPLAY_STARTED.swap(true, Ordering::AcqRel) {
        replay::run();
    }
    if m == MODE_FUZZ && !REPLAY_STARTED.swap(true, Ordering::AcqRel) {
        fuzz::run();
    }
}

/// `setlocale`, renamed by the pass: remembered, so a replay can repeat it.
///
/// # Safety
/// As `setlocale`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_setlocale(category: libc::c_int, locale: *const libc::c_char) -> *mut libc::c_char {
    // SAFETY: forwarding.
    let r = unsafe { libc::setlocale(category, locale) };
    if !r.is_null() && !locale.is_null() && mode() == MODE_RECORD {
        // SAFETY: `locale` is a NUL-terminated string (setlocale accepted it).
        let name = unsafe { std::ffi::CStr::from_ptr(locale) }.to_string_lossy().into_owned();
        if let Some(rt) = lock().as_mut() {
            rt.locale.push((category, name));
        }
    }
    r
}

/// `setvbuf`, renamed by the pass: a call on a standard stream that leaves the buffer
/// to the C library is remembered, so a replay can repeat it.
///
/// # Safety
/// As `setvbuf`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_setvbuf(fp: *mut libc::FILE, buf: *mut libc::c_char, how: libc::c_int, size: libc::size_t) -> libc::c_int {
    // SAFETY: forwarding.
    let r = unsafe { libc::setvbuf(fp, buf, how, size) };
    if r == 0 && buf.is_null() && mode() == MODE_RECORD {
        if let Some(fd) = files::std_stream_fd(fp) {
            if let Some(rt) = lock().as_mut() {
                rt.stdio_modes.push((fd, how, size as u64));
            }
        }
    }
    r
}

/// `exit`, renamed by the pass: records how open invocations ended, then exits.
///
/// # Safety
/// As `exit`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_exit_call(code: libc::c_int) -> ! {
    match mode() {
        MODE_RECORD => guard("the exit call hook", || {
            if let Some(rt) = lock().as_mut() {
                rt.exited(code);
            }
        }),
        MODE_REPLAY => replay::exited(code),
        // In a unit harness, exit() ends the execution, not the fuzzing: in-process
        // it returns to the fuzzer (nothing of ours on the stack below needs
        // dropping); otherwise it ends this forked execution.
        // SAFETY: a jump to the catching call, or the end of the process.
        MODE_FUZZ => unsafe {
            inproc::exit_to_caller();
            libc::_exit(0)
        },
        _ => {}
    }
    // SAFETY: plain libc exit.
    unsafe { libc::exit(code) }
}

/// The C++ runtime's `__cxa_throw`, found at the first throw (a C program never
/// throws, and links no C++ runtime).
type CxaThrow = unsafe extern "C-unwind" fn(*mut libc::c_void, *mut libc::c_void, *mut libc::c_void) -> !;
static CXA_THROW: std::sync::OnceLock<usize> = std::sync::OnceLock::new();

/// `__cxa_throw`, renamed by the pass: in a recording, marks the open invocations
/// (one that is then left without returning ends as `Outcome::Threw`), then throws.
///
/// # Safety
/// As `__cxa_throw`.
#[no_mangle]
pub unsafe extern "C-unwind" fn __trestle_cxa_throw(obj: *mut libc::c_void, tinfo: *mut libc::c_void, dest: *mut libc::c_void) -> ! {
    if mode() == MODE_RECORD {
        guard("the throw hook", || {
            if let Some(rt) = lock().as_mut() {
                rt.throwing();
            }
        });
    }
    let real = *CXA_THROW.get_or_init(|| {
        // SAFETY: a lookup by a NUL-terminated name.
        unsafe { libc::dlsym(libc::RTLD_NEXT, c"__cxa_throw".as_ptr()) as usize }
    });
    if real == 0 {
        eprintln!("trestle runtime: a C++ exception is thrown but __cxa_throw is not linked in");
        std::process::abort();
    }
    // SAFETY: the C++ runtime's __cxa_throw, with the arguments the program gave;
    // it unwinds through this frame, which holds nothing to drop.
    unsafe {
        let f: CxaThrow = std::mem::transmute(real);
        f(obj, tinfo, dest)
    }
}

/// A replay thunk caught an exception that left the unit.
#[no_mangle]
pub extern "C" fn __trestle_unit_threw() {
    replay::UNIT_THREW.store(true, Ordering::Release);
}

extern "C" fn at_exit() {
    guard("the exit handler", || {
        let mut g = lock();
        if let Some(rt) = g.as_mut() {
            let mut stats = rt.stats.clone();
            stats.called = rt
                .fns
                .iter()
                .zip(&rt.program.functions)
                .filter(|(f, _)| f.calls > 0)
                .map(|(f, m)| (m.id, f.calls))
                .collect();
            rt.write(&Record::Stats(stats));
            if let Some(w) = rt.writer.take() {
                let _ = w.close();
            }
        }
    })
}

/// Record a crash inside open invocations, then let the signal take its course.
extern "C" fn on_crash(sig: libc::c_int) {
    // Not async-signal-safe in general; acceptable because the process is dying and
    // try_lock never blocks.
    if let Ok(mut g) = RT.try_lock() {
        if let Some(rt) = g.as_mut() {
            let frames = std::mem::take(&mut rt.frames);
            for f in frames.iter().rev() {
                rt.write(&Record::Exit { seq: f.seq, outcome: Outcome::Crashed { signal: sig } });
            }
        }
    }
}

/// # Safety
/// Installs process-wide signal handlers.
unsafe fn install_crash_handlers() {
    for sig in [libc::SIGSEGV, libc::SIGBUS, libc::SIGABRT, libc::SIGFPE, libc::SIGILL] {
        // SAFETY: a zeroed sigaction with a valid handler and flags.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_crash as *const () as usize;
            sa.sa_flags = libc::SA_RESETHAND | libc::SA_NODEFER;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

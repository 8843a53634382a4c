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
mod arena;
pub mod branches;
pub mod capture;
pub mod clock;
pub mod extents;
pub mod files;
pub mod forkserver;
pub mod fuzz;
mod harness;
pub mod inproc;
pub mod libc_heap;
pub mod mappings;
mod probe;
pub mod process;
pub mod sysserver;
pub mod unit_heap;
pub mod walk;
pub mod writer;

mod program;
mod record;
pub mod replay;

use extents::ExtentMap;
use program::Program;
use record::{at_exit, install_crash_handlers, Config, FnState};
use std::cell::Cell;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use trestle_abi::hooks;
use trestle_abi::trace::RuntimeStats;
use trestle_abi::ExtentKind;
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
    /// Marked `Record::Unreplayable` already.
    unreplayable: bool,
    /// The counters of the branch recorded for at entry (empty when recording for none).
    reach: Vec<u8>,
}

struct Runtime {
    program: Program,
    config: Config,
    extents: ExtentMap,
    files: files::FileTable,
    fds: std::collections::HashMap<i32, files::FdInfo>,
    /// Descriptors the program mapped into memory.
    mapped_fds: HashSet<i32>,
    /// The program's own readable mappings, heap extents while they last.
    mappings: mappings::Mappings,
    /// The `va_list`s started in frames that have not returned.
    va_lists: Vec<VaList>,
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
    /// Child processes started and not yet waited for.
    children: Vec<process::Child>,
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

/// True in a unit harness (fuzz mode).
fn fuzzing() -> bool {
    mode() == MODE_FUZZ
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
    let fns = (0..program.functions.len())
        .map(|_| FnState::default())
        .collect();
    let mut rt = Runtime {
        program,
        config: Config::from_env(),
        extents,
        files: file_table,
        fds: std::collections::HashMap::new(),
        mapped_fds: HashSet::new(),
        mappings: mappings::Mappings::default(),
        va_lists: Vec::new(),
        fns,
        frames: Vec::new(),
        writer: None,
        writer_pid: 0,
        trace_dir: record_dir,
        next_seq: 0,
        stats: RuntimeStats::default(),
        locale: Vec::new(),
        stdio_modes: Vec::new(),
        children: Vec::new(),
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
    fn register_main_args(
        &mut self,
        argc: i32,
        argv: *const *const libc::c_char,
        envp: *const *const libc::c_char,
    ) {
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
                    self.extents
                        .insert_heap(s as usize, libc::strlen(s) + 1, ExtentKind::Arg);
                    i += 1;
                }
                self.extents
                    .insert_heap(v as usize, (i + 1) * 8, ExtentKind::Arg);
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
pub unsafe extern "C" fn __trestle_enter(
    id: u64,
    state: *mut u32,
    slots: *const u64,
    nslots: u32,
    sp: *const u8,
) {
    let m = mode();
    // Only recording and replay track the stack (a unit harness calls this for every
    // call the unit makes: on dc's arithmetic a fifth of its time went here).
    if !matches!(m, MODE_RECORD | MODE_REPLAY) {
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
pub unsafe extern "C" fn __trestle_exit(
    id: u64,
    _state: *mut u32,
    ret: u64,
    slots: *const u64,
    sp: *const u8,
    top: *const u8,
) {
    let mode = MODE.load(Ordering::Acquire);
    if OPEN_FRAMES.load(Ordering::Acquire) != 0 && mode == MODE_RECORD {
        guard("the exit hook", || {
            if let Some(rt) = lock().as_mut() {
                rt.exit(id, ret, slots as usize, sp as usize);
            }
        })
    }
    if VA_LISTS.load(Ordering::Relaxed) != 0 {
        guard("the exit hook", || {
            if let Some(rt) = lock().as_mut() {
                end_va_lists(rt, id, top as usize);
            }
        })
    }
}

/// A `va_list` whose areas are in the extent map, by the frame that started it.
struct VaList {
    /// The starting function's id and where its return address is.
    fn_id: u64,
    top: usize,
    /// The register save area and the stack arguments, as registered (0: none).
    save: usize,
    args: usize,
}

/// How many [`VaList`]s are registered: a return takes the lock only when some are.
static VA_LISTS: AtomicUsize = AtomicUsize::new(0);

/// The function `fn_id`, whose return address is at `top`, returns: the `va_list`s
/// it (or a frame below it that did not return through its hook) started leave the
/// map, their arguments with them; left there, a later call's arguments or frame at
/// the same addresses would meet them. The function is compared too: a function
/// inlined into the one that started a list returns at the same `top` (one that
/// calls `va_start` is never inlined itself).
fn end_va_lists(rt: &mut Runtime, fn_id: u64, top: usize) {
    let (ended, kept): (Vec<VaList>, Vec<VaList>) = std::mem::take(&mut rt.va_lists)
        .into_iter()
        .partition(|v| v.top < top || (v.top == top && v.fn_id == fn_id));
    for v in ended {
        for start in [v.save, v.args] {
            if start != 0 {
                rt.extents.remove_stack_at(start);
            }
        }
    }
    rt.va_lists = kept;
    VA_LISTS.store(rt.va_lists.len(), Ordering::Relaxed);
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

/// The System V x86-64 register save area `va_start` fills: six general registers,
/// then eight vector registers of 16 bytes.
const VA_SAVE_AREA: usize = 6 * 8 + 8 * 16;
/// Stack arguments of a `va_list` registered at most (how many words are arguments
/// is not known; past them lie the caller's frame and older ones).
const VA_STACK_AREA: usize = 256;

/// A `va_list` was started. See `trestle_abi::hooks::VA_LIST`.
///
/// # Safety
/// `ap` must be a `va_list` that `va_start` just filled.
#[no_mangle]
pub unsafe extern "C" fn __trestle_va_list(ap: *const u8, fn_id: u64) {
    if !tracking() || ap.is_null() {
        return;
    }
    guard("the va_list hook", || {
        // SAFETY: the va_list's layout: { u32 gp_offset, u32 fp_offset, ptr
        // overflow_arg_area, ptr reg_save_area }.
        let (stack, save) = unsafe {
            (
                (ap.add(8) as *const usize).read_unaligned(),
                (ap.add(16) as *const usize).read_unaligned(),
            )
        };
        let (mark, end) = (STACK_MARK.with(|c| c.get()), record::stack_end());
        if let Some(rt) = lock().as_mut() {
            rt.extents.purge_stack_below(mark);
            if save != 0 {
                rt.extents.insert_stack(save, VA_SAVE_AREA);
            }
            // Up to the caller's own allocations above them.
            let room = rt
                .extents
                .stack_start_above(stack)
                .map_or(VA_STACK_AREA, |s| s - stack);
            let len = room.min(VA_STACK_AREA).min(end.saturating_sub(stack));
            let args = if stack != 0 && len > 0 {
                rt.extents.insert_stack(stack, len);
                stack
            } else {
                0
            };
            // The stack arguments start right above the return address.
            rt.va_lists.push(VaList {
                fn_id,
                top: stack.wrapping_sub(8),
                save,
                args,
            });
            VA_LISTS.store(rt.va_lists.len(), Ordering::Relaxed);
        }
    })
}

/// Start of `main`. See `trestle_abi::hooks::MAIN`.
///
/// # Safety
/// The arguments must be `main`'s own.
#[no_mangle]
pub unsafe extern "C" fn __trestle_main(
    argc: i32,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
) {
    branches::maybe_dump();
    let m = mode();
    if m == MODE_PASSIVE {
        // Under `trestle capture`, this run becomes a system test (returns in the
        // program, at once when not asked).
        // SAFETY: `main`'s own arguments.
        unsafe { capture::maybe_start(argc, argv) };
        // A host may ask for system tests to be served from here (returns in every
        // child, and at once when not asked).
        sysserver::maybe_serve(false);
        return;
    }
    if m == MODE_REPLAY {
        // A host replaying many units may have them served from here (`trestle
        // replay`): the program and its metadata are loaded once, and each child,
        // whose nested `main` comes back here, replays the unit its request names.
        // Before the arguments are registered: the server's own are no child's.
        sysserver::maybe_serve(true);
    }
    // A replay server's child gets its arguments from strings the server made on
    // its heap: as extents, an uninitialised slot of the replayed call that points
    // there by chance (a variadic call's unused argument registers) reached memory
    // its recording did not have.
    if !sysserver::replay_child() {
        guard("the main hook", || {
            if let Some(rt) = lock().as_mut() {
                rt.register_main_args(argc, argv, envp);
            }
        });
    }
    // Replaying `main` itself brings us here a second time: run the unit once.
    static REPLAY_STARTED: std::sync::atomic::AtomicBool =
        std::sync::atomic::AtomicBool::new(false);
    if m == MODE_REPLAY && !REPLAY_STARTED.swap(true, Ordering::AcqRel) {
        replay::run();
    }
    if m == MODE_FUZZ && !REPLAY_STARTED.swap(true, Ordering::AcqRel) {
        harness::run();
    }
}

/// `setlocale`, renamed by the pass: remembered, so a replay can repeat it.
///
/// # Safety
/// As `setlocale`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_setlocale(
    category: libc::c_int,
    locale: *const libc::c_char,
) -> *mut libc::c_char {
    // SAFETY: forwarding.
    let r = unsafe { libc::setlocale(category, locale) };
    if !r.is_null() && !locale.is_null() && mode() == MODE_RECORD {
        // SAFETY: `locale` is a NUL-terminated string (setlocale accepted it).
        let name = unsafe { std::ffi::CStr::from_ptr(locale) }
            .to_string_lossy()
            .into_owned();
        if let Some(rt) = lock().as_mut() {
            rt.locale.push((category, name));
        }
    }
    r
}

/// `getenv`, renamed by the pass: under `trestle capture`, a variable the program
/// asks for and has is part of its test.
///
/// # Safety
/// As `getenv`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_getenv(name: *const libc::c_char) -> *mut libc::c_char {
    // SAFETY: forwarding.
    let value = unsafe { libc::getenv(name) };
    // SAFETY: `name` is NUL-terminated (getenv took it), `value` null or a variable's.
    unsafe { capture::note_getenv(name, value) };
    value
}

/// `setvbuf`, renamed by the pass: a call on a standard stream that leaves the buffer
/// to the C library is remembered, so a replay can repeat it.
///
/// # Safety
/// As `setvbuf`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_setvbuf(
    fp: *mut libc::FILE,
    buf: *mut libc::c_char,
    how: libc::c_int,
    size: libc::size_t,
) -> libc::c_int {
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
    // SAFETY: straight from the exit hook.
    unsafe { exiting(code) };
    // SAFETY: plain libc exit.
    unsafe { libc::exit(code) }
}

/// Before a call to `error`, `err` & co. (see `trestle_abi::hooks::EXITS_WITH`), one
/// that is going to exit inside the C library, out of the renamed `exit`'s reach: the
/// same as that `exit` does before exiting, with the status the reporter exits with
/// (a replay ends before the report is printed, as the recording took the state
/// there). The C library then reports and exits.
///
/// # Safety
/// Called by instrumented code only, straight before the reporter's call.
#[no_mangle]
pub unsafe extern "C" fn __trestle_exits_with(status: libc::c_int, always: libc::c_int) {
    if status != 0 || always != 0 {
        // SAFETY: straight from the hook, before the reporter's call.
        unsafe { exiting(status) }
    }
}

/// The process is about to exit with `code`: a recording ends the open invocations
/// with it; a replay ends here with it; in a unit harness the execution ends, not the
/// fuzzing (in-process it returns to the fuzzer, nothing of ours on the stack below
/// needing to be dropped; otherwise this forked execution ends). Elsewhere, and after
/// a recording, it returns.
///
/// # Safety
/// Straight from an exit hook.
unsafe fn exiting(code: libc::c_int) {
    match mode() {
        MODE_RECORD => guard("the exit hook", || {
            if let Some(rt) = lock().as_mut() {
                rt.exited(code);
            }
        }),
        MODE_REPLAY => replay::exited(code),
        // SAFETY: straight from the exit hook.
        MODE_FUZZ => unsafe { end_unit_execution() },
        _ => {}
    }
}

/// A unit execution that exits ends there: in-process, back to the fuzzer (nothing of
/// ours on the stack below needs dropping); otherwise this forked execution ends.
///
/// # Safety
/// As [`inproc::exit_to_caller`]: straight from an exit hook.
unsafe fn end_unit_execution() -> ! {
    // SAFETY: a jump to the catching call, or the end of the process.
    unsafe {
        inproc::exit_to_caller();
        libc::_exit(0)
    }
}

/// The C++ runtime's `__cxa_throw`, found at the first throw (a C program never
/// throws, and links no C++ runtime).
type CxaThrow =
    unsafe extern "C-unwind" fn(*mut libc::c_void, *mut libc::c_void, *mut libc::c_void) -> !;
static CXA_THROW: std::sync::OnceLock<usize> = std::sync::OnceLock::new();

/// `__cxa_throw`, renamed by the pass: in a recording, marks the open invocations
/// (one that is then left without returning ends as `Outcome::Threw`), then throws.
///
/// # Safety
/// As `__cxa_throw`.
#[no_mangle]
pub unsafe extern "C-unwind" fn __trestle_cxa_throw(
    obj: *mut libc::c_void,
    tinfo: *mut libc::c_void,
    dest: *mut libc::c_void,
) -> ! {
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

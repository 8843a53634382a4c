//! In-process unit fuzzing, the harness side: the fuzzer runs inside this process.
//!
//! A forkserver execution is a round trip between two processes that costs far more
//! than the unit itself. Here the runtime restores the context once, as for the
//! forkserver, then loads the fuzzer library (`TRESTLE_FUZZ_INPROC_LIB`, built from
//! `unit-fuzz/inproc`) with `dlopen` and hands it an [`InProcessTarget`]: one
//! execution as a callback ([`run_one`]: write the values, call the function, reset
//! the context), and the edge and CmpLog maps this program's hooks write, which the
//! library's observers read in place. LibAFL itself stays out of the runtime (every
//! instrumented program links it); it lives only in the loaded library.
//!
//! What the unit allocates comes from a heap of its own, emptied after every
//! execution ([`crate::unit_heap`]), so its heap bugs and leaks stay away from the
//! fuzzer's memory. `exit()` inside the unit returns to the callback, and so does a
//! crash once the library has asked for [`catch_crashes`] (`unit_call.c`): the
//! execution ends as a crash, the context is put back, and the fuzzer goes on in the
//! same process. A hang (or a crash elsewhere) is the library's to handle: its
//! signal handlers save the input and restart the fuzzer from a fork of this
//! process, which already holds the restored context.

use crate::fuzz::Session;
use std::ffi::{c_void, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use trestle_abi::fuzz::{
    InProcessEntry, InProcessTarget, ENV_FUZZ_GOAL_CMP, ENV_FUZZ_INPROC_LIB, GOAL_DISTANCE_SLOTS,
    INPROC_ABI_VERSION, INPROC_ENTRY,
};

/// Where the operand distance's slots begin in the edge map (0: not tracked).
static DISTANCE_BASE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

use crate::fuzz::die;

/// The last `dlerror()` message.
fn dl_error() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated message.
    unsafe {
        let e = libc::dlerror();
        if e.is_null() {
            "unknown error".into()
        } else {
            std::ffi::CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

/// Load the fuzzer library and let it fuzz `session` as the plan file says; ends the
/// process with the library's status. Never returns.
pub fn serve(session: &mut Session, plan: &OsStr) -> ! {
    let lib = std::env::var_os(ENV_FUZZ_INPROC_LIB).unwrap_or_else(|| {
        die(&format!(
            "in-process fuzzing needs {ENV_FUZZ_INPROC_LIB}, the fuzzer library"
        ))
    });
    let c_lib =
        CString::new(lib.as_bytes()).unwrap_or_else(|_| die("library path holds a NUL byte"));
    let c_plan =
        CString::new(plan.as_bytes()).unwrap_or_else(|_| die("plan path holds a NUL byte"));
    // SAFETY: loading a library built for this purpose; its constructors are LibAFL's
    // (serde type registration).
    let handle = unsafe { libc::dlopen(c_lib.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        die(&format!(
            "cannot load the fuzzer library {}: {}",
            lib.to_string_lossy(),
            dl_error()
        ));
    }
    let name = CString::new(INPROC_ENTRY).expect("no NUL in the entry name");
    // SAFETY: looking a symbol up in the handle just opened.
    let sym = unsafe { libc::dlsym(handle, name.as_ptr()) };
    if sym.is_null() {
        die(&format!(
            "{} has no {INPROC_ENTRY}: {}",
            lib.to_string_lossy(),
            dl_error()
        ));
    }
    // SAFETY: the library exports the entry with this signature (trestle_abi::fuzz).
    let entry: InProcessEntry = unsafe { std::mem::transmute::<*mut c_void, InProcessEntry>(sym) };
    // From here on the program's allocations are the unit's, apart from the fuzzer's.
    crate::unit_heap::enable().unwrap_or_else(|e| die(&e));
    // A branch to flip: the operand distance of its comparison goes into slots past
    // the edges, when the map has room for them.
    let mut edges_len = crate::forkserver::edges();
    if let Some(v) = std::env::var_os(ENV_FUZZ_GOAL_CMP) {
        match v.to_string_lossy().parse::<u64>() {
            Ok(id) if edges_len + GOAL_DISTANCE_SLOTS <= libafl_targets::EDGES_MAP_ALLOCATED_SIZE => {
                // SAFETY: single-threaded, before the first execution.
                unsafe { crate::branches::GOAL_CMP = id };
                DISTANCE_BASE.store(edges_len, std::sync::atomic::Ordering::Relaxed);
                edges_len += GOAL_DISTANCE_SLOTS;
            }
            Ok(_) => eprintln!("trestle runtime: the edge map has no room for the operand distance; fuzzing without it"),
            Err(e) => eprintln!("trestle runtime: {ENV_FUZZ_GOAL_CMP}={v:?} is not a comparison id ({e}); fuzzing without the operand distance"),
        }
    }
    let target = InProcessTarget {
        abi_version: INPROC_ABI_VERSION,
        run: run_one,
        catch_crashes,
        session: session as *mut Session as *mut c_void,
        // SAFETY: reads of statics that libafl_targets set up before main (the
        // counters' location and count); nothing else writes them in this mode.
        edges: unsafe { libafl_targets::EDGES_MAP_PTR },
        edges_len,
        // SAFETY: as above, the map the trace-cmp hooks write and their switch.
        cmplog_map: unsafe { libafl_targets::CMPLOG_MAP_PTR } as *mut c_void,
        cmplog_enabled: &raw mut libafl_targets::CMPLOG_ENABLED,
        plan: c_plan.as_ptr(),
    };
    // SAFETY: the target's pointers stay valid while the library runs (this frame
    // never returns, `session` is borrowed for its whole life).
    let code = unsafe { entry(&target) };
    // SAFETY: ends the process; the library has written what it had to.
    unsafe { libc::_exit(code) }
}

/// One execution: the [`InProcessTarget::run`] callback.
///
/// # Safety
/// `session` must be the [`Session`] [`serve`] passed, and `input` point to `len`
/// readable bytes.
unsafe extern "C" fn run_one(session: *mut c_void, input: *const u8, len: usize) -> i32 {
    // SAFETY: as the contract says.
    let (session, input) = unsafe {
        (
            &mut *(session as *mut Session),
            std::slice::from_raw_parts(input, len),
        )
    };
    crate::guard("an in-process execution", || {
        let base = DISTANCE_BASE.load(std::sync::atomic::Ordering::Relaxed);
        // SAFETY: this thread's own static (see `branches`).
        unsafe { crate::branches::GOAL_DISTANCE = u64::MAX };
        session.apply(input);
        // EXEC_RETURNED, EXEC_EXITED or EXEC_CRASHED + signal, as unit_call.c counts.
        let how = session.execute_catching();
        if base != 0 {
            // SAFETY: as above; the slots lie within the edge map (checked in `serve`),
            // which the fuzzer's observer reads after this callback returns.
            unsafe {
                // Every slot from the distance's up: only a distance shorter than any
                // before sets a slot never set (a longer one is no progress).
                let d = crate::branches::GOAL_DISTANCE;
                if d != u64::MAX {
                    for k in crate::branches::distance_slot(d)..GOAL_DISTANCE_SLOTS {
                        *libafl_targets::EDGES_MAP_PTR.add(base + k) = 1;
                    }
                }
            }
        }
        session.reset();
        crate::unit_heap::rewind();
        how
    })
}

/// The signals a crashing unit raises.
const CRASH_SIGNALS: [libc::c_int; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGABRT,
];

/// The handlers in place before [`catch_crashes`], one per [`CRASH_SIGNALS`] entry:
/// written before ours are installed, read only by [`on_crash`].
static mut PREVIOUS: [std::mem::MaybeUninit<libc::sigaction>; 5] =
    [std::mem::MaybeUninit::uninit(); 5];

/// [`InProcessTarget::catch_crashes`]: put [`on_crash`] in front of the fuzzer's
/// handlers.
unsafe extern "C" fn catch_crashes() -> i32 {
    for (i, &sig) in CRASH_SIGNALS.iter().enumerate() {
        // SAFETY: single-threaded set-up; `PREVIOUS[i]` is written by sigaction
        // before the new handler can run, and a zeroed sigaction with a valid
        // handler is a valid argument.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_crash as *const () as usize;
            // On the fuzzer's alternate stack (a stack overflow must be caught too);
            // not deferred, so the jump out leaves the signal unblocked.
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
            libc::sigemptyset(&mut sa.sa_mask);
            let previous = (&raw mut PREVIOUS[i]).cast::<libc::sigaction>();
            if libc::sigaction(sig, &sa, previous) != 0 {
                return std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EINVAL);
            }
        }
    }
    0
}

/// A crash signal: inside a unit call, end the execution there (`unit_call.c`);
/// anywhere else, hand it to the handler that was there before.
extern "C" fn on_crash(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    extern "C" {
        fn __trestle_crash_to_caller(sig: libc::c_int) -> libc::c_int;
    }
    // SAFETY: jumps only to a live catching call on this thread; returns otherwise.
    unsafe { __trestle_crash_to_caller(sig) };
    let Some(i) = CRASH_SIGNALS.iter().position(|&s| s == sig) else {
        return;
    };
    // SAFETY: written by `catch_crashes` before this handler was installed.
    let previous = unsafe { PREVIOUS[i].assume_init() };
    match previous.sa_sigaction {
        libc::SIG_IGN => {}
        libc::SIG_DFL => {
            // Back to the default action; returning re-raises a fault, and abort()
            // raises again by itself.
            // SAFETY: resets this signal's disposition.
            unsafe { libc::signal(sig, libc::SIG_DFL) };
        }
        h if previous.sa_flags & libc::SA_SIGINFO != 0 => {
            // SAFETY: the previous handler, called as it was installed to be.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void) =
                unsafe { std::mem::transmute(h) };
            f(sig, info, ctx);
        }
        h => {
            // SAFETY: as above, a plain handler.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
            f(sig);
        }
    }
}

/// From the `exit()` hook in fuzz mode: if an in-process execution is running, end
/// it (jumping back into [`run_one`]); otherwise return, and the caller exits.
///
/// # Safety
/// Must be called with no frame between here and the unit's code that needs
/// unwinding (the jump skips them): straight from the exit hook.
pub unsafe fn exit_to_caller() {
    extern "C" {
        fn __trestle_exit_to_caller() -> i32;
    }
    // SAFETY: jumps only to a live catching call on this thread (unit_call.c).
    unsafe {
        __trestle_exit_to_caller();
    }
}

//! Names and signatures of the runtime hooks the pass inserts calls to.
//!
//! The pass declares each hook with the LLVM type given in its doc comment; the runtime
//! defines it with the matching Rust signature. Both sides take the names from here.

/// `void __trestle_enter(i64 fn_id, ptr state, ptr slots, i32 nslots, ptr sp)`
///
/// Called first thing in every instrumented function. `slots` is an array of `nslots`
/// 64-bit words, one per parameter (integers zero-extended, pointers as addresses,
/// floats by their bits); its address identifies the invocation. `sp` is the stack
/// pointer (`llvm.stacksave`) at the hook: everything on the stack below it belongs
/// to frames that have returned. (The slots' address cannot serve for that: once the
/// function is inlined, its slots sit among its caller's allocas.) `state` is a
/// per-function word the runtime owns.
pub const ENTER: &str = "__trestle_enter";

/// `void __trestle_exit(i64 fn_id, ptr state, i64 ret, ptr slots, ptr sp, ptr top)`
///
/// Called before every return; `ret` is the return value packed like a slot, `slots`
/// the same array the entry hook received (it identifies the invocation), `sp` as
/// for the entry hook, `top` where the return address is (`llvm.addressofreturnaddress`;
/// in a function inlined into another, the other's): the `va_list`s the function
/// started end there.
pub const EXIT: &str = "__trestle_exit";

/// `void __trestle_alloca(ptr addr, i64 size)`
///
/// Registers a stack allocation whose address escapes. Allocations that are only
/// loaded from and stored to cannot be pointed at, and are left alone so that
/// `mem2reg` still promotes them.
pub const ALLOCA: &str = "__trestle_alloca";

/// `void __trestle_va_list(ptr ap, i64 fn_id)`
///
/// Called right after each `va_start` of the program's own, in function `fn_id`:
/// registers where the `va_list` at `ap` points, the function's register save area
/// and the caller's stack arguments, as stack extents until the function returns
/// (see [`EXIT`]). A function handed the `va_list` (m4's
/// `xvasprintf`) then has its arguments in its context, not addresses of a dead frame.
pub const VA_LIST: &str = "__trestle_va_list";

/// SanitizerCoverage's edge callback, `void (ptr guard)`: the runtime counts the edge
/// `*guard` in the map [`EDGE_MAP_POINTER`] points to. `trestle-cc` inlines its calls.
pub const EDGE_CALLBACK: &str = "__sanitizer_cov_trace_pc_guard";

/// The runtime's pointer to the edge map (`u8` hit counters, one per guard number).
pub const EDGE_MAP_POINTER: &str = "__afl_area_ptr";

/// `void __trestle_main(i32 argc, ptr argv, ptr envp)`
///
/// Every symbol the pass adds to a program or the runtime exports starts with this;
/// the pass leaves such symbols alone, and crash signatures skip their frames.
pub const RESERVED_PREFIX: &str = "__trestle";

/// Called at the start of `main`, after static constructors ran. Registers argv and
/// envp; in replay mode it restores a context, calls the unit and never returns.
pub const MAIN: &str = "__trestle_main";

/// Called by a replay thunk when the unit let a C++ exception escape (the thunk caught
/// it): the unit's outcome is `Outcome::Threw`.
pub const UNIT_THREW: &str = "__trestle_unit_threw";

/// Prefix of the generated replay thunks: `i64 __trestle_thunk.<id>(ptr slots)`.
pub const THUNK_PREFIX: &str = "__trestle_thunk.";

/// `void __trestle_exits_with(i32 status, i32 always)`
///
/// Called just before each call to a C library function that reports an error and
/// then exits inside the C library ([`EXITING_REPORTERS`]): `error(status, ...)` exits
/// when `status` is not 0, `err(status, ...)` always (`always` = 1). Their `exit` is
/// out of the pass's reach, so the renamed `exit` never sees it. The hook does what
/// that `exit` would: a recording ends the open invocations with the status, a replay
/// ends there with it, a unit harness ends the execution (in-process, such an exit
/// would end the fuzzer); a recording then returns and the call goes ahead.
pub const EXITS_WITH: &str = "__trestle_exits_with";

/// The C library's error reporters that exit, with whether they always do (the
/// `err` family) or only for a status other than 0 (`error`, `error_at_line`). Each
/// takes the exit status as its first argument, an `int`.
pub const EXITING_REPORTERS: &[(&str, bool)] = &[
    ("error", false),
    ("error_at_line", false),
    ("err", true),
    ("errx", true),
    ("verr", true),
    ("verrx", true),
];

/// Prefix of the per-function state words: `i32 __trestle_state.<id>`.
pub const STATE_PREFIX: &str = "__trestle_state.";

/// Allocation functions whose calls the pass renames to runtime wrappers with the same
/// signature, so that every heap extent is known. `(original, wrapper)`.
pub const RENAMED_ALLOCATORS: &[(&str, &str)] = &[
    ("malloc", "__trestle_malloc"),
    ("calloc", "__trestle_calloc"),
    ("realloc", "__trestle_realloc"),
    ("reallocarray", "__trestle_reallocarray"),
    ("free", "__trestle_free"),
    ("strdup", "__trestle_strdup"),
    ("strndup", "__trestle_strndup"),
    // The C library allocates these buffers itself, out of sight of the renamed
    // malloc; the wrappers register them afterwards.
    ("getline", "__trestle_getline"),
    ("getdelim", "__trestle_getdelim"),
    ("asprintf", "__trestle_asprintf"),
    ("vasprintf", "__trestle_vasprintf"),
    ("__asprintf_chk", "__trestle_asprintf_chk"),
    ("__vasprintf_chk", "__trestle_vasprintf_chk"),
    ("aligned_alloc", "__trestle_aligned_alloc"),
    ("posix_memalign", "__trestle_posix_memalign"),
    ("memalign", "__trestle_memalign"),
    // C++ operator new/delete are not renamed: the runtime replaces them, which also
    // catches the allocations libstdc++ makes inside its shared library.
    // Not allocators, but the runtime must see them: `exit` to record how a unit
    // ended, the stdio openers to know which file a `FILE` has open, `setlocale`
    // to set the same locale before a replay.
    ("exit", "__trestle_exit_call"),
    ("fopen", "__trestle_fopen"),
    ("fopen64", "__trestle_fopen"),
    ("fdopen", "__trestle_fdopen"),
    ("freopen", "__trestle_freopen"),
    ("freopen64", "__trestle_freopen"),
    ("fclose", "__trestle_fclose"),
    ("setlocale", "__trestle_setlocale"),
    ("setvbuf", "__trestle_setvbuf"),
    // Under `trestle capture`, the variables a program asks for are part of its test.
    ("getenv", "__trestle_getenv"),
    ("secure_getenv", "__trestle_getenv"),
    // A C++ `throw`: the recording learns which open invocations an exception may
    // leave, so that they end as `Outcome::Threw` rather than with no outcome.
    ("__cxa_throw", "__trestle_cxa_throw"),
    ("open", "__trestle_open"),
    ("open64", "__trestle_open"),
    ("openat", "__trestle_openat"),
    ("openat64", "__trestle_openat"),
    ("close", "__trestle_close"),
    // A mapping is memory a context may point into (a heap extent while it is
    // readable); a file mapped into memory is input no stream parameter can replace.
    ("mmap", "__trestle_mmap"),
    ("mmap64", "__trestle_mmap"),
    ("munmap", "__trestle_munmap"),
    ("mremap", "__trestle_mremap"),
    ("mprotect", "__trestle_mprotect"),
    // The clock, which a replay can shift (ENV_CLOCK_SHIFT) to tell what a call took
    // from it.
    ("time", "__trestle_time"),
    ("gettimeofday", "__trestle_gettimeofday"),
    ("clock_gettime", "__trestle_clock_gettime"),
    // Child processes: the recording learns which invocations wait for a child
    // started before they began, which a replay cannot repeat.
    ("fork", "__trestle_fork"),
    ("vfork", "__trestle_vfork"),
    ("posix_spawn", "__trestle_posix_spawn"),
    ("posix_spawnp", "__trestle_posix_spawnp"),
    ("popen", "__trestle_popen"),
    ("pclose", "__trestle_pclose"),
    ("wait", "__trestle_wait"),
    ("waitpid", "__trestle_waitpid"),
    ("wait3", "__trestle_wait3"),
    ("wait4", "__trestle_wait4"),
    ("waitid", "__trestle_waitid"),
];

/// The wrapper a call to `name` is renamed to, if any.
pub fn renamed_allocator(name: &str) -> Option<&'static str> {
    RENAMED_ALLOCATORS
        .iter()
        .find(|(orig, _)| *orig == name)
        .map(|(_, wrapper)| *wrapper)
}

/// Edge-coverage map size offered to instrumented programs (entries), unless the host
/// says otherwise in [`ENV_AFL_MAP_SIZE`].
pub const EDGE_MAP_SIZE: usize = 1 << 16;
/// AFL's environment variable: System V shared-memory id of the edge map.
pub const ENV_AFL_SHM_ID: &str = "__AFL_SHM_ID";
/// AFL's environment variable: size of the edge map the host made.
pub const ENV_AFL_MAP_SIZE: &str = "AFL_MAP_SIZE";
/// AFL++'s environment variable: shared-memory id of the CmpLog map.
pub const ENV_AFL_CMPLOG_SHM_ID: &str = "__AFL_CMPLOG_SHM_ID";
/// AFL++'s environment variable: shared-memory id of a test-case buffer.
pub const ENV_AFL_SHM_FUZZ_ID: &str = "__AFL_SHM_FUZZ_ID";

/// Environment variable: directory to write traces to. Recording is off without it.
pub const ENV_TRACE_DIR: &str = "TRESTLE_TRACE_DIR";
/// Environment variable: replay request file; the program replays one unit and exits.
pub const ENV_REPLAY: &str = "TRESTLE_REPLAY";
/// Environment variable: where a replay writes its [`crate::trace::ReplayResult`].
pub const ENV_REPLAY_OUT: &str = "TRESTLE_REPLAY_OUT";
/// Seconds added to every time the program reads from the clock (`time`,
/// `gettimeofday`, `clock_gettime`): a second replay of a unit that differs from the
/// recording runs with the clock shifted, so what the call took from it differs.
pub const ENV_CLOCK_SHIFT: &str = "TRESTLE_CLOCK_SHIFT";
/// Environment variable: distinct contexts carved per function and process.
pub const ENV_MAX_PER_FN: &str = "TRESTLE_MAX_PER_FN";
/// Environment variable: calls of one function inspected before carving gives up on it.
pub const ENV_MAX_ATTEMPTS: &str = "TRESTLE_MAX_ATTEMPTS";
/// Environment variable: the functions to record, as comma-separated hexadecimal
/// symbol ids; unset, every function. A campaign records a queue entry for the
/// functions at a roadblock only (the rest cost time and disk for nothing).
pub const ENV_RECORD_ONLY: &str = "TRESTLE_RECORD_ONLY";
/// Environment variable: edge ids (decimal, comma-separated), the edges of one
/// branch. When set, every recorded invocation says at its end whether one of them
/// was taken while it ran ([`crate::trace::Record::Reach`]), and one that was not does
/// not count towards its function's recording limit: a campaign recording for a
/// roadblock wants the calls that reach the branch, which may come late in the run.
pub const ENV_RECORD_REACH: &str = "TRESTLE_RECORD_REACH";
/// Environment variable: bytes one context may hold before it is cut (marked partial).
pub const ENV_CONTEXT_LIMIT: &str = "TRESTLE_CONTEXT_LIMIT";
/// Environment variable: bytes one process's trace may reach before it records no
/// new call (calls already open still get their ends, so every recorded call has its
/// outcome); unset, no bound. A campaign keeps the traces of a recording within its
/// disk budget this way.
pub const ENV_TRACE_LIMIT: &str = "TRESTLE_TRACE_LIMIT";

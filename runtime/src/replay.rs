//! Replay mode: restore one recorded context and call the function in it.
//!
//! Non-global extents are allocated afresh (with the alignment class they had), global
//! extents are overwritten in place, and every recorded pointer is rewritten to point
//! at the new home of its target. The function is then called through its thunk
//! without the runtime's lock held, and the state it leaves is walked exactly as the
//! recording walked it, so the host can compare the two.

use crate::arena::{arena_alloc, BLOCK_GAP};
use crate::{lock, OpenFrame};
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use trestle_abi::hooks;
use trestle_abi::trace::{ReplayRequest, ReplayResult};
use trestle_abi::{Context, ExtentKind, Outcome, Value};

/// The invocation being replayed (for `exit` inside it).
static REPLAYING: Mutex<Option<OpenFrame>> = Mutex::new(None);

fn write_result(result: &ReplayResult) {
    let Some(out) = std::env::var_os(hooks::ENV_REPLAY_OUT) else {
        eprintln!(
            "trestle runtime: {} is not set; replay result lost",
            hooks::ENV_REPLAY_OUT
        );
        return;
    };
    let bytes = match bincode::serialize(result) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("trestle runtime: cannot encode the replay result: {e}; replay result lost");
            return;
        }
    };
    if let Err(e) = std::fs::write(&out, bytes) {
        eprintln!(
            "trestle runtime: cannot write replay result {}: {e}",
            std::path::Path::new(&out).display()
        );
    }
}

fn finish(result: ReplayResult) -> ! {
    write_result(&result);
    // SAFETY: ends the process without running the program's exit handlers, which
    // belong to a `main` that never ran.
    unsafe { libc::_exit(0) }
}

/// Replay the unit named by the environment; never returns.
pub fn run() -> ! {
    let prepared = crate::guard("replay setup", prepare);
    let (frame, thunk, slots) = match prepared {
        Ok(p) => p,
        Err(e) => finish(ReplayResult::Refused(e)),
    };
    *REPLAYING.lock().unwrap_or_else(|p| p.into_inner()) = Some(frame.clone());
    // SAFETY: `thunk` is the pass-generated `i64 (ptr)` thunk of this function; `slots`
    // has at least as many words as it reads.
    let ret = unsafe {
        let f: extern "C" fn(*const u64) -> u64 = std::mem::transmute(thunk);
        f(slots.as_ptr())
    };
    if UNIT_THREW.load(Ordering::Acquire) {
        finish(ReplayResult::Ran(Outcome::Threw));
    }
    let state = crate::guard("replay post-state", || {
        let mut g = lock();
        let rt = g.as_mut().expect("replay runtime is initialised");
        rt.post_state(&frame, Some(ret))
    });
    finish(ReplayResult::Ran(Outcome::Returned(state)))
}

/// `exit` was called inside the replayed unit.
pub fn exited(code: i32) -> ! {
    let frame = REPLAYING.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let Some(frame) = frame else {
        // exit before the unit started: setup failed in a way already reported
        // SAFETY: plain exit.
        unsafe { libc::_exit(code) }
    };
    let state = crate::guard("replay post-state", || {
        let mut g = lock();
        let rt = g.as_mut().expect("replay runtime is initialised");
        rt.post_state(&frame, None)
    });
    finish(ReplayResult::Ran(Outcome::Exited { code, state }))
}

/// Set when the thunk caught an exception that left the replayed unit.
pub(crate) static UNIT_THREW: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

type Prepared = (OpenFrame, usize, Vec<u64>);

fn prepare() -> Result<Prepared, String> {
    let path = std::env::var_os(hooks::ENV_REPLAY).ok_or("no replay request")?;
    let bytes = std::fs::read(&path).map_err(|e| {
        format!(
            "cannot read replay request {}: {e}",
            std::path::Path::new(&path).display()
        )
    })?;
    let req: ReplayRequest =
        bincode::deserialize(&bytes).map_err(|e| format!("corrupted replay request: {e}"))?;
    let mut g = lock();
    let rt = g.as_mut().ok_or("runtime not initialised")?;
    req.context
        .graph
        .check_shape()
        .map_err(|e| format!("the unit's context cannot be restored: {e}"))?;
    let set = set_up(rt, req.binary_id, &req.context)?;
    Ok((set.frame, set.thunk, set.slots))
}

/// A restored context, ready to call.
pub(crate) struct SetUp {
    /// The invocation (its arguments are the relocated slots).
    pub frame: OpenFrame,
    /// The function's thunk.
    pub thunk: usize,
    /// Argument slots, padded to at least one.
    pub slots: Vec<u64>,
    /// Where each extent of the context now lives.
    pub addrs: Vec<usize>,
}

/// Check that `ctx` belongs to this binary, repeat its locale, restore it.
pub(crate) fn set_up(
    rt: &mut crate::Runtime,
    binary_id: u64,
    ctx: &Context,
) -> Result<SetUp, String> {
    if binary_id != rt.program.binary_id {
        return Err(format!(
            "the unit was carved from another binary (id {:016x}; this one is {:016x})",
            binary_id, rt.program.binary_id
        ));
    }
    let idx = rt
        .program
        .index_of(ctx.fn_id)
        .ok_or_else(|| format!("no function with id {:016x} in this binary", ctx.fn_id))?;
    let (_, thunk) = rt.program.addrs[idx];
    if thunk == 0 {
        return Err(format!(
            "{} cannot be replayed (no thunk)",
            rt.program.functions[idx].name
        ));
    }
    let nparams = rt.program.functions[idx].params.len();
    if ctx.args.len() != nparams {
        return Err(format!(
            "the unit has {} arguments, the function {nparams}",
            ctx.args.len()
        ));
    }
    for (category, name) in &ctx.locale {
        let c = std::ffi::CString::new(name.as_str())
            .map_err(|_| format!("bad locale name {name:?}"))?;
        // SAFETY: plain setlocale with a NUL-terminated name.
        unsafe { libc::setlocale(*category, c.as_ptr()) };
    }
    for &(fd, mode, size) in &ctx.stdio_modes {
        if let Some(fp) = crate::files::std_stream(fd) {
            // SAFETY: a standard stream, no buffer of ours: as the recording called it.
            unsafe { libc::setvbuf(fp, std::ptr::null_mut(), mode, size as usize) };
        }
    }
    let addrs = restore(rt, ctx)?;
    let mut slots = Vec::with_capacity(nparams.max(1));
    for a in &ctx.args {
        slots.push(relocate(rt, &addrs, a)?);
    }
    let args = slots.clone();
    // The thunk stores a returned aggregate into the slots.
    let ret_words = match rt.program.functions[idx].ret {
        trestle_abi::ValueKind::Aggregate(size) => (size as usize).div_ceil(8),
        _ => 0,
    };
    slots.resize(nparams.max(ret_words).max(1), 0);
    let frame = OpenFrame {
        seq: 0,
        fn_idx: idx,
        marker: 0,
        sp: 0,
        args,
        stack_seq: rt.extents.stack_seq(),
        threw: false,
        unreplayable: false,
        reach: Vec::new(),
    };
    Ok(SetUp {
        frame,
        thunk,
        slots,
        addrs,
    })
}

pub(crate) fn relocate(rt: &crate::Runtime, addrs: &[usize], v: &Value) -> Result<u64, String> {
    Ok(match *v {
        Value::Bits(b) => b,
        Value::Ptr { extent, offset } => {
            let base = addrs
                .get(extent as usize)
                .ok_or("pointer to a missing extent")?;
            (*base as u64).wrapping_add(offset)
        }
        Value::Func { id, offset } => {
            let a = rt
                .program
                .func_addr(id)
                .ok_or_else(|| format!("no function with id {id:016x}"))?;
            (a as u64).wrapping_add(offset)
        }
    })
}

/// Place every extent of `ctx` and write its bytes and relocated pointers. Returns the
/// new address of each extent.
pub(crate) fn restore(rt: &mut crate::Runtime, ctx: &Context) -> Result<Vec<usize>, String> {
    let mut addrs = Vec::with_capacity(ctx.graph.extents.len());
    for (i, e) in ctx.graph.extents.iter().enumerate() {
        let home = if e.kind == ExtentKind::File {
            standard_stream_home(ctx, i, e.len)
        } else {
            None
        };
        let addr = match (home, e.kind) {
            (Some(fp), _) => fp,
            (None, ExtentKind::Global { id, .. }) => {
                let (start, len, _) = rt
                    .extents
                    .global(id)
                    .ok_or_else(|| format!("global {id:016x} is not in this binary"))?;
                if len as u64 != e.len {
                    return Err(format!(
                        "global {id:016x} has {len} bytes here, {} in the unit",
                        e.len
                    ));
                }
                start
            }
            // The C library's own block from its own allocator, which may grow or
            // free it during the call as in the recording (`re_search` adds states
            // to a compiled pattern). In-process fuzzing takes it from the arena: a
            // block malloc'd every execution would pile up.
            (None, ExtentKind::LibcHeap) if !crate::unit_heap::active() => {
                // SAFETY: plain malloc; its result is checked.
                let p = unsafe { libc::malloc(e.len.max(1) as usize) };
                if p.is_null() {
                    return Err(format!("cannot allocate {} bytes", e.len));
                }
                p as usize
            }
            (None, kind) => {
                let align = (e.align as usize).clamp(16, 4096);
                // A gap before each block, as the allocator's chunk header is: a
                // pointer one element before it (see `ExtentMap::heap_just_after`)
                // must not land in the block restored before it.
                let gap = align.max(BLOCK_GAP);
                let p = arena_alloc(e.len as usize + gap, align)? + gap;
                rt.extents.insert_heap(p, e.len as usize, kind);
                p
            }
        };
        addrs.push(addr);
    }
    for (e, &addr) in ctx.graph.extents.iter().zip(&addrs) {
        if matches!(e.kind, ExtentKind::Global { constant: true, .. }) {
            continue;
        }
        if let Some(bytes) = &e.bytes {
            let n = bytes.len().min(e.len as usize);
            // SAFETY: `addr` has `e.len` bytes (checked for globals, allocated otherwise).
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as *mut u8, n) };
        }
        for slot in &e.pointers {
            if slot.offset + 8 > e.len {
                return Err("a pointer slot lies outside its extent".into());
            }
            let v = relocate(rt, &addrs, &slot.target)?;
            // SAFETY: inside the extent, checked above.
            unsafe { std::ptr::write_unaligned((addr + slot.offset as usize) as *mut u64, v) };
        }
    }
    for of in &ctx.fds {
        reopen(of)?;
        if of.path.is_none() {
            continue; // standard input's position
        }
        rt.fds.insert(
            of.fd,
            crate::files::FdInfo {
                path: of.path.clone().unwrap_or_default(),
                flags: of.flags,
            },
        );
    }
    for of in &ctx.graph.files {
        reopen(of)?;
        if let Some(&addr) = addrs.get(of.extent as usize) {
            rt.files.insert(
                addr,
                crate::files::FileInfo {
                    path: of.path.clone(),
                    flags: of.flags,
                    ..Default::default()
                },
            );
            // A stream that had not been used yet gets the buffer it had in the
            // recording: a zeroed one, or none if it was unbuffered.
            // SAFETY: `addr` holds a restored FILE that has done no I/O in this process.
            unsafe { crate::files::give_restored_buffer(addr as *mut libc::FILE, &mut rt.extents) };
        }
    }
    Ok(addrs)
}

/// Where extent `i` of `ctx` goes if it was one of the C library's standard streams:
/// in place, over the stream the C library's `stdin`, `stdout` or `stderr` points
/// at. A copy elsewhere would split one stream in two, the program's pointer writing
/// into the copy and `printf` or `getchar` into the original.
fn standard_stream_home(ctx: &Context, i: usize, len: u64) -> Option<usize> {
    let std = ctx
        .graph
        .files
        .iter()
        .find(|f| f.extent as usize == i)?
        .standard?;
    let fp = crate::files::std_stream(i32::from(std))?;
    (len as usize == crate::files::STD_FILE_SIZE).then_some(fp as usize)
}

/// Make the missing directories above the relative path `path` inside the working
/// directory (never above it: no `..`). True if any was made.
fn make_parents(path: &str) -> bool {
    let p = std::path::Path::new(path);
    let Some(parent) = p.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return false;
    };
    let inside = p.is_relative()
        && parent.components().all(|c| {
            matches!(
                c,
                std::path::Component::Normal(_) | std::path::Component::CurDir
            )
        });
    inside && !parent.exists() && std::fs::create_dir_all(parent).is_ok()
}

/// Give the restored `FILE` an open descriptor like the one it had: the same file,
/// at the same offset, under the same number.
fn reopen(of: &trestle_abi::OpenFile) -> Result<(), String> {
    // SAFETY: plain descriptor calls on numbers this process owns.
    unsafe {
        if let Some(path) = &of.path {
            let c =
                std::ffi::CString::new(path.as_str()).map_err(|_| format!("bad path {path:?}"))?;
            let flags = if of.flags < 0 {
                libc::O_RDONLY
            } else {
                of.flags & !libc::O_TRUNC
            };
            let mut fd = libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, 0o644);
            if fd < 0 && flags & libc::O_CREAT != 0 && make_parents(path) {
                // A file the run created in a directory it had created too (cpio
                // extracting `docs/readme.txt`): the replay's directory lacks it.
                fd = libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, 0o644);
            }
            if fd < 0 {
                // The file is gone (a temporary, say): the stream reads as closed.
                return Ok(());
            }
            if let Some(off) = of.offset {
                libc::lseek(fd, off as libc::off_t, libc::SEEK_SET);
            }
            if fd != of.fd && of.fd >= 0 {
                libc::dup2(fd, of.fd);
                libc::close(fd);
            }
        } else if let Some(off) = of.offset {
            // A standard stream: position it if it is seekable (the host hands stdin
            // over as a file).
            libc::lseek(of.fd, off as libc::off_t, libc::SEEK_SET);
        }
    }
    Ok(())
}

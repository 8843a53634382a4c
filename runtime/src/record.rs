//! Record mode: what the entry and exit hooks do while a program runs with
//! `TRESTLE_TRACE_DIR` set. At the entry of a carvable function, snapshot the memory
//! its arguments and globals reach (the context) unless the function is exhausted
//! or the context is a duplicate; at its return (or `exit`, a thrown exception, a
//! crash), snapshot the state it leaves; append both to the process's trace.

use crate::walk::{Limits, Walker};
use crate::writer::TraceWriter;
use crate::{files, guard, lock, OpenFrame, Runtime, EXHAUSTED, OPEN_FRAMES, RT};
use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};
use trestle_abi::context::{Graph, State};
use trestle_abi::hooks;
use trestle_abi::trace::{Record, TraceHeader, TRACE_MAGIC, TRACE_VERSION};
use trestle_abi::{Context, Outcome, Value, ValueKind};

/// Tunables, from the environment.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    max_per_fn: u32,
    max_attempts: u32,
    limits: Limits,
    /// The only functions to record ([`hooks::ENV_RECORD_ONLY`]); `None` for all.
    only: Option<HashSet<u64>>,
    /// The edges of the branch recorded for ([`hooks::ENV_RECORD_REACH`]); empty for none.
    reach: Vec<usize>,
    /// Bytes of trace after which no new call is recorded ([`hooks::ENV_TRACE_LIMIT`]).
    trace_bytes: u64,
}

impl Config {
    /// Each tunable from its variable; unset, or set to something that is not a
    /// number (said on stderr), its default.
    pub(crate) fn from_env() -> Self {
        let num = |name: &str, default: u64| match std::env::var(name) {
            Ok(v) => v.parse::<u64>().unwrap_or_else(|e| {
                eprintln!("trestle runtime: {name}={v:?} is not a number ({e}); using {default}");
                default
            }),
            Err(std::env::VarError::NotPresent) => default,
            Err(e) => {
                eprintln!("trestle runtime: {name}: {e}; using {default}");
                default
            }
        };
        let bytes = num(hooks::ENV_CONTEXT_LIMIT, 4 << 20) as usize;
        let only = std::env::var(hooks::ENV_RECORD_ONLY).ok().map(|v| {
            v.split(',')
                .filter(|s| !s.trim().is_empty())
                .filter_map(|s| {
                    u64::from_str_radix(s.trim(), 16)
                        .map_err(|e| {
                            eprintln!(
                                "trestle runtime: {}: {s:?} is not a function id ({e}); left out",
                                hooks::ENV_RECORD_ONLY
                            )
                        })
                        .ok()
                })
                .collect()
        });
        let reach = std::env::var(hooks::ENV_RECORD_REACH)
            .ok()
            .map(|v| {
                v.split(',')
                    .filter(|s| !s.trim().is_empty())
                    .filter_map(|s| {
                        s.trim()
                            .parse::<usize>()
                            .map_err(|e| {
                                eprintln!(
                                    "trestle runtime: {}: {s:?} is not an edge id ({e}); left out",
                                    hooks::ENV_RECORD_REACH
                                )
                            })
                            .ok()
                    })
                    .collect()
            })
            .unwrap_or_default();
        Config {
            only,
            reach,
            max_per_fn: num(hooks::ENV_MAX_PER_FN, 5) as u32,
            max_attempts: num(hooks::ENV_MAX_ATTEMPTS, 100) as u32,
            trace_bytes: num(hooks::ENV_TRACE_LIMIT, u64::MAX),
            limits: Limits {
                bytes,
                extent_bytes: bytes.min(1 << 20),
                extents: 50_000,
            },
        }
    }
}

/// What the recording knows about one function.
#[derive(Default)]
pub(crate) struct FnState {
    calls: u64,
    carved: u32,
    attempts: u32,
    seen: HashSet<u64>,
    roots: Option<Vec<u64>>,
}

impl Runtime {
    pub(crate) fn open_writer(&mut self) -> Result<(), String> {
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
        let Some(w) = self.writer.as_mut() else {
            return;
        };
        let body = match bincode::serialize(rec) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("trestle runtime: cannot encode a trace record: {e}; record dropped");
                return;
            }
        };
        if let Err(e) = w.append(&body) {
            eprintln!(
                "trestle runtime: writing {}: {e}; recording stops",
                w.path().display()
            );
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
    /// `ret` (when it is a pointer) and the function's root globals; `after` the call,
    /// the C library's own blocks are pointer targets only (see
    /// [`Walker::libc_blocks_opaque`]).
    fn walk(
        &mut self,
        fn_idx: usize,
        args: &[u64],
        ret: Option<u64>,
        stack_cutoff: u64,
        after: bool,
    ) -> (Vec<Value>, Value, Graph, Vec<trestle_abi::StreamPos>) {
        let roots = self.roots(fn_idx);
        files::refresh_buffers(&mut self.files, &mut self.extents);
        let meta = &self.program.functions[fn_idx];
        let mut w = Walker::new(&self.extents, stack_cutoff, self.config.limits)
            .with_files(&self.files)
            .libc_blocks_opaque(after);
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
        (
            argv,
            retv,
            graph,
            files::stream_positions(found, &self.fds, &self.mapped_fds),
        )
    }

    pub(crate) fn post_state(&mut self, frame: &OpenFrame, ret: Option<u64>) -> State {
        // A returned aggregate (in the returning frame, or in the replay's slots) is an
        // extent for the length of this walk: its bytes and pointers are compared.
        let aggregate = match (ret, self.program.functions[frame.fn_idx].ret) {
            (Some(r), ValueKind::Aggregate(size)) => Some((r as usize, size as usize)),
            _ => None,
        };
        self.extents.set_return_copy(aggregate);
        let (_, ret, graph, streams) =
            self.walk(frame.fn_idx, &frame.args, ret, frame.stack_seq, true);
        self.extents.set_return_copy(None);
        if graph.partial {
            self.stats.partial += 1;
        }
        State {
            ret,
            graph,
            streams,
        }
    }

    pub(crate) fn enter(
        &mut self,
        id: u64,
        state: &AtomicU32,
        slots: *const u64,
        nslots: u32,
        sp: usize,
    ) {
        let s = state.load(Ordering::Relaxed);
        let idx = if s == 0 {
            match self
                .program
                .index_of(id)
                .filter(|_| self.config.only.as_ref().is_none_or(|o| o.contains(&id)))
            {
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
        if !replayable
            || f.carved >= self.config.max_per_fn
            || f.attempts >= self.config.max_attempts
        {
            state.store(s | EXHAUSTED, Ordering::Relaxed);
            return;
        }
        if self
            .writer
            .as_ref()
            .is_some_and(|w| w.used() as u64 >= self.config.trace_bytes)
        {
            return; // the trace is full: this call is not recorded, later ones neither
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
        let (argv, _, graph, streams) = self.walk(idx, &args, None, u64::MAX, false);
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
        // Plain data always encodes; a failure is a bug, for the hook's guard to report.
        let encoded = bincode::serialize(&context).expect("a context encodes");
        let key = trestle_abi::ids::fnv1a64(&encoded);
        if !self.fns[idx].seen.insert(key) {
            self.stats.duplicates += 1;
            return;
        }
        // Where standard input stood, for a replay to put it there: a program that
        // reads it with `read(2)` reaches it through no `FILE` of the context. Not part
        // of the key above, as the streams are not.
        if let Some(at) = stdin_position(&context.fds, &streams) {
            context.fds.push(at);
        }
        context.streams = streams;
        self.fns[idx].carved += 1;
        self.stats.carved += 1;
        if partial {
            self.stats.partial += 1;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let unknown = unknown_memory_argument(&context.args, &self.program.functions[idx].params);
        self.write(&Record::Enter {
            seq,
            call_index,
            context,
        });
        let stack_seq = self.extents.stack_seq();
        let reach = self.reach_counters();
        self.frames.push(OpenFrame {
            seq,
            fn_idx: idx,
            marker,
            sp,
            args,
            stack_seq,
            threw: false,
            unreplayable: false,
            reach,
        });
        OPEN_FRAMES.fetch_add(1, Ordering::AcqRel);
        if let Some(k) = unknown {
            self.mark_unreplayable(
                seq,
                &trestle_abi::trace::Unreplayable::UnknownMemory(k as u32),
            );
        }
    }

    pub(crate) fn exit(&mut self, id: u64, ret: u64, marker: usize, sp: usize) {
        // Frames below this one were left by an exception (if one was thrown while
        // they were open) or by longjmp (no outcome).
        while self.frames.last().is_some_and(|f| f.sp < sp) {
            let Some(left) = self.frames.pop() else { break };
            OPEN_FRAMES.fetch_sub(1, Ordering::AcqRel);
            if left.threw {
                self.write(&Record::Exit {
                    seq: left.seq,
                    outcome: Outcome::Threw,
                });
            }
        }
        let Some(top) = self.frames.last() else {
            return;
        };
        if top.marker != marker || self.program.functions[top.fn_idx].id != id {
            return;
        }
        let frame = top.clone();
        self.say_reached(&frame);
        let state = self.post_state(&frame, Some(ret));
        self.frames.pop();
        OPEN_FRAMES.fetch_sub(1, Ordering::AcqRel);
        self.write(&Record::Exit {
            seq: frame.seq,
            outcome: Outcome::Returned(state),
        });
    }

    /// The counters of the branch recorded for, now (empty when recording for none).
    fn reach_counters(&self) -> Vec<u8> {
        if self.config.reach.is_empty() {
            return Vec::new();
        }
        // SAFETY: the SanitizerCoverage counters the program's edges write, at least
        // as many as it registered; ids past them read as untaken.
        unsafe {
            let map = libafl_targets::EDGES_MAP_PTR;
            let n = crate::forkserver::edges();
            self.config
                .reach
                .iter()
                .map(|&e| {
                    if e < n && !map.is_null() {
                        *map.add(e)
                    } else {
                        0
                    }
                })
                .collect()
        }
    }

    /// Recording for a branch: say whether `frame`'s invocation reached it; one that
    /// did not leaves its place in the function's recording limit to a later call.
    fn say_reached(&mut self, frame: &OpenFrame) {
        if self.config.reach.is_empty() {
            return;
        }
        let reached = self.reach_counters() != frame.reach;
        if !reached {
            let f = &mut self.fns[frame.fn_idx];
            f.carved = f.carved.saturating_sub(1);
        }
        self.write(&Record::Reach {
            seq: frame.seq,
            reached,
        });
    }

    /// Mark every open invocation numbered `from` or later as one a replay cannot
    /// repeat, for `why` (once each).
    pub(crate) fn mark_unreplayable(&mut self, from: u64, why: &trestle_abi::trace::Unreplayable) {
        let marked: Vec<u64> = self
            .frames
            .iter_mut()
            .filter(|f| f.seq >= from && !f.unreplayable)
            .map(|f| {
                f.unreplayable = true;
                f.seq
            })
            .collect();
        for seq in marked {
            self.write(&Record::Unreplayable {
                seq,
                why: why.clone(),
            });
        }
    }

    /// A C++ exception is being thrown: any open invocation may be left by it.
    pub(crate) fn throwing(&mut self) {
        for f in &mut self.frames {
            f.threw = true;
        }
    }

    /// `exit(code)` was called: every open invocation ends here.
    pub(crate) fn exited(&mut self, code: i32) {
        while let Some(frame) = self.frames.pop() {
            OPEN_FRAMES.fetch_sub(1, Ordering::AcqRel);
            self.say_reached(&frame);
            let state = self.post_state(&frame, None);
            self.write(&Record::Exit {
                seq: frame.seq,
                outcome: Outcome::Exited { code, state },
            });
        }
    }
}

pub(crate) extern "C" fn at_exit() {
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
                let path = w.path().to_owned();
                if let Err(e) = w.close() {
                    eprintln!(
                        "trestle runtime: closing {}: {e}; the trace may be cut short",
                        path.display()
                    );
                }
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
                rt.write(&Record::Exit {
                    seq: f.seq,
                    outcome: Outcome::Crashed { signal: sig },
                });
            }
        }
    }
}

/// # Safety
/// Installs process-wide signal handlers.
pub(crate) unsafe fn install_crash_handlers() {
    for sig in [
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGABRT,
        libc::SIGFPE,
        libc::SIGILL,
    ] {
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

/// The first pointer argument (by the parameters' kinds) whose address lies in no
/// recorded extent (the walk left it plain bits), no loaded object (the program's or
/// a library's image: the same in a replay, ASLR being off in both), not in this
/// thread's stack and not in the C library's heap: memory a replay does not have at
/// all, such as a file the program mapped (xmlwf's input). The heap and the stack
/// are there in a replay, at the same place; what a C library allocated there for
/// itself (a C++ exception object, under its constructor) replayed faithfully. Null,
/// small and negative sentinels (`SIG_IGN`, `MAP_FAILED`) are no addresses.
fn unknown_memory_argument(
    args: &[trestle_abi::Value],
    params: &[trestle_abi::meta::ParamMeta],
) -> Option<usize> {
    args.iter().zip(params).position(|(a, p)| {
        let trestle_abi::Value::Bits(v) = *a else {
            return false;
        };
        p.kind == trestle_abi::meta::ValueKind::Ptr
            && (0x10000..0x8000_0000_0000).contains(&v)
            && !in_loaded_object(v as usize)
            && !on_this_stack(v as usize)
            && !crate::libc_heap::in_brk_heap(v as usize)
    })
}

fn in_loaded_object(addr: usize) -> bool {
    // SAFETY: dladdr only reads the loader's tables; `info` is plain data it fills.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        libc::dladdr(addr as *const libc::c_void, &mut info) != 0
    }
}

/// Where this thread's stack ends (its highest address).
pub(crate) fn stack_end() -> usize {
    this_stack().1
}

fn on_this_stack(addr: usize) -> bool {
    let (lo, hi) = this_stack();
    (lo..hi).contains(&addr)
}

/// This thread's stack, lowest address to end.
fn this_stack() -> (usize, usize) {
    thread_local! {
        static STACK: std::cell::Cell<Option<(usize, usize)>> = const { std::cell::Cell::new(None) };
    }
    STACK.with(|s| {
        if let Some(r) = s.get() {
            return r;
        }
        // SAFETY: glibc fills the attributes of the calling thread (for the main
        // thread from /proc/self/maps, once); they are destroyed after reading.
        let r = unsafe {
            let mut attr: libc::pthread_attr_t = std::mem::zeroed();
            let (mut base, mut size): (*mut libc::c_void, usize) = (std::ptr::null_mut(), 0);
            if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) == 0 {
                libc::pthread_attr_getstack(&attr, &mut base, &mut size);
                libc::pthread_attr_destroy(&mut attr);
            }
            (base as usize, base as usize + size)
        };
        s.set(Some(r));
        r
    })
}

/// Standard input's read position as a descriptor entry (`path` `None`, `standard`
/// 0): the bytes the program had consumed, those the C library's `stdin` read ahead
/// and did not hand out yet not counted, since a replay's `stdin` starts empty.
/// `None` when the program opened descriptor 0 itself or it cannot seek.
fn stdin_position(
    fds: &[trestle_abi::OpenFile],
    streams: &[trestle_abi::StreamPos],
) -> Option<trestle_abi::OpenFile> {
    if fds.iter().any(|f| f.fd == 0) {
        return None;
    }
    let s = streams.iter().find(|s| s.fd == 0 && s.path.is_none())?;
    let offset = s.offset?.checked_sub(s.pending)?;
    Some(trestle_abi::OpenFile {
        extent: u32::MAX,
        fd: 0,
        offset: Some(offset),
        path: None,
        flags: -1,
        standard: Some(0),
    })
}

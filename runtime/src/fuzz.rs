//! Unit harness mode: the program restores one carved context and then executes the
//! function again and again with new values for the unit's parameters.
//!
//! The context is restored once, in the process that serves the fuzzer. Executions
//! then run in forks of it (one per execution, or many per fork with the context
//! reset in between: [`crate::forkserver`]), or, in-process, in the fuzzer's own
//! process, which the fuzzer library loaded into this one ([`crate::inproc`]).
//! An execution decodes the input
//! (`trestle_abi::fuzz`), writes each value at its site — a string of a new length
//! gets a fresh extent and every pointer to the old one is moved to it, a length
//! companion follows — and calls the function through its thunk.

use crate::replay::{arena_alloc, arena_mark, arena_rewind, set_up};
use crate::lock;
use trestle_abi::fuzz::{decode_values, FuzzRequest, ParamValue, ENV_FUZZ, ENV_FUZZ_INPROC, ENV_FUZZ_INPUT};
use trestle_abi::unit::{Param, ParamKind, ParamSite};
use trestle_abi::Value;

/// A pointer to an extent, to be moved when the extent is replaced.
#[derive(Debug, Clone, Copy)]
enum Ref {
    /// Argument `k`, pointing `offset` bytes in.
    Arg { k: usize, offset: u64 },
    /// The word at `at` (an address), pointing `offset` bytes in.
    Word { at: usize, offset: u64 },
}

/// A restored unit, ready to execute with new parameter values.
pub struct Session {
    thunk: usize,
    slots: Vec<u64>,
    addrs: Vec<usize>,
    lens: Vec<u64>,
    refs: Vec<Vec<Ref>>,
    params: Vec<Param>,
    /// The restored state, for resetting between executions of one process.
    pristine: Pristine,
}

/// The restored context as it was before the first execution.
struct Pristine {
    slots: Vec<u64>,
    addrs: Vec<usize>,
    lens: Vec<u64>,
    memory: Vec<(usize, Vec<u8>)>,
    files: Vec<(i32, u64)>,
    /// The replay arena's fill level after set-up: fresh extents for resized strings
    /// come after it and are given back on reset.
    arena: usize,
    libc: LibcState,
}

extern "C" {
    static mut optind: libc::c_int;
    static mut opterr: libc::c_int;
    static mut optopt: libc::c_int;
    static mut optarg: *mut libc::c_char;
}

/// C library state that a unit changes and no context holds: getopt's cursor and
/// errno. Taken when the session is set up (a fresh process's values) and put back
/// on reset, so that every execution parses its options as the first one did — a
/// carved `main` otherwise finds `optind` past its arguments from the second
/// execution on, and takes the same usage error every time.
#[derive(Debug, Clone, Copy)]
struct LibcState {
    optind: libc::c_int,
    opterr: libc::c_int,
    optopt: libc::c_int,
    optarg: *mut libc::c_char,
    errno: libc::c_int,
}

impl LibcState {
    fn capture() -> LibcState {
        // SAFETY: reads of the C library's own globals, single-threaded.
        unsafe { LibcState { optind, opterr, optopt, optarg, errno: *libc::__errno_location() } }
    }

    fn restore(&self) {
        // SAFETY: writes of the C library's own globals, single-threaded.
        unsafe {
            // glibc keeps more of getopt's cursor privately; `optind = 0` is its
            // documented way to start scanning afresh, as a fresh process's first
            // call does (a unit that reads `optind` before calling getopt sees 0).
            optind = if self.optind == 1 { 0 } else { self.optind };
            opterr = self.opterr;
            optopt = self.optopt;
            optarg = self.optarg;
            *libc::__errno_location() = self.errno;
        }
    }
}

impl Session {
    /// Set up from the request named by the environment.
    pub fn from_env() -> Result<Session, String> {
        let path = std::env::var_os(ENV_FUZZ).ok_or("no fuzz request")?;
        let bytes = std::fs::read(&path)
            .map_err(|e| format!("cannot read fuzz request {}: {e}", std::path::Path::new(&path).display()))?;
        let req: FuzzRequest = bincode::deserialize(&bytes).map_err(|e| format!("corrupted fuzz request: {e}"))?;
        if let Some(bytes) = &req.stdin {
            give_stdin(bytes)?;
        }
        let mut g = lock();
        let rt = g.as_mut().ok_or("runtime not initialised")?;
        let set = set_up(rt, req.binary_id, &req.context)?;
        let n = req.context.graph.extents.len();
        let mut refs = vec![Vec::new(); n];
        for (k, a) in req.context.args.iter().enumerate() {
            if let Value::Ptr { extent, offset } = *a {
                if let Some(r) = refs.get_mut(extent as usize) {
                    r.push(Ref::Arg { k, offset });
                }
            }
        }
        for (i, e) in req.context.graph.extents.iter().enumerate() {
            for p in &e.pointers {
                if let Value::Ptr { extent, offset } = p.target {
                    if let Some(r) = refs.get_mut(extent as usize) {
                        r.push(Ref::Word { at: set.addrs[i] + p.offset as usize, offset });
                    }
                }
            }
        }
        for p in &req.params {
            if let ParamSite::Memory { extent, offset, len } = p.site {
                let fits = req.context.graph.extents.get(extent as usize).is_some_and(|e| offset + len <= e.len);
                if !fits {
                    return Err(format!("parameter at e{extent}+{offset} no longer fits its extent"));
                }
            }
        }
        let lens: Vec<u64> = req.context.graph.extents.iter().map(|e| e.len).collect();
        let memory = req
            .context
            .graph
            .extents
            .iter()
            .zip(&set.addrs)
            .filter(|(e, _)| !matches!(e.kind, trestle_abi::ExtentKind::Global { constant: true, .. }))
            // SAFETY: each restored extent has `len` readable bytes at its address.
            .map(|(e, &a)| (a, unsafe { std::slice::from_raw_parts(a as *const u8, e.len as usize) }.to_vec()))
            .collect();
        let files = req
            .context
            .graph
            .files
            .iter()
            .chain(&req.context.fds)
            .filter_map(|f| f.offset.map(|o| (f.fd, o)))
            .collect();
        let pristine = Pristine {
            slots: set.slots.clone(),
            addrs: set.addrs.clone(),
            lens: lens.clone(),
            memory,
            files,
            arena: arena_mark(),
            libc: LibcState::capture(),
        };
        Ok(Session { thunk: set.thunk, slots: set.slots, addrs: set.addrs, lens, refs, params: req.params, pristine })
    }

    /// Write `input`'s values into the restored context. Meant for a forked child:
    /// the changes are not undone.
    pub fn apply(&mut self, input: &[u8]) {
        let values = decode_values(&self.params, input);
        // Taken out for the loop (the writes below borrow `self`), put back after.
        let params = std::mem::take(&mut self.params);
        for (p, v) in params.iter().zip(values) {
            match (p.site, p.kind, v) {
                (ParamSite::Arg(k), ParamKind::Int { bits }, ParamValue::Int(x)) => {
                    self.set_arg(k as usize, x, bits);
                }
                (ParamSite::Memory { extent, offset, len }, ParamKind::Bytes { nul, resizable }, ParamValue::Bytes(b)) => {
                    let new_len = self.write_string(extent as usize, offset, len, nul, resizable, &b);
                    for c in &p.companions {
                        let value = new_len as i64 + c.delta;
                        match c.site {
                            ParamSite::Arg(k) => self.set_arg(k as usize, value, c.bits),
                            ParamSite::Memory { extent, offset, .. } => {
                                let at = self.addrs[extent as usize] + offset as usize;
                                // SAFETY: the companion lies inside its restored extent.
                                unsafe {
                                    if c.bits == 64 {
                                        std::ptr::write_unaligned(at as *mut i64, value);
                                    } else {
                                        std::ptr::write_unaligned(at as *mut i32, value as i32);
                                    }
                                }
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        self.params = params;
    }

    fn set_arg(&mut self, k: usize, x: i64, bits: u16) {
        if let Some(s) = self.slots.get_mut(k) {
            let mask = if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
            *s = (x as u64) & mask;
        }
    }

    /// Write a string value; returns the length written.
    fn write_string(&mut self, extent: usize, offset: u64, len: u64, nul: bool, resizable: bool, b: &[u8]) -> usize {
        let term = nul as usize;
        if resizable && b.len() as u64 != len {
            // A fresh extent of the new length; move every pointer to the old one.
            let Ok(new) = arena_alloc(b.len() + term, 16) else { return len as usize };
            // SAFETY: `new` has room for the bytes and the terminator.
            unsafe {
                std::ptr::copy_nonoverlapping(b.as_ptr(), new as *mut u8, b.len());
                if nul {
                    *((new + b.len()) as *mut u8) = 0;
                }
            }
            for r in &self.refs[extent] {
                match *r {
                    Ref::Arg { k, offset } => self.slots[k] = (new as u64).wrapping_add(offset),
                    // SAFETY: `at` is a pointer word inside a restored extent.
                    Ref::Word { at, offset } => unsafe {
                        std::ptr::write_unaligned(at as *mut u64, (new as u64).wrapping_add(offset))
                    },
                }
            }
            self.addrs[extent] = new;
            self.lens[extent] = (b.len() + term) as u64;
            return b.len();
        }
        // In place, cut to the room there is.
        let room = (self.lens[extent].saturating_sub(offset) as usize).saturating_sub(term);
        let n = b.len().min(room);
        let at = self.addrs[extent] + offset as usize;
        // SAFETY: `at..at+n+term` lies inside the restored extent.
        unsafe {
            std::ptr::copy_nonoverlapping(b.as_ptr(), at as *mut u8, n);
            if nul {
                *((at + n) as *mut u8) = 0;
            }
        }
        n
    }

    /// Put the restored context back as it was before the first execution: memory,
    /// argument slots, file offsets, the arena extents of resized strings, getopt's
    /// cursor and errno. What the function allocated is not freed (in-process, the
    /// unit heap is emptied instead), and the rest of the C library's own state is
    /// not reset: a persistent harness therefore starts a fresh process every so
    /// many executions.
    pub fn reset(&mut self) {
        let p = &self.pristine;
        for (addr, bytes) in &p.memory {
            // SAFETY: the same restored extents the bytes were read from.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), *addr as *mut u8, bytes.len()) };
        }
        for &(fd, off) in &p.files {
            // SAFETY: repositions a descriptor this process owns.
            unsafe { libc::lseek(fd, off as libc::off_t, libc::SEEK_SET) };
        }
        self.slots.clone_from(&p.slots);
        self.addrs.clone_from(&p.addrs);
        self.lens.clone_from(&p.lens);
        arena_rewind(p.arena);
        p.libc.restore();
    }

    /// Call the function once with the current values.
    pub fn execute(&mut self) -> u64 {
        // SAFETY: the thunk of this function, with at least as many slots as it reads.
        unsafe {
            let f: extern "C" fn(*const u64) -> u64 = std::mem::transmute(self.thunk);
            f(self.slots.as_ptr())
        }
    }

    /// Call the function once with the current values, such that `exit()` or a
    /// crash inside it ends the call rather than the process (the crash once
    /// [`crate::inproc`]'s signal handlers are in place). Returns `0` if it returned,
    /// `1` if it called `exit()`, `2 +` the signal number if it crashed.
    pub fn execute_catching(&mut self) -> i32 {
        extern "C" {
            fn __trestle_call_catching(thunk: usize, slots: *const u64) -> i32;
        }
        // SAFETY: as in `execute`; the call (unit_call.c) only adds the jump target
        // that the exit hook and the crash handler return to.
        unsafe { __trestle_call_catching(self.thunk, self.slots.as_ptr()) }
    }
}

/// Make `bytes` this process's standard input, as a seekable file (the context's
/// stdin `FILE` is then repositioned where the recording had read to).
fn give_stdin(bytes: &[u8]) -> Result<(), String> {
    let path = std::env::temp_dir().join(format!("trestle-harness-stdin-{}", std::process::id()));
    std::fs::write(&path, bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    let file = std::fs::File::open(&path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let _ = std::fs::remove_file(&path);
    // SAFETY: replaces descriptor 0 with a file this process just opened.
    unsafe {
        libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&file), 0);
    }
    Ok(())
}

fn die(msg: &str) -> ! {
    eprintln!("trestle harness: {msg}");
    // SAFETY: ends the process.
    unsafe { libc::_exit(3) }
}

/// Serve the unit: fuzz it in-process (`TRESTLE_FUZZ_INPROC`), run one input from a
/// file (`TRESTLE_FUZZ_INPUT`), or serve a fuzzer through the forkserver protocol.
/// Never returns.
pub fn run() -> ! {
    let mut session = match crate::guard("harness setup", Session::from_env) {
        Ok(s) => s,
        Err(e) => die(&e),
    };
    if let Some(plan) = std::env::var_os(ENV_FUZZ_INPROC) {
        crate::inproc::serve(&mut session, &plan)
    }
    if let Some(path) = std::env::var_os(ENV_FUZZ_INPUT) {
        let input = std::fs::read(&path).unwrap_or_else(|e| die(&format!("cannot read input: {e}")));
        session.apply(&input);
        session.execute();
        // SAFETY: ends the process.
        unsafe { libc::_exit(0) }
    }
    crate::forkserver::serve(&mut session)
}

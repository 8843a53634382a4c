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

use crate::arena::{arena_alloc, arena_mark, arena_rewind};
use crate::lock;
use crate::replay::set_up;
use std::convert::Infallible;
use trestle_abi::fuzz::{decode_values, FuzzRequest, ENV_FUZZ};
use trestle_abi::params::{self, ParamTarget, StringSite};
use trestle_abi::unit::{Param, ParamSite, Resize};
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
    /// The stream parameters' descriptors, by parameter index.
    streams: Vec<Option<StreamSlot>>,
    /// The restored state, for resetting between executions of one process.
    pristine: Pristine,
}

/// Where a stream parameter's value is served from: a memory file put under the
/// stream's descriptor, holding the value and then the rest of the recorded stream
/// past the cap (`tail`).
struct StreamSlot {
    fd: i32,
    /// The `FILE` to empty before each execution, if a `FILE` reads the descriptor.
    file: Option<usize>,
    tail: Vec<u8>,
}

impl StreamSlot {
    /// Put a memory file under `fd` in place of the recorded stream, keeping what the
    /// stream holds past `value_end` (the end of the parameter's value in it).
    fn open(fd: i32, file: Option<usize>, value_end: u64) -> Result<StreamSlot, String> {
        let mut tail = Vec::new();
        let mut buf = [0u8; 65536];
        let mut at = value_end as libc::off_t;
        loop {
            // SAFETY: reads into a local buffer from a descriptor number.
            let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), at) };
            if n <= 0 {
                break;
            }
            tail.extend_from_slice(&buf[..n as usize]);
            at += n as libc::off_t;
        }
        // SAFETY: creates a descriptor; the name is a NUL-terminated literal.
        let mem = unsafe { libc::memfd_create(c"trestle-stream".as_ptr(), libc::MFD_CLOEXEC) };
        if mem < 0 {
            return Err(format!(
                "cannot create a memory file for descriptor {fd}: {}",
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: plain descriptor calls on numbers this process owns.
        unsafe {
            if libc::dup2(mem, fd) < 0 {
                let e = std::io::Error::last_os_error();
                libc::close(mem);
                return Err(format!("cannot serve a stream on descriptor {fd}: {e}"));
            }
            libc::close(mem);
        }
        Ok(StreamSlot { fd, file, tail })
    }

    /// Make `value` (then the tail) what is left to read.
    fn serve(&self, value: &[u8]) {
        // SAFETY: plain descriptor calls on the memory file this slot owns; the FILE
        // (if any) is a live stream of this single-threaded process.
        unsafe {
            libc::ftruncate(self.fd, 0);
            let mut at = 0usize;
            for part in [value, &self.tail[..]] {
                let mut done = 0;
                while done < part.len() {
                    let n = libc::pwrite(
                        self.fd,
                        part[done..].as_ptr().cast(),
                        part.len() - done,
                        (at + done) as libc::off_t,
                    );
                    if n <= 0 {
                        break;
                    }
                    done += n as usize;
                }
                at += part.len();
            }
            libc::lseek(self.fd, 0, libc::SEEK_SET);
            if let Some(fp) = self.file {
                crate::files::drop_read_ahead(fp);
            }
        }
    }
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
        unsafe {
            LibcState {
                optind,
                opterr,
                optopt,
                optarg,
                errno: *libc::__errno_location(),
            }
        }
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
        let bytes = std::fs::read(&path).map_err(|e| {
            format!(
                "cannot read fuzz request {}: {e}",
                std::path::Path::new(&path).display()
            )
        })?;
        let req: FuzzRequest =
            bincode::deserialize(&bytes).map_err(|e| format!("corrupted fuzz request: {e}"))?;
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
                        r.push(Ref::Word {
                            at: set.addrs[i] + p.offset as usize,
                            offset,
                        });
                    }
                }
            }
        }
        let mut streams = Vec::with_capacity(req.params.len());
        for p in &req.params {
            if let ParamSite::Memory {
                extent,
                offset,
                len,
            } = p.site
            {
                let fits = req
                    .context
                    .graph
                    .extents
                    .get(extent as usize)
                    .is_some_and(|e| offset + len <= e.len);
                if !fits {
                    return Err(format!(
                        "parameter at e{extent}+{offset} no longer fits its extent"
                    ));
                }
            }
            streams.push(match p.site {
                ParamSite::Stream { fd, file, buffered } => {
                    let fp = match file {
                        Some(e) => Some(
                            *set.addrs
                                .get(e as usize)
                                .ok_or("a stream parameter's FILE is not in the context")?,
                        ),
                        None if buffered && fd == 0 => Some(crate::files::c_stdin()),
                        None => None,
                    };
                    let start = p.origins.first().map_or(0, |o| o.offset);
                    Some(StreamSlot::open(fd, fp, start + p.original.len() as u64)?)
                }
                _ => None,
            });
        }
        let lens: Vec<u64> = req.context.graph.extents.iter().map(|e| e.len).collect();
        let memory = req
            .context
            .graph
            .extents
            .iter()
            .zip(&set.addrs)
            .filter(|(e, _)| {
                !matches!(
                    e.kind,
                    trestle_abi::ExtentKind::Global { constant: true, .. }
                )
            })
            // SAFETY: each restored extent has `len` readable bytes at its address.
            .map(|(e, &a)| {
                (
                    a,
                    unsafe { std::slice::from_raw_parts(a as *const u8, e.len as usize) }.to_vec(),
                )
            })
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
        // What setting up opened belongs to the context; executions' files are closed.
        crate::files::forget_opened();
        Ok(Session {
            thunk: set.thunk,
            slots: set.slots,
            addrs: set.addrs,
            lens,
            refs,
            params: req.params,
            streams,
            pristine,
        })
    }

    /// Write `input`'s values into the restored context, as [`trestle_abi::params`]
    /// decides. Meant for a forked child: the changes are not undone.
    pub fn apply(&mut self, input: &[u8]) {
        let values = decode_values(&self.params, input);
        // Taken out for the writes (they borrow `self`), put back after.
        let params = std::mem::take(&mut self.params);
        let Ok(()) = params::apply(self, &params, &values);
        self.params = params;
    }
}

/// Writes into the live restored memory. A string of a new length gets a fresh
/// arena extent and every pointer to the old place is moved to it.
impl ParamTarget for Session {
    type Error = Infallible;

    fn set_arg(&mut self, k: usize, bits: u64) {
        if let Some(s) = self.slots.get_mut(k) {
            *s = bits;
        }
    }

    fn write_string(
        &mut self,
        _param: usize,
        site: StringSite,
        b: &[u8],
    ) -> Result<usize, Infallible> {
        let StringSite {
            extent,
            offset,
            len,
            nul,
            resize,
        } = site;
        let extent = extent as usize;
        let term = nul as usize;
        if resize != Resize::Fixed && b.len() as u64 != len {
            // Fresh room of the new length; move the pointers to the old place: all
            // of the extent's, or, for a token, those into the token.
            let new = match arena_alloc(b.len() + term, 16) {
                Ok(new) => new,
                Err(e) => {
                    no_room_for_value(b.len(), &e);
                    return Ok(len as usize);
                }
            };
            // SAFETY: `new` has room for the bytes and the terminator.
            unsafe {
                std::ptr::copy_nonoverlapping(b.as_ptr(), new as *mut u8, b.len());
                if nul {
                    *((new + b.len()) as *mut u8) = 0;
                }
            }
            let token = resize == Resize::Token;
            let base = if token { offset } else { 0 };
            for r in &self.refs[extent] {
                let (Ref::Arg { offset: o, .. } | Ref::Word { offset: o, .. }) = *r;
                if token && !(offset..=offset + len).contains(&o) {
                    continue;
                }
                let target = (new as u64).wrapping_add(o - base);
                match *r {
                    Ref::Arg { k, .. } => self.slots[k] = target,
                    // SAFETY: `at` is a pointer word inside a restored extent.
                    Ref::Word { at, .. } => unsafe {
                        std::ptr::write_unaligned(at as *mut u64, target)
                    },
                }
            }
            if !token {
                self.addrs[extent] = new;
                self.lens[extent] = (b.len() + term) as u64;
            }
            return Ok(b.len());
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
        Ok(n)
    }

    fn write_companion(
        &mut self,
        _param: usize,
        extent: u32,
        offset: u64,
        word: &[u8],
    ) -> Result<(), Infallible> {
        let at = self.addrs[extent as usize] + offset as usize;
        // SAFETY: the companion lies inside its restored extent.
        unsafe { std::ptr::copy_nonoverlapping(word.as_ptr(), at as *mut u8, word.len()) };
        Ok(())
    }

    fn serve_stream(&mut self, param: usize, bytes: &[u8]) {
        if let Some(Some(slot)) = self.streams.get(param) {
            slot.serve(bytes);
        }
    }
}

impl Session {
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
        crate::files::close_opened();
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
    let file =
        std::fs::File::open(&path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let _ = std::fs::remove_file(&path);
    // SAFETY: replaces descriptor 0 with a file this process just opened.
    unsafe {
        libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&file), 0);
    }
    Ok(())
}

/// Load a shared library into the harness (its constructors run now).
pub(crate) fn load_library(path: &std::ffi::OsStr) -> Result<(), String> {
    use std::os::unix::ffi::OsStrExt as _;
    let c = std::ffi::CString::new(path.as_bytes())
        .map_err(|_| "a library path with a NUL byte".to_owned())?;
    // SAFETY: dlopen with a NUL-terminated path; the library's constructors only
    // install signal handlers.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        return Err(format!(
            "cannot load {}",
            std::path::Path::new(path).display()
        ));
    }
    Ok(())
}

/// The harness cannot set its unit up: say why and end with the status that means so.
/// A resized string value that found no room keeps the recorded one: said once per
/// process (every execution would say it again).
fn no_room_for_value(len: usize, why: &str) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        eprintln!("trestle runtime: no room for a {len}-byte string value ({why}); such values are not applied");
    }
}

pub(crate) fn die(msg: &str) -> ! {
    eprintln!("{}{msg}", trestle_abi::fuzz::HARNESS_MSG_PREFIX);
    // SAFETY: ends the process.
    unsafe { libc::_exit(trestle_abi::fuzz::EXIT_SETUP_FAILED) }
}

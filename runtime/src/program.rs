//! The program's own description of itself: the tables and metadata the pass put into
//! the `trestle_*` sections, found through the linker's `__start_`/`__stop_` symbols.

use crate::extents::ExtentMap;
use std::collections::{BTreeSet, HashMap};
use trestle_abi::meta::{
    binary_id, decode_meta_section, FnMeta, FuncEntry, GlobalEntry, GLOBAL_CONSTANT,
};

// Each section gets one all-zero entry from the runtime itself, so that the section,
// and with it the linker's start/stop symbols, exist even in a program with no
// instrumented module. Zero bytes and zero ids are skipped by the readers.
#[used]
#[link_section = trestle_abi::section_name!(meta)]
static mut META_PAD: [u8; 8] = [0; 8];
#[used]
#[link_section = trestle_abi::section_name!(funcs)]
static mut FUNCS_PAD: [u64; 3] = [0; 3];
#[used]
#[link_section = trestle_abi::section_name!(globals)]
static mut GLOBALS_PAD: [u64; 5] = [0; 5];

extern "C" {
    #[link_name = concat!("__start_", trestle_abi::section_name!(meta))]
    static META_START: u8;
    #[link_name = concat!("__stop_", trestle_abi::section_name!(meta))]
    static META_STOP: u8;
    #[link_name = concat!("__start_", trestle_abi::section_name!(funcs))]
    static FUNCS_START: FuncEntry;
    #[link_name = concat!("__stop_", trestle_abi::section_name!(funcs))]
    static FUNCS_STOP: FuncEntry;
    #[link_name = concat!("__start_", trestle_abi::section_name!(globals))]
    static GLOBALS_START: GlobalEntry;
    #[link_name = concat!("__stop_", trestle_abi::section_name!(globals))]
    static GLOBALS_STOP: GlobalEntry;
}

/// What the runtime knows about the program it is linked into.
pub struct Program {
    /// FNV-1a of the metadata section.
    pub binary_id: u64,
    /// Every instrumented function (one entry per id).
    pub functions: Vec<FnMeta>,
    by_id: HashMap<u64, usize>,
    /// Function address and replay thunk by function index.
    pub addrs: Vec<(usize, usize)>,
    globals: Vec<GlobalEntry>,
    writable: HashMap<u64, ()>,
}

// SAFETY: the raw pointers in `GlobalEntry` point to the program's globals, which live
// for the whole process; they are only read under the runtime's lock.
unsafe impl Send for Program {}

fn section<T>(start: *const T, stop: *const T) -> &'static [T] {
    let n = (stop as usize - start as usize) / std::mem::size_of::<T>();
    // SAFETY: the linker guarantees [start, stop) spans the section's contents.
    unsafe { std::slice::from_raw_parts(start, n) }
}

impl Program {
    /// Read the sections of the running program.
    pub fn load() -> Result<Program, String> {
        // Only the addresses of the linker-defined symbols are taken.
        let (meta, funcs, globals) = (
            section(&raw const META_START, &raw const META_STOP),
            section(&raw const FUNCS_START, &raw const FUNCS_STOP),
            section(&raw const GLOBALS_START, &raw const GLOBALS_STOP),
        );
        let modules = decode_meta_section(meta).map_err(|e| e.to_string())?;
        let mut functions = Vec::new();
        let mut by_id = HashMap::new();
        let mut taken_elsewhere = std::collections::HashSet::new();
        for m in modules {
            taken_elsewhere.extend(m.address_taken);
            for f in m.functions {
                // Inline C++ functions appear in several modules: keep one.
                if let std::collections::hash_map::Entry::Vacant(e) = by_id.entry(f.id) {
                    e.insert(functions.len());
                    functions.push(f);
                }
            }
        }
        for f in functions.iter_mut() {
            f.address_taken |= taken_elsewhere.contains(&f.id);
        }
        let mut addrs = vec![(0usize, 0usize); functions.len()];
        for e in funcs.iter().filter(|e| e.id != 0) {
            if let Some(&i) = by_id.get(&e.id) {
                if addrs[i].0 == 0 {
                    addrs[i] = (e.addr as usize, e.thunk as usize);
                }
            }
        }
        let globals: Vec<GlobalEntry> = globals.iter().filter(|g| g.id != 0).copied().collect();
        let writable = globals
            .iter()
            .filter(|g| g.flags & GLOBAL_CONSTANT == 0)
            .map(|g| (g.id, ()))
            .collect();
        Ok(Program {
            binary_id: binary_id(meta),
            functions,
            by_id,
            addrs,
            globals,
            writable,
        })
    }

    /// The index of function `id`.
    pub fn index_of(&self, id: u64) -> Option<usize> {
        self.by_id.get(&id).copied()
    }

    /// A fresh extent map holding the program's globals and function addresses.
    pub fn extent_map(&self) -> ExtentMap {
        ExtentMap::new(
            self.globals.iter().map(|g| {
                (
                    g.addr as usize,
                    g.size as usize,
                    g.id,
                    g.flags & GLOBAL_CONSTANT != 0,
                )
            }),
            self.functions
                .iter()
                .zip(&self.addrs)
                .filter(|(_, a)| a.0 != 0)
                .map(|(f, a)| (a.0, f.id)),
        )
    }

    /// Address of function `id`.
    pub fn func_addr(&self, id: u64) -> Option<usize> {
        self.index_of(id)
            .map(|i| self.addrs[i].0)
            .filter(|&a| a != 0)
    }

    /// Writable globals reachable from function `idx` through the static call graph,
    /// sorted by id.
    pub fn reachable_globals(&self, idx: usize) -> Vec<u64> {
        let mut seen = vec![false; self.functions.len()];
        let mut work = vec![idx];
        let mut globals = BTreeSet::new();
        let mut indirect_added = false;
        seen[idx] = true;
        while let Some(i) = work.pop() {
            let f = &self.functions[i];
            globals.extend(f.globals.iter().filter(|g| self.writable.contains_key(g)));
            for c in &f.callees {
                if let Some(&j) = self.by_id.get(c) {
                    if !seen[j] {
                        seen[j] = true;
                        work.push(j);
                    }
                }
            }
            if f.indirect_calls && !indirect_added {
                indirect_added = true;
                for (j, g) in self.functions.iter().enumerate() {
                    if g.address_taken && !seen[j] {
                        seen[j] = true;
                        work.push(j);
                    }
                }
            }
        }
        globals.into_iter().collect()
    }
}

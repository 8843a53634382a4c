//! The C generator: the declarations, arrays and `main` statements that rebuild a
//! context in the test's process — extents as arrays (heap ones copied to `malloc`ed
//! blocks), globals restored through their symbols, `FILE`s reopened, pointer words
//! patched — and the call's arguments.

use super::program::Program;
use super::text::{
    c_bytes, c_string, c_type, comment, ident, int_literal, link_name, locale_category, stream_mode,
};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use trestle_abi::context::{Context, Extent, ExtentKind, OpenFile, Value};
use trestle_abi::meta::{FnMeta, ParamMeta, ValueKind};
use trestle_abi::unit::Unit;

/// A symbol of the subject that the test refers to, as listed for `build.sh`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SymbolUse {
    /// The name in the subject's objects (before `main` is renamed).
    pub(super) name: String,
    /// `function`, `data` (restored in place, size checked) or `const` (pointed at).
    pub(super) kind: &'static str,
    pub(super) size: Option<u64>,
    pub(super) local: bool,
    pub(super) module: String,
}

/// The generated file, built section by section.
pub(super) struct Gen<'a> {
    unit: &'a Unit,
    ctx: &'a Context,
    program: &'a Program,
    /// The declarations of subject symbols (after the helpers).
    pub(super) decls: String,
    /// The extents' arrays.
    pub(super) arrays: String,
    /// Statements of `main` before the call.
    pub(super) setup: String,
    /// Problems that make the test unbuildable, each an `#error`.
    pub(super) errors: Vec<String>,
    /// Symbols for `build.sh`, by name.
    pub(super) symbols: BTreeMap<String, SymbolUse>,
    /// C identifiers of declared functions, by id.
    fn_idents: HashMap<u64, String>,
    /// The function under test: identifier, metadata if known.
    pub(super) target: String,
}

impl<'a> Gen<'a> {
    pub(super) fn new(unit: &'a Unit, ctx: &'a Context, program: &'a Program) -> Gen<'a> {
        Gen {
            unit,
            ctx,
            program,
            decls: String::new(),
            arrays: String::new(),
            setup: String::new(),
            errors: Vec::new(),
            symbols: BTreeMap::new(),
            fn_idents: HashMap::new(),
            target: String::new(),
        }
    }

    fn use_symbol(&mut self, s: SymbolUse) {
        self.symbols.entry(s.name.clone()).or_insert(s);
    }

    /// The function under test and its prototype.
    pub(super) fn declare_target(&mut self) -> Option<FnMeta> {
        let id = self.ctx.fn_id;
        let meta = self
            .program
            .functions
            .get(&id)
            .map(|(m, module)| (m.clone(), module.clone()));
        let (name, params, ret) = match &meta {
            Some((m, module)) => {
                self.use_symbol(SymbolUse {
                    name: m.name.clone(),
                    kind: "function",
                    size: None,
                    local: m.local,
                    module: module.clone(),
                });
                (m.name.clone(), m.params.clone(), m.ret)
            }
            // Without metadata: the display name and a prototype guessed from the arguments.
            None => {
                let params = self
                    .ctx
                    .args
                    .iter()
                    .map(|a| ParamMeta {
                        name: None,
                        kind: if matches!(a, Value::Bits(_)) {
                            ValueKind::Int(64)
                        } else {
                            ValueKind::Ptr
                        },
                        byval_size: None,
                    })
                    .collect();
                (self.unit.function.clone(), params, ValueKind::Void)
            }
        };
        let ident = ident("f", &name, 0);
        let mut types = Vec::new();
        for (k, p) in params.iter().enumerate() {
            match (p.kind, p.byval_size) {
                (ValueKind::Ptr, Some(n)) if n > 16 => {
                    let _ = writeln!(
                        self.decls,
                        "/* Parameter {k} is a {n}-byte aggregate passed by value (in memory, as any aggregate over 16 bytes). */\nstruct byval_{k} {{ unsigned char bytes[{n}]; }};"
                    );
                    types.push(format!("struct byval_{k}"));
                }
                (ValueKind::Ptr, Some(n)) => {
                    self.errors.push(format!(
                        "parameter {k} of {name} is a {n}-byte aggregate passed by value in memory; a C struct of that size would travel in registers"
                    ));
                    types.push("void *".into());
                }
                (kind, _) => match c_type(kind) {
                    Some(t) => types.push(t.into()),
                    None => {
                        self.errors.push(format!(
                            "parameter {k} of {name} is passed in a way C cannot express here (vector, long double or aggregate)"
                        ));
                        types.push("uint64_t".into());
                    }
                },
            }
        }
        if let Some((m, _)) = &meta {
            if m.variadic {
                self.errors.push(format!("{name} is variadic: a C prototype cannot pass its recorded variable argument words"));
            } else if !m.replayable && m.ret != ValueKind::Unsupported && self.errors.is_empty() {
                // Neither a parameter nor the return value is the cause: an attribute is.
                self.errors.push(format!(
                    "{name} cannot be called from C as recorded (the pass gave it no replay thunk)"
                ));
            }
        }
        // A return value C cannot name travels in registers (anything larger is
        // returned through a pointer parameter): ignoring it is safe.
        let ret_type = c_type(ret).unwrap_or("void");
        let list = if types.is_empty() {
            "void".to_owned()
        } else {
            types.join(", ")
        };
        let _ = writeln!(
            self.decls,
            "/* The function under test. */\nextern {ret_type} {ident}({list}) __asm__({});",
            c_string(link_name(&name).as_bytes())
        );
        self.fn_idents.insert(id, ident.clone());
        self.target = ident;
        meta.map(|(m, _)| m)
    }

    /// The C identifier of function `id` (declared on first use), or `None` if the
    /// program does not say which function that is.
    fn function(&mut self, id: u64) -> Option<String> {
        if let Some(i) = self.fn_idents.get(&id) {
            return Some(i.clone());
        }
        let (m, module) = self.program.functions.get(&id)?;
        let ident = ident("f", &m.name, self.fn_idents.len());
        self.use_symbol(SymbolUse {
            name: m.name.clone(),
            kind: "function",
            size: None,
            local: m.local,
            module: module.clone(),
        });
        let _ = writeln!(
            self.decls,
            "extern void {ident}(void) __asm__({});",
            c_string(link_name(&m.name).as_bytes())
        );
        self.fn_idents.insert(id, ident.clone());
        Some(ident)
    }

    /// A C expression for a recorded pointer-sized value.
    fn value(&mut self, v: &Value) -> String {
        match *v {
            Value::Bits(0) => "NULL".into(),
            Value::Bits(b) => {
                format!("(void *)(uintptr_t)UINT64_C({b:#x}) /* an address trestle did not know */")
            }
            Value::Ptr { extent, offset } if (extent as usize) < self.ctx.graph.extents.len() => {
                format!("at({extent}, {offset})")
            }
            Value::Ptr { extent, .. } => {
                self.errors.push(format!(
                    "a pointer into e{extent}, which the context does not have"
                ));
                "NULL".into()
            }
            Value::Func { id, offset } => match self.function(id) {
                Some(f) if offset == 0 => format!("(void *)&{f}"),
                Some(f) => format!("(void *)((uintptr_t)&{f} + {offset})"),
                None => {
                    self.errors.push(format!(
                        "function {id:016x} is not in the program's metadata"
                    ));
                    "NULL".into()
                }
            },
        }
    }

    /// Give every extent an address (`mem[i]`) and its bytes.
    pub(super) fn extents(&mut self) {
        let ctx = self.ctx;
        if ctx.graph.partial {
            self.setup.push_str(
                "    /* The recording was cut off by its size bound: extents without bytes are zero-filled. */\n",
            );
        }
        let mut targets = HashSet::new();
        for v in ctx.args.iter().chain(
            ctx.graph
                .extents
                .iter()
                .flat_map(|e| e.pointers.iter().map(|p| &p.target)),
        ) {
            if let Value::Ptr { extent, .. } = v {
                targets.insert(*extent as usize);
            }
        }
        let mut unused = Vec::new();
        for (i, e) in ctx.graph.extents.iter().enumerate() {
            match e.kind {
                // The function can reach it, but through its own code only.
                ExtentKind::Global { id, constant: true } if !targets.contains(&i) => {
                    let name = self
                        .program
                        .globals
                        .get(&id)
                        .map_or_else(|| format!("{id:016x}"), |g| g.meta.name.clone());
                    unused.push(format!("e{i} ({name})"));
                }
                ExtentKind::Global { id, constant } => self.global(i, e, id, constant),
                ExtentKind::File => match ctx.graph.files.iter().find(|f| f.extent as usize == i) {
                    Some(f) => self.stream(i, f),
                    None => self.array(
                        i,
                        e,
                        "a C library FILE whose file is unknown: a byte copy, not a working stream",
                    ),
                },
                ExtentKind::Heap => self.array(i, e, "heap"),
                ExtentKind::LibcHeap => self.array(i, e, "heap the C library allocated for itself"),
                ExtentKind::Stack => self.array(i, e, "stack"),
                ExtentKind::Arg => self.array(i, e, "argv/envp"),
                // Never read or freed again by a correct program: any storage will do.
                ExtentKind::Freed => self.array(i, e, "freed heap, pointed at by a stale pointer"),
            }
        }
        if !unused.is_empty() {
            let _ = writeln!(
                self.setup,
                "    /* read-only, reachable, but nothing points at them: {} */",
                comment(&unused.join(", "))
            );
        }
    }

    fn array(&mut self, i: usize, e: &Extent, what: &str) {
        let len = e.len.max(1);
        let align = e.align.clamp(16, 4096);
        let cut = if e.bytes.is_none() {
            ", cut off by the recording's size bound: zero-filled"
        } else {
            ""
        };
        let _ = writeln!(self.arrays, "/* e{i}: {what}, {} byte(s){cut} */", e.len);
        let _ = writeln!(
            self.arrays,
            "static unsigned char e{i}[{len}] __attribute__((aligned({align}))) = {{"
        );
        c_bytes(&mut self.arrays, &without_pointers(e));
        self.arrays.push_str("};\n");
        if matches!(e.kind, ExtentKind::Heap | ExtentKind::LibcHeap) {
            let _ = writeln!(
                self.setup,
                "    mem[{i}] = heap_copy(e{i}, sizeof e{i}, {align});"
            );
        } else {
            let _ = writeln!(self.setup, "    mem[{i}] = e{i};");
        }
    }

    fn global(&mut self, i: usize, e: &Extent, id: u64, constant: bool) {
        let Some(g) = self.program.globals.get(&id).cloned() else {
            self.errors.push(format!(
                "e{i} is global {id:016x}, which the program's metadata does not name"
            ));
            let _ = writeln!(
                self.setup,
                "    mem[{i}] = NULL; /* unknown global {id:016x} */"
            );
            return;
        };
        let name = &g.meta.name;
        if let Some(bytes) = &g.copy {
            // A private constant (a string literal, say) has no symbol to point at.
            let _ = writeln!(
                self.arrays,
                "/* e{i}: read-only {name} ({} bytes), which has no symbol: a copy from the recording binary */\nstatic const unsigned char e{i}[{}] = {{",
                e.len,
                e.len.max(1)
            );
            c_bytes(&mut self.arrays, bytes);
            self.arrays.push_str("};\n");
            let _ = writeln!(self.setup, "    mem[{i}] = (unsigned char *)e{i};");
            return;
        }
        let ident = ident("g", name, i);
        let kind = if constant { "const" } else { "data" };
        self.use_symbol(SymbolUse {
            name: name.clone(),
            kind,
            size: Some(e.len),
            local: g.meta.local,
            module: g.module.clone(),
        });
        let qual = if constant { "const " } else { "" };
        let _ = writeln!(
            self.decls,
            "extern {qual}unsigned char {ident}[] __asm__({});",
            c_string(name.as_bytes())
        );
        if constant {
            let _ = writeln!(
                self.setup,
                "    mem[{i}] = (unsigned char *){ident}; /* read-only {name}: pointed at */"
            );
            return;
        }
        match &e.bytes {
            Some(bytes) => {
                let _ = writeln!(
                    self.arrays,
                    "/* e{i}: global {name}, {} byte(s), restored in place */",
                    e.len
                );
                let _ = writeln!(
                    self.arrays,
                    "static const unsigned char e{i}[{}] = {{",
                    e.len.max(1)
                );
                c_bytes(&mut self.arrays, &without_pointers(e));
                self.arrays.push_str("};\n");
                let n = bytes.len().min(e.len as usize);
                let _ = writeln!(
                    self.setup,
                    "    mem[{i}] = {ident};\n    memcpy({ident}, e{i}, {n});"
                );
            }
            None => {
                let _ = writeln!(
                    self.setup,
                    "    mem[{i}] = {ident}; /* global {name}: cut off by the recording's size bound, left as the program initialised it */"
                );
            }
        }
    }

    /// A `FILE` extent becomes a real stream on the same file (the recorded `FILE`
    /// bytes hold the C library's own pointers, useless in another process).
    fn stream(&mut self, i: usize, f: &OpenFile) {
        let mode = stream_mode(f.flags);
        match (&f.path, f.fd) {
            (Some(path), _) => {
                let _ = writeln!(
                    self.setup,
                    "    mem[{i}] = (unsigned char *)reopen_stream({}, \"{mode}\");",
                    reopen_args(f, path)
                );
            }
            (None, 0..=2) => {
                let name = ["stdin", "stdout", "stderr"][f.fd as usize];
                let read = f
                    .offset
                    .map(|o| format!(" (the recording's descriptor stood at byte {o})"))
                    .unwrap_or_default();
                let _ = writeln!(
                    self.setup,
                    "    mem[{i}] = (unsigned char *){name}; /* this process's own {name}{read} */"
                );
            }
            (None, fd) => {
                let _ = writeln!(
                    self.setup,
                    "    mem[{i}] = (unsigned char *)fdopen({fd}, \"{mode}\"); /* descriptor {fd} had no known path: it must be open */"
                );
            }
        }
    }

    /// Patch every pointer word, now that every extent has an address.
    pub(super) fn pointers(&mut self) {
        let ctx = self.ctx;
        for (i, e) in ctx.graph.extents.iter().enumerate() {
            let skip = matches!(e.kind, ExtentKind::Global { constant: true, .. })
                || (e.kind == ExtentKind::File
                    && ctx.graph.files.iter().any(|f| f.extent as usize == i))
                || self
                    .program
                    .globals
                    .get(&global_id(e))
                    .is_some_and(|g| g.copy.is_some());
            if skip {
                continue;
            }
            for p in &e.pointers {
                if p.offset + 8 > e.len || matches!(p.target, Value::Bits(_)) {
                    continue;
                }
                let v = self.value(&p.target);
                let _ = writeln!(self.setup, "    put({i}, {}, {v});", p.offset);
            }
        }
    }

    /// Descriptors the program had open with `open`, and its locale.
    pub(super) fn environment(&mut self) {
        let ctx = self.ctx;
        for (category, name) in &ctx.locale {
            let _ = writeln!(
                self.setup,
                "    setlocale({}, {});",
                locale_category(*category),
                c_string(name.as_bytes())
            );
        }
        for &(fd, mode, size) in &ctx.stdio_modes {
            let Some(stream) = ["stdin", "stdout", "stderr"].get(fd as usize).copied() else {
                let _ = writeln!(self.setup, "    /* the recording set the buffering of descriptor {fd}'s stream, not restored here */");
                continue;
            };
            let mode = match mode {
                libc::_IOLBF => "_IOLBF",
                libc::_IONBF => "_IONBF",
                _ => "_IOFBF",
            };
            let _ = writeln!(self.setup, "    setvbuf({stream}, NULL, {mode}, {size});");
        }
        for f in &ctx.fds {
            match &f.path {
                Some(path) => {
                    let _ = writeln!(self.setup, "    reopen({});", reopen_args(f, path));
                }
                None => match (f.standard, f.offset) {
                    (Some(_), Some(off)) => {
                        let _ = writeln!(
                            self.setup,
                            "    lseek({}, {off}, SEEK_SET); /* where the recording had read to */",
                            f.fd
                        );
                    }
                    _ => {
                        let _ = writeln!(
                            self.setup,
                            "    /* descriptor {} was open, with no known path */",
                            f.fd
                        );
                    }
                },
            }
        }
    }

    /// The call's argument list.
    pub(super) fn arguments(&mut self, meta: Option<&FnMeta>) -> Vec<String> {
        let ctx = self.ctx;
        let mut out = Vec::new();
        for (k, a) in ctx.args.iter().enumerate() {
            let p = meta.and_then(|m| m.params.get(k));
            let kind = p.map_or(
                if matches!(a, Value::Bits(_)) {
                    ValueKind::Int(64)
                } else {
                    ValueKind::Ptr
                },
                |p| p.kind,
            );
            let byval = p.and_then(|p| p.byval_size).filter(|&n| n > 16);
            let expr = match (kind, a, byval) {
                (ValueKind::Ptr, _, Some(_)) if matches!(a, Value::Ptr { .. }) => {
                    format!("*(struct byval_{k} *){}", self.value(a))
                }
                (ValueKind::Ptr, _, _) => self.value(a),
                (ValueKind::Int(w), Value::Bits(b), _) => int_literal(*b, w),
                (ValueKind::Float, Value::Bits(b), _) => {
                    format!("float_of(UINT32_C({:#x}))", *b as u32)
                }
                (ValueKind::Double, Value::Bits(b), _) => format!("double_of(UINT64_C({b:#x}))"),
                // A pointer in an integer slot (intptr_t, say).
                (ValueKind::Int(_), _, _) => format!("(uintptr_t){}", self.value(a)),
                _ => format!("0 /* {} */", a.describe()),
            };
            out.push(expr);
        }
        out
    }
}

/// An extent's bytes with its pointer words zeroed: `main` patches them, and the
/// recorded addresses mean nothing in another process.
fn without_pointers(e: &Extent) -> Vec<u8> {
    let mut bytes = e.bytes.clone().unwrap_or_default();
    for p in &e.pointers {
        if matches!(p.target, Value::Ptr { .. } | Value::Func { .. }) {
            let (from, to) = (p.offset as usize, (p.offset as usize + 8).min(bytes.len()));
            if from < to {
                bytes[from..to].fill(0);
            }
        }
    }
    bytes
}

fn global_id(e: &Extent) -> u64 {
    match e.kind {
        ExtentKind::Global { id, .. } => id,
        _ => 0,
    }
}

/// The arguments `reopen` and `reopen_stream` share: descriptor, path, open flags and
/// offset (-1: unknown).
fn reopen_args(f: &OpenFile, path: &str) -> String {
    format!(
        "{}, {}, {:#x}, {}",
        f.fd,
        c_string(path.as_bytes()),
        f.flags.max(0),
        f.offset.map_or(-1, |o| o as i64)
    )
}

#[cfg(test)]
mod tests {
    use crate::export::export_c;
    use crate::export::fixtures::{bare_unit, context};

    #[test]
    fn buffering_of_a_descriptor_past_stderr_is_not_put_on_stdout() {
        let mut ctx = context(vec![], vec![]);
        ctx.stdio_modes = vec![(1, libc::_IOLBF, 0), (5, libc::_IOFBF, 4096)];
        let c = export_c(&bare_unit(ctx), None, None).unwrap();
        assert!(c.contains("    setvbuf(stdout, NULL, _IOLBF, 0);\n"), "{c}");
        assert!(
            c.contains("descriptor 5's stream, not restored here"),
            "{c}"
        );
        assert_eq!(c.matches("setvbuf(").count(), 1, "{c}");
    }
}

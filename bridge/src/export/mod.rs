//! `trestle export`: a carved unit as a standalone C file that rebuilds the unit's
//! context and calls the function — a regression test a user can keep.
//!
//! The C file is compiled against the subject's own objects, not the trestle runtime,
//! and mirrors what the runtime's replay does (`runtime/src/replay.rs`):
//!
//! - heap, stack and argv extents become `static` arrays holding their bytes (heap
//!   extents are copied into `malloc`ed blocks at run time, so the function may free
//!   or grow them); globals are written in place through their symbol; read-only
//!   globals are only pointed at; pointer words are patched in `main` once every
//!   extent has its address;
//! - the recorded `setlocale` calls are repeated and open files reopened by path;
//! - the call goes through a prototype built from the function's parameter kinds.
//!
//! Static functions and globals have no symbol another object can link against, so
//! the companion `build.sh` copies the subject's objects and rewrites them with
//! `objcopy --globalize-symbol` (and renames the subject's `main`). The symbols a
//! test needs are listed in its header comment, which `build.sh` reads.
//!
//! With parameter values (a unit-fuzzer input), the values are first written into a
//! copy of the context on the host, as the unit harness writes them
//! (`runtime/src/fuzz.rs`): [`apply_values`].

use crate::binary::Binary;
use crate::carve::units::read_unit;
use anyhow::{bail, Context as _, Result};
use object::{Object, ObjectSection, ObjectSymbol};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use trestle_abi::context::{Context, Extent, ExtentKind, OpenFile, Outcome, Value};
use trestle_abi::fuzz::{decode_values, original_value, ParamValue};
use trestle_abi::meta::{decode_meta_section, FnMeta, GlobalMeta, ParamMeta, ValueKind, SECTION_GLOBALS, SECTION_META};
use trestle_abi::unit::{Param, ParamKind, ParamSite, Resize, Unit};

/// Options of `trestle export`.
#[derive(Debug)]
pub struct Options {
    /// A unit file (from `trestle carve`, or `unit.unit` in a fuzz directory).
    pub unit: PathBuf,
    /// A raw unit-fuzzer input (e.g. a file in a fuzz directory's `crashes/`): the
    /// parameters take its values.
    pub input: Option<PathBuf>,
    /// Where to write the C file (`build.sh` is written next to it).
    pub out: PathBuf,
    /// The program to read function and global metadata from (default: the one the
    /// unit was carved from).
    pub program: Option<PathBuf>,
}

/// What the subject's `main` is renamed to, so the test can have a `main` of its own.
pub const SUBJECT_MAIN: &str = "trestle_subject_main";

/// First line of every exported test; `build.sh` tells tests from subject sources by it.
const MARKER: &str = "/* Unit test exported by trestle";

/// Run `trestle export`.
pub fn run(args: &Options) -> Result<()> {
    if args.out.extension().is_none_or(|x| x != "c") {
        bail!("--out {}: the exported test must be a .c file", args.out.display());
    }
    let unit = read_unit(&args.unit)?;
    let program = args.program.clone().unwrap_or_else(|| PathBuf::from(&unit.provenance.program));
    let binary = Binary::load(&program).with_context(|| {
        format!("exporting {}: cannot read the program it was carved from (pass --program)", args.unit.display())
    })?;
    binary.check_unit(&unit, &args.unit)?;
    let values = match &args.input {
        None => None,
        Some(path) => {
            if unit.params.is_empty() {
                bail!("unit {} has no parameters: an input ({}) has nothing to set", args.unit.display(), path.display());
            }
            let bytes = std::fs::read(path).with_context(|| format!("cannot read input {}", path.display()))?;
            Some(decode_values(&unit.params, &bytes))
        }
    };
    let c = export_c(&unit, Some(&binary), values.as_deref())
        .with_context(|| format!("exporting {}", args.unit.display()))?;
    std::fs::write(&args.out, c).with_context(|| format!("cannot write {}", args.out.display()))?;
    let dir = args.out.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let script = dir.join("build.sh");
    let name = args.out.file_name().unwrap_or_default().to_string_lossy();
    std::fs::write(&script, build_script(&name)).with_context(|| format!("cannot write {}", script.display()))?;
    set_executable(&script)?;
    eprintln!(
        "wrote {} and {}; build it with: {} SUBJECT.c (or the subject's .o files)",
        args.out.display(),
        script.display(),
        script.display()
    );
    Ok(())
}

fn set_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("cannot make {} executable", path.display()))
}

/// The unit as C source; with `values` (one per `unit.params`), the parameters take
/// those values. `binary` supplies symbol names and the prototype; without it, the
/// function is called by its display name with a prototype guessed from the
/// arguments, and globals cannot be restored (the file says so with `#error`).
pub fn export_c(unit: &Unit, binary: Option<&Binary>, values: Option<&[ParamValue]>) -> Result<String> {
    let program = match binary {
        Some(b) => Program::read(b)?,
        None => Program::default(),
    };
    if binary.is_some() && !program.functions.contains_key(&unit.context.fn_id) {
        bail!("function {:016x} ({}) is not in the program's metadata", unit.context.fn_id, unit.function);
    }
    let ctx = match values {
        Some(v) => apply_values(&unit.context, &unit.params, v)?,
        None => unit.context.clone(),
    };
    Ok(render(unit, &ctx, &program, values))
}

// ---------------------------------------------------------------------------------
// Parameter values, written on the host

/// The context with `values` written at the parameters' sites, as the unit harness
/// writes them (`Session::apply` in `runtime/src/fuzz.rs`): integer arguments are cut
/// to their width; numbers held as text are written in decimal; a string of a new
/// length that fills its extent replaces that extent (every pointer to it follows,
/// since pointers name extents by index), a token of a new length moves to an extent
/// of its own with the pointers into it, any other string is written in place, cut
/// to the room there is; length companions follow the length written. Stream values
/// are not memory: the caller serves them as the program's input.
pub fn apply_values(ctx: &Context, params: &[Param], values: &[ParamValue]) -> Result<Context> {
    if values.len() != params.len() {
        bail!("{} value(s) for {} parameter(s)", values.len(), params.len());
    }
    let mut ctx = ctx.clone();
    for (i, (p, v)) in params.iter().zip(values).enumerate() {
        let text = match (p.kind, v) {
            (ParamKind::Decimal { .. }, ParamValue::Int(x)) => ParamValue::Bytes(x.to_string().into_bytes()),
            (_, v) => v.clone(),
        };
        match (p.site, p.kind, &text) {
            (ParamSite::Arg(k), ParamKind::Int { bits }, ParamValue::Int(x)) => set_arg(&mut ctx, k as usize, *x, bits),
            (
                ParamSite::Memory { extent, offset, len },
                ParamKind::Bytes { nul, resize } | ParamKind::Decimal { nul, resize },
                ParamValue::Bytes(b),
            ) => {
                extent_mut(&mut ctx, extent, i)?;
                let written = write_string(&mut ctx, extent, offset, len, nul, resize, b);
                for c in &p.companions {
                    let value = written as i64 + c.delta;
                    match c.site {
                        ParamSite::Arg(k) => set_arg(&mut ctx, k as usize, value, c.bits),
                        ParamSite::Memory { extent, offset, .. } => {
                            let e = extent_mut(&mut ctx, extent, i)?;
                            // The harness writes a 64-bit companion as 8 bytes, any other as 4.
                            if c.bits == 64 {
                                write_bytes(e, offset, &value.to_le_bytes());
                            } else {
                                write_bytes(e, offset, &(value as i32).to_le_bytes());
                            }
                        }
                        ParamSite::Stream { .. } => {}
                    }
                }
            }
            // The harness ignores any other pairing; so does the export.
            _ => {}
        }
    }
    Ok(ctx)
}

fn extent_mut(ctx: &mut Context, extent: u32, param: usize) -> Result<&mut Extent> {
    let Some(e) = ctx.graph.extents.get_mut(extent as usize) else {
        bail!("parameter p{param} lies in extent e{extent}, which the context does not have");
    };
    if matches!(e.kind, ExtentKind::Global { constant: true, .. }) {
        bail!("parameter p{param} lies in read-only global e{extent}: it cannot take another value");
    }
    Ok(e)
}

fn set_arg(ctx: &mut Context, k: usize, x: i64, bits: u16) {
    if let Some(a) = ctx.args.get_mut(k) {
        let mask = if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
        *a = Value::Bits((x as u64) & mask);
    }
}

/// Write a string value into extent `extent` of `ctx`; returns the length written.
fn write_string(ctx: &mut Context, extent: u32, offset: u64, len: u64, nul: bool, resize: Resize, b: &[u8]) -> usize {
    let term = nul as usize;
    let mut bytes = b.to_vec();
    if nul {
        bytes.push(0);
    }
    if b.len() as u64 != len {
        match resize {
            Resize::Extent => {
                let e = &mut ctx.graph.extents[extent as usize];
                e.len = bytes.len() as u64;
                e.bytes = Some(bytes);
                e.pointers.clear();
                return b.len();
            }
            Resize::Token => {
                let new = ctx.graph.extents.len() as u32;
                ctx.graph.extents.push(Extent { kind: ExtentKind::Heap, len: bytes.len() as u64, align: 16, bytes: Some(bytes), pointers: vec![] });
                let moved = |v: &mut Value| {
                    if let Value::Ptr { extent: e, offset: o } = *v {
                        if e == extent && (offset..=offset + len).contains(&o) {
                            *v = Value::Ptr { extent: new, offset: o - offset };
                        }
                    }
                };
                ctx.args.iter_mut().for_each(moved);
                ctx.graph.extents.iter_mut().flat_map(|x| x.pointers.iter_mut()).for_each(|p| moved(&mut p.target));
                return b.len();
            }
            Resize::Fixed => {}
        }
    }
    let e = &mut ctx.graph.extents[extent as usize];
    let room = (e.len.saturating_sub(offset) as usize).saturating_sub(term);
    let n = b.len().min(room);
    let mut data = b[..n].to_vec();
    if nul {
        data.push(0);
    }
    write_bytes(e, offset, &data);
    n
}

/// Overwrite bytes of `e` (materialising bytes a cut-off recording lacks as zeros);
/// a pointer word the write touches is a pointer no more. Nothing is written past the
/// extent's end.
fn write_bytes(e: &mut Extent, offset: u64, data: &[u8]) {
    let end = (offset + data.len() as u64).min(e.len);
    if offset >= end {
        return;
    }
    let bytes = e.bytes.get_or_insert_with(Vec::new);
    bytes.resize(e.len as usize, 0);
    bytes[offset as usize..end as usize].copy_from_slice(&data[..(end - offset) as usize]);
    e.pointers.retain(|p| p.offset + 8 <= offset || p.offset >= end);
}

// ---------------------------------------------------------------------------------
// What the program says about its symbols

/// A global, as the generated C refers to it.
#[derive(Debug, Clone)]
struct GlobalInfo {
    meta: GlobalMeta,
    module: String,
    /// For a read-only global without a symbol (a private constant such as a string
    /// literal): its bytes, copied from the recording binary.
    copy: Option<Vec<u8>>,
}

/// Function and global metadata of an instrumented program, with the module each
/// comes from (`Binary` keeps neither globals nor modules).
#[derive(Debug, Default)]
struct Program {
    functions: HashMap<u64, (FnMeta, String)>,
    globals: HashMap<u64, GlobalInfo>,
}

impl Program {
    fn read(binary: &Binary) -> Result<Program> {
        let path = &binary.path;
        let data = std::fs::read(path).with_context(|| format!("cannot read program {}", path.display()))?;
        let file = object::File::parse(&*data)
            .with_context(|| format!("{} is not an executable trestle can read", path.display()))?;
        let meta = file
            .section_by_name(SECTION_META)
            .and_then(|s| s.data().ok())
            .with_context(|| format!("{} has no readable {SECTION_META} section", path.display()))?;
        let modules = decode_meta_section(meta).with_context(|| format!("in {}", path.display()))?;
        let symbols: std::collections::HashSet<&str> = file.symbols().filter_map(|s| s.name().ok()).collect();
        let addrs = global_addresses(&file).with_context(|| format!("in {}", path.display()))?;
        let mut program = Program::default();
        for m in modules {
            for f in m.functions {
                program.functions.entry(f.id).or_insert((f, m.module.clone()));
            }
            for g in m.globals {
                // A private global has no symbol (not even a local one) in any object.
                let copy = if g.constant && !symbols.is_empty() && !symbols.contains(g.name.as_str()) {
                    addrs.get(&g.id).and_then(|&a| read_at(&file, a, g.size))
                } else {
                    None
                };
                program.globals.entry(g.id).or_insert(GlobalInfo { meta: g, module: m.module.clone(), copy });
            }
        }
        Ok(program)
    }
}

/// Global id → address, from the program's global table rows (none in a program
/// without instrumented globals).
fn global_addresses(file: &object::File<'_>) -> Result<HashMap<u64, u64>> {
    let Some(section) = file.section_by_name(SECTION_GLOBALS) else { return Ok(HashMap::new()) };
    let data = section.data().with_context(|| format!("cannot read the {SECTION_GLOBALS} section"))?;
    Ok(trestle_abi::meta::GlobalEntry::ids_and_addresses(data).filter(|&(id, _)| id != 0).collect())
}

/// `len` bytes of the file image at virtual address `addr`.
fn read_at(file: &object::File<'_>, addr: u64, len: u64) -> Option<Vec<u8>> {
    file.sections().find_map(|s| {
        let start = s.address();
        if addr < start || addr + len > start + s.size() {
            return None;
        }
        let data = s.data().ok()?;
        let from = (addr - start) as usize;
        data.get(from..from + len as usize).map(<[u8]>::to_vec)
    })
}

// ---------------------------------------------------------------------------------
// The C file

/// A symbol of the subject that the test refers to, as listed for `build.sh`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SymbolUse {
    /// The name in the subject's objects (before `main` is renamed).
    name: String,
    /// `function`, `data` (restored in place, size checked) or `const` (pointed at).
    kind: &'static str,
    size: Option<u64>,
    local: bool,
    module: String,
}

/// The name the test uses for a subject symbol.
fn link_name(name: &str) -> &str {
    if name == "main" {
        SUBJECT_MAIN
    } else {
        name
    }
}

/// A C identifier for a symbol: a prefix, the symbol's name made safe, and an index
/// that keeps two names apart when making them safe merges them.
fn ident(prefix: &str, name: &str, index: usize) -> String {
    let safe: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).take(40).collect();
    format!("{prefix}{index}_{safe}")
}

/// A C string literal.
fn c_string(bytes: &[u8]) -> String {
    let mut s = String::from("\"");
    for &b in bytes {
        match b {
            b'"' => s.push_str("\\\""),
            b'\\' => s.push_str("\\\\"),
            b'\n' => s.push_str("\\n"),
            b'\t' => s.push_str("\\t"),
            b'?' => s.push_str("\\?"),
            0x20..=0x7e => s.push(b as char),
            _ => {
                let _ = write!(s, "\\{b:03o}");
            }
        }
    }
    s.push('"');
    s
}

/// Text safe inside a C comment.
fn comment(text: &str) -> String {
    text.replace("*/", "* /").replace('\n', " ")
}

/// A parameter value for the header, cut to a readable length.
fn show_value(v: &ParamValue) -> String {
    match v {
        ParamValue::Int(x) => x.to_string(),
        ParamValue::Bytes(b) if b.len() > 48 => {
            format!("{}… ({} bytes)", comment(&c_string(&b[..40])), b.len())
        }
        ParamValue::Bytes(b) => comment(&c_string(b)),
    }
}

/// The C type of a value kind in a prototype (`None`: C cannot say it here).
fn c_type(kind: ValueKind) -> Option<&'static str> {
    Some(match kind {
        ValueKind::Void => "void",
        ValueKind::Int(w) if w <= 8 => "uint8_t",
        ValueKind::Int(w) if w <= 16 => "uint16_t",
        ValueKind::Int(w) if w <= 32 => "uint32_t",
        ValueKind::Int(_) => "uint64_t",
        ValueKind::Float => "float",
        ValueKind::Double => "double",
        ValueKind::Ptr => "void *",
        ValueKind::Aggregate(_) | ValueKind::Word | ValueKind::Unsupported => return None,
    })
}

fn locale_category(c: i32) -> String {
    let names = ["LC_CTYPE", "LC_NUMERIC", "LC_TIME", "LC_COLLATE", "LC_MONETARY", "LC_MESSAGES", "LC_ALL"];
    usize::try_from(c).ok().and_then(|i| names.get(i)).map_or_else(|| c.to_string(), |n| (*n).to_owned())
}

/// `fdopen` mode for `open(2)` flags (Linux numbers).
fn stream_mode(flags: i32) -> &'static str {
    const O_APPEND: i32 = 0o2000;
    if flags < 0 {
        return "r";
    }
    match (flags & 3, flags & O_APPEND != 0) {
        (0, _) => "r",
        (1, false) => "w",
        (1, true) => "a",
        (_, false) => "r+",
        (_, true) => "a+",
    }
}

/// Bytes as the body of a C array initializer: 16 a line, all-zero lines left out
/// (the next line then starts with a designator), printable runs shown in a comment.
fn c_bytes(out: &mut String, bytes: &[u8]) {
    let mut skipped = false;
    let mut any = false;
    for (k, chunk) in bytes.chunks(16).enumerate() {
        if chunk.iter().all(|&b| b == 0) {
            skipped = true;
            continue;
        }
        out.push_str("    ");
        if skipped {
            let _ = write!(out, "[{}] = ", k * 16);
        }
        skipped = false;
        any = true;
        for b in chunk {
            let _ = write!(out, "{b:#04x},");
        }
        let printable = chunk.iter().filter(|b| b.is_ascii_graphic() || **b == b' ').count();
        if printable * 4 >= chunk.len() * 3 {
            let text: String =
                chunk.iter().map(|&b| if (b.is_ascii_graphic() && b != b'*' && b != b'\\') || b == b' ' { b as char } else { '.' }).collect();
            let _ = write!(out, " /* {text} */");
        }
        out.push('\n');
    }
    if !any {
        out.push_str("    0\n");
    }
}

/// The generated file, built section by section.
struct Gen<'a> {
    unit: &'a Unit,
    ctx: &'a Context,
    program: &'a Program,
    /// The declarations of subject symbols (after the helpers).
    decls: String,
    /// The extents' arrays.
    arrays: String,
    /// Statements of `main` before the call.
    setup: String,
    /// Problems that make the test unbuildable, each an `#error`.
    errors: Vec<String>,
    /// Symbols for `build.sh`, by name.
    symbols: BTreeMap<String, SymbolUse>,
    /// C identifiers of declared functions, by id.
    fn_idents: HashMap<u64, String>,
    /// The function under test: identifier, metadata if known.
    target: String,
}

impl<'a> Gen<'a> {
    fn new(unit: &'a Unit, ctx: &'a Context, program: &'a Program) -> Gen<'a> {
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
    fn declare_target(&mut self) -> Option<FnMeta> {
        let id = self.ctx.fn_id;
        let meta = self.program.functions.get(&id).map(|(m, module)| (m.clone(), module.clone()));
        let (name, params, ret) = match &meta {
            Some((m, module)) => {
                self.use_symbol(SymbolUse { name: m.name.clone(), kind: "function", size: None, local: m.local, module: module.clone() });
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
                        kind: if matches!(a, Value::Bits(_)) { ValueKind::Int(64) } else { ValueKind::Ptr },
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
                self.errors.push(format!("{name} cannot be called from C as recorded (the pass gave it no replay thunk)"));
            }
        }
        // A return value C cannot name travels in registers (anything larger is
        // returned through a pointer parameter): ignoring it is safe.
        let ret_type = c_type(ret).unwrap_or("void");
        let list = if types.is_empty() { "void".to_owned() } else { types.join(", ") };
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
        self.use_symbol(SymbolUse { name: m.name.clone(), kind: "function", size: None, local: m.local, module: module.clone() });
        let _ = writeln!(self.decls, "extern void {ident}(void) __asm__({});", c_string(link_name(&m.name).as_bytes()));
        self.fn_idents.insert(id, ident.clone());
        Some(ident)
    }

    /// A C expression for a recorded pointer-sized value.
    fn value(&mut self, v: &Value) -> String {
        match *v {
            Value::Bits(0) => "NULL".into(),
            Value::Bits(b) => format!("(void *)(uintptr_t)UINT64_C({b:#x}) /* an address trestle did not know */"),
            Value::Ptr { extent, offset } if (extent as usize) < self.ctx.graph.extents.len() => {
                format!("at({extent}, {offset})")
            }
            Value::Ptr { extent, .. } => {
                self.errors.push(format!("a pointer into e{extent}, which the context does not have"));
                "NULL".into()
            }
            Value::Func { id, offset } => match self.function(id) {
                Some(f) if offset == 0 => format!("(void *)&{f}"),
                Some(f) => format!("(void *)((uintptr_t)&{f} + {offset})"),
                None => {
                    self.errors.push(format!("function {id:016x} is not in the program's metadata"));
                    "NULL".into()
                }
            },
        }
    }

    /// Give every extent an address (`mem[i]`) and its bytes.
    fn extents(&mut self) {
        let ctx = self.ctx;
        if ctx.graph.partial {
            self.setup.push_str(
                "    /* The recording was cut off by its size bound: extents without bytes are zero-filled. */\n",
            );
        }
        let mut targets = std::collections::HashSet::new();
        for v in ctx.args.iter().chain(ctx.graph.extents.iter().flat_map(|e| e.pointers.iter().map(|p| &p.target))) {
            if let Value::Ptr { extent, .. } = v {
                targets.insert(*extent as usize);
            }
        }
        let mut unused = Vec::new();
        for (i, e) in ctx.graph.extents.iter().enumerate() {
            match e.kind {
                // The function can reach it, but through its own code only.
                ExtentKind::Global { id, constant: true } if !targets.contains(&i) => {
                    let name = self.program.globals.get(&id).map_or_else(|| format!("{id:016x}"), |g| g.meta.name.clone());
                    unused.push(format!("e{i} ({name})"));
                }
                ExtentKind::Global { id, constant } => self.global(i, e, id, constant),
                ExtentKind::File => match ctx.graph.files.iter().find(|f| f.extent as usize == i) {
                    Some(f) => self.stream(i, f),
                    None => self.array(i, e, "a C library FILE whose file is unknown: a byte copy, not a working stream"),
                },
                ExtentKind::Heap => self.array(i, e, "heap"),
                ExtentKind::Stack => self.array(i, e, "stack"),
                ExtentKind::Arg => self.array(i, e, "argv/envp"),
                // Never read or freed again by a correct program: any storage will do.
                ExtentKind::Freed => self.array(i, e, "freed heap, pointed at by a stale pointer"),
            }
        }
        if !unused.is_empty() {
            let _ = writeln!(self.setup, "    /* read-only, reachable, but nothing points at them: {} */", comment(&unused.join(", ")));
        }
    }

    fn array(&mut self, i: usize, e: &Extent, what: &str) {
        let len = e.len.max(1);
        let align = e.align.clamp(16, 4096);
        let cut = if e.bytes.is_none() { ", cut off by the recording's size bound: zero-filled" } else { "" };
        let _ = writeln!(self.arrays, "/* e{i}: {what}, {} byte(s){cut} */", e.len);
        let _ = writeln!(self.arrays, "static unsigned char e{i}[{len}] __attribute__((aligned({align}))) = {{");
        c_bytes(&mut self.arrays, &without_pointers(e));
        self.arrays.push_str("};\n");
        if e.kind == ExtentKind::Heap {
            let _ = writeln!(self.setup, "    mem[{i}] = heap_copy(e{i}, sizeof e{i}, {align});");
        } else {
            let _ = writeln!(self.setup, "    mem[{i}] = e{i};");
        }
    }

    fn global(&mut self, i: usize, e: &Extent, id: u64, constant: bool) {
        let Some(g) = self.program.globals.get(&id).cloned() else {
            self.errors.push(format!("e{i} is global {id:016x}, which the program's metadata does not name"));
            let _ = writeln!(self.setup, "    mem[{i}] = NULL; /* unknown global {id:016x} */");
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
        self.use_symbol(SymbolUse { name: name.clone(), kind, size: Some(e.len), local: g.meta.local, module: g.module.clone() });
        let qual = if constant { "const " } else { "" };
        let _ = writeln!(self.decls, "extern {qual}unsigned char {ident}[] __asm__({});", c_string(name.as_bytes()));
        if constant {
            let _ = writeln!(self.setup, "    mem[{i}] = (unsigned char *){ident}; /* read-only {name}: pointed at */");
            return;
        }
        match &e.bytes {
            Some(bytes) => {
                let _ = writeln!(self.arrays, "/* e{i}: global {name}, {} byte(s), restored in place */", e.len);
                let _ = writeln!(self.arrays, "static const unsigned char e{i}[{}] = {{", e.len.max(1));
                c_bytes(&mut self.arrays, &without_pointers(e));
                self.arrays.push_str("};\n");
                let n = bytes.len().min(e.len as usize);
                let _ = writeln!(self.setup, "    mem[{i}] = {ident};\n    memcpy({ident}, e{i}, {n});");
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
                    "    mem[{i}] = (unsigned char *)reopen_stream({}, {}, {:#x}, {}, \"{mode}\");",
                    f.fd,
                    c_string(path.as_bytes()),
                    f.flags.max(0),
                    f.offset.map_or(-1, |o| o as i64)
                );
            }
            (None, 0..=2) => {
                let name = ["stdin", "stdout", "stderr"][f.fd as usize];
                let read = f.offset.map(|o| format!(" (the recording's descriptor stood at byte {o})")).unwrap_or_default();
                let _ = writeln!(self.setup, "    mem[{i}] = (unsigned char *){name}; /* this process's own {name}{read} */");
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
    fn pointers(&mut self) {
        let ctx = self.ctx;
        for (i, e) in ctx.graph.extents.iter().enumerate() {
            let skip = matches!(e.kind, ExtentKind::Global { constant: true, .. })
                || (e.kind == ExtentKind::File && ctx.graph.files.iter().any(|f| f.extent as usize == i))
                || self.program.globals.get(&global_id(e)).is_some_and(|g| g.copy.is_some());
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
    fn environment(&mut self) {
        let ctx = self.ctx;
        for (category, name) in &ctx.locale {
            let _ = writeln!(self.setup, "    setlocale({}, {});", locale_category(*category), c_string(name.as_bytes()));
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
                    let _ = writeln!(
                        self.setup,
                        "    reopen({}, {}, {:#x}, {});",
                        f.fd,
                        c_string(path.as_bytes()),
                        f.flags.max(0),
                        f.offset.map_or(-1, |o| o as i64)
                    );
                }
                None => {
                    let _ = writeln!(self.setup, "    /* descriptor {} was open, with no known path */", f.fd);
                }
            }
        }
    }

    /// The call's argument list.
    fn arguments(&mut self, meta: Option<&FnMeta>) -> Vec<String> {
        let ctx = self.ctx;
        let mut out = Vec::new();
        for (k, a) in ctx.args.iter().enumerate() {
            let p = meta.and_then(|m| m.params.get(k));
            let kind = p.map_or(if matches!(a, Value::Bits(_)) { ValueKind::Int(64) } else { ValueKind::Ptr }, |p| p.kind);
            let byval = p.and_then(|p| p.byval_size).filter(|&n| n > 16);
            let expr = match (kind, a, byval) {
                (ValueKind::Ptr, _, Some(_)) if matches!(a, Value::Ptr { .. }) => {
                    format!("*(struct byval_{k} *){}", self.value(a))
                }
                (ValueKind::Ptr, _, _) => self.value(a),
                (ValueKind::Int(w), Value::Bits(b), _) => int_literal(*b, w),
                (ValueKind::Float, Value::Bits(b), _) => format!("float_of(UINT32_C({:#x}))", *b as u32),
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

/// An integer argument of width `w`: its recorded bits as a signed decimal, cast to
/// the parameter's type.
fn int_literal(bits: u64, w: u16) -> String {
    let w = w.clamp(1, 64);
    let ty = c_type(ValueKind::Int(w)).unwrap_or("uint64_t");
    // Sign-extend from the width, for a readable literal.
    let shift = 64 - u32::from(w);
    let signed = ((bits << shift) as i64) >> shift;
    let lit = if signed == i64::MIN { "INT64_MIN".to_owned() } else { format!("INT64_C({signed})") };
    // The caller widens narrow integers; a negative one would be widened by sign
    // where the parameter is signed, and the metadata does not say which it is.
    let note = if w <= 16 && signed < 0 {
        " /* narrow and negative: passed zero-extended; the source may say signed */"
    } else {
        ""
    };
    format!("({ty}){lit}{note}")
}

/// The whole C file for `unit`, its context `ctx` (with the values applied).
fn render(unit: &Unit, ctx: &Context, program: &Program, values: Option<&[ParamValue]>) -> String {
    let mut g = Gen::new(unit, ctx, program);
    let meta = g.declare_target();
    let nparams = meta.as_ref().map_or(ctx.args.len(), |m| m.params.len());
    if ctx.args.len() != nparams {
        g.errors.push(format!("the unit has {} argument(s), the function {nparams}", ctx.args.len()));
    }
    g.environment();
    g.extents();
    g.pointers();
    let args = g.arguments(meta.as_ref());

    let as_recorded = as_recorded(unit, values);
    let ret = meta.as_ref().map_or(ValueKind::Void, |m| m.ret);

    let mut out = String::new();
    header(&mut out, unit, meta.as_ref(), values, &g.symbols);
    out.push_str(
        "#include <fcntl.h>\n#include <locale.h>\n#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include <unistd.h>\n\n",
    );
    for e in &g.errors {
        let _ = writeln!(out, "#error {}", c_string(e.as_bytes()));
    }
    if !g.errors.is_empty() {
        out.push('\n');
    }
    out.push_str(HELPERS);
    let _ = writeln!(out, "\n/* Where each extent of the context lives in this process. */\nstatic unsigned char *mem[{}];\n", ctx.graph.extents.len().max(1));
    out.push_str(AT_AND_PUT);
    out.push_str(&g.decls);
    out.push('\n');
    out.push_str(&g.arrays);
    out.push_str("\nint main(void)\n{\n");
    out.push_str(&g.setup);
    let call = format!("{}({})", g.target, args.join(", "));
    let name = meta.as_ref().map_or(unit.function.as_str(), |m| m.display_name());
    let expected = match &unit.expected {
        Some(Outcome::Returned(s)) => Some(s.ret),
        _ => None,
    };
    match (ret, expected) {
        (ValueKind::Int(_) | ValueKind::Float | ValueKind::Double, Some(Value::Bits(want))) if as_recorded => {
            let ty = c_type(ret).unwrap_or("uint64_t");
            let want_expr = match ret {
                ValueKind::Float => format!("float_of(UINT32_C({:#x}))", want as u32),
                ValueKind::Double => format!("double_of(UINT64_C({want:#x}))"),
                _ => format!("({ty})UINT64_C({want:#x})"),
            };
            let _ = writeln!(out, "\n    {ty} got = {call};");
            let _ = writeln!(out, "    {ty} want = {want_expr};");
            // Integers print signed at their width: -1 reads better than 4294967295.
            let (format, cast) = match ret {
                ValueKind::Float | ValueKind::Double => ("%.17g", "(double)".to_owned()),
                _ => ("%lld", format!("(long long)({})", ty.trim_start_matches('u'))),
            };
            let _ = writeln!(
                out,
                "    if (memcmp(&got, &want, sizeof got) != 0) {{\n        fprintf(stderr, \"{}: returned {format}, the recording {format}\\n\", {cast}got, {cast}want);\n        return 1;\n    }}",
                comment(name).replace(['"', '\\'], "'").replace('%', "%%")
            );
        }
        _ => {
            let _ = writeln!(out, "\n    {call};");
        }
    }
    out.push_str("    return 0;\n}\n");
    out
}

/// True if the parameters keep their recorded values: the recorded outcome then
/// still applies.
fn as_recorded(unit: &Unit, values: Option<&[ParamValue]>) -> bool {
    values.is_none_or(|v| v.len() == unit.params.len() && v.iter().zip(&unit.params).all(|(v, p)| *v == original_value(p)))
}

/// The header comment: what the test calls, where the unit came from, the values
/// used, and the symbols `build.sh` must make linkable.
fn header(
    out: &mut String,
    unit: &Unit,
    meta: Option<&FnMeta>,
    values: Option<&[ParamValue]>,
    symbols: &BTreeMap<String, SymbolUse>,
) {
    let originals: Vec<ParamValue> = unit.params.iter().map(original_value).collect();
    let as_recorded = as_recorded(unit, values);
    let name = meta.map_or(unit.function.as_str(), |m| m.display_name());
    let _ = writeln!(out, "{MARKER}: {} */", comment(name));
    out.push_str("/*\n");
    if let Some(m) = meta {
        let place = m.file.as_deref().map(|f| format!("{f}:{}", m.line)).unwrap_or_else(|| "unknown source".into());
        let linkage = if m.local { " (static: build.sh makes it linkable)" } else { "" };
        let _ = writeln!(out, " * function   {}{linkage}, defined at {}", comment(name), comment(&place));
    }
    let p = &unit.provenance;
    let _ = writeln!(out, " * program    {} (binary {:016x})", comment(&p.program), unit.binary_id);
    let _ = writeln!(
        out,
        " * recorded   in system test \"{}\", call #{} of the function (pid {}, trace {})",
        comment(&p.test),
        p.call_index,
        p.pid,
        comment(&p.trace)
    );
    let st = &unit.system_test;
    let _ = writeln!(out, " * test args  {}", comment(&format!("{:?}", st.args)));
    if let Some(stdin) = &st.stdin {
        let _ = writeln!(out, " * stdin      {} byte(s): run the test with the system test's stdin (./test < FILE)", stdin.len());
    }
    if !st.files.is_empty() {
        let names: Vec<&str> = st.files.keys().map(String::as_str).collect();
        let _ = writeln!(out, " * files      {} (relative paths are opened in the working directory)", comment(&names.join(", ")));
    }
    if unit.params.is_empty() {
        out.push_str(" * parameters none\n");
    }
    for (i, p) in unit.params.iter().enumerate() {
        let site = match (p.site, p.origins.first()) {
            (ParamSite::Arg(k), _) => format!("argument {k}"),
            (ParamSite::Memory { extent, offset, .. }, _) => format!("e{extent}+{offset}"),
            // The harness serves a stream's value; a standalone test reads its input
            // as given: the lifted system test holds the whole of it.
            (ParamSite::Stream { fd, .. }, Some(o)) => format!("rest of descriptor {fd} ({} from byte {}; give it as that input)", o.input, o.offset),
            (ParamSite::Stream { fd, .. }, None) => format!("rest of descriptor {fd}"),
        };
        let now = values.and_then(|v| v.get(i)).unwrap_or(&originals[i]);
        let recorded = if values.is_some() && now != &originals[i] {
            format!(" (recorded {})", show_value(&originals[i]))
        } else {
            " (as recorded)".into()
        };
        let lead = if i == 0 { " * parameters" } else { " *           " };
        let _ = writeln!(out, "{lead} p{i} {site} = {}{recorded}", show_value(now));
    }
    let outcome = unit.expected.as_ref().map_or_else(|| "unknown (the process ended inside the call)".into(), Outcome::summary);
    let check = if as_recorded { "" } else { "; not checked, the parameters differ" };
    let _ = writeln!(out, " * recording  {outcome}{check}");
    if unit.context.graph.partial {
        out.push_str(" * partial    the recording was cut off by its size bound: some memory is zero-filled\n");
    }
    out.push_str(" *\n * Build: ./build.sh SUBJECT.c (compiled at -O0), or the subject's object files.\n");
    if !symbols.is_empty() {
        out.push_str(" * Symbols of the subject this test uses (read by build.sh):\n");
    }
    for s in symbols.values() {
        let size = s.size.map_or_else(|| "-".into(), |n| n.to_string());
        let linkage = if s.local { "local" } else { "global" };
        let _ = writeln!(out, " *   symbol {} {} {size} {linkage} {}", s.name, s.kind, comment(&s.module));
    }
    out.push_str(" */\n");
}

/// Run-time helpers every exported test carries.
const HELPERS: &str = r#"/* A heap extent: a malloc'ed copy, so the function may free or realloc it. */
static unsigned char *heap_copy(const unsigned char *bytes, size_t len, size_t align)
{
    unsigned char *p = align > 16 ? aligned_alloc(align, (len + align - 1) / align * align) : malloc(len);
    if (!p) {
        perror("heap_copy");
        exit(3);
    }
    memcpy(p, bytes, len);
    return p;
}

/* Open PATH as descriptor FD at OFFSET, as the program had it open. */
static int reopen(int fd, const char *path, int flags, long long offset)
{
    int got = open(path, flags & ~O_TRUNC, 0644);
    if (got < 0) {
        fprintf(stderr, "warning: cannot reopen %s as descriptor %d\n", path, fd);
        return -1;
    }
    if (offset >= 0)
        lseek(got, (off_t)offset, SEEK_SET);
    if (fd >= 0 && got != fd) {
        dup2(got, fd);
        close(got);
        got = fd;
    }
    return got;
}

/* A stream on PATH, as the program had it open (on /dev/null if it is gone). */
static FILE *reopen_stream(int fd, const char *path, int flags, long long offset, const char *mode)
{
    int got = reopen(fd, path, flags, offset);
    FILE *f = got >= 0 ? fdopen(got, mode) : NULL;
    return f ? f : fopen("/dev/null", mode);
}

static float float_of(uint32_t bits) { float f; memcpy(&f, &bits, sizeof f); return f; }
static double double_of(uint64_t bits) { double d; memcpy(&d, &bits, sizeof d); return d; }
"#;

const AT_AND_PUT: &str = r#"/* The address OFFSET bytes into extent I. */
static void *at(int i, uint64_t offset) { return (void *)((uintptr_t)mem[i] + offset); }

/* Store pointer P in the word OFFSET bytes into extent I. */
static void put(int i, uint64_t offset, const void *p) { memcpy(mem[i] + offset, &p, sizeof p); }

"#;

// ---------------------------------------------------------------------------------
// build.sh

/// The build script written next to an exported test. `default_test` is the file name
/// of the test it was written with; it builds any exported test it is given.
pub fn build_script(default_test: &str) -> String {
    BUILD_SH.replace("@DEFAULT_TEST@", &default_test.replace('\'', "")).replace("@SUBJECT_MAIN@", SUBJECT_MAIN)
}

const BUILD_SH: &str = r#"#!/bin/sh
# Build unit tests exported by `trestle export` against the subject's own code.
#
#   ./build.sh [-o OUT] [TEST.c ...] SUBJECT.c|SUBJECT.o ... [-lLIB ...]
#
# Subject sources are compiled with $CC -g -O0 (plus $CFLAGS); object files are used
# as given. Static functions and globals the test needs are made global in a copy of
# each object (objcopy --globalize-symbol) and the subject's main is renamed, so the
# test can call into the subject. Without a TEST.c, builds '@DEFAULT_TEST@'.
# Each test becomes an executable named after it, next to it (or OUT).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
CC=${CC:-clang-19}
CXX=${CXX:-clang++-19}
CFLAGS=${CFLAGS:-}
LDFLAGS=${LDFLAGS:-}
pick() { for t in "$@"; do if command -v "$t" >/dev/null 2>&1; then echo "$t"; return; fi; done; echo "build.sh: none of $* is installed" >&2; exit 2; }
OBJCOPY=${OBJCOPY:-$(pick llvm-objcopy-19 objcopy llvm-objcopy)}
NM=${NM:-$(pick llvm-nm-19 nm llvm-nm)}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=""
tests=""
objects=""
linkargs=""
cxx=0
n=0
while [ $# -gt 0 ]; do
    case "$1" in
    -o) out=$2; shift 2; continue ;;
    *.c)
        if head -n 1 "$1" | grep -q '^/\* Unit test exported by trestle'; then
            tests="$tests $1"
        else
            n=$((n + 1)); $CC -g -O0 $CFLAGS -c "$1" -o "$work/subject$n.o"; objects="$objects $work/subject$n.o"
            echo "$work/subject$n.o $1" >>"$work/origins"
        fi ;;
    *.cc|*.cpp|*.cxx|*.C)
        n=$((n + 1)); cxx=1; $CXX -g -O0 $CFLAGS -c "$1" -o "$work/subject$n.o"; objects="$objects $work/subject$n.o"
        echo "$work/subject$n.o $1" >>"$work/origins" ;;
    *.o)
        n=$((n + 1)); cp "$1" "$work/subject$n.o"; objects="$objects $work/subject$n.o"
        echo "$work/subject$n.o $1" >>"$work/origins" ;;
    *) linkargs="$linkargs $1" ;;
    esac
    shift
done
[ -n "$tests" ] || tests="$here/@DEFAULT_TEST@"
if [ -z "$objects" ]; then
    echo "usage: $0 [-o OUT] [TEST.c ...] SUBJECT.c|SUBJECT.o ... [-lLIB ...]" >&2
    exit 2
fi
if [ -n "$out" ] && [ "$(echo $tests | wc -w)" -gt 1 ]; then
    echo "build.sh: -o names one executable, but there are several tests" >&2
    exit 2
fi
origin() { awk -v o="$1" '$1 == o { $1 = ""; sub(/^ /, ""); print; exit }' "$work/origins"; }
stem() { b=$(basename "$1"); echo "${b%.*}"; }

# The symbols the tests use: "symbol NAME KIND SIZE LINKAGE MODULE" lines of their headers.
for t in $tests; do
    sed -n 's/^ \*   symbol //p' "$t"
done | sort -u >"$work/symbols"

# Which object defines each static symbol: the only one that has it, else the one
# named after the symbol's source file.
: >"$work/globalize"
while read -r name kind size linkage module; do
    [ "$linkage" = local ] || continue
    defs=""
    for o in $objects; do
        if $NM --defined-only "$o" 2>/dev/null | awk -v s="$name" '$NF == s { f = 1 } END { exit !f }'; then
            defs="$defs $o"
        fi
    done
    count=$(echo $defs | wc -w)
    if [ "$count" -gt 1 ]; then
        pick_def=""
        for o in $defs; do
            if [ "$(stem "$(origin "$o")")" = "$(stem "$module")" ]; then pick_def=$o; fi
        done
        if [ -z "$pick_def" ]; then
            echo "build.sh: static symbol $name is defined in several objects ($(for o in $defs; do origin "$o"; done | tr '\n' ' ')); the test needs the one from $module" >&2
            exit 1
        fi
        defs=$pick_def
    fi
    for o in $defs; do echo "$o $name" >>"$work/globalize"; done
done <"$work/symbols"

for o in $objects; do
    args="--redefine-sym main=@SUBJECT_MAIN@"
    for s in $(awk -v o="$o" '$1 == o { print $2 }' "$work/globalize"); do
        args="$args --globalize-symbol=$s"
    done
    $OBJCOPY $args "$o"
done

# Every symbol the tests need must be there (static ones can be gone: inlined and
# dropped, or renamed, when the subject was optimised), with the size the unit recorded.
for o in $objects; do $NM -S --defined-only "$o"; done >"$work/defined" 2>/dev/null || true
status=0
while read -r name kind size linkage module; do
    want=$name
    [ "$want" = main ] && want=@SUBJECT_MAIN@
    line=$(awk -v s="$want" '$NF == s { print; exit }' "$work/defined")
    if [ -z "$line" ]; then
        if [ "$linkage" = local ]; then
            echo "build.sh: static $kind $name (from $module) is not in the subject's objects: optimisation inlined or removed it; compile the subject with -O0 (or at least -fno-inline)" >&2
            status=1
        fi
        continue
    fi
    if [ "$kind" = data ]; then
        got=$(echo "$line" | awk 'NF == 4 { print $2 }')
        if [ -n "$got" ] && [ "$(printf '%d' "0x$got")" != "$size" ]; then
            echo "build.sh: global $name has $(printf '%d' "0x$got") bytes in the subject's objects, $size in the recorded unit: the source changed since the recording" >&2
            status=1
        fi
    fi
done <"$work/symbols"
[ "$status" = 0 ] || exit "$status"

if [ "$cxx" = 1 ] || for o in $objects; do $NM -u "$o"; done 2>/dev/null | grep -q '__gxx_personality\|_ZSt\|__cxa_'; then
    linker=$CXX
else
    linker=$CC
fi
for t in $tests; do
    exe=${out:-$(dirname "$t")/$(stem "$t")}
    $CC -g -O0 $CFLAGS -c "$t" -o "$work/test.o"
    $linker -g $LDFLAGS "$work/test.o" $objects $linkargs -lm -o "$exe"
    echo "built $exe"
done
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use trestle_abi::context::{Graph, PtrSlot};
    use trestle_abi::unit::Companion;

    fn heap(bytes: &[u8]) -> Extent {
        Extent { kind: ExtentKind::Heap, len: bytes.len() as u64, align: 16, bytes: Some(bytes.to_vec()), pointers: vec![] }
    }

    fn string_param(extent: u32, offset: u64, len: u64, resizable: bool, original: &[u8]) -> Param {
        Param {
            site: ParamSite::Memory { extent, offset, len },
            kind: ParamKind::Bytes { nul: true, resize: if resizable { Resize::Extent } else { Resize::Fixed } },
            original: original.to_vec(),
            origins: vec![],
            companions: vec![],
        }
    }

    fn context(extents: Vec<Extent>, args: Vec<Value>) -> Context {
        Context { fn_id: 1, args, graph: Graph { extents, ..Graph::default() }, locale: vec![], stdio_modes: vec![], fds: vec![], streams: vec![] }
    }

    #[test]
    fn a_token_of_a_new_length_moves_out_with_the_pointers_into_it() {
        // A line cut in place: "set\0ab\x005\0", with an array of pointers to its words.
        let mut words = heap(&[0; 24]);
        for (i, o) in [0u64, 4, 7].into_iter().enumerate() {
            words.pointers.push(PtrSlot { offset: 8 * i as u64, target: Value::Ptr { extent: 1, offset: o } });
        }
        let ctx = context(vec![words, heap(b"set\0ab\x005\0")], vec![Value::Ptr { extent: 0, offset: 0 }]);
        let key = Param { kind: ParamKind::Bytes { nul: true, resize: Resize::Token }, ..string_param(1, 4, 2, false, b"ab") };
        let num = Param { kind: ParamKind::Decimal { nul: true, resize: Resize::Token }, ..string_param(1, 7, 1, false, b"5") };
        let got = apply_values(&ctx, &[key, num], &[ParamValue::Bytes(b"longkey".to_vec()), ParamValue::Int(90210)]).unwrap();
        // Each grown word has an extent of its own; the verb's pointer did not move.
        let p = &got.graph.extents[0].pointers;
        assert_eq!(p[0].target, Value::Ptr { extent: 1, offset: 0 });
        assert_eq!(p[1].target, Value::Ptr { extent: 2, offset: 0 });
        assert_eq!(p[2].target, Value::Ptr { extent: 3, offset: 0 });
        assert_eq!(got.graph.extents[2].bytes.as_deref(), Some(&b"longkey\0"[..]));
        assert_eq!(got.graph.extents[3].bytes.as_deref(), Some(&b"90210\0"[..]));
        // The rest of the line stays where it was.
        assert_eq!(got.graph.extents[1].bytes.as_deref(), Some(&b"set\0ab\x005\0"[..]));
    }

    #[test]
    fn integer_arguments_are_cut_to_their_width() {
        let ctx = context(vec![], vec![Value::Bits(7), Value::Bits(12)]);
        let params = vec![
            Param { site: ParamSite::Arg(0), kind: ParamKind::Int { bits: 32 }, original: b"7".to_vec(), origins: vec![], companions: vec![] },
            Param { site: ParamSite::Arg(1), kind: ParamKind::Int { bits: 64 }, original: b"12".to_vec(), origins: vec![], companions: vec![] },
        ];
        let got = apply_values(&ctx, &params, &[ParamValue::Int(-1), ParamValue::Int(42342531)]).unwrap();
        assert_eq!(got.args, vec![Value::Bits(0xffff_ffff), Value::Bits(42342531)]);
    }

    #[test]
    fn a_string_of_a_new_length_replaces_its_extent_and_pointers_follow() {
        // e0 holds a pointer to the string e1; argument 0 points at e1 too.
        let mut holder = heap(&[0; 8]);
        holder.pointers.push(PtrSlot { offset: 0, target: Value::Ptr { extent: 1, offset: 0 } });
        let ctx = context(vec![holder, heap(b"pw12\0")], vec![Value::Ptr { extent: 1, offset: 0 }, Value::Bits(4)]);
        let mut p = string_param(1, 0, 4, true, b"pw12");
        p.companions.push(Companion { site: ParamSite::Arg(1), bits: 32, delta: 0 });
        let long = vec![b'a'; 30];
        let got = apply_values(&ctx, &[p], &[ParamValue::Bytes(long.clone())]).unwrap();
        let e = &got.graph.extents[1];
        assert_eq!(e.len, 31);
        assert_eq!(&e.bytes.as_ref().unwrap()[..30], &long[..]);
        assert_eq!(e.bytes.as_ref().unwrap()[30], 0);
        // Pointers name the extent by index, so they now reach the new string.
        assert_eq!(got.args[0], Value::Ptr { extent: 1, offset: 0 });
        assert_eq!(got.graph.extents[0].pointers[0].target, Value::Ptr { extent: 1, offset: 0 });
        // The length companion follows.
        assert_eq!(got.args[1], Value::Bits(30));
    }

    #[test]
    fn a_fixed_string_is_written_in_place_and_cut_to_its_room() {
        // "echo\0hello\0" then a pointer word at 11..19.
        let mut buf = heap(b"echo\0hello\0xxxxxxxx");
        buf.pointers.push(PtrSlot { offset: 11, target: Value::Ptr { extent: 0, offset: 0 } });
        let ctx = context(vec![buf], vec![Value::Ptr { extent: 0, offset: 5 }]);
        let p = string_param(0, 5, 5, false, b"hello");
        let got = apply_values(&ctx, std::slice::from_ref(&p), &[ParamValue::Bytes(b"hi".to_vec())]).unwrap();
        assert_eq!(got.graph.extents[0].bytes.as_deref().unwrap(), b"echo\0hi\0lo\0xxxxxxxx");
        assert_eq!(got.graph.extents[0].pointers.len(), 1);
        // A value longer than the room is cut, NUL included; the pointer word it
        // overwrote is a pointer no more.
        let got = apply_values(&ctx, &[p], &[ParamValue::Bytes(vec![b'z'; 40])]).unwrap();
        let bytes = got.graph.extents[0].bytes.as_deref().unwrap();
        assert_eq!(bytes.len(), 19);
        assert_eq!(&bytes[5..18], &[b'z'; 13]);
        assert_eq!(bytes[18], 0);
        assert!(got.graph.extents[0].pointers.is_empty());
    }

    #[test]
    fn a_parameter_in_a_read_only_global_is_an_error() {
        let mut g = heap(b"abc\0");
        g.kind = ExtentKind::Global { id: 9, constant: true };
        let ctx = context(vec![g], vec![]);
        let e = apply_values(&ctx, &[string_param(0, 0, 3, true, b"abc")], &[ParamValue::Bytes(b"x".to_vec())]).unwrap_err();
        assert!(e.to_string().contains("read-only"), "{e}");
        let e = apply_values(&ctx, &[], &[ParamValue::Int(1)]).unwrap_err();
        assert!(e.to_string().contains("1 value(s) for 0 parameter(s)"), "{e}");
    }

    #[test]
    fn zero_lines_are_skipped_with_designators() {
        let mut bytes = vec![0u8; 64];
        bytes[33] = 0x41;
        let mut out = String::new();
        c_bytes(&mut out, &bytes);
        assert_eq!(out.trim(), "[32] = 0x00,0x41,0x00,0x00,0x00,0x00,0x00,0x00,0x00,0x00,0x00,0x00,0x00,0x00,0x00,0x00,");
        let mut out = String::new();
        c_bytes(&mut out, &[0; 5]);
        assert_eq!(out.trim(), "0");
    }

    #[test]
    fn integer_literals_read_as_signed_and_cast_to_the_width() {
        assert_eq!(int_literal(0xffff_fff4, 32), "(uint32_t)INT64_C(-12)");
        assert_eq!(int_literal(7, 32), "(uint32_t)INT64_C(7)");
        assert_eq!(int_literal(1 << 63, 64), "(uint64_t)INT64_MIN");
        assert!(int_literal(0xff, 8).contains("zero-extended"));
    }

    fn bare_unit(ctx: Context) -> Unit {
        Unit {
            magic: trestle_abi::unit::UNIT_MAGIC,
            version: trestle_abi::unit::UNIT_VERSION,
            binary_id: 1,
            function: "greet".into(),
            context: ctx,
            expected: None,
            provenance: trestle_abi::unit::Provenance {
                program: "/p".into(),
                test: "t".into(),
                trace: "x".into(),
                pid: 1,
                seq: 0,
                call_index: 0,
            },
            system_test: Default::default(),
            params: vec![],
        }
    }

    #[test]
    fn a_cut_off_recording_is_zero_filled_and_said_so() {
        let mut cut = heap(&[]);
        cut.len = 40;
        cut.bytes = None;
        let mut ctx = context(vec![cut], vec![Value::Ptr { extent: 0, offset: 8 }, Value::Ptr { extent: 7, offset: 0 }]);
        ctx.graph.partial = true;
        let c = export_c(&bare_unit(ctx), None, None).unwrap();
        assert!(c.contains("e0: heap, 40 byte(s), cut off by the recording's size bound: zero-filled"), "{c}");
        assert!(c.contains("static unsigned char e0[40] __attribute__((aligned(16))) = {\n    0\n};"), "{c}");
        assert!(c.contains(" * partial    the recording was cut off"), "{c}");
        assert!(c.contains("#error \"a pointer into e7, which the context does not have\""), "{c}");
    }

    #[test]
    fn without_a_program_globals_are_an_error_in_the_file() {
        let mut g = heap(&[1, 2, 3, 4]);
        g.kind = ExtentKind::Global { id: 5, constant: false };
        let ctx = context(vec![heap(b"hi\0"), g], vec![Value::Ptr { extent: 0, offset: 0 }, Value::Bits(3)]);
        let c = export_c(&bare_unit(ctx), None, None).unwrap();
        assert!(c.starts_with(MARKER));
        assert!(c.contains("extern void f0_greet(void *, uint64_t) __asm__(\"greet\");"), "{c}");
        assert!(c.contains("mem[0] = heap_copy(e0, sizeof e0, 16);"), "{c}");
        assert!(c.contains("#error \"e1 is global 0000000000000005"), "{c}");
        assert!(c.contains("f0_greet(at(0, 0), (uint64_t)INT64_C(3));"), "{c}");
    }
}

//! The `trestle-cc` / `trestle-c++` compiler wrappers: a drop-in `CC` / `CXX`, so that
//! `./configure CC=trestle-cc && make` builds a GNU package with carving instrumentation.
//!
//! The wrapper parses the clang command line, then either hands it to clang unchanged
//! (nothing to instrument) or splits each C/C++ compilation into three steps:
//!
//! ```text
//! 1. clang <user flags> -O2 -Xclang -disable-llvm-passes -emit-llvm -c foo.c -o T/0-foo.bc
//! 2. pass::instrument_bitcode_file(T/0-foo.bc, T/0-foo.inst.bc)
//! 3. clang <codegen flags> -O2 -c T/0-foo.inst.bc -o foo.o
//! ```
//!
//! Step 1 keeps the user's `-O` level (so the frontend emits the same IR attributes) but
//! runs no LLVM passes, so the pass sees every source function before inlining; it adds
//! `-gline-tables-only` when the user gave no debug level, so functions have source lines.
//! Dependency files (`-MD`, `-MMD`, ...) and gcov file names (`--coverage`) come from
//! step 1, named as if clang had compiled straight to the real object. Step 3 gets only
//! what matters for code generation (`-f*`, `-m*`, `-g*`, `-O*`, `--target`, `-Wa,`...),
//! not `-I`/`-D`. A link (no `-c`/`-S`) compiles each source to a temporary object that
//! way, then links with the user's link arguments plus `libtrestle_runtime.a` and the
//! native libraries the Rust staticlib needs.
//!
//! Passed through unchanged: `-E`, `-M`/`-MM`, `-fsyntax-only`, `-###`, `--version`,
//! `-print-*`, `-dump*`, no input files, a source on stdin (`-`), and compiles with no
//! C/C++ source (assembler `.s`/`.S`, `-x assembler-with-cpp`, headers, objects).
//!
//! Environment:
//!
//! | variable | effect |
//! |---|---|
//! | `TRESTLE_CLANG` / `TRESTLE_CLANGXX` | the underlying compiler (default `clang-19` / `clang++-19`) |
//! | `TRESTLE_RUNTIME_LIB` | path of `libtrestle_runtime.a` (default: next to the wrapper executable) |
//! | `TRESTLE_CC_PASSTHROUGH=1` | no instrumentation and no runtime: plain clang |
//! | `TRESTLE_KEEP_TEMPS=1` | keep the temporary bitcode and objects (their directory is printed) |
//! | `TRESTLE_CC_VERBOSE=1` | print every command run |
//!
//! Owns only command-line handling and process plumbing: the IR belongs to
//! [`crate::pass`], and the runtime is found as a file, never linked into this crate.
//! Classification and planning are pure functions; [`main_with_args`] runs the plan.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::pass;

/// Overrides the C compiler run by `trestle-cc`.
pub const ENV_CLANG: &str = "TRESTLE_CLANG";
/// Overrides the C++ compiler run by `trestle-c++`.
pub const ENV_CLANGXX: &str = "TRESTLE_CLANGXX";
/// Full path of the runtime staticlib to link.
pub const ENV_RUNTIME_LIB: &str = "TRESTLE_RUNTIME_LIB";
/// `1`: behave exactly like clang (no instrumentation, no runtime).
pub const ENV_PASSTHROUGH: &str = "TRESTLE_CC_PASSTHROUGH";
/// `1`: keep the temporary directory and print where it is.
pub const ENV_KEEP_TEMPS: &str = "TRESTLE_KEEP_TEMPS";
/// `1`: print each command before running it.
pub const ENV_VERBOSE: &str = "TRESTLE_CC_VERBOSE";

/// File name of the runtime staticlib (crate `trestle-runtime`).
pub const RUNTIME_LIB_NAME: &str = "libtrestle_runtime.a";

/// Native libraries the runtime staticlib needs, from
/// `cargo rustc -p trestle-runtime --lib --crate-type staticlib -- --print native-static-libs`.
/// Rerun that when the runtime gains a dependency on another system library.
pub const RUNTIME_NATIVE_LIBS: &[&str] = &[
    "-lgcc_s",
    "-lutil",
    "-lrt",
    "-lpthread",
    "-lm",
    "-ldl",
    "-lc",
];

/// Suppresses clang's "argument unused during compilation" in the steps the wrapper
/// adds: configure scripts treat any stderr output as a failed check.
const NO_UNUSED_WARNING: &str = "-Wno-unused-command-line-argument";

/// Which wrapper is running: decides the underlying compiler. (The C++ binary is
/// `trestle-cxx`, or `trestle-cc` run as `trestle-c++`: cargo allows no `+` in names.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    /// `trestle-cc`, over `clang-19`.
    C,
    /// `trestle-c++`, over `clang++-19`.
    Cxx,
}

impl Lang {
    /// The wrapper's name, used as the prefix of its messages.
    pub fn tool_name(self) -> &'static str {
        match self {
            Lang::C => "trestle-cc",
            Lang::Cxx => "trestle-c++",
        }
    }

    /// The wrapper a program name stands for: C++ for `trestle-c++`, `trestle-cxx`
    /// (any file name ending in `++` or containing `cxx`), else C.
    pub fn from_program_name(argv0: &OsStr) -> Lang {
        let name = Path::new(argv0)
            .file_name()
            .unwrap_or(argv0)
            .to_string_lossy();
        if name.ends_with("++") || name.contains("cxx") {
            Lang::Cxx
        } else {
            Lang::C
        }
    }

    /// The compiler to run: `$TRESTLE_CLANG` / `$TRESTLE_CLANGXX`, else clang 19.
    pub fn compiler(self) -> OsString {
        let (var, default) = match self {
            Lang::C => (ENV_CLANG, "clang-19"),
            Lang::Cxx => (ENV_CLANGXX, "clang++-19"),
        };
        std::env::var_os(var)
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| default.into())
    }
}

/// What can go wrong in the wrapper itself (clang's own failures are exit codes).
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The compiler could not be started.
    #[error("cannot run {compiler}: {error}")]
    Spawn {
        /// The program that failed to start.
        compiler: String,
        /// Why.
        error: std::io::Error,
    },
    /// The carving pass failed on one source.
    #[error("instrumenting {}: {chain}", source_file.display())]
    Instrument {
        /// The C/C++ source whose bitcode failed.
        source_file: PathBuf,
        /// The pass error with its causes, `: `-separated.
        chain: String,
    },
    /// The runtime staticlib is not where it should be.
    #[error("runtime library not found: {}", describe_lookup(.looked_at))]
    RuntimeNotFound {
        /// Every place tried, in order.
        looked_at: Vec<String>,
    },
    /// The directory for intermediate files could not be created.
    #[error("cannot create a temporary directory: {0}")]
    TempDir(std::io::Error),
}

fn describe_lookup(looked_at: &[String]) -> String {
    format!(
        "looked at {}; build it with `cargo build --release` in the trestle workspace \
         (or set {ENV_RUNTIME_LIB} to its path)",
        looked_at.join(", ")
    )
}

// ---------------------------------------------------------------------------------
// Classification (pure)
// ---------------------------------------------------------------------------------

/// Where an option goes among the steps the wrapper runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Every step: `-f*`, `-m*`, `-g*`, `--target`, `-pthread`, and unknown options.
    Common,
    /// The frontend only: preprocessor, language dialect, warnings, `-Xclang`.
    Frontend,
    /// The link only: `-l`, `-L`, `-Wl,`, `-Xlinker`, `-rdynamic`, ...
    Link,
    /// Code generation and link: assembler options (`-Wa,`, `-Xassembler`).
    Assembler,
    /// `-O*`: rewritten for the frontend, kept for code generation and link.
    Optimize,
    /// `-MD` / `-MMD`: a dependency file as a side effect of compiling.
    DepGen,
    /// `-MF file`.
    DepFile,
    /// `-MT target` / `-MQ target`.
    DepTarget,
    /// `-o file`.
    Output,
    /// `-x language`.
    Language,
    /// `-c`.
    CompileOnly,
    /// `-S`.
    AssembleOnly,
    /// An option for which clang does not compile, or which changes what it emits so
    /// much that the wrapper steps aside (`-E`, `-M`, `--version`, ...).
    Passthrough,
}

/// One command-line argument: an input file, or an option with its tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Arg {
    /// The tokens as given: one, or two for an option with a separate value.
    tokens: Vec<OsString>,
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// An input file, with the `-x` language in force for it (`None`: by extension).
    Input { lang: Option<String> },
    /// An option; `value` is its argument (joined or separate), if it takes one.
    Opt { role: Role, value: Option<OsString> },
}

impl Arg {
    fn input(&self) -> Option<(&OsStr, Option<&str>)> {
        match &self.kind {
            Kind::Input { lang } => Some((self.tokens[0].as_os_str(), lang.as_deref())),
            Kind::Opt { .. } => None,
        }
    }

    fn role(&self) -> Option<Role> {
        match &self.kind {
            Kind::Opt { role, .. } => Some(*role),
            Kind::Input { .. } => None,
        }
    }

    fn value(&self) -> Option<&OsStr> {
        match &self.kind {
            Kind::Opt { value, .. } => value.as_deref(),
            Kind::Input { .. } => None,
        }
    }

    fn flag(&self) -> std::borrow::Cow<'_, str> {
        self.tokens[0].to_string_lossy()
    }
}

/// Options whose value may be the next token, with their role. Checked first, by
/// exact match; a few also have a joined form, see [`JOINED`].
const SEPARATE: &[(&str, Role)] = &[
    ("-o", Role::Output),
    ("--output", Role::Output),
    ("-x", Role::Language),
    ("--language", Role::Language),
    ("-MF", Role::DepFile),
    ("-MT", Role::DepTarget),
    ("-MQ", Role::DepTarget),
    ("-MJ", Role::Frontend),
    ("-I", Role::Frontend),
    ("-D", Role::Frontend),
    ("-U", Role::Frontend),
    ("-A", Role::Frontend),
    ("-include", Role::Frontend),
    ("-include-pch", Role::Frontend),
    ("-imacros", Role::Frontend),
    ("-isystem", Role::Frontend),
    ("-isystem-after", Role::Frontend),
    ("-iquote", Role::Frontend),
    ("-idirafter", Role::Frontend),
    ("-iprefix", Role::Frontend),
    ("-iwithprefix", Role::Frontend),
    ("-iwithprefixbefore", Role::Frontend),
    ("-iwithsysroot", Role::Frontend),
    ("-imultilib", Role::Frontend),
    ("-iframework", Role::Frontend),
    ("-cxx-isystem", Role::Frontend),
    ("-Xclang", Role::Frontend),
    ("-Xpreprocessor", Role::Frontend),
    ("-Xanalyzer", Role::Frontend),
    ("-serialize-diagnostics", Role::Frontend),
    ("--param", Role::Frontend),
    ("-isysroot", Role::Common),
    ("--sysroot", Role::Common),
    ("-target", Role::Common),
    ("-arch", Role::Common),
    ("-mllvm", Role::Common),
    ("-B", Role::Common),
    ("-gcc-toolchain", Role::Common),
    ("--gcc-toolchain", Role::Common),
    ("-resource-dir", Role::Common),
    ("-working-directory", Role::Common),
    ("-L", Role::Link),
    ("-l", Role::Link),
    ("-Xlinker", Role::Link),
    ("-u", Role::Link),
    ("-z", Role::Link),
    ("-T", Role::Link),
    ("-Ttext", Role::Link),
    ("-Tdata", Role::Link),
    ("-Tbss", Role::Link),
    ("-e", Role::Link),
    ("-rpath", Role::Link),
    ("-Xassembler", Role::Assembler),
];

/// Options without a value, by exact match.
const FLAGS: &[(&str, Role)] = &[
    ("-c", Role::CompileOnly),
    ("-S", Role::AssembleOnly),
    ("-E", Role::Passthrough),
    ("-M", Role::Passthrough),
    ("-MM", Role::Passthrough),
    ("-fsyntax-only", Role::Passthrough),
    ("-fdriver-only", Role::Passthrough),
    ("-###", Role::Passthrough),
    ("--version", Role::Passthrough),
    ("-help", Role::Passthrough),
    ("--help", Role::Passthrough),
    ("--help-hidden", Role::Passthrough),
    ("--analyze", Role::Passthrough),
    ("-emit-ast", Role::Passthrough),
    ("--precompile", Role::Passthrough),
    ("-cc1", Role::Passthrough),
    ("-cc1as", Role::Passthrough),
    ("-MD", Role::DepGen),
    ("-MMD", Role::DepGen),
    ("-MP", Role::Frontend),
    ("-MG", Role::Frontend),
    ("-MV", Role::Frontend),
    ("-C", Role::Frontend),
    ("-CC", Role::Frontend),
    ("-P", Role::Frontend),
    ("-H", Role::Frontend),
    ("-ansi", Role::Frontend),
    ("-trigraphs", Role::Frontend),
    ("-undef", Role::Frontend),
    ("-nobuiltininc", Role::Frontend),
    ("-integrated-as", Role::Common),
    ("-no-integrated-as", Role::Common),
    ("-s", Role::Link),
    ("-r", Role::Link),
    ("-rdynamic", Role::Link),
    ("-nostdlib", Role::Link),
    ("-nostdlib++", Role::Link),
    ("-nostartfiles", Role::Link),
    ("-nodefaultlibs", Role::Link),
    ("-nolibc", Role::Link),
    ("-static-libgcc", Role::Link),
    ("-static-libstdc++", Role::Link),
    ("-shared-libgcc", Role::Link),
];

/// Options with a joined value (`-ofile`, `-xc`, `-MFfile`), whose value the wrapper
/// needs, by prefix.
const JOINED: &[(&str, Role)] = &[
    ("--output=", Role::Output),
    ("-o", Role::Output),
    ("--language=", Role::Language),
    ("-x", Role::Language),
    ("-MF", Role::DepFile),
    ("-MT", Role::DepTarget),
    ("-MQ", Role::DepTarget),
];

/// Everything else, by prefix, in order (longer prefixes first where they overlap).
const PREFIXES: &[(&str, Role)] = &[
    ("-print-", Role::Passthrough),
    ("--print-", Role::Passthrough),
    ("-dump", Role::Passthrough),
    ("-fuse-ld=", Role::Link),
    ("--ld-path=", Role::Link),
    ("-Wl,", Role::Link),
    ("-Wa,", Role::Assembler),
    ("-Wp,", Role::Frontend),
    ("-W", Role::Frontend),
    ("-std=", Role::Frontend),
    ("--std=", Role::Frontend),
    ("-pedantic", Role::Frontend),
    ("-nostdinc", Role::Frontend),
    ("-save-temps", Role::Frontend),
    ("--param=", Role::Frontend),
    ("-isysroot", Role::Common),
    ("-I", Role::Frontend),
    ("-D", Role::Frontend),
    ("-U", Role::Frontend),
    ("-A", Role::Frontend),
    ("-i", Role::Frontend),
    ("-d", Role::Frontend),
    ("-L", Role::Link),
    ("-l", Role::Link),
    ("-T", Role::Link),
    ("-O", Role::Optimize),
];

/// Why a command line cannot be parsed; clang gets it unchanged and reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MissingValue(String);

/// Split a command line (without the program name) into arguments with roles.
fn parse(args: &[OsString]) -> Result<Vec<Arg>, MissingValue> {
    let mut out = Vec::with_capacity(args.len());
    let mut lang: Option<String> = None;
    let mut rest = args.iter();
    while let Some(tok) = rest.next() {
        let s = tok.to_string_lossy();
        if !s.starts_with('-') || s == "-" {
            out.push(Arg {
                tokens: vec![tok.clone()],
                kind: Kind::Input { lang: lang.clone() },
            });
            continue;
        }
        let (tokens, role, value) = if let Some(&(_, role)) = SEPARATE.iter().find(|(f, _)| *f == s)
        {
            let value = rest.next().ok_or_else(|| MissingValue(s.to_string()))?;
            (vec![tok.clone(), value.clone()], role, Some(value.clone()))
        } else if let Some(&(_, role)) = FLAGS.iter().find(|(f, _)| *f == s) {
            (vec![tok.clone()], role, None)
        } else if let Some(&(prefix, role)) = JOINED.iter().find(|(p, _)| s.starts_with(p)) {
            let value = OsStr::from_bytes(&tok.as_bytes()[prefix.len()..]).to_os_string();
            (vec![tok.clone()], role, Some(value))
        } else if let Some(&(_, role)) = PREFIXES.iter().find(|(p, _)| s.starts_with(p)) {
            (vec![tok.clone()], role, None)
        } else {
            // -f*, -m*, -g*, --target=, -pthread, -shared, -static, -pie, -v, ...:
            // they may matter to code generation or link; an unused one is harmless.
            (vec![tok.clone()], Role::Common, None)
        };
        if role == Role::Language {
            let l = value.as_deref().map(|v| v.to_string_lossy().into_owned());
            lang = l.filter(|l| l != "none");
        }
        out.push(Arg {
            tokens,
            kind: Kind::Opt { role, value },
        });
    }
    Ok(out)
}

/// Does the `-x` language or file extension make this a C/C++ source to instrument?
fn is_instrumentable(path: &OsStr, lang: Option<&str>) -> bool {
    match lang {
        Some(l) => matches!(l, "c" | "c++" | "cpp-output" | "c++-cpp-output"),
        None => matches!(
            extension(path),
            Some("c" | "i" | "cc" | "cp" | "cxx" | "cpp" | "CPP" | "c++" | "C" | "ii")
        ),
    }
}

/// Would clang compile this input (rather than hand it to the linker)?
fn is_compile_input(path: &OsStr, lang: Option<&str>) -> bool {
    lang.is_some()
        || is_instrumentable(path, None)
        || matches!(
            extension(path),
            Some(
                "s" | "S"
                    | "sx"
                    | "m"
                    | "mm"
                    | "M"
                    | "mi"
                    | "mii"
                    | "h"
                    | "hh"
                    | "hpp"
                    | "hxx"
                    | "H"
                    | "cu"
                    | "cl"
                    | "ll"
                    | "bc"
            )
        )
}

fn extension(path: &OsStr) -> Option<&str> {
    Path::new(path).extension().and_then(OsStr::to_str)
}

/// Is this `-g` option one that sets the debug level (rather than a detail of it,
/// such as `-gsplit-dwarf` or `-gz`)?
fn sets_debug_level(flag: &str) -> bool {
    let Some(rest) = flag.strip_prefix("-g") else {
        return false;
    };
    rest.is_empty()
        || rest.starts_with(|c: char| c.is_ascii_digit())
        || [
            "gdb", "lldb", "sce", "dbx", "line-", "dwarf", "full", "used", "codeview", "stabs",
            "coff", "xcoff",
        ]
        .iter()
        .any(|p| rest.starts_with(p))
}

/// Why the wrapper hands a command line to clang unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PassReason {
    /// `TRESTLE_CC_PASSTHROUGH=1`.
    Env,
    /// An option such as `-E`, `-M`, `--version`, `-print-*`.
    Flag(String),
    /// No input files (`-v`, `--help`, or an error clang will report).
    NoInputs,
    /// A source read from stdin (`-`).
    Stdin,
    /// Compiling without linking, and no input is C/C++ (assembler, headers, ...).
    NothingToInstrument,
    /// `-o` with several outputs: clang reports the error.
    OutputConflict,
    /// An option lacks its value: clang reports the error.
    MissingValue(String),
}

/// What the invocation does, once classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `-c`: objects.
    Compile,
    /// `-S`: assembly (or `.ll` with `-emit-llvm`).
    Assemble,
    /// No `-c`/`-S`: compile sources to temporaries, then link.
    Link,
}

/// One C/C++ source compiled through the pass.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Unit {
    source: PathBuf,
    /// Step 1's output.
    bitcode: PathBuf,
    /// Step 2's output.
    instrumented: PathBuf,
    /// Step 3's output: the user's object (or assembly), or a temporary one for a link.
    object: PathBuf,
    /// Step 1's arguments.
    frontend: Vec<OsString>,
    /// Step 3's arguments.
    backend: Vec<OsString>,
    /// With edge coverage: step 3 writes optimised bitcode here instead of the
    /// object, the wrapper inlines its edge counters, and step 4 (these arguments)
    /// generates the object from it.
    codegen: Option<(PathBuf, Vec<OsString>)>,
}

/// Everything the wrapper runs for one instrumented invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Build {
    units: Vec<Unit>,
    /// When compiling without linking: clang's arguments for the inputs that are not
    /// instrumented (assembler files next to C sources), if any.
    rest: Option<Vec<OsString>>,
    /// When linking: clang's arguments, without the runtime.
    link: Option<Vec<OsString>>,
    /// `-static` / `-static-pie`: no shared `libgcc_s`.
    static_link: bool,
    /// `-r`: a relocatable partial link gets no runtime.
    relocatable: bool,
}

/// The outline of an invocation that the wrapper instruments.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Shape<'a> {
    mode: Mode,
    /// The last `-o`.
    output: Option<&'a OsStr>,
    /// The C/C++ sources, with their `-x` language.
    sources: Vec<(&'a OsStr, Option<&'a str>)>,
    /// How many inputs there are in all.
    inputs: usize,
}

/// Classify a parsed command line: what it does, or why clang gets it unchanged.
fn shape(args: &[Arg]) -> Result<Shape<'_>, PassReason> {
    if let Some(a) = args.iter().find(|a| a.role() == Some(Role::Passthrough)) {
        return Err(PassReason::Flag(a.flag().into_owned()));
    }
    let inputs: Vec<(&OsStr, Option<&str>)> = args.iter().filter_map(Arg::input).collect();
    if inputs.is_empty() {
        return Err(PassReason::NoInputs);
    }
    if inputs.iter().any(|(p, _)| *p == "-") {
        return Err(PassReason::Stdin);
    }
    let has = |r: Role| args.iter().any(|a| a.role() == Some(r));
    let mode = if has(Role::AssembleOnly) {
        Mode::Assemble
    } else if has(Role::CompileOnly) {
        Mode::Compile
    } else {
        Mode::Link
    };
    let output = args
        .iter()
        .rev()
        .filter(|a| a.role() == Some(Role::Output))
        .find_map(Arg::value);
    let sources: Vec<_> = inputs
        .iter()
        .copied()
        .filter(|(p, l)| is_instrumentable(p, *l))
        .collect();
    if mode != Mode::Link {
        if sources.is_empty() {
            return Err(PassReason::NothingToInstrument);
        }
        let compiled = inputs
            .iter()
            .filter(|(p, l)| is_compile_input(p, *l))
            .count();
        if output.is_some() && compiled > 1 {
            return Err(PassReason::OutputConflict);
        }
    }
    Ok(Shape {
        mode,
        output,
        sources,
        inputs: inputs.len(),
    })
}

/// Plan the steps for an invocation to instrument. `tmp` is the directory for
/// intermediate files (only named here, not created); `cwd` the working directory.
fn plan(args: &[Arg], shape: &Shape<'_>, tmp: &Path, cwd: &Path) -> Build {
    let Shape {
        mode,
        output,
        ref sources,
        inputs,
    } = *shape;
    let emit_llvm = args.iter().any(|a| a.flag() == "-emit-llvm");
    let out_ext = match (mode, emit_llvm) {
        (Mode::Assemble, false) => "s",
        (Mode::Assemble, true) => "ll",
        (_, true) => "bc",
        (_, false) => "o",
    };
    let units = sources
        .iter()
        .enumerate()
        .map(|(i, &(src, lang))| {
            let stem = temp_stem(src);
            let tmp_file = |ext: &str| tmp.join(format!("{i}-{stem}.{ext}"));
            let src_stem = Path::new(src).file_stem().unwrap_or(src);
            let default_object = PathBuf::from(src_stem).with_extension(out_ext);
            let object = match (mode, output) {
                (Mode::Link, _) => tmp_file("o"),
                (_, Some(o)) => PathBuf::from(o),
                (_, None) => default_object.clone(),
            };
            // The object as the user's make rules know it: a link's temporaries are
            // never a target, so it names the object a separate compile would make.
            let dep_target = if mode == Mode::Link {
                default_object
            } else {
                object.clone()
            };
            let dep_file = match output {
                Some(o) => PathBuf::from(o).with_extension("d"),
                None => PathBuf::from(src_stem).with_extension("d"),
            };
            // gcov files as clang names them: after the object, or `<output>-<stem>`
            // for a compile and link.
            let coverage_base = match mode {
                Mode::Link => {
                    let out = output.unwrap_or(OsStr::new("a.out"));
                    let mut base = cwd.join(out).with_extension("").into_os_string();
                    base.push("-");
                    base.push(src_stem);
                    PathBuf::from(base)
                }
                _ => cwd.join(&object).with_extension(""),
            };
            let names = FrontendNames {
                bitcode: tmp_file("bc"),
                dep_file,
                dep_target,
                coverage_base,
            };
            let frontend = frontend_args(args, src, lang, &names);
            let instrumented = tmp_file("inst.bc");
            let step = if mode == Mode::Assemble { "-S" } else { "-c" };
            let covered = tmp_file("cov.bc");
            let (backend, codegen) = backend_args(args, step, &instrumented, &covered, &object);
            Unit {
                source: PathBuf::from(src),
                bitcode: names.bitcode,
                instrumented,
                object,
                frontend,
                backend,
                codegen: codegen.map(|c| (covered, c)),
            }
        })
        .collect::<Vec<_>>();

    let rest = (mode != Mode::Link && sources.len() < inputs).then(|| {
        args.iter()
            .filter(|a| !a.input().is_some_and(|(p, l)| is_instrumentable(p, l)))
            .flat_map(|a| a.tokens.iter().cloned())
            .collect()
    });
    let link = (mode == Mode::Link).then(|| link_args(args, &units));
    let static_link = args
        .iter()
        .any(|a| matches!(&*a.flag(), "-static" | "-static-pie"));
    let relocatable = args.iter().any(|a| a.flag() == "-r");
    Build {
        units,
        rest,
        link,
        static_link,
        relocatable,
    }
}

/// A file-name-safe stem for a source's temporaries.
fn temp_stem(src: &OsStr) -> String {
    let stem = Path::new(src).file_stem().unwrap_or(src).to_string_lossy();
    stem.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The last `-O` option, if any.
fn opt_level(args: &[Arg]) -> Option<&OsString> {
    args.iter()
        .rev()
        .find(|a| a.role() == Some(Role::Optimize))
        .map(|a| &a.tokens[0])
}

/// The files step 1 writes, or names in what it writes.
struct FrontendNames {
    /// The bitcode output.
    bitcode: PathBuf,
    /// The dependency file for a plain `-MD`.
    dep_file: PathBuf,
    /// The dependency target when none is given.
    dep_target: PathBuf,
    /// `.gcno` / `.gcda` paths without extension, for `--coverage`.
    coverage_base: PathBuf,
}

/// Step 1: unoptimised bitcode with the user's frontend options.
fn frontend_args(
    args: &[Arg],
    src: &OsStr,
    lang: Option<&str>,
    names: &FrontendNames,
) -> Vec<OsString> {
    let mut out: Vec<OsString> = args
        .iter()
        .filter(|a| {
            matches!(
                a.role(),
                Some(
                    Role::Common | Role::Frontend | Role::DepGen | Role::DepFile | Role::DepTarget
                )
            )
        })
        .flat_map(|a| a.tokens.iter().cloned())
        .collect();
    if let Some(o) = opt_level(args) {
        out.push(o.clone());
        if o != "-O0" {
            // Keep the level's IR attributes, but leave inlining and the rest of the
            // pipeline to step 3, after instrumentation.
            out.extend(["-Xclang", "-disable-llvm-passes"].map(OsString::from));
        }
    }
    let debug_level = args
        .iter()
        .any(|a| a.role() == Some(Role::Common) && sets_debug_level(&a.flag()));
    if !debug_level {
        out.push("-gline-tables-only".into());
    }
    let wp_has = |needles: &[&str]| {
        args.iter().any(|a| {
            a.flag()
                .strip_prefix("-Wp,")
                .is_some_and(|rest| rest.split(',').any(|p| needles.contains(&p)))
        })
    };
    let has = |r: Role| args.iter().any(|a| a.role() == Some(r));
    let wp_dep_gen = wp_has(&["-MD", "-MMD"]);
    if has(Role::DepGen) || wp_dep_gen {
        // `-Wp,-MD,file` names its file; a plain -MD would write next to step 1's
        // temporary output, naming it as the target.
        if !has(Role::DepFile) && !wp_dep_gen {
            out.push("-MF".into());
            out.push(names.dep_file.clone().into());
        }
        if !has(Role::DepTarget) && !wp_has(&["-MT", "-MQ"]) {
            out.push("-MT".into());
            out.push(names.dep_target.clone().into());
        }
    }
    let coverage = args.iter().any(|a| {
        matches!(
            &*a.flag(),
            "--coverage" | "-coverage" | "-ftest-coverage" | "-fprofile-arcs"
        )
    });
    if coverage {
        // The frontend records the gcov file names in the module (`llvm.gcov`); left
        // alone they would name step 1's temporary output.
        for (option, ext) in [
            ("-coverage-notes-file=", "gcno"),
            ("-coverage-data-file=", "gcda"),
        ] {
            let mut arg = OsString::from(option);
            arg.push(names.coverage_base.with_extension(ext));
            out.extend(["-Xclang".into(), arg]);
        }
    }
    out.extend([NO_UNUSED_WARNING, "-emit-llvm", "-c", "-o"].map(OsString::from));
    out.push(names.bitcode.clone().into());
    if let Some(l) = lang {
        out.push("-x".into());
        out.push(l.into());
    }
    out.push(src.to_os_string());
    out
}

/// SanitizerCoverage options added to every instrumented object.
pub const SANCOV_FLAGS: &str = "-fsanitize-coverage=trace-pc-guard,trace-cmp";

/// Code generation keeps every alloca in a stack slot of its own (see [`backend_args`]).
const NO_STACK_COLORING: [&str; 2] = ["-mllvm", "-no-stack-coloring"];

/// Step 3: the instrumented bitcode to the user's object, with code generation options.
/// With edge coverage (and comparison tracing for the fuzzers; the runtime provides the
/// callbacks, which cost little when no fuzzer is attached), step 3 optimises into
/// bitcode at `covered` and the second list is step 4, code generation from it without
/// optimising again (after the wrapper inlined the edge counters, [`crate::edges`]).
fn backend_args(args: &[Arg], step: &str, instrumented: &Path, covered: &Path, object: &Path) -> (Vec<OsString>, Option<Vec<OsString>>) {
    let mut common: Vec<OsString> = args
        .iter()
        .filter(|a| matches!(a.role(), Some(Role::Common | Role::Assembler)))
        .flat_map(|a| a.tokens.iter().cloned())
        .collect();
    if let Some(o) = opt_level(args) {
        common.push(o.clone());
    }
    // Stack coloring lets allocas whose lifetimes do not overlap share a slot. The
    // pass registers each escaping alloca once, at function entry, so a shared slot
    // would be known by whichever registration came last (an 8-byte local standing
    // for a 32-byte std::string temporary, say) and carved contexts would cut the
    // other object short.
    common.extend(NO_STACK_COLORING.map(OsString::from));
    let to = |step: &str, input: &Path, output: &Path| -> Vec<OsString> {
        vec![NO_UNUSED_WARNING.into(), step.into(), input.into(), "-o".into(), output.into()]
    };
    if std::env::var_os("TRESTLE_NO_SANCOV").is_some() {
        return ([common, to(step, instrumented, object)].concat(), None);
    }
    let mut backend = common.clone();
    backend.push(SANCOV_FLAGS.into());
    backend.push("-emit-llvm".into());
    backend.extend(to("-c", instrumented, covered));
    let mut codegen = common;
    codegen.extend(["-Xclang", "-disable-llvm-passes"].map(OsString::from));
    codegen.extend(to(step, covered, object));
    (backend, Some(codegen))
}

/// The link: the user's arguments in order, each instrumented source replaced by its
/// object, frontend-only options dropped. The runtime is appended by the caller.
fn link_args(args: &[Arg], units: &[Unit]) -> Vec<OsString> {
    let mut objects = units.iter().map(|u| &u.object);
    let mut out = Vec::new();
    for a in args {
        match (&a.kind, a.role()) {
            (Kind::Input { lang }, _) => {
                let path = &a.tokens[0];
                if is_instrumentable(path, lang.as_deref()) {
                    if let Some(obj) = objects.next() {
                        out.push(obj.into());
                    }
                } else if let Some(l) = lang {
                    // `-x` options are dropped (they would apply to the temporary
                    // objects), so other inputs under one get theirs back.
                    out.extend([
                        "-x".into(),
                        l.into(),
                        path.clone(),
                        "-x".into(),
                        "none".into(),
                    ]);
                } else {
                    out.push(path.clone());
                }
            }
            (
                _,
                Some(Role::Common | Role::Link | Role::Assembler | Role::Optimize | Role::Output),
            ) => {
                out.extend(a.tokens.iter().cloned());
            }
            _ => {}
        }
    }
    if !units.is_empty() {
        out.push(NO_UNUSED_WARNING.into());
    }
    out
}

/// The runtime and its native libraries, appended after the user's link arguments.
///
/// Only what the program then uses is linked (`--as-needed`, for these libraries
/// alone): every shared library a program loads is mapped again in each child a
/// forkserver forks, and its finalisers run at each exit. A C program gets the
/// unwinder the runtime needs from static `libgcc_eh` (its symbols are hidden, so it
/// stays the runtime's own) instead of loading `libgcc_s`; a C++ program keeps
/// `libgcc_s`, which `libstdc++` loads anyway and whose unwinder its exceptions use.
fn runtime_link_args(runtime: &Path, static_link: bool, lang: Lang) -> Vec<OsString> {
    let mut out = vec![runtime.as_os_str().to_os_string()];
    if static_link {
        // libgcc_s exists only as a shared library; its static counterpart is gcc_eh.
        out.extend(RUNTIME_NATIVE_LIBS.iter().map(|l| if *l == "-lgcc_s" { "-lgcc_eh".into() } else { OsString::from(l) }));
        return out;
    }
    out.push("-Wl,--push-state,--as-needed".into());
    for l in RUNTIME_NATIVE_LIBS {
        if *l == "-lgcc_s" && lang == Lang::C {
            out.extend(["-Wl,-Bstatic", "-lgcc_eh", "-Wl,-Bdynamic"].map(OsString::from));
        } else {
            out.push(l.into());
        }
    }
    out.push("-Wl,--pop-state".into());
    out
}

/// Find `libtrestle_runtime.a`: `$TRESTLE_RUNTIME_LIB`, else next to the wrapper.
pub fn find_runtime(
    env_override: Option<&OsStr>,
    exe: Option<&Path>,
) -> Result<PathBuf, DriverError> {
    if let Some(path) = env_override.filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(DriverError::RuntimeNotFound {
                looked_at: vec![format!("{ENV_RUNTIME_LIB}={}", path.display())],
            })
        };
    }
    let mut looked_at = vec![format!("{ENV_RUNTIME_LIB} (not set)")];
    if let Some(dir) = exe.and_then(Path::parent) {
        let candidate = dir.join(RUNTIME_LIB_NAME);
        if candidate.is_file() {
            return Ok(candidate);
        }
        looked_at.push(candidate.display().to_string());
    }
    Err(DriverError::RuntimeNotFound { looked_at })
}

/// Expand `@file` response files (GNU quoting, as clang reads them). An unreadable
/// one stays as it is, for clang to report.
fn expand_response_files(args: Vec<OsString>, depth: usize) -> Vec<OsString> {
    let mut out = Vec::with_capacity(args.len());
    for arg in args {
        let bytes = arg.as_bytes();
        let content = match bytes.split_first() {
            Some((b'@', path)) if !path.is_empty() && depth < 16 => {
                std::fs::read(OsStr::from_bytes(path)).ok()
            }
            _ => None,
        };
        match content {
            Some(content) => out.extend(expand_response_files(tokenize_gnu(&content), depth + 1)),
            None => out.push(arg),
        }
    }
    out
}

/// Split response-file text like a POSIX shell word list: whitespace separates,
/// quotes group, a backslash escapes the next character (not inside single quotes).
fn tokenize_gnu(text: &[u8]) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut cur: Vec<u8> = Vec::new();
    let mut in_token = false;
    let mut quote: Option<u8> = None;
    let mut bytes = text.iter().copied();
    while let Some(c) = bytes.next() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(b'"') if c == b'\\' => cur.extend(bytes.next()),
            Some(_) => cur.push(c),
            None if c.is_ascii_whitespace() => {
                if in_token {
                    out.push(OsString::from_vec(std::mem::take(&mut cur)));
                    in_token = false;
                }
            }
            None => {
                in_token = true;
                match c {
                    b'\\' => cur.extend(bytes.next()),
                    b'\'' | b'"' => quote = Some(c),
                    _ => cur.push(c),
                }
            }
        }
    }
    if in_token {
        out.push(OsString::from_vec(cur));
    }
    out
}

// ---------------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------------

fn env_flag(var: &str) -> bool {
    std::env::var_os(var).is_some_and(|v| !v.is_empty() && v != "0")
}

/// Run the wrapper on `args` (without the program name); returns the exit code.
/// Messages go to stderr prefixed with the wrapper's name; nothing panics on bad input.
pub fn main_with_args(lang: Lang, args: Vec<OsString>) -> i32 {
    match run(lang, args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{}: {e}", lang.tool_name());
            1
        }
    }
}

struct Runner {
    lang: Lang,
    compiler: OsString,
    verbose: bool,
}

impl Runner {
    /// Run the compiler; its exit code (128 + signal if it was killed).
    fn run(&self, args: &[OsString]) -> Result<i32, DriverError> {
        self.trace(args);
        let status = Command::new(&self.compiler)
            .args(args)
            .status()
            .map_err(|e| self.spawn_error(e))?;
        Ok(status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
    }

    /// Like [`Runner::run`], but pass the compiler's stderr through `filter`.
    fn run_filtering_stderr(
        &self,
        args: &[OsString],
        filter: impl FnOnce(&str) -> String,
    ) -> Result<i32, DriverError> {
        self.trace(args);
        let output = Command::new(&self.compiler)
            .args(args)
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| self.spawn_error(e))?;
        eprint!("{}", filter(&String::from_utf8_lossy(&output.stderr)));
        let status = output.status;
        Ok(status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
    }

    /// Replace this process with the compiler on `args`; returns only on failure.
    fn exec(&self, args: &[OsString]) -> DriverError {
        self.trace(args);
        let error = Command::new(&self.compiler).args(args).exec();
        self.spawn_error(error)
    }

    fn spawn_error(&self, error: std::io::Error) -> DriverError {
        DriverError::Spawn {
            compiler: self.compiler.to_string_lossy().into_owned(),
            error,
        }
    }

    fn trace(&self, args: &[OsString]) {
        if self.verbose {
            let line: Vec<String> = std::iter::once(&self.compiler)
                .chain(args)
                .map(|a| shell_quote(&a.to_string_lossy()))
                .collect();
            eprintln!("{}: + {}", self.lang.tool_name(), line.join(" "));
        }
    }

    fn note(&self, msg: &str) {
        if self.verbose {
            eprintln!("{}: {msg}", self.lang.tool_name());
        }
    }
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=,:+@%".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

fn run(lang: Lang, original: Vec<OsString>) -> Result<i32, DriverError> {
    let runner = Runner {
        lang,
        compiler: lang.compiler(),
        verbose: env_flag(ENV_VERBOSE),
    };
    let passthrough = |reason: PassReason| {
        runner.note(&format!("passing through ({reason:?})"));
        Err(runner.exec(&original))
    };
    if env_flag(ENV_PASSTHROUGH) {
        return passthrough(PassReason::Env);
    }
    let args = expand_response_files(original.clone(), 0);
    let parsed = match parse(&args) {
        Ok(parsed) => parsed,
        Err(MissingValue(flag)) => return passthrough(PassReason::MissingValue(flag)),
    };
    let shape = match shape(&parsed) {
        Ok(shape) => shape,
        Err(reason) => return passthrough(reason),
    };
    let tmp = tempfile::Builder::new()
        .prefix(&format!("{}.", lang.tool_name()))
        .tempdir()
        .map_err(DriverError::TempDir)?;
    let cwd = std::env::current_dir().unwrap_or_default();
    let build = plan(&parsed, &shape, tmp.path(), &cwd);
    let runtime = match &build.link {
        Some(_) if !build.relocatable => {
            let exe = std::env::current_exe().ok();
            Some(find_runtime(
                std::env::var_os(ENV_RUNTIME_LIB).as_deref(),
                exe.as_deref(),
            )?)
        }
        _ => None,
    };
    let result = run_build(&runner, &build, runtime.as_deref(), lang);
    if env_flag(ENV_KEEP_TEMPS) {
        eprintln!(
            "{}: keeping temporary files in {}",
            lang.tool_name(),
            tmp.keep().display()
        );
    }
    result
}

fn run_build(runner: &Runner, build: &Build, runtime: Option<&Path>, lang: Lang) -> Result<i32, DriverError> {
    for unit in &build.units {
        let code = runner.run(&unit.frontend)?;
        if code != 0 {
            return Ok(code);
        }
        instrument(&unit.source, &unit.bitcode, &unit.instrumented)?;
        let code = runner.run(&unit.backend)?;
        if code != 0 {
            return Ok(code);
        }
        if let Some((covered, codegen)) = &unit.codegen {
            inline_edges(&unit.source, covered)?;
            let code = runner.run(codegen)?;
            if code != 0 {
                return Ok(code);
            }
        }
    }
    if let Some(rest) = &build.rest {
        let code = runner.run(rest)?;
        if code != 0 {
            return Ok(code);
        }
    }
    if let Some(link) = &build.link {
        let mut link = link.clone();
        if let Some(runtime) = runtime {
            link.extend(runtime_link_args(runtime, build.static_link, lang));
            if build.static_link {
                let archive = runtime.file_name().unwrap_or_default().to_string_lossy();
                return runner.run_filtering_stderr(&link, |err| {
                    drop_runtime_static_warnings(err, &archive)
                });
            }
        }
        return runner.run(&link);
    }
    Ok(0)
}

/// Remove the linker's glibc warnings about Rust std functions in the runtime
/// (`getpwuid_r`, `getaddrinfo`) from a static link's stderr: the runtime never calls
/// them, and libtool and configure read any stderr output as "`-static` does not
/// work". Each warning is two lines: `ld: <archive>(<member>): in function ...` then
/// `...: warning: Using '...' in statically linked applications requires ...`.
fn drop_runtime_static_warnings(stderr: &str, archive: &str) -> String {
    let from_runtime = |l: &str| l.contains(&format!("{archive}(")) && l.contains("in function");
    let static_warning = |l: &str| l.contains("in statically linked applications requires");
    let lines: Vec<&str> = stderr.split_inclusive('\n').collect();
    let mut out = String::new();
    let mut i = 0;
    while i < lines.len() {
        if from_runtime(lines[i]) && lines.get(i + 1).is_some_and(|l| static_warning(l)) {
            i += 2;
        } else {
            out.push_str(lines[i]);
            i += 1;
        }
    }
    out
}

/// Step 2, with a panic in the pass turned into an error naming the source.
/// Inline the edge counters of the optimised bitcode `covered`, in place.
fn inline_edges(source: &Path, covered: &Path) -> Result<(), DriverError> {
    crate::edges::inline_edge_counters_file(covered, covered)
        .map(drop)
        .map_err(|e| DriverError::Instrument { source_file: source.to_path_buf(), chain: format!("{:#}", anyhow::Error::from(e)) })
}

fn instrument(source: &Path, bitcode: &Path, out: &Path) -> Result<(), DriverError> {
    let error = |chain: String| DriverError::Instrument {
        source_file: source.to_path_buf(),
        chain,
    };
    let result = std::panic::catch_unwind(|| {
        pass::instrument_bitcode_file(bitcode, out)
            .map_err(|e| format!("{:#}", anyhow::Error::from(e)))
    });
    match result {
        Ok(Ok(_stats)) => Ok(()),
        Ok(Err(chain)) => Err(error(chain)),
        Err(panic) => {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(error(format!("the pass panicked (a trestle bug): {msg}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    fn build_of(args: &[&str]) -> Build {
        let parsed = parse(&os(args)).expect("parses");
        match shape(&parsed) {
            Ok(shape) => plan(&parsed, &shape, Path::new("/T"), Path::new("/W")),
            Err(r) => panic!("unexpected passthrough {r:?} for {args:?}"),
        }
    }

    fn strs(v: &[OsString]) -> Vec<String> {
        v.iter().map(|s| s.to_string_lossy().into_owned()).collect()
    }

    fn contains_seq(hay: &[String], needle: &[&str]) -> bool {
        hay.windows(needle.len())
            .any(|w| w.iter().zip(needle).all(|(a, b)| a == b))
    }

    #[test]
    fn separate_values_are_not_inputs() {
        let args = [
            "-I", "inc", "-o", "out", "-l", "m", "-x", "c", "f", "-MF", "d",
        ];
        let parsed = parse(&os(&args)).expect("parses");
        let inputs: Vec<_> = parsed.iter().filter_map(Arg::input).collect();
        assert_eq!(inputs, vec![(OsStr::new("f"), Some("c"))]);
    }

    #[test]
    fn joined_values_are_read() {
        let parsed = parse(&os(&["-ofoo", "-xc++", "-MFdeps.d", "a"])).expect("parses");
        assert_eq!(parsed[0].value(), Some(OsStr::new("foo")));
        assert_eq!(parsed[0].role(), Some(Role::Output));
        assert_eq!(parsed[2].role(), Some(Role::DepFile));
        assert_eq!(parsed[3].input(), Some((OsStr::new("a"), Some("c++"))));
    }

    #[test]
    fn x_none_resets_language() {
        let parsed = parse(&os(&["-x", "c", "a", "-x", "none", "b.o"])).expect("parses");
        let inputs: Vec<_> = parsed.iter().filter_map(Arg::input).collect();
        assert_eq!(
            inputs,
            vec![(OsStr::new("a"), Some("c")), (OsStr::new("b.o"), None)]
        );
    }

    #[test]
    fn roles_of_common_flags() {
        let role = |f: &str| parse(&os(&[f])).expect("parses")[0].role();
        assert_eq!(role("-fPIC"), Some(Role::Common));
        assert_eq!(role("-march=native"), Some(Role::Common));
        assert_eq!(role("-g"), Some(Role::Common));
        assert_eq!(role("-O2"), Some(Role::Optimize));
        assert_eq!(role("-DFOO=1"), Some(Role::Frontend));
        assert_eq!(role("-Iinclude"), Some(Role::Frontend));
        assert_eq!(role("-std=gnu11"), Some(Role::Frontend));
        assert_eq!(role("-Wall"), Some(Role::Frontend));
        assert_eq!(role("-Wl,--as-needed"), Some(Role::Link));
        assert_eq!(role("-Wa,--noexecstack"), Some(Role::Assembler));
        assert_eq!(role("-lm"), Some(Role::Link));
        assert_eq!(role("-fuse-ld=lld"), Some(Role::Link));
        assert_eq!(role("-isysroot/x"), Some(Role::Common));
        assert_eq!(role("-MMD"), Some(Role::DepGen));
        assert_eq!(role("-print-file-name=libc.so"), Some(Role::Passthrough));
        assert_eq!(role("-dumpversion"), Some(Role::Passthrough));
        assert_eq!(role("-integrated-as"), Some(Role::Common));
    }

    #[test]
    fn program_name_picks_the_language() {
        assert_eq!(
            Lang::from_program_name(OsStr::new("/usr/bin/trestle-c++")),
            Lang::Cxx
        );
        assert_eq!(
            Lang::from_program_name(OsStr::new("trestle-cxx")),
            Lang::Cxx
        );
        assert_eq!(Lang::from_program_name(OsStr::new("./trestle-cc")), Lang::C);
    }

    #[test]
    fn missing_value_is_reported() {
        assert_eq!(parse(&os(&["a.c", "-o"])), Err(MissingValue("-o".into())));
    }

    #[test]
    fn debug_levels() {
        for f in [
            "-g",
            "-g0",
            "-g3",
            "-ggdb",
            "-gdwarf-4",
            "-gline-tables-only",
        ] {
            assert!(sets_debug_level(f), "{f}");
        }
        for f in ["-gsplit-dwarf", "-gz", "-gcolumn-info", "-O2"] {
            assert!(!sets_debug_level(f), "{f}");
        }
    }

    #[test]
    fn passthrough_cases() {
        let reason = |args: &[&str]| {
            let parsed = parse(&os(args)).expect("parses");
            shape(&parsed).expect_err("expected passthrough")
        };
        assert_eq!(reason(&["-E", "a.c"]), PassReason::Flag("-E".into()));
        assert_eq!(reason(&["-M", "a.c"]), PassReason::Flag("-M".into()));
        assert_eq!(
            reason(&["-MM", "-MF", "x.d", "a.c"]),
            PassReason::Flag("-MM".into())
        );
        assert_eq!(reason(&["--version"]), PassReason::Flag("--version".into()));
        assert_eq!(reason(&["-v"]), PassReason::NoInputs);
        assert_eq!(
            reason(&["-print-prog-name=ld"]),
            PassReason::Flag("-print-prog-name=ld".into())
        );
        assert_eq!(reason(&["-###", "a.c"]), PassReason::Flag("-###".into()));
        assert_eq!(reason(&["-x", "c", "-c", "-"]), PassReason::Stdin);
        assert_eq!(reason(&["-c", "a.S"]), PassReason::NothingToInstrument);
        assert_eq!(
            reason(&["-c", "a.s", "-o", "a.o"]),
            PassReason::NothingToInstrument
        );
        assert_eq!(
            reason(&["-c", "-x", "assembler-with-cpp", "a.c"]),
            PassReason::NothingToInstrument
        );
        assert_eq!(
            reason(&["-c", "a.c", "b.c", "-o", "x.o"]),
            PassReason::OutputConflict
        );
        assert_eq!(
            reason(&["-fsyntax-only", "a.c"]),
            PassReason::Flag("-fsyntax-only".into())
        );
    }

    #[test]
    fn compile_at_o2_disables_passes_and_adds_line_tables() {
        let b = build_of(&[
            "-O2", "-Iinc", "-DX=1", "-fPIC", "-c", "src/a.c", "-o", "obj/a.o",
        ]);
        assert!(b.link.is_none() && b.rest.is_none());
        let [u] = &b.units[..] else {
            panic!("one unit")
        };
        assert_eq!(u.object, PathBuf::from("obj/a.o"));
        let fe = strs(&u.frontend);
        assert!(
            contains_seq(&fe, &["-O2", "-Xclang", "-disable-llvm-passes"]),
            "{fe:?}"
        );
        assert!(fe.contains(&"-gline-tables-only".into()));
        assert!(fe.contains(&"-Iinc".into()) && fe.contains(&"-DX=1".into()));
        assert!(
            contains_seq(&fe, &["-emit-llvm", "-c", "-o", "/T/0-a.bc", "src/a.c"]),
            "{fe:?}"
        );
        assert!(!fe.contains(&"-MF".into()));
        assert!(!fe.iter().any(|a| a.contains("coverage")), "{fe:?}");
        let be = strs(&u.backend);
        assert_eq!(be, ["-fPIC", "-O2", "-mllvm", "-no-stack-coloring", SANCOV_FLAGS, "-emit-llvm", NO_UNUSED_WARNING, "-c", "/T/0-a.inst.bc", "-o", "/T/0-a.cov.bc"]);
        let (covered, codegen) = u.codegen.as_ref().expect("edge coverage on");
        assert_eq!(covered, Path::new("/T/0-a.cov.bc"));
        assert_eq!(
            strs(codegen),
            ["-fPIC", "-O2", "-mllvm", "-no-stack-coloring", "-Xclang", "-disable-llvm-passes", NO_UNUSED_WARNING, "-c", "/T/0-a.cov.bc", "-o", "obj/a.o"]
        );
    }

    #[test]
    fn compile_at_o0_keeps_user_debug_flags() {
        let b = build_of(&["-O0", "-g3", "-c", "a.c"]);
        let fe = strs(&b.units[0].frontend);
        assert!(fe.contains(&"-O0".into()));
        assert!(!fe.contains(&"-disable-llvm-passes".into()));
        assert!(!fe.contains(&"-gline-tables-only".into()));
        assert!(fe.contains(&"-g3".into()));
        assert!(strs(&b.units[0].backend).contains(&"-g3".into()));
        assert_eq!(b.units[0].object, PathBuf::from("a.o"));
    }

    #[test]
    fn md_names_the_real_object() {
        let b = build_of(&["-MD", "-c", "src/a.c", "-o", "obj/a.o"]);
        let fe = strs(&b.units[0].frontend);
        assert!(contains_seq(&fe, &["-MF", "obj/a.d"]), "{fe:?}");
        assert!(contains_seq(&fe, &["-MT", "obj/a.o"]), "{fe:?}");
        // without -o: basename.d / basename.o in the current directory
        let b = build_of(&["-MMD", "-c", "src/a.c"]);
        let fe = strs(&b.units[0].frontend);
        assert!(
            contains_seq(&fe, &["-MF", "a.d"]) && contains_seq(&fe, &["-MT", "a.o"]),
            "{fe:?}"
        );
    }

    #[test]
    fn automake_dep_flags_are_kept_as_given() {
        let args = [
            "-MT",
            "x.o",
            "-MD",
            "-MP",
            "-MF",
            ".deps/x.Tpo",
            "-c",
            "-o",
            "x.o",
            "x.c",
        ];
        let fe = strs(&build_of(&args).units[0].frontend);
        assert!(
            contains_seq(&fe, &["-MT", "x.o", "-MD", "-MP", "-MF", ".deps/x.Tpo"]),
            "{fe:?}"
        );
        assert_eq!(fe.iter().filter(|a| *a == "-MT" || *a == "-MF").count(), 2);
        // -Wp,-MD,file names the file; only the target is added
        let fe = strs(&build_of(&["-Wp,-MD,.deps/y.d", "-c", "y.c"]).units[0].frontend);
        assert!(
            !fe.contains(&"-MF".into()) && contains_seq(&fe, &["-MT", "y.o"]),
            "{fe:?}"
        );
    }

    #[test]
    fn coverage_files_are_named_after_the_real_output() {
        let args = ["--coverage", "-c", "src/m.c", "-o", "obj/m.o"];
        let fe = strs(&build_of(&args).units[0].frontend);
        assert!(
            contains_seq(&fe, &["-Xclang", "-coverage-notes-file=/W/obj/m.gcno"]),
            "{fe:?}"
        );
        assert!(
            contains_seq(&fe, &["-Xclang", "-coverage-data-file=/W/obj/m.gcda"]),
            "{fe:?}"
        );
        let fe = strs(&build_of(&["-fprofile-arcs", "src/m.c", "-o", "cov"]).units[0].frontend);
        assert!(
            fe.contains(&"-coverage-data-file=/W/cov-m.gcda".into()),
            "{fe:?}"
        );
    }

    #[test]
    fn dep_flags_stay_out_of_backend_and_link() {
        let b = build_of(&["-MD", "-MF", "d", "-I.", "a.c", "-o", "prog", "-lm"]);
        for args in [
            strs(&b.units[0].backend),
            strs(b.link.as_ref().expect("links")),
        ] {
            assert!(
                !args
                    .iter()
                    .any(|a| a.starts_with("-M") || a.starts_with("-I")),
                "{args:?}"
            );
        }
    }

    #[test]
    fn several_sources_without_o_give_one_object_each() {
        let b = build_of(&["-c", "d/a.c", "b.cpp", "-x", "c", "weird.txt"]);
        let objects: Vec<_> = b.units.iter().map(|u| u.object.clone()).collect();
        assert_eq!(objects, ["a.o", "b.o", "weird.o"].map(PathBuf::from));
        assert!(contains_seq(
            &strs(&b.units[2].frontend),
            &["-x", "c", "weird.txt"]
        ));
    }

    #[test]
    fn compile_with_assembler_sources_runs_the_rest_through_clang() {
        let b = build_of(&["-c", "-O1", "a.c", "b.S"]);
        assert_eq!(b.units.len(), 1);
        assert_eq!(strs(b.rest.as_ref().expect("rest")), ["-c", "-O1", "b.S"]);
    }

    #[test]
    fn assemble_mode_emits_assembly() {
        let b = build_of(&["-S", "a.c"]);
        assert_eq!(b.units[0].object, PathBuf::from("a.s"));
        let codegen = &b.units[0].codegen.as_ref().expect("edge coverage on").1;
        assert!(strs(codegen).contains(&"-S".into()));
        let b = build_of(&["-S", "-emit-llvm", "a.c"]);
        assert_eq!(b.units[0].object, PathBuf::from("a.ll"));
    }

    #[test]
    fn link_replaces_sources_and_keeps_link_args_in_order() {
        let b = build_of(&[
            "-O2",
            "-DX",
            "-std=c99",
            "main.c",
            "util.o",
            "-L",
            "lib",
            "-lz",
            "-Wl,-z,now",
            "-o",
            "prog",
            "-x",
            "c",
            "gen",
            "-x",
            "assembler",
            "start.s",
            "-pthread",
        ]);
        assert_eq!(b.units.len(), 2);
        let link = strs(b.link.as_ref().expect("links"));
        assert_eq!(
            link,
            [
                "-O2",
                "/T/0-main.o",
                "util.o",
                "-L",
                "lib",
                "-lz",
                "-Wl,-z,now",
                "-o",
                "prog",
                "/T/1-gen.o",
                "-x",
                "assembler",
                "start.s",
                "-x",
                "none",
                "-pthread",
                NO_UNUSED_WARNING,
            ]
        );
    }

    #[test]
    fn link_of_objects_only_has_no_units() {
        let b = build_of(&["a.o", "b.o", "-o", "prog"]);
        assert!(b.units.is_empty());
        assert_eq!(
            strs(b.link.as_ref().expect("links")),
            ["a.o", "b.o", "-o", "prog"]
        );
    }

    #[test]
    fn static_link_uses_gcc_eh() {
        let b = build_of(&["-static", "a.o"]);
        assert!(b.static_link);
        let args = strs(&runtime_link_args(Path::new("/r/libtrestle_runtime.a"), true, Lang::C));
        assert!(args.contains(&"-lgcc_eh".into()) && !args.contains(&"-lgcc_s".into()));
    }

    #[test]
    fn dynamic_links_take_only_the_libraries_used() {
        // C: the unwinder from static libgcc_eh, everything else as needed; the
        // linker's state is restored for whatever follows.
        let args = strs(&runtime_link_args(Path::new("/r/libtrestle_runtime.a"), false, Lang::C));
        assert_eq!(args[0], "/r/libtrestle_runtime.a");
        assert_eq!(args[1], "-Wl,--push-state,--as-needed");
        assert_eq!(args.last().map(String::as_str), Some("-Wl,--pop-state"));
        let eh = args.iter().position(|a| a == "-lgcc_eh").expect("gcc_eh");
        assert_eq!((args[eh - 1].as_str(), args[eh + 1].as_str()), ("-Wl,-Bstatic", "-Wl,-Bdynamic"));
        assert!(!args.contains(&"-lgcc_s".into()));
        // C++: libstdc++ loads libgcc_s anyway; its exceptions use that unwinder.
        let args = strs(&runtime_link_args(Path::new("/r/libtrestle_runtime.a"), false, Lang::Cxx));
        assert!(args.contains(&"-lgcc_s".into()) && !args.contains(&"-lgcc_eh".into()));
    }

    #[test]
    fn static_link_warnings_from_the_runtime_are_dropped() {
        let stderr =
            "/usr/bin/ld: /t/libtrestle_runtime.a(std-1.rcgu.o): in function `home_dir':\n\
                      os.rs:519: warning: Using 'getpwuid_r' in statically linked applications \
                      requires at runtime the shared libraries from the glibc version\n\
                      /usr/bin/ld: main.o: in function `main':\n\
                      main.c:3: warning: Using 'getpwnam' in statically linked applications \
                      requires at runtime the shared libraries from the glibc version\n\
                      ld: warning: something else\n";
        let kept = drop_runtime_static_warnings(stderr, "libtrestle_runtime.a");
        assert!(
            !kept.contains("getpwuid_r") && !kept.contains("libtrestle_runtime"),
            "{kept}"
        );
        assert!(
            kept.contains("getpwnam") && kept.contains("in function `main'"),
            "{kept}"
        );
        assert!(kept.ends_with("ld: warning: something else\n"), "{kept}");
    }

    #[test]
    fn response_files_are_expanded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rsp = dir.path().join("args.rsp");
        std::fs::write(&rsp, "-c 'a b.c' \"-DX=\\\"y\\\"\"\n-o\tout.o").expect("write");
        let arg = format!("@{}", rsp.display());
        let expanded = expand_response_files(os(&["-O2", &arg, "@/nonexistent"]), 0);
        assert_eq!(
            strs(&expanded),
            [
                "-O2",
                "-c",
                "a b.c",
                "-DX=\"y\"",
                "-o",
                "out.o",
                "@/nonexistent"
            ]
        );
    }

    #[test]
    fn runtime_lookup_order_and_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let lib = dir.path().join(RUNTIME_LIB_NAME);
        std::fs::write(&lib, b"!<arch>\n").expect("write");
        let exe = dir.path().join("trestle-cc");
        assert_eq!(
            find_runtime(None, Some(&exe)).expect("found next to exe"),
            lib
        );
        assert_eq!(
            find_runtime(Some(lib.as_os_str()), None).expect("found via env"),
            lib
        );
        let err = find_runtime(Some(OsStr::new("/nope/lib.a")), Some(&exe)).expect_err("missing");
        assert!(err.to_string().contains("/nope/lib.a"), "{err}");
        let err = find_runtime(None, Some(Path::new("/nope/bin/trestle-cc"))).expect_err("missing");
        let msg = err.to_string();
        assert!(msg.contains("/nope/bin/libtrestle_runtime.a") && msg.contains("cargo build"));
        assert!(!msg.contains('\n'));
    }
}

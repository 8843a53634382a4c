//! Argument classification: the clang command line split into arguments, each an
//! input file or an option with the [`Role`] that decides which steps get it. Pure:
//! nothing here looks at the file system.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Where an option goes among the steps the wrapper runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
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
pub(super) struct Arg {
    /// The tokens as given: one, or two for an option with a separate value.
    pub(super) tokens: Vec<OsString>,
    pub(super) kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Kind {
    /// An input file, with the `-x` language in force for it (`None`: by extension).
    Input { lang: Option<String> },
    /// An option; `value` is its argument (joined or separate), if it takes one.
    Opt { role: Role, value: Option<OsString> },
}

impl Arg {
    pub(super) fn input(&self) -> Option<(&OsStr, Option<&str>)> {
        match &self.kind {
            Kind::Input { lang } => Some((self.tokens[0].as_os_str(), lang.as_deref())),
            Kind::Opt { .. } => None,
        }
    }

    pub(super) fn role(&self) -> Option<Role> {
        match &self.kind {
            Kind::Opt { role, .. } => Some(*role),
            Kind::Input { .. } => None,
        }
    }

    pub(super) fn value(&self) -> Option<&OsStr> {
        match &self.kind {
            Kind::Opt { value, .. } => value.as_deref(),
            Kind::Input { .. } => None,
        }
    }

    pub(super) fn flag(&self) -> std::borrow::Cow<'_, str> {
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
pub(super) struct MissingValue(pub(super) String);

/// Split a command line (without the program name) into arguments with roles.
pub(super) fn parse(args: &[OsString]) -> Result<Vec<Arg>, MissingValue> {
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
pub(super) fn is_instrumentable(path: &OsStr, lang: Option<&str>) -> bool {
    match lang {
        Some(l) => matches!(l, "c" | "c++" | "cpp-output" | "c++-cpp-output"),
        None => matches!(
            extension(path),
            Some("c" | "i" | "cc" | "cp" | "cxx" | "cpp" | "CPP" | "c++" | "C" | "ii")
        ),
    }
}

/// Would clang compile this input (rather than hand it to the linker)?
pub(super) fn is_compile_input(path: &OsStr, lang: Option<&str>) -> bool {
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
pub(super) fn sets_debug_level(flag: &str) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::test_support::os;

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
}

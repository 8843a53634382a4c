//! Compile and link planning: whether an invocation is instrumented at all ([`shape`]),
//! and if so the [`Build`] that says every command the wrapper runs and every file it
//! writes. Pure: the temporary directory is only named here.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use super::args::{is_compile_input, is_instrumentable, Arg, Role};
use super::steps::{backend_args, frontend_args, link_args, FrontendNames};

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
pub(super) struct Unit {
    pub(super) source: PathBuf,
    /// Step 1's output.
    pub(super) bitcode: PathBuf,
    /// Step 2's output.
    pub(super) instrumented: PathBuf,
    /// Step 3's output: the user's object (or assembly), or a temporary one for a link.
    pub(super) object: PathBuf,
    /// Step 1's arguments.
    pub(super) frontend: Vec<OsString>,
    /// Step 3's arguments.
    pub(super) backend: Vec<OsString>,
    /// With edge coverage: step 3 writes optimised bitcode here instead of the
    /// object, the wrapper inlines its edge counters, and step 4 (these arguments)
    /// generates the object from it.
    pub(super) codegen: Option<(PathBuf, Vec<OsString>)>,
}

/// Everything the wrapper runs for one instrumented invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Build {
    pub(super) units: Vec<Unit>,
    /// When compiling without linking: clang's arguments for the inputs that are not
    /// instrumented (assembler files next to C sources), if any.
    pub(super) rest: Option<Vec<OsString>>,
    /// When linking: clang's arguments, without the runtime.
    pub(super) link: Option<Vec<OsString>>,
    /// `-static` / `-static-pie`: no shared `libgcc_s`.
    pub(super) static_link: bool,
    /// `-r`: a relocatable partial link gets no runtime.
    pub(super) relocatable: bool,
    /// When linking: the executable it writes (`-o`, else `a.out`).
    pub(super) output: Option<PathBuf>,
}

/// The outline of an invocation that the wrapper instruments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Shape<'a> {
    mode: Mode,
    /// The last `-o`.
    output: Option<&'a OsStr>,
    /// The C/C++ sources, with their `-x` language.
    sources: Vec<(&'a OsStr, Option<&'a str>)>,
    /// How many inputs there are in all.
    inputs: usize,
}

/// Classify a parsed command line: what it does, or why clang gets it unchanged.
pub(super) fn shape(args: &[Arg]) -> Result<Shape<'_>, PassReason> {
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
pub(super) fn plan(args: &[Arg], shape: &Shape<'_>, tmp: &Path, cwd: &Path) -> Build {
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
    let planner = UnitPlanner {
        args,
        mode,
        output,
        out_ext,
        tmp,
        cwd,
    };
    let units = sources
        .iter()
        .enumerate()
        .map(|(i, &(src, lang))| planner.unit(i, src, lang))
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
    let output = (mode == Mode::Link).then(|| cwd.join(output.unwrap_or(OsStr::new("a.out"))));
    Build {
        units,
        rest,
        link,
        static_link,
        relocatable,
        output,
    }
}

/// What each source's [`Unit`] is planned from: the invocation's arguments and outline.
struct UnitPlanner<'a> {
    args: &'a [Arg],
    mode: Mode,
    /// The last `-o`.
    output: Option<&'a OsStr>,
    /// The extension of the object clang would name after the source.
    out_ext: &'static str,
    tmp: &'a Path,
    cwd: &'a Path,
}

impl UnitPlanner<'_> {
    /// The unit of the `i`th source; its temporaries are `<tmp>/<i>-<stem>.<ext>`.
    fn unit(&self, i: usize, src: &OsStr, lang: Option<&str>) -> Unit {
        let stem = temp_stem(src);
        let tmp_file = |ext: &str| self.tmp.join(format!("{i}-{stem}.{ext}"));
        let src_stem = Path::new(src).file_stem().unwrap_or(src);
        let default_object = PathBuf::from(src_stem).with_extension(self.out_ext);
        let object = match (self.mode, self.output) {
            (Mode::Link, _) => tmp_file("o"),
            (_, Some(o)) => PathBuf::from(o),
            (_, None) => default_object.clone(),
        };
        let names = self.frontend_names(src_stem, default_object, &object, tmp_file("bc"));
        let frontend = frontend_args(self.args, src, lang, &names);
        let instrumented = tmp_file("inst.bc");
        let step = if self.mode == Mode::Assemble {
            "-S"
        } else {
            "-c"
        };
        let covered = tmp_file("cov.bc");
        let (backend, codegen) = backend_args(self.args, step, &instrumented, &covered, &object);
        Unit {
            source: PathBuf::from(src),
            bitcode: names.bitcode,
            instrumented,
            object,
            frontend,
            backend,
            codegen: codegen.map(|c| (covered, c)),
        }
    }

    /// The files step 1 writes to `bitcode` names, as if clang had compiled straight
    /// to `object`.
    fn frontend_names(
        &self,
        src_stem: &OsStr,
        default_object: PathBuf,
        object: &Path,
        bitcode: PathBuf,
    ) -> FrontendNames {
        // The object as the user's make rules know it: a link's temporaries are
        // never a target, so it names the object a separate compile would make.
        let dep_target = if self.mode == Mode::Link {
            default_object
        } else {
            object.to_path_buf()
        };
        let dep_file = match self.output {
            Some(o) => PathBuf::from(o).with_extension("d"),
            None => PathBuf::from(src_stem).with_extension("d"),
        };
        // gcov files as clang names them: after the object, or `<output>-<stem>`
        // for a compile and link.
        let coverage_base = match self.mode {
            Mode::Link => {
                let out = self.output.unwrap_or(OsStr::new("a.out"));
                let mut base = self.cwd.join(out).with_extension("").into_os_string();
                base.push("-");
                base.push(src_stem);
                PathBuf::from(base)
            }
            _ => self.cwd.join(object).with_extension(""),
        };
        FrontendNames {
            bitcode,
            dep_file,
            dep_target,
            coverage_base,
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::args::parse;
    use crate::driver::steps::{NO_UNUSED_WARNING, SANCOV_FLAGS};
    use crate::driver::test_support::{build_of, contains_seq, os, strs};

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
    fn a_link_names_the_executable_it_writes_and_a_compile_none() {
        assert_eq!(
            build_of(&["a.c", "-o", "bin/prog"]).output,
            Some(PathBuf::from("/W/bin/prog"))
        );
        assert_eq!(
            build_of(&["a.c", "-o", "/abs/prog"]).output,
            Some(PathBuf::from("/abs/prog"))
        );
        assert_eq!(build_of(&["a.c"]).output, Some(PathBuf::from("/W/a.out")));
        assert_eq!(build_of(&["-c", "a.c", "-o", "a.o"]).output, None);
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
        assert_eq!(
            be,
            [
                "-fPIC",
                "-O2",
                "-mllvm",
                "-no-stack-coloring",
                SANCOV_FLAGS,
                "-emit-llvm",
                NO_UNUSED_WARNING,
                "-c",
                "/T/0-a.inst.bc",
                "-o",
                "/T/0-a.cov.bc"
            ]
        );
        let (covered, codegen) = u.codegen.as_ref().expect("edge coverage on");
        assert_eq!(covered, Path::new("/T/0-a.cov.bc"));
        assert_eq!(
            strs(codegen),
            [
                "-fPIC",
                "-O2",
                "-mllvm",
                "-no-stack-coloring",
                "-Xclang",
                "-disable-llvm-passes",
                NO_UNUSED_WARNING,
                "-c",
                "/T/0-a.cov.bc",
                "-o",
                "obj/a.o"
            ]
        );
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
}

//! The clang command line of each step of a unit: step 1 (frontend to unoptimised
//! bitcode), step 3 (optimisation, with SanitizerCoverage), step 4 (code generation),
//! and the final link. Each takes only the options that matter to it.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use super::args::{is_instrumentable, sets_debug_level, Arg, Kind, Role};
use super::plan::Unit;

/// Suppresses clang's "argument unused during compilation" in the steps the wrapper
/// adds: configure scripts treat any stderr output as a failed check.
pub(super) const NO_UNUSED_WARNING: &str = "-Wno-unused-command-line-argument";

/// The last `-O` option, if any.
fn opt_level(args: &[Arg]) -> Option<&OsString> {
    args.iter()
        .rev()
        .find(|a| a.role() == Some(Role::Optimize))
        .map(|a| &a.tokens[0])
}

/// The files step 1 writes, or names in what it writes.
pub(super) struct FrontendNames {
    /// The bitcode output.
    pub(super) bitcode: PathBuf,
    /// The dependency file for a plain `-MD`.
    pub(super) dep_file: PathBuf,
    /// The dependency target when none is given.
    pub(super) dep_target: PathBuf,
    /// `.gcno` / `.gcda` paths without extension, for `--coverage`.
    pub(super) coverage_base: PathBuf,
}

/// Step 1: unoptimised bitcode with the user's frontend options.
pub(super) fn frontend_args(
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
pub(super) fn backend_args(
    args: &[Arg],
    step: &str,
    instrumented: &Path,
    covered: &Path,
    object: &Path,
) -> (Vec<OsString>, Option<Vec<OsString>>) {
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
        vec![
            NO_UNUSED_WARNING.into(),
            step.into(),
            input.into(),
            "-o".into(),
            output.into(),
        ]
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
pub(super) fn link_args(args: &[Arg], units: &[Unit]) -> Vec<OsString> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::test_support::{build_of, contains_seq, strs};

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
}

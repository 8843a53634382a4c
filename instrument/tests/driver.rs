//! End-to-end tests of the `trestle-cc` / `trestle-cxx` wrappers: real C and C++
//! programs compiled in a fresh directory, linked with the runtime, run, and their
//! output checked. Objects are checked for the pass's hooks, so a wrapper that
//! silently skipped instrumentation fails.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

const CC: &str = env!("CARGO_BIN_EXE_trestle-cc");
const CXX: &str = env!("CARGO_BIN_EXE_trestle-cxx");

/// The runtime staticlib to link. `cargo test -p trestle-instrument` does not build
/// `trestle-runtime`, so build it (a no-op when fresh) into the same target directory.
fn runtime_lib() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        if let Some(lib) = std::env::var_os("TRESTLE_RUNTIME_LIB") {
            return PathBuf::from(lib);
        }
        let profile_dir = Path::new(CC).parent().expect("binary has a directory");
        let lib = profile_dir.join("libtrestle_runtime.a");
        let target_dir = profile_dir.parent().expect("profile dir has a parent");
        if target_dir.join("CACHEDIR.TAG").is_file() {
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let mut cmd = Command::new(cargo);
            cmd.args(["build", "--quiet", "-p", "trestle-runtime", "--target-dir"])
                .arg(target_dir);
            match profile_dir.file_name().and_then(OsStr::to_str) {
                Some("debug") => {}
                Some("release") => {
                    cmd.arg("--release");
                }
                Some(profile) => {
                    cmd.args(["--profile", profile]);
                }
                None => {}
            }
            let status = cmd.status().expect("run cargo to build trestle-runtime");
            assert!(status.success(), "building trestle-runtime failed");
        }
        assert!(
            lib.is_file(),
            "{} is missing: run `cargo build -p trestle-runtime` or set TRESTLE_RUNTIME_LIB",
            lib.display()
        );
        lib
    })
}

/// A fresh working directory with the given files.
fn workdir(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("create temp dir");
    for (name, text) in files {
        let path = dir.path().join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create parent dir");
        }
        std::fs::write(&path, text).expect("write source");
    }
    dir
}

fn wrapper(program: &str, dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(dir)
        .env("TRESTLE_RUNTIME_LIB", runtime_lib())
        .env_remove("TRESTLE_CC_PASSTHROUGH")
        .env_remove("TRESTLE_KEEP_TEMPS")
        .env_remove("TRESTLE_CC_VERBOSE");
    cmd
}

fn output(mut cmd: Command) -> Output {
    cmd.output().expect("start the wrapper")
}

/// Run a wrapper and require success and a silent stderr (configure scripts treat
/// any compiler output on stderr as a failed check).
fn ok(program: &str, dir: &Path, args: &[&str]) -> Output {
    let out = output(wrapper(program, dir, args));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}\n{stderr}",
        out.status
    );
    assert!(
        stderr.is_empty(),
        "{program} {args:?} wrote to stderr:\n{stderr}"
    );
    out
}

/// Run a built program; its stdout.
fn run_program(dir: &Path, program: &str, args: &[&str]) -> String {
    let out = Command::new(dir.join(program))
        .args(args)
        .current_dir(dir)
        .env_remove("TRESTLE_TRACE_DIR")
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Does this linked program contain code the pass instrumented? The runtime defines the
/// hooks, so look for the pass's replay thunks (`__trestle_thunk.<16 hex digits>`).
fn has_thunks(path: &Path) -> bool {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let prefix = trestle_abi::hooks::THUNK_PREFIX.as_bytes();
    bytes
        .windows(prefix.len() + 16)
        .any(|w| w.starts_with(prefix) && w[prefix.len()..].iter().all(u8::is_ascii_hexdigit))
}

/// Did the pass run on this object (it references the entry hook)?
fn is_instrumented(path: &Path) -> bool {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let hook = trestle_abi::hooks::ENTER.as_bytes();
    bytes.windows(hook.len()).any(|w| w == hook)
}

const UTIL_H: &str = "int add(int a, int b);\nchar *greet(const char *name);\n";
const UTIL_C: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "util.h"
int add(int a, int b) { return a + b; }
char *greet(const char *name) {
    char *s = malloc(strlen(name) + 8);
    sprintf(s, "hello, %s", name);
    return s;
}
"#;
const MAIN_C: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include "util.h"
static inline int twice(int x) { return add(x, x); }
int main(int argc, char **argv) {
    char *g = greet(argc > 1 ? argv[1] : "world");
    printf("%s %d\n", g, twice(add(2, 3)));
    free(g);
    return 0;
}
"#;

fn c_program() -> tempfile::TempDir {
    workdir(&[("util.h", UTIL_H), ("util.c", UTIL_C), ("main.c", MAIN_C)])
}

#[test]
fn two_file_program_compiled_with_c_then_linked() {
    let dir = c_program();
    let d = dir.path();
    ok(CC, d, &["-O2", "-g", "-c", "util.c", "-o", "util.o"]);
    ok(CC, d, &["-O2", "-c", "main.c"]);
    assert!(is_instrumented(&d.join("util.o")) && is_instrumented(&d.join("main.o")));
    ok(CC, d, &["main.o", "util.o", "-o", "prog"]);
    assert_eq!(run_program(d, "prog", &["trestle"]), "hello, trestle 10\n");
}

#[test]
fn two_sources_in_one_compile_give_one_object_each() {
    let dir = c_program();
    let d = dir.path();
    ok(CC, d, &["-c", "main.c", "util.c"]);
    assert!(is_instrumented(&d.join("main.o")) && is_instrumented(&d.join("util.o")));
    ok(CC, d, &["-o", "prog", "main.o", "util.o"]);
    assert_eq!(run_program(d, "prog", &[]), "hello, world 10\n");
}

#[test]
fn compile_and_link_in_one_step_leaves_no_temporaries() {
    let dir = c_program();
    let d = dir.path();
    ok(
        CC,
        d,
        &["-O1", "-Wall", "main.c", "util.c", "-o", "prog", "-lm"],
    );
    assert!(has_thunks(&d.join("prog")));
    assert_eq!(run_program(d, "prog", &["x"]), "hello, x 10\n");
    let mut names: Vec<String> = std::fs::read_dir(d)
        .expect("list dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    // The program and its lean sibling are outputs; nothing else is left.
    assert_eq!(
        names,
        [".prog.trestle-lean", "main.c", "prog", "util.c", "util.h"]
    );
    assert_eq!(
        run_program(d, ".prog.trestle-lean", &["x"]),
        "hello, x 10\n",
        "the lean build runs as the program does"
    );
}

#[test]
fn md_dependency_file_names_the_real_object() {
    let dir = c_program();
    let d = dir.path();
    std::fs::create_dir(d.join("obj")).expect("mkdir obj");
    ok(CC, d, &["-MD", "-O2", "-c", "util.c", "-o", "obj/util.o"]);
    let deps = std::fs::read_to_string(d.join("obj/util.d")).expect("obj/util.d written");
    assert!(deps.starts_with("obj/util.o:"), "{deps}");
    assert!(deps.contains("util.h"), "{deps}");

    // automake's depcomp (gcc3 mode)
    std::fs::create_dir(d.join(".deps")).expect("mkdir .deps");
    let args = [
        "-MT",
        "main.o",
        "-MD",
        "-MP",
        "-MF",
        ".deps/main.Tpo",
        "-c",
        "-o",
        "main.o",
        "main.c",
    ];
    ok(CC, d, &args);
    let deps = std::fs::read_to_string(d.join(".deps/main.Tpo")).expect(".deps/main.Tpo written");
    assert!(deps.starts_with("main.o:"), "{deps}");
    assert!(
        deps.contains("\nutil.h:"),
        "-MP phony target missing: {deps}"
    );
    assert!(is_instrumented(&d.join("main.o")));
}

#[test]
fn preprocess_only_passes_through() {
    let dir = workdir(&[("x.c", "int v = VALUE;\n")]);
    let d = dir.path();
    let out = ok(CC, d, &["-E", "-DVALUE=41+1", "x.c"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("int v = 41+1;"), "{text}");
    assert_eq!(
        std::fs::read_dir(d).expect("list").count(),
        1,
        "-E must create no files"
    );
}

const ANSWER_S: &str = "#define VALUE 42\n\t.text\n\t.globl answer\nanswer:\n\tmovl $VALUE, %eax\n\tret\n\t.section .note.GNU-stack,\"\",@progbits\n";
const ANSWER_MAIN_C: &str =
    "#include <stdio.h>\nint answer(void);\nint main(void) { printf(\"%d\\n\", answer()); return 0; }\n";

#[test]
fn assembler_sources_compile_and_link() {
    let dir = workdir(&[("answer.S", ANSWER_S), ("main.c", ANSWER_MAIN_C)]);
    let d = dir.path();
    ok(CC, d, &["-c", "answer.S", "-o", "answer.o"]);
    ok(
        CC,
        d,
        &[
            "-c",
            "-x",
            "assembler-with-cpp",
            "answer.S",
            "-o",
            "answer2.o",
        ],
    );
    ok(CC, d, &["main.c", "answer.o", "-o", "prog"]);
    assert_eq!(run_program(d, "prog", &[]), "42\n");
    // one step, and a compile mixing C and assembler sources
    ok(CC, d, &["-O2", "main.c", "answer.S", "-o", "prog2"]);
    assert_eq!(run_program(d, "prog2", &[]), "42\n");
    ok(CC, d, &["-c", "main.c", "answer.S"]);
    assert!(is_instrumented(&d.join("main.o")) && d.join("answer.o").is_file());
}

const CXX_MAIN: &str = r#"
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>
struct Shape { virtual ~Shape() = default; virtual double area() const = 0; };
struct Rect : Shape {
    double w, h;
    Rect(double w, double h) : w(w), h(h) {}
    double area() const override { return w * h; }
};
double total(const std::vector<std::unique_ptr<Shape>>& shapes);
int main() {
    std::vector<std::unique_ptr<Shape>> shapes;
    shapes.push_back(std::make_unique<Rect>(2, 3));
    shapes.push_back(std::make_unique<Rect>(1, 4));
    std::string label = "total";
    try {
        if (shapes.size() != 2) throw std::runtime_error("size");
        throw std::runtime_error("caught");
    } catch (const std::exception& e) {
        label += std::string(" (") + e.what() + ")";
    }
    std::cout << label << ": " << total(shapes) << std::endl;
}
"#;
const CXX_TOTAL: &str = r#"
#include <memory>
#include <numeric>
#include <vector>
struct Shape { virtual ~Shape() = default; virtual double area() const = 0; };
double total(const std::vector<std::unique_ptr<Shape>>& shapes) {
    return std::accumulate(shapes.begin(), shapes.end(), 0.0,
        [](double acc, const std::unique_ptr<Shape>& s) { return acc + s->area(); });
}
"#;

#[test]
fn cxx_program_via_trestle_cxx() {
    let dir = workdir(&[("main.cpp", CXX_MAIN), ("total.cc", CXX_TOTAL)]);
    let d = dir.path();
    ok(
        CXX,
        d,
        &["-O2", "-std=c++17", "main.cpp", "total.cc", "-o", "prog"],
    );
    assert_eq!(run_program(d, "prog", &[]), "total (caught): 10\n");
    assert!(has_thunks(&d.join("prog")));
    ok(CXX, d, &["-O0", "-g", "-c", "main.cpp", "total.cc"]);
    assert!(is_instrumented(&d.join("main.o")) && is_instrumented(&d.join("total.o")));
    ok(CXX, d, &["main.o", "total.o", "-o", "prog2"]);
    assert_eq!(run_program(d, "prog2", &[]), "total (caught): 10\n");
}

#[test]
fn trestle_cc_called_as_trestle_cxx_symlink_is_the_cxx_wrapper() {
    let dir = workdir(&[("main.cpp", CXX_MAIN), ("total.cc", CXX_TOTAL)]);
    let d = dir.path();
    let link = d.join("trestle-c++");
    std::os::unix::fs::symlink(CC, &link).expect("symlink");
    ok(
        link.to_str().expect("utf-8 path"),
        d,
        &["main.cpp", "total.cc", "-o", "prog"],
    );
    assert_eq!(run_program(d, "prog", &[]), "total (caught): 10\n");
}

#[test]
fn configure_style_checks() {
    let dir = workdir(&[("conftest.c", "int main(void) { return 0; }\n")]);
    let d = dir.path();
    // whether the C compiler works; default output name
    ok(CC, d, &["-g", "-O2", "conftest.c", "-o", "conftest"]);
    run_program(d, "conftest", &[]);
    ok(CC, d, &["conftest.c"]);
    run_program(d, "a.out", &[]);
    // suffix of object files; -c and -o together
    ok(CC, d, &["-c", "conftest.c"]);
    assert!(d.join("conftest.o").is_file());
    ok(CC, d, &["-c", "conftest.c", "-o", "conftest2.o"]);
    assert!(d.join("conftest2.o").is_file());
    ok(CC, d, &["-c", "-x", "c", "/dev/null", "-o", "x.o"]);
    assert!(d.join("x.o").is_file());
    // version and tool probes go straight to clang
    let version = ok(CC, d, &["--version"]);
    assert!(String::from_utf8_lossy(&version.stdout).contains("clang version"));
    let ld = ok(CC, d, &["-print-prog-name=ld"]);
    assert!(!ld.stdout.is_empty());
    // an unknown option fails like clang's, with its message
    let out = output(wrapper(CC, d, &["-qversion", "-c", "conftest.c"]));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("qversion"));
}

#[test]
fn response_file_arguments_are_read() {
    let dir = c_program();
    let d = dir.path();
    std::fs::write(d.join("args.rsp"), "-O2 -c 'util.c'\n-o util.o\n").expect("write rsp");
    ok(CC, d, &["@args.rsp"]);
    assert!(is_instrumented(&d.join("util.o")));
}

#[test]
fn assembly_output_with_s() {
    let dir = c_program();
    let d = dir.path();
    ok(CC, d, &["-S", "-O2", "util.c"]);
    let asm = std::fs::read_to_string(d.join("util.s")).expect("util.s written");
    assert!(
        asm.contains(trestle_abi::hooks::ENTER),
        "no hook call in util.s"
    );
}

#[test]
fn compile_error_propagates_exit_status_and_names_the_file() {
    let dir = workdir(&[("bad.c", "int main(void) { return missing; }\n")]);
    let d = dir.path();
    for args in [&["-c", "bad.c"][..], &["bad.c", "-o", "bad"][..]] {
        let out = output(wrapper(CC, d, args));
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("bad.c"));
    }
    assert!(!d.join("bad.o").exists() && !d.join("bad").exists());
}

#[test]
fn missing_runtime_is_a_one_line_error() {
    let dir = c_program();
    let d = dir.path();
    let mut cmd = wrapper(CC, d, &["main.c", "util.c", "-o", "prog"]);
    cmd.env("TRESTLE_RUNTIME_LIB", "/nonexistent/libtrestle_runtime.a");
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("trestle-cc: runtime library not found"),
        "{stderr}"
    );
    assert!(stderr.contains("/nonexistent/libtrestle_runtime.a") && stderr.contains("cargo build"));
    assert!(!d.join("prog").exists());
}

#[test]
fn passthrough_env_builds_a_plain_program() {
    let dir = c_program();
    let d = dir.path();
    let mut cmd = wrapper(CC, d, &["main.c", "util.c", "-o", "prog"]);
    cmd.env("TRESTLE_CC_PASSTHROUGH", "1")
        .env("TRESTLE_RUNTIME_LIB", "/nonexistent");
    assert!(output(cmd).status.success());
    assert!(!is_instrumented(&d.join("prog")) && !has_thunks(&d.join("prog")));
    assert_eq!(run_program(d, "prog", &[]), "hello, world 10\n");
}

#[test]
fn keep_temps_keeps_the_bitcode() {
    let dir = c_program();
    let d = dir.path();
    let mut cmd = wrapper(CC, d, &["-c", "util.c"]);
    cmd.env("TRESTLE_KEEP_TEMPS", "1");
    let out = output(cmd);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let kept = stderr
        .trim()
        .strip_prefix("trestle-cc: keeping temporary files in ")
        .unwrap_or_else(|| panic!("unexpected stderr: {stderr}"));
    let kept = PathBuf::from(kept);
    let exists = |name: &str| kept.join(name).is_file();
    let both = exists("0-util.bc") && exists("0-util.inst.bc");
    std::fs::remove_dir_all(&kept).expect("remove kept temps");
    assert!(both, "bitcode files missing in {}", kept.display());
}

#[test]
fn static_link_runs_and_is_silent() {
    let dir = workdir(&[("answer.S", ANSWER_S), ("main.c", ANSWER_MAIN_C)]);
    let d = dir.path();
    // Silent: libtool decides whether `-static` works by whether the link prints
    // anything, and glibc warns about Rust std functions in the runtime.
    ok(
        CC,
        d,
        &["-static", "-O2", "main.c", "answer.S", "-o", "prog"],
    );
    assert_eq!(run_program(d, "prog", &[]), "42\n");
}

#[test]
fn coverage_files_land_next_to_the_real_object() {
    let dir = c_program();
    let d = dir.path();
    ok(
        CC,
        d,
        &["--coverage", "-O2", "-c", "util.c", "-o", "util.o"],
    );
    ok(CC, d, &["--coverage", "main.c", "util.o", "-o", "prog"]);
    assert!(d.join("util.gcno").is_file() && d.join("prog-main.gcno").is_file());
    assert_eq!(run_program(d, "prog", &[]), "hello, world 10\n");
    assert!(d.join("util.gcda").is_file() && d.join("prog-main.gcda").is_file());
}

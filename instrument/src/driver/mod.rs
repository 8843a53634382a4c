//! The `trestle-cc` / `trestle-c++` compiler wrappers: a drop-in `CC` / `CXX`, so that
//! `./configure CC=trestle-cc && make` builds a GNU package with carving instrumentation.
//!
//! The wrapper parses the clang command line, then either hands it to clang unchanged
//! (nothing to instrument) or splits each C/C++ compilation into four steps:
//!
//! ```text
//! 1. clang <user flags> -O2 -Xclang -disable-llvm-passes -emit-llvm -c foo.c -o T/0-foo.bc
//! 2. pass::instrument_bitcode_file(T/0-foo.bc, T/0-foo.inst.bc)
//! 3. clang <codegen flags> -O2 -fsanitize-coverage=... -emit-llvm -c T/0-foo.inst.bc -o T/0-foo.cov.bc
//!    run::inline_edge_counters_file(T/0-foo.cov.bc, T/0-foo.cov.bc)
//! 4. clang <codegen flags> -O2 -Xclang -disable-llvm-passes -c T/0-foo.cov.bc -o foo.o
//! ```
//!
//! Step 1 keeps the user's `-O` level (so the frontend emits the same IR attributes) but
//! runs no LLVM passes, so the pass sees every source function before inlining; it adds
//! `-gline-tables-only` when the user gave no debug level, so functions have source lines.
//! Dependency files (`-MD`, `-MMD`, ...) and gcov file names (`--coverage`) come from
//! step 1, named as if clang had compiled straight to the real object. Steps 3 and 4
//! get only what matters for code generation (`-f*`, `-m*`, `-g*`, `-O*`, `--target`,
//! `-Wa,`...), not `-I`/`-D`. A link (no `-c`/`-S`) compiles each source to a temporary object that
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
//! | `TRESTLE_CC_LEAN=0` | link no lean sibling (see `lean`) |
//!
//! Owns only command-line handling and process plumbing: the IR belongs to
//! [`crate::pass`], and the runtime is found as a file, never linked into this crate.
//!
//! One module per stage, pure up to `run`:
//!
//! - `response_files`: `@file` arguments expanded.
//! - `args`: each argument classified by the steps it goes to.
//! - `plan`: whether to instrument at all ([`PassReason`] if not), and if so every
//!   command and file of the build; `steps` builds each step's command line.
//! - `run`: runs the plan, behind [`main_with_args`]; `runtime_lib` finds the runtime
//!   staticlib and adds it to the link; `lean` links the program again as its lean
//!   sibling, with the lean runtime, for system-level fuzzing.

mod args;
mod lean;
mod plan;
mod response_files;
mod run;
mod runtime_lib;
mod steps;
#[cfg(test)]
mod test_support;

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

pub use plan::PassReason;
pub use runtime_lib::{find_runtime, RUNTIME_LIB_NAME, RUNTIME_NATIVE_LIBS};
pub use steps::SANCOV_FLAGS;

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

/// Run the wrapper on `args` (without the program name); returns the exit code.
/// Messages go to stderr prefixed with the wrapper's name; nothing panics on bad input.
pub fn main_with_args(lang: Lang, args: Vec<OsString>) -> i32 {
    match run::run(lang, args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{}: {e}", lang.tool_name());
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

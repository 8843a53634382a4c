//! Running a planned build: the compiler processes, the pass and the edge inlining
//! between them, the runtime added to the link, and passthrough by `exec`.

use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};

use super::args::{parse, MissingValue};
use super::lean;
use super::plan::{plan, shape, Build, PassReason};
use super::response_files::expand_response_files;
use super::runtime_lib::{drop_runtime_static_warnings, find_runtime, runtime_link_args};
use super::{DriverError, Lang, ENV_KEEP_TEMPS, ENV_PASSTHROUGH, ENV_RUNTIME_LIB, ENV_VERBOSE};
use crate::pass;

/// Run the wrapper: pass `original` through to clang, or plan the instrumented build
/// and run it; the exit code.
pub(super) fn run(lang: Lang, original: Vec<OsString>) -> Result<i32, DriverError> {
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
    let result = run_build(&runner, &build, runtime.as_deref(), lang, tmp.path());
    if env_flag(ENV_KEEP_TEMPS) {
        eprintln!(
            "{}: keeping temporary files in {}",
            lang.tool_name(),
            tmp.keep().display()
        );
    }
    result
}

/// Steps 1 to 4 of each unit, then the rest and the link, stopping at the first
/// command that fails (its exit code).
fn run_build(
    runner: &Runner,
    build: &Build,
    runtime: Option<&Path>,
    lang: Lang,
    tmp: &Path,
) -> Result<i32, DriverError> {
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
    if let Some(user_link) = &build.link {
        let mut link = user_link.clone();
        let Some(runtime) = runtime else {
            return runner.run(&link);
        };
        link.extend(runtime_link_args(runtime, build.static_link, lang));
        let code = if build.static_link {
            let archive = runtime.file_name().unwrap_or_default().to_string_lossy();
            runner.run_filtering_stderr(&link, |err| drop_runtime_static_warnings(err, &archive))?
        } else {
            runner.run(&link)?
        };
        if let (0, Some(output)) = (code, &build.output) {
            lean::link(runner, user_link, output, tmp);
        }
        return Ok(code);
    }
    Ok(0)
}

fn env_flag(var: &str) -> bool {
    std::env::var_os(var).is_some_and(|v| !v.is_empty() && v != "0")
}

/// Runs the compiler, printing each command when verbose.
pub(super) struct Runner {
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
    pub(super) fn run_filtering_stderr(
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

    pub(super) fn verbose(&self) -> bool {
        self.verbose
    }

    pub(super) fn note(&self, msg: &str) {
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

/// Step 2, with a panic in the pass turned into an error naming the source.
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

/// Inline the edge counters of the optimised bitcode `covered`, in place.
fn inline_edges(source: &Path, covered: &Path) -> Result<(), DriverError> {
    inline_edge_counters_file(covered, covered)
        .map(drop)
        .map_err(|e| DriverError::Instrument {
            source_file: source.to_path_buf(),
            chain: format!("{:#}", anyhow::Error::from(e)),
        })
}

/// After optimisation: the branch table, the comparison-routine hooks and the edge
/// counters inlined ([`crate::edges`]), rewriting the bitcode file `input` into
/// `output`; the number of counter calls inlined.
fn inline_edge_counters_file(input: &Path, output: &Path) -> Result<usize, crate::pass::PassError> {
    let ctx = inkwell::context::Context::create();
    let bitcode_err = |msg: String| crate::pass::PassError::Bitcode {
        path: input.display().to_string(),
        msg,
    };
    let buf = inkwell::memory_buffer::MemoryBuffer::create_from_file(input)
        .map_err(|e| bitcode_err(e.to_string()))?;
    let module = inkwell::module::Module::parse_bitcode_from_buffer(&buf, &ctx)
        .map_err(|e| bitcode_err(e.to_string()))?;
    crate::branches::emit_branch_table(&module)?;
    crate::routines::hook_comparison_routines(&module)?;
    let n = crate::edges::inline_edge_counters(&module)?;
    module
        .verify()
        .map_err(|e| crate::pass::PassError::Verify(e.to_string()))?;
    if !module.write_bitcode_to_path(output) {
        return Err(crate::pass::PassError::Write(output.display().to_string()));
    }
    Ok(n)
}

//! The carving pass: instruments one LLVM module so that its runtime can record and
//! replay function invocations.
//!
//! [`instrument_module`] is the driver. One visitor per concern, each in its module:
//!
//! - `allocators` ([`rename_allocators`]): calls to `malloc` & co. go to the runtime's
//!   wrappers, so every heap extent is known.
//! - `exits` (`hook_exiting_reporters`): calls to `error`, `err` & co., which exit
//!   inside the C library, tell the runtime first.
//! - `analysis`: the globals to register and the functions to instrument, with the
//!   metadata the runtime reads about each, gathered before any rewriting.
//! - `function`: entry and return hooks with packed argument/return slots
//!   (`slots`), registration of stack allocations whose address escapes, and write
//!   counters for stores into globals.
//! - `thunk`: a replay thunk per function that unpacks a slot array into the real
//!   signature and calls it.
//! - `tables`: the function and global tables and the metadata blob, in the sections
//!   named by `trestle_abi::meta`.
//!
//! `runtime` declares the hooks they call; `ir` holds the raw LLVM queries they share.
//!
//! The pass runs on the unoptimised module (the driver asks clang for
//! `-disable-llvm-passes`): inlining has not happened yet, so every source function is
//! still there to be instrumented, and the hooks survive later inlining.

mod allocators;
mod analysis;
mod exits;
mod function;
mod ir;
mod runtime;
mod slots;
mod tables;
mod thunk;

use inkwell::builder::BuilderError;
use inkwell::memory_buffer::MemoryBuffer;
use inkwell::module::Module;
use inkwell::targets::TargetData;
use inkwell::values::AsValueRef;
use llvm_sys::prelude::LLVMValueRef;
use std::collections::HashMap;
use std::path::Path;

pub use allocators::rename_allocators;
use analysis::analyse;
pub(crate) use analysis::{file_path, is_local};
use function::FunctionInstrumenter;
pub(crate) use ir::{cstr, value_name};
use runtime::Runtime;
pub(crate) use tables::{add_to_llvm_used, table_global};
use tables::{emit_tables, make_counters};
use thunk::build_thunk;

/// What went wrong while instrumenting.
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    /// The input could not be read as bitcode.
    #[error("cannot read bitcode {path}: {msg}")]
    Bitcode {
        /// The file.
        path: String,
        /// LLVM's message.
        msg: String,
    },
    /// Building an instruction failed.
    #[error("building instrumentation: {0}")]
    Builder(#[from] BuilderError),
    /// The instrumented module does not verify: a bug in the pass.
    #[error("instrumented module fails verification (a trestle bug; please report it): {0}")]
    Verify(String),
    /// Writing the output failed.
    #[error("cannot write bitcode to {0}")]
    Write(String),
}

/// Counters of what the pass did to a module.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Functions instrumented.
    pub functions: usize,
    /// Of those, with a replay thunk.
    pub replayable: usize,
    /// Globals registered.
    pub globals: usize,
    /// Stack allocations registered (their address escapes).
    pub allocas: usize,
    /// Stores into globals counted.
    pub global_stores: usize,
    /// Allocator declarations redirected to the runtime.
    pub renamed_allocators: usize,
    /// Calls to C library error reporters that exit, hooked.
    pub exiting_reporters: usize,
}

/// Instrument the bitcode file `input` and write the result to `output`.
pub fn instrument_bitcode_file(input: &Path, output: &Path) -> Result<Stats, PassError> {
    let ctx = inkwell::context::Context::create();
    let bitcode_err = |msg: String| PassError::Bitcode {
        path: input.display().to_string(),
        msg,
    };
    let buf = MemoryBuffer::create_from_file(input).map_err(|e| bitcode_err(e.to_string()))?;
    let module =
        Module::parse_bitcode_from_buffer(&buf, &ctx).map_err(|e| bitcode_err(e.to_string()))?;
    let stats = instrument_module(&module)?;
    module
        .verify()
        .map_err(|e| PassError::Verify(e.to_string()))?;
    if !module.write_bitcode_to_path(output) {
        return Err(PassError::Write(output.display().to_string()));
    }
    Ok(stats)
}

/// Instrument `module` in place. See the module documentation for what is inserted.
pub fn instrument_module(module: &Module<'_>) -> Result<Stats, PassError> {
    let mut stats = Stats {
        renamed_allocators: rename_allocators(module),
        ..Stats::default()
    };
    let td = TargetData::create(&module.get_data_layout().as_str().to_string_lossy());
    let mut analysis = analyse(module, &td);
    let rt = Runtime::declare(module);
    let ctx = module.get_context();
    let builder = ctx.create_builder();
    stats.exiting_reporters = exits::hook_exiting_reporters(module, &builder)?;

    // One write counter per registered global, bumped inline by stores into it.
    let counters = make_counters(module, analysis.globals.len());
    let counter_index: HashMap<LLVMValueRef, u32> = analysis
        .globals
        .iter()
        .enumerate()
        .map(|(i, (g, _))| (g.as_value_ref(), i as u32))
        .collect();
    let instrumenter = FunctionInstrumenter {
        module,
        builder: &builder,
        rt: &rt,
        td: &td,
        counters,
        counter_index: &counter_index,
    };

    let mut thunks = Vec::new();
    for (function, meta) in analysis.functions.iter_mut() {
        let counted = instrumenter.instrument(*function, meta, &mut stats)?;
        stats.global_stores += counted;
        let thunk = if meta.replayable {
            Some(build_thunk(module, &builder, *function, meta)?)
        } else {
            None
        };
        if thunk.is_some() {
            stats.replayable += 1;
        }
        thunks.push(thunk);
        stats.functions += 1;
    }
    stats.globals = analysis.globals.len();
    emit_tables(module, &analysis, &thunks, counters)?;
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use inkwell::context::Context;
    use trestle_abi::hooks;
    use trestle_abi::meta::SECTION_META;

    #[test]
    fn packs_and_registers_a_small_module() {
        let ctx = Context::create();
        let ir = r#"
            source_filename = "t.c"
            @g = global i32 0
            @s = private constant [3 x i8] c"hi\00"
            declare ptr @malloc(i64)
            define i32 @f(ptr %p, i32 %n) {
              %buf = alloca [8 x i8]
              call void @use(ptr %buf)
              store i32 %n, ptr @g
              %m = call ptr @malloc(i64 4)
              ret i32 %n
            }
            declare void @use(ptr)
        "#;
        let buf = MemoryBuffer::create_from_memory_range_copy(ir.as_bytes(), "t");
        let module = ctx.create_module_from_ir(buf).unwrap();
        let stats = instrument_module(&module).unwrap();
        module.verify().unwrap();
        assert_eq!(stats.functions, 1);
        assert_eq!(stats.replayable, 1);
        assert_eq!(stats.globals, 2);
        assert_eq!(stats.allocas, 1);
        assert_eq!(stats.global_stores, 1);
        assert_eq!(stats.renamed_allocators, 1);
        let text = module.print_to_string().to_string();
        assert!(text.contains("call ptr @__trestle_malloc"), "{text}");
        assert!(
            text.contains(&format!("section \"{SECTION_META}\"")),
            "{text}"
        );
        assert!(
            text.contains(&format!("@{}", hooks::THUNK_PREFIX)),
            "{text}"
        );
    }

    #[test]
    fn calls_to_error_reporters_that_exit_tell_the_runtime_first() {
        let ctx = Context::create();
        let ir = r#"
            source_filename = "t.c"
            @fmt = private constant [3 x i8] c"%s\00"
            declare void @error(i32, i32, ptr, ...)
            declare void @errx(i32, ptr, ...)
            define void @f(i32 %status, ptr %name) {
              call void (i32, i32, ptr, ...) @error(i32 %status, i32 2, ptr @fmt, ptr %name)
              call void (i32, ptr, ...) @errx(i32 0, ptr @fmt, ptr %name)
              ret void
            }
        "#;
        let buf = MemoryBuffer::create_from_memory_range_copy(ir.as_bytes(), "t");
        let module = ctx.create_module_from_ir(buf).unwrap();
        let stats = instrument_module(&module).unwrap();
        module.verify().unwrap();
        assert_eq!(stats.exiting_reporters, 2);
        let text = module.print_to_string().to_string();
        let hook = |args: &str| text.find(&format!("call void @{}({args})", hooks::EXITS_WITH));
        let error = text
            .find("@error(i32 %status")
            .expect("the error call stays");
        let errx = text.find("@errx(i32 0").expect("the errx call stays");
        let before_error =
            hook("i32 %status, i32 0").unwrap_or_else(|| panic!("no hook before error: {text}"));
        let before_errx =
            hook("i32 0, i32 1").unwrap_or_else(|| panic!("no hook before errx: {text}"));
        assert!(
            before_error < error && before_errx < errx && error < before_errx,
            "each hook right before its call: {text}"
        );
    }
}

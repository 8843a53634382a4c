//! Exits the C library makes on the program's behalf: a call to `error(1, ...)` or
//! `err(...)` reports and then calls `exit` inside the C library, where the renamed
//! `exit` cannot see it. Each such call gets a call to the runtime's
//! [`hooks::EXITS_WITH`] just before it, with the status it would exit with.
//!
//! ```text
//! before:  call void (i32, i32, ptr, ...) @error(i32 1, i32 %e, ptr @fmt, ptr %name)
//! after:   call void @__trestle_exits_with(i32 1, i32 0)
//!          call void (i32, i32, ptr, ...) @error(i32 1, i32 %e, ptr @fmt, ptr %name)
//! ```

use inkwell::builder::{Builder, BuilderError};
use inkwell::module::Module;
use inkwell::values::{AsValueRef, InstructionOpcode};
use llvm_sys::core as llc;
use trestle_abi::hooks;

/// Put the hook in front of every call to an exiting error reporter the module
/// declares (a program that defines its own `error` keeps it unhooked). Returns the
/// number of calls hooked.
pub(super) fn hook_exiting_reporters<'ctx>(
    module: &Module<'ctx>,
    builder: &Builder<'ctx>,
) -> Result<usize, BuilderError> {
    let reporters: Vec<_> = hooks::EXITING_REPORTERS
        .iter()
        .filter_map(|(name, always)| {
            module
                .get_function(name)
                .filter(|f| f.count_basic_blocks() == 0)
                .map(|f| (f, *always))
        })
        .collect();
    if reporters.is_empty() {
        return Ok(0);
    }
    let ctx = module.get_context();
    let i32t = ctx.i32_type();
    let hook = module.get_function(hooks::EXITS_WITH).unwrap_or_else(|| {
        module.add_function(
            hooks::EXITS_WITH,
            ctx.void_type().fn_type(&[i32t.into(), i32t.into()], false),
            None,
        )
    });
    let mut sites = Vec::new();
    for f in module
        .get_functions()
        .filter(|f| f.count_basic_blocks() > 0)
    {
        for bb in f.get_basic_blocks() {
            for inst in bb.get_instructions() {
                if !matches!(
                    inst.get_opcode(),
                    InstructionOpcode::Call | InstructionOpcode::Invoke
                ) {
                    continue;
                }
                // SAFETY: queries on a live call instruction.
                let (callee, status) = unsafe {
                    let v = inst.as_value_ref();
                    (
                        llc::LLVMGetCalledValue(v),
                        (llc::LLVMGetNumArgOperands(v) > 0).then(|| llc::LLVMGetOperand(v, 0)),
                    )
                };
                let Some((_, always)) = reporters.iter().find(|(r, _)| r.as_value_ref() == callee)
                else {
                    continue;
                };
                let Some(status) = status else { continue };
                // SAFETY: `status` is a live operand; its type decides whether it is the `int` expected.
                let is_i32 = unsafe {
                    let ty = llc::LLVMTypeOf(status);
                    llc::LLVMGetTypeKind(ty) == llvm_sys::LLVMTypeKind::LLVMIntegerTypeKind
                        && llc::LLVMGetIntTypeWidth(ty) == 32
                };
                if is_i32 {
                    sites.push((inst, status, *always));
                }
            }
        }
    }
    for (inst, status, always) in &sites {
        builder.position_before(inst);
        // SAFETY: `status` is a live i32 value of this module.
        let status = unsafe { inkwell::values::IntValue::new(*status) };
        builder.build_call(
            hook,
            &[
                status.into(),
                i32t.const_int(u64::from(*always), false).into(),
            ],
            "",
        )?;
    }
    Ok(sites.len())
}

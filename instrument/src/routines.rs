//! CmpLog for comparison routines. SanitizerCoverage's `trace-cmp` logs integer
//! comparisons only; a program that compares its input with `strcmp(user, "admin")`
//! or `memcmp(magic, "\x7fELF", 4)` shows the fuzzers nothing to copy. As AFL++'s
//! CmpLog does for routines, every direct call to a string or memory comparison
//! routine gets a call to [`CMP_ROUTINE_HOOK`] right before it, with a fixed id and
//! the same pointers (and length), so input-to-state replacement can write one
//! operand where the input holds the other.

use crate::pass::PassError;
use inkwell::module::Module;
use inkwell::values::{
    AsValueRef as _, BasicMetadataValueEnum, BasicValueEnum, InstructionOpcode, InstructionValue,
    PointerValue,
};
use inkwell::AddressSpace;
use llvm_sys::core as llc;
use llvm_sys::prelude::LLVMValueRef;
use trestle_abi::branches::{routine_cmp_id, CMP_ROUTINE_HOOK, CMP_ROUTINE_STRING};

/// How a routine's operands are read: C strings to their end, or a count of bytes
/// given as its third argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operands {
    Strings,
    /// C strings compared up to a bound, the third argument.
    BoundedStrings,
    /// Bytes, as many as the third argument says.
    Counted,
}

/// The comparison routines hooked, by name.
fn routine(name: &str) -> Option<Operands> {
    Some(match name {
        "strcmp" | "strcasecmp" | "strcoll" => Operands::Strings,
        "strncmp" | "strncasecmp" => Operands::BoundedStrings,
        "memcmp" | "bcmp" => Operands::Counted,
        _ => return None,
    })
}

/// The direct calls to comparison routines in `module`, in the order of its code.
fn routine_calls(module: &Module<'_>) -> Vec<(LLVMValueRef, Operands)> {
    let mut calls = Vec::new();
    for f in module.get_functions() {
        for block in f.get_basic_blocks() {
            let mut next = block.get_first_instruction();
            while let Some(inst) = next {
                next = inst.get_next_instruction();
                if inst.get_opcode() != InstructionOpcode::Call {
                    continue;
                }
                // SAFETY: the callee of a live call; a function's name when it is one.
                let kind = unsafe {
                    let callee = llc::LLVMGetCalledValue(inst.as_value_ref());
                    if llc::LLVMIsAFunction(callee).is_null() {
                        continue;
                    }
                    let mut len = 0;
                    let name = llc::LLVMGetValueName2(callee, &mut len);
                    routine(&String::from_utf8_lossy(std::slice::from_raw_parts(
                        name.cast::<u8>(),
                        len,
                    )))
                };
                if let Some(kind) = kind {
                    calls.push((inst.as_value_ref(), kind));
                }
            }
        }
    }
    calls
}

/// Put a [`CMP_ROUTINE_HOOK`] call before every direct call to a comparison routine
/// in `module`; the number of calls hooked.
pub fn hook_comparison_routines(module: &Module<'_>) -> Result<usize, PassError> {
    let calls = routine_calls(module);
    if calls.is_empty() {
        return Ok(0);
    }
    let module_name = crate::pass::cstr(module.get_source_file_name());
    let ctx = module.get_context();
    let (i64t, ptr) = (ctx.i64_type(), ctx.ptr_type(AddressSpace::default()));
    let hook = module.get_function(CMP_ROUTINE_HOOK).unwrap_or_else(|| {
        let ty = ctx
            .void_type()
            .fn_type(&[i64t.into(), ptr.into(), ptr.into(), i64t.into()], false);
        module.add_function(
            CMP_ROUTINE_HOOK,
            ty,
            Some(inkwell::module::Linkage::External),
        )
    });
    let builder = ctx.create_builder();
    let mut hooked = 0;
    for (index, &(call, kind)) in calls.iter().enumerate() {
        // SAFETY: operands and types of a live call instruction.
        let operand = |k: u32| unsafe { llc::LLVMGetOperand(call, k) };
        let is_ptr = |v| unsafe {
            llc::LLVMGetTypeKind(llc::LLVMTypeOf(v)) == llvm_sys::LLVMTypeKind::LLVMPointerTypeKind
        };
        let args = unsafe { llc::LLVMGetNumArgOperands(call) };
        if args < 2
            || !is_ptr(operand(0))
            || !is_ptr(operand(1))
            || (kind != Operands::Strings && args < 3)
        {
            continue; // a function of that name that is not the C library's routine
        }
        // SAFETY: `call` is a live instruction.
        builder.position_before(&unsafe { InstructionValue::new(call) });
        let n = match kind {
            Operands::Strings => {
                i64t.const_int(CMP_ROUTINE_STRING | (CMP_ROUTINE_STRING - 1), false)
            }
            Operands::BoundedStrings | Operands::Counted => {
                // SAFETY: operand 2 of a live call is a live value.
                let BasicValueEnum::IntValue(v) = (unsafe { BasicValueEnum::new(operand(2)) })
                else {
                    continue;
                };
                let count = builder.build_int_z_extend_or_bit_cast(v, i64t, "")?;
                if kind == Operands::Counted {
                    count
                } else {
                    // A bound of 2^63 or more is no bound: the string's NUL ends it first.
                    builder.build_or(count, i64t.const_int(CMP_ROUTINE_STRING, false), "")?
                }
            }
        };
        // SAFETY: operands 0 and 1 are pointers (checked above).
        let (a, b) = unsafe { (PointerValue::new(operand(0)), PointerValue::new(operand(1))) };
        let id = i64t.const_int(u64::from(routine_cmp_id(&module_name, index as u32)), false);
        let hook_args: [BasicMetadataValueEnum<'_>; 4] = [id.into(), a.into(), b.into(), n.into()];
        builder.build_call(hook, &hook_args, "")?;
        hooked += 1;
    }
    Ok(hooked)
}

//! Edge counters inline. SanitizerCoverage's `trace-pc-guard` mode calls
//! `__sanitizer_cov_trace_pc_guard(guard)` on every edge, and the runtime's callback
//! does no more than `__afl_area_ptr[*guard] += 1` (the guards are numbered when the
//! module loads). A call per edge is a large part of what instrumentation costs in
//! loop-heavy code: GNU sed spent a tenth of its time in that callback. After the
//! optimiser (and SanitizerCoverage) ran, [`inline_edge_counters`] replaces each call
//! with those few instructions, as AFL++'s own instrumentation emits them.
//!
//! The guards, their numbering and the map the counters go to stay the runtime's;
//! only the call is gone. A module without the callback is left as it is.

use crate::pass::PassError;
use inkwell::module::{Linkage, Module};
use inkwell::values::{AsValueRef as _, InstructionOpcode, InstructionValue, PointerValue};
use inkwell::AddressSpace;
use llvm_sys::core as llc;
use trestle_abi::hooks::{EDGE_CALLBACK, EDGE_MAP_POINTER};

/// The calls to the edge callback in `module`.
pub(crate) fn callback_calls<'ctx>(module: &Module<'ctx>) -> Vec<InstructionValue<'ctx>> {
    let Some(callback) = module.get_function(EDGE_CALLBACK) else {
        return Vec::new();
    };
    let mut calls = Vec::new();
    // SAFETY: walking the use list of a live function; each user is a live value.
    unsafe {
        let mut u = llc::LLVMGetFirstUse(callback.as_value_ref());
        while !u.is_null() {
            let user = llc::LLVMGetUser(u);
            if !llc::LLVMIsACallInst(user).is_null()
                && llc::LLVMGetCalledValue(user) == callback.as_value_ref()
            {
                calls.push(InstructionValue::new(user));
            }
            u = llc::LLVMGetNextUse(u);
        }
    }
    calls
}

/// Replace every call to the edge callback in `module` by its body, inline.
pub fn inline_edge_counters(module: &Module<'_>) -> Result<usize, PassError> {
    let calls = callback_calls(module);
    if calls.is_empty() {
        return Ok(0);
    }
    let ctx = module.get_context();
    let (i8t, i32t, i64t) = (ctx.i8_type(), ctx.i32_type(), ctx.i64_type());
    let ptr = ctx.ptr_type(AddressSpace::default());
    let map_ptr = module.get_global(EDGE_MAP_POINTER).unwrap_or_else(|| {
        let g = module.add_global(ptr, None, EDGE_MAP_POINTER);
        g.set_linkage(Linkage::External);
        g
    });
    let builder = ctx.create_builder();
    for call in &calls {
        builder.position_before(call);
        // SAFETY: operand 0 of a call to the callback is its guard pointer.
        let guard = unsafe { PointerValue::new(llc::LLVMGetOperand(call.as_value_ref(), 0)) };
        let index = builder
            .build_load(i32t, guard, "edge.index")?
            .into_int_value();
        let index = builder.build_int_z_extend(index, i64t, "")?;
        let map = builder
            .build_load(ptr, map_ptr.as_pointer_value(), "edge.map")?
            .into_pointer_value();
        // SAFETY: the guard's number is below the map's size (the runtime's promise).
        let counter = unsafe { builder.build_in_bounds_gep(i8t, map, &[index], "edge.counter")? };
        let old = builder.build_load(i8t, counter, "")?.into_int_value();
        let new = builder.build_int_add(old, i8t.const_int(1, false), "")?;
        builder.build_store(counter, new)?;
        debug_assert_eq!(call.get_opcode(), InstructionOpcode::Call);
        call.erase_from_basic_block();
    }
    Ok(calls.len())
}

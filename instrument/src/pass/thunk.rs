//! Replay thunks: for each replayable function, one that unpacks a slot array into the
//! real signature and calls it.

use inkwell::attributes::AttributeLoc;
use inkwell::basic_block::BasicBlock;
use inkwell::builder::{Builder, BuilderError};
use inkwell::module::{Linkage, Module};
use inkwell::values::{BasicMetadataValueEnum, BasicValueEnum, FunctionValue};
use inkwell::AddressSpace;
use trestle_abi::hooks;
use trestle_abi::meta::{FnMeta, ValueKind};

use super::slots::{pack, slot_ptr, store_fields, unpack};
use super::PassError;

/// The personality function of C++ code: a module that declares it may throw.
const CXX_PERSONALITY: &str = "__gxx_personality_v0";

/// In `thunk`, call `f(args)` so that an exception it lets escape ends the unit like a
/// return does (the runtime hears of it) instead of unwinding into the runtime:
///
/// ```text
///   %r = invoke @f(args) to label %returned unwind label %threw
/// threw:
///   %pad = landingpad { ptr, i32 } catch ptr null
///   call @__cxa_begin_catch(%pad.0); call @__trestle_unit_threw(); call @__cxa_end_catch()
///   ret i64 0
/// returned:                          ; the builder is left here
/// ```
fn invoke_catching_all<'ctx>(
    module: &Module<'ctx>,
    builder: &Builder<'ctx>,
    thunk: FunctionValue<'ctx>,
    personality: FunctionValue<'ctx>,
    f: FunctionValue<'ctx>,
    args: &[BasicValueEnum<'ctx>],
) -> Result<inkwell::values::CallSiteValue<'ctx>, BuilderError> {
    let ctx = module.get_context();
    let ptr = ctx.ptr_type(AddressSpace::default());
    let void = ctx.void_type();
    let declare = |name: &str, ty: inkwell::types::FunctionType<'ctx>| {
        module
            .get_function(name)
            .unwrap_or_else(|| module.add_function(name, ty, None))
    };
    let normal = ctx.append_basic_block(thunk, "returned");
    let caught = ctx.append_basic_block(thunk, "threw");
    let call = builder.build_invoke(f, args, normal, caught, "")?;
    builder.position_at_end(caught);
    thunk.set_personality_function(personality);
    let pad_ty = ctx.struct_type(&[ptr.into(), ctx.i32_type().into()], false);
    let pad =
        builder.build_landing_pad(pad_ty, personality, &[ptr.const_null().into()], false, "")?;
    let exn = builder.build_extract_value(pad.into_struct_value(), 0, "")?;
    builder.build_call(
        declare("__cxa_begin_catch", ptr.fn_type(&[ptr.into()], false)),
        &[exn.into()],
        "",
    )?;
    builder.build_call(
        declare(hooks::UNIT_THREW, void.fn_type(&[], false)),
        &[],
        "",
    )?;
    builder.build_call(
        declare("__cxa_end_catch", void.fn_type(&[], false)),
        &[],
        "",
    )?;
    builder.build_return(Some(&ctx.i64_type().const_zero()))?;
    builder.position_at_end(normal);
    Ok(call)
}

/// Build `i64 @__trestle_thunk.ID(ptr %slots)`: unpack each slot into the parameter's
/// type, call the function with the same parameter attributes (`byval`, `sret`, …)
/// and calling convention, and pack its return value. In a C++ module the call is an
/// invoke that catches any exception and tells the runtime ([`hooks::UNIT_THREW`]).
pub(super) fn build_thunk<'ctx>(
    module: &Module<'ctx>,
    builder: &Builder<'ctx>,
    f: FunctionValue<'ctx>,
    meta: &FnMeta,
) -> Result<FunctionValue<'ctx>, PassError> {
    let ctx = module.get_context();
    let i64t = ctx.i64_type();
    let ptr = ctx.ptr_type(AddressSpace::default());
    let thunk = module.add_function(
        &format!("{}{:016x}", hooks::THUNK_PREFIX, meta.id),
        i64t.fn_type(&[ptr.into()], false),
        Some(Linkage::Internal),
    );
    let bb: BasicBlock = ctx.append_basic_block(thunk, "entry");
    builder.position_at_end(bb);
    let slots = thunk
        .get_first_param()
        .expect("thunk has one parameter")
        .into_pointer_value();
    let nslots = meta.params.len().max(1) as u32;
    let arr_ty = i64t.array_type(nslots);
    let mut args: Vec<BasicValueEnum> = Vec::new();
    let fixed = f.get_params();
    for (i, pm) in meta.params.iter().enumerate() {
        let sp = slot_ptr(builder, arr_ty, slots, i as u64)?;
        let raw = builder.build_load(i64t, sp, "")?.into_int_value();
        // Past the fixed parameters: a variadic function's variable argument words.
        let ty = match fixed.get(i) {
            Some(p) => p.get_type(),
            None if pm.kind == ValueKind::Double => ctx.f64_type().into(),
            None => i64t.into(),
        };
        args.push(unpack(builder, raw, ty, pm.kind)?);
    }
    let call = match module.get_function(CXX_PERSONALITY) {
        Some(personality) => invoke_catching_all(module, builder, thunk, personality, f, &args)?,
        None => {
            let margs: Vec<BasicMetadataValueEnum> = args.iter().map(|&a| a.into()).collect();
            builder.build_call(f, &margs, "")?
        }
    };
    call.set_call_convention(f.get_call_conventions());
    // Keep the function out of its thunk: a crash in a unit must show the function's
    // own frame (the thunk has no debug info, so an inlined copy would be nameless).
    let noinline = inkwell::attributes::Attribute::get_named_enum_kind_id("noinline");
    call.add_attribute(
        AttributeLoc::Function,
        ctx.create_enum_attribute(noinline, 0),
    );
    for i in 0..fixed.len() as u32 {
        for a in f.attributes(AttributeLoc::Param(i)) {
            call.add_attribute(AttributeLoc::Param(i), a);
        }
    }
    for a in f.attributes(AttributeLoc::Return) {
        call.add_attribute(AttributeLoc::Return, a);
    }
    // A returned aggregate goes into the slots (the runtime makes them large enough)
    // and the thunk returns their address.
    let ret = match (call.try_as_basic_value(), meta.ret) {
        (inkwell::values::ValueKind::Basic(v), ValueKind::Aggregate(size)) => {
            // Zeroed first: padding must read as it does in the recording.
            builder.build_memset(
                slots,
                8,
                ctx.i8_type().const_zero(),
                i64t.const_int(u64::from(size), false),
            )?;
            store_fields(builder, slots, v)?;
            builder.build_ptr_to_int(slots, i64t, "")?
        }
        (inkwell::values::ValueKind::Basic(v), kind) => pack(builder, v, kind)?,
        (inkwell::values::ValueKind::Instruction(_), _) => i64t.const_zero(),
    };
    builder.build_return(Some(&ret))?;
    Ok(thunk)
}

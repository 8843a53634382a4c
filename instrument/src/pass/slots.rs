//! The 64-bit slots the hooks and thunks exchange values in: packing a value into a
//! slot, unpacking it back, and storing aggregates field by field.

use inkwell::builder::{Builder, BuilderError};
use inkwell::types::{ArrayType, BasicTypeEnum};
use inkwell::values::{BasicValueEnum, IntValue, PointerValue};
use trestle_abi::meta::ValueKind;

use super::ir::builder_ctx;

/// Pack a value into a 64-bit slot.
pub(super) fn pack<'ctx>(
    builder: &Builder<'ctx>,
    v: BasicValueEnum<'ctx>,
    kind: ValueKind,
) -> Result<IntValue<'ctx>, BuilderError> {
    let i64t = builder_ctx(builder).i64_type();
    Ok(match (kind, v) {
        (ValueKind::Int(64) | ValueKind::Word, BasicValueEnum::IntValue(i)) => i,
        (ValueKind::Int(_), BasicValueEnum::IntValue(i)) => {
            builder.build_int_z_extend(i, i64t, "")?
        }
        (ValueKind::Ptr, BasicValueEnum::PointerValue(p)) => {
            builder.build_ptr_to_int(p, i64t, "")?
        }
        (ValueKind::Double, BasicValueEnum::FloatValue(f)) => {
            builder.build_bit_cast(f, i64t, "")?.into_int_value()
        }
        (ValueKind::Float, BasicValueEnum::FloatValue(f)) => {
            let bits = builder
                .build_bit_cast(f, i64t.get_context().i32_type(), "")?
                .into_int_value();
            builder.build_int_z_extend(bits, i64t, "")?
        }
        _ => i64t.const_zero(),
    })
}

/// Unpack a 64-bit slot into a value of type `ty`.
pub(super) fn unpack<'ctx>(
    builder: &Builder<'ctx>,
    slot: IntValue<'ctx>,
    ty: BasicTypeEnum<'ctx>,
    kind: ValueKind,
) -> Result<BasicValueEnum<'ctx>, BuilderError> {
    let ctx = slot.get_type().get_context();
    Ok(match (kind, ty) {
        (ValueKind::Int(64) | ValueKind::Word, _) => slot.into(),
        (ValueKind::Int(_), BasicTypeEnum::IntType(t)) => {
            builder.build_int_truncate(slot, t, "")?.into()
        }
        (ValueKind::Ptr, BasicTypeEnum::PointerType(t)) => {
            builder.build_int_to_ptr(slot, t, "")?.into()
        }
        (ValueKind::Double, t) => builder.build_bit_cast(slot, t, "")?,
        (ValueKind::Float, t) => {
            let bits = builder.build_int_truncate(slot, ctx.i32_type(), "")?;
            builder.build_bit_cast(bits, t, "")?
        }
        (_, t) => t.const_zero(),
    })
}

pub(super) fn slot_ptr<'ctx>(
    builder: &Builder<'ctx>,
    arr_ty: ArrayType<'ctx>,
    base: PointerValue<'ctx>,
    i: u64,
) -> Result<PointerValue<'ctx>, BuilderError> {
    let i64t = arr_ty.get_context().i64_type();
    // SAFETY: `i` is within the array by construction.
    unsafe {
        builder.build_in_bounds_gep(
            arr_ty,
            base,
            &[i64t.const_zero(), i64t.const_int(i, false)],
            "",
        )
    }
}

/// Store `v` at `p` member by member: a store of a whole struct leaves its padding
/// undefined, so the optimiser would drop the zeroing before it.
///
/// ```text
/// store { i32, ptr } %v, ptr %p   =>   store i32 (extractvalue %v, 0), ptr %p
///                                      store ptr (extractvalue %v, 1), ptr (gep %p, 0, 1)
/// ```
pub(super) fn store_fields<'ctx>(
    builder: &Builder<'ctx>,
    p: PointerValue<'ctx>,
    v: BasicValueEnum<'ctx>,
) -> Result<(), BuilderError> {
    let ty = v.get_type();
    let count = match ty {
        BasicTypeEnum::StructType(t) => t.count_fields(),
        BasicTypeEnum::ArrayType(t) => t.len(),
        _ => {
            builder.build_store(p, v)?;
            return Ok(());
        }
    };
    let i32t = builder_ctx(builder).i32_type();
    for i in 0..count {
        let field = match v {
            BasicValueEnum::StructValue(s) => builder.build_extract_value(s, i, "")?,
            BasicValueEnum::ArrayValue(a) => builder.build_extract_value(a, i, "")?,
            _ => unreachable!("an aggregate type has an aggregate value"),
        };
        // SAFETY: member `i` of the aggregate `p` points to.
        let at = unsafe {
            builder.build_in_bounds_gep(
                ty,
                p,
                &[i32t.const_zero(), i32t.const_int(u64::from(i), false)],
                "",
            )?
        };
        store_fields(builder, at, field)?;
    }
    Ok(())
}

pub(super) fn aggregate_size(kind: ValueKind) -> u32 {
    match kind {
        ValueKind::Aggregate(size) => size,
        _ => 0,
    }
}

//! The function and global tables and the metadata blob, in the sections named by
//! `trestle_abi::meta`, and the write counters the global table points to.

use inkwell::context::ContextRef;
use inkwell::module::{Linkage, Module};
use inkwell::types::BasicType;
use inkwell::values::{AsValueRef, BasicValue, FunctionValue, GlobalValue, PointerValue};
use inkwell::AddressSpace;
use llvm_sys::core as llc;
use trestle_abi::meta::{
    encode_module_meta, ModuleMeta, META_VERSION, SECTION_FUNCS, SECTION_GLOBALS, SECTION_META,
};

use super::analysis::Analysis;
use super::PassError;

/// One write counter per registered global, which the instrumented functions bump.
pub(super) fn make_counters<'ctx>(module: &Module<'ctx>, n: usize) -> Option<GlobalValue<'ctx>> {
    if n == 0 {
        return None;
    }
    let i64t = module.get_context().i64_type();
    let ty = i64t.array_type(n as u32);
    let g = module.add_global(ty, None, "__trestle_global_writes");
    g.set_linkage(Linkage::Internal);
    g.set_initializer(&ty.const_zero());
    Some(g)
}

/// Emit the function table, the global table and the metadata blob, and keep all
/// three alive through `llvm.used`.
pub(super) fn emit_tables<'ctx>(
    module: &Module<'ctx>,
    analysis: &Analysis<'ctx>,
    thunks: &[Option<FunctionValue<'ctx>>],
    counters: Option<GlobalValue<'ctx>>,
) -> Result<(), PassError> {
    let ctx: ContextRef<'ctx> = module.get_context();
    let i64t = ctx.i64_type();
    let ptr = ctx.ptr_type(AddressSpace::default());
    let mut used: Vec<PointerValue<'ctx>> = Vec::new();

    let fn_ty = ctx.struct_type(&[i64t.into(), ptr.into(), ptr.into()], false);
    let rows: Vec<_> = analysis
        .functions
        .iter()
        .zip(thunks)
        .map(|((f, m), t)| {
            let thunk = t.map_or(ptr.const_null(), |t| t.as_global_value().as_pointer_value());
            fn_ty.const_named_struct(&[
                i64t.const_int(m.id, false).into(),
                f.as_global_value().as_pointer_value().into(),
                thunk.into(),
            ])
        })
        .collect();
    if !rows.is_empty() {
        used.push(table_global(
            module,
            fn_ty.array_type(rows.len() as u32),
            &fn_ty.const_array(&rows),
            "__trestle_funcs",
            SECTION_FUNCS,
            8,
        ));
    }

    // Globals table: id, address, size, flags, write counter.
    let g_ty = ctx.struct_type(
        &[
            i64t.into(),
            ptr.into(),
            i64t.into(),
            i64t.into(),
            ptr.into(),
        ],
        false,
    );
    let arr_ty = i64t.array_type(analysis.globals.len().max(1) as u32);
    let mut grows = Vec::new();
    for (i, (g, m)) in analysis.globals.iter().enumerate() {
        let counter = match counters {
            Some(c) => {
                // SAFETY: `i` indexes the counter array, which has one slot per global.
                unsafe {
                    c.as_pointer_value().const_in_bounds_gep(
                        arr_ty,
                        &[i64t.const_zero(), i64t.const_int(i as u64, false)],
                    )
                }
            }
            None => ptr.const_null(),
        };
        let flags = if m.constant {
            trestle_abi::meta::GLOBAL_CONSTANT
        } else {
            0
        };
        grows.push(g_ty.const_named_struct(&[
            i64t.const_int(m.id, false).into(),
            g.as_pointer_value().into(),
            i64t.const_int(m.size, false).into(),
            i64t.const_int(flags, false).into(),
            counter.into(),
        ]));
    }
    if !grows.is_empty() {
        used.push(table_global(
            module,
            g_ty.array_type(grows.len() as u32),
            &g_ty.const_array(&grows),
            "__trestle_globals",
            SECTION_GLOBALS,
            8,
        ));
    }

    let meta = ModuleMeta {
        version: META_VERSION,
        module: analysis.module_name.clone(),
        functions: analysis.functions.iter().map(|(_, m)| m.clone()).collect(),
        globals: analysis.globals.iter().map(|(_, m)| m.clone()).collect(),
        address_taken: analysis.address_taken.clone(),
    };
    let blob = encode_module_meta(&meta);
    let blob_val = ctx.const_string(&blob, false);
    used.push(table_global(
        module,
        blob_val.get_type(),
        &blob_val,
        "__trestle_meta",
        SECTION_META,
        1,
    ));

    add_to_llvm_used(module, &used);
    Ok(())
}

pub(crate) fn table_global<'ctx, T: BasicType<'ctx>>(
    module: &Module<'ctx>,
    ty: T,
    init: &dyn BasicValue<'ctx>,
    name: &str,
    section: &str,
    align: u32,
) -> PointerValue<'ctx> {
    let g = module.add_global(ty, None, name);
    g.set_linkage(Linkage::Internal);
    g.set_initializer(init);
    g.set_section(Some(section));
    g.set_alignment(align);
    g.as_pointer_value()
}

/// Append `values` to `@llvm.used`, keeping whatever it held.
pub(crate) fn add_to_llvm_used<'ctx>(module: &Module<'ctx>, values: &[PointerValue<'ctx>]) {
    let ctx = module.get_context();
    let ptr = ctx.ptr_type(AddressSpace::default());
    let mut all: Vec<PointerValue<'ctx>> = Vec::new();
    if let Some(old) = module.get_global("llvm.used") {
        if let Some(init) = old.get_initializer() {
            let iref = init.as_value_ref();
            // SAFETY: the initializer of llvm.used is an array of pointers.
            unsafe {
                for k in 0..llc::LLVMGetNumOperands(iref) {
                    all.push(PointerValue::new(llc::LLVMGetOperand(iref, k as u32)));
                }
            }
        }
        // SAFETY: llvm.used has no uses besides being named.
        unsafe { old.delete() };
    }
    all.extend_from_slice(values);
    let arr = ptr.const_array(&all);
    let g = module.add_global(arr.get_type(), None, "llvm.used");
    g.set_linkage(Linkage::Appending);
    g.set_section(Some("llvm.metadata"));
    g.set_initializer(&arr);
}

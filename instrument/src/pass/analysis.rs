//! What the pass learns about a module before rewriting it: the globals to register,
//! the functions to instrument, and the metadata the runtime reads about each
//! ([`FnMeta`], [`GlobalMeta`]).

use inkwell::attributes::AttributeLoc;
use inkwell::module::{Linkage, Module};
use inkwell::targets::TargetData;
use inkwell::types::{AnyType, AnyTypeEnum, BasicTypeEnum};
use inkwell::values::{AsValueRef, FunctionValue, GlobalValue, InstructionOpcode};
use llvm_sys::core as llc;
use llvm_sys::debuginfo as lldi;
use llvm_sys::prelude::LLVMValueRef;
use std::collections::{BTreeSet, HashMap};
use trestle_abi::hooks;
use trestle_abi::ids::symbol_id;
use trestle_abi::meta::{
    FnMeta, GlobalMeta, ParamMeta, ValueKind, VA_FP_WORDS, VA_GP_WORDS, VA_STACK_WORDS,
};

use super::ir::{cstr, is_call_base, users, value_name};

/// Per-module facts gathered before any rewriting.
pub(super) struct Analysis<'ctx> {
    pub(super) module_name: String,
    /// Defined globals to register, with their metadata.
    pub(super) globals: Vec<(GlobalValue<'ctx>, GlobalMeta)>,
    /// Functions to instrument, with their metadata.
    pub(super) functions: Vec<(FunctionValue<'ctx>, FnMeta)>,
    /// Ids of declared functions whose address this module takes.
    pub(super) address_taken: Vec<u64>,
}

pub(crate) fn is_local(linkage: Linkage) -> bool {
    matches!(linkage, Linkage::Private | Linkage::Internal)
}

fn value_kind(ty: AnyTypeEnum<'_>) -> ValueKind {
    match ty {
        AnyTypeEnum::VoidType(_) => ValueKind::Void,
        AnyTypeEnum::IntType(t) if t.get_bit_width() <= 64 => {
            ValueKind::Int(t.get_bit_width() as u16)
        }
        AnyTypeEnum::PointerType(_) => ValueKind::Ptr,
        AnyTypeEnum::FloatType(t) => {
            let ctx = t.get_context();
            if t == ctx.f32_type() {
                ValueKind::Float
            } else if t == ctx.f64_type() {
                ValueKind::Double
            } else {
                ValueKind::Unsupported
            }
        }
        _ => ValueKind::Unsupported,
    }
}

fn enum_kind(name: &str) -> u32 {
    inkwell::attributes::Attribute::get_named_enum_kind_id(name)
}

/// Parameter attributes that change how an argument is passed in ways a thunk cannot
/// reproduce from a 64-bit slot.
const UNREPLAYABLE_PARAM_ATTRS: &[&str] = &[
    "inalloca",
    "preallocated",
    "swifterror",
    "swiftself",
    "swiftasync",
];

pub(super) fn analyse<'ctx>(module: &Module<'ctx>, td: &TargetData) -> Analysis<'ctx> {
    let module_name = cstr(module.get_source_file_name());
    let triple = module.get_triple();
    let triple = triple.as_str().to_string_lossy();
    // Variable arguments are recorded the way the System V x86-64 convention passes them.
    let sysv_x86_64 = triple.starts_with("x86_64") && !triple.contains("windows");
    let mut global_ids = HashMap::new();
    let mut globals = Vec::new();
    let mut g = module.get_first_global();
    while let Some(gv) = g {
        g = gv.get_next_global();
        let name = cstr(gv.get_name());
        if name.starts_with("llvm.") || name.starts_with(hooks::RESERVED_PREFIX) {
            continue;
        }
        let local = is_local(gv.get_linkage());
        let id = symbol_id(&module_name, &name, local);
        global_ids.insert(gv.as_value_ref(), id);
        if gv.is_declaration()
            || gv.is_thread_local()
            || gv.get_linkage() == Linkage::AvailableExternally
        {
            continue;
        }
        let size = td.get_abi_size(&gv.get_value_type());
        if size == 0 {
            continue;
        }
        let constant = gv.is_constant();
        let text = if constant { c_string_text(gv) } else { None };
        globals.push((
            gv,
            GlobalMeta {
                id,
                name,
                size,
                constant,
                local,
                text,
            },
        ));
    }

    let mut functions = Vec::new();
    let mut address_taken_elsewhere = Vec::new();
    let mut f = module.get_first_function();
    while let Some(fv) = f {
        f = fv.get_next_function();
        let name = cstr(fv.get_name());
        if fv.count_basic_blocks() == 0
            && !name.starts_with("llvm.")
            && !name.starts_with(hooks::RESERVED_PREFIX)
            && address_taken(fv)
        {
            address_taken_elsewhere.push(symbol_id(
                &module_name,
                &name,
                is_local(fv.get_linkage()),
            ));
        }
        if fv.count_basic_blocks() == 0
            || name.starts_with("llvm.")
            || name.starts_with(hooks::RESERVED_PREFIX)
            || fv.get_linkage() == Linkage::AvailableExternally
            || fv
                .get_enum_attribute(AttributeLoc::Function, enum_kind("naked"))
                .is_some()
        {
            continue;
        }
        let meta = function_meta(&module_name, fv, name, &global_ids, td, sysv_x86_64);
        functions.push((fv, meta));
    }
    Analysis {
        module_name,
        globals,
        functions,
        address_taken: address_taken_elsewhere,
    }
}

fn function_meta(
    module_name: &str,
    fv: FunctionValue<'_>,
    name: String,
    global_ids: &HashMap<LLVMValueRef, u64>,
    td: &TargetData,
    sysv_x86_64: bool,
) -> FnMeta {
    let local = is_local(fv.get_linkage());
    let Signature {
        params,
        ret,
        variadic,
        replayable,
    } = signature(fv, td, sysv_x86_64);
    let demangled = if name.starts_with("_Z") {
        cpp_demangle::Symbol::new(name.as_bytes())
            .ok()
            .map(|s| s.to_string())
    } else {
        None
    };
    let (file, line) = source_location(fv);
    let References {
        callees,
        globals,
        indirect_calls,
    } = references(module_name, fv, global_ids);
    FnMeta {
        id: symbol_id(module_name, &name, local),
        name,
        demangled,
        file,
        line,
        params,
        ret,
        variadic,
        replayable,
        local,
        callees: callees.into_iter().collect(),
        globals: globals.into_iter().collect(),
        indirect_calls,
        address_taken: address_taken(fv),
        cmp_constants: cmp_constants(fv),
    }
}

/// A function's parameters and return value as the hooks pack them.
struct Signature {
    /// The fixed parameters, then (when replayable) the words of variable arguments.
    params: Vec<ParamMeta>,
    ret: ValueKind,
    variadic: bool,
    /// Whether a thunk can call the function from its slots.
    replayable: bool,
}

fn signature(fv: FunctionValue<'_>, td: &TargetData, sysv_x86_64: bool) -> Signature {
    let fty = fv.get_type();
    let variadic = fty.is_var_arg();
    let mut params = Vec::new();
    let mut replayable = !variadic || sysv_x86_64;
    for (i, p) in fv.get_params().iter().enumerate() {
        let loc = AttributeLoc::Param(i as u32);
        let kind = value_kind(p.get_type().as_any_type_enum());
        let byval_size = fv
            .get_enum_attribute(loc, enum_kind("byval"))
            .map(|a| td.get_abi_size(&a.get_type_value()));
        if kind == ValueKind::Unsupported
            || UNREPLAYABLE_PARAM_ATTRS.iter().any(|a| fv.get_enum_attribute(loc, enum_kind(a)).is_some())
            // where a fixed `byval` aggregate went decides where the variable ones go
            || (variadic && byval_size.is_some())
        {
            replayable = false;
        }
        let pname = cstr(p.get_name());
        params.push(ParamMeta {
            name: (!pname.is_empty()).then_some(pname),
            kind,
            byval_size,
        });
    }
    if variadic && replayable {
        params.extend(variadic_params(&params));
    }
    let ret = return_kind(fty.get_return_type(), td);
    if ret == ValueKind::Unsupported {
        replayable = false;
    }
    Signature {
        params,
        ret,
        variadic,
        replayable,
    }
}

/// How a return value is packed: a value that fits a slot, or an aggregate of up to
/// 4 KiB returned through the slots.
fn return_kind(ty: Option<BasicTypeEnum<'_>>, td: &TargetData) -> ValueKind {
    match ty {
        None => ValueKind::Void,
        Some(t) => match value_kind(t.as_any_type_enum()) {
            ValueKind::Unsupported => match td.get_abi_size(&t) {
                size @ 1..=4096 => ValueKind::Aggregate(size as u32),
                _ => ValueKind::Unsupported,
            },
            kind => kind,
        },
    }
}

/// What a function's body refers to.
struct References {
    /// Ids of the functions it calls directly (intrinsics aside).
    callees: BTreeSet<u64>,
    /// Ids of the globals its operands mention.
    globals: BTreeSet<u64>,
    /// Whether it calls through a pointer (inline assembly aside).
    indirect_calls: bool,
}

fn references(
    module_name: &str,
    fv: FunctionValue<'_>,
    global_ids: &HashMap<LLVMValueRef, u64>,
) -> References {
    let mut callees = BTreeSet::new();
    let mut globals = BTreeSet::new();
    let mut indirect_calls = false;
    for bb in fv.get_basic_blocks() {
        for inst in bb.get_instructions() {
            let iref = inst.as_value_ref();
            // SAFETY: `iref` is a live instruction of this module.
            unsafe {
                let is_call = is_call_base(iref);
                let n = llc::LLVMGetNumOperands(iref);
                let callee_ref = if is_call {
                    llc::LLVMGetCalledValue(iref)
                } else {
                    std::ptr::null_mut()
                };
                for k in 0..n {
                    let op = llc::LLVMGetOperand(iref, k as u32);
                    if op.is_null() || (is_call && op == callee_ref) {
                        continue;
                    }
                    collect_global_refs(op, global_ids, &mut globals, 0);
                }
                if is_call && !callee_ref.is_null() {
                    let callee = llc::LLVMIsAFunction(callee_ref);
                    if !callee.is_null() {
                        let cname = value_name(callee);
                        if !cname.starts_with("llvm.") {
                            let clocal = is_local(
                                FunctionValue::new(callee)
                                    .map_or(Linkage::External, |f| f.get_linkage()),
                            );
                            callees.insert(symbol_id(module_name, &cname, clocal));
                        }
                    } else if llc::LLVMIsAInlineAsm(callee_ref).is_null() {
                        indirect_calls = true;
                    }
                }
            }
        }
    }
    References {
        callees,
        globals,
        indirect_calls,
    }
}

/// The extra parameters that carry a variadic function's variable arguments (see
/// `trestle_abi::meta::VA_STACK_WORDS`): the general and vector registers the fixed
/// `params` leave free, then words of the caller's stack.
fn variadic_params(params: &[ParamMeta]) -> Vec<ParamMeta> {
    let fp = params
        .iter()
        .filter(|p| matches!(p.kind, ValueKind::Float | ValueKind::Double))
        .count();
    let gp = params.len() - fp;
    let named = |name: String, kind| ParamMeta {
        name: Some(name),
        kind,
        byval_size: None,
    };
    let regs = (gp..VA_GP_WORDS).map(|i| named(format!("...gp{i}"), ValueKind::Word));
    let vecs = (fp..VA_FP_WORDS).map(|i| named(format!("...xmm{i}"), ValueKind::Double));
    let stack = (0..VA_STACK_WORDS).map(|i| named(format!("...stack{i}"), ValueKind::Word));
    regs.chain(vecs).chain(stack).collect()
}

/// Add the ids of globals `v` refers to, looking through constant expressions and
/// aggregate constants.
///
/// # Safety
/// `v` must be a live value.
unsafe fn collect_global_refs(
    v: LLVMValueRef,
    ids: &HashMap<LLVMValueRef, u64>,
    out: &mut BTreeSet<u64>,
    depth: u32,
) {
    if let Some(id) = ids.get(&v) {
        out.insert(*id);
        return;
    }
    // SAFETY: `v` is live; operands of constants are live constants.
    unsafe {
        if depth > 8 || llc::LLVMIsAConstant(v).is_null() || !llc::LLVMIsAGlobalValue(v).is_null() {
            return;
        }
        let n = llc::LLVMGetNumOperands(v);
        for k in 0..n {
            let op = llc::LLVMGetOperand(v, k as u32);
            if !op.is_null() {
                collect_global_refs(op, ids, out, depth + 1);
            }
        }
    }
}

/// The text of a constant global holding a short C string.
fn c_string_text(gv: GlobalValue<'_>) -> Option<Vec<u8>> {
    let init = gv.get_initializer()?;
    let v = init.as_value_ref();
    // SAFETY: queries on a live constant; the string is copied out.
    unsafe {
        if llc::LLVMIsAConstantDataSequential(v).is_null() || llc::LLVMIsConstantString(v) == 0 {
            return None;
        }
        let mut len = 0usize;
        let p = llc::LLVMGetAsString(v, &mut len);
        if p.is_null() {
            return None;
        }
        let bytes = std::slice::from_raw_parts(p as *const u8, len);
        let text = bytes.strip_suffix(&[0]).unwrap_or(bytes);
        (2..=64).contains(&text.len()).then(|| text.to_vec())
    }
}

/// Integer constants compared against in `f` (icmp operands, switch cases), at most
/// 64, without the trivial ones.
fn cmp_constants(f: FunctionValue<'_>) -> Vec<i64> {
    let mut out = BTreeSet::new();
    for bb in f.get_basic_blocks() {
        for inst in bb.get_instructions() {
            let iref = inst.as_value_ref();
            // SAFETY: operand queries on a live instruction.
            unsafe {
                let is_icmp = inst.get_opcode() == InstructionOpcode::ICmp;
                let is_switch = inst.get_opcode() == InstructionOpcode::Switch;
                if !is_icmp && !is_switch {
                    continue;
                }
                for k in 0..llc::LLVMGetNumOperands(iref) {
                    let op = llc::LLVMGetOperand(iref, k as u32);
                    if op.is_null() || llc::LLVMIsAConstantInt(op).is_null() {
                        continue;
                    }
                    let v = llc::LLVMConstIntGetSExtValue(op);
                    if !(-1..=1).contains(&v) {
                        out.insert(v);
                    }
                }
            }
            if out.len() >= 64 {
                return out.into_iter().collect();
            }
        }
    }
    out.into_iter().collect()
}

/// True when `f` is used other than as the callee of a call.
fn address_taken(f: FunctionValue<'_>) -> bool {
    let fref = f.as_value_ref();
    users(fref).into_iter().any(|user| {
        // SAFETY: `user` is a live value using `f`.
        let is_direct_call = unsafe { is_call_base(user) && llc::LLVMGetCalledValue(user) == fref };
        !is_direct_call
    })
}

/// Source file and line of a function, from its debug-info subprogram.
fn source_location(f: FunctionValue<'_>) -> (Option<String>, u32) {
    // SAFETY: debug-info queries on a live function; strings are copied out.
    unsafe {
        let sp = lldi::LLVMGetSubprogram(f.as_value_ref());
        if sp.is_null() {
            return (None, 0);
        }
        let line = lldi::LLVMDISubprogramGetLine(sp);
        let file = lldi::LLVMDIScopeGetFile(sp);
        if file.is_null() {
            return (None, line);
        }
        let path = file_path(file);
        ((!path.is_empty()).then_some(path), line)
    }
}

/// The path a debug-info file names: its name, under its directory when relative.
///
/// # Safety
/// `file` must be a live `DIFile`.
pub(crate) unsafe fn file_path(file: llvm_sys::prelude::LLVMMetadataRef) -> String {
    let read = |getter: unsafe extern "C" fn(_, *mut u32) -> *const std::ffi::c_char| {
        let mut len = 0u32;
        // SAFETY: LLVM returns `len` bytes owned by the metadata, copied out at once.
        unsafe {
            let p = getter(file, &mut len);
            if p.is_null() {
                String::new()
            } else {
                String::from_utf8_lossy(std::slice::from_raw_parts(p as *const u8, len as usize))
                    .into_owned()
            }
        }
    };
    let name = read(lldi::LLVMDIFileGetFilename);
    let dir = read(lldi::LLVMDIFileGetDirectory);
    if name.starts_with('/') || dir.is_empty() {
        name
    } else {
        format!("{dir}/{name}")
    }
}

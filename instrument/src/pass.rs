//! The carving pass: instruments one LLVM module so that its runtime can record and
//! replay function invocations.
//!
//! [`instrument_module`] is the driver. One visitor per concern:
//!
//! - [`rename_allocators`]: calls to `malloc` & co. go to the runtime's wrappers, so
//!   every heap extent is known.
//! - `instrument_function`: entry and return hooks with packed argument/return slots,
//!   registration of stack allocations whose address escapes, and write counters for
//!   stores into globals.
//! - `build_thunk`: a replay thunk per function that unpacks a slot array into the
//!   real signature and calls it.
//! - `emit_tables`: the function and global tables and the metadata blob, in the
//!   sections named by `trestle_abi::meta`.
//!
//! The pass runs on the unoptimised module (the driver asks clang for
//! `-disable-llvm-passes`): inlining has not happened yet, so every source function is
//! still there to be instrumented, and the hooks survive later inlining.

use inkwell::attributes::AttributeLoc;
use inkwell::basic_block::BasicBlock;
use inkwell::builder::{Builder, BuilderError};
use inkwell::context::ContextRef;
use inkwell::memory_buffer::MemoryBuffer;
use inkwell::module::{Linkage, Module};
use inkwell::targets::TargetData;
use inkwell::types::{AnyType, AnyTypeEnum, BasicType, BasicTypeEnum};
use inkwell::values::{
    AsValueRef, BasicMetadataValueEnum, BasicValue, BasicValueEnum, FunctionValue, GlobalValue,
    InstructionOpcode, InstructionValue, IntValue, PointerValue,
};
use inkwell::AddressSpace;
use llvm_sys::core as llc;
use llvm_sys::debuginfo as lldi;
use llvm_sys::prelude::LLVMValueRef;
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use trestle_abi::hooks;
use trestle_abi::ids::symbol_id;
use trestle_abi::meta::{
    encode_module_meta, FnMeta, GlobalMeta, ModuleMeta, ParamMeta, ValueKind, META_VERSION,
    SECTION_FUNCS, SECTION_GLOBALS, SECTION_META, VA_FP_WORDS, VA_GP_WORDS, VA_STACK_WORDS,
};

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
}

/// Instrument the bitcode file `input` and write the result to `output`.
pub fn instrument_bitcode_file(input: &Path, output: &Path) -> Result<Stats, PassError> {
    let ctx = inkwell::context::Context::create();
    let bitcode_err = |msg: String| PassError::Bitcode { path: input.display().to_string(), msg };
    let buf = MemoryBuffer::create_from_file(input).map_err(|e| bitcode_err(e.to_string()))?;
    let module =
        Module::parse_bitcode_from_buffer(&buf, &ctx).map_err(|e| bitcode_err(e.to_string()))?;
    let stats = instrument_module(&module)?;
    module.verify().map_err(|e| PassError::Verify(e.to_string()))?;
    if !module.write_bitcode_to_path(output) {
        return Err(PassError::Write(output.display().to_string()));
    }
    Ok(stats)
}

/// The runtime's hooks, declared in the module being instrumented.
struct Runtime<'ctx> {
    stacksave: FunctionValue<'ctx>,
    va_start: FunctionValue<'ctx>,
    va_end: FunctionValue<'ctx>,
    enter: FunctionValue<'ctx>,
    exit: FunctionValue<'ctx>,
    alloca: FunctionValue<'ctx>,
    main: FunctionValue<'ctx>,
}

impl<'ctx> Runtime<'ctx> {
    fn declare(module: &Module<'ctx>) -> Self {
        let ctx = module.get_context();
        let i64t = ctx.i64_type();
        let i32t = ctx.i32_type();
        let ptr = ctx.ptr_type(AddressSpace::default());
        let void = ctx.void_type();
        let get = |name: &str, ty| {
            module.get_function(name).unwrap_or_else(|| module.add_function(name, ty, None))
        };
        let stacksave = inkwell::intrinsics::Intrinsic::find("llvm.stacksave")
            .and_then(|i| i.get_declaration(module, &[ptr.into()]))
            .expect("LLVM 19 has llvm.stacksave");
        let va = |name: &str| {
            inkwell::intrinsics::Intrinsic::find(name)
                .and_then(|i| i.get_declaration(module, &[ptr.into()]))
                .expect("LLVM 19 has the va intrinsics")
        };
        Runtime {
            stacksave,
            va_start: va("llvm.va_start"),
            va_end: va("llvm.va_end"),
            enter: get(
                hooks::ENTER,
                void.fn_type(&[i64t.into(), ptr.into(), ptr.into(), i32t.into(), ptr.into()], false),
            ),
            exit: get(
                hooks::EXIT,
                void.fn_type(&[i64t.into(), ptr.into(), i64t.into(), ptr.into(), ptr.into()], false),
            ),
            alloca: get(hooks::ALLOCA, void.fn_type(&[ptr.into(), i64t.into()], false)),
            main: get(hooks::MAIN, void.fn_type(&[i32t.into(), ptr.into(), ptr.into()], false)),
        }
    }
}

/// Per-module facts gathered before any rewriting.
struct Analysis<'ctx> {
    module_name: String,
    /// Defined globals to register, with their metadata.
    globals: Vec<(GlobalValue<'ctx>, GlobalMeta)>,
    /// Functions to instrument, with their metadata.
    functions: Vec<(FunctionValue<'ctx>, FnMeta)>,
    /// Ids of declared functions whose address this module takes.
    address_taken: Vec<u64>,
}

/// Instrument `module` in place. See the module documentation for what is inserted.
pub fn instrument_module(module: &Module<'_>) -> Result<Stats, PassError> {
    let mut stats = Stats { renamed_allocators: rename_allocators(module), ..Stats::default() };
    let td = TargetData::create(&module.get_data_layout().as_str().to_string_lossy());
    let mut analysis = analyse(module, &td);
    let rt = Runtime::declare(module);
    let ctx = module.get_context();
    let builder = ctx.create_builder();

    // One write counter per registered global, bumped inline by stores into it.
    let counters = make_counters(module, analysis.globals.len());
    let counter_index: HashMap<LLVMValueRef, u32> = analysis
        .globals
        .iter()
        .enumerate()
        .map(|(i, (g, _))| (g.as_value_ref(), i as u32))
        .collect();

    let mut thunks = Vec::new();
    for (function, meta) in analysis.functions.iter_mut() {
        let counted = instrument_function(
            module, &builder, &rt, &td, *function, meta, &counters, &counter_index, &mut stats,
        )?;
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

// ---------------------------------------------------------------------------------
// Allocators
// ---------------------------------------------------------------------------------

/// Redirect declared allocation functions to the runtime's wrappers.
///
/// ```text
/// before:  %p = call ptr @malloc(i64 16)
/// after:   %p = call ptr @__trestle_malloc(i64 16)
/// ```
///
/// Only declarations are redirected: a program that defines its own `malloc` keeps it.
/// Uses other than calls (the address of `free` passed as a callback) follow too, since
/// the wrapper has the same signature.
pub fn rename_allocators(module: &Module<'_>) -> usize {
    let mut renamed = 0;
    for (orig, wrapper) in hooks::RENAMED_ALLOCATORS {
        let Some(f) = module.get_function(orig) else { continue };
        if f.count_basic_blocks() > 0 {
            continue;
        }
        let target = match module.get_function(wrapper) {
            Some(w) if w.get_type() == f.get_type() => w,
            Some(_) => continue, // e.g. operator delete(void*, size_t) vs free: types differ
            None => module.add_function(wrapper, f.get_type(), None),
        };
        f.replace_all_uses_with(target);
        // SAFETY: `f` is a declaration with no remaining uses.
        unsafe { f.delete() };
        renamed += 1;
    }
    renamed
}

// ---------------------------------------------------------------------------------
// Analysis
// ---------------------------------------------------------------------------------

fn is_local(linkage: Linkage) -> bool {
    matches!(linkage, Linkage::Private | Linkage::Internal)
}

fn cstr(s: &std::ffi::CStr) -> String {
    s.to_string_lossy().into_owned()
}

fn value_kind(ty: AnyTypeEnum<'_>) -> ValueKind {
    match ty {
        AnyTypeEnum::VoidType(_) => ValueKind::Void,
        AnyTypeEnum::IntType(t) if t.get_bit_width() <= 64 => ValueKind::Int(t.get_bit_width() as u16),
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
const UNREPLAYABLE_PARAM_ATTRS: &[&str] = &["inalloca", "preallocated", "swifterror", "swiftself", "swiftasync"];

fn analyse<'ctx>(module: &Module<'ctx>, td: &TargetData) -> Analysis<'ctx> {
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
        globals.push((gv, GlobalMeta { id, name, size, constant, local, text }));
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
            address_taken_elsewhere.push(symbol_id(&module_name, &name, is_local(fv.get_linkage())));
        }
        if fv.count_basic_blocks() == 0
            || name.starts_with("llvm.")
            || name.starts_with(hooks::RESERVED_PREFIX)
            || fv.get_linkage() == Linkage::AvailableExternally
            || fv.get_enum_attribute(AttributeLoc::Function, enum_kind("naked")).is_some()
        {
            continue;
        }
        let meta = function_meta(&module_name, fv, name, &global_ids, td, sysv_x86_64);
        functions.push((fv, meta));
    }
    Analysis { module_name, globals, functions, address_taken: address_taken_elsewhere }
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
        params.push(ParamMeta { name: (!pname.is_empty()).then_some(pname), kind, byval_size });
    }
    if variadic && replayable {
        params.extend(variadic_params(&params));
    }
    let ret = match fty.get_return_type() {
        None => ValueKind::Void,
        Some(t) => match value_kind(t.as_any_type_enum()) {
            ValueKind::Unsupported => match td.get_abi_size(&t) {
                size @ 1..=4096 => ValueKind::Aggregate(size as u32),
                _ => ValueKind::Unsupported,
            },
            kind => kind,
        },
    };
    if ret == ValueKind::Unsupported {
        replayable = false;
    }
    let demangled = if name.starts_with("_Z") {
        cpp_demangle::Symbol::new(name.as_bytes()).ok().map(|s| s.to_string())
    } else {
        None
    };
    let (file, line) = source_location(fv);

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
                let callee_ref =
                    if is_call { llc::LLVMGetCalledValue(iref) } else { std::ptr::null_mut() };
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
                            let clocal = is_local(FunctionValue::new(callee).map_or(Linkage::External, |f| f.get_linkage()));
                            callees.insert(symbol_id(module_name, &cname, clocal));
                        }
                    } else if llc::LLVMIsAInlineAsm(callee_ref).is_null() {
                        indirect_calls = true;
                    }
                }
            }
        }
    }
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

/// The extra parameters that carry a variadic function's variable arguments (see
/// `trestle_abi::meta::VA_STACK_WORDS`): the general and vector registers the fixed
/// `params` leave free, then words of the caller's stack.
fn variadic_params(params: &[ParamMeta]) -> Vec<ParamMeta> {
    let fp = params.iter().filter(|p| matches!(p.kind, ValueKind::Float | ValueKind::Double)).count();
    let gp = params.len() - fp;
    let named = |name: String, kind| ParamMeta { name: Some(name), kind, byval_size: None };
    let regs = (gp..VA_GP_WORDS).map(|i| named(format!("...gp{i}"), ValueKind::Word));
    let vecs = (fp..VA_FP_WORDS).map(|i| named(format!("...xmm{i}"), ValueKind::Double));
    let stack = (0..VA_STACK_WORDS).map(|i| named(format!("...stack{i}"), ValueKind::Word));
    regs.chain(vecs).chain(stack).collect()
}

/// True for calls, invokes and callbrs.
///
/// # Safety
/// `v` must be a live value.
unsafe fn is_call_base(v: LLVMValueRef) -> bool {
    // SAFETY: type queries on a live value.
    unsafe {
        !llc::LLVMIsACallInst(v).is_null()
            || !llc::LLVMIsAInvokeInst(v).is_null()
            || !llc::LLVMIsACallBrInst(v).is_null()
    }
}

/// The context of the block the builder is positioned in.
fn builder_ctx<'ctx>(builder: &Builder<'ctx>) -> ContextRef<'ctx> {
    builder
        .get_insert_block()
        .expect("builder is positioned")
        .get_context()
}

/// # Safety
/// `v` must be a live value.
unsafe fn value_name(v: LLVMValueRef) -> String {
    let mut len = 0usize;
    // SAFETY: LLVM returns a pointer to `len` bytes owned by the value.
    unsafe {
        let p = llc::LLVMGetValueName2(v, &mut len);
        String::from_utf8_lossy(std::slice::from_raw_parts(p as *const u8, len)).into_owned()
    }
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

/// The users of a live value, one per use.
fn users(v: LLVMValueRef) -> Vec<LLVMValueRef> {
    let mut out = Vec::new();
    // SAFETY: walking the use list of a live value.
    unsafe {
        let mut u = llc::LLVMGetFirstUse(v);
        while !u.is_null() {
            out.push(llc::LLVMGetUser(u));
            u = llc::LLVMGetNextUse(u);
        }
    }
    out
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
        let read = |getter: unsafe extern "C" fn(_, *mut u32) -> *const std::ffi::c_char| {
            let mut len = 0u32;
            let p = getter(file, &mut len);
            if p.is_null() {
                String::new()
            } else {
                String::from_utf8_lossy(std::slice::from_raw_parts(p as *const u8, len as usize))
                    .into_owned()
            }
        };
        let name = read(lldi::LLVMDIFileGetFilename);
        let dir = read(lldi::LLVMDIFileGetDirectory);
        let path = if name.starts_with('/') || dir.is_empty() {
            name
        } else {
            format!("{dir}/{name}")
        };
        ((!path.is_empty()).then_some(path), line)
    }
}

// ---------------------------------------------------------------------------------
// Functions
// ---------------------------------------------------------------------------------

/// Pack a value into a 64-bit slot.
fn pack<'ctx>(
    builder: &Builder<'ctx>,
    v: BasicValueEnum<'ctx>,
    kind: ValueKind,
) -> Result<IntValue<'ctx>, BuilderError> {
    let i64t = builder_ctx(builder).i64_type();
    Ok(match (kind, v) {
        (ValueKind::Int(64) | ValueKind::Word, BasicValueEnum::IntValue(i)) => i,
        (ValueKind::Int(_), BasicValueEnum::IntValue(i)) => builder.build_int_z_extend(i, i64t, "")?,
        (ValueKind::Ptr, BasicValueEnum::PointerValue(p)) => builder.build_ptr_to_int(p, i64t, "")?,
        (ValueKind::Double, BasicValueEnum::FloatValue(f)) => {
            builder.build_bit_cast(f, i64t, "")?.into_int_value()
        }
        (ValueKind::Float, BasicValueEnum::FloatValue(f)) => {
            let bits = builder.build_bit_cast(f, i64t.get_context().i32_type(), "")?.into_int_value();
            builder.build_int_z_extend(bits, i64t, "")?
        }
        _ => i64t.const_zero(),
    })
}

/// Unpack a 64-bit slot into a value of type `ty`.
fn unpack<'ctx>(
    builder: &Builder<'ctx>,
    slot: IntValue<'ctx>,
    ty: BasicTypeEnum<'ctx>,
    kind: ValueKind,
) -> Result<BasicValueEnum<'ctx>, BuilderError> {
    let ctx = slot.get_type().get_context();
    Ok(match (kind, ty) {
        (ValueKind::Int(64) | ValueKind::Word, _) => slot.into(),
        (ValueKind::Int(_), BasicTypeEnum::IntType(t)) => builder.build_int_truncate(slot, t, "")?.into(),
        (ValueKind::Ptr, BasicTypeEnum::PointerType(t)) => builder.build_int_to_ptr(slot, t, "")?.into(),
        (ValueKind::Double, t) => builder.build_bit_cast(slot, t, "")?,
        (ValueKind::Float, t) => {
            let bits = builder.build_int_truncate(slot, ctx.i32_type(), "")?;
            builder.build_bit_cast(bits, t, "")?
        }
        (_, t) => t.const_zero(),
    })
}

fn is_alloca(inst: InstructionValue<'_>) -> bool {
    inst.get_opcode() == InstructionOpcode::Alloca
}

/// True when an alloca's address can reach other code or memory: anything but loads
/// from it, stores to it, and lifetime markers.
fn alloca_escapes(alloca: InstructionValue<'_>) -> bool {
    let aref = alloca.as_value_ref();
    users(aref).into_iter().any(|user| {
        // SAFETY: type and operand queries on a live user of the alloca.
        let harmless = unsafe {
            if !llc::LLVMIsALoadInst(user).is_null() {
                true
            } else if !llc::LLVMIsAStoreInst(user).is_null() {
                // operand 0 is the stored value: storing the address itself escapes it
                llc::LLVMGetOperand(user, 0) != aref
            } else if !llc::LLVMIsAIntrinsicInst(user).is_null() {
                let name = value_name(llc::LLVMGetCalledValue(user));
                name.starts_with("llvm.lifetime.") || name.starts_with("llvm.dbg.")
            } else {
                false
            }
        };
        !harmless
    })
}

/// Strip GEPs and casts (instructions and constant expressions) off a pointer.
fn pointer_base(mut v: LLVMValueRef) -> LLVMValueRef {
    for _ in 0..16 {
        // SAFETY: `v` is a live value throughout.
        unsafe {
            let is_gep = !llc::LLVMIsAGetElementPtrInst(v).is_null()
                || !llc::LLVMIsACastInst(v).is_null()
                || (!llc::LLVMIsAConstantExpr(v).is_null()
                    && matches!(
                        llc::LLVMGetConstOpcode(v),
                        llvm_sys::LLVMOpcode::LLVMGetElementPtr | llvm_sys::LLVMOpcode::LLVMBitCast
                    ));
            if !is_gep {
                return v;
            }
            v = llc::LLVMGetOperand(v, 0);
        }
    }
    v
}

#[allow(clippy::too_many_arguments)]
/// Insert the entry and exit hooks, alloca registrations and global write counters.
///
/// ```text
/// before:                         after:
/// define i32 @f(ptr %s, i32 %n)   define i32 @f(ptr %s, i32 %n)
///   %buf = alloca [16 x i8]         %slots = alloca [2 x i64]
///   ...                             %buf = alloca [16 x i8]
///   ret i32 %r                      store (ptrtoint %s), %slots[0]; store (zext %n), %slots[1]
///                                   call @__trestle_enter(i64 ID, ptr @__trestle_state.ID, ptr %slots, i32 2)
///                                   call @__trestle_alloca(ptr %buf, i64 16)
///                                   ...
///                                   call @__trestle_exit(i64 ID, ptr @__trestle_state.ID, i64 (zext %r), ptr %slots)
///                                   ret i32 %r
/// ```
fn instrument_function<'ctx>(
    module: &Module<'ctx>,
    builder: &Builder<'ctx>,
    rt: &Runtime<'ctx>,
    td: &TargetData,
    f: FunctionValue<'ctx>,
    meta: &FnMeta,
    counters: &Option<GlobalValue<'ctx>>,
    counter_index: &HashMap<LLVMValueRef, u32>,
    stats: &mut Stats,
) -> Result<usize, PassError> {
    let ctx = module.get_context();
    let i64t = ctx.i64_type();
    let i32t = ctx.i32_type();
    let Some(entry) = f.get_first_basic_block() else { return Ok(0) };

    // Collect before inserting anything.
    let mut rets = Vec::new();
    let mut escaping_allocas = Vec::new();
    let mut global_stores = Vec::new();
    for bb in f.get_basic_blocks() {
        for inst in bb.get_instructions() {
            match inst.get_opcode() {
                InstructionOpcode::Return => {
                    // A `ret` must directly follow a `musttail` call: leave those alone.
                    let after_musttail = inst.get_previous_instruction().is_some_and(|p| {
                        // SAFETY: `p` is a live instruction.
                        unsafe {
                            !llc::LLVMIsACallInst(p.as_value_ref()).is_null()
                                && llc::LLVMGetTailCallKind(p.as_value_ref())
                                    == llvm_sys::LLVMTailCallKind::LLVMTailCallKindMustTail
                        }
                    });
                    if !after_musttail {
                        rets.push(inst);
                    }
                }
                InstructionOpcode::Alloca if alloca_escapes(inst) => escaping_allocas.push((bb, inst)),
                InstructionOpcode::Store => {
                    // SAFETY: operand 1 of a store is its pointer.
                    let base = pointer_base(unsafe { llc::LLVMGetOperand(inst.as_value_ref(), 1) });
                    if let Some(&i) = counter_index.get(&base) {
                        global_stores.push((inst, i));
                    }
                }
                InstructionOpcode::Call => {
                    // memcpy/memset/memmove into a global count as writes to it.
                    // SAFETY: queries on a live call instruction.
                    unsafe {
                        let iref = inst.as_value_ref();
                        if !llc::LLVMIsAMemIntrinsic(iref).is_null() {
                            let base = pointer_base(llc::LLVMGetOperand(iref, 0));
                            if let Some(&i) = counter_index.get(&base) {
                                global_stores.push((inst, i));
                            }
                        }
                    }
                }
                _ => {}
            }
        }
    }

    // Entry: slots array at the very top, hook after the leading allocas.
    let nslots = meta.params.len().max(1) as u32;
    let first = entry.get_first_instruction().expect("a basic block has a terminator");
    builder.position_before(&first);
    let slots_ty = i64t.array_type(nslots);
    let slots = builder.build_alloca(slots_ty, "trestle.slots")?;
    // A returned aggregate is stored here for the exit hook to walk.
    let ret_copy = match (meta.ret, f.get_type().get_return_type()) {
        (ValueKind::Aggregate(_), Some(t)) => Some(builder.build_alloca(t, "trestle.ret")?),
        _ => None,
    };
    let va_list = if meta.variadic && meta.replayable {
        Some(builder.build_alloca(ctx.i8_type().array_type(24), "trestle.va")?)
    } else {
        None
    };
    let mut hook_point = first;
    while is_alloca(hook_point) {
        match hook_point.get_next_instruction() {
            Some(n) => hook_point = n,
            None => break,
        }
    }
    builder.position_before(&hook_point);
    if cstr(f.get_name()) == "main" {
        let ptr = ctx.ptr_type(AddressSpace::default());
        let params = f.get_params();
        let argc = match params.first() {
            Some(BasicValueEnum::IntValue(i)) if i.get_type().get_bit_width() == 32 => *i,
            _ => i32t.const_zero(),
        };
        let ptr_param = |k: usize| match params.get(k) {
            Some(BasicValueEnum::PointerValue(p)) => *p,
            _ => ptr.const_null(),
        };
        builder.build_call(rt.main, &[argc.into(), ptr_param(1).into(), ptr_param(2).into()], "")?;
    }
    for (i, (p, pm)) in f.get_params().iter().zip(&meta.params).enumerate() {
        let packed = pack(builder, *p, pm.kind)?;
        let slot = slot_ptr(builder, slots_ty, slots, i as u64)?;
        builder.build_store(slot, packed)?;
    }
    if let Some(va) = va_list {
        store_variadic_words(builder, rt, f, va, slots_ty, slots)?;
    }
    let state = module.add_global(i32t, None, &format!("{}{:016x}", hooks::STATE_PREFIX, meta.id));
    state.set_linkage(Linkage::Internal);
    state.set_initializer(&i32t.const_zero());
    let state_ptr = state.as_pointer_value();
    let sp = stack_pointer(builder, rt)?;
    builder.build_call(
        rt.enter,
        &[
            i64t.const_int(meta.id, false).into(),
            state_ptr.into(),
            slots.into(),
            i32t.const_int(nslots as u64, false).into(),
            sp,
        ],
        "",
    )?;

    // Allocas: entry-block ones are registered at the hook point, others right after.
    for (bb, a) in &escaping_allocas {
        let ty = match a.get_allocated_type() {
            Ok(t) => t,
            Err(_) => continue,
        };
        let elem = td.get_abi_size(&ty);
        if *bb == entry && a.get_parent() == Some(entry) && is_before(*a, hook_point) {
            builder.position_before(&hook_point);
        } else {
            match a.get_next_instruction() {
                Some(n) => builder.position_before(&n),
                None => continue,
            }
        }
        // SAFETY: operand 0 of an alloca is its element count.
        let count = unsafe { llc::LLVMGetOperand(a.as_value_ref(), 0) };
        // SAFETY: the count operand is an integer value.
        let count = unsafe { IntValue::new(count) };
        let count = if count.get_type().get_bit_width() == 64 {
            count
        } else {
            builder.build_int_z_extend(count, i64t, "")?
        };
        let size = builder.build_int_mul(count, i64t.const_int(elem, false), "")?;
        // SAFETY: an alloca's result is a pointer.
        let addr = unsafe { PointerValue::new(a.as_value_ref()) };
        builder.build_call(rt.alloca, &[addr.into(), size.into()], "")?;
        stats.allocas += 1;
    }

    // Stores into globals: bump the global's write counter.
    if let Some(counters) = counters {
        let arr_ty = i64t.array_type(counter_index.len() as u32);
        for (inst, idx) in &global_stores {
            let Some(next) = inst.get_next_instruction() else { continue };
            builder.position_before(&next);
            let p = slot_ptr(builder, arr_ty, counters.as_pointer_value(), *idx as u64)?;
            let old = builder.build_load(i64t, p, "")?.into_int_value();
            let new = builder.build_int_add(old, i64t.const_int(1, false), "")?;
            builder.build_store(p, new)?;
        }
    }

    // Returns.
    for r in rets {
        builder.position_before(&r);
        // SAFETY: a `ret` has zero or one operand.
        let packed = unsafe {
            if llc::LLVMGetNumOperands(r.as_value_ref()) == 1 {
                let v = BasicValueEnum::new(llc::LLVMGetOperand(r.as_value_ref(), 0));
                match ret_copy {
                    Some(copy) => {
                        // Zeroed first: padding must not carry stack garbage.
                        let size = i64t.const_int(u64::from(aggregate_size(meta.ret)), false);
                        builder.build_memset(copy, 1, ctx.i8_type().const_zero(), size)?;
                        store_fields(builder, copy, v)?;
                        builder.build_ptr_to_int(copy, i64t, "")?
                    }
                    None => pack(builder, v, meta.ret)?,
                }
            } else {
                i64t.const_zero()
            }
        };
        let sp = stack_pointer(builder, rt)?;
        builder.build_call(
            rt.exit,
            &[i64t.const_int(meta.id, false).into(), state_ptr.into(), packed.into(), slots.into(), sp],
            "",
        )?;
    }
    Ok(global_stores.len())
}

/// Copy a variadic function's variable arguments into its slots after the fixed
/// parameters (layout in `trestle_abi::meta::VA_STACK_WORDS`), from a `va_list` of its
/// own: the System V x86-64 `va_list` is `{ i32 gp_offset, i32 fp_offset, ptr
/// overflow_arg_area, ptr reg_save_area }`, and the register save area holds the six
/// general registers, then the eight vector registers at 16 bytes each.
///
/// ```text
/// call @llvm.va_start(ptr %trestle.va)
/// %save = load ptr, (%trestle.va + 16)      %stack = load ptr, (%trestle.va + 8)
/// store (load i64, %save + 8*i), %slots[k]  ; each free general register i
/// store (load i64, %save + 48 + 16*j), ...  ; each free vector register j
/// store (load i64, %stack + 8*w), ...       ; the first stack words
/// call @llvm.va_end(ptr %trestle.va)
/// ```
fn store_variadic_words<'ctx>(
    builder: &Builder<'ctx>,
    rt: &Runtime<'ctx>,
    f: FunctionValue<'ctx>,
    va: PointerValue<'ctx>,
    slots_ty: inkwell::types::ArrayType<'ctx>,
    slots: PointerValue<'ctx>,
) -> Result<(), BuilderError> {
    let ctx = builder_ctx(builder);
    let (i8t, i64t) = (ctx.i8_type(), ctx.i64_type());
    let ptr = ctx.ptr_type(AddressSpace::default());
    let at = |base: PointerValue<'ctx>, offset: u64| {
        // SAFETY: offsets inside the va_list, the register save area or the caller's
        // stack words, as laid out by the calling convention.
        unsafe { builder.build_in_bounds_gep(i8t, base, &[i64t.const_int(offset, false)], "") }
    };
    builder.build_call(rt.va_start, &[va.into()], "")?;
    let stack = builder.build_load(ptr, at(va, 8)?, "")?.into_pointer_value();
    let save = builder.build_load(ptr, at(va, 16)?, "")?.into_pointer_value();
    let fixed = f.get_params();
    let fp = fixed.iter().filter(|p| p.is_float_value()).count();
    let gp = fixed.len() - fp;
    let sources = (gp..VA_GP_WORDS)
        .map(|i| (save, 8 * i as u64))
        .chain((fp..VA_FP_WORDS).map(|j| (save, (8 * VA_GP_WORDS + 16 * j) as u64)))
        .chain((0..VA_STACK_WORDS).map(|w| (stack, 8 * w as u64)));
    for (k, (base, offset)) in sources.enumerate() {
        let word = builder.build_load(i64t, at(base, offset)?, "")?;
        builder.build_store(slot_ptr(builder, slots_ty, slots, (fixed.len() + k) as u64)?, word)?;
    }
    builder.build_call(rt.va_end, &[va.into()], "")?;
    Ok(())
}

/// Store `v` at `p` member by member: a store of a whole struct leaves its padding
/// undefined, so the optimiser would drop the zeroing before it.
///
/// ```text
/// store { i32, ptr } %v, ptr %p   =>   store i32 (extractvalue %v, 0), ptr %p
///                                      store ptr (extractvalue %v, 1), ptr (gep %p, 0, 1)
/// ```
fn store_fields<'ctx>(builder: &Builder<'ctx>, p: PointerValue<'ctx>, v: BasicValueEnum<'ctx>) -> Result<(), BuilderError> {
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
        let at = unsafe { builder.build_in_bounds_gep(ty, p, &[i32t.const_zero(), i32t.const_int(u64::from(i), false)], "")? };
        store_fields(builder, at, field)?;
    }
    Ok(())
}

fn aggregate_size(kind: ValueKind) -> u32 {
    match kind {
        ValueKind::Aggregate(size) => size,
        _ => 0,
    }
}

fn stack_pointer<'ctx>(builder: &Builder<'ctx>, rt: &Runtime<'ctx>) -> Result<BasicMetadataValueEnum<'ctx>, BuilderError> {
    let call = builder.build_call(rt.stacksave, &[], "trestle.sp")?;
    Ok(match call.try_as_basic_value() {
        inkwell::values::ValueKind::Basic(v) => v.into(),
        inkwell::values::ValueKind::Instruction(_) => unreachable!("llvm.stacksave returns a pointer"),
    })
}

fn is_before(a: InstructionValue<'_>, b: InstructionValue<'_>) -> bool {
    let mut cur = a.get_next_instruction();
    while let Some(c) = cur {
        if c == b {
            return true;
        }
        cur = c.get_next_instruction();
    }
    false
}

fn slot_ptr<'ctx>(
    builder: &Builder<'ctx>,
    arr_ty: inkwell::types::ArrayType<'ctx>,
    base: PointerValue<'ctx>,
    i: u64,
) -> Result<PointerValue<'ctx>, BuilderError> {
    let i64t = arr_ty.get_context().i64_type();
    // SAFETY: `i` is within the array by construction.
    unsafe {
        builder.build_in_bounds_gep(arr_ty, base, &[i64t.const_zero(), i64t.const_int(i, false)], "")
    }
}

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
        module.get_function(name).unwrap_or_else(|| module.add_function(name, ty, None))
    };
    let normal = ctx.append_basic_block(thunk, "returned");
    let caught = ctx.append_basic_block(thunk, "threw");
    let call = builder.build_invoke(f, args, normal, caught, "")?;
    builder.position_at_end(caught);
    thunk.set_personality_function(personality);
    let pad_ty = ctx.struct_type(&[ptr.into(), ctx.i32_type().into()], false);
    let pad = builder.build_landing_pad(pad_ty, personality, &[ptr.const_null().into()], false, "")?;
    let exn = builder.build_extract_value(pad.into_struct_value(), 0, "")?;
    builder.build_call(declare("__cxa_begin_catch", ptr.fn_type(&[ptr.into()], false)), &[exn.into()], "")?;
    builder.build_call(declare(hooks::UNIT_THREW, void.fn_type(&[], false)), &[], "")?;
    builder.build_call(declare("__cxa_end_catch", void.fn_type(&[], false)), &[], "")?;
    builder.build_return(Some(&ctx.i64_type().const_zero()))?;
    builder.position_at_end(normal);
    Ok(call)
}

/// Build `i64 @__trestle_thunk.ID(ptr %slots)`: unpack each slot into the parameter's
/// type, call the function with the same parameter attributes (`byval`, `sret`, …)
/// and calling convention, and pack its return value. In a C++ module the call is an
/// invoke that catches any exception and tells the runtime ([`hooks::UNIT_THREW`]).
fn build_thunk<'ctx>(
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
    let slots = thunk.get_first_param().expect("thunk has one parameter").into_pointer_value();
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
    call.add_attribute(AttributeLoc::Function, ctx.create_enum_attribute(noinline, 0));
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
            builder.build_memset(slots, 8, ctx.i8_type().const_zero(), i64t.const_int(u64::from(size), false))?;
            store_fields(builder, slots, v)?;
            builder.build_ptr_to_int(slots, i64t, "")?
        }
        (inkwell::values::ValueKind::Basic(v), kind) => pack(builder, v, kind)?,
        (inkwell::values::ValueKind::Instruction(_), _) => i64t.const_zero(),
    };
    builder.build_return(Some(&ret))?;
    Ok(thunk)
}

fn make_counters<'ctx>(module: &Module<'ctx>, n: usize) -> Option<GlobalValue<'ctx>> {
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

// ---------------------------------------------------------------------------------
// Tables
// ---------------------------------------------------------------------------------

/// Emit the function table, the global table and the metadata blob, and keep all
/// three alive through `llvm.used`.
fn emit_tables<'ctx>(
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
        used.push(table_global(module, fn_ty.array_type(rows.len() as u32), &fn_ty.const_array(&rows), "__trestle_funcs", SECTION_FUNCS, 8));
    }

    // Globals table: id, address, size, flags, write counter.
    let g_ty = ctx.struct_type(&[i64t.into(), ptr.into(), i64t.into(), i64t.into(), ptr.into()], false);
    let arr_ty = i64t.array_type(analysis.globals.len().max(1) as u32);
    let mut grows = Vec::new();
    for (i, (g, m)) in analysis.globals.iter().enumerate() {
        let counter = match counters {
            Some(c) => {
                // SAFETY: `i` indexes the counter array, which has one slot per global.
                unsafe {
                    c.as_pointer_value().const_in_bounds_gep(arr_ty, &[i64t.const_zero(), i64t.const_int(i as u64, false)])
                }
            }
            None => ptr.const_null(),
        };
        let flags = if m.constant { trestle_abi::meta::GLOBAL_CONSTANT } else { 0 };
        grows.push(g_ty.const_named_struct(&[
            i64t.const_int(m.id, false).into(),
            g.as_pointer_value().into(),
            i64t.const_int(m.size, false).into(),
            i64t.const_int(flags, false).into(),
            counter.into(),
        ]));
    }
    if !grows.is_empty() {
        used.push(table_global(module, g_ty.array_type(grows.len() as u32), &g_ty.const_array(&grows), "__trestle_globals", SECTION_GLOBALS, 8));
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
    used.push(table_global(module, blob_val.get_type(), &blob_val, "__trestle_meta", SECTION_META, 1));

    add_to_llvm_used(module, &used);
    Ok(())
}

fn table_global<'ctx, T: BasicType<'ctx>>(
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
fn add_to_llvm_used<'ctx>(module: &Module<'ctx>, values: &[PointerValue<'ctx>]) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use inkwell::context::Context;

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
        assert!(text.contains(&format!("section \"{SECTION_META}\"")), "{text}");
        assert!(text.contains(&format!("@{}", hooks::THUNK_PREFIX)), "{text}");
    }
}

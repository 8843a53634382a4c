//! Per-function instrumentation: entry and return hooks with packed argument/return
//! slots, registration of stack allocations whose address escapes, and write counters
//! for stores into globals.

use inkwell::basic_block::BasicBlock;
use inkwell::builder::{Builder, BuilderError};
use inkwell::module::{Linkage, Module};
use inkwell::targets::TargetData;
use inkwell::types::ArrayType;
use inkwell::values::{
    AsValueRef, BasicMetadataValueEnum, BasicValueEnum, FunctionValue, GlobalValue,
    InstructionOpcode, InstructionValue, IntValue, PointerValue,
};
use inkwell::AddressSpace;
use llvm_sys::core as llc;
use llvm_sys::prelude::LLVMValueRef;
use std::collections::HashMap;
use trestle_abi::hooks;
use trestle_abi::meta::{FnMeta, ValueKind, VA_FP_WORDS, VA_GP_WORDS, VA_STACK_WORDS};

use super::ir::{builder_ctx, cstr, users, value_name};
use super::runtime::Runtime;
use super::slots::{aggregate_size, pack, slot_ptr, store_fields};
use super::{PassError, Stats};

/// Instruments functions one at a time, with what every function shares: the module,
/// the runtime's hooks and the global write counters.
pub(super) struct FunctionInstrumenter<'a, 'ctx> {
    pub(super) module: &'a Module<'ctx>,
    pub(super) builder: &'a Builder<'ctx>,
    pub(super) rt: &'a Runtime<'ctx>,
    pub(super) td: &'a TargetData,
    /// One write counter per registered global (none when there are no globals).
    pub(super) counters: Option<GlobalValue<'ctx>>,
    /// The index of each registered global's counter.
    pub(super) counter_index: &'a HashMap<LLVMValueRef, u32>,
}

/// Where the hooks go in one function, collected before anything is inserted.
struct Sites<'ctx> {
    /// Returns, except those that must directly follow a `musttail` call.
    rets: Vec<InstructionValue<'ctx>>,
    /// Allocas whose address escapes, with their block.
    escaping_allocas: Vec<(BasicBlock<'ctx>, InstructionValue<'ctx>)>,
    /// The program's own `va_start` calls.
    va_starts: Vec<InstructionValue<'ctx>>,
    /// Stores (and memory intrinsics) into a registered global, with its counter index.
    global_stores: Vec<(InstructionValue<'ctx>, u32)>,
}

/// What the entry hook set up, for the alloca registrations and the exit hooks.
struct Frame<'ctx> {
    /// The argument slots, one per parameter (at least one).
    slots: PointerValue<'ctx>,
    /// A returned aggregate is stored here for the exit hook to walk.
    ret_copy: Option<PointerValue<'ctx>>,
    /// The function's `__trestle_state.ID` global.
    state: PointerValue<'ctx>,
    /// The first instruction after the leading allocas: the entry hook is just before.
    hook_point: InstructionValue<'ctx>,
}

impl<'ctx> FunctionInstrumenter<'_, 'ctx> {
    /// Insert the entry and exit hooks, alloca registrations and global write counters;
    /// the number of stores into globals counted.
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
    pub(super) fn instrument(
        &self,
        f: FunctionValue<'ctx>,
        meta: &FnMeta,
        stats: &mut Stats,
    ) -> Result<usize, PassError> {
        let Some(entry) = f.get_first_basic_block() else {
            return Ok(0);
        };
        let sites = Sites::collect(f, self.counter_index);
        let frame = self.insert_entry(f, meta, entry)?;
        for &(bb, alloca) in &sites.escaping_allocas {
            if self.register_alloca(entry, bb, alloca, frame.hook_point)? {
                stats.allocas += 1;
            }
        }
        for &start in &sites.va_starts {
            self.register_va_list(start, meta.id)?;
        }
        self.count_global_stores(&sites.global_stores)?;
        for &ret in &sites.rets {
            self.insert_exit(ret, meta, &frame)?;
        }
        Ok(sites.global_stores.len())
    }

    /// Entry: slots array at the very top, hook after the leading allocas.
    fn insert_entry(
        &self,
        f: FunctionValue<'ctx>,
        meta: &FnMeta,
        entry: BasicBlock<'ctx>,
    ) -> Result<Frame<'ctx>, BuilderError> {
        let builder = self.builder;
        let ctx = self.module.get_context();
        let i64t = ctx.i64_type();
        let i32t = ctx.i32_type();
        let nslots = meta.params.len().max(1) as u32;
        let first = entry
            .get_first_instruction()
            .expect("a basic block has a terminator");
        builder.position_before(&first);
        let slots_ty = i64t.array_type(nslots);
        let slots = builder.build_alloca(slots_ty, "trestle.slots")?;
        let ret_copy = match (meta.ret, f.get_type().get_return_type()) {
            (ValueKind::Aggregate(_), Some(t)) => Some(builder.build_alloca(t, "trestle.ret")?),
            _ => None,
        };
        let va_list = if meta.variadic && meta.replayable {
            Some(builder.build_alloca(ctx.i8_type().array_type(24), "trestle.va")?)
        } else {
            None
        };
        let hook_point = after_leading_allocas(first);
        builder.position_before(&hook_point);
        if cstr(f.get_name()) == "main" {
            self.call_main_hook(f)?;
        }
        for (i, (p, pm)) in f.get_params().iter().zip(&meta.params).enumerate() {
            let packed = pack(builder, *p, pm.kind)?;
            let slot = slot_ptr(builder, slots_ty, slots, i as u64)?;
            builder.build_store(slot, packed)?;
        }
        if let Some(va) = va_list {
            store_variadic_words(builder, self.rt, f, va, slots_ty, slots)?;
        }
        let state = self.module.add_global(
            i32t,
            None,
            &format!("{}{:016x}", hooks::STATE_PREFIX, meta.id),
        );
        state.set_linkage(Linkage::Internal);
        state.set_initializer(&i32t.const_zero());
        let state = state.as_pointer_value();
        let sp = stack_pointer(builder, self.rt)?;
        builder.build_call(
            self.rt.enter,
            &[
                i64t.const_int(meta.id, false).into(),
                state.into(),
                slots.into(),
                i32t.const_int(nslots as u64, false).into(),
                sp,
            ],
            "",
        )?;
        Ok(Frame {
            slots,
            ret_copy,
            state,
            hook_point,
        })
    }

    /// Hand `main`'s `argc`, `argv` and `envp` to the runtime.
    fn call_main_hook(&self, main: FunctionValue<'ctx>) -> Result<(), BuilderError> {
        let ctx = self.module.get_context();
        let ptr = ctx.ptr_type(AddressSpace::default());
        let params = main.get_params();
        let argc = match params.first() {
            Some(BasicValueEnum::IntValue(i)) if i.get_type().get_bit_width() == 32 => *i,
            _ => ctx.i32_type().const_zero(),
        };
        let ptr_param = |k: usize| match params.get(k) {
            Some(BasicValueEnum::PointerValue(p)) => *p,
            _ => ptr.const_null(),
        };
        self.builder.build_call(
            self.rt.main,
            &[argc.into(), ptr_param(1).into(), ptr_param(2).into()],
            "",
        )?;
        Ok(())
    }

    /// Register an escaping alloca with the runtime: an entry-block one at the hook
    /// point, others right after it. False when it cannot be (no sized type, or nothing
    /// to insert before).
    fn register_alloca(
        &self,
        entry: BasicBlock<'ctx>,
        bb: BasicBlock<'ctx>,
        alloca: InstructionValue<'ctx>,
        hook_point: InstructionValue<'ctx>,
    ) -> Result<bool, BuilderError> {
        let builder = self.builder;
        let i64t = self.module.get_context().i64_type();
        let ty = match alloca.get_allocated_type() {
            Ok(t) => t,
            Err(_) => return Ok(false),
        };
        let elem = self.td.get_abi_size(&ty);
        if bb == entry && alloca.get_parent() == Some(entry) && is_before(alloca, hook_point) {
            builder.position_before(&hook_point);
        } else {
            match alloca.get_next_instruction() {
                Some(n) => builder.position_before(&n),
                None => return Ok(false),
            }
        }
        // SAFETY: operand 0 of an alloca is its element count.
        let count = unsafe { llc::LLVMGetOperand(alloca.as_value_ref(), 0) };
        // SAFETY: the count operand is an integer value.
        let count = unsafe { IntValue::new(count) };
        let count = if count.get_type().get_bit_width() == 64 {
            count
        } else {
            builder.build_int_z_extend(count, i64t, "")?
        };
        let size = builder.build_int_mul(count, i64t.const_int(elem, false), "")?;
        // SAFETY: an alloca's result is a pointer.
        let addr = unsafe { PointerValue::new(alloca.as_value_ref()) };
        builder.build_call(self.rt.alloca, &[addr.into(), size.into()], "")?;
        Ok(true)
    }

    /// After a `va_start`, tell the runtime where its `va_list` points.
    fn register_va_list(
        &self,
        start: InstructionValue<'ctx>,
        fn_id: u64,
    ) -> Result<(), BuilderError> {
        let Some(next) = start.get_next_instruction() else {
            return Ok(());
        };
        // SAFETY: operand 0 of va_start is the va_list's address.
        let ap = unsafe { PointerValue::new(llc::LLVMGetOperand(start.as_value_ref(), 0)) };
        self.builder.position_before(&next);
        let id = self.module.get_context().i64_type().const_int(fn_id, false);
        self.builder
            .build_call(self.rt.va_list, &[ap.into(), id.into()], "")?;
        Ok(())
    }

    /// Stores into globals: bump the global's write counter after each.
    fn count_global_stores(
        &self,
        global_stores: &[(InstructionValue<'ctx>, u32)],
    ) -> Result<(), BuilderError> {
        let Some(counters) = self.counters else {
            return Ok(());
        };
        let builder = self.builder;
        let i64t = self.module.get_context().i64_type();
        let arr_ty = i64t.array_type(self.counter_index.len() as u32);
        for (inst, idx) in global_stores {
            let Some(next) = inst.get_next_instruction() else {
                continue;
            };
            builder.position_before(&next);
            let p = slot_ptr(builder, arr_ty, counters.as_pointer_value(), *idx as u64)?;
            let old = builder.build_load(i64t, p, "")?.into_int_value();
            let new = builder.build_int_add(old, i64t.const_int(1, false), "")?;
            builder.build_store(p, new)?;
        }
        Ok(())
    }

    /// Call the exit hook before `ret` with the packed return value.
    fn insert_exit(
        &self,
        ret: InstructionValue<'ctx>,
        meta: &FnMeta,
        frame: &Frame<'ctx>,
    ) -> Result<(), BuilderError> {
        let builder = self.builder;
        let ctx = self.module.get_context();
        let i64t = ctx.i64_type();
        builder.position_before(&ret);
        // SAFETY: a `ret` has zero or one operand.
        let packed = unsafe {
            if llc::LLVMGetNumOperands(ret.as_value_ref()) == 1 {
                let v = BasicValueEnum::new(llc::LLVMGetOperand(ret.as_value_ref(), 0));
                match frame.ret_copy {
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
        let sp = stack_pointer(builder, self.rt)?;
        let top = builder.build_call(self.rt.return_address_slot, &[], "trestle.top")?;
        let top: BasicMetadataValueEnum = match top.try_as_basic_value() {
            inkwell::values::ValueKind::Basic(v) => v.into(),
            inkwell::values::ValueKind::Instruction(_) => {
                unreachable!("llvm.addressofreturnaddress returns a pointer")
            }
        };
        builder.build_call(
            self.rt.exit,
            &[
                i64t.const_int(meta.id, false).into(),
                frame.state.into(),
                packed.into(),
                frame.slots.into(),
                sp,
                top,
            ],
            "",
        )?;
        Ok(())
    }
}

impl<'ctx> Sites<'ctx> {
    fn collect(f: FunctionValue<'ctx>, counter_index: &HashMap<LLVMValueRef, u32>) -> Self {
        let mut sites = Sites {
            rets: Vec::new(),
            escaping_allocas: Vec::new(),
            va_starts: Vec::new(),
            global_stores: Vec::new(),
        };
        for bb in f.get_basic_blocks() {
            for inst in bb.get_instructions() {
                match inst.get_opcode() {
                    // A `ret` must directly follow a `musttail` call: leave those alone.
                    InstructionOpcode::Return if !follows_musttail_call(inst) => {
                        sites.rets.push(inst)
                    }
                    InstructionOpcode::Alloca if alloca_escapes(inst) => {
                        sites.escaping_allocas.push((bb, inst))
                    }
                    // SAFETY: the callee of a live call.
                    InstructionOpcode::Call
                        if unsafe { value_name(llc::LLVMGetCalledValue(inst.as_value_ref())) }
                            .starts_with("llvm.va_start") =>
                    {
                        sites.va_starts.push(inst)
                    }
                    InstructionOpcode::Store | InstructionOpcode::Call => {
                        if let Some(&i) =
                            written_base(inst).and_then(|base| counter_index.get(&base))
                        {
                            sites.global_stores.push((inst, i));
                        }
                    }
                    _ => {}
                }
            }
        }
        sites
    }
}

/// True when `inst` directly follows a `musttail` call.
fn follows_musttail_call(inst: InstructionValue<'_>) -> bool {
    inst.get_previous_instruction().is_some_and(|p| {
        // SAFETY: `p` is a live instruction.
        unsafe {
            !llc::LLVMIsACallInst(p.as_value_ref()).is_null()
                && llc::LLVMGetTailCallKind(p.as_value_ref())
                    == llvm_sys::LLVMTailCallKind::LLVMTailCallKindMustTail
        }
    })
}

/// The base of the pointer a store writes through, or a memory intrinsic's
/// destination: memcpy/memset/memmove into a global count as writes to it.
fn written_base(inst: InstructionValue<'_>) -> Option<LLVMValueRef> {
    let iref = inst.as_value_ref();
    // SAFETY: operand queries on a live store or call instruction.
    unsafe {
        match inst.get_opcode() {
            // operand 1 of a store is its pointer
            InstructionOpcode::Store => Some(pointer_base(llc::LLVMGetOperand(iref, 1))),
            InstructionOpcode::Call if !llc::LLVMIsAMemIntrinsic(iref).is_null() => {
                Some(pointer_base(llc::LLVMGetOperand(iref, 0)))
            }
            _ => None,
        }
    }
}

/// The first instruction of a block after its leading allocas.
fn after_leading_allocas(first: InstructionValue<'_>) -> InstructionValue<'_> {
    let mut hook_point = first;
    while is_alloca(hook_point) {
        match hook_point.get_next_instruction() {
            Some(n) => hook_point = n,
            None => break,
        }
    }
    hook_point
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
    slots_ty: ArrayType<'ctx>,
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
    let stack = builder
        .build_load(ptr, at(va, 8)?, "")?
        .into_pointer_value();
    let save = builder
        .build_load(ptr, at(va, 16)?, "")?
        .into_pointer_value();
    let fixed = f.get_params();
    let fp = fixed.iter().filter(|p| p.is_float_value()).count();
    let gp = fixed.len() - fp;
    let sources = (gp..VA_GP_WORDS)
        .map(|i| (save, 8 * i as u64))
        .chain((fp..VA_FP_WORDS).map(|j| (save, (8 * VA_GP_WORDS + 16 * j) as u64)))
        .chain((0..VA_STACK_WORDS).map(|w| (stack, 8 * w as u64)));
    for (k, (base, offset)) in sources.enumerate() {
        let word = builder.build_load(i64t, at(base, offset)?, "")?;
        builder.build_store(
            slot_ptr(builder, slots_ty, slots, (fixed.len() + k) as u64)?,
            word,
        )?;
    }
    builder.build_call(rt.va_end, &[va.into()], "")?;
    Ok(())
}

fn stack_pointer<'ctx>(
    builder: &Builder<'ctx>,
    rt: &Runtime<'ctx>,
) -> Result<BasicMetadataValueEnum<'ctx>, BuilderError> {
    let call = builder.build_call(rt.stacksave, &[], "trestle.sp")?;
    Ok(match call.try_as_basic_value() {
        inkwell::values::ValueKind::Basic(v) => v.into(),
        inkwell::values::ValueKind::Instruction(_) => {
            unreachable!("llvm.stacksave returns a pointer")
        }
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

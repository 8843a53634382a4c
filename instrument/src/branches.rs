//! The branch table (`trestle_abi::branches`): for every conditional branch and switch
//! of the optimised module, the SanitizerCoverage guards that tell which direction ran,
//! how much guarded code stands behind each direction, its source line, and the CmpLog
//! id of its comparison.
//!
//! It is built after the optimiser and SanitizerCoverage ran, before the guard calls
//! are inlined ([`crate::edges`]): the calls show which block each guard counts. A
//! direction's guard is the first block on its side that has one (SanitizerCoverage
//! leaves out blocks whose coverage another block implies, so the successor itself may
//! have none); what stands behind it is the guarded blocks its successor dominates.
//!
//! The comparison that decides a two-way branch is logged by SanitizerCoverage's
//! `trace-cmp` hook under an id taken from the return address, unknown before linking.
//! The table gives it a fixed id instead: its hook call is replaced by one to the
//! runtime's [`CMP_HOOK`], which logs the same operands into the same map.

use crate::pass::{add_to_llvm_used, file_path, is_local, table_global, PassError};
use inkwell::module::Module;
use inkwell::values::{
    AsValueRef as _, BasicMetadataValueEnum, FunctionValue, InstructionValue, PointerValue,
};
use inkwell::AddressSpace;
use llvm_sys::core as llc;
use llvm_sys::debuginfo as lldi;
use llvm_sys::prelude::{LLVMBasicBlockRef, LLVMValueRef};
use std::collections::{BTreeMap, HashMap};
use trestle_abi::branches::{
    cmp_id, encode_module_branches, module_key, Branch, Direction, ModuleBranches, CMP_HOOK,
    SECTION_BRANCHES, SECTION_BRANCH_GUARDS,
};
use trestle_abi::ids::symbol_id;

/// How many blocks past a direction's successor the search for its guards goes.
const GUARD_SEARCH: usize = 64;

/// What [`emit_branch_table`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BranchStats {
    /// Branches and switches in the table.
    pub branches: usize,
    /// Of those, with a comparison logged under a fixed id.
    pub with_cmp: usize,
}

/// A function's control-flow graph over its blocks, with immediate dominators.
struct Cfg {
    blocks: Vec<LLVMBasicBlockRef>,
    index: HashMap<LLVMBasicBlockRef, usize>,
    succs: Vec<Vec<usize>>,
    /// Immediate dominator by block (the entry's is itself); `None` if unreachable.
    idom: Vec<Option<usize>>,
    /// Reverse-postorder number by block (unreachable blocks: `usize::MAX`).
    rpo: Vec<usize>,
}

/// Calls that never return but are bugs, not the program ending itself: a direction
/// that leads to one is no error exit.
const CRASHING_CALLS: &[&str] = &[
    "abort",
    "__assert_fail",
    "__assert_perror_fail",
    "__stack_chk_fail",
    "__fortify_fail",
    "__chk_fail",
    "llvm.trap",
    "llvm.debugtrap",
    "__ubsan_handle",
];

/// By block: whether every path from it ends in `unreachable` after a call that never
/// returns and is no crash (see [`CRASHING_CALLS`]); a loop that may run for ever does
/// not count.
///
/// # Safety
/// `cfg` must describe a live function.
unsafe fn ends_the_program(cfg: &Cfg) -> Vec<bool> {
    let n = cfg.blocks.len();
    let mut ends = vec![false; n];
    for (b, &bb) in cfg.blocks.iter().enumerate() {
        // SAFETY: the terminator and the instruction before it in a live block.
        unsafe {
            let term = llc::LLVMGetBasicBlockTerminator(bb);
            if term.is_null() || llc::LLVMIsAUnreachableInst(term).is_null() {
                continue;
            }
            let call = llc::LLVMGetPreviousInstruction(term);
            if call.is_null() || llc::LLVMIsACallInst(call).is_null() {
                continue; // `__builtin_unreachable` after no call: not an exit
            }
            let name = crate::pass::value_name(llc::LLVMGetCalledValue(call));
            ends[b] = !name.is_empty() && !CRASHING_CALLS.iter().any(|c| name.starts_with(c));
        }
    }
    loop {
        let mut changed = false;
        for b in 0..n {
            if !ends[b] && !cfg.succs[b].is_empty() && cfg.succs[b].iter().all(|&s| ends[s]) {
                ends[b] = true;
                changed = true;
            }
        }
        if !changed {
            return ends;
        }
    }
}

impl Cfg {
    /// # Safety
    /// `f` must be a live function with a body.
    unsafe fn of(f: LLVMValueRef) -> Cfg {
        let mut blocks = Vec::new();
        // SAFETY: walking the blocks and terminators of a live function.
        unsafe {
            let mut bb = llc::LLVMGetFirstBasicBlock(f);
            while !bb.is_null() {
                blocks.push(bb);
                bb = llc::LLVMGetNextBasicBlock(bb);
            }
        }
        let index: HashMap<_, _> = blocks.iter().enumerate().map(|(i, b)| (*b, i)).collect();
        let succs: Vec<Vec<usize>> = blocks
            .iter()
            .map(|&bb| {
                // SAFETY: as above.
                unsafe {
                    let term = llc::LLVMGetBasicBlockTerminator(bb);
                    if term.is_null() {
                        return Vec::new();
                    }
                    (0..llc::LLVMGetNumSuccessors(term))
                        .filter_map(|k| index.get(&llc::LLVMGetSuccessor(term, k)).copied())
                        .collect()
                }
            })
            .collect();
        let n = blocks.len();
        // Reverse postorder from the entry, iteratively.
        let mut order = Vec::with_capacity(n);
        let mut seen = vec![false; n];
        let mut stack: Vec<(usize, usize)> = Vec::new();
        if n > 0 {
            seen[0] = true;
            stack.push((0, 0));
        }
        while let Some((b, k)) = stack.pop() {
            if k < succs[b].len() {
                stack.push((b, k + 1));
                let s = succs[b][k];
                if !seen[s] {
                    seen[s] = true;
                    stack.push((s, 0));
                }
            } else {
                order.push(b);
            }
        }
        order.reverse();
        let mut rpo = vec![usize::MAX; n];
        for (i, &b) in order.iter().enumerate() {
            rpo[b] = i;
        }
        let mut preds = vec![Vec::new(); n];
        for (b, ss) in succs.iter().enumerate() {
            for &s in ss {
                preds[s].push(b);
            }
        }
        // Cooper, Harvey and Kennedy's iterative dominators.
        let mut idom: Vec<Option<usize>> = vec![None; n];
        if n > 0 {
            idom[0] = Some(0);
        }
        let intersect = |idom: &[Option<usize>], mut a: usize, mut b: usize| {
            while a != b {
                while rpo[a] > rpo[b] {
                    a = idom[a].expect("processed");
                }
                while rpo[b] > rpo[a] {
                    b = idom[b].expect("processed");
                }
            }
            a
        };
        let mut changed = true;
        while changed {
            changed = false;
            for &b in order.iter().skip(1) {
                let mut new: Option<usize> = None;
                for &p in &preds[b] {
                    if idom[p].is_some() {
                        new = Some(match new {
                            None => p,
                            Some(q) => intersect(&idom, p, q),
                        });
                    }
                }
                if new.is_some() && idom[b] != new {
                    idom[b] = new;
                    changed = true;
                }
            }
        }
        Cfg {
            blocks,
            index,
            succs,
            idom,
            rpo,
        }
    }

    /// Whether `a` dominates `b`.
    fn dominates(&self, a: usize, mut b: usize) -> bool {
        if self.rpo[b] == usize::MAX {
            return false;
        }
        loop {
            if a == b {
                return true;
            }
            match self.idom[b] {
                Some(d) if d != b => b = d,
                _ => return false,
            }
        }
    }
}

/// The edge-callback calls of `module` by the block they are in, with their guards.
fn guards_by_block(module: &Module<'_>) -> HashMap<LLVMBasicBlockRef, Vec<LLVMValueRef>> {
    let mut out: HashMap<LLVMBasicBlockRef, Vec<LLVMValueRef>> = HashMap::new();
    for call in crate::edges::callback_calls(module) {
        let v = call.as_value_ref();
        // SAFETY: operand 0 of a live call to the callback is its guard pointer.
        unsafe {
            let guard = llc::LLVMGetOperand(v, 0);
            if llc::LLVMIsConstant(guard) != 0 {
                out.entry(llc::LLVMGetInstructionParent(v))
                    .or_default()
                    .push(guard);
            }
        }
    }
    out
}

/// Source file and line of an instruction, from its debug location.
///
/// # Safety
/// `inst` must be a live instruction.
unsafe fn location(inst: LLVMValueRef) -> Option<(String, u32)> {
    // SAFETY: debug-info queries on a live instruction; strings are copied out.
    unsafe {
        let loc = lldi::LLVMInstructionGetDebugLoc(inst);
        if loc.is_null() {
            return None;
        }
        let line = lldi::LLVMDILocationGetLine(loc);
        let scope = lldi::LLVMDILocationGetScope(loc);
        let file = if scope.is_null() {
            std::ptr::null_mut()
        } else {
            lldi::LLVMDIScopeGetFile(scope)
        };
        let path = if file.is_null() {
            String::new()
        } else {
            file_path(file)
        };
        (line > 0).then_some((path, line))
    }
}

/// The SanitizerCoverage `trace-cmp` call logging `icmp`, just before it in its block:
/// its operand size in bytes and whether its first operand is a constant.
///
/// # Safety
/// `icmp` must be a live `icmp` instruction.
unsafe fn cmp_hook_call(icmp: LLVMValueRef) -> Option<(LLVMValueRef, u8, bool)> {
    // SAFETY: walking back over live instructions of one block.
    unsafe {
        let mut prev = llc::LLVMGetPreviousInstruction(icmp);
        for _ in 0..4 {
            if prev.is_null() {
                return None;
            }
            if llc::LLVMIsACallInst(prev).is_null() {
                prev = llc::LLVMGetPreviousInstruction(prev);
                continue;
            }
            let callee = llc::LLVMGetCalledValue(prev);
            let name = crate::pass::value_name(callee);
            let (is_const, rest) = match name.strip_prefix("__sanitizer_cov_trace_const_cmp") {
                Some(rest) => (true, rest),
                None => (false, name.strip_prefix("__sanitizer_cov_trace_cmp")?),
            };
            let size: u8 = rest.parse().ok().filter(|s| matches!(s, 1 | 2 | 4 | 8))?;
            // The hook logs this comparison's operands (constants first, when one is).
            let (a, b) = (llc::LLVMGetOperand(icmp, 0), llc::LLVMGetOperand(icmp, 1));
            let (x, y) = (llc::LLVMGetOperand(prev, 0), llc::LLVMGetOperand(prev, 1));
            let int = |v: LLVMValueRef| {
                llc::LLVMGetTypeKind(llc::LLVMTypeOf(v))
                    == llvm_sys::LLVMTypeKind::LLVMIntegerTypeKind
            };
            if !int(x) || !int(y) {
                return None;
            }
            let same = |p: LLVMValueRef, q: LLVMValueRef| p == q || strip_cast(p) == strip_cast(q);
            if (same(x, a) && same(y, b)) || (same(x, b) && same(y, a)) {
                return Some((prev, size, is_const));
            }
            return None;
        }
        None
    }
}

/// `v` without an integer cast around it.
///
/// # Safety
/// `v` must be a live value.
unsafe fn strip_cast(v: LLVMValueRef) -> LLVMValueRef {
    // SAFETY: type queries on a live value.
    unsafe {
        if !llc::LLVMIsACastInst(v).is_null() {
            llc::LLVMGetOperand(v, 0)
        } else {
            v
        }
    }
}

/// Build the branch table of `module` and replace the `trace-cmp` calls of the branches'
/// comparisons by calls logging under fixed ids. Call before the edge callbacks are
/// inlined; a module without them (no SanitizerCoverage) gets no table.
pub fn emit_branch_table(module: &Module<'_>) -> Result<BranchStats, PassError> {
    let guards = guards_by_block(module);
    if guards.is_empty() {
        return Ok(BranchStats::default());
    }
    let module_name = crate::pass::cstr(module.get_source_file_name());
    let key = module_key(&module_name);
    let mut table = ModuleBranches {
        module: module_name.clone(),
        key,
        ..Default::default()
    };
    let mut files: BTreeMap<String, u32> = BTreeMap::new();
    // Slot by guard, in the order first used.
    let mut slots: HashMap<LLVMValueRef, u32> = HashMap::new();
    let mut slot_guards: Vec<LLVMValueRef> = Vec::new();
    let mut slot_of = |g: LLVMValueRef| -> u32 {
        *slots.entry(g).or_insert_with(|| {
            slot_guards.push(g);
            (slot_guards.len() - 1) as u32
        })
    };
    let mut replace: Vec<(LLVMValueRef, u32, u8, bool)> = Vec::new();
    let mut claimed: HashMap<LLVMValueRef, u32> = HashMap::new();
    let functions: Vec<FunctionValue<'_>> = module
        .get_functions()
        .filter(|f| f.count_basic_blocks() > 0)
        .collect();
    for f in functions {
        let fref = f.as_value_ref();
        // SAFETY: `f` is a live function with a body.
        let cfg = unsafe { Cfg::of(fref) };
        let fname = crate::pass::cstr(f.get_name());
        let function = symbol_id(&module_name, &fname, is_local(f.get_linkage()));
        let guarded = |b: usize| guards.get(&cfg.blocks[b]);
        let ends = unsafe { ends_the_program(&cfg) };
        // Guarded blocks dominated by each block: counted once per function.
        let mut behind = vec![0u32; cfg.blocks.len()];
        for b in 0..cfg.blocks.len() {
            if guarded(b).is_none() || cfg.rpo[b] == usize::MAX {
                continue;
            }
            let mut d = b;
            loop {
                behind[d] += 1;
                match cfg.idom[d] {
                    Some(up) if up != d => d = up,
                    _ => break,
                }
            }
        }
        for b in 0..cfg.blocks.len() {
            if cfg.succs[b].len() < 2 || cfg.rpo[b] == usize::MAX {
                continue;
            }
            // SAFETY: the terminator of a live block.
            let term = unsafe { llc::LLVMGetBasicBlockTerminator(cfg.blocks[b]) };
            // SAFETY: type queries on a live instruction.
            let (is_br, is_switch) = unsafe {
                (
                    !llc::LLVMIsABranchInst(term).is_null(),
                    !llc::LLVMIsASwitchInst(term).is_null(),
                )
            };
            if !is_br && !is_switch {
                continue; // invoke, indirectbr, callbr: no condition to solve
            }
            let mut directions = Vec::new();
            // SAFETY: as above; successor k of a live terminator.
            let n = unsafe { llc::LLVMGetNumSuccessors(term) };
            for k in 0..n {
                let Some(&s) = cfg.index.get(&unsafe { llc::LLVMGetSuccessor(term, k) }) else {
                    continue;
                };
                let mut first = Vec::new();
                let mut queue = std::collections::VecDeque::from([s]);
                let mut visited = std::collections::HashSet::from([s]);
                while let Some(x) = queue.pop_front() {
                    if visited.len() > GUARD_SEARCH {
                        break;
                    }
                    if let Some(gs) = guarded(x) {
                        first.extend(gs.iter().map(|g| slot_of(*g)));
                        continue;
                    }
                    for &y in &cfg.succs[x] {
                        // Only code the direction alone leads to tells it was taken.
                        if cfg.dominates(s, y) && y != b && visited.insert(y) {
                            queue.push_back(y);
                        }
                    }
                }
                // SAFETY: a switch's case k (k >= 1) has its value at operand 2k.
                let case = (is_switch && k > 0).then(|| unsafe {
                    llc::LLVMConstIntGetSExtValue(llc::LLVMGetOperand(term, 2 * k))
                });
                let behind = if cfg.dominates(b, s) { behind[s] } else { 0 };
                directions.push(Direction {
                    guards: first,
                    behind,
                    case,
                    ends: ends[s],
                });
            }
            if directions.iter().all(|d| d.guards.is_empty()) {
                continue;
            }
            // SAFETY: the condition of a conditional branch (operand 0 of a switch).
            let cond = unsafe {
                if is_br {
                    llc::LLVMGetCondition(term)
                } else {
                    llc::LLVMGetOperand(term, 0)
                }
            };
            let mut cmp = None;
            // SAFETY: type queries and debug info of live values.
            let icmp = unsafe { (!llc::LLVMIsAICmpInst(cond).is_null()).then_some(cond) };
            if let Some(icmp) = icmp {
                // SAFETY: `icmp` is a live icmp.
                if let Some((call, size, is_const)) = unsafe { cmp_hook_call(icmp) } {
                    // Branches sharing one comparison (the optimiser merges equal
                    // conditions) share its id; its call is replaced once.
                    let next = cmp_id(&module_name, table.branches.len() as u32);
                    let id = *claimed.entry(call).or_insert_with(|| {
                        replace.push((call, next, size, is_const));
                        next
                    });
                    cmp = Some(id);
                }
            }
            // SAFETY: live instructions.
            let loc = unsafe { location(term).or_else(|| icmp.and_then(|c| location(c))) };
            let (file, line) = match loc {
                Some((path, line)) if !path.is_empty() => {
                    let next = files.len() as u32;
                    (Some(*files.entry(path).or_insert(next)), line)
                }
                Some((_, line)) => (None, line),
                None => (None, 0),
            };
            table.branches.push(Branch {
                function,
                file,
                line,
                cmp,
                directions,
            });
        }
    }
    let stats = BranchStats {
        branches: table.branches.len(),
        with_cmp: replace.len(),
    };
    if table.branches.is_empty() {
        return Ok(stats);
    }
    let mut names: Vec<(String, u32)> = files.into_iter().collect();
    names.sort_by_key(|(_, i)| *i);
    table.files = names.into_iter().map(|(p, _)| p).collect();
    replace_cmp_hooks(module, &replace)?;
    emit(module, &table, key, &slot_guards);
    Ok(stats)
}

/// Replace each `trace-cmp` call by one to [`CMP_HOOK`] with its fixed id.
fn replace_cmp_hooks(
    module: &Module<'_>,
    calls: &[(LLVMValueRef, u32, u8, bool)],
) -> Result<(), PassError> {
    if calls.is_empty() {
        return Ok(());
    }
    let ctx = module.get_context();
    let (i8t, i64t) = (ctx.i8_type(), ctx.i64_type());
    let hook = module.get_function(CMP_HOOK).unwrap_or_else(|| {
        let ty = ctx.void_type().fn_type(
            &[
                i64t.into(),
                i8t.into(),
                i64t.into(),
                i64t.into(),
                i8t.into(),
            ],
            false,
        );
        module.add_function(CMP_HOOK, ty, Some(inkwell::module::Linkage::External))
    });
    let builder = ctx.create_builder();
    for &(call, id, size, is_const) in calls {
        // SAFETY: type queries on the operands of a live call.
        let ints = unsafe {
            (0..2).all(|k| {
                let ty = llc::LLVMTypeOf(llc::LLVMGetOperand(call, k));
                llc::LLVMGetTypeKind(ty) == llvm_sys::LLVMTypeKind::LLVMIntegerTypeKind
            })
        };
        if !ints {
            continue; // not the hook's usual shape: it keeps logging under its own id
        }
        // SAFETY: `call` is a live call instruction with two integer operands.
        let inst = unsafe { InstructionValue::new(call) };
        builder.position_before(&inst);
        let arg = |k: u32| -> Result<BasicMetadataValueEnum<'_>, PassError> {
            // SAFETY: operand k (0 or 1) of the call is an integer of `size` bytes.
            let v = unsafe { inkwell::values::IntValue::new(llc::LLVMGetOperand(call, k)) };
            Ok(builder.build_int_z_extend_or_bit_cast(v, i64t, "")?.into())
        };
        let args = [
            i64t.const_int(id as u64, false).into(),
            i8t.const_int(size as u64, false).into(),
            arg(0)?,
            arg(1)?,
            i8t.const_int(is_const as u64, false).into(),
        ];
        builder.build_call(hook, &args, "")?;
        inst.erase_from_basic_block();
    }
    Ok(())
}

/// The table's blob and guard rows, kept alive through `llvm.used`.
fn emit(module: &Module<'_>, table: &ModuleBranches, key: u64, guards: &[LLVMValueRef]) {
    let ctx = module.get_context();
    let i64t = ctx.i64_type();
    let ptr = ctx.ptr_type(AddressSpace::default());
    let row_ty = ctx.struct_type(&[i64t.into(), i64t.into(), ptr.into()], false);
    let rows: Vec<_> = guards
        .iter()
        .enumerate()
        .map(|(slot, g)| {
            // SAFETY: `g` is a live constant pointer (a guard's address).
            let g = unsafe { PointerValue::new(*g) };
            row_ty.const_named_struct(&[
                i64t.const_int(key, false).into(),
                i64t.const_int(slot as u64, false).into(),
                g.into(),
            ])
        })
        .collect();
    let rows_g = table_global(
        module,
        row_ty.array_type(rows.len() as u32),
        &row_ty.const_array(&rows),
        "__trestle_branch_guards",
        SECTION_BRANCH_GUARDS,
        8,
    );
    let blob = encode_module_branches(table);
    let blob_val = ctx.const_string(&blob, false);
    let blob_g = table_global(
        module,
        blob_val.get_type(),
        &blob_val,
        "__trestle_branches",
        SECTION_BRANCHES,
        1,
    );
    add_to_llvm_used(module, &[rows_g, blob_g]);
}

//! Small queries on raw LLVM values that inkwell does not offer, shared by the visitors.

use inkwell::builder::Builder;
use inkwell::context::ContextRef;
use llvm_sys::core as llc;
use llvm_sys::prelude::LLVMValueRef;

/// An LLVM name as an owned string.
pub(crate) fn cstr(s: &std::ffi::CStr) -> String {
    s.to_string_lossy().into_owned()
}

/// True for calls, invokes and callbrs.
///
/// # Safety
/// `v` must be a live value.
pub(super) unsafe fn is_call_base(v: LLVMValueRef) -> bool {
    // SAFETY: type queries on a live value.
    unsafe {
        !llc::LLVMIsACallInst(v).is_null()
            || !llc::LLVMIsAInvokeInst(v).is_null()
            || !llc::LLVMIsACallBrInst(v).is_null()
    }
}

/// The context of the block the builder is positioned in.
pub(super) fn builder_ctx<'ctx>(builder: &Builder<'ctx>) -> ContextRef<'ctx> {
    builder
        .get_insert_block()
        .expect("builder is positioned")
        .get_context()
}

/// The name of a value.
///
/// # Safety
/// `v` must be a live value.
pub(crate) unsafe fn value_name(v: LLVMValueRef) -> String {
    let mut len = 0usize;
    // SAFETY: LLVM returns a pointer to `len` bytes owned by the value.
    unsafe {
        let p = llc::LLVMGetValueName2(v, &mut len);
        String::from_utf8_lossy(std::slice::from_raw_parts(p as *const u8, len)).into_owned()
    }
}

/// The users of a live value, one per use.
pub(super) fn users(v: LLVMValueRef) -> Vec<LLVMValueRef> {
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

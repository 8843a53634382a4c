//! The runtime's hooks as the pass sees them: one declaration of each in the module
//! being instrumented, so every visitor calls the same functions.

use inkwell::module::Module;
use inkwell::values::FunctionValue;
use inkwell::AddressSpace;
use trestle_abi::hooks;

/// The runtime's hooks, declared in the module being instrumented.
pub(super) struct Runtime<'ctx> {
    pub(super) stacksave: FunctionValue<'ctx>,
    pub(super) return_address_slot: FunctionValue<'ctx>,
    pub(super) va_start: FunctionValue<'ctx>,
    pub(super) va_end: FunctionValue<'ctx>,
    pub(super) enter: FunctionValue<'ctx>,
    pub(super) exit: FunctionValue<'ctx>,
    pub(super) alloca: FunctionValue<'ctx>,
    pub(super) va_list: FunctionValue<'ctx>,
    pub(super) main: FunctionValue<'ctx>,
}

impl<'ctx> Runtime<'ctx> {
    pub(super) fn declare(module: &Module<'ctx>) -> Self {
        let ctx = module.get_context();
        let i64t = ctx.i64_type();
        let i32t = ctx.i32_type();
        let ptr = ctx.ptr_type(AddressSpace::default());
        let void = ctx.void_type();
        let get = |name: &str, ty| {
            module
                .get_function(name)
                .unwrap_or_else(|| module.add_function(name, ty, None))
        };
        let stacksave = inkwell::intrinsics::Intrinsic::find("llvm.stacksave")
            .and_then(|i| i.get_declaration(module, &[ptr.into()]))
            .expect("LLVM 19 has llvm.stacksave");
        let return_address_slot =
            inkwell::intrinsics::Intrinsic::find("llvm.addressofreturnaddress")
                .and_then(|i| i.get_declaration(module, &[ptr.into()]))
                .expect("LLVM 19 has llvm.addressofreturnaddress");
        let va = |name: &str| {
            inkwell::intrinsics::Intrinsic::find(name)
                .and_then(|i| i.get_declaration(module, &[ptr.into()]))
                .expect("LLVM 19 has the va intrinsics")
        };
        Runtime {
            stacksave,
            return_address_slot,
            va_start: va("llvm.va_start"),
            va_end: va("llvm.va_end"),
            enter: get(
                hooks::ENTER,
                void.fn_type(
                    &[i64t.into(), ptr.into(), ptr.into(), i32t.into(), ptr.into()],
                    false,
                ),
            ),
            exit: get(
                hooks::EXIT,
                void.fn_type(
                    &[
                        i64t.into(),
                        ptr.into(),
                        i64t.into(),
                        ptr.into(),
                        ptr.into(),
                        ptr.into(),
                    ],
                    false,
                ),
            ),
            alloca: get(
                hooks::ALLOCA,
                void.fn_type(&[ptr.into(), i64t.into()], false),
            ),
            va_list: get(
                hooks::VA_LIST,
                void.fn_type(&[ptr.into(), i64t.into()], false),
            ),
            main: get(
                hooks::MAIN,
                void.fn_type(&[i32t.into(), ptr.into(), ptr.into()], false),
            ),
        }
    }
}

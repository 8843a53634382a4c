//! Allocator renaming: calls to `malloc` & co. go to the runtime's wrappers, so every
//! heap extent is known.

use inkwell::module::Module;
use trestle_abi::hooks;

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
        let Some(f) = module.get_function(orig) else {
            continue;
        };
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

//! Stable ids for functions and globals.
//!
//! Ids must be equal across builds of the same source, so that a unit carved from one
//! build names the same function in the next. They are a fixed hash (FNV-1a, 64 bit)
//! of the symbol name, prefixed with the module's source file name for symbols with
//! local linkage (two `static` functions called `helper` in two files differ).

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a over `bytes`, continuing from `state` (start with [`fnv1a64_start`]).
pub const fn fnv1a64_extend(mut state: u64, bytes: &[u8]) -> u64 {
    let mut i = 0;
    while i < bytes.len() {
        state ^= bytes[i] as u64;
        state = state.wrapping_mul(FNV_PRIME);
        i += 1;
    }
    state
}

/// The initial FNV-1a state.
pub const fn fnv1a64_start() -> u64 {
    FNV_OFFSET
}

/// FNV-1a (64 bit) of `bytes`.
pub const fn fnv1a64(bytes: &[u8]) -> u64 {
    fnv1a64_extend(FNV_OFFSET, bytes)
}

/// The id of a function or global symbol.
///
/// `local` is true for private and internal linkage; `module` is the module's source
/// file name as the compiler saw it.
pub fn symbol_id(module: &str, name: &str, local: bool) -> u64 {
    let id = if local {
        let h = fnv1a64_extend(fnv1a64(module.as_bytes()), &[0]);
        fnv1a64_extend(h, name.as_bytes())
    } else {
        fnv1a64(name.as_bytes())
    };
    // 0 is reserved for "no id" in the tables.
    if id == 0 {
        1
    } else {
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_fixed_across_builds() {
        // Known FNV-1a test vector: a change of algorithm would silently orphan every
        // unit carved before it.
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(symbol_id("x.c", "main", false), fnv1a64(b"main"));
        assert_ne!(
            symbol_id("a.c", "helper", true),
            symbol_id("b.c", "helper", true)
        );
    }
}

//! What the instrumented program says about its symbols: function and global
//! metadata with the module each comes from, and the bytes of read-only globals that
//! have no symbol to point at.

use anyhow::{bail, Context as _, Result};
use object::{Object, ObjectSection, ObjectSymbol};
use std::collections::{HashMap, HashSet};
use trestle_abi::meta::{
    decode_meta_section, FnMeta, GlobalEntry, GlobalMeta, SECTION_GLOBALS, SECTION_META,
};
use trestle_exec::binary::Binary;

/// A global, as the generated C refers to it.
#[derive(Debug, Clone)]
pub(super) struct GlobalInfo {
    pub(super) meta: GlobalMeta,
    pub(super) module: String,
    /// For a read-only global without a symbol (a private constant such as a string
    /// literal): its bytes, copied from the recording binary.
    pub(super) copy: Option<Vec<u8>>,
}

/// Function and global metadata of an instrumented program, with the module each
/// comes from (`Binary` keeps neither globals nor modules).
#[derive(Debug, Default)]
pub(super) struct Program {
    pub(super) functions: HashMap<u64, (FnMeta, String)>,
    pub(super) globals: HashMap<u64, GlobalInfo>,
}

impl Program {
    /// Read the metadata of `binary`'s program file.
    pub(super) fn read(binary: &Binary) -> Result<Program> {
        let path = &binary.path;
        let data = std::fs::read(path)
            .with_context(|| format!("cannot read program {}", path.display()))?;
        let file = object::File::parse(&*data)
            .with_context(|| format!("{} is not an executable trestle can read", path.display()))?;
        let meta = file
            .section_by_name(SECTION_META)
            .map(|s| s.data())
            .transpose()
            .with_context(|| {
                format!(
                    "cannot read the {SECTION_META} section of {}",
                    path.display()
                )
            })?
            .with_context(|| format!("{} has no {SECTION_META} section", path.display()))?;
        let modules =
            decode_meta_section(meta).with_context(|| format!("in {}", path.display()))?;
        // Symbols whose names are not UTF-8 cannot be a global's name: leaving them out
        // loses nothing.
        let symbols: HashSet<&str> = file.symbols().filter_map(|s| s.name().ok()).collect();
        let has_globals = modules.iter().any(|m| !m.globals.is_empty());
        let addrs = global_addresses(&file, has_globals)
            .with_context(|| format!("in {}", path.display()))?;
        let mut program = Program::default();
        for m in modules {
            for f in m.functions {
                program
                    .functions
                    .entry(f.id)
                    .or_insert((f, m.module.clone()));
            }
            for g in m.globals {
                // A private global has no symbol (not even a local one) in any object.
                let copy =
                    if g.constant && !symbols.is_empty() && !symbols.contains(g.name.as_str()) {
                        addrs.get(&g.id).and_then(|&a| read_at(&file, a, g.size))
                    } else {
                        None
                    };
                program.globals.entry(g.id).or_insert(GlobalInfo {
                    meta: g,
                    module: m.module.clone(),
                    copy,
                });
            }
        }
        Ok(program)
    }
}

/// Global id → address, from the program's global table rows. A program whose
/// metadata has globals must have the table (the runtime's padding row puts one in
/// every linked program): without it, read-only globals would silently lose their
/// copies.
fn global_addresses(file: &object::File<'_>, has_globals: bool) -> Result<HashMap<u64, u64>> {
    let Some(section) = file.section_by_name(SECTION_GLOBALS) else {
        if has_globals {
            bail!("the metadata lists globals but there is no {SECTION_GLOBALS} section to find them by");
        }
        return Ok(HashMap::new());
    };
    let data = section
        .data()
        .with_context(|| format!("cannot read the {SECTION_GLOBALS} section"))?;
    Ok(GlobalEntry::ids_and_addresses(data)
        .filter(|&(id, _)| id != 0)
        .collect())
}

/// `len` bytes of the file image at virtual address `addr`.
fn read_at(file: &object::File<'_>, addr: u64, len: u64) -> Option<Vec<u8>> {
    file.sections().find_map(|s| {
        let start = s.address();
        if addr < start || addr + len > start + s.size() {
            return None;
        }
        let data = s.data().ok()?;
        let from = (addr - start) as usize;
        data.get(from..from + len as usize).map(<[u8]>::to_vec)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_globals_table_is_an_error_only_when_there_are_globals() {
        // This test's own executable is not instrumented: it has no globals table.
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let file = object::File::parse(&*exe).unwrap();
        assert!(global_addresses(&file, false).unwrap().is_empty());
        let e = global_addresses(&file, true).unwrap_err();
        assert!(e.to_string().contains(SECTION_GLOBALS), "{e}");
    }
}

//! Reading an instrumented binary's own description (the `trestle_meta` section).

use anyhow::{bail, Context as _, Result};
use object::{Object, ObjectSection};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use trestle_abi::meta::{binary_id, decode_meta_section, FnMeta, SECTION_META};

/// What trestle knows about an instrumented program.
#[derive(Debug, Clone)]
pub struct Binary {
    /// Where it is.
    pub path: PathBuf,
    /// Its id ([`trestle_abi::meta::binary_id`]).
    pub id: u64,
    /// Its instrumented functions by id.
    pub functions: HashMap<u64, FnMeta>,
}

impl Binary {
    /// Read `path`. Fails with a message naming the file if it is missing, not an
    /// executable, or not built with trestle-cc.
    pub fn load(path: &Path) -> Result<Binary> {
        let data = std::fs::read(path).with_context(|| format!("cannot read program {}", path.display()))?;
        let file = object::File::parse(&*data)
            .with_context(|| format!("{} is not an executable trestle can read", path.display()))?;
        let Some(section) = file.section_by_name(SECTION_META) else {
            bail!("{} was not built with trestle-cc (it has no {SECTION_META} section)", path.display());
        };
        let bytes = section
            .data()
            .with_context(|| format!("cannot read the {SECTION_META} section of {}", path.display()))?;
        let modules = decode_meta_section(bytes).with_context(|| format!("in {}", path.display()))?;
        let mut functions = HashMap::new();
        for m in modules {
            for f in m.functions {
                functions.entry(f.id).or_insert(f);
            }
        }
        let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
        Ok(Binary { path, id: binary_id(bytes), functions })
    }

    /// The display name of function `id`.
    pub fn function_name(&self, id: u64) -> String {
        self.functions
            .get(&id)
            .map(|f| f.display_name().to_owned())
            .unwrap_or_else(|| format!("fn_{id:016x}"))
    }
}

//! Reading an instrumented binary's own description (the `trestle_meta` section).

use crate::launch::{run_to_end, Capture};
use crate::systest::RunStatus;
use anyhow::{bail, Context as _, Result};
use object::{Object, ObjectSection};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use trestle_abi::branches::{decode_guard_numbers, ENV_BRANCH_DUMP};
use trestle_abi::meta::{binary_id, decode_meta_section, FnMeta, SECTION_META};

/// What trestle knows about an instrumented program.
#[derive(Debug, Clone)]
pub struct Binary {
    /// Where it is.
    pub path: PathBuf,
    /// Its id ([`trestle_abi::meta::binary_id`]).
    pub id: u64,
    /// Which build it is: FNV-1a of the whole file (two copies of one build agree;
    /// a rebuild with other flags or sources does not).
    pub build: u64,
    /// Its instrumented functions by id.
    pub functions: HashMap<u64, FnMeta>,
    /// Short constant strings by global id.
    pub strings: HashMap<u64, Vec<u8>>,
    /// Global names by id, for messages ([`trestle_abi::context::GlobalNames`]); a
    /// name two globals share (file-local `static`s) carries the id too.
    pub global_names: trestle_abi::context::GlobalNames,
}

impl Binary {
    /// Read `path`. Fails with a message naming the file if it is missing, not an
    /// executable, or not built with trestle-cc.
    pub fn load(path: &Path) -> Result<Binary> {
        let data = std::fs::read(path)
            .with_context(|| format!("cannot read program {}", path.display()))?;
        let file = object::File::parse(&*data)
            .with_context(|| format!("{} is not an executable trestle can read", path.display()))?;
        let Some(section) = file.section_by_name(SECTION_META) else {
            bail!(
                "{} was not built with trestle-cc (it has no {SECTION_META} section)",
                path.display()
            );
        };
        let bytes = section.data().with_context(|| {
            format!(
                "cannot read the {SECTION_META} section of {}",
                path.display()
            )
        })?;
        let modules =
            decode_meta_section(bytes).with_context(|| format!("in {}", path.display()))?;
        let mut functions = HashMap::new();
        let mut strings = HashMap::new();
        let mut global_names = HashMap::new();
        for m in modules {
            for f in m.functions {
                functions.entry(f.id).or_insert(f);
            }
            for g in m.globals {
                global_names.insert(g.id, g.name);
                if let Some(t) = g.text {
                    strings.insert(g.id, t);
                }
            }
        }
        let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
        let global_names = disambiguate(global_names);
        Ok(Binary {
            path,
            id: binary_id(bytes),
            build: trestle_abi::ids::fnv1a64(&data),
            functions,
            strings,
            global_names,
        })
    }

    /// The name of global `id`, or its id in hex.
    pub fn global_name(&self, id: u64) -> String {
        self.global_names
            .get(&id)
            .cloned()
            .unwrap_or_else(|| format!("{id:016x}"))
    }

    /// Fail unless `unit` (read from `unit_path`) was carved from this binary.
    pub fn check_unit(&self, unit: &trestle_abi::unit::Unit, unit_path: &Path) -> Result<()> {
        if self.id != unit.binary_id {
            bail!(
                "unit {} was carved from another binary (id {:016x}); {} is {:016x}",
                unit_path.display(),
                unit.binary_id,
                self.path.display(),
                self.id
            );
        }
        Ok(())
    }

    /// Functions reachable from `id` through direct calls (itself included).
    pub fn callees_closure(&self, id: u64) -> Vec<&FnMeta> {
        self.callees_by_depth(id)
            .into_iter()
            .map(|(f, _)| f)
            .collect()
    }

    /// Functions reachable from `id` through direct calls, each with the fewest calls
    /// it takes to get there (`id` itself at 0).
    pub fn callees_by_depth(&self, id: u64) -> Vec<(&FnMeta, u32)> {
        let mut seen = std::collections::HashSet::from([id]);
        let mut level = vec![id];
        let mut out = Vec::new();
        let mut depth = 0;
        while !level.is_empty() {
            let mut next = Vec::new();
            for f in level {
                if let Some(m) = self.functions.get(&f) {
                    out.push((m, depth));
                    next.extend(m.callees.iter().copied().filter(|c| seen.insert(*c)));
                }
            }
            level = next;
            depth += 1;
        }
        out
    }

    /// The string literals (and compared constants, also in decimal) of the code `id`
    /// can reach: a dictionary for fuzzing it.
    pub fn dictionary_for(&self, id: u64) -> (Vec<Vec<u8>>, Vec<i64>) {
        let mut words = std::collections::BTreeSet::new();
        let mut ints = std::collections::BTreeSet::new();
        for f in self.callees_closure(id) {
            ints.extend(f.cmp_constants.iter().copied());
            for g in &f.globals {
                if let Some(t) = self.strings.get(g) {
                    words.insert(t.clone());
                }
            }
        }
        // Numbers reach many functions as text (an argument, a line of input): the
        // compared constants in decimal are words too.
        for i in ints.iter().filter(|i| i.unsigned_abs() >= 10) {
            words.insert(i.to_string().into_bytes());
        }
        (
            words.into_iter().take(1000).collect(),
            ints.into_iter().take(1000).collect(),
        )
    }

    /// The display name of function `id`.
    pub fn function_name(&self, id: u64) -> String {
        self.functions
            .get(&id)
            .map(|f| f.display_name().to_owned())
            .unwrap_or_else(|| format!("fn_{id:016x}"))
    }
}

/// Names by id, a name that more than one id has followed by the id.
fn disambiguate(names: HashMap<u64, String>) -> HashMap<u64, String> {
    let mut count: HashMap<&str, usize> = HashMap::new();
    for n in names.values() {
        *count.entry(n.as_str()).or_default() += 1;
    }
    let shared: std::collections::HashSet<String> = count
        .into_iter()
        .filter(|&(_, c)| c > 1)
        .map(|(n, _)| n.to_owned())
        .collect();
    names
        .into_iter()
        .map(|(id, n)| {
            let n = if shared.contains(&n) {
                format!("{n} ({id:016x})")
            } else {
                n
            };
            (id, n)
        })
        .collect()
}

/// The edge number of every guard row of `program`, by (module key, slot).
pub fn guard_numbers(program: &Path) -> Result<HashMap<(u64, u64), u32>> {
    let dir = tempfile::tempdir().context("cannot create a temporary directory")?;
    let out = dir.path().join("guards");
    let mut cmd = Command::new(program);
    cmd.env(ENV_BRANCH_DUMP, &out).current_dir(dir.path());
    let ended = run_to_end(
        &mut cmd,
        Path::new("/dev/null"),
        Capture {
            stdout: false,
            stderr: true,
        },
        Duration::from_secs(30),
    )
    .with_context(|| format!("reading the branch guards of {}", program.display()))?;
    if ended.status != RunStatus::Exited(0) || !out.exists() {
        bail!(
            "{} did not write its branch guards (it ended with {:?}{}): was it built with this trestle-cc?",
            program.display(),
            ended.status,
            match String::from_utf8_lossy(&ended.stderr).trim() {
                "" => String::new(),
                e => format!(": {e}"),
            }
        );
    }
    let bytes = std::fs::read(&out).with_context(|| format!("cannot read {}", out.display()))?;
    let rows =
        decode_guard_numbers(&bytes).map_err(|e| anyhow::anyhow!("{}: {e}", out.display()))?;
    Ok(rows.into_iter().map(|(m, s, n)| ((m, s), n)).collect())
}

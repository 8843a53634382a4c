//! `trestle export`: a carved unit as a standalone C file that rebuilds the unit's
//! context and calls the function — a regression test a user can keep.
//!
//! The C file is compiled against the subject's own objects, not the trestle runtime,
//! and mirrors what the runtime's replay does (`runtime/src/replay.rs`):
//!
//! - heap, stack and argv extents become `static` arrays holding their bytes (heap
//!   extents are copied into `malloc`ed blocks at run time, so the function may free
//!   or grow them); globals are written in place through their symbol; read-only
//!   globals are only pointed at; pointer words are patched in `main` once every
//!   extent has its address;
//! - the recorded `setlocale` calls are repeated and open files reopened by path;
//! - the call goes through a prototype built from the function's parameter kinds.
//!
//! Static functions and globals have no symbol another object can link against, so
//! the companion `build.sh` copies the subject's objects and rewrites them with
//! `objcopy --globalize-symbol` (and renames the subject's `main`). The symbols a
//! test needs are listed in its header comment, which `build.sh` reads.
//!
//! With parameter values (a unit-fuzzer input), the values are first written into a
//! copy of the context on the host, as the unit harness writes them
//! (`runtime/src/fuzz.rs`; both follow `trestle_abi::params`): [`apply_values`].
//!
//! The parts: `values` (parameter values written into a context), `program` (what
//! the program says about its symbols and globals), `generator` (the declarations,
//! arrays and statements that rebuild the context), `render` (the whole file, header
//! included), `text` (C literals, identifiers and types), `templates` (the C helpers
//! and `build.sh`).

mod generator;
mod program;
mod render;
mod templates;
mod text;
mod values;

pub use templates::build_script;
pub use values::apply_values;

use crate::carve::units::read_unit;
use anyhow::{bail, Context as _, Result};
use program::Program;
use std::path::{Path, PathBuf};
use trestle_abi::fuzz::{decode_values, ParamValue};
use trestle_abi::unit::Unit;
use trestle_exec::binary::Binary;

/// What `trestle export` writes (the command line's flags, as values: `trestle
/// export --help` has the user's view).
#[derive(Debug)]
pub struct Options {
    /// The unit to export.
    pub unit: PathBuf,
    /// A unit-fuzzer input whose values the parameters take; `None` for the recorded ones.
    pub input: Option<PathBuf>,
    /// The C file to write; `build.sh` goes beside it.
    pub out: PathBuf,
    /// The build whose functions and globals the test names; `None` for the unit's own.
    pub program: Option<PathBuf>,
}

/// What the subject's `main` is renamed to, so the test can have a `main` of its own.
pub const SUBJECT_MAIN: &str = "trestle_subject_main";

/// First line of every exported test; `build.sh` tells tests from subject sources by it.
const MARKER: &str = "/* Unit test exported by trestle";

/// Run `trestle export`.
pub fn run(args: &Options) -> Result<()> {
    if args.out.extension().is_none_or(|x| x != "c") {
        bail!(
            "--out {}: the exported test must be a .c file",
            args.out.display()
        );
    }
    let unit = read_unit(&args.unit)?;
    let program = args
        .program
        .clone()
        .unwrap_or_else(|| PathBuf::from(&unit.provenance.program));
    let binary = Binary::load(&program).with_context(|| {
        format!(
            "exporting {}: cannot read the program it was carved from (pass --program)",
            args.unit.display()
        )
    })?;
    binary.check_unit(&unit, &args.unit)?;
    let values = match &args.input {
        None => None,
        Some(path) => {
            if unit.params.is_empty() {
                bail!(
                    "unit {} has no parameters: an input ({}) has nothing to set",
                    args.unit.display(),
                    path.display()
                );
            }
            let bytes = std::fs::read(path)
                .with_context(|| format!("cannot read input {}", path.display()))?;
            Some(decode_values(&unit.params, &bytes))
        }
    };
    let c = export_c(&unit, Some(&binary), values.as_deref())
        .with_context(|| format!("exporting {}", args.unit.display()))?;
    std::fs::write(&args.out, c).with_context(|| format!("cannot write {}", args.out.display()))?;
    let dir = args
        .out
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let script = dir.join("build.sh");
    let name = args.out.file_name().unwrap_or_default().to_string_lossy();
    std::fs::write(&script, build_script(&name))
        .with_context(|| format!("cannot write {}", script.display()))?;
    set_executable(&script)?;
    log::info!(
        "wrote {} and {}; build it with: {} SUBJECT.c (or the subject's .o files)",
        args.out.display(),
        script.display(),
        script.display()
    );
    Ok(())
}

fn set_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("cannot make {} executable", path.display()))
}

/// The unit as C source; with `values` (one per `unit.params`), the parameters take
/// those values. `binary` supplies symbol names and the prototype; without it, the
/// function is called by its display name with a prototype guessed from the
/// arguments, and globals cannot be restored (the file says so with `#error`).
pub fn export_c(
    unit: &Unit,
    binary: Option<&Binary>,
    values: Option<&[ParamValue]>,
) -> Result<String> {
    let program = match binary {
        Some(b) => Program::read(b)?,
        None => Program::default(),
    };
    if binary.is_some() && !program.functions.contains_key(&unit.context.fn_id) {
        bail!(
            "function {:016x} ({}) is not in the program's metadata",
            unit.context.fn_id,
            unit.function
        );
    }
    let ctx = match values {
        Some(v) => apply_values(&unit.context, &unit.params, v)?,
        None => unit.context.clone(),
    };
    Ok(render::render(unit, &ctx, &program, values))
}

/// Values and contexts the tests of every part build on.
#[cfg(test)]
mod fixtures {
    use trestle_abi::context::{Context, Extent, ExtentKind, Graph, Value};
    use trestle_abi::unit::{Param, ParamKind, ParamSite, Resize, Unit};

    pub(super) fn heap(bytes: &[u8]) -> Extent {
        Extent {
            kind: ExtentKind::Heap,
            len: bytes.len() as u64,
            align: 16,
            bytes: Some(bytes.to_vec()),
            pointers: vec![],
        }
    }

    pub(super) fn string_param(
        extent: u32,
        offset: u64,
        len: u64,
        resizable: bool,
        original: &[u8],
    ) -> Param {
        Param {
            site: ParamSite::Memory {
                extent,
                offset,
                len,
            },
            kind: ParamKind::Bytes {
                nul: true,
                resize: if resizable {
                    Resize::Extent
                } else {
                    Resize::Fixed
                },
            },
            original: original.to_vec(),
            origins: vec![],
            companions: vec![],
        }
    }

    pub(super) fn context(extents: Vec<Extent>, args: Vec<Value>) -> Context {
        Context {
            fn_id: 1,
            args,
            graph: Graph {
                extents,
                ..Graph::default()
            },
            locale: vec![],
            stdio_modes: vec![],
            fds: vec![],
            streams: vec![],
        }
    }

    pub(super) fn bare_unit(ctx: Context) -> Unit {
        Unit {
            magic: trestle_abi::unit::UNIT_MAGIC,
            version: trestle_abi::unit::UNIT_VERSION,
            binary_id: 1,
            function: "greet".into(),
            context: ctx,
            expected: None,
            provenance: trestle_abi::unit::Provenance {
                program: "/p".into(),
                test: "t".into(),
                trace: "x".into(),
                pid: 1,
                seq: 0,
                call_index: 0,
            },
            system_test: Default::default(),
            params: vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::{bare_unit, context, heap};
    use super::*;
    use trestle_abi::context::{ExtentKind, Value};

    #[test]
    fn a_cut_off_recording_is_zero_filled_and_said_so() {
        let mut cut = heap(&[]);
        cut.len = 40;
        cut.bytes = None;
        let mut ctx = context(
            vec![cut],
            vec![
                Value::Ptr {
                    extent: 0,
                    offset: 8,
                },
                Value::Ptr {
                    extent: 7,
                    offset: 0,
                },
            ],
        );
        ctx.graph.partial = true;
        let c = export_c(&bare_unit(ctx), None, None).unwrap();
        assert!(
            c.contains("e0: heap, 40 byte(s), cut off by the recording's size bound: zero-filled"),
            "{c}"
        );
        assert!(
            c.contains("static unsigned char e0[40] __attribute__((aligned(16))) = {\n    0\n};"),
            "{c}"
        );
        assert!(c.contains(" * partial    the recording was cut off"), "{c}");
        assert!(
            c.contains("#error \"a pointer into e7, which the context does not have\""),
            "{c}"
        );
    }

    #[test]
    fn without_a_program_globals_are_an_error_in_the_file() {
        let mut g = heap(&[1, 2, 3, 4]);
        g.kind = ExtentKind::Global {
            id: 5,
            constant: false,
        };
        let ctx = context(
            vec![heap(b"hi\0"), g],
            vec![
                Value::Ptr {
                    extent: 0,
                    offset: 0,
                },
                Value::Bits(3),
            ],
        );
        let c = export_c(&bare_unit(ctx), None, None).unwrap();
        assert!(c.starts_with(MARKER));
        assert!(
            c.contains("extern void f0_greet(void *, uint64_t) __asm__(\"greet\");"),
            "{c}"
        );
        assert!(c.contains("mem[0] = heap_copy(e0, sizeof e0, 16);"), "{c}");
        assert!(c.contains("#error \"e1 is global 0000000000000005"), "{c}");
        assert!(
            c.contains("f0_greet(at(0, 0), (uint64_t)INT64_C(3));"),
            "{c}"
        );
    }
}

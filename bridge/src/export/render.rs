//! The whole C file: the header comment (what is called, where the unit came from,
//! the values used, the symbols `build.sh` must make linkable), the helpers, the
//! generated declarations and arrays, and `main`, which checks the recorded return
//! value when the parameters keep their recorded values.

use super::generator::{Gen, SymbolUse};
use super::program::Program;
use super::templates::{AT_AND_PUT, HELPERS};
use super::text::{c_string, c_type, comment, show_value};
use super::MARKER;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use trestle_abi::context::{Context, Outcome, Value};
use trestle_abi::fuzz::{original_value, ParamValue};
use trestle_abi::meta::{FnMeta, ValueKind};
use trestle_abi::unit::{ParamSite, Unit};

/// The whole C file for `unit`, its context `ctx` (with the values applied).
pub(super) fn render(
    unit: &Unit,
    ctx: &Context,
    program: &Program,
    values: Option<&[ParamValue]>,
) -> String {
    let mut g = Gen::new(unit, ctx, program);
    let meta = g.declare_target();
    let nparams = meta.as_ref().map_or(ctx.args.len(), |m| m.params.len());
    if ctx.args.len() != nparams {
        g.errors.push(format!(
            "the unit has {} argument(s), the function {nparams}",
            ctx.args.len()
        ));
    }
    g.environment();
    g.extents();
    g.pointers();
    let args = g.arguments(meta.as_ref());

    let as_recorded = as_recorded(unit, values);
    let ret = meta.as_ref().map_or(ValueKind::Void, |m| m.ret);

    let mut out = String::new();
    header(&mut out, unit, meta.as_ref(), values, &g.symbols);
    out.push_str(
        "#include <fcntl.h>\n#include <locale.h>\n#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include <unistd.h>\n\n",
    );
    for e in &g.errors {
        let _ = writeln!(out, "#error {}", c_string(e.as_bytes()));
    }
    if !g.errors.is_empty() {
        out.push('\n');
    }
    out.push_str(HELPERS);
    let _ = writeln!(out, "\n/* Where each extent of the context lives in this process. */\nstatic unsigned char *mem[{}];\n", ctx.graph.extents.len().max(1));
    out.push_str(AT_AND_PUT);
    out.push_str(&g.decls);
    out.push('\n');
    out.push_str(&g.arrays);
    out.push_str("\nint main(void)\n{\n");
    out.push_str(&g.setup);
    let call = format!("{}({})", g.target, args.join(", "));
    let name = meta
        .as_ref()
        .map_or(unit.function.as_str(), |m| m.display_name());
    let expected = match &unit.expected {
        Some(Outcome::Returned(s)) => Some(s.ret),
        _ => None,
    };
    match (ret, expected) {
        (ValueKind::Int(_) | ValueKind::Float | ValueKind::Double, Some(Value::Bits(want)))
            if as_recorded =>
        {
            let ty = c_type(ret).unwrap_or("uint64_t");
            let want_expr = match ret {
                ValueKind::Float => format!("float_of(UINT32_C({:#x}))", want as u32),
                ValueKind::Double => format!("double_of(UINT64_C({want:#x}))"),
                _ => format!("({ty})UINT64_C({want:#x})"),
            };
            let _ = writeln!(out, "\n    {ty} got = {call};");
            let _ = writeln!(out, "    {ty} want = {want_expr};");
            // Integers print signed at their width: -1 reads better than 4294967295.
            let (format, cast) = match ret {
                ValueKind::Float | ValueKind::Double => ("%.17g", "(double)".to_owned()),
                _ => (
                    "%lld",
                    format!("(long long)({})", ty.trim_start_matches('u')),
                ),
            };
            let _ = writeln!(
                out,
                "    if (memcmp(&got, &want, sizeof got) != 0) {{\n        fprintf(stderr, \"{}: returned {format}, the recording {format}\\n\", {cast}got, {cast}want);\n        return 1;\n    }}",
                comment(name).replace(['"', '\\'], "'").replace('%', "%%")
            );
        }
        _ => {
            let _ = writeln!(out, "\n    {call};");
        }
    }
    out.push_str("    return 0;\n}\n");
    out
}

/// True if the parameters keep their recorded values: the recorded outcome then
/// still applies.
fn as_recorded(unit: &Unit, values: Option<&[ParamValue]>) -> bool {
    values.is_none_or(|v| {
        v.len() == unit.params.len()
            && v.iter()
                .zip(&unit.params)
                .all(|(v, p)| *v == original_value(p))
    })
}

/// The header comment: what the test calls, where the unit came from, the values
/// used, and the symbols `build.sh` must make linkable.
fn header(
    out: &mut String,
    unit: &Unit,
    meta: Option<&FnMeta>,
    values: Option<&[ParamValue]>,
    symbols: &BTreeMap<String, SymbolUse>,
) {
    let originals: Vec<ParamValue> = unit.params.iter().map(original_value).collect();
    let as_recorded = as_recorded(unit, values);
    let name = meta.map_or(unit.function.as_str(), |m| m.display_name());
    let _ = writeln!(out, "{MARKER}: {} */", comment(name));
    out.push_str("/*\n");
    if let Some(m) = meta {
        let place = m
            .file
            .as_deref()
            .map(|f| format!("{f}:{}", m.line))
            .unwrap_or_else(|| "unknown source".into());
        let linkage = if m.local {
            " (static: build.sh makes it linkable)"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            " * function   {}{linkage}, defined at {}",
            comment(name),
            comment(&place)
        );
    }
    let p = &unit.provenance;
    let _ = writeln!(
        out,
        " * program    {} (binary {:016x})",
        comment(&p.program),
        unit.binary_id
    );
    let _ = writeln!(
        out,
        " * recorded   in system test \"{}\", call #{} of the function (pid {}, trace {})",
        comment(&p.test),
        p.call_index,
        p.pid,
        comment(&p.trace)
    );
    let st = &unit.system_test;
    let _ = writeln!(out, " * test args  {}", comment(&format!("{:?}", st.args)));
    if let Some(stdin) = &st.stdin {
        let _ = writeln!(
            out,
            " * stdin      {} byte(s): run the test with the system test's stdin (./test < FILE)",
            stdin.len()
        );
    }
    if !st.files.is_empty() {
        let names: Vec<&str> = st.files.keys().map(String::as_str).collect();
        let _ = writeln!(
            out,
            " * files      {} (relative paths are opened in the working directory)",
            comment(&names.join(", "))
        );
    }
    if unit.params.is_empty() {
        out.push_str(" * parameters none\n");
    }
    for (i, p) in unit.params.iter().enumerate() {
        let site = match (p.site, p.origins.first()) {
            (ParamSite::Arg(k), _) => format!("argument {k}"),
            (ParamSite::Memory { extent, offset, .. }, _) => format!("e{extent}+{offset}"),
            // The harness serves a stream's value; a standalone test reads its input
            // as given: the lifted system test holds the whole of it.
            (ParamSite::Stream { fd, .. }, Some(o)) => format!(
                "rest of descriptor {fd} ({} from byte {}; give it as that input)",
                o.input, o.offset
            ),
            (ParamSite::Stream { fd, .. }, None) => format!("rest of descriptor {fd}"),
        };
        let now = values.and_then(|v| v.get(i)).unwrap_or(&originals[i]);
        let recorded = if values.is_some() && now != &originals[i] {
            format!(" (recorded {})", show_value(&originals[i]))
        } else {
            " (as recorded)".into()
        };
        let lead = if i == 0 {
            " * parameters"
        } else {
            " *           "
        };
        let _ = writeln!(out, "{lead} p{i} {site} = {}{recorded}", show_value(now));
    }
    let outcome = unit.expected.as_ref().map_or_else(
        || "unknown (the process ended inside the call)".into(),
        Outcome::summary,
    );
    let check = if as_recorded {
        ""
    } else {
        "; not checked, the parameters differ"
    };
    let _ = writeln!(out, " * recording  {outcome}{check}");
    if unit.context.graph.partial {
        out.push_str(" * partial    the recording was cut off by its size bound: some memory is zero-filled\n");
    }
    out.push_str(
        " *\n * Build: ./build.sh SUBJECT.c (compiled at -O0), or the subject's object files.\n",
    );
    if !symbols.is_empty() {
        out.push_str(" * Symbols of the subject this test uses (read by build.sh):\n");
    }
    for s in symbols.values() {
        let size = s.size.map_or_else(|| "-".into(), |n| n.to_string());
        let linkage = if s.local { "local" } else { "global" };
        let _ = writeln!(
            out,
            " *   symbol {} {} {size} {linkage} {}",
            s.name,
            s.kind,
            comment(&s.module)
        );
    }
    out.push_str(" */\n");
}

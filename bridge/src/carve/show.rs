//! `trestle show`: print a unit readably.

use anyhow::Result;
use std::fmt::Write as _;
use trestle_abi::unit::{Param, ParamKind, ParamSite, Resize, Unit};
use trestle_abi::{ExtentKind, Outcome};

fn preview(bytes: &[u8], full: bool) -> String {
    let n = if full {
        bytes.len()
    } else {
        bytes.len().min(64)
    };
    let text: String = bytes[..n]
        .iter()
        .map(|&b| {
            if (0x20..0x7f).contains(&b) {
                b as char
            } else {
                '.'
            }
        })
        .collect();
    let hex: Vec<String> = bytes[..n].iter().map(|b| format!("{b:02x}")).collect();
    let more = if n < bytes.len() {
        format!(" … (+{} bytes)", bytes.len() - n)
    } else {
        String::new()
    };
    format!("{}  |{}|{}", hex.join(" "), text, more)
}

/// Render a unit as text.
pub fn render(unit: &Unit, full: bool) -> String {
    let mut s = String::new();
    let binary = trestle_exec::binary::Binary::load(std::path::Path::new(&unit.provenance.program));
    header(&mut s, unit, binary.as_ref());
    let names = binary.map(|b| b.global_names).unwrap_or_default();
    extents(&mut s, &unit.context.graph, full, &names);
    if unit.params.is_empty() {
        let _ = writeln!(
            s,
            "  parameters: none (no context value occurs in the system input)"
        );
    } else {
        let _ = writeln!(s, "  parameters ({}):", unit.params.len());
    }
    for (i, p) in unit.params.iter().enumerate() {
        param(&mut s, i, p);
    }
    let st = &unit.system_test;
    let _ = writeln!(
        s,
        "  system test args {:?}{}",
        st.args,
        if st.stdin.is_some() {
            " (with stdin)"
        } else {
            ""
        }
    );
    s
}

/// The function, where it was carved, the call and its recorded outcome.
fn header(
    s: &mut String,
    unit: &Unit,
    binary: Result<&trestle_exec::binary::Binary, &anyhow::Error>,
) {
    let p = &unit.provenance;
    let _ = writeln!(
        s,
        "unit of {}  (fn id {:016x})",
        unit.function, unit.context.fn_id
    );
    match binary {
        Ok(b) => {
            if let Some(f) = b.functions.get(&unit.context.fn_id) {
                let params: Vec<String> = f
                    .params
                    .iter()
                    .map(|p| match (&p.name, p.byval_size) {
                        (Some(n), _) => format!("{n}: {:?}", p.kind),
                        (None, Some(sz)) => format!("{:?} (by value, {sz} bytes)", p.kind),
                        (None, None) => format!("{:?}", p.kind),
                    })
                    .collect();
                let loc = f
                    .file
                    .as_deref()
                    .map_or("unknown source".to_owned(), |file| {
                        format!("{file}:{}", f.line)
                    });
                let _ = writeln!(
                    s,
                    "  defined   {loc}; parameters ({}) -> {:?}",
                    params.join(", "),
                    f.ret
                );
            }
        }
        Err(e) => {
            let _ = writeln!(s, "  defined   unknown: {e:#}");
        }
    }
    let _ = writeln!(
        s,
        "  program   {} (binary {:016x})",
        p.program, unit.binary_id
    );
    let _ = writeln!(
        s,
        "  carved    from test {:?}, pid {}, call #{} of the function, trace {}",
        p.test, p.pid, p.call_index, p.trace
    );
    let args: Vec<String> = unit.context.args.iter().map(|a| a.describe()).collect();
    let _ = writeln!(s, "  call      {}({})", unit.function, args.join(", "));
    let _ = writeln!(
        s,
        "  expected  {}",
        unit.expected
            .as_ref()
            .map(Outcome::summary)
            .unwrap_or_else(|| "unknown (the process ended inside the call)".into())
    );
}

/// The memory of the context: each extent with its bytes and pointers, and the files.
/// Globals are named as `names` says (by id where it does not know them: the program
/// is gone).
fn extents(
    s: &mut String,
    g: &trestle_abi::context::Graph,
    full: bool,
    names: &trestle_abi::context::GlobalNames,
) {
    let _ = writeln!(
        s,
        "  context   {} extent(s){}",
        g.extents.len(),
        if g.partial {
            ", PARTIAL (size bound reached)"
        } else {
            ""
        }
    );
    for (i, e) in g.extents.iter().enumerate() {
        let kind = match e.kind {
            k @ ExtentKind::Global { .. } => trestle_abi::context::describe_kind(k, names),
            ExtentKind::Heap => "heap".into(),
            ExtentKind::LibcHeap => "heap of the C library's own (regcomp's automaton, say)".into(),
            ExtentKind::Stack => "stack".into(),
            ExtentKind::Arg => "argv/envp".into(),
            ExtentKind::File => "FILE (C library stream)".into(),
            ExtentKind::Freed => "freed heap (a stale pointer's target; no bytes)".into(),
        };
        let _ = writeln!(s, "    e{i:<4} {kind}, {} bytes", e.len);
        if let Some(b) = &e.bytes {
            let _ = writeln!(s, "          {}", preview(b, full));
        }
        for ptr in &e.pointers {
            let _ = writeln!(s, "          +{} -> {}", ptr.offset, ptr.target.describe());
        }
    }
    for f in &g.files {
        let _ = writeln!(
            s,
            "    e{} is fd {} ({}), offset {}",
            f.extent,
            f.fd,
            f.path.as_deref().unwrap_or("standard stream"),
            f.offset.map_or("unknown".into(), |o| o.to_string())
        );
    }
}

/// Parameter `i`: where it lives, what it holds, its recorded value and origins.
fn param(s: &mut String, i: usize, p: &Param) {
    let site = match p.site {
        ParamSite::Arg(a) => format!("argument {a}"),
        ParamSite::Memory {
            extent,
            offset,
            len,
        } => format!("e{extent}+{offset} ({len} bytes)"),
        ParamSite::Stream {
            fd, file: Some(e), ..
        } => format!("stream fd {fd} (FILE e{e})"),
        ParamSite::Stream {
            fd,
            file: None,
            buffered: true,
        } => format!("stream fd {fd} (the C library's FILE)"),
        ParamSite::Stream {
            fd,
            file: None,
            buffered: false,
        } => format!("stream fd {fd} (read(2))"),
    };
    let resize = |r: Resize| match r {
        Resize::Fixed => "",
        Resize::Extent => ", resizable",
        Resize::Token => ", token (resizable)",
    };
    let kind = match p.kind {
        ParamKind::Bytes { nul, resize: r } => format!(
            "string{}{}",
            if nul { ", NUL-terminated" } else { "" },
            resize(r)
        ),
        ParamKind::Decimal { resize: r, .. } => format!("number as decimal text{}", resize(r)),
        ParamKind::Int { bits } => format!("int{bits}"),
        ParamKind::Stream { cut: 0 } => "unread input".to_owned(),
        ParamKind::Stream { cut } => {
            format!("unread input (capped: {cut} more byte(s) stay as recorded)")
        }
    };
    let origins: Vec<String> = p
        .origins
        .iter()
        .map(|o| format!("{} @{}+{}", o.input, o.offset, o.len))
        .collect();
    let value = if p.original.len() > 60 {
        format!(
            "{:?}… ({} bytes)",
            String::from_utf8_lossy(&p.original[..48]),
            p.original.len()
        )
    } else {
        format!("{:?}", String::from_utf8_lossy(&p.original))
    };
    let _ = writeln!(
        s,
        "    p{i}  {site}  {kind}  = {value}  from {}",
        origins.join(", ")
    );
    for c in &p.companions {
        let site = match c.site {
            ParamSite::Arg(a) => format!("argument {a}"),
            ParamSite::Memory { extent, offset, .. } => format!("e{extent}+{offset}"),
            ParamSite::Stream { fd, .. } => format!("stream fd {fd}"),
        };
        let _ = writeln!(
            s,
            "          length companion: {site} = length{:+}",
            c.delta
        );
    }
}

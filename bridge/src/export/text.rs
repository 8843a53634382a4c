//! C source text: literals, identifiers, types and comments as the generated test
//! spells them.

use super::SUBJECT_MAIN;
use std::fmt::Write as _;
use trestle_abi::fuzz::ParamValue;
use trestle_abi::meta::ValueKind;

/// The name the test uses for a subject symbol.
pub(super) fn link_name(name: &str) -> &str {
    if name == "main" {
        SUBJECT_MAIN
    } else {
        name
    }
}

/// A C identifier for a symbol: a prefix, the symbol's name made safe, and an index
/// that keeps two names apart when making them safe merges them.
pub(super) fn ident(prefix: &str, name: &str, index: usize) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    format!("{prefix}{index}_{safe}")
}

/// A C string literal.
pub(super) fn c_string(bytes: &[u8]) -> String {
    let mut s = String::from("\"");
    for &b in bytes {
        match b {
            b'"' => s.push_str("\\\""),
            b'\\' => s.push_str("\\\\"),
            b'\n' => s.push_str("\\n"),
            b'\t' => s.push_str("\\t"),
            b'?' => s.push_str("\\?"),
            0x20..=0x7e => s.push(b as char),
            _ => {
                let _ = write!(s, "\\{b:03o}");
            }
        }
    }
    s.push('"');
    s
}

/// Text safe inside a C comment.
pub(super) fn comment(text: &str) -> String {
    text.replace("*/", "* /").replace('\n', " ")
}

/// A parameter value for the header, cut to a readable length.
pub(super) fn show_value(v: &ParamValue) -> String {
    match v {
        ParamValue::Int(x) => x.to_string(),
        ParamValue::Bytes(b) if b.len() > 48 => {
            format!("{}… ({} bytes)", comment(&c_string(&b[..40])), b.len())
        }
        ParamValue::Bytes(b) => comment(&c_string(b)),
    }
}

/// The C type of a value kind in a prototype (`None`: C cannot say it here).
pub(super) fn c_type(kind: ValueKind) -> Option<&'static str> {
    Some(match kind {
        ValueKind::Void => "void",
        ValueKind::Int(w) if w <= 8 => "uint8_t",
        ValueKind::Int(w) if w <= 16 => "uint16_t",
        ValueKind::Int(w) if w <= 32 => "uint32_t",
        ValueKind::Int(_) => "uint64_t",
        ValueKind::Float => "float",
        ValueKind::Double => "double",
        ValueKind::Ptr => "void *",
        ValueKind::Aggregate(_) | ValueKind::Word | ValueKind::Unsupported => return None,
    })
}

pub(super) fn locale_category(c: i32) -> String {
    let names = [
        "LC_CTYPE",
        "LC_NUMERIC",
        "LC_TIME",
        "LC_COLLATE",
        "LC_MONETARY",
        "LC_MESSAGES",
        "LC_ALL",
    ];
    usize::try_from(c)
        .ok()
        .and_then(|i| names.get(i))
        .map_or_else(|| c.to_string(), |n| (*n).to_owned())
}

/// `fdopen` mode for `open(2)` flags (Linux numbers).
pub(super) fn stream_mode(flags: i32) -> &'static str {
    const O_APPEND: i32 = 0o2000;
    if flags < 0 {
        return "r";
    }
    match (flags & 3, flags & O_APPEND != 0) {
        (0, _) => "r",
        (1, false) => "w",
        (1, true) => "a",
        (_, false) => "r+",
        (_, true) => "a+",
    }
}

/// Bytes as the body of a C array initializer: 16 a line, all-zero lines left out
/// (the next line then starts with a designator), printable runs shown in a comment.
pub(super) fn c_bytes(out: &mut String, bytes: &[u8]) {
    let mut skipped = false;
    let mut any = false;
    for (k, chunk) in bytes.chunks(16).enumerate() {
        if chunk.iter().all(|&b| b == 0) {
            skipped = true;
            continue;
        }
        out.push_str("    ");
        if skipped {
            let _ = write!(out, "[{}] = ", k * 16);
        }
        skipped = false;
        any = true;
        for b in chunk {
            let _ = write!(out, "{b:#04x},");
        }
        let printable = chunk
            .iter()
            .filter(|b| b.is_ascii_graphic() || **b == b' ')
            .count();
        if printable * 4 >= chunk.len() * 3 {
            let text: String = chunk
                .iter()
                .map(|&b| {
                    if (b.is_ascii_graphic() && b != b'*' && b != b'\\') || b == b' ' {
                        b as char
                    } else {
                        '.'
                    }
                })
                .collect();
            let _ = write!(out, " /* {text} */");
        }
        out.push('\n');
    }
    if !any {
        out.push_str("    0\n");
    }
}

/// An integer argument of width `w`: its recorded bits as a signed decimal, cast to
/// the parameter's type.
pub(super) fn int_literal(bits: u64, w: u16) -> String {
    let w = w.clamp(1, 64);
    let ty = c_type(ValueKind::Int(w)).unwrap_or("uint64_t");
    // Sign-extend from the width, for a readable literal.
    let shift = 64 - u32::from(w);
    let signed = ((bits << shift) as i64) >> shift;
    let lit = if signed == i64::MIN {
        "INT64_MIN".to_owned()
    } else {
        format!("INT64_C({signed})")
    };
    // The caller widens narrow integers; a negative one would be widened by sign
    // where the parameter is signed, and the metadata does not say which it is.
    let note = if w <= 16 && signed < 0 {
        " /* narrow and negative: passed zero-extended; the source may say signed */"
    } else {
        ""
    };
    format!("({ty}){lit}{note}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_lines_are_skipped_with_designators() {
        let mut bytes = vec![0u8; 64];
        bytes[33] = 0x41;
        let mut out = String::new();
        c_bytes(&mut out, &bytes);
        assert_eq!(out.trim(), "[32] = 0x00,0x41,0x00,0x00,0x00,0x00,0x00,0x00,0x00,0x00,0x00,0x00,0x00,0x00,0x00,0x00,");
        let mut out = String::new();
        c_bytes(&mut out, &[0; 5]);
        assert_eq!(out.trim(), "0");
    }

    #[test]
    fn integer_literals_read_as_signed_and_cast_to_the_width() {
        assert_eq!(int_literal(0xffff_fff4, 32), "(uint32_t)INT64_C(-12)");
        assert_eq!(int_literal(7, 32), "(uint32_t)INT64_C(7)");
        assert_eq!(int_literal(1 << 63, 64), "(uint64_t)INT64_MIN");
        assert!(int_literal(0xff, 8).contains("zero-extended"));
    }
}

//! `@file` response files, expanded before the command line is classified.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// Expand `@file` response files (GNU quoting, as clang reads them). An unreadable
/// one stays as it is, for clang to report.
pub(super) fn expand_response_files(args: Vec<OsString>, depth: usize) -> Vec<OsString> {
    let mut out = Vec::with_capacity(args.len());
    for arg in args {
        let bytes = arg.as_bytes();
        let content = match bytes.split_first() {
            Some((b'@', path)) if !path.is_empty() && depth < 16 => {
                std::fs::read(OsStr::from_bytes(path)).ok()
            }
            _ => None,
        };
        match content {
            Some(content) => out.extend(expand_response_files(tokenize_gnu(&content), depth + 1)),
            None => out.push(arg),
        }
    }
    out
}

/// Split response-file text like a POSIX shell word list: whitespace separates,
/// quotes group, a backslash escapes the next character (not inside single quotes).
fn tokenize_gnu(text: &[u8]) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut cur: Vec<u8> = Vec::new();
    let mut in_token = false;
    let mut quote: Option<u8> = None;
    let mut bytes = text.iter().copied();
    while let Some(c) = bytes.next() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(b'"') if c == b'\\' => cur.extend(bytes.next()),
            Some(_) => cur.push(c),
            None if c.is_ascii_whitespace() => {
                if in_token {
                    out.push(OsString::from_vec(std::mem::take(&mut cur)));
                    in_token = false;
                }
            }
            None => {
                in_token = true;
                match c {
                    b'\\' => cur.extend(bytes.next()),
                    b'\'' | b'"' => quote = Some(c),
                    _ => cur.push(c),
                }
            }
        }
    }
    if in_token {
        out.push(OsString::from_vec(cur));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::test_support::{os, strs};

    #[test]
    fn response_files_are_expanded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rsp = dir.path().join("args.rsp");
        std::fs::write(&rsp, "-c 'a b.c' \"-DX=\\\"y\\\"\"\n-o\tout.o").expect("write");
        let arg = format!("@{}", rsp.display());
        let expanded = expand_response_files(os(&["-O2", &arg, "@/nonexistent"]), 0);
        assert_eq!(
            strs(&expanded),
            [
                "-O2",
                "-c",
                "a b.c",
                "-DX=\"y\"",
                "-o",
                "out.o",
                "@/nonexistent"
            ]
        );
    }
}

//! Helpers shared by the driver's unit tests.

use std::ffi::OsString;
use std::path::Path;

use super::args::parse;
use super::plan::{plan, shape, Build};

pub(super) fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

/// The build planned for `args`, with temporaries in `/T` and `/W` as the working
/// directory.
pub(super) fn build_of(args: &[&str]) -> Build {
    let parsed = parse(&os(args)).expect("parses");
    match shape(&parsed) {
        Ok(shape) => plan(&parsed, &shape, Path::new("/T"), Path::new("/W")),
        Err(r) => panic!("unexpected passthrough {r:?} for {args:?}"),
    }
}

pub(super) fn strs(v: &[OsString]) -> Vec<String> {
    v.iter().map(|s| s.to_string_lossy().into_owned()).collect()
}

pub(super) fn contains_seq(hay: &[String], needle: &[&str]) -> bool {
    hay.windows(needle.len())
        .any(|w| w.iter().zip(needle).all(|(a, b)| a == b))
}

//! The JSON files of a campaign directory (and of `trestle lift --out`): their names,
//! and one typed reader and one writer for all of them.
//!
//! Every file carries the format it was written in (`"format": N` next to its own
//! fields). A file of another format, one that does not parse, or one with a field
//! of the wrong kind is an error naming the file and the field; nothing read here
//! falls back to a default silently. Writes are atomic (a temporary file renamed
//! over the old one), so a reader never sees half a file.

use anyhow::{bail, Context as _, Result};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::path::Path;

/// The format of the files written by this trestle.
pub const FORMAT: u32 = 1;

/// The campaign's state (`trestle run`; `--resume` reads it).
pub const CAMPAIGN: &str = "campaign.json";
/// Coverage and alarms over time, one CSV row per sample.
pub const TIMELINE: &str = "timeline.csv";
/// The system fuzzer's roadblocks at the last unit round, best first (`trestle run`).
pub const ROADBLOCKS: &str = "roadblocks.json";
/// The distinct true alarms (`lift::AlarmList`).
pub const ALARMS: &str = "alarms.json";
/// Lifting figures (`lift::LiftStats`).
pub const LIFT: &str = "lift.json";
/// Directory of alarms, one subdirectory each.
pub const ALARMS_DIR: &str = "alarms";
/// Directory of unit findings that did not reproduce at system level.
pub const FALSE_POSITIVES_DIR: &str = "false-positives";
/// In an alarm's directory: where it came from (`lift::Provenance`).
pub const PROVENANCE: &str = "provenance.json";
/// In an alarm's directory: the reduced system test (a system test file).
pub const REDUCED: &str = "reduced.json";
/// In an alarm's directory: the lifted system test before reduction.
pub const LIFTED: &str = "lifted.json";
/// In a false positive's directory: why it is one (`lift::FalsePositive`).
pub const REASON: &str = "reason.json";

#[derive(Serialize)]
struct Written<'a, T> {
    format: u32,
    #[serde(flatten)]
    body: &'a T,
}

/// Write `value` to `path` with the current [`FORMAT`], atomically.
pub fn write<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let bytes = serde_json::to_vec_pretty(&Written {
        format: FORMAT,
        body: value,
    })
    .with_context(|| format!("cannot encode {}", path.display()))?;
    write_atomic(path, &bytes)
}

/// Read `path`, which must exist and be of the current [`FORMAT`].
pub fn read<T: DeserializeOwned>(path: &Path) -> Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    parse(path, &text)
}

/// Read `path` if it exists (`None` if it does not); any other failure is an error.
pub fn read_if_present<T: DeserializeOwned>(path: &Path) -> Result<Option<T>> {
    match std::fs::read_to_string(path) {
        Ok(text) => parse(path, &text).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

fn parse<T: DeserializeOwned>(path: &Path, text: &str) -> Result<T> {
    let mut value: serde_json::Value = serde_json::from_str(text)
        .with_context(|| format!("{} is not JSON (corrupt or cut short)", path.display()))?;
    let Some(fields) = value.as_object_mut() else {
        bail!(
            "{} is not a JSON object: not written by this trestle",
            path.display()
        );
    };
    match fields.remove("format").map(|f| f.as_u64()) {
        Some(Some(f)) if f == u64::from(FORMAT) => {}
        Some(Some(f)) => bail!(
            "{} is format {f}; this trestle reads format {FORMAT}",
            path.display()
        ),
        Some(None) => bail!("{}: field `format` is not a number", path.display()),
        None => bail!(
            "{} has no `format` field: not written by this trestle (it reads format {FORMAT})",
            path.display()
        ),
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let field = e.path().to_string();
        anyhow::anyhow!("{}: field `{field}`: {}", path.display(), e.into_inner())
    })
}

/// Remove the directory `path` and what it holds, if it is there.
pub fn remove_dir_if_present(path: &Path) -> Result<()> {
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("cannot remove {}", path.display()))
        }
        _ => Ok(()),
    }
}

/// Write `path` whole or not at all (a temporary file renamed over it).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Thing {
        name: String,
        count: u32,
    }

    #[test]
    fn round_trips_with_its_format() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("thing.json");
        let t = Thing {
            name: "a".into(),
            count: 3,
        };
        write(&p, &t).unwrap();
        assert!(std::fs::read_to_string(&p)
            .unwrap()
            .contains("\"format\": 1"));
        assert_eq!(read::<Thing>(&p).unwrap(), t);
        assert!(read_if_present::<Thing>(&dir.path().join("none.json"))
            .unwrap()
            .is_none());
    }

    #[test]
    fn names_the_file_and_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("thing.json");
        std::fs::write(&p, r#"{"format": 1, "name": "a", "count": "three"}"#).unwrap();
        let e = format!("{:#}", read::<Thing>(&p).unwrap_err());
        assert!(e.contains("thing.json") && e.contains("`count`"), "{e}");
        std::fs::write(&p, r#"{"format": 9, "name": "a", "count": 3}"#).unwrap();
        let e = format!("{:#}", read::<Thing>(&p).unwrap_err());
        assert!(e.contains("format 9"), "{e}");
        std::fs::write(&p, r#"{"name": "a", "count": 3}"#).unwrap();
        assert!(format!("{:#}", read::<Thing>(&p).unwrap_err()).contains("no `format` field"));
        std::fs::write(&p, r#"{"format": 1, "name": "a", "cou"#).unwrap();
        assert!(format!("{:#}", read::<Thing>(&p).unwrap_err()).contains("not JSON"));
    }
}

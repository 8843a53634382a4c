//! A campaign's alarms as SARIF 2.1.0 (`trestle run --sarif FILE`, `trestle report
//! --sarif FILE`), the format code scanning in CI reads (GitHub's among others).
//!
//! One result per distinct alarm. Its rule is the crash kind (`SIGSEGV`,
//! `stack-overflow`, `asan:heap-buffer-overflow`, ...); its location the innermost
//! frame of the crash stack in the program's own sources, the frames that called it
//! related locations; the reduced system test that reproduces it an attachment, with
//! the command that runs it in the message and in the result's properties. Source
//! paths under the base directory (the working directory: a CI job runs from its
//! checkout) are written relative to `%SRCROOT%`, the others as absolute `file:` URIs.

use crate::lift::{AlarmEntry, Provenance};
use crate::report::{AlarmDetail, Report};
use anyhow::{Context as _, Result};
use serde_json::{json, Value};
use std::path::{Component, Path, PathBuf};
use trestle_exec::signature::{CrashSignature, Frame};

/// The URI base id code scanning resolves against the repository's root.
const SRCROOT: &str = "%SRCROOT%";

/// The alarms of a campaign or a triage, as much of them as SARIF says.
pub struct Findings<'a> {
    /// The campaign (or triage) directory, whose `alarms/` holds them.
    pub dir: &'a Path,
    /// The program they were confirmed on.
    pub program: &'a Path,
    /// The campaign's (or triage's) seconds.
    pub elapsed: f64,
    /// The alarms.
    pub alarms: &'a [AlarmEntry],
    /// Their reproducers and provenance, one for each alarm.
    pub details: &'a [AlarmDetail],
}

impl<'a> Findings<'a> {
    /// A campaign's, from its report.
    pub fn of_report(r: &'a Report) -> Findings<'a> {
        Findings {
            dir: &r.dir,
            program: &r.campaign.settings.program,
            elapsed: r.campaign.elapsed,
            alarms: &r.alarms,
            details: &r.details,
        }
    }
}

/// The SARIF log of the alarms, with paths relative to `base` where they lie under it.
pub fn render(r: &Findings<'_>, base: &Path) -> Value {
    let mut rules: Vec<&str> = Vec::new();
    let mut results = Vec::new();
    for (a, d) in r.alarms.iter().zip(r.details) {
        let kind = crash_kind(a);
        let rule_index = rules.iter().position(|k| *k == kind).unwrap_or_else(|| {
            rules.push(kind);
            rules.len() - 1
        });
        results.push(result(r, a, d, rule_index, base));
    }
    json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {
                "driver": {
                    "name": "trestle",
                    "version": env!("CARGO_PKG_VERSION"),
                    "rules": rules.iter().map(|k| rule(k)).collect::<Vec<_>>(),
                }
            },
            "originalUriBaseIds": { SRCROOT: { "uri": directory_uri(base) } },
            "results": results,
            "properties": {
                "campaign": r.dir.display().to_string(),
                "program": r.program.display().to_string(),
                "elapsedSeconds": r.elapsed,
            },
        }],
    })
}

/// Write the alarms to `file` as SARIF, paths relative to the working directory.
pub fn write(findings: &Findings<'_>, file: &Path) -> Result<()> {
    let base = std::env::current_dir().context("cannot read the working directory")?;
    let text = serde_json::to_string_pretty(&render(findings, &base))?;
    std::fs::write(file, text + "\n").with_context(|| format!("cannot write {}", file.display()))
}

/// The crash kind of an alarm: its signature up to " in " (`SIGSEGV in f < g`).
fn crash_kind(a: &AlarmEntry) -> &str {
    let s = a.signature.as_str();
    s.split_once(" in ")
        .or_else(|| s.split_once(" ("))
        .map_or(s, |(k, _)| k)
}

fn rule(kind: &str) -> Value {
    use trestle_exec::signature::{HANG, OUT_OF_MEMORY};
    let (name, short, full, tag) = match kind {
        HANG => (
            "Hang".to_owned(),
            "The program hangs: it spins on the CPU until stopped".to_owned(),
            "A system test makes the program run on past its time limit, spinning in one place (the location \
             is where the CPU limit stopped it). trestle reports it only after the real program hung on the \
             test twice."
                .to_owned(),
            "hang",
        ),
        OUT_OF_MEMORY => (
            "OutOfMemory".to_owned(),
            "The program runs out of memory".to_owned(),
            "A system test makes the program allocate until its memory limit (the location is where an \
             allocation first failed, when the C library's allocator failed it). trestle reports it only after \
             the real program ran out of memory on the test twice."
                .to_owned(),
            "out-of-memory",
        ),
        _ => (
            rule_name(kind),
            format!("The program crashes: {}", describe(kind)),
            format!(
                "A system test makes the program crash ({kind}): {}. trestle reports it only after the real \
                 program crashed on the test, so it is no false alarm of unit-level fuzzing.",
                describe(kind)
            ),
            "crash",
        ),
    };
    json!({
        "id": kind,
        "name": name,
        "shortDescription": { "text": short },
        "fullDescription": { "text": full },
        "defaultConfiguration": { "level": "error" },
        "properties": { "tags": [tag, "fuzzing"] },
    })
}

/// A rule name in the form SARIF suggests (PascalCase words).
fn rule_name(kind: &str) -> String {
    kind.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| {
            let lower = w.to_ascii_lowercase();
            let mut cs = lower.chars();
            cs.next()
                .map(|c| c.to_ascii_uppercase().to_string() + cs.as_str())
                .unwrap_or_default()
        })
        .collect()
}

fn describe(kind: &str) -> String {
    let sanitizer = kind
        .strip_prefix("asan:")
        .map(|k| format!("AddressSanitizer reports {k}"));
    let plain = match kind {
        "SIGSEGV" => "an invalid memory access (SIGSEGV)",
        "SIGBUS" => "an invalid memory access (SIGBUS)",
        "SIGABRT" => "the program aborts (SIGABRT), often a failed assertion or a corrupted heap",
        "SIGFPE" => "an arithmetic error (SIGFPE), such as a division by zero",
        "SIGILL" => "an illegal instruction (SIGILL), such as a trap the compiler placed",
        "stack-overflow" => "the stack runs out, usually through unbounded recursion",
        _ => "a fatal signal",
    };
    sanitizer.unwrap_or_else(|| plain.to_owned())
}

fn result(
    r: &Findings<'_>,
    a: &AlarmEntry,
    d: &AlarmDetail,
    rule_index: usize,
    base: &Path,
) -> Value {
    let alarm_dir = r.dir.join(trestle_exec::files::ALARMS_DIR).join(&a.id);
    let script = alarm_dir.join("reproduce.sh");
    let command = format!("sh {}", shown(&script, base));
    let origin = match &d.provenance {
        Provenance::System(f) => match &f.triaged_from {
            Some(by) => format!("triaged from {by}"),
            None => "found by system-level fuzzing".to_owned(),
        },
        Provenance::Lifted(f) => format!(
            "found by fuzzing a unit of {} and lifted to a system test",
            f.carved_invocation.function
        ),
    };
    let own: Vec<&Frame> = d.provenance.frames().iter().filter(|f| f.own).collect();
    let top = own.iter().position(|f| f.file.is_some());
    let location = match top {
        Some(i) => frame_location(own[i], base),
        // No source line: the program itself, and the function by name.
        None => json!({
            "physicalLocation": { "artifactLocation": artifact(r.program, base) },
            "logicalLocations": [{ "name": a.function, "kind": "function" }],
        }),
    };
    let related: Vec<Value> = own
        .iter()
        .skip(top.map_or(0, |i| i + 1))
        .filter(|f| f.file.is_some())
        .enumerate()
        .map(|(i, f)| {
            let mut l = frame_location(f, base);
            l["id"] = json!(i + 1);
            l["message"] = json!({ "text": format!("called from {}", f.function) });
            l
        })
        .collect();
    json!({
        "ruleId": crash_kind(a),
        "ruleIndex": rule_index,
        "level": "error",
        "message": { "text": format!("{} ({origin}{}). Reproduce: {command}", a.signature, if a.build_dependent() { format!("; build-dependent: not on the {} build", a.builds_without().join(", ")) } else { String::new() }) },
        "locations": [location],
        "relatedLocations": related,
        "partialFingerprints": { "trestleCrashKey/v2": CrashSignature::stable_key(&a.key) },
        "attachments": [
            {
                "description": { "text": "the reduced system test that reproduces the crash (trestle's system-test JSON)" },
                "artifactLocation": artifact(&alarm_dir.join(trestle_exec::files::REDUCED), base),
            },
            {
                "description": { "text": "a shell script that runs the program on the reduced test" },
                "artifactLocation": artifact(&script, base),
            },
        ],
        "properties": {
            "alarmId": a.id,
            "source": a.source,
            "unitFunction": a.unit_function,
            "foundAtSeconds": a.found_at,
            "reproducer": { "command": command, "test": d.reduced },
            "buildDependent": a.build_dependent(),
            "builds": a.builds.iter().map(|b| json!({ "role": b.role, "program": b.program, "reproduces": b.reproduces, "ended": b.ended })).collect::<Vec<_>>(),
        },
    })
}

/// A frame as a location: its file and line, and the function by name.
fn frame_location(f: &Frame, base: &Path) -> Value {
    let file = f
        .file
        .as_deref()
        .map(Path::new)
        .unwrap_or(Path::new(&f.module));
    let mut physical = json!({ "artifactLocation": artifact(file, base) });
    if f.line > 0 {
        physical["region"] = json!({ "startLine": f.line });
    }
    json!({
        "physicalLocation": physical,
        "logicalLocations": [{ "name": f.function, "kind": "function" }],
    })
}

/// Where a file is: relative to `%SRCROOT%` under `base` (or given relative, as
/// debug info may), else an absolute `file:` URI.
fn artifact(path: &Path, base: &Path) -> Value {
    let absolute = if path.is_absolute() {
        normalize(path)
    } else {
        normalize(&base.join(path))
    };
    match absolute.strip_prefix(normalize(base)) {
        Ok(rel) => json!({ "uri": encode(&rel.to_string_lossy()), "uriBaseId": SRCROOT }),
        Err(_) => json!({ "uri": format!("file://{}", encode(&absolute.to_string_lossy())) }),
    }
}

/// A path as a user in `base` would type it.
fn shown(path: &Path, base: &Path) -> String {
    let p = normalize(path);
    p.strip_prefix(normalize(base))
        .unwrap_or(&p)
        .display()
        .to_string()
}

/// `a/./b/../c` as `a/c`, without touching the file system.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

fn directory_uri(dir: &Path) -> String {
    let s = encode(&normalize(dir).to_string_lossy());
    format!("file://{}{}", s, if s.ends_with('/') { "" } else { "/" })
}

/// Percent-encoding of what a URI path may not hold as it is.
fn encode(path: &str) -> String {
    let mut out = String::new();
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/!$&'()*+,;=:@".contains(&b) {
            out.push(b as char);
        } else {
            out += &format!("%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_under_the_base_are_relative_to_srcroot_and_others_absolute() {
        let base = Path::new("/work/repo");
        assert_eq!(
            artifact(Path::new("/work/repo/src/cut.c"), base),
            json!({ "uri": "src/cut.c", "uriBaseId": SRCROOT })
        );
        assert_eq!(
            artifact(Path::new("src/../lib/x.c"), base),
            json!({ "uri": "lib/x.c", "uriBaseId": SRCROOT })
        );
        assert_eq!(
            artifact(Path::new("/usr/include/a b.h"), base),
            json!({ "uri": "file:///usr/include/a%20b.h" })
        );
        assert_eq!(directory_uri(base), "file:///work/repo/");
    }

    #[test]
    fn rules_are_named_by_the_crash_kind() {
        assert_eq!(
            rule_name("asan:heap-buffer-overflow"),
            "AsanHeapBufferOverflow"
        );
        assert_eq!(rule_name("SIGSEGV"), "Sigsegv");
        assert!(describe("stack-overflow").contains("recursion"));
        assert!(describe("asan:heap-use-after-free").contains("heap-use-after-free"));
    }
}

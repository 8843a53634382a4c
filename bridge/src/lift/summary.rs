//! The human-readable files of an alarm: `summary.md` (the crash, the reduced
//! reproducer and its provenance in words) and `reproduce.sh`.

use super::alarms::describe_values;
use super::Substitution;
use crate::validate::reduce::ReduceStats;
use anyhow::{Context as _, Result};
use std::path::Path;
use trestle_abi::fuzz::ParamValue;
use trestle_abi::unit::{SystemTest, Unit};
use trestle_exec::signature::CrashSignature;

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

const SCRIPT_HEAD: &str = "#!/bin/sh
# Reproduce this alarm: runs the program on the reduced system test in a fresh directory,
# isolated as validation ran it (bubblewrap: the machine read-only, a private /tmp, no
# network). A fuzzed test may name any path (`-r /`); TRESTLE_UNSANDBOXED=1 runs the
# program directly, where it can change any file you can.
";

/// The program given (a path or a command name) as an absolute path.
const SCRIPT_PROGRAM: &str = r#"case "$PROGRAM" in
*/*) ;;
*) PROGRAM=$(command -v "$PROGRAM") || { echo "reproduce.sh: no program $PROGRAM" >&2; exit 127; } ;;
esac
[ -f "$PROGRAM" ] || { echo "reproduce.sh: no program $PROGRAM" >&2; exit 127; }
PROGRAM="$(cd "$(dirname "$PROGRAM")" && pwd)/$(basename "$PROGRAM")"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
"#;

/// The command line prefix that isolates the run (`$@`), or none when asked not to.
const SCRIPT_SANDBOX: &str = r#"set --
if [ -z "$TRESTLE_UNSANDBOXED" ]; then
    if ! command -v bwrap >/dev/null 2>&1; then
        echo "reproduce.sh: bubblewrap (bwrap) is not installed: apt-get install bubblewrap, or set TRESTLE_UNSANDBOXED=1 to run the program without isolation (it can then change any file you can)" >&2
        exit 125
    fi
    set -- bwrap --ro-bind / / --dev /dev --tmpfs /tmp --ro-bind "$PROGRAM" "$PROGRAM" --bind "$W" "$W" \
        --unshare-net --unshare-ipc --unshare-uts --unshare-user-try --unshare-cgroup-try --die-with-parent --chdir "$W" --
fi
"#;

/// A shell script that recreates the test's files and runs the program on it, in the
/// sandbox validation used unless told otherwise.
pub(super) fn write_script(path: &Path, program: &Path, t: &SystemTest) -> Result<()> {
    use base64::Engine as _;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let mut s = String::from(SCRIPT_HEAD);
    s += &format!("PROGRAM=\"${{1:-{}}}\"\n", program.display());
    s += SCRIPT_PROGRAM;
    for (name, bytes) in &t.files {
        if let Some(parent) = Path::new(name)
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
        {
            s += &format!(
                "mkdir -p \"$W\"/{}\n",
                shell_quote(&parent.display().to_string())
            );
        }
        s += &format!(
            "printf '%s' {} | base64 -d > \"$W\"/{}\n",
            shell_quote(&b64(bytes)),
            shell_quote(name)
        );
    }
    s += &format!(
        "printf '%s' {} | base64 -d > \"$W/.stdin\"\n",
        shell_quote(&b64(t.stdin.as_deref().unwrap_or_default()))
    );
    s += SCRIPT_SANDBOX;
    s += "cd \"$W\" && \"$@\" env";
    for (k, v) in &t.env {
        s += &format!(" {}", shell_quote(&format!("{k}={v}")));
    }
    s += " \"$PROGRAM\"";
    for a in &t.args {
        s += &format!(" {}", shell_quote(a));
    }
    s += " < .stdin\nstatus=$?\necho \"exit status $status\" >&2\nexit $status\n";
    std::fs::write(path, s).with_context(|| format!("cannot write {}", path.display()))?;
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

fn show_test(t: &SystemTest) -> String {
    let mut s = String::new();
    s += &format!(
        "- args: `{}`\n",
        t.args
            .iter()
            .map(|a| shell_quote(a))
            .collect::<Vec<_>>()
            .join(" ")
    );
    if let Some(stdin) = t.stdin.as_ref().filter(|s| !s.is_empty()) {
        let text = String::from_utf8_lossy(stdin);
        let shown: String = text.chars().take(400).collect();
        s += &format!(
            "- stdin ({} bytes):\n\n```\n{}{}\n```\n",
            stdin.len(),
            shown,
            if text.chars().count() > 400 {
                "…"
            } else {
                ""
            }
        );
    }
    for (k, v) in &t.files {
        s += &format!("- file `{k}`: {} bytes\n", v.len());
    }
    for (k, v) in &t.env {
        s += &format!("- env `{k}={v}`\n");
    }
    s
}

#[allow(clippy::too_many_arguments)]
pub(super) fn summary_md(
    unit: &Unit,
    values: &[ParamValue],
    unit_sig: Option<&CrashSignature>,
    sys: &CrashSignature,
    matches_unit: bool,
    lifted: &SystemTest,
    reduced: &SystemTest,
    rstats: &ReduceStats,
    subs: &[Substitution],
    source: Option<&str>,
    program: &Path,
    origin: &str,
) -> String {
    let place = sys
        .frames
        .first()
        .map_or(unit.function.as_str(), String::as_str);
    let mut s = if place == unit.function {
        format!("# Alarm in `{place}`\n\n")
    } else {
        format!(
            "# Alarm in `{place}` (found through a unit of `{}`)\n\n",
            unit.function
        )
    };
    s += &format!("**{}** when running `{}`", sys, program.display());
    s += if matches_unit {
        " — the same crash as the unit's (a true alarm).\n\n"
    } else {
        " — a real crash, but not the one the unit showed.\n\n"
    };
    s += "## Stack (system level)\n\n";
    s += scanned_md(sys);
    for f in sys.stack.iter().take(12) {
        s += &format!("- {f}\n");
    }
    s += "\n";
    s += &reproducer_section(reduced, rstats);
    s += "\n## Provenance\n\n";
    s += &format!("1. {origin}\n");
    s += &format!(
        "2. carved invocation: `{}` (call #{} in that run{})\n",
        unit.function,
        unit.provenance.call_index,
        source
            .map(|x| format!(", defined at {x}"))
            .unwrap_or_default()
    );
    s += &format!(
        "3. unit input: {}{}\n",
        describe_values(unit, values).join(", "),
        unit_sig
            .map(|u| format!(" — crashed the unit: {u}"))
            .unwrap_or_default()
    );
    s += "4. lifted system test (`lifted.json`):";
    for sub in subs {
        s += &format!(
            " {} at byte {}: {:?} → {:?};",
            sub.input, sub.offset, sub.old, sub.new
        );
    }
    s += "\n\n";
    s += &show_test(lifted);
    s += "5. reduced system test (`reduced.json`), above.\n\n";
    s += "The unit as a standalone C test: `unit.c`; `./build.sh SUBJECT.c` (or the subject's .o files) builds it.\n";
    s
}

/// Where the unit's system test came from, in words: a seed, or a test the system
/// fuzzer made (`mutation`).
pub(super) fn origin_words(seed: &str, mutation: Option<&str>) -> String {
    match mutation {
        Some(m) => format!("system test `{m}`, made from the seeds by system-level fuzzing"),
        None => format!("seed system test `{seed}`"),
    }
}

/// `summary.md` of a crash system-level fuzzing found (`name`, in `source`).
#[allow(clippy::too_many_arguments)]
pub(super) fn system_summary_md(
    sys: &CrashSignature,
    program: &Path,
    reduced: &SystemTest,
    rstats: &ReduceStats,
    name: &str,
    source: &Path,
    found_by: Option<&str>,
    descent: Option<&trestle_sysfuzz::Descent>,
) -> String {
    let hang = sys.kind == trestle_exec::signature::HANG;
    let memory = sys.kind == trestle_exec::signature::OUT_OF_MEMORY;
    let what = if hang {
        "Hang"
    } else if memory {
        "Out of memory"
    } else {
        "Crash"
    };
    let heading = match found_by {
        Some(by) => format!("{what} triaged from {by}"),
        None => format!("{what} found by system-level fuzzing"),
    };
    let mut md = format!(
        "# {heading}\n\n**{sys}** when running `{}`.\n\n",
        program.display()
    );
    if hang {
        md += "It ran into the time limit twice: the stack is where the CPU limit stopped it the first time. `./reproduce.sh` runs until it is stopped.\n\n";
    }
    if memory {
        md += "It ran out of memory twice (the sandbox's address-space limit): the stack is where an allocation first failed, when one failed in the C library's allocator. Run `./reproduce.sh` under that limit (`ulimit -v 4194304` for the default 4 GiB) to see it end the same way; without one it takes what memory the machine has.\n\n";
    }
    if let Some(global) = &sys.origin {
        md += &format!("The faulting pointer was read from the global `{global}` (it held the address that faulted): a crash at another line through the same pointer is this bug too.\n\n");
    }
    md += "## Stack\n\n";
    md += scanned_md(sys);
    for f in sys.stack.iter().take(12) {
        md += &format!("- {f}\n");
    }
    md += "\n";
    md += &reproducer_section(reduced, rstats);
    md += &format!("\n## Found as\n\n`{}` ({}).\n", name, source.display());
    if let Some(d) = descent {
        let at = d
            .origin
            .roadblock
            .as_ref()
            .map(|r| format!(" at the roadblock {r}"))
            .unwrap_or_default();
        md += &format!(
            "\nIt descends from a test lifted from a unit of `{}` (fuzzed{at}): {} mutation(s) of the system fuzzer on.\n",
            d.origin.unit, d.generations
        );
    }
    md
}

/// The heading that opens the reproducer's section of `summary.md`.
const REPRODUCER_HEADING: &str = "## Reduced reproducer (`reduced.json`, run `./reproduce.sh`)";

/// The reproducer's section of `summary.md`: the test and what reducing it did (or
/// that it is still to be reduced).
fn reproducer_section(reduced: &SystemTest, rstats: &ReduceStats) -> String {
    let mut s = format!("{REPRODUCER_HEADING}\n\n");
    s += &show_test(reduced);
    if rstats.pending {
        s += &format!("\nNot reduced yet ({} bytes, as found): the campaign reduces its alarms once its fuzzing budget is spent.\n", rstats.size_before);
    } else {
        s += &format!(
            "\nReduced from {} to {} bytes in {} runs.\n",
            rstats.size_before, rstats.size_after, rstats.runs
        );
    }
    s
}

/// `md` (a `summary.md`) with the reproducer's section written for `was` replaced by
/// one for `now`; `None` if `md` has no such section (edited by hand, say).
pub(super) fn with_reproducer(
    md: &str,
    was: (&SystemTest, &ReduceStats),
    now: (&SystemTest, &ReduceStats),
) -> Option<String> {
    let old = reproducer_section(was.0, was.1);
    md.contains(&old)
        .then(|| md.replacen(&old, &reproducer_section(now.0, now.1), 1))
}

/// What a stack section says first when its frames come from a stack scan
/// ([`CrashSignature::from_scan`]).
fn scanned_md(sys: &CrashSignature) -> &'static str {
    if sys.from_scan() {
        "The unwinder found none of the program's frames (it smashed its stack): the frames marked `[stack scan]` are return addresses into the program found on the stack above the damage, a weaker source than unwinding. They name callers of the code that crashed, not necessarily the function itself.\n\n"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_with(stdin: &str) -> SystemTest {
        SystemTest {
            args: vec!["-x".into()],
            stdin: Some(stdin.as_bytes().to_vec()),
            ..Default::default()
        }
    }

    /// The reproducer runs the program isolated: a fuzzed test that names a path
    /// outside its directory (`gzip -r /.`) cannot change it, unless asked to.
    #[test]
    fn the_reproducer_runs_the_program_isolated_unless_told_not_to() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        let t = SystemTest {
            args: vec![
                "-c".into(),
                "touch \"$0/written\" 2>/dev/null; cat in.txt; exit 7".into(),
                outside.display().to_string(),
            ],
            files: [("in.txt".to_owned(), b"from the test\n".to_vec())].into(),
            ..Default::default()
        };
        let script = dir.path().join("reproduce.sh");
        write_script(&script, Path::new("/bin/sh"), &t).unwrap();
        let run = |unsandboxed: bool| {
            let mut c = std::process::Command::new("sh");
            c.arg(&script).env_remove("TRESTLE_UNSANDBOXED");
            if unsandboxed {
                c.env("TRESTLE_UNSANDBOXED", "1");
            }
            c.output().unwrap()
        };
        let isolated = run(false);
        assert_eq!(isolated.status.code(), Some(7), "{isolated:?}");
        assert_eq!(isolated.stdout, b"from the test\n");
        assert!(
            !outside.join("written").exists(),
            "the sandbox let it write"
        );
        let direct = run(true);
        assert_eq!(direct.status.code(), Some(7), "{direct:?}");
        assert!(outside.join("written").exists());
    }

    #[test]
    fn a_deferred_reduction_rewrites_only_the_reproducer_section() {
        let found = test_with("5 0:r 7Sr Lr\n## Provenance\nmore\n");
        let pending = ReduceStats::none(&found, true);
        let md = format!(
            "# Crash\n\n{}\n## Found as\n\n`x`.\n",
            reproducer_section(&found, &pending)
        );
        assert!(md.contains("Not reduced yet"));
        let reduced = test_with("0:r Sr Lr");
        let stats = ReduceStats {
            runs: 40,
            budget_exhausted: false,
            size_before: 40,
            size_after: 12,
            pending: false,
        };
        let after = with_reproducer(&md, (&found, &pending), (&reduced, &stats))
            .expect("the section is there");
        assert!(
            !after.contains("Not reduced yet")
                && after.contains("Reduced from 40 to 12 bytes in 40 runs."),
            "{after}"
        );
        assert!(
            after.contains("0:r Sr Lr") && !after.contains("7Sr"),
            "{after}"
        );
        assert!(
            after.starts_with("# Crash\n\n") && after.ends_with("\n## Found as\n\n`x`.\n"),
            "{after}"
        );
        // A summary edited by hand is left alone.
        assert!(with_reproducer("# Crash\n", (&found, &pending), (&reduced, &stats)).is_none());
    }
}

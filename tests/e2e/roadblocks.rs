//! Roadblocks: the branch table trestle-cc writes into a program names every branch
//! with the edges of its directions, the code behind each and its comparison; a bridge
//! campaign reads the system fuzzer's roadblocks from it and fuzzes units where they
//! are, and a system-only campaign does not.

use serde_json::{json, Value};
use std::path::Path;
use trestle_bridge::roadblocks::BranchTable;
use trestle_tests::*;

/// A line protocol whose `check` command guards a large block behind a checksum no
/// seed matches (and no mutation finds by chance); a larger one behind a mode the
/// input sets (`mode N`) but no parameter of `check` carries (the mode is not a value
/// of the input: N * 7 + 3, with a bit set); and the largest behind a level only the
/// environment sets, which no input changes.
const SOURCE: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned checksum(const char *s) {
    unsigned h = 2166136261u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static int table[64];
static int mode = 977;
static int level = 2;

static int check(const char *word, int n) {
    int total = 0;
    if (level > 9) {  /* SETTING */
        for (int i = 0; i < n && i < 64; i++) {
            if (table[i] > 9) total += table[i] * 5;
            else if (table[i] == 6) total -= 3;
            else if (table[i] == 4) total |= 2;
            else if (table[i] == 2) total *= 3;
            else if (table[i] == 8) total /= 2;
            else total ^= i * 5;
            if (total > 8192) break;
        }
        if (total > 2000) puts("enormous");
        else if (total > 900) puts("grand");
        else if (total > 400) puts("fair");
        else if (total < -9) puts("sunk");
        else if (total == 9) puts("nine");
        else puts("plain");
        if (n == 60) printf("%d\n", total);
        if (n == 61) table[3] = total;
        if (n == 62) table[4] = -total;
        if (n == 63) fputs("sixty-three\n", stderr);
        if (n == 64) table[5] ^= total;
        if (n == 65) puts("level");
        if (n == 66) table[6] += total;
        if (n == 67) table[7] -= total;
    }
    if (mode == 4242) {  /* CONFIG */
        for (int i = 0; i < n && i < 64; i++) {
            if (table[i] > 7) total += table[i] * 3;
            else if (table[i] == 5) total -= 2;
            else if (table[i] == 1) total |= 1;
            else if (table[i] == 3) total *= 2;
            else total ^= i * 7;
            if (total > 4096) break;
        }
        if (total > 1000) puts("huge");
        else if (total > 500) puts("large");
        else if (total < -5) puts("very negative");
        else if (total == 7) puts("seven");
        else puts("modest");
        if (n == 78) printf("%d\n", total);
        if (n == 79) table[0] = total;
        if (n == 80) table[1] = -total;
        if (n == 81) fputs("eighty-one\n", stderr);
        if (n == 82) table[2] ^= total;
        if (n == 77) puts("lucky");
    }
    if (checksum(word) == 0x5eed1234u) {  /* ROADBLOCK */
        for (int i = 0; i < n && i < 64; i++) {
            if (table[i] > 3) total += table[i];
            else if (table[i] == 2) total -= 1;
            else total ^= i;
        }
        if (total > 100) puts("big");
        else if (total < 0) puts("negative");
        else puts("small");
        return total;
    }
    return n > 3 ? 1 : 0;
}

int main(void) {
    char line[256];
    const char *l = getenv("GATE_LEVEL");
    if (l) level = atoi(l);
    while (fgets(line, sizeof line, stdin)) {
        char word[64];
        int n = 0;
        if (sscanf(line, "check %63s %d", word, &n) == 2) printf("%d\n", check(word, n));
        else if (strncmp(line, "mode ", 5) == 0) mode = (atoi(line + 5) * 7 + 3) | 0x10000;
        else if (strncmp(line, "set ", 4) == 0) { int i = atoi(line + 4) & 63; table[i]++; }
    }
    return 0;
}
"#;

fn line_of(mark: &str) -> u32 {
    SOURCE.lines().position(|l| l.contains(mark)).unwrap() as u32 + 1
}

fn roadblock_line() -> u32 {
    line_of("ROADBLOCK")
}

#[test]
fn the_branch_table_names_both_directions_the_code_behind_and_the_comparison() {
    let dir = tempfile::tempdir().unwrap();
    let program = build_c(dir.path(), "gate", SOURCE, "-O2");
    let table = BranchTable::load(&program).unwrap();
    let line = roadblock_line();
    let b = table
        .branches
        .iter()
        .find(|b| b.line == line && b.file.as_deref().is_some_and(|f| f.ends_with("gate.c")))
        .unwrap_or_else(|| panic!("no branch at gate.c:{line} in {:#?}", table.branches));
    assert_eq!(b.directions.len(), 2);
    assert!(
        b.directions.iter().all(|d| !d.edges.is_empty()),
        "each direction has its edge: {b:?}"
    );
    let (t, f) = (&b.directions[0], &b.directions[1]);
    assert!(
        t.behind >= 4 && t.behind > f.behind,
        "the checksum's true side guards the loop: {b:?}"
    );
    assert!(
        b.cmp.is_some(),
        "the checksum comparison logs under a fixed id: {b:?}"
    );
    // Edge numbers are the program's own, distinct between the two directions.
    assert!(t.edges.iter().all(|e| !f.edges.contains(e)));
    // A plain program has no table: an empty one, not an error.
    let plain = dir.path().join("plain");
    ok(std::process::Command::new("clang-19")
        .arg("-O2")
        .arg(dir.path().join("gate.c"))
        .arg("-o")
        .arg(&plain));
    assert!(BranchTable::load(&plain).unwrap().branches.is_empty());
}

/// A direction that only ends the program: an error exit through the program's own
/// fatal-error function, against a failed check that aborts (a bug).
const EXITS: &str = r#"
#include <stdio.h>
#include <stdlib.h>
static __attribute__((noreturn, noinline)) void fatal(const char *what) {
    fprintf(stderr, "bad %s\n", what);
    exit(2);
}
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 0;
    if (n == 12345) /* EXIT */
        fatal("number");
    if (n == 54321) /* ABORT */
        abort();
    printf("%d\n", n * 3);
    return 0;
}
"#;

#[test]
fn a_direction_that_only_ends_the_program_is_marked_and_is_no_roadblock() {
    let dir = tempfile::tempdir().unwrap();
    let program = build_c(dir.path(), "exits", EXITS, "-O2");
    let table = BranchTable::load(&program).unwrap();
    let line = |mark: &str| EXITS.lines().position(|l| l.contains(mark)).unwrap() as u32 + 1;
    // The optimiser may make the two tests one switch: a case or a line names each way.
    let leads = |b: &trestle_bridge::roadblocks::Branch, d: usize, case: i64, mark: &str| {
        b.directions[d].case == Some(case)
            || (b.directions[d].case.is_none() && b.line == line(mark))
    };
    let ends: Vec<(usize, usize)> = table
        .branches
        .iter()
        .enumerate()
        .flat_map(|(i, b)| {
            b.directions
                .iter()
                .enumerate()
                .filter(|(_, d)| d.ends)
                .map(move |(k, _)| (i, k))
        })
        .collect();
    assert_eq!(
        ends.len(),
        1,
        "one way ends the program: {:#?}",
        table.branches
    );
    let (bi, di) = ends[0];
    assert!(
        leads(&table.branches[bi], di, 12345, "EXIT"),
        "{:#?}",
        table.branches[bi]
    );
    // The way on taken at the exit's branch (a switch's default, or the if's other
    // side) and one side of the abort's if: the exit is no roadblock, the abort is.
    let mut covered = vec![false; 1 << 16];
    let exit_branch = &table.branches[bi];
    let mut ways = vec![exit_branch
        .directions
        .iter()
        .find(|d| !d.ends && d.case.is_none())
        .unwrap()];
    if let Some(b) = table.branches.iter().find(|b| b.line == line("ABORT")) {
        ways.push(&b.directions[0]);
    }
    for d in ways {
        for &e in &d.edges {
            covered[e as usize] = true;
        }
    }
    let found = trestle_bridge::roadblocks::roadblocks(&table, &covered, |_| 1.0);
    assert!(found
        .iter()
        .all(|r| !table.branches[r.branch].directions[r.missing].ends));
    assert!(
        found.iter().any(|r| {
            let b = &table.branches[r.branch];
            leads(b, r.missing, 54321, "ABORT") || b.line == line("ABORT")
        }),
        "the abort is a roadblock: {found:?} {:#?}",
        table.branches
    );
}

fn json_file(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .unwrap()
}

#[test]
fn a_bridge_campaign_fuzzes_units_at_the_system_fuzzers_roadblock() {
    let dir = tempfile::tempdir().unwrap();
    let program = build_c(dir.path(), "gate", SOURCE, "-O2");
    let seeds = dir.path().join("seeds");
    write_test(
        &seeds,
        "check",
        &json!({ "stdin": "mode 4\nset 1\nset 2\nset 2\ncheck hello 5\ncheck world 2\n" }),
    );
    // A seed that only sets the mode: a `main` unit carved from it (or from a queue
    // entry like it) carries the mode's digit where the probe changes single bytes,
    // so the mode's gate, which promises more code than the checksum, may have a
    // unit deciding it and take the first slice. The checksum must still get its
    // slice within the budget.
    write_test(&seeds, "mode", &json!({ "stdin": "mode 4\n" }));
    let out = dir.path().join("bridge");
    let o = run(&mut trestle(&[
        &"run",
        &"--program",
        &program,
        &"--seeds",
        &seeds,
        &"--time",
        &"75s",
        &"--out",
        &out,
        &"--plain",
    ]));
    let log = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "trestle run:\n{log}");
    let line = roadblock_line();
    let listed = json_file(&out.join("roadblocks.json"));
    let rows = listed["roadblocks"].as_array().unwrap();
    let at =
        |r: &Value| r["line"] == line && r["file"].as_str().is_some_and(|f| f.ends_with("gate.c"));
    assert!(
        rows.iter()
            .any(|r| at(r) && r["function"] == "check" && r["direction"] == 0),
        "the checksum is a roadblock: {listed}\n{log}"
    );
    let c = json_file(&out.join("campaign.json"));
    let attempts = c["roadblocks"]["attempts"].as_array().unwrap();
    assert!(
        attempts.iter().any(|a| a["location"]
            .as_str()
            .is_some_and(|l| l.ends_with(&format!("gate.c:{line}")))
            && a["function"] == "check"),
        "no unit fuzzed at the roadblock: {}\n{log}",
        c["roadblocks"]
    );
    // The mode's gate promises more code than the checksum, and the input moves what
    // it compares, but no parameter of a `check` unit does: those are probed and
    // passed over. A unit is fuzzed there only if a probe found one of a caller
    // (`main`, its stream carrying the mode's digit) deciding it.
    let config = format!("gate.c:{}", line_of("CONFIG"));
    assert!(
        rows.iter().any(|r| r["line"] == line_of("CONFIG")),
        "the mode's gate is a roadblock: {listed}"
    );
    let probes = c["roadblocks"]["probes"].as_array().unwrap();
    let probed_config = |function: &str| -> Vec<&Value> {
        probes
            .iter()
            .filter(|p| {
                p["function"] == function
                    && p["location"].as_str().is_some_and(|l| l.ends_with(&config))
            })
            .collect()
    };
    let checks = probed_config("check");
    assert!(
        !checks.is_empty()
            && checks
                .iter()
                .all(|p| p["worth"] == false
                    && p["verdict"].as_str().unwrap().contains("do not change")),
        "the mode's gate was not probed with check units, or one passed: {probes:#?}"
    );
    let fuzzed_at_config = attempts
        .iter()
        .any(|a| a["location"].as_str().is_some_and(|l| l.ends_with(&config)));
    assert_eq!(
        fuzzed_at_config,
        probed_config("main").iter().any(|p| p["worth"] == true),
        "fuzzed at the mode's gate unless a main unit was found deciding it: {probes:#?}\n{attempts:#?}"
    );
    // The system fuzzer's tracing runs saw the checksum and the mode change with the
    // input, and the level never: the level's gate, though it promises the most code,
    // is not probed first (a setting, not a value of the input).
    let operands = |l: u32| {
        rows.iter()
            .find(|r| r["line"] == l)
            .map(|r| r["operands"].clone())
    };
    assert_eq!(operands(line), Some(json!("vary")), "{listed}");
    assert_eq!(operands(line_of("CONFIG")), Some(json!("vary")), "{listed}");
    assert_eq!(
        operands(line_of("SETTING")),
        Some(json!("constant")),
        "{listed}"
    );
    assert_eq!(
        rows[0]["line"],
        line_of("SETTING"),
        "the level's gate promises the most code: {listed}"
    );
    let setting = format!("gate.c:{}", line_of("SETTING"));
    assert!(
        !probes[0]["location"].as_str().unwrap().ends_with(&setting),
        "the level's gate was probed first: {probes:#?}"
    );
    assert!(
        probes.iter().any(|p| p["worth"] == true
            && p["location"]
                .as_str()
                .is_some_and(|l| l.ends_with(&format!("gate.c:{line}")))),
        "the checksum's unit was not found deciding it: {probes:#?}"
    );
    // Each roadblock's entry is recorded under a name of its own, for that branch
    // alone: a unit carved from it reached the branch, and no probe there says it
    // does not (with one recording for two roadblocks, units that reached only the
    // other one were probed here and failed).
    let recorded: Vec<&str> = c["roadblocks"]["recorded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    assert!(recorded.iter().all(|m| m.contains("~b")), "{recorded:?}");
    let mut own = 0;
    for p in probes {
        // Only a unit that reaches the branch counts against the roadblock.
        assert_eq!(
            p["unreached"].as_bool(),
            Some(p["verdict"].as_str().unwrap().contains("does not reach")),
            "{p}"
        );
        let unit = Path::new(p["unit"].as_str().unwrap());
        let batch = unit.parent().unwrap().parent().unwrap();
        let index = json_file(&batch.join("index.json"));
        let file = unit.strip_prefix(batch).unwrap().to_str().unwrap();
        let row = index["units"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["file"] == file)
            .unwrap_or_else(|| panic!("{file} in {index}"));
        // The unit's own test, or another whose recording held the same context.
        let tests =
            std::iter::once(&row["test"]).chain(row["also_from"].as_array().into_iter().flatten());
        let marks: Vec<String> = tests
            .map(|t| {
                format!(
                    "{}@{}.json",
                    p["key"].as_str().unwrap(),
                    t.as_str().unwrap()
                )
            })
            .collect();
        if marks.iter().any(|m| recorded.contains(&m.as_str())) {
            own += 1;
            assert!(
                !p["verdict"].as_str().unwrap().contains("does not reach"),
                "a unit recorded for this roadblock does not reach it: {p}"
            );
        }
    }
    assert!(
        own > 0,
        "no unit recorded for its roadblock was probed there: {probes:#?}"
    );
    let first = attempts[0]["fuzzed"].as_u64().unwrap() as usize;
    assert!(
        c["fuzzed"][first]["reason"]
            .as_str()
            .unwrap()
            .starts_with("roadblock at"),
        "{}",
        c["fuzzed"][first]
    );
    assert!(
        log.contains("roadblocks: "),
        "the last lines say what became of the roadblocks:\n{log}"
    );
    // The baseline has no roadblock machinery: no unit, no roadblocks file.
    let base = dir.path().join("system-only");
    let o = run(&mut trestle(&[
        &"run",
        &"--program",
        &program,
        &"--seeds",
        &seeds,
        &"--time",
        &"5s",
        &"--out",
        &base,
        &"--plain",
        &"--system-only",
    ]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!base.join("roadblocks.json").exists());
}

/// The `tally` subject: a digest gate only many tries cross, behind a start-up that
/// makes every system-level try cost a tenth of a second.
fn tally_builds(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let src = subject("tally").join("tally.c");
    let program = dir.join("tally");
    ok(std::process::Command::new(tool("trestle-cc"))
        .args(["-O2", "-g"])
        .arg(&src)
        .arg("-o")
        .arg(&program));
    let plain = dir.join("tally-plain");
    ok(std::process::Command::new("clang-19")
        .args(["-O2", "-g"])
        .arg(&src)
        .arg("-o")
        .arg(&plain));
    (program, plain)
}

#[test]
fn a_unit_crosses_the_roadblock_the_system_fuzzer_does_not_and_the_bridge_reports_the_bug() {
    let dir = tempfile::tempdir().unwrap();
    let (program, plain) = tally_builds(dir.path());
    let seeds = subject("tally").join("seeds");
    let campaign = |name: &str, extra: &[&str]| {
        let out = dir.path().join(name);
        let mut cmd = trestle(&[
            &"run",
            &"--program",
            &program,
            &"--seeds",
            &seeds,
            &"--validate-with",
            &plain,
            &"--time",
            &"75s",
            &"--out",
            &out,
            &"--plain",
        ]);
        cmd.args(extra);
        let o = run(&mut cmd);
        let log = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "trestle run {name}:\n{log}");
        (out, log)
    };
    let (bridge, log) = campaign("bridge", &[]);
    let alarms = alarm_list(&bridge);
    let alarm = alarms
        .iter()
        .find(|a| a["function"] == "remember" && a["source"] == "unit")
        .unwrap_or_else(|| {
            panic!("the bridge did not report the digest bug from a unit: {alarms:?}\n{log}")
        });
    // The slice that found it was a roadblock's: tally_word's gate, or another whose
    // slice gave the same unit (a `digest` loop's, never flipped: the word is never
    // empty) the time to pass the gate by chance. The alarm names it, and the alarm
    // solved it.
    let roadblock = alarm["roadblock"]
        .as_str()
        .unwrap_or_else(|| panic!("the alarm names no roadblock: {alarm}"));
    let c = json_file(&bridge.join("campaign.json"));
    let attempts = c["roadblocks"]["attempts"].as_array().unwrap();
    let a = attempts
        .iter()
        .find(|a| {
            roadblock.ends_with(a["location"].as_str().unwrap())
                || a["location"].as_str().unwrap().ends_with(roadblock)
        })
        .unwrap_or_else(|| {
            panic!(
                "the alarm's roadblock {roadblock} was never attempted: {}\npicks: {:#?}\n{log}",
                c["roadblocks"], c["fuzzed"]
            )
        });
    assert!(
        c["fuzzed"][a["fuzzed"].as_u64().unwrap() as usize]["function"] == "tally_word",
        "{a}\n{:#?}",
        c["fuzzed"]
    );
    let (at, flipped, solved) = (
        a["at"].as_f64().unwrap(),
        a["flipped_at"].as_f64(),
        a["solved_at"].as_f64(),
    );
    assert!(
        solved.is_some_and(|s| s >= at && flipped.is_none_or(|f| s >= f)),
        "the alarm did not solve its roadblock: {a}"
    );
    let function = a["function"].as_str().unwrap().to_owned();
    // The report says where the roadblock was and what came of it.
    let o = run(&mut trestle(&[&"report", &bridge]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let md = std::fs::read_to_string(bridge.join("report.md")).unwrap();
    let section = md
        .split("## Roadblocks")
        .nth(1)
        .unwrap_or_else(|| panic!("no roadblocks section:\n{md}"));
    assert!(
        section.contains(&format!("`{function}`"))
            && section.contains("solved at system level")
            && !section.contains(", 0 solved at system level"),
        "{section}"
    );
    assert!(
        section.contains("probed at a roadblock"),
        "the report does not say what the probes did: {section}"
    );
    assert!(
        section.contains("came from a roadblock slice")
            && !section.contains(" 0 came from a roadblock slice"),
        "the report does not say the alarm came from a roadblock slice: {section}"
    );
    // A unit round that solved a roadblock earns unit rounds more of the time.
    assert!(
        c["schedule"]["units"]["found"].as_f64().unwrap() > 0.0,
        "{}",
        c["schedule"]
    );
    // The same seeds and budget at system level alone: the tries are too slow.
    let (base, log) = campaign("system-only", &["--system-only"]);
    assert!(
        alarm_list(&base).is_empty(),
        "system-only found the digest bug (about one run in 150 does by chance):\n{log}"
    );
}

/// A command loop whose bug needs two `arm` lines before a `fire`: the system fuzzer
/// duplicates a line in seconds, while a unit of `process` has the count of arms
/// fixed in its context, not among its parameters.
const ARMED: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int armed;
static long total;
static int *volatile target;  /* never set: a null pointer the compiler cannot see */

__attribute__((noinline)) static void process(const char *line) {
    if (strncmp(line, "arm", 3) == 0) { armed++; return; }
    if (strncmp(line, "add ", 4) == 0) { total += atol(line + 4); printf("%ld\n", total); return; }
    if (strncmp(line, "fire", 4) == 0) {
        if (armed >= 2) *target = (int)total;  /* ARMED */
        puts("not armed");
        return;
    }
    puts("?");
}

int main(void) {
    char line[256];
    while (fgets(line, sizeof line, stdin)) process(line);
    return 0;
}
"#;

/// A unit's crash whose lifted test the shipped build survives but the coverage build
/// does not (here the fix is compiled into the shipped build only; in the wild,
/// undefined behaviour the optimiser hides): an alarm, flagged build-dependent, not
/// a false positive.
#[test]
fn a_unit_crash_only_the_coverage_build_has_is_a_build_dependent_alarm() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = subject("tally").join("tally.c");
    let (program, shipped, cov) = (
        d.join("tally"),
        d.join("tally-shipped"),
        d.join("tally-cov"),
    );
    ok(std::process::Command::new(tool("trestle-cc"))
        .args(["-O2", "-g"])
        .arg(&src)
        .arg("-o")
        .arg(&program));
    ok(std::process::Command::new("clang-19")
        .args(["-O2", "-g", "-DTALLY_FIXED"])
        .arg(&src)
        .arg("-o")
        .arg(&shipped));
    ok(std::process::Command::new("clang-19")
        .args([
            "-O1",
            "-g",
            "-fprofile-instr-generate",
            "-fcoverage-mapping",
        ])
        .arg(&src)
        .arg("-o")
        .arg(&cov));
    let out = d.join("camp");
    let o = run(&mut trestle(&[
        &"run",
        &"--program",
        &program,
        &"--seeds",
        &subject("tally").join("seeds"),
        &"--validate-with",
        &shipped,
        &"--coverage-with",
        &cov,
        &"--time",
        &"75s",
        &"--out",
        &out,
        &"--plain",
    ]));
    let log = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{log}");
    let alarms = alarm_list(&out);
    let alarm = alarms
        .iter()
        .find(|a| a["function"] == "remember")
        .unwrap_or_else(|| panic!("no alarm in remember: {alarms:?}\n{log}"));
    // Found by the unit at the roadblock: as a unit's crash, or (when the system
    // fuzzer ran the unit's lifted input first, as on a loaded machine) by a system
    // test that descends from it.
    assert!(
        alarm["source"] == "unit" || alarm["descends_from"]["unit"] == "tally_word",
        "{alarm}"
    );
    let validation = alarm["builds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["role"] == "validation")
        .expect("the validation build is named")
        .clone();
    assert_eq!(validation["reproduces"], false, "{alarm}");
    assert!(
        log.lines().any(|l| l.contains("SIGSEGV in remember")
            && l.ends_with("[build-dependent: not on the validation build]")),
        "{log}"
    );
}

#[test]
fn where_units_add_nothing_the_bridge_gives_them_the_floor_and_finds_the_bug_at_system_level() {
    let dir = tempfile::tempdir().unwrap();
    let program = build_c(dir.path(), "armed", ARMED, "-O2");
    let seeds = dir.path().join("seeds");
    write_test(&seeds, "fire", &json!({ "stdin": "arm\nadd 5\nfire\n" }));
    let out = dir.path().join("bridge");
    let o = run(&mut trestle(&[
        &"run",
        &"--program",
        &program,
        &"--seeds",
        &seeds,
        &"--time",
        &"45s",
        &"--out",
        &out,
        &"--plain",
    ]));
    let log = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "trestle run:\n{log}");
    let alarms = alarm_list(&out);
    assert!(
        alarms
            .iter()
            .any(|a| a["function"] == "process" && a["source"] == "system"),
        "the system half did not report the bug: {alarms:?}\n{log}"
    );
    let c = json_file(&out.join("campaign.json"));
    // The system fuzzer crosses the arm count within seconds; no unit slice goes there.
    let armed = format!(
        "armed.c:{}",
        ARMED.lines().position(|l| l.contains("ARMED")).unwrap() + 1
    );
    let attempts = c["roadblocks"]["attempts"].as_array().unwrap();
    assert!(
        !attempts
            .iter()
            .any(|a| a["location"].as_str().is_some_and(|l| l.ends_with(&armed))),
        "fuzzed at the arm count: {attempts:#?}"
    );
    // Unit rounds found nothing the system fuzzer had not: after the first rounds,
    // taken to learn, the schedule gives them its floor.
    let units = &c["schedule"]["units"];
    assert!(units["rounds"].as_u64().unwrap() >= 2, "{}", c["schedule"]);
    assert_eq!(
        units["found"].as_f64().unwrap(),
        0.0,
        "units found something here: {}",
        c["schedule"]
    );
    assert!(
        log.contains("the schedule ended giving units 10% of the time"),
        "{log}"
    );
}

/// A store whose every record is of kind 1, a value set inside the program (the
/// `volatile` keeps the compiler from knowing it), with a defensive block for any
/// other kind. The seed's `1` (the record's slot) is where a unit's kind parameter
/// maps to by chance: in the harness the kind decides the branch, at system level no
/// input does. The program reads one line, so every input that calls `store` covers
/// the same edges as the seed and joins no queue: the entry carved at the branch is
/// the seed, or its trimmed form, which keeps the ` 1` `%d` needs. (With a loop over
/// lines, a CI run carved a shorter entry whose numbers held no `1` to map the kind
/// to, and so no unit to probe for this.)
const KINDS: &str = r#"
#include <stdio.h>
#include <string.h>

volatile int record_kind = 1;
static int table[32];

__attribute__((noinline)) int store(const char *word, int n, int kind) {
    int total = 0;
    if (kind != 1) {  /* DEFENSIVE */
        for (int i = 0; i < 32; i++) {
            if (table[i] > 7) total += table[i] * 3;
            else if (table[i] == 5) total -= 2;
            else if (table[i] == 1) total |= 1;
            else total ^= i * 7;
        }
        if (total > 1000) puts("huge");
        else if (total > 500) puts("large");
        else if (total < -5) puts("negative");
        else puts("modest");
        fputs("record of an unknown kind\n", stderr);
        return -1;
    }
    total = word[0] * 3 + word[1];
    table[n & 31] += total & 15;
    return total;
}

int main(void) {
    char line[256], word[64];
    int n = 0;
    if (!fgets(line, sizeof line, stdin)) return 1;
    if (sscanf(line, "store %63s %d", word, &n) == 2) printf("%d\n", store(word, n, record_kind));
    return 0;
}
"#;

#[test]
fn a_unit_whose_parameter_decides_the_branch_only_in_the_harness_is_not_fuzzed_there() {
    let dir = tempfile::tempdir().unwrap();
    let program = build_c(dir.path(), "kinds", KINDS, "-O2");
    let seeds = dir.path().join("seeds");
    write_test(&seeds, "store", &json!({ "stdin": "store alpha 1\n" }));
    let out = dir.path().join("bridge");
    let o = run(&mut trestle(&[
        &"run",
        &"--program",
        &program,
        &"--seeds",
        &seeds,
        &"--time",
        &"20s",
        &"--out",
        &out,
        &"--plain",
    ]));
    let log = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "trestle run:\n{log}");
    let c = json_file(&out.join("campaign.json"));
    let defensive = format!(
        "kinds.c:{}",
        KINDS.lines().position(|l| l.contains("DEFENSIVE")).unwrap() + 1
    );
    let at = |v: &Value| {
        v["location"]
            .as_str()
            .is_some_and(|l| l.ends_with(&defensive))
    };
    let probes: Vec<&Value> = c["roadblocks"]["probes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| at(p))
        .collect();
    // In the harness the kind decides the branch; written back into the seed (the
    // `1` of `store alpha 1`, or any other place it maps to), it changes nothing the
    // branch compares.
    assert!(
        probes.iter().any(|p| p["verdict"].as_str().unwrap().contains("at system level the input it was mapped from does not change")),
        "no unit of `store` was probed at the kind's branch, or the system-level probe passed it: {probes:#?}\n{log}"
    );
    assert!(probes.iter().all(|p| p["worth"] == false), "{probes:#?}");
    let attempts = c["roadblocks"]["attempts"].as_array().unwrap();
    assert!(
        !attempts.iter().any(at),
        "fuzzed at a branch no input decides: {attempts:#?}"
    );
}

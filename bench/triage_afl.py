#!/usr/bin/env python3
"""`trestle triage` on the AFL++ column's crashes (issue #35): does it sort anyone's
crashes into the bugs bench/bugs.py's ground truth says they are?

    python3 bench/triage_afl.py --results DIR --work WORK [--subjects cut,dc,...]
                                [--out DIR] [--reduce-time 60]

DIR is a bugs.py results directory whose aflpp-REP.json files were written by runs
whose directories are still in WORK (bugs.py --work): each run's crashes/ is read
from WORK/runs/SUBJECT/aflpp-REP/out/default/crashes. Every crash file becomes the
trestle system test bugs.py classified (the benchmark's AFL++ builds take their
arguments and stdin from one input, bench/aflpp/argv_stdin.c, which only the
benchmark knows how to read; the test keeps the crash file's name), and one
`trestle triage` per run sorts them on the plain build. The ground truth is the
aflpp-REP.json's own classification of the same files: a planted bug (by its lines or
function), another crash (by the plain build's signature), or unreproduced.

Per run it checks, and prints:
  - every crash of one group has the same ground truth ("assigned to the same bug");
  - each ground-truth bug or other crash is one group ("one group per bug");
  - nothing the ground truth reproduced is dropped;
and the triage's time and its reduction sizes. Writes OUT/SUBJECT/aflpp-REP/ (the
triage) and OUT/triage-afl.md (the table); exit status 1 when a check fails.
"""
import argparse
import base64
import collections
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bugs  # noqa: E402  (the benchmark's subjects, builds and AFL++ input format)

SIX = ["cut", "paste", "tac", "b2sum", "sed", "dc"]


def label(crash):
    p = crash.get("plain") or {}
    kind, what = p.get("kind"), p.get("what")
    if kind == "bug":
        return f"bug {what}"
    if kind == "other":
        return f"other {what}"
    return None  # unreproduced on the plain build when the benchmark ran it


def triage_run(subj, rep, res, work, out, trestle, plain, reduce_time):
    crash_dir = bugs.run_dir_of(work, subj, "aflpp", rep) / "out" / "default" / "crashes"
    if not crash_dir.is_dir():
        kept = [c for c in res.get("crashes", []) if "input_b64" in c]
        if len(kept) != len(res.get("crashes", [])):
            return {"run": f"{subj} aflpp-{rep}", "missing": str(crash_dir)}
        # The run directory is gone, but the run file holds every crash input.
        crash_dir = out / subj / f"aflpp-{rep}" / "crashes"
        crash_dir.mkdir(parents=True, exist_ok=True)
        for c in kept:
            (crash_dir / c["file"]).write_bytes(base64.b64decode(c["input_b64"]))
    truth = {c["file"]: label(c) for c in res.get("crashes", [])}
    files = sorted(p for p in crash_dir.glob("id:*"))
    if not files:
        # AFL++ found no crash in this run: nothing to triage, nothing to check.
        return {"run": f"{subj} aflpp-{rep}", "crashes": 0, "reproduced": 0, "dropped": 0,
                "unreproduced_by_truth": 0, "truths": [], "groups": [], "seconds": 0.0, "problems": []}
    run_out = out / subj / f"aflpp-{rep}"
    inputs = run_out / "inputs"
    inputs.mkdir(parents=True, exist_ok=True)
    for p in files:
        (inputs / f"{p.name}.json").write_text(json.dumps(bugs.afl_to_test(p.read_bytes(), bugs.SUBJECTS[subj]["afl"])))
    tri = run_out / "triage"
    cmd = [str(trestle), "triage", "--program", str(plain), "--out", str(tri), "--reduce-time", f"{reduce_time}s", str(inputs)]
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True)
    secs = time.monotonic() - t0
    (run_out / "triage.log").write_text(r.stdout + r.stderr)
    if r.returncode != 0:
        return {"run": f"{subj} aflpp-{rep}", "error": f"triage exited {r.returncode}: {r.stderr.strip()[-400:]}"}
    t = json.loads((tri / "triage.json").read_text())
    alarms = {a["id"]: a for a in json.loads((tri / "alarms.json").read_text()).get("alarms", [])}

    def name(member):
        return Path(member).name.removesuffix(".json")

    problems = []
    groups_of = collections.defaultdict(list)  # ground truth -> groups holding it
    rows = []
    for g in t["groups"]:
        labels = collections.Counter(truth.get(name(m), "not in the run file") for m in g["members"])
        for lab in labels:
            groups_of[lab].append(g["id"])
        if len(labels) > 1:
            problems.append(f"group {g['id']} ({g['signature']}) mixes {dict(labels)}")
        a = alarms.get(g["id"], {})
        rows.append((g["signature"], len(g["members"]), ", ".join(str(l) for l in labels), a.get("size_lifted"), a.get("size_reduced")))
    for lab, gs in sorted(groups_of.items(), key=lambda kv: str(kv[0])):
        if lab is not None and len(gs) > 1:
            problems.append(f"{lab} is {len(gs)} groups: {', '.join(gs)}")
    dropped_real = [d for d in t["dropped"] if truth.get(name(d["input"])) is not None]
    for d in dropped_real:
        problems.append(f"dropped {name(d['input'])} ({truth[name(d['input'])]}): {d['reason']}")
    return {
        "run": f"{subj} aflpp-{rep}",
        "crashes": len(files),
        "reproduced": t["reproduced"],
        "dropped": len(t["dropped"]),
        "unreproduced_by_truth": sum(1 for f in files if truth.get(f.name) is None),
        "truths": sorted(str(l) for l in groups_of if l is not None),
        "groups": rows,
        "seconds": round(secs, 1),
        "problems": problems,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", required=True, help="a bugs.py results directory with aflpp-REP.json files")
    ap.add_argument("--work", required=True, help="bugs.py's --work, holding the AFL++ run directories")
    ap.add_argument("--subjects", default=",".join(SIX))
    ap.add_argument("--out", default=None, help="where the triages go (default: WORK/triage-afl)")
    ap.add_argument("--reduce-time", type=int, default=60, help="seconds of reduction per bug (trestle triage --reduce-time)")
    ap.add_argument("--trestle", default=None,
                    help="the trestle binary to triage with, its preload libraries beside it (default: WORK/bin/trestle, "
                         "the copy bugs.py made)")
    a = ap.parse_args()
    results, work = Path(a.results).resolve(), Path(a.work).resolve()
    out = Path(a.out).resolve() if a.out else work / "triage-afl"
    trestle = Path(a.trestle).resolve() if a.trestle else work / "bin" / "trestle"
    if not trestle.exists():
        sys.exit(f"triage_afl: {trestle} missing (bugs.py copies trestle there when it runs)")
    report, failed = [], False
    for subj in [s for s in a.subjects.split(",") if s]:
        if subj not in bugs.SUBJECTS:
            sys.exit(f"triage_afl: unknown subject {subj}")
        files = sorted((results / subj).glob("aflpp-*.json"))
        if not files:
            print(f"{subj}: no aflpp run file in {results / subj}", file=sys.stderr)
            continue
        plain = bugs.build_variant(subj, "plain", work)
        for f in files:
            rep = int(f.stem.split("-")[1])
            res = json.loads(f.read_text())
            print(f"[{time.strftime('%H:%M:%S')}] {subj} aflpp-{rep}: {len(res.get('crashes', []))} crash(es)", file=sys.stderr, flush=True)
            r = triage_run(subj, rep, res, work, out, trestle, plain, a.reduce_time)
            report.append(r)
            if r.get("problems") or r.get("error"):
                failed = True
            for p in r.get("problems", []):
                print(f"  {p}", file=sys.stderr)
    lines = ["# `trestle triage` on the AFL++ column's crashes", "",
             f"Results {results}, run directories under {work}. A row per run: crash files, reproduced on the plain "
             "build, groups, the ground-truth bugs and other crashes among them (bench/bugs.py's classification), "
             "triage time, and problems (a group mixing ground truths, a ground truth split over groups, a crash "
             "the ground truth reproduced dropped).", "",
             "| run | crashes | reproduced | dropped (unreproduced by the benchmark) | groups | ground truths | seconds | problems |",
             "|---|---|---|---|---|---|---|---|"]
    for r in report:
        if "missing" in r or "error" in r:
            lines.append(f"| {r['run']} | – | – | – | – | – | – | {r.get('missing') and 'no crash directory ' + r['missing'] or r['error']} |")
            continue
        lines.append(f"| {r['run']} | {r['crashes']} | {r['reproduced']} | {r['dropped']} ({r['unreproduced_by_truth']}) | "
                     f"{len(r['groups'])} | {'; '.join(r['truths'])} | {r['seconds']} | {'; '.join(r['problems']) or 'none'} |")
    lines += ["", "Groups (signature, members, ground truth, bytes before and after reduction):", ""]
    for r in report:
        for sig, n, truths, before, after in r.get("groups", []):
            lines.append(f"- {r['run']}: `{sig}` × {n} = {truths}; {before} → {after} bytes")
    out.mkdir(parents=True, exist_ok=True)
    (out / "triage-afl.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Bridge against system-only on the bundled subjects, repeated: time to each alarm,
edges at the end, and what the roadblocks did. A quick check of the roadblock design
(issue #32) between full runs of the six-program matrix (bench/bugs.py).

Each run writes bench/results/roadblocks/SUBJECT/COLUMN-REP.json when it finishes, so
an interrupted benchmark resumes where it stopped; the table is rewritten from those
files into bench/results/roadblocks.md.

usage: python3 bench/roadblocks.py [--subjects tally,requests] [--reps 3] [--time 120]
       [--jobs 2] [--table-only]
"""
import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "roadblocks"
TABLE = ROOT / "bench" / "results" / "roadblocks.md"
COLUMNS = ("bridge", "system-only")


def tools():
    b = pathlib.Path(os.environ.get("TRESTLE_BIN", ROOT / "target" / "release"))
    for t in ("trestle", "trestle-cc"):
        if not (b / t).exists():
            sys.exit(f"roadblocks: {b / t} is missing; run cargo build --workspace --release")
    return b


def build(b, subject, work):
    src = ROOT / "tests" / "subjects" / subject / f"{subject}.c"
    prog, plain = work / subject, work / f"{subject}-plain"
    if not prog.exists():
        subprocess.run([b / "trestle-cc", "-O2", "-g", src, "-o", prog], check=True)
        subprocess.run(["clang-19", "-O2", "-g", src, "-o", plain], check=True)
    return prog, plain


def one(b, subject, column, rep, seconds, work):
    out_file = RESULTS / subject / f"{column}-{rep}.json"
    if out_file.exists():
        return
    prog, plain = build(b, subject, work)
    out = pathlib.Path(tempfile.mkdtemp(prefix=f"rb-{subject}-{column}-{rep}-", dir=work))
    shutil.rmtree(out)
    cmd = [b / "trestle", "run", "--program", prog, "--seeds", ROOT / "tests" / "subjects" / subject / "seeds",
           "--validate-with", plain, "--time", f"{seconds}s", "--out", out, "--plain", "--seed", str(rep)]
    if column == "system-only":
        cmd.append("--system-only")
    log = subprocess.run(cmd, capture_output=True, text=True)
    if log.returncode != 0:
        print(f"roadblocks: {subject} {column} {rep} failed:\n{log.stderr[-2000:]}", file=sys.stderr)
        return
    c = json.loads((out / "campaign.json").read_text())
    alarms = json.loads((out / "alarms.json").read_text())["alarms"]
    last = (out / "timeline.csv").read_text().strip().splitlines()[-1].split(",")
    r = c.get("roadblocks", {})
    result = {
        "subject": subject, "column": column, "rep": rep, "time": seconds,
        "edges": int(last[3]),
        "alarms": [{"function": a["function"], "found_at": a["found_at"], "source": a["source"]} for a in alarms],
        "roadblocks_seen": r.get("seen", 0),
        "attempts": len(r.get("attempts", [])),
        "flipped": sum(1 for a in r.get("attempts", []) if a.get("flipped_at") is not None),
        "solved": sum(1 for a in r.get("attempts", []) if a.get("solved_at") is not None),
        "phase_seconds": c.get("phase_seconds", {}),
    }
    out_file.parent.mkdir(parents=True, exist_ok=True)
    out_file.write_text(json.dumps(result, indent=1) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    print(f"roadblocks: {subject} {column} {rep}: {len(alarms)} alarm(s), {result['edges']} edges", file=sys.stderr)


def table(subjects):
    lines = ["# Bridge against system-only on the bundled subjects (roadblocks, issue #32)", "",
             "Written by `python3 bench/roadblocks.py`; one run per file under bench/results/roadblocks/.",
             "Times to each alarm (by function) are medians over the runs, a run without it counted as the budget; n/N says how many runs found it.", ""]
    for s in subjects:
        runs = {c: [json.loads(p.read_text()) for p in sorted((RESULTS / s).glob(f"{c}-*.json"))] for c in COLUMNS}
        if not any(runs.values()):
            continue
        budget = max(r["time"] for rs in runs.values() for r in rs)
        functions = sorted({a["function"] for rs in runs.values() for r in rs for a in r["alarms"]})
        lines += [f"## {s} ({budget} s budget)", "", "| | " + " | ".join(COLUMNS) + " |", "|---|" + "---|" * len(COLUMNS)]
        for f in functions:
            cells = []
            for c in COLUMNS:
                times = [min((a["found_at"] for a in r["alarms"] if a["function"] == f), default=None) for r in runs[c]]
                found = [t for t in times if t is not None]
                med = statistics.median([t if t is not None else budget for t in times]) if times else None
                cells.append("—" if med is None else f"{med:.0f} s ({len(found)}/{len(times)})")
            lines.append(f"| alarm in `{f}` | " + " | ".join(cells) + " |")
        edges = [f"{statistics.median([r['edges'] for r in runs[c]]):.0f}" if runs[c] else "—" for c in COLUMNS]
        lines.append("| edges at the end (median) | " + " | ".join(edges) + " |")
        b = runs["bridge"]
        if b:
            lines.append(f"| roadblocks: attempted / flipped / solved (sum) | {sum(r['attempts'] for r in b)} / {sum(r['flipped'] for r in b)} / {sum(r['solved'] for r in b)} | — |")
            share = [sum(v for k, v in r["phase_seconds"].items() if k not in ("system fuzzing", "system crashes (validating)", "workers")) / max(1e-9, sum(r["phase_seconds"].values())) for r in b]
            lines.append(f"| bridge time outside system fuzzing (median) | {100 * statistics.median(share):.0f}% | — |")
        lines.append("")
    TABLE.write_text("\n".join(lines) + "\n")
    print(TABLE.read_text())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subjects", default="tally,requests")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--time", type=int, default=120)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--table-only", action="store_true")
    a = ap.parse_args()
    subjects = a.subjects.split(",")
    if not a.table_only:
        b = tools()
        work = pathlib.Path(tempfile.mkdtemp(prefix="trestle-roadblocks-"))
        for s in subjects:
            build(b, s, work)
        jobs = [(s, c, r) for r in range(a.reps) for s in subjects for c in COLUMNS]
        with ThreadPoolExecutor(a.jobs) as pool:
            list(pool.map(lambda j: one(b, j[0], j[1], j[2], a.time, work), jobs))
        shutil.rmtree(work, ignore_errors=True)
    table(subjects)


if __name__ == "__main__":
    main()

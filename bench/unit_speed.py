#!/usr/bin/env python3
"""Unit executions per second against system test executions per second.

    bench/unit_speed.py --program BIN --seeds DIR --units DIR [--functions f,g] [--seconds N] [--name NAME]

System rate: the program (an instrumented build, recording off) started afresh on
each seed in a fresh directory, as `trestle record` starts it, round-robin for
--seconds in all: `trestle exec --no-forkserver --for`, trestle's own executor. Unit rate:
`trestle fuzz` on up to three parameterized units of each named function (default:
the five functions with the most parameterized units), --seconds each, with CmpLog:
the persistent forkserver harness (the default), one process per execution
(--fork-per-exec), and the fuzzer inside the harness (--in-process). Appends a
Markdown table to bench/results/unit-speed.md.
"""
import argparse, base64, json, os, platform, statistics, subprocess, sys, tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
T = REPO / "target/release/trestle"

def content(c):
    """A test's file or stdin in the JSON form (text, or {"base64": ...}) as bytes."""
    return base64.b64decode(c["base64"]) if isinstance(c, dict) else c.encode()

def system_rate(program, seeds, seconds):
    """Runs per second of the program started afresh on its seeds, round-robin, by
    trestle's executor (each run in a fresh directory, as trestle runs a test)."""
    r = subprocess.run([str(T), "exec", "--no-sandbox", "--program", str(program), str(seeds), "--no-forkserver", "--timeout", "30s",
                        "--for", f"{seconds}s", "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"trestle exec --for on {program} failed ({r.returncode}): {r.stderr.strip()}")
    return json.loads(r.stdout)["execs_per_sec"]

def unit_rate(unit, seconds, extra):
    with tempfile.TemporaryDirectory() as out:
        r = subprocess.run([str(T), "fuzz", str(unit), "--time", f"{seconds}s", "--out", out, "--json"] + extra,
                           capture_output=True, text=True, timeout=seconds * 4 + 60)
        if r.returncode != 0:
            return None
        rep = json.loads(r.stdout)
        return rep["executions"] / max(rep["seconds"], 1e-9)

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--program", required=True); ap.add_argument("--seeds", required=True)
    ap.add_argument("--units", required=True); ap.add_argument("--functions")
    ap.add_argument("--seconds", type=int, default=10); ap.add_argument("--name", default=None)
    a = ap.parse_args()
    index = json.loads(Path(a.units, "index.json").read_text())
    rows = [r for r in index["units"] if r.get("params", 0) > 0]
    if a.functions:
        funcs = a.functions.split(",")
    else:
        counts = {}
        for r in rows:
            counts[r["function"]] = counts.get(r["function"], 0) + 1
        funcs = [f for f, _ in sorted(counts.items(), key=lambda kv: -kv[1])[:5]]
    sys_rate = system_rate(a.program, a.seeds, a.seconds)
    print(f"system tests: {sys_rate:.1f}/s", file=sys.stderr)
    lines = []
    for f in funcs:
        units = [r for r in rows if r["function"] == f][:3]
        pers = [x for x in (unit_rate(Path(a.units, u["file"]), a.seconds, []) for u in units) if x]
        fork = [x for x in (unit_rate(Path(a.units, u["file"]), a.seconds, ["--fork-per-exec"]) for u in units) if x]
        inproc = [x for x in (unit_rate(Path(a.units, u["file"]), a.seconds, ["--in-process"]) for u in units) if x]
        if not pers:
            continue
        med = lambda xs: statistics.median(xs) if xs else float("nan")
        p, k, i = med(pers), med(fork), med(inproc)
        print(f"{f}: persistent {p:.0f}/s ({p/sys_rate:.0f}x), fork {k:.0f}/s ({k/sys_rate:.0f}x), "
              f"in-process {i:.0f}/s ({i/sys_rate:.0f}x)", file=sys.stderr)
        lines.append(f"| {a.name or Path(a.program).name} | {f} | {len(pers)} | {p:.0f} | {p/sys_rate:.0f}x "
                     f"| {k:.0f} | {k/sys_rate:.0f}x | {i:.0f} | {i/sys_rate:.0f}x |")
    out = REPO / "bench/results/unit-speed.md"
    header = not out.exists()
    with out.open("a") as fh:
        if header:
            fh.write("# Unit executions against system test executions\n\n"
                     f"Machine: {platform.machine()}, {os.cpu_count()} cores. Unit rates are medians over up to 3 units "
                     "per function, `trestle fuzz` with CmpLog on; 'persistent' is the default harness, 'fork' is "
                     "`--fork-per-exec`, 'in-process' is `--in-process`. System rate: the same program spawned on "
                     "its seeds (`trestle exec --no-forkserver --for`).\n\n")
        fh.write(f"Command: `python3 bench/unit_speed.py {' '.join(sys.argv[1:])}` — system tests: {sys_rate:.1f}/s\n\n")
        fh.write("| program | function | units | persistent exec/s | vs system | fork exec/s | vs system "
                 "| in-process exec/s | vs system |\n|---|---|---|---|---|---|---|---|---|\n")
        fh.write("\n".join(lines) + "\n\n")
    print(f"appended to {out}", file=sys.stderr)

if __name__ == "__main__":
    main()

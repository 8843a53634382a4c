#!/usr/bin/env python3
"""Lifting figures, as in the paper's tables 4 and 5: how many unit findings the unit
fuzzer makes, how many system tests lifting makes of them, and which share of those
is effective (new system coverage) or a true alarm.

For a subject: build the harness with trestle-cc and a validation build for
source-based coverage with clang, record the seeds, carve, fuzz up to
--units-per-function parameterized units of every function for --time-per-unit
seconds each, then `trestle lift` everything against the coverage build.

usage: bench/lift_figures.py --subject requests|cut [--time-per-unit 10]
                             [--units-per-function 2] [--work DIR] [--out FILE.md]
"""

import argparse
import collections
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("TRESTLE_BIN", os.path.join(REPO, "target", "release"))


def sh(cmd, **kw):
    print("+ " + " ".join(str(c) for c in cmd), file=sys.stderr, flush=True)
    return subprocess.run([str(c) for c in cmd], check=True, **kw)


def build(subject, work):
    """Harness and coverage builds; returns (harness, coverage, seeds)."""
    if subject == "requests":
        src = os.path.join(REPO, "tests/subjects/requests/requests.c")
        harness, cov = os.path.join(work, "requests"), os.path.join(work, "requests-cov")
        sh([os.path.join(BIN, "trestle-cc"), "-O2", "-g", src, "-o", harness])
        sh(["clang-19", "-O1", "-g", "-fprofile-instr-generate", "-fcoverage-mapping", src, "-o", cov])
        return harness, cov, os.path.join(REPO, "tests/subjects/requests/seeds")
    if subject == "cut":
        script = os.path.join(REPO, "tests/coreutils/build.sh")
        env = dict(os.environ, PATH=BIN + os.pathsep + os.environ["PATH"])
        sh(["bash", script, "--cc", "trestle-cc", "--out", os.path.join(work, "trestle")], env=env)
        sh(["bash", script, "--cc", "clang-19", "--cflags", "-O1 -g -fprofile-instr-generate -fcoverage-mapping",
            "--out", os.path.join(work, "cov")], env=env)
        return (os.path.join(work, "trestle/bin/cut"), os.path.join(work, "cov/bin/cut"),
                os.path.join(REPO, "tests/coreutils/cut/seeds"))
    raise SystemExit(f"unknown subject {subject}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subject", required=True, choices=["requests", "cut"])
    ap.add_argument("--time-per-unit", type=float, default=10)
    ap.add_argument("--units-per-function", type=int, default=2)
    ap.add_argument("--max-queue", type=int, default=50)
    ap.add_argument("--work", help="working directory (default: a fresh temporary one)")
    ap.add_argument("--out", help="append the Markdown result here (default: stdout only)")
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix=f"trestle-lift-{a.subject}-")
    os.makedirs(work, exist_ok=True)
    t0 = time.time()
    harness, cov, seeds = build(a.subject, work)
    traces, units = os.path.join(work, "traces"), os.path.join(work, "units")
    for d in (traces, units):
        shutil.rmtree(d, ignore_errors=True)
    sh([os.path.join(BIN, "trestle"), "record", "--program", harness, "--tests", seeds, "--out", traces])
    sh([os.path.join(BIN, "trestle"), "carve", traces, "--out", units])
    index = json.load(open(os.path.join(units, "index.json")))
    picked = collections.defaultdict(list)
    for row in index["units"]:
        if row["params"] > 0 and len(picked[row["function"]]) < a.units_per_function:
            picked[row["function"]].append(row["file"])
    fuzz_dirs, unit_crashes = [], 0
    for function, files in sorted(picked.items()):
        for k, f in enumerate(files):
            out = os.path.join(work, "fuzz", f"{function}-{k}")
            shutil.rmtree(out, ignore_errors=True)
            r = subprocess.run([os.path.join(BIN, "trestle"), "fuzz", os.path.join(units, f), "--time",
                                f"{a.time_per_unit}s", "--out", out, "--json"], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"  {function}: not fuzzed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}",
                      file=sys.stderr)
                continue
            rep = json.loads(r.stdout)
            unit_crashes += len(rep["crashes"])
            fuzz_dirs.append(out)
            print(f"  {function}: {rep['executions']} execs, {rep['corpus']} queue, {len(rep['crashes'])} crash(es)",
                  file=sys.stderr)
    lift_out = os.path.join(work, "lift")
    shutil.rmtree(lift_out, ignore_errors=True)
    r = subprocess.run([os.path.join(BIN, "trestle"), "lift", *fuzz_dirs, "--program", cov, "--seeds", seeds,
                        "--out", lift_out, "--max-queue", str(a.max_queue), "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"lift failed: {r.stderr}")
    res = json.loads(r.stdout)
    s, alarms = res["stats"], res["alarms"]
    true_alarms = [x for x in alarms if x["matches_unit"]]
    cmd = " ".join(["bench/lift_figures.py"] + sys.argv[1:])
    md = [
        f"### Lifting on `{a.subject}` ({len(fuzz_dirs)} units of {len(picked)} functions, "
        f"{a.time_per_unit:g}s each, queue inputs per unit <= {a.max_queue})",
        "",
        "| unit crashes | queue inputs lifted | lifted system tests | effective | true-alarm tests | distinct true alarms | other system crashes | false positives | productive share |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {s['unit_crashes']} | {s['unit_queue']} | {s['lifted_tests']} | {s['effective']} | {s['true_alarm_tests']} | "
        f"{len(true_alarms)} | {s['other_crash_tests']} | {s['false_positives']} | "
        f"{100.0 * (s['effective'] + s['true_alarm_tests']) / max(1, s['lifted_tests']):.1f}% |",
        "",
        f"Branch directions covered after lifting: {s['branches_covered']} of {s['branches_total']}.",
        "Alarms: " + (", ".join(f"`{x['function']}`: {x['signature']}" for x in alarms) or "none") + ".",
        "",
        f"Command: `{cmd}` ({time.time() - t0:.0f}s on {platform.node()}, {os.cpu_count()} cores, "
        f"{time.strftime('%Y-%m-%d')}).",
        "",
    ]
    text = "\n".join(md)
    print(text)
    if a.out:
        with open(a.out, "a") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()

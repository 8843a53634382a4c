#!/usr/bin/env python3
"""Replay fidelity on real programs: record the seeds, carve, replay --check.

For each program prints the units, the faithful share, the most common reasons for
the rest (with extent numbers, offsets and byte values blanked so that one cause
counts once), the functions that were called but not carved, and the time of each
step.

    python3 bench/fidelity.py --trestle target/release/trestle \
        --program dc=/tmp/bc/bin/dc:tests/bc/dc-seeds \
        --program bc=/tmp/bc/bin/bc:tests/bc/bc-seeds [--out DIR] [--top 8] [--json]

Programs are built with trestle-cc first, e.g. for GNU bc and dc:
`bash tests/bc/build.sh --cc target/release/trestle-cc --out /tmp/bc`.

    python3 bench/fidelity.py --suite [--markdown bench/results/fidelity.md]

builds the real programs itself (GNU sed 4.9, bc and dc from bc 1.07.1, and the
programs none of trestle's tests was written against: mawk 1.3.4, Lua 5.4.4, bzip2
1.0.8, GNU m4 1.4.19, expat 2.5.0's xmlwf, GNU indent 2.2.12, GNU cpio 2.13, GNU diff
from diffutils 3.8, each
from its Debian bookworm source with its build script and seeds in bench/NAME; the
bundled C++ subjects shapes and ledger) with trestle-cc -O2 -g and measures them all.
A replay check that finds unfaithful units exits 1; that is a result here, not a failure.

Nondeterminism is measured, not guessed: the seeds are recorded and carved twice, and
`replay --check --twin` leaves out of each unit's comparison what the two recordings of
that call (from the same context) disagree on: a process id, a salt from getrandom, the
time. Those units count as faithful and apart ("nondeterministic"). --once skips it.
"""

import argparse
import collections
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


REPO = Path(__file__).resolve().parent.parent


def run(cmd, ok_codes=(0,)):
    """Run a trestle step; returns (stdout, seconds)."""
    start = time.monotonic()
    out = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    took = time.monotonic() - start
    if out.returncode not in ok_codes:
        sys.exit(f"{' '.join(map(str, cmd))} failed ({out.returncode}):\n{out.stderr}")
    return out.stdout, took


def reason_class(why):
    """A failure reason with its particulars blanked: `extent e8 (Heap): pointer +24
    -> &e9+0 recorded, nothing in replay` becomes `extent eN (Heap): pointer +24 ->
    &eN+N recorded, nothing in replay` (pointer offsets inside an extent stay: they
    name the field)."""
    why = re.sub(r"\be\d+\b", "eN", why)
    why = re.sub(r"&eN\+\d+", "&eN+N", why)
    why = re.sub(r"byte \d+ is 0x[0-9a-f]+ recorded, 0x[0-9a-f]+", "byte N is X recorded, Y", why)
    why = re.sub(r"return value -?\d+ recorded, -?\d+", "return value X recorded, Y", why)
    why = re.sub(r"\d+ extents reachable after the recorded call, \d+", "N extents reachable after the recorded call, M", why)
    why = re.sub(r"\d+ bytes recorded, \d+", "N bytes recorded, M", why)
    why = re.sub(r"fn#[0-9a-f]+", "fn#F", why)
    return why


def measure(trestle, name, program, seeds, work, top, twice=True):
    traces, units = work / f"{name}-traces", work / f"{name}-units"
    traces2, units2 = work / f"{name}-traces-again", work / f"{name}-units-again"
    for d in (traces, units, traces2, units2):
        shutil.rmtree(d, ignore_errors=True)
    _, t_record = run([trestle, "record", "--program", program, "--tests", seeds, "--out", traces])
    _, t_carve = run([trestle, "carve", traces, "--out", units])
    twin = []
    if twice:
        # The seeds recorded a second time: what the two recordings of a call
        # disagree on is measured nondeterminism, left out of that unit's oracle.
        run([trestle, "record", "--program", program, "--tests", seeds, "--out", traces2])
        run([trestle, "carve", traces2, "--out", units2])
        twin = ["--twin", units2]
    # Exit status 1: some unit is not faithful, which is what this counts.
    out, t_replay = run([trestle, "replay", units, "--check", "--json", *twin], ok_codes=(0, 1))
    summary = json.loads(out)
    index = json.loads((units / "index.json").read_text())
    reasons = collections.Counter()
    by_fn = collections.Counter()
    for f in summary["failures"]:
        verdict = f["verdict"]
        kind, why = next(iter(verdict.items())) if isinstance(verdict, dict) else (verdict, "")
        reasons[f"{kind}: {reason_class(why)}"] += 1
        by_fn[f["function"]] += 1
    return {
        "program": name,
        "seeds": len(list(Path(seeds).glob("*.json"))),
        "units": summary["units"],
        "faithful": summary["faithful"],
        "nondeterministic": summary.get("nondeterministic", 0),
        "twinned": summary.get("twinned", 0),
        "no_oracle": summary["no_oracle"],
        "errors": summary["errors"],
        "fidelity": summary["fidelity"],
        "reasons": reasons.most_common(top),
        "unfaithful_functions": by_fn.most_common(top),
        "not_carved": index.get("not_carved", []),
        "over_bound": index.get("over_bound", 0),
        "seconds": {"record": round(t_record, 1), "carve": round(t_carve, 1), "replay": round(t_replay, 1)},
    }


def print_result(r):
    print(f"== {r['program']}: {r['units']} units, {r['faithful']} faithful "
          f"({100 * r['fidelity']:.1f}%; {r['nondeterministic']} of them but for what two recordings "
          f"disagree on), {r['no_oracle']} without oracle, {r['errors']} errors")
    s = r["seconds"]
    print(f"   time: record {s['record']} s, carve {s['carve']} s, replay --check {s['replay']} s")
    if r["reasons"]:
        print("   top reasons for the rest:")
        for why, n in r["reasons"]:
            print(f"   {n:5}  {why}")
    if r["unfaithful_functions"]:
        print("   functions with the most unfaithful units: "
              + ", ".join(f"{f} ({n})" for f, n in r["unfaithful_functions"]))
    if r["not_carved"]:
        print(f"   called but not carved ({len(r['not_carved'])}):")
        for row in r["not_carved"]:
            print(f"          {row}")


# Real programs of the suite that the project's tests were not written against
# (bench/NAME/build.sh builds bin/NAME from its Debian bookworm source).
UNSEEN = ["mawk", "lua", "bzip2", "m4", "xmlwf", "indent", "cpio", "diff", "file"]


def build_suite(trestle, work):
    """Build the real programs with trestle-cc; returns NAME=BINARY:SEEDS specs."""
    release = Path(trestle).resolve().parent
    cc, cxx = release / "trestle-cc", release / "trestle-cxx"
    for script, out in (("tests/sed/build.sh", work / "sed"), ("tests/bc/build.sh", work / "bc")):
        subprocess.run(["bash", str(REPO / script), "--cc", str(cc), "--out", str(out)], check=True,
                       stdout=subprocess.DEVNULL)
    specs = [f"sed={work / 'sed/bin/sed'}:{REPO / 'tests/sed/seeds'}",
             f"bc={work / 'bc/bin/bc'}:{REPO / 'tests/bc/bc-seeds'}",
             f"dc={work / 'bc/bin/dc'}:{REPO / 'tests/bc/dc-seeds'}"]
    # Programs none of trestle's tests was written against, each with seeds of its
    # own under bench/NAME: an interpreter, a compressor, a macro processor, an XML
    # parser, a text formatter, an archiver, a text-comparison tool and a file-type
    # guesser (libmagic, whose tests the C library's regcomp compiles).
    for name in UNSEEN:
        subprocess.run(["bash", str(REPO / "bench" / name / "build.sh"), "--cc", str(cc), "--out", str(work / name)],
                       check=True, stdout=subprocess.DEVNULL)
        specs.append(f"{name}={work / name / 'bin' / name}:{REPO / 'bench' / name / 'seeds'}")
    for subject, source in (("shapes", "inventory.cpp"), ("ledger", "ledger.cpp")):
        binary = work / subject / subject
        binary.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(cxx), "-O2", "-g", str(REPO / "tests/subjects" / subject / source), "-o", str(binary)],
                       check=True)
        specs.append(f"{subject} (C++)={binary}:{REPO / 'tests/subjects' / subject / 'seeds'}")
    return specs


def markdown(results, command):
    """The results as a Markdown page."""
    lines = ["# Replay fidelity on real programs", "",
             f"`{command}` (trestle-cc -O2 -g; record, carve, `replay --check`; 2 cores).", "",
             "Each program's seeds are recorded twice; what the two recordings of a call disagree on "
             "is left out of that unit's comparison (`replay --twin`), and the units faithful only "
             "so are counted under *nondeterministic*.", "",
             "| program | seeds | units | faithful | share | nondeterministic | no oracle | errors | called, not carved "
             "| calls over the size bound | record | carve | replay |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        s = r["seconds"]
        lines.append(f"| {r['program']} | {r['seeds']} | {r['units']} | {r['faithful']} | "
                     f"{100 * r['fidelity']:.1f}% | {r.get('nondeterministic', 0)} | {r['no_oracle']} | {r['errors']} | {len(r['not_carved'])} | "
                     f"{r['over_bound']} | "
                     f"{s['record']} s | {s['carve']} s | {s['replay']} s |")
    for r in results:
        lines += ["", f"## {r['program']}", ""]
        if r["reasons"]:
            lines.append("Top reasons for the units that are not faithful:")
            lines.append("")
            lines += [f"- {n} × {why}" for why, n in r["reasons"]]
            lines.append("")
            lines.append("Functions with the most: " + ", ".join(f"`{f}` ({n})" for f, n in r["unfaithful_functions"]))
        else:
            lines.append("Every unit with a recorded outcome replays faithfully.")
        if r["not_carved"]:
            lines += ["", "Called but not carved, with the reason:", ""]
            lines += [f"- {row}" for row in r["not_carved"]]
        else:
            lines += ["", "Every called function was carved."]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trestle", default="target/release/trestle", type=Path)
    ap.add_argument("--program", action="append", default=[],
                    help="NAME=BINARY:SEEDS (repeatable)")
    ap.add_argument("--suite", action="store_true",
                    help="build and measure sed, bc, dc, the unseen programs (" + ", ".join(UNSEEN) + ") and the bundled C++ subjects")
    ap.add_argument("--markdown", type=Path, help="also write the results as a Markdown table here")
    ap.add_argument("--out", type=Path, help="work directory (kept); default: a temporary one")
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--once", action="store_true",
                    help="record the seeds once: no twin recording, so nondeterminism is not measured")
    args = ap.parse_args()
    work = args.out or Path(tempfile.mkdtemp(prefix="trestle-fidelity-"))
    work.mkdir(parents=True, exist_ok=True)
    specs = list(args.program)
    if args.suite:
        specs += build_suite(args.trestle, work)
    if not specs:
        ap.error("nothing to measure: give --program or --suite")
    results = []
    for spec in specs:
        name, rest = spec.split("=", 1)
        program, seeds = rest.split(":", 1)
        r = measure(args.trestle, name, Path(program), Path(seeds), work, args.top, twice=not args.once)
        results.append(r)
        if not args.json:
            print_result(r)
    if args.json:
        print(json.dumps(results, indent=2))
    if args.markdown:
        command = "python3 bench/fidelity.py " + " ".join(sys.argv[1:])
        args.markdown.write_text(markdown(results, command))
    if not args.out:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Figures of a capture of a real program's own test suite (tests/sed/capture-sed.sh,
tests/coreutils/capture-cut.sh): how many captured tests replay the same way, and how
many functions carving from them gives units of beside the hand-written seeds.

    capture-figures.py PROGRAM WORK [--more-functions]

WORK holds captured/ (trestle capture), captured-units/ and units/ (carved from the
captured tests and from the seeds). Fails when under 90% replay the same or, with
--more-functions, when the captured tests do not carve more functions than the seeds.
"""
import json, sys

prog, work = sys.argv[1], sys.argv[2]
more = "--more-functions" in sys.argv[3:]
cap = json.load(open(f"{work}/captured/capture.json"))
found = [p for p in cap["programs"] if p["name"] == prog]
if not found:
    print(f"FAIL: no test of {prog} captured")
    sys.exit(1)
p = found[0]
share = p["faithful"] / max(p["written"], 1)


def functions(d):
    return len({u["fn_id"] for u in json.load(open(f"{d}/index.json"))["units"]})


captured, seeds = functions(f"{work}/captured-units"), functions(f"{work}/units")
print(f"{prog}: {p['processes']} runs captured, {p['written']} tests, {p['faithful']} replay the same "
      f"({100 * share:.1f}%); units of {captured} functions from them, {seeds} from the hand-written seeds")
for why, n in p.get("unfaithful", {}).items():
    print(f"  {n} {why}")
ok = True
if share < 0.90:
    print(f"FAIL: {100 * share:.1f}% replay the same, want at least 90%")
    ok = False
if more and captured <= seeds:
    print(f"FAIL: the captured tests carve {captured} functions, the seeds {seeds}")
    ok = False
print(f"capture-{prog}: " + ("ok" if ok else "FAILED"))
sys.exit(0 if ok else 1)

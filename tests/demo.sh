#!/usr/bin/env bash
# trestle's main job on the bundled planted-bug subject `tally`: one bridge campaign
# (`trestle run`: system fuzzing, roadblocks, carving, unit fuzzing, lifting,
# validation), the system-only baseline with the same budget and seeds, the report
# comparing them, and both results side by side.
#
# tally's bug sits behind a 16-bit digest: only many tries reach it, and every run of
# the program first builds a table for a tenth of a second. The system fuzzer stalls
# at that branch (a roadblock); the bridge fuzzes the unit one call away from it at the
# function's own speed, lifts the word it finds into the input, and the plain build
# crashes on it.
#
# usage: bash tests/demo.sh [WORK_DIR] (TRESTLE_DEMO_TIME=90s by default)
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/setup.sh
work="${1:-$(mktemp -d /tmp/trestle-demo.XXXXXX)}"
budget="${TRESTLE_DEMO_TIME:-90s}"
mkdir -p "$work"
rm -rf "$work/bridge" "$work/system-only"
B="$TRESTLE_BIN"
src=tests/subjects/tally/tally.c
seeds=tests/subjects/tally/seeds
set -x
"$B/trestle-cc" -O2 -g "$src" -o "$work/tally"
clang-19 -O2 -g "$src" -o "$work/tally-plain"
"$B/trestle" run --program "$work/tally" --seeds "$seeds" \
    --validate-with "$work/tally-plain" --time "$budget" --out "$work/bridge"
"$B/trestle" run --program "$work/tally" --seeds "$seeds" \
    --validate-with "$work/tally-plain" --time "$budget" --out "$work/system-only" --system-only
"$B/trestle" report "$work/bridge" --baseline "$work/system-only"
set +x
python3 - "$work" <<'PY'
import json, sys, pathlib
work = pathlib.Path(sys.argv[1])
def side(name):
    d = work / name
    c = json.loads((d / "campaign.json").read_text())
    alarms = json.loads((d / "alarms.json").read_text())["alarms"]
    found = ", ".join(f"{a['signature']} at {a['found_at']:.0f}s (from {a['source']})" for a in alarms) or "none"
    r = c.get("roadblocks", {})
    solved = sum(1 for a in r.get("attempts", []) if a.get("solved_at") is not None)
    return [
        f"{c['system_executions']} system / {c['unit_executions']} unit executions",
        f"alarms: {len(alarms)}: {found}",
        f"roadblocks: {r.get('seen', 0)} seen, {len(r.get('attempts', []))} attempted, {solved} solved" if name == "bridge" else "roadblocks: (not used)",
    ]
print()
for name in ("bridge", "system-only"):
    print(f"{name:>12}: " + "\n              ".join(side(name)))
PY
echo
for s in "$work"/bridge/alarms/*/summary.md; do [ -e "$s" ] && cat "$s"; done
echo
echo "alarms: $work/bridge/alarms.json; report: $work/bridge/report.html (and report.md)"

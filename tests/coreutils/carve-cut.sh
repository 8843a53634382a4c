#!/usr/bin/env bash
# Carve GNU coreutils 9.1 `cut` out of its seed system tests and check the figures:
# at least 50 distinct functions carved and at least 90% of carved units replaying
# faithfully. Downloads and builds cut with trestle-cc (tests/coreutils/build.sh).
#
#   tests/coreutils/carve-cut.sh [WORK_DIR]
#
# Uses the tools in $TRESTLE_BIN (default target/release); prints the figures and
# leaves traces, units and replay.json in WORK_DIR.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
B="${TRESTLE_BIN:-$repo/target/release}"
work="${1:-$(mktemp -d /tmp/trestle-cut.XXXXXX)}"
mkdir -p "$work"
for t in trestle trestle-cc; do
  [ -x "$B/$t" ] || { echo "carve-cut: $B/$t is missing; run cargo build --workspace --release" >&2; exit 1; }
done
if [ ! -x "$work/build/bin/cut" ]; then
  bash "$repo/tests/coreutils/build.sh" --cc "$B/trestle-cc" --out "$work/build"
fi
rm -rf "$work/traces" "$work/units"
"$B/trestle" record --program "$work/build/bin/cut" --tests "$repo/tests/coreutils/cut/seeds" --out "$work/traces"
"$B/trestle" carve "$work/traces" --out "$work/units"
# Exit status 1 means some unit is not faithful: the share is judged below.
status=0
"$B/trestle" replay "$work/units" --check --json > "$work/replay.json" || status=$?
[ "$status" -le 1 ] || { echo "carve-cut: replay failed (exit status $status)" >&2; exit 1; }
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
index = json.load(open(f"{work}/units/index.json"))
replay = json.load(open(f"{work}/replay.json"))
functions = len({u["fn_id"] for u in index["units"]})
fid = replay["fidelity"]
print(f"cut: {len(index['units'])} units of {functions} functions "
      f"({index['called_functions']} called); {replay['faithful']} faithful, "
      f"{replay['no_oracle']} without oracle, {replay['errors']} errors: fidelity {100*fid:.1f}%")
for f in replay["functions"]:
    if f["faithful"] < f["units"]:
        print(f"  {f['name']}: {f['faithful']}/{f['units']}")
ok = True
if functions < 50:
    print(f"FAIL: {functions} distinct functions carved, want at least 50"); ok = False
if fid < 0.90:
    print(f"FAIL: fidelity {100*fid:.1f}%, want at least 90%"); ok = False
print("carve-cut: " + ("ok" if ok else "FAILED"))
sys.exit(0 if ok else 1)
PY

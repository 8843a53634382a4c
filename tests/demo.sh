#!/usr/bin/env bash
# trestle's main job on the bundled `linked` subject: build it with trestle-cc,
# record its seed system tests, carve unit tests out of them, replay every unit and
# check it against the recording.
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/setup.sh
work="${1:-$(mktemp -d /tmp/trestle-demo.XXXXXX)}"
mkdir -p "$work"
B="$TRESTLE_BIN"
set -x
"$B/trestle-cc" -O2 tests/subjects/linked/linked.c -o "$work/linked"
"$B/trestle" record --program "$work/linked" --tests tests/subjects/linked/seeds --out "$work/traces"
"$B/trestle" carve "$work/traces" --out "$work/units"
"$B/trestle" show "$(ls "$work"/units/tree_insert/*.unit | head -1)"
"$B/trestle" replay "$work/units" --check
# Map and fuzz: the planted magic integer of the requests subject, found at unit level.
"$B/trestle-cc" -O2 -g tests/subjects/requests/requests.c -o "$work/requests"
"$B/trestle" record --program "$work/requests" --tests tests/subjects/requests/seeds --out "$work/rtraces"
"$B/trestle" carve "$work/rtraces" --out "$work/runits"
unit="$(python3 -c 'import json,sys; i=json.load(open(sys.argv[1])); print(next(r["file"] for r in i["units"] if r["function"]=="store_value" and r["params"]>=2))' "$work/runits/index.json")"
"$B/trestle" show "$work/runits/$unit"
"$B/trestle" fuzz "$work/runits/$unit" --time 60s --out "$work/fuzz" --stop-on-crash
cat "$work"/fuzz/crashes/*.json
# Lift and validate: the crash goes back into the system test and the real program,
# built without trestle (here for coverage), confirms it in a sandbox.
clang-19 -O1 -g -fprofile-instr-generate -fcoverage-mapping tests/subjects/requests/requests.c -o "$work/requests-cov"
"$B/trestle" lift "$work/fuzz" --program "$work/requests-cov" --seeds tests/subjects/requests/seeds --out "$work/lift"
cat "$work"/lift/alarms/*/summary.md

#!/usr/bin/env bash
# trestle's main job on the bundled planted-bug subject `requests`: one campaign
# (`trestle run`: system fuzzing, carving, unit fuzzing, lifting, validation), the
# system-only baseline with the same budget, and the report comparing them.
#
# usage: bash tests/demo.sh [WORK_DIR] (TRESTLE_DEMO_TIME=3m by default)
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/setup.sh
work="${1:-$(mktemp -d /tmp/trestle-demo.XXXXXX)}"
budget="${TRESTLE_DEMO_TIME:-3m}"
mkdir -p "$work"
rm -rf "$work/campaign" "$work/system-only"
B="$TRESTLE_BIN"
set -x
# The program built with trestle-cc (carving, unit harness, system coverage), and
# built plainly for validation: alarms are confirmed on what users run.
"$B/trestle-cc" -O2 -g tests/subjects/requests/requests.c -o "$work/requests"
clang-19 -O2 -g tests/subjects/requests/requests.c -o "$work/requests-plain"
"$B/trestle" run --program "$work/requests" --seeds tests/subjects/requests/seeds \
    --validate-with "$work/requests-plain" --time "$budget" --out "$work/campaign"
"$B/trestle" run --program "$work/requests" --seeds tests/subjects/requests/seeds \
    --validate-with "$work/requests-plain" --time "$budget" --out "$work/system-only" --system-only
"$B/trestle" report "$work/campaign" --baseline "$work/system-only"
set +x
cat "$work"/campaign/alarms/*/summary.md
echo
echo "alarms: $work/campaign/alarms.json; report: $work/campaign/report.html (and report.md)"

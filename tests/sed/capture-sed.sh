#!/usr/bin/env bash
# Capture GNU sed 4.9's own testsuite (`make check`, run by bench/capture/sed-suite.sh)
# with `trestle capture`, and check the figures: at least 90% of the captured tests
# replay with the same exit status and stdout through trestle's executor, and carving
# from them gives units of more functions than carving from the hand-written seeds
# (tests/sed/seeds).
#
#   tests/sed/capture-sed.sh [WORK_DIR]
#
# Downloads and builds sed with trestle-cc (bench/capture/build.sh) unless WORK_DIR
# holds that build. Uses the tools in $TRESTLE_BIN (default target/release).
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
B="${TRESTLE_BIN:-$repo/target/release}"
work="${1:-$(mktemp -d /tmp/trestle-sed.XXXXXX)}"
mkdir -p "$work"
for t in trestle trestle-cc; do
  [ -x "$B/$t" ] || { echo "capture-sed: $B/$t is missing; run cargo build --workspace --release" >&2; exit 1; }
done
tree="$work/build/sed-4.9-build"
if [ ! -x "$tree/testsuite/test-mbrtowc" ]; then
  bash "$repo/bench/capture/build.sh" --cc "$B/trestle-cc" --out "$work/build" --program sed
fi
rm -rf "$work/captured" "$work/captured-traces" "$work/captured-units" "$work/traces" "$work/units"
"$B/trestle" capture --out "$work/captured" -- bash "$repo/bench/capture/sed-suite.sh" --build "$work/build" \
  > "$work/capture.txt" 2> "$work/capture.log" || { tail -n 30 "$work/capture.log" >&2; exit 1; }
cat "$work/capture.txt"
"$B/trestle" record --program "$tree/sed/sed" --tests "$work/captured/sed" --out "$work/captured-traces" >/dev/null
"$B/trestle" carve "$work/captured-traces" --out "$work/captured-units" >/dev/null
"$B/trestle" record --program "$tree/sed/sed" --tests "$repo/tests/sed/seeds" --out "$work/traces" >/dev/null
"$B/trestle" carve "$work/traces" --out "$work/units" >/dev/null
python3 "$repo/tests/capture-figures.py" sed "$work" --more-functions

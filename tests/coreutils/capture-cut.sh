#!/usr/bin/env bash
# Capture GNU coreutils 9.1 cut's own tests (tests/misc/cut.pl and four more, run by
# bench/capture/cut-suite.sh) with `trestle capture`, and check that at least 90% of
# the captured tests replay with the same exit status and stdout through trestle's
# executor. Prints how many functions carving from them gives units of, beside the
# hand-written seeds' count (tests/coreutils/cut/seeds): cut's own tests exercise its
# options, not the error paths the seeds were written for, and reach fewer functions
# (39 against 56 when measured), so that is no check. All 16 functions (by name) only the seeds
# reach are gnulib's quoting and locale code (quote, quotearg_*, gettext_quote,
# locale_charset, rpl_mbrtowc, ...): cut quotes an argument only in an error about
# it (`-c 2,x`, a missing file, a directory), and none of cut.pl's cases names a bad
# value or file; its multibyte variants run only where configure finds a French
# UTF-8 locale (LOCALE_FR_UTF8), which this machine lacks.
#
#   tests/coreutils/capture-cut.sh [WORK_DIR]
#
# WORK_DIR may be carve-cut.sh's: its build and its units of the seeds are reused.
# Uses the tools in $TRESTLE_BIN (default target/release).
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
B="${TRESTLE_BIN:-$repo/target/release}"
work="${1:-$(mktemp -d /tmp/trestle-cut.XXXXXX)}"
mkdir -p "$work"
for t in trestle trestle-cc; do
  [ -x "$B/$t" ] || { echo "capture-cut: $B/$t is missing; run cargo build --workspace --release" >&2; exit 1; }
done
if [ ! -x "$work/build/bin/cut" ]; then
  bash "$repo/tests/coreutils/build.sh" --cc "$B/trestle-cc" --out "$work/build"
fi
tree="$work/build/coreutils-9.1-build"
[ -x "$tree/src/getlimits" ] || make -C "$tree" src/getlimits >"$work/getlimits.log" 2>&1 \
  || { tail -n 20 "$work/getlimits.log" >&2; exit 1; }
rm -rf "$work/captured" "$work/captured-traces" "$work/captured-units"
# The suite's own verdict is not ours to judge here: what it ran is captured either way.
"$B/trestle" capture --out "$work/captured" -- bash "$repo/bench/capture/cut-suite.sh" --build "$work/build" \
  > "$work/capture.txt" 2> "$work/capture.log" || { tail -n 30 "$work/capture.log" >&2; exit 1; }
cat "$work/capture.txt"
"$B/trestle" record --program "$tree/src/cut" --tests "$work/captured/cut" --out "$work/captured-traces" >/dev/null
"$B/trestle" carve "$work/captured-traces" --out "$work/captured-units" >/dev/null
if [ ! -e "$work/units/index.json" ]; then
  rm -rf "$work/traces"
  "$B/trestle" record --program "$work/build/bin/cut" --tests "$repo/tests/coreutils/cut/seeds" --out "$work/traces" >/dev/null
  "$B/trestle" carve "$work/traces" --out "$work/units" >/dev/null
fi
python3 "$repo/tests/capture-figures.py" cut "$work"

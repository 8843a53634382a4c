#!/usr/bin/env bash
# Run system-test seeds (JSON) against a program binary.
#
# usage: run-seeds.sh [-v] BIN SEEDS_DIR
#
# A thin wrapper over `trestle exec`, so that seeds run exactly as trestle runs
# them: for each SEEDS_DIR/*.json a fresh directory holding the seed's "files",
# BIN run there with the seed's "args" and "stdin" (empty if absent), environment
# PATH=/usr/bin:/bin plus the seed's "env", 10 s at most; a trestle-cc build is
# forked from its forkserver. Prints one line per seed:
#   NAME  exit=N  stdout=NB  stderr=NB  wall=MSms cpu=MSms rss=KIBKiB  [forkserver]
# (signal=N (SIGNAME) or timeout instead of exit=N). With -v also prints stdout
# and stderr. Exits 1 if a seed could not be run (bad JSON, timeout, killed by a
# signal), else 0; a non-zero exit status of BIN is reported, not treated as a
# failure. trestle: $TRESTLE, else target/release/trestle of this checkout, else
# `trestle` on PATH.
set -euo pipefail
SHOW=()
if [ "${1:-}" = "-v" ]; then SHOW=(--show-output); shift; fi
if [ $# -ne 2 ]; then
    sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
repo=$(cd "$(dirname "$0")/../.." && pwd)
trestle=${TRESTLE:-$repo/target/release/trestle}
[ -x "$trestle" ] || trestle=$(command -v trestle) || { echo "run-seeds: trestle not found (build it: cargo build --release)" >&2; exit 1; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# trestle runs the program with its own environment: only PATH, as the seeds expect.
status=0
env -i PATH=/usr/bin:/bin "$trestle" exec --program "$1" "$2" "${SHOW[@]}" | tee "$log" || status=1
# Seed lines start in the first column, shown output is indented.
if grep -qE '^[^ ].*  (signal=|timeout)' "$log"; then status=1; fi
exit $status

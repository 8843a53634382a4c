#!/bin/bash
# Two builds of trestle's system fuzzer side by side, one core each, same seeds and
# random seed per repetition: executions per second, executions, edges and queue size
# after SECS of `trestle sysfuzz` (CmpLog on, as campaigns run it).
#
#   bash bench/sysfuzz_ab.sh OLD_TRESTLE NEW_TRESTLE PROGRAM SEEDS SECS REPS [OUT]
#
# OLD_TRESTLE/NEW_TRESTLE: two `trestle` binaries (a worktree of the old commit built
# with its own CARGO_TARGET_DIR, say); PROGRAM: a trestle-cc build of the subject.
# One line per run: build rep execs/s execs edges queue; appended to OUT (default
# sysfuzz-ab.txt).
set -euo pipefail
[ $# -ge 6 ] || { sed -n 2,11p "$0"; exit 2; }
OLD=$1 NEW=$2 PROG=$3 SEEDS=$4 SECS=$5 REPS=$6 OUT=${7:-sysfuzz-ab.txt}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for r in $(seq 1 "$REPS"); do
  for b in old new; do
    bin=$OLD; [ $b = new ] && bin=$NEW
    "$bin" sysfuzz --program "$PROG" --seeds "$SEEDS" --time "${SECS}s" --out "$work/$b-$r" --json --seed "$r" > "$work/$b-$r.json" 2> "$work/$b-$r.err" &
  done
  wait
  for b in old new; do
    python3 - "$work/$b-$r.json" "$b" "$r" >> "$OUT" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(sys.argv[2], sys.argv[3], round(d["execs_per_sec"]), d["executions"], d["edges"], d["queue"])
PY
  done
  rm -rf "$work"/old-"$r" "$work"/new-"$r"
done
cat "$OUT"

#!/usr/bin/env bash
# Run GNU coreutils 9.1's own tests of cut against a build made by
# bench/capture/build.sh --program cut.
#
# usage: cut-suite.sh --build DIR [MAKE-ARGS...]
#   DIR is build.sh's --out. MAKE-ARGS go to make, e.g. TESTS=tests/misc/cut.pl.
#
# Runs, in DIR/coreutils-9.1-build, automake's harness on five tests:
#   tests/misc/cut.pl (cut's own: 114 cases, those with one input also run as
#   `cut ... < in` and `cat in | cut ...`: 326 runs), tests/misc/cut-huge-range.sh,
#   and, with built_programs=cut, the per-program tests help-version.sh,
#   invalid-opt.pl, usage_vs_getopt.sh (--help/--version, >/dev/full, bad options).
# It uses `make check-TESTS` with PROGRAMS='src/cut src/getlimits', not `make check`:
# check would build all 107 programs, their man pages and gnulib-tests
# (coreutils makes every test log depend on $(PROGRAMS)). The tests find
# DIR/coreutils-9.1-build/src/cut first on PATH (harness and init.sh both prepend src/).
#
# Measured here (2 cores, bookworm, root, trestle-cc build): 1.8-2.3 s wall;
# TOTAL 5, PASS 4, SKIP 1, FAIL 0; cut is executed 354 times. The SKIP is cut-huge-range.sh: it probes for an
# `ulimit -v` of at most 50 MB under which `cut -b1 /dev/null` runs, and a
# trestle-cc cut needs ~62 MB of address space (below ~57 MB it segfaults), so it
# reports "this shell lacks ulimit support".
set -euo pipefail
[ "${1:-}" = --build ] && [ $# -ge 2 ] || { sed -n 5,6p "$0" | sed 's/^# //' >&2; exit 2; }
B="$(cd "$2" && pwd)/coreutils-9.1-build"; shift 2
for p in cut getlimits; do
    [ -x "$B/src/$p" ] || { echo "cut-suite.sh: no $B/src/$p (run build.sh --program cut)" >&2; exit 2; }
done
cd "$B"
make check-TESTS SUBDIRS=. VERBOSE=yes PROGRAMS='src/cut src/getlimits' built_programs=cut \
    TESTS='tests/misc/cut.pl tests/misc/cut-huge-range.sh tests/misc/help-version.sh tests/misc/invalid-opt.pl tests/misc/usage_vs_getopt.sh' \
    "$@"

#!/usr/bin/env bash
# Build sed 4.9 or coreutils 9.1's cut with COMPILER, plus what its own test suite
# needs, for bench/capture/sed-suite.sh / cut-suite.sh.
#
# usage: build.sh --cc COMPILER --out DIR --program sed|cut
#
# Calls tests/sed/build.sh or tests/coreutils/build.sh (which make only sed/sed or
# src/cut), then in the build tree:
# - sed: `make all SUBDIRS=.` and the suite's two helper programs (testsuite/
#   get-mb-cur-max, test-mbrtowc), so `make check` compiles nothing (all also
#   regenerates doc/sed.1 with help2man, which runs the new sed); and generates the
#   locales the multibyte tests look for (en_US.UTF-8, ru_RU.UTF-8, el_GR.iso88597,
#   ja_JP.sjis, ja_JP.eucjp; localedef, ~8 s, needs root; 7 tests SKIP without).
# - cut: src/getlimits (tests/misc/cut-huge-range.sh calls it).
# The helpers are compiled with COMPILER too. Don't run two of these at once the
# first time: both would add the deb-src entry at the same moment.
set -euo pipefail
CC_ARG="" OUT="" PROG=""
while [ $# -gt 0 ]; do
    case "$1" in
        --cc) CC_ARG="${2:-}"; shift $(($# > 1 ? 2 : 1)) ;;
        --out) OUT="${2:-}"; shift $(($# > 1 ? 2 : 1)) ;;
        --program) PROG="${2:-}"; shift $(($# > 1 ? 2 : 1)) ;;
        *) sed -n 5p "$0" | sed 's/^# //' >&2; exit 2 ;;
    esac
done
[ -n "$CC_ARG" ] && [ -n "$OUT" ] && [[ "$PROG" =~ ^(sed|cut)$ ]] || { sed -n 5p "$0" | sed 's/^# //' >&2; exit 2; }
TESTS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../tests" && pwd)"
JOBS="${TRESTLE_JOBS:-$(nproc)}"

if [ "$PROG" = sed ]; then
    bash "$TESTS_DIR/sed/build.sh" --cc "$CC_ARG" --out "$OUT"
    cd "$OUT/sed-4.9-build"
    echo "== make all SUBDIRS=. and the testsuite helpers" >&2
    make -j"$JOBS" all SUBDIRS=. testsuite/get-mb-cur-max testsuite/test-mbrtowc >trestle-make-check.log 2>&1 \
        || { tail -n 30 trestle-make-check.log >&2; exit 1; }
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
    [ -e /usr/share/i18n/locales/ja_JP ] || { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq locales >/dev/null; } \
        || echo "build.sh: could not install the locales package (the multibyte tests will SKIP)" >&2
    have="$(locale -a 2>/dev/null)"
    for l in en_US:UTF-8:en_US.utf8 ru_RU:UTF-8:ru_RU.utf8 el_GR:ISO-8859-7:el_GR.iso88597 \
             ja_JP:SHIFT_JIS:ja_JP.sjis ja_JP:EUC-JP:ja_JP.eucjp; do
        IFS=: read -r src cmap name <<<"$l"
        grep -qx "$name" <<<"$have" && continue
        echo "== localedef $name" >&2
        # SHIFT_JIS is not ASCII-compatible: localedef warns and exits 1, but makes it
        $SUDO localedef -i "$src" -f "$cmap" "$name" 2>/dev/null || locale -a | grep -qx "$name" \
            || echo "build.sh: could not make locale $name (its tests will SKIP)" >&2
    done
else
    bash "$TESTS_DIR/coreutils/build.sh" --cc "$CC_ARG" --out "$OUT" --prog cut
    cd "$OUT/coreutils-9.1-build"
    echo "== make src/getlimits" >&2
    make -j"$JOBS" src/getlimits >trestle-make-check.log 2>&1 || { tail -n 30 trestle-make-check.log >&2; exit 1; }
fi
echo "== built $PROG's test tree in $(pwd)" >&2

#!/usr/bin/env bash
# Build GNU sed 4.9 with a given C compiler.
#
# usage: build.sh --cc COMPILER --out DIR [--cflags "..."] [--system-regex]
#
# The upstream source (sed_4.9.orig.tar.xz from Debian bookworm's source
# package sed 4.9-1, hash-checked by apt and against a pinned SHA-256) is
# downloaded once and kept unpacked in $TRESTLE_CACHE/sed-4.9-src
# (TRESTLE_CACHE defaults to ~/.cache/trestle). Each build copies it to a fresh
# DIR/sed-4.9-build, configures it with CC=COMPILER, builds only sed/sed and
# copies it to DIR/bin/sed.
#
# By default sed is built with gnulib's included regex matcher (so regcomp/
# re_search are compiled by COMPILER too); --system-regex uses glibc's, as
# Debian's package does.
set -euo pipefail

VERSION=4.9
# bookworm had 4.9-1 at release; a point release replaced it by 4.9-1+deb12u1
# (a Debian patch only: the upstream tarball is the same file).
DEB_VERSIONS=(4.9-1 4.9-1+deb12u1)
ORIG_SHA256=6e226b732e1cd739464ad6862bd1a1aba42d7982922da7a53519631d24975181
CACHE="${TRESTLE_CACHE:-${HOME:-/root}/.cache/trestle}/sed-${VERSION}-src"

STEP="startup"
die() { echo "build.sh: error in step '$STEP': $*" >&2; exit 1; }
trap 'rc=$?; if [ $rc -ne 0 ]; then echo "build.sh: FAILED in step: $STEP (exit $rc)" >&2; fi' EXIT
step() { STEP="$1"; echo "== [${SECONDS}s] $1" >&2; }

usage() {
    trap - EXIT
    sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

CC_ARG=""
OUT=""
CFLAGS_ARG="-O2 -g"
REGEX_OPT="--with-included-regex"
while [ $# -gt 0 ]; do
    case "$1" in
        --cc) [ $# -ge 2 ] || usage; CC_ARG="$2"; shift 2 ;;
        --cc=*) CC_ARG="${1#--cc=}"; shift ;;
        --out) [ $# -ge 2 ] || usage; OUT="$2"; shift 2 ;;
        --out=*) OUT="${1#--out=}"; shift ;;
        --cflags) [ $# -ge 2 ] || usage; CFLAGS_ARG="$2"; shift 2 ;;
        --cflags=*) CFLAGS_ARG="${1#--cflags=}"; shift ;;
        --system-regex) REGEX_OPT="--without-included-regex"; shift ;;
        -h|--help) usage ;;
        *) echo "build.sh: unknown argument: $1" >&2; usage ;;
    esac
done
[ -n "$CC_ARG" ] || { echo "build.sh: --cc is required" >&2; usage; }
[ -n "$OUT" ] || { echo "build.sh: --out is required" >&2; usage; }

source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../debian-source.sh"
resolve_compiler
install_build_tools

# ---------------------------------------------------------------------------
fetch_source() {
    enable_deb_src tests/sed/build.sh

    step "download sed ${DEB_VERSIONS[0]} source package"
    local parent tmp
    parent="$(dirname "$CACHE")"
    mkdir -p "$parent" || die "cannot create cache dir $parent"
    tmp="$(mktemp -d "$parent/.sed-dl.XXXXXX")"
    # --download-only: we unpack the pristine upstream tarball ourselves,
    # without the Debian patches (and without needing dpkg-source).
    # Try the pinned versions, then whatever bookworm has; if all fail the
    # package lists may be stale, so update once and try again.
    local ok=0 try v
    for try in 1 2; do
        for v in "${DEB_VERSIONS[@]}" ""; do
            if (cd "$tmp" && apt-get source --download-only -qq "sed${v:+=$v}" >&2 2>"$tmp/.apt-err"); then
                echo "downloaded source package sed=${v:-(current bookworm version)}" >&2
                ok=1; break 2
            fi
        done
        [ $try -eq 1 ] && { APT_UPDATED=0; apt_update; }
    done
    [ $ok -eq 1 ] || { cat "$tmp/.apt-err" >&2; rm -rf "$tmp"; die "apt-get source sed failed (deb-src entry or network missing?)"; }
    local orig="$tmp/sed_$VERSION.orig.tar.xz"
    [ -f "$orig" ] || { ls -l "$tmp" >&2; rm -rf "$tmp"; die "no sed_$VERSION.orig.tar.xz downloaded (wrong version?)"; }
    echo "$ORIG_SHA256  $orig" | sha256sum -c --quiet - >&2 \
        || { rm -rf "$tmp"; die "sed_$VERSION.orig.tar.xz does not have the expected SHA-256"; }

    step "unpack sed $VERSION source into cache"
    tar -C "$tmp" -xf "$orig" || { rm -rf "$tmp"; die "cannot unpack $orig"; }
    [ -x "$tmp/sed-$VERSION/configure" ] || { rm -rf "$tmp"; die "unpacked tree has no configure"; }
    grep -q "^PACKAGE_VERSION='$VERSION'" "$tmp/sed-$VERSION/configure" \
        || { rm -rf "$tmp"; die "unpacked source is not sed $VERSION"; }
    touch "$tmp/sed-$VERSION/.trestle-complete"
    rm -rf "$CACHE"
    mv "$tmp/sed-$VERSION" "$CACHE" || die "cannot move source into $CACHE"
    rm -rf "$tmp"
}

if [ -f "$CACHE/.trestle-complete" ]; then
    echo "using cached source: $CACHE" >&2
else
    fetch_source
fi

# ---------------------------------------------------------------------------
step "copy source to build dir"
mkdir -p "$OUT" || die "cannot create $OUT"
OUT="$(cd "$OUT" && pwd)"
BUILD="$OUT/sed-$VERSION-build"
rm -rf "$BUILD"
# -a keeps timestamps, so make does not try to rerun autoconf/automake/makeinfo
cp -a "$CACHE" "$BUILD" || die "cannot copy $CACHE to $BUILD"
rm -f "$BUILD/.trestle-complete"

# ---------------------------------------------------------------------------
step "configure (CC=$CC_PATH)"
cd "$BUILD"
# --disable-dependency-tracking: faster one-shot builds.
# The --without/--disable options keep the build free of optional libraries
# (libselinux, libacl, gettext). FORCE_UNSAFE_CONFIGURE: harmless for sed,
# kept for gnulib checks that refuse to run as root.
# TRESTLE_CONFIG_CACHE=FILE (optional) shares configure results between builds
# with the SAME compiler and flags (the caller picks one file per compiler).
cache_opt=()
if [ -n "${TRESTLE_CONFIG_CACHE:-}" ]; then
    mkdir -p "$(dirname "$TRESTLE_CONFIG_CACHE")"
    cache_opt=(--cache-file="$(cd "$(dirname "$TRESTLE_CONFIG_CACHE")" && pwd)/$(basename "$TRESTLE_CONFIG_CACHE")")
fi
if ! FORCE_UNSAFE_CONFIGURE=1 ./configure --quiet "${cache_opt[@]}" \
        CC="$CC_PATH" CFLAGS="$CFLAGS_ARG" \
        --disable-nls --disable-rpath --disable-dependency-tracking \
        --disable-acl --without-selinux "$REGEX_OPT" \
        >"$BUILD/trestle-configure.log" 2>&1; then
    tail -n 30 "$BUILD/trestle-configure.log" >&2
    die "configure failed; see $BUILD/trestle-configure.log and $BUILD/config.log"
fi

# ---------------------------------------------------------------------------
JOBS="${TRESTLE_JOBS:-$(nproc 2>/dev/null || echo 2)}"
step "make sed/sed"
# Building only sed/sed (not 'all') skips the manual (makeinfo) and the man
# page. Targets other than all/check/install do not build BUILT_SOURCES
# (gnulib's replacement headers etc.), so build those first.
built_sources="$(make -s -f Makefile -f - print-built-sources <<'EOF' 2>/dev/null || true
print-built-sources:
	@echo $(BUILT_SOURCES)
EOF
)"
if ! { { [ -z "$built_sources" ] || make -j"$JOBS" $built_sources; } \
        && make -j"$JOBS" sed/sed; } >"$BUILD/trestle-make.log" 2>&1; then
    tail -n 40 "$BUILD/trestle-make.log" >&2
    die "make failed; see $BUILD/trestle-make.log"
fi

# ---------------------------------------------------------------------------
step "install binary to $OUT/bin"
[ -x sed/sed ] || die "sed/sed was not built"
mkdir -p "$OUT/bin"
cp -f sed/sed "$OUT/bin/sed"
echo "built $OUT/bin/sed" >&2
STEP="done"
echo "== [${SECONDS}s] done" >&2

#!/usr/bin/env bash
# Build GNU bc 1.07.1 (bc and dc) with a given C compiler.
#
# usage: build.sh --cc COMPILER --out DIR [--cflags "..."] [--ldflags "..."] [--patch FILE]...
#
# The upstream source (bc_1.07.1.orig.tar.gz from Debian bookworm's source
# package bc 1.07.1-3, hash-checked by apt and against a pinned SHA-256) is
# downloaded once and kept unpacked in $TRESTLE_CACHE/bc-1.07.1-src
# (TRESTLE_CACHE defaults to ~/.cache/trestle). Each build copies it to a fresh
# DIR/bc-1.07.1-build, configures it with CC=COMPILER (no readline, no
# libedit), builds only bc/bc and dc/dc and copies them to DIR/bin/.
#
# The tarball ships the generated parser and scanner (bc.c, scan.c), so no
# bison or flex is needed; bc's math library (libmath.h) is made at build time
# by running a first bc built with COMPILER, and the upstream helper that
# formats it uses ed, which is installed when missing.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../debian-source.sh"

PKG=bc
VERSION=1.07.1
# the source package of bookworm's bc 1.07.1-3+b1 (a binNMU) and dc
DEB_VERSIONS=(1.07.1-3)
ORIG=bc_$VERSION.orig.tar.gz
ORIG_SHA256=62adfca89b0a1c0164c2cdca59ca210c1d44c3ffc46daf9931cf4942664cb02a
CACHE="${TRESTLE_CACHE:-${HOME:-/root}/.cache/trestle}/bc-${VERSION}-src"

build_start "$@"

resolve_compiler
# bc/fix-libmath_h (run by make to format libmath.h) is an ed script
install_build_tools gzip:gzip ed:ed

fetch_upstream tests/bc/build.sh
copy_to_build
# --without-readline/--without-libedit (the defaults, made explicit) keep the build
# free of optional libraries; bc has no NLS. configure appends "-Wall
# -funsigned-char" to CFLAGS, as upstream's build does.
run_configure --disable-dependency-tracking --without-readline --without-libedit

# ---------------------------------------------------------------------------
step "make bc/bc and dc/dc"
# Only lib/libbc.a, bc/bc and dc/dc: not 'all', which would also make the
# info manuals (makeinfo). bc/libmath.h is made on its own and with -j1: its
# rule links and runs a first bc ("fbc") to compile libmath.b, and builds
# global.o through a recursive make (a dependency cycle that upstream relies
# on make to break).
if ! { make -C lib -j"$JOBS" libbc.a \
        && make -C bc -j1 libmath.h \
        && make -C bc -j"$JOBS" bc \
        && make -C dc -j"$JOBS" dc; } >"$BUILD/trestle-make.log" 2>&1; then
    tail -n 40 "$BUILD/trestle-make.log" >&2
    die "make failed; see $BUILD/trestle-make.log"
fi
grep -q '^{"' bc/libmath.h || die "bc/libmath.h was not generated (see $BUILD/trestle-make.log)"

install_programs bc/bc dc/dc

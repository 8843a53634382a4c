#!/usr/bin/env bash
# Build bzip2 1.0.8 (a compressor) with a given C compiler, for bench/fidelity.py.
#
# usage: build.sh --cc COMPILER --out DIR [--cflags "..."] [--ldflags "..."] [--patch FILE]...
#
# The upstream source (bzip2_1.0.8.orig.tar.gz from Debian bookworm's source
# package bzip2 1.0.8-5, hash-checked by apt and against a pinned SHA-256) is
# downloaded once and kept unpacked in $TRESTLE_CACHE/bzip2-1.0.8-src
# (TRESTLE_CACHE defaults to ~/.cache/trestle); it is never part of this
# repository. Each build copies it to a fresh DIR/bzip2-1.0.8-build, builds the
# bzip2 program (and libbz2.a, linked in statically) with upstream's plain
# Makefile, CC=COMPILER and CFLAGS (plus upstream's -D_FILE_OFFSET_BITS=64), and
# copies it to DIR/bin/bzip2.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../../tests/debian-source.sh"

PKG=bzip2
VERSION=1.0.8
DEB_VERSIONS=(1.0.8-5)
ORIG=bzip2_1.0.8.orig.tar.gz
ORIG_SHA256=ab5a03176ee106d3f0fa90e381da478ddae405918153cca248e682cd0c4a2269
CACHE="${TRESTLE_CACHE:-${HOME:-/root}/.cache/trestle}/bzip2-${VERSION}-src"

# A plain Makefile, no configure; bzlib_private.h says the version.
TREE_MARK=Makefile
VERSION_CHECK="bzlib_private.h:^#define BZ_VERSION  \"$VERSION,"

USAGE_LINES=5
build_start "$@"

resolve_compiler
install_build_tools gzip:gzip


fetch_upstream bench/bzip2/build.sh
copy_to_build

step "make bzip2 (CC=$CC_PATH)"
# Only the bzip2 program: 'all' would also run upstream's self-test and build
# bzip2recover. Upstream's CFLAGS are "-Wall -Winline -O2 -g $(BIGFILES)"; the
# given ones replace them, keeping the large-file define.
if ! make -j"$JOBS" bzip2 CC="$CC_PATH" CFLAGS="$CFLAGS_ARG -D_FILE_OFFSET_BITS=64" \
        LDFLAGS="$LDFLAGS_ARG" >"$BUILD/trestle-make.log" 2>&1; then
    tail -n 40 "$BUILD/trestle-make.log" >&2
    die "make failed; see $BUILD/trestle-make.log"
fi
install_programs bzip2

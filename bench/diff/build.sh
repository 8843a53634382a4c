#!/usr/bin/env bash
# Build GNU diff from diffutils 3.8 with a given C compiler (a text-comparison tool
# none of trestle's tests was written against, for bench/fidelity.py).
#
# usage: build.sh --cc COMPILER --out DIR [--cflags "..."] [--ldflags "..."] [--patch FILE]...
#
# The upstream source (diffutils_3.8.orig.tar.xz from Debian bookworm's source
# package diffutils 1:3.8-4, hash-checked by apt and against a pinned SHA-256) is
# downloaded once and kept unpacked in $TRESTLE_CACHE/diffutils-3.8-src
# (TRESTLE_CACHE defaults to ~/.cache/trestle); it is never part of this
# repository. Each build copies it to a fresh DIR/diffutils-3.8-build, configures it
# with CC=COMPILER, builds gnulib's lib/ and src/diff and copies it to DIR/bin/diff.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../../tests/debian-source.sh"

PKG=diffutils
VERSION=3.8
DEB_VERSIONS=(1:3.8-4)
ORIG=diffutils_$VERSION.orig.tar.xz
ORIG_SHA256=a6bdd7d1b31266d11c4f4de6c1b748d4607ab0231af5188fc2533d0ae2438fec
CACHE="${TRESTLE_CACHE:-${HOME:-/root}/.cache/trestle}/diffutils-${VERSION}-src"

USAGE_LINES=5
build_start "$@"

resolve_compiler
install_build_tools

fetch_upstream bench/diff/build.sh
copy_to_build
run_configure --disable-nls --disable-dependency-tracking
# gnulib's library first (its replacement headers are built sources of lib/), then
# only the program: not cmp, sdiff, diff3 nor the manuals.
cd lib
make_programs
cd "$BUILD/src"
make_programs diff
cd "$BUILD"
install_programs src/diff

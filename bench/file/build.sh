#!/usr/bin/env bash
# Build file 5.44 (the file(1) command and its libmagic, linked in statically) with a
# given C compiler: a program none of trestle's tests was written against, for
# bench/fidelity.py --suite. libmagic compiles many of its tests with the C library's
# regcomp, whose automata a context holds.
#
# usage: build.sh --cc COMPILER --out DIR [--cflags "..."] [--ldflags "..."] [--patch FILE]...
#
# The upstream source (file_5.44.orig.tar.gz from Debian bookworm's source package
# file 1:5.44-3, hash-checked by apt and against a pinned SHA-256) is downloaded once
# and kept unpacked in $TRESTLE_CACHE/file-5.44-src (TRESTLE_CACHE defaults to
# ~/.cache/trestle); it is never part of this repository. Each build copies it to a
# fresh DIR/file-5.44-build, configures it with CC=COMPILER and the prefix DIR (so the
# program looks for its database in DIR/share/misc), builds libmagic, file and the
# compiled database, and copies file to DIR/bin/file and magic.mgc to DIR/share/misc.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../../tests/debian-source.sh"

PKG=file
VERSION=5.44
DEB_VERSIONS=(1:5.44-3)
ORIG=file_5.44.orig.tar.gz
ORIG_SHA256=3751c7fba8dbc831cb8d7cc8aff21035459b8ce5155ef8b0880a27d028475f3b
CACHE="${TRESTLE_CACHE:-${HOME:-/root}/.cache/trestle}/file-${VERSION}-src"

USAGE_LINES=5
build_start "$@"

resolve_compiler
install_build_tools

fetch_upstream bench/file/build.sh
copy_to_build
# No compression libraries and no seccomp: the program reads only the files it is
# given, and one static binary carries libmagic.
run_configure --prefix="$OUT" --disable-shared --disable-libseccomp --disable-zlib \
    --disable-bzlib --disable-xzlib --disable-zstdlib --disable-lzlib
# The database is compiled by the file just built, so the whole tree is made.
make_programs all
step "install the compiled database to $OUT/share/misc"
mkdir -p "$OUT/share/misc"
cp -f magic/magic.mgc "$OUT/share/misc/" || die "magic/magic.mgc was not built"
install_programs src/file

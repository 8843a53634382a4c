#!/usr/bin/env bash
# Build GNU cpio 2.13 with a given C compiler (an archiving utility none of
# trestle's tests was written against, for bench/fidelity.py).
#
# usage: build.sh --cc COMPILER --out DIR [--cflags "..."] [--ldflags "..."] [--patch FILE]...
#
# The upstream source (cpio_2.13+dfsg.orig.tar.bz2 from Debian bookworm's source
# package cpio 2.13+dfsg-7.1, hash-checked by apt and against a pinned SHA-256;
# Debian's repack drops only the non-free manual) is downloaded once and kept
# unpacked in $TRESTLE_CACHE/cpio-2.13-src (TRESTLE_CACHE defaults to
# ~/.cache/trestle); it is never part of this repository. Each build copies it to a
# fresh DIR/cpio-2.13-build, configures it with CC=COMPILER (no NLS), builds gnulib
# (gnu/), libpax (lib/) and src/cpio, and copies cpio to DIR/bin/cpio.
#
# One upstream fix is applied to the build copy: cpio 2.13 defines program_name in
# src/global.c as gnulib's progname.c does, which links only with -fcommon (GCC < 10
# and clang < 11 defaulted to it); upstream commit 641d3f48 (Debian's patch
# 963304-remove-superfluous-declaration-of-program_name) removes the definition.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../../tests/debian-source.sh"

PKG=cpio
VERSION=2.13
DEB_VERSIONS=(2.13+dfsg-7.1)
ORIG=cpio_2.13+dfsg.orig.tar.bz2
ORIG_SHA256=fd1e6fb3c683bf82ae0db237af87376c6a376d1f6bf6564c9b335785e76106a9
CACHE="${TRESTLE_CACHE:-${HOME:-/root}/.cache/trestle}/cpio-${VERSION}-src"

USAGE_LINES=5
build_start "$@"

resolve_compiler
install_build_tools bzip2:bzip2

fetch_upstream bench/cpio/build.sh
copy_to_build
step "remove the second definition of program_name (upstream 641d3f48)"
grep -q '^char \*program_name;$' src/global.c || die "src/global.c has no definition of program_name to remove"
sed -i -e '/^\/\* The name this program was run with\.  \*\/$/d' -e '/^char \*program_name;$/d' src/global.c
run_configure --disable-nls --disable-rpath --disable-dependency-tracking
# Only the program: gnulib, libpax and src/cpio, not the manual nor rmt/tests.
# The gnulib of cpio 2.13 initialises obstack_alloc_failed_handler (noreturn) with
# a function not declared noreturn, an error since clang 16; it stays a warning.
MAKE_CFLAGS="$CFLAGS_ARG -Wno-error=incompatible-function-pointer-types"
for dir in gnu lib; do
    cd "$BUILD/$dir"
    make_programs all CFLAGS="$MAKE_CFLAGS"
done
cd "$BUILD/src"
make_programs cpio CFLAGS="$MAKE_CFLAGS"
cd "$BUILD"
install_programs src/cpio

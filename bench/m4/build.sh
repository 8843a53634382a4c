#!/usr/bin/env bash
# Build GNU m4 1.4.19 (a macro processor) with a given C compiler, for
# bench/fidelity.py.
#
# usage: build.sh --cc COMPILER --out DIR [--cflags "..."] [--ldflags "..."] [--patch FILE]...
#
# The upstream source (m4_1.4.19.orig.tar.xz from Debian bookworm's source
# package m4 1.4.19-3, hash-checked by apt and against a pinned SHA-256) is
# downloaded once and kept unpacked in $TRESTLE_CACHE/m4-1.4.19-src
# (TRESTLE_CACHE defaults to ~/.cache/trestle); it is never part of this
# repository. Each build copies it to a fresh DIR/m4-1.4.19-build, configures it
# with CC=COMPILER, builds src/m4 and copies it to DIR/bin/m4.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../../tests/debian-source.sh"

PKG=m4
VERSION=1.4.19
DEB_VERSIONS=(1.4.19-3)
ORIG=m4_1.4.19.orig.tar.xz
ORIG_SHA256=63aede5c6d33b6d9b13511cd0be2cac046f2e70fd0a07aa9573a04a82783af96
CACHE="${TRESTLE_CACHE:-${HOME:-/root}/.cache/trestle}/m4-${VERSION}-src"

USAGE_LINES=5
build_start "$@"

resolve_compiler
install_build_tools

fetch_upstream bench/m4/build.sh
copy_to_build
# no NLS: messages stay in C whatever the locale, and the build needs no gettext
run_configure --disable-nls
make_programs -C lib && make_programs -C src m4
install_programs src/m4

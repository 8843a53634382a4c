#!/usr/bin/env bash
# Build GNU indent 2.2.12 with a given C compiler (a text tool none of trestle's
# tests was written against, for bench/fidelity.py).
#
# usage: build.sh --cc COMPILER --out DIR [--cflags "..."] [--ldflags "..."] [--patch FILE]...
#
# The upstream source (indent_2.2.12.orig.tar.xz from Debian bookworm's source
# package indent 2.2.12-4+deb12u3, hash-checked by apt and against a pinned
# SHA-256) is downloaded once and kept unpacked in $TRESTLE_CACHE/indent-2.2.12-src
# (TRESTLE_CACHE defaults to ~/.cache/trestle); it is never part of this
# repository. Each build copies it to a fresh DIR/indent-2.2.12-build, configures
# it with CC=COMPILER, builds only src/indent and copies it to
# DIR/bin/indent.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../../tests/debian-source.sh"

PKG=indent
VERSION=2.2.12
# bookworm's point releases moved indent from 2.2.12-4 to 2.2.12-4+deb12u3 (Debian
# patches only: the upstream tarball is the same file).
DEB_VERSIONS=(2.2.12-4+deb12u3 2.2.12-4+deb12u2 2.2.12-4+deb12u1 2.2.12-4)
ORIG=indent_$VERSION.orig.tar.xz
ORIG_SHA256=b745a5dfc68f86a483d7f96dc1cda7aafd1e78ecba3c7d8ad304709e91e1defb
CACHE="${TRESTLE_CACHE:-${HOME:-/root}/.cache/trestle}/indent-${VERSION}-src"

USAGE_LINES=5
build_start "$@"

resolve_compiler
install_build_tools

fetch_upstream bench/indent/build.sh
copy_to_build
# NLS stays on (glibc's gettext, as in Debian's build): with --disable-nls configure
# never checks for <locale.h>, and src/indent.c then calls setlocale undeclared.
run_configure --disable-rpath --disable-dependency-tracking
# Only the program: src/ (its gperf tables ship pre-generated), not the manuals
# (makeinfo, texi2html) nor the regression directory.
# src/Makefile compiles with -Werror, and clang 15+ warns (-Wunused-but-set-variable)
# about output.c; -Wno-error after it keeps the warnings as warnings.
cd src
make_programs indent CFLAGS="$CFLAGS_ARG -Wno-error"
cd "$BUILD"
install_programs src/indent

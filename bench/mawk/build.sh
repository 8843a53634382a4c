#!/usr/bin/env bash
# Build mawk 1.3.4-20200120 with a given C compiler (a program none of trestle's
# tests was written against, for bench/fidelity.py --suite).
#
# usage: build.sh --cc COMPILER --out DIR [--cflags "..."] [--ldflags "..."] [--patch FILE]...
#
# The upstream source (mawk_1.3.4.20200120.orig.tar.gz from Debian bookworm's
# source package mawk 1.3.4.20200120-3.1, hash-checked by apt and against a
# pinned SHA-256) is downloaded once and kept unpacked in
# $TRESTLE_CACHE/mawk-1.3.4-20200120-src (TRESTLE_CACHE defaults to
# ~/.cache/trestle); it is never part of this repository. Each build copies it to
# a fresh DIR/mawk-1.3.4-20200120-build, configures it with CC=COMPILER, builds
# mawk and copies it to DIR/bin/mawk.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../../tests/debian-source.sh"

PKG=mawk
VERSION=1.3.4-20200120
DEB_VERSIONS=(1.3.4.20200120-3.1)
ORIG=mawk_1.3.4.20200120.orig.tar.gz
ORIG_SHA256=7fd4cd1e1fae9290fe089171181bbc6291dfd9bca939ca804f0ddb851c8b8237
# mawk's configure sets no PACKAGE_VERSION; its patch level header has the date
VERSION_CHECK='patchlev.h:DATE_STRING.*"20200120"'
CACHE="${TRESTLE_CACHE:-${HOME:-/root}/.cache/trestle}/mawk-${VERSION}-src"

USAGE_LINES=5
build_start "$@"

resolve_compiler
install_build_tools gzip:gzip

fetch_upstream bench/mawk/build.sh
copy_to_build
run_configure
make_programs mawk
install_programs mawk

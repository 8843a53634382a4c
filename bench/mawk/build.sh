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

PKG=mawk
VERSION=1.3.4-20200120
DEB_VERSIONS=(1.3.4.20200120-3.1)
ORIG=mawk_1.3.4.20200120.orig.tar.gz
ORIG_SHA256=7fd4cd1e1fae9290fe089171181bbc6291dfd9bca939ca804f0ddb851c8b8237
# mawk's configure sets no PACKAGE_VERSION; its patch level header has the date
VERSION_CHECK='patchlev.h:DATE_STRING.*"20200120"'
CACHE="${TRESTLE_CACHE:-${HOME:-/root}/.cache/trestle}/mawk-${VERSION}-src"

STEP="startup"
die() { echo "build.sh: error in step '$STEP': $*" >&2; exit 1; }
trap 'rc=$?; if [ $rc -ne 0 ]; then echo "build.sh: FAILED in step: $STEP (exit $rc)" >&2; fi' EXIT
step() { STEP="$1"; echo "== [${SECONDS}s] $1" >&2; }

usage() {
    trap - EXIT
    sed -n '5p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

CC_ARG=""
OUT=""
CFLAGS_ARG="-O2 -g"
LDFLAGS_ARG=""
PATCHES=()
while [ $# -gt 0 ]; do
    case "$1" in
        --cc) [ $# -ge 2 ] || usage; CC_ARG="$2"; shift 2 ;;
        --cc=*) CC_ARG="${1#--cc=}"; shift ;;
        --out) [ $# -ge 2 ] || usage; OUT="$2"; shift 2 ;;
        --out=*) OUT="${1#--out=}"; shift ;;
        --cflags) [ $# -ge 2 ] || usage; CFLAGS_ARG="$2"; shift 2 ;;
        --cflags=*) CFLAGS_ARG="${1#--cflags=}"; shift ;;
        --ldflags) [ $# -ge 2 ] || usage; LDFLAGS_ARG="$2"; shift 2 ;;
        --ldflags=*) LDFLAGS_ARG="${1#--ldflags=}"; shift ;;
        --patch) [ $# -ge 2 ] || usage; PATCHES+=("$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"); shift 2 ;;
        --patch=*) p="${1#--patch=}"; PATCHES+=("$(cd "$(dirname "$p")" && pwd)/$(basename "$p")"); shift ;;
        -h|--help) usage ;;
        *) echo "build.sh: unknown argument: $1" >&2; usage ;;
    esac
done
[ -n "$CC_ARG" ] || { echo "build.sh: --cc is required" >&2; usage; }
[ -n "$OUT" ] || { echo "build.sh: --out is required" >&2; usage; }

source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../../tests/debian-source.sh"
resolve_compiler
install_build_tools gzip:gzip

fetch_upstream bench/mawk/build.sh
copy_to_build
run_configure
make_programs mawk
install_programs mawk

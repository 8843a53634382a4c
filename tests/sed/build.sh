#!/usr/bin/env bash
# Build GNU sed 4.9 with a given C compiler.
#
# usage: build.sh --cc COMPILER --out DIR [--cflags "..."] [--ldflags "..."] [--patch FILE]... [--system-regex]
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

PKG=sed
VERSION=4.9
ORIG=sed_$VERSION.orig.tar.xz
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
LDFLAGS_ARG=""
PATCHES=()
REGEX_OPT="--with-included-regex"
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

fetch_upstream tests/sed/build.sh
copy_to_build
# The --without/--disable options keep the build free of optional libraries
# (libselinux, libacl, gettext).
run_configure --disable-nls --disable-rpath --disable-dependency-tracking --disable-acl --without-selinux "$REGEX_OPT"
make_programs sed/sed
install_programs sed/sed

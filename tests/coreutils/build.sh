#!/usr/bin/env bash
# Build GNU coreutils 9.1 programs (default: cut) with a given C compiler.
#
# usage: build.sh --cc COMPILER --out DIR [--cflags "..."] [--ldflags "..."] [--patch FILE]... [--prog cut[,ls,...]]...
#
# The upstream source (coreutils_9.1.orig.tar.xz from Debian bookworm's source
# package coreutils 9.1-1, hash-checked by apt) is downloaded once and kept
# unpacked in $TRESTLE_CACHE/coreutils-9.1-src (TRESTLE_CACHE defaults to
# ~/.cache/trestle).
# Each build copies it to a fresh DIR/coreutils-9.1-build, configures it with
# CC=COMPILER, builds only the requested programs and copies them to DIR/bin/.
set -euo pipefail

PKG=coreutils
VERSION=9.1
DEB_VERSIONS=(9.1-1)
ORIG=coreutils_$VERSION.orig.tar.xz
# apt checks the tarball against the package's signed hash; no pin of our own.
ORIG_SHA256=""
CACHE="${TRESTLE_CACHE:-${HOME:-/root}/.cache/trestle}/coreutils-${VERSION}-src"

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
PROGS=()
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
        --prog) [ $# -ge 2 ] || usage; IFS=', ' read -r -a p <<<"$2"; PROGS+=("${p[@]}"); shift 2 ;;
        --prog=*) IFS=', ' read -r -a p <<<"${1#--prog=}"; PROGS+=("${p[@]}"); shift ;;
        -h|--help) usage ;;
        *) echo "build.sh: unknown argument: $1" >&2; usage ;;
    esac
done
[ -n "$CC_ARG" ] || { echo "build.sh: --cc is required" >&2; usage; }
[ -n "$OUT" ] || { echo "build.sh: --out is required" >&2; usage; }
[ ${#PROGS[@]} -gt 0 ] || PROGS=(cut)
for p in "${PROGS[@]}"; do
    [[ "$p" =~ ^[a-z0-9_]+$ ]] || { echo "build.sh: bad program name: '$p'" >&2; exit 2; }
done

source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../debian-source.sh"
resolve_compiler
install_build_tools

fetch_upstream tests/coreutils/build.sh
copy_to_build
# The --without/--disable options keep the build free of optional libraries.
run_configure --disable-nls --disable-rpath --disable-dependency-tracking \
    --disable-acl --disable-xattr --disable-libcap --disable-libsmack \
    --without-selinux --without-openssl --without-libgmp --without-linux-crypto
targets=()
for p in "${PROGS[@]}"; do targets+=("src/$p"); done
make_programs "${targets[@]}"
install_programs "${targets[@]}"

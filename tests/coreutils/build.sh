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
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../debian-source.sh"

PKG=coreutils
VERSION=9.1
DEB_VERSIONS=(9.1-1)
ORIG=coreutils_$VERSION.orig.tar.xz
# apt checks the tarball against the package's signed hash; no pin of our own.
ORIG_SHA256=""
CACHE="${TRESTLE_CACHE:-${HOME:-/root}/.cache/trestle}/coreutils-${VERSION}-src"

PROGS=()
extra_option() {
    local p
    case "$1" in
        --prog) [ $# -ge 2 ] || usage; IFS=', ' read -r -a p <<<"$2"; PROGS+=("${p[@]}"); TAKEN=2 ;;
        --prog=*) IFS=', ' read -r -a p <<<"${1#--prog=}"; PROGS+=("${p[@]}"); TAKEN=1 ;;
    esac
}
build_start "$@"
[ ${#PROGS[@]} -gt 0 ] || PROGS=(cut)
for p in "${PROGS[@]}"; do
    [[ "$p" =~ ^[a-z0-9_]+$ ]] || { echo "build.sh: bad program name: '$p'" >&2; exit 2; }
done

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

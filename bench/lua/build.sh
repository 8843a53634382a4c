#!/usr/bin/env bash
# Build the Lua 5.4.4 interpreter with a given C compiler (a language interpreter
# none of trestle's tests was written against, for bench/fidelity.py).
#
# usage: build.sh --cc COMPILER --out DIR [--cflags "..."] [--ldflags "..."] [--patch FILE]...
#
# The upstream source (lua5.4_5.4.4.orig.tar.gz from Debian bookworm's source
# package lua5.4 5.4.4-3+deb12u1, hash-checked by apt and against a pinned
# SHA-256) is downloaded once and kept unpacked in $TRESTLE_CACHE/lua-5.4.4-src
# (TRESTLE_CACHE defaults to ~/.cache/trestle); it is never part of this
# repository. Lua has no configure script: each build copies the tree to a fresh
# DIR/lua-5.4.4-build, runs its plain Makefile in src/ for the `lua` target as
# its `linux` target would (LUA_USE_LINUX, no readline) with CC=COMPILER and the
# given CFLAGS, and copies the interpreter to DIR/bin/lua.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../../tests/debian-source.sh"

PKG=lua
VERSION=5.4.4
SRC_PKG=lua5.4
# bookworm had 5.4.4-3 at release; a point release replaced it by 5.4.4-3+deb12u1
# (a Debian patch only: the upstream tarball is the same file).
DEB_VERSIONS=(5.4.4-3+deb12u1 5.4.4-3)
ORIG=lua5.4_5.4.4.orig.tar.gz
ORIG_SHA256=164c7849653b80ae67bec4b7473b884bf5cc8d2dca05653475ec2ed27b9ebf61
CACHE="${TRESTLE_CACHE:-${HOME:-/root}/.cache/trestle}/lua-${VERSION}-src"

# No configure: src/Makefile, and lua.h says the version.
TREE_MARK=src/Makefile
VERSION_CHECK='src/lua.h:^#define LUA_VERSION_RELEASE[[:space:]]*"4"'
check_tree() { grep -q '^#define LUA_VERSION_MINOR[[:space:]]*"4"' src/lua.h; }

USAGE_LINES=5
build_start "$@"

resolve_compiler
install_build_tools gzip:gzip


fetch_upstream bench/lua/build.sh
copy_to_build
step "make src/lua"
# CFLAGS and LIBS as src/Makefile's `linux` target sets them (no readline), with
# the given flags instead of its -O2.
if ! make -C src -j"$JOBS" lua CC="$CC_PATH" \
        CFLAGS="$CFLAGS_ARG -std=gnu99 -Wall -Wextra -DLUA_COMPAT_5_3 -DLUA_USE_LINUX" \
        MYLDFLAGS="$LDFLAGS_ARG" LIBS="-lm -Wl,-E -ldl" >"$BUILD/trestle-make.log" 2>&1; then
    tail -n 40 "$BUILD/trestle-make.log" >&2
    die "make failed; see $BUILD/trestle-make.log"
fi
install_programs src/lua

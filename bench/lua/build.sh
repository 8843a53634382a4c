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

USAGE_LINES=5
build_start "$@"

resolve_compiler
install_build_tools gzip:gzip

# fetch_upstream of tests/debian-source.sh expects a configure script and a
# source package named like the program; Lua's has neither, so its own here.
fetch_lua() {
    if [ -f "$CACHE/.trestle-complete" ]; then
        echo "using cached source: $CACHE" >&2
        return
    fi
    enable_deb_src bench/lua/build.sh
    step "download $SRC_PKG ${DEB_VERSIONS[0]} source package"
    local parent tmp ok=0 try v
    parent="$(dirname "$CACHE")"
    mkdir -p "$parent" || die "cannot create cache dir $parent"
    tmp="$(mktemp -d "$parent/.$PKG-dl.XXXXXX")"
    for try in 1 2; do
        for v in "${DEB_VERSIONS[@]}" ""; do
            if (cd "$tmp" && apt-get source --download-only -qq "$SRC_PKG${v:+=$v}" >&2 2>"$tmp/.apt-err"); then
                echo "downloaded source package $SRC_PKG=${v:-(current bookworm version)}" >&2
                ok=1; break 2
            fi
        done
        [ $try -eq 1 ] && { APT_UPDATED=0; apt_update; }
    done
    [ $ok -eq 1 ] || { cat "$tmp/.apt-err" >&2; rm -rf "$tmp"; die "apt-get source $SRC_PKG failed (deb-src entry or network missing?)"; }
    local orig="$tmp/$ORIG"
    [ -f "$orig" ] || { ls -l "$tmp" >&2; rm -rf "$tmp"; die "no $ORIG downloaded (wrong version?)"; }
    echo "$ORIG_SHA256  $orig" | sha256sum -c --quiet - >&2 \
        || { rm -rf "$tmp"; die "$ORIG does not have the expected SHA-256"; }
    step "unpack $PKG $VERSION source into cache"
    tar -C "$tmp" -xf "$orig" || { rm -rf "$tmp"; die "cannot unpack $orig"; }
    [ -f "$tmp/$PKG-$VERSION/src/Makefile" ] || { rm -rf "$tmp"; die "unpacked tree has no src/Makefile"; }
    grep -q '^#define LUA_VERSION_RELEASE[[:space:]]*"4"' "$tmp/$PKG-$VERSION/src/lua.h" \
        && grep -q '^#define LUA_VERSION_MINOR[[:space:]]*"4"' "$tmp/$PKG-$VERSION/src/lua.h" \
        || { rm -rf "$tmp"; die "unpacked source is not $PKG $VERSION"; }
    touch "$tmp/$PKG-$VERSION/.trestle-complete"
    rm -rf "$CACHE"
    mv "$tmp/$PKG-$VERSION" "$CACHE" || die "cannot move source into $CACHE"
    rm -rf "$tmp"
}

fetch_lua
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

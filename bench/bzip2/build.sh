#!/usr/bin/env bash
# Build bzip2 1.0.8 (a compressor) with a given C compiler, for bench/fidelity.py.
#
# usage: build.sh --cc COMPILER --out DIR [--cflags "..."] [--ldflags "..."] [--patch FILE]...
#
# The upstream source (bzip2_1.0.8.orig.tar.gz from Debian bookworm's source
# package bzip2 1.0.8-5, hash-checked by apt and against a pinned SHA-256) is
# downloaded once and kept unpacked in $TRESTLE_CACHE/bzip2-1.0.8-src
# (TRESTLE_CACHE defaults to ~/.cache/trestle); it is never part of this
# repository. Each build copies it to a fresh DIR/bzip2-1.0.8-build, builds the
# bzip2 program (and libbz2.a, linked in statically) with upstream's plain
# Makefile, CC=COMPILER and CFLAGS (plus upstream's -D_FILE_OFFSET_BITS=64), and
# copies it to DIR/bin/bzip2.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../../tests/debian-source.sh"

PKG=bzip2
VERSION=1.0.8
DEB_VERSIONS=(1.0.8-5)
ORIG=bzip2_1.0.8.orig.tar.gz
ORIG_SHA256=ab5a03176ee106d3f0fa90e381da478ddae405918153cca248e682cd0c4a2269
CACHE="${TRESTLE_CACHE:-${HOME:-/root}/.cache/trestle}/bzip2-${VERSION}-src"

USAGE_LINES=5
build_start "$@"

resolve_compiler
install_build_tools gzip:gzip

# debian-source.sh's fetch_upstream expects a configure script; bzip2 has a plain
# Makefile, so this one is the same steps with a check that fits: bzlib_private.h
# defines BZ_VERSION.
fetch_upstream_plain() {
    if [ -f "$CACHE/.trestle-complete" ]; then
        echo "using cached source: $CACHE" >&2
        return
    fi
    enable_deb_src bench/bzip2/build.sh
    step "download $PKG ${DEB_VERSIONS[0]} source package"
    local parent tmp ok=0 try v
    parent="$(dirname "$CACHE")"
    mkdir -p "$parent" || die "cannot create cache dir $parent"
    tmp="$(mktemp -d "$parent/.$PKG-dl.XXXXXX")"
    for try in 1 2; do
        for v in "${DEB_VERSIONS[@]}" ""; do
            if (cd "$tmp" && apt-get source --download-only -qq "$PKG${v:+=$v}" >&2 2>"$tmp/.apt-err"); then
                echo "downloaded source package $PKG=${v:-(current bookworm version)}" >&2
                ok=1; break 2
            fi
        done
        [ $try -eq 1 ] && { APT_UPDATED=0; apt_update; }
    done
    [ $ok -eq 1 ] || { cat "$tmp/.apt-err" >&2; rm -rf "$tmp"; die "apt-get source $PKG failed (deb-src entry or network missing?)"; }
    local orig="$tmp/$ORIG"
    [ -f "$orig" ] || { ls -l "$tmp" >&2; rm -rf "$tmp"; die "no $ORIG downloaded (wrong version?)"; }
    echo "$ORIG_SHA256  $orig" | sha256sum -c --quiet - >&2 \
        || { rm -rf "$tmp"; die "$ORIG does not have the expected SHA-256"; }
    step "unpack $PKG $VERSION source into cache"
    tar -C "$tmp" -xf "$orig" || { rm -rf "$tmp"; die "cannot unpack $orig"; }
    [ -f "$tmp/$PKG-$VERSION/Makefile" ] || { rm -rf "$tmp"; die "unpacked tree has no Makefile"; }
    grep -q "^#define BZ_VERSION  \"$VERSION," "$tmp/$PKG-$VERSION/bzlib_private.h" \
        || { rm -rf "$tmp"; die "unpacked source is not $PKG $VERSION"; }
    touch "$tmp/$PKG-$VERSION/.trestle-complete"
    rm -rf "$CACHE"
    mv "$tmp/$PKG-$VERSION" "$CACHE" || die "cannot move source into $CACHE"
    rm -rf "$tmp"
}

fetch_upstream_plain
copy_to_build

step "make bzip2 (CC=$CC_PATH)"
# Only the bzip2 program: 'all' would also run upstream's self-test and build
# bzip2recover. Upstream's CFLAGS are "-Wall -Winline -O2 -g $(BIGFILES)"; the
# given ones replace them, keeping the large-file define.
if ! make -j"$JOBS" bzip2 CC="$CC_PATH" CFLAGS="$CFLAGS_ARG -D_FILE_OFFSET_BITS=64" \
        LDFLAGS="$LDFLAGS_ARG" >"$BUILD/trestle-make.log" 2>&1; then
    tail -n 40 "$BUILD/trestle-make.log" >&2
    die "make failed; see $BUILD/trestle-make.log"
fi
install_programs bzip2

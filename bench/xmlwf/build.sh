#!/usr/bin/env bash
# Build xmlwf, the XML well-formedness checker of expat 2.5.0 (a parser of a
# data format), with a given C compiler, for bench/fidelity.py.
#
# usage: build.sh --cc COMPILER --out DIR [--cflags "..."] [--ldflags "..."] [--patch FILE]...
#
# The upstream source (expat_2.5.0.orig.tar.gz from Debian bookworm's source
# package expat 2.5.0-1+deb12u2, hash-checked by apt and against a pinned
# SHA-256) is downloaded once and kept unpacked in $TRESTLE_CACHE/expat-2.5.0-src
# (TRESTLE_CACHE defaults to ~/.cache/trestle); it is never part of this
# repository. The tarball is a snapshot of upstream's git tag (libexpat-R_2_5_0/,
# the library in its expat/ folder) without a configure script, so, as Debian's
# own build does, expat/buildconf.sh (autoreconf; autoconf, automake and libtool
# are installed when missing) makes one, once, in the cached tree. Each build
# copies that tree to a fresh DIR/expat-2.5.0-build, configures it with
# CC=COMPILER and a static libexpat only (so xmlwf is one binary with the parser
# in it, not a libtool wrapper), builds xmlwf and copies it to DIR/bin/xmlwf.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../../tests/debian-source.sh"

PKG=expat
VERSION=2.5.0
# bookworm's security updates carry the same upstream tarball
DEB_VERSIONS=(2.5.0-1+deb12u2 2.5.0-1+deb12u1 2.5.0-1)
ORIG=expat_2.5.0.orig.tar.gz
ORIG_SHA256=ab00ee05c7067fd10a35c5d2a4922ebba746ddd50ff83b79c828da17bbdf1757
TOP=libexpat-R_2_5_0
CACHE="${TRESTLE_CACHE:-${HOME:-/root}/.cache/trestle}/expat-${VERSION}-src"

USAGE_LINES=5
build_start "$@"

resolve_compiler
install_build_tools gzip:gzip autoreconf:autoconf automake:automake libtoolize:libtool

# debian-source.sh's fetch_upstream expects $PKG-$VERSION/configure in the
# tarball; this one is the same steps for expat's layout, plus buildconf.sh.
fetch_upstream_expat() {
    if [ -f "$CACHE/.trestle-complete" ]; then
        echo "using cached source: $CACHE" >&2
        return
    fi
    enable_deb_src bench/xmlwf/build.sh
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
    local src="$tmp/$TOP/expat"
    [ -x "$src/buildconf.sh" ] || { rm -rf "$tmp"; die "unpacked tree has no expat/buildconf.sh"; }
    step "generate configure (expat/buildconf.sh)"
    (cd "$src" && ./buildconf.sh) >"$tmp/buildconf.log" 2>&1 \
        || { tail -n 30 "$tmp/buildconf.log" >&2; rm -rf "$tmp"; die "buildconf.sh failed"; }
    grep -q "^PACKAGE_VERSION='$VERSION'" "$src/configure" \
        || { rm -rf "$tmp"; die "unpacked source is not $PKG $VERSION"; }
    touch "$src/.trestle-complete"
    rm -rf "$CACHE"
    mv "$src" "$CACHE" || die "cannot move source into $CACHE"
    rm -rf "$tmp"
}

fetch_upstream_expat
copy_to_build
# --without-docbook: no man page (it needs docbook2x); no tests or examples.
run_configure --disable-shared --enable-static --disable-dependency-tracking \
    --without-docbook --without-tests --without-examples
make_programs -C lib libexpat.la
make_programs -C xmlwf xmlwf
install_programs xmlwf/xmlwf

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

# The library is the expat/ folder of the git snapshot; its configure is made
# once, in the cached tree, by buildconf.sh (autoreconf), as Debian's build does.
TREE=$TOP/expat
TREE_MARK=buildconf.sh
prepare_tree() {
    step "generate configure (expat/buildconf.sh)"
    ./buildconf.sh >buildconf.log 2>&1 || { tail -n 30 buildconf.log >&2; return 1; }
}

USAGE_LINES=5
build_start "$@"

resolve_compiler
install_build_tools gzip:gzip autoreconf:autoconf automake:automake libtoolize:libtool


fetch_upstream bench/xmlwf/build.sh
copy_to_build
# --without-docbook: no man page (it needs docbook2x); no tests or examples.
run_configure --disable-shared --enable-static --disable-dependency-tracking \
    --without-docbook --without-tests --without-examples
make_programs -C lib libexpat.la
make_programs -C xmlwf xmlwf
install_programs xmlwf/xmlwf

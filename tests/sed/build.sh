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
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../debian-source.sh"

PKG=sed
VERSION=4.9
ORIG=sed_$VERSION.orig.tar.xz
# bookworm had 4.9-1 at release; a point release replaced it by 4.9-1+deb12u1
# (a Debian patch only: the upstream tarball is the same file).
DEB_VERSIONS=(4.9-1 4.9-1+deb12u1)
ORIG_SHA256=6e226b732e1cd739464ad6862bd1a1aba42d7982922da7a53519631d24975181
CACHE="${TRESTLE_CACHE:-${HOME:-/root}/.cache/trestle}/sed-${VERSION}-src"

REGEX_OPT="--with-included-regex"
extra_option() {
    case "$1" in
        --system-regex) REGEX_OPT="--without-included-regex"; TAKEN=1 ;;
    esac
}
build_start "$@"

resolve_compiler
install_build_tools

fetch_upstream tests/sed/build.sh
copy_to_build
# The --without/--disable options keep the build free of optional libraries
# (libselinux, libacl, gettext).
run_configure --disable-nls --disable-rpath --disable-dependency-tracking --disable-acl --without-selinux "$REGEX_OPT"
make_programs sed/sed
install_programs sed/sed

#!/usr/bin/env bash
# Build GNU coreutils 9.1 programs (default: cut) with a given C compiler.
#
# usage: build.sh --cc COMPILER --out DIR [--cflags "..."] [--prog cut[,ls,...]]...
#
# The upstream source (coreutils_9.1.orig.tar.xz from Debian bookworm's source
# package coreutils 9.1-1, hash-checked by apt) is downloaded once and kept
# unpacked in $TRESTLE_CACHE (default ~/.cache/trestle/coreutils-9.1-src).
# Each build copies it to a fresh DIR/coreutils-9.1-build, configures it with
# CC=COMPILER, builds only the requested programs and copies them to DIR/bin/.
set -euo pipefail

VERSION=9.1
DEB_VERSION=9.1-1
CACHE="${TRESTLE_CACHE:-${HOME:-/root}/.cache/trestle/coreutils-${VERSION}-src}"

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
PROGS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --cc) [ $# -ge 2 ] || usage; CC_ARG="$2"; shift 2 ;;
        --cc=*) CC_ARG="${1#--cc=}"; shift ;;
        --out) [ $# -ge 2 ] || usage; OUT="$2"; shift 2 ;;
        --out=*) OUT="${1#--out=}"; shift ;;
        --cflags) [ $# -ge 2 ] || usage; CFLAGS_ARG="$2"; shift 2 ;;
        --cflags=*) CFLAGS_ARG="${1#--cflags=}"; shift ;;
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

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 && SUDO="sudo" || true
fi

APT_UPDATED=0
apt_update() {
    if [ $APT_UPDATED -eq 0 ]; then
        $SUDO apt-get update -qq || die "apt-get update failed"
        APT_UPDATED=1
    fi
}
apt_install() {
    apt_update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null \
        || die "apt-get install $* failed"
}

# ---------------------------------------------------------------------------
step "check compiler"
if [[ "$CC_ARG" == */* ]]; then
    CC_PATH="$(cd "$(dirname "$CC_ARG")" 2>/dev/null && pwd)/$(basename "$CC_ARG")" \
        || die "compiler directory not found: $CC_ARG"
    [ -x "$CC_PATH" ] || die "compiler not executable: $CC_PATH"
else
    CC_PATH="$(command -v "$CC_ARG" || true)"
    [ -n "$CC_PATH" ] || die "compiler not found in PATH: $CC_ARG"
fi

# ---------------------------------------------------------------------------
step "install build tools"
need=()
command -v make >/dev/null 2>&1 || need+=(make)
command -v xz >/dev/null 2>&1 || need+=(xz-utils)
command -v tar >/dev/null 2>&1 || need+=(tar)
# configure needs a C library's headers and a linker even when CC is clang
[ -e /usr/include/stdio.h ] || need+=(libc6-dev)
command -v ld >/dev/null 2>&1 || need+=(binutils)
if [ ${#need[@]} -gt 0 ]; then
    echo "installing: ${need[*]}" >&2
    apt_install "${need[@]}"
fi

# ---------------------------------------------------------------------------
fetch_source() {
    step "enable deb-src for bookworm"
    local have_src=0
    if grep -qsE '^[[:space:]]*deb-src[[:space:]].*bookworm' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null; then
        have_src=1
    fi
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -e "$f" ] || continue
        # a deb822 stanza with deb-src among its Types and bookworm among its Suites
        if awk 'BEGIN{RS=""} /(^|\n)Types:[^\n]*deb-src/ && /(^|\n)Suites:[^\n]*bookworm([ \t\n]|$)/ && !/(^|\n)Enabled:[ \t]*no/ {f=1} END{exit !f}' "$f"; then
            have_src=1
        fi
    done
    if [ $have_src -eq 0 ]; then
        echo "adding /etc/apt/sources.list.d/trestle-deb-src.sources" >&2
        local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
        [ -e "$keyring" ] || apt_install debian-archive-keyring
        $SUDO tee /etc/apt/sources.list.d/trestle-deb-src.sources >/dev/null <<EOF || die "cannot write deb-src entry"
# added by trestle tests/coreutils/build.sh to fetch coreutils sources
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: $keyring
EOF
        APT_UPDATED=0
        apt_update
    fi

    step "download coreutils $DEB_VERSION source package"
    local parent tmp
    parent="$(dirname "$CACHE")"
    mkdir -p "$parent" || die "cannot create cache dir $parent"
    tmp="$(mktemp -d "$parent/.coreutils-dl.XXXXXX")"
    # --download-only: we unpack the pristine upstream tarball ourselves,
    # without the Debian patches (and without needing dpkg-source).
    # Try the pinned version, then whatever bookworm has; if both fail the
    # package lists may be stale, so update once and try again.
    local ok=0 try
    for try in 1 2; do
        if (cd "$tmp" && apt-get source --download-only -qq "coreutils=$DEB_VERSION" >&2) \
            || (echo "coreutils=$DEB_VERSION not available, trying bookworm's current coreutils" >&2
                cd "$tmp" && apt-get source --download-only -qq coreutils >&2); then
            ok=1; break
        fi
        [ $try -eq 1 ] && { APT_UPDATED=0; apt_update; }
    done
    [ $ok -eq 1 ] || { rm -rf "$tmp"; die "apt-get source coreutils failed (deb-src entry or network missing?)"; }
    local orig
    orig="$(ls "$tmp"/coreutils_"$VERSION".orig.tar.* 2>/dev/null | grep -v '\.asc$' | head -n1 || true)"
    [ -n "$orig" ] || { ls -l "$tmp" >&2; rm -rf "$tmp"; die "no coreutils_$VERSION.orig tarball downloaded (wrong version?)"; }

    step "unpack coreutils $VERSION source into cache"
    tar -C "$tmp" -xf "$orig" || { rm -rf "$tmp"; die "cannot unpack $orig"; }
    [ -x "$tmp/coreutils-$VERSION/configure" ] || { rm -rf "$tmp"; die "unpacked tree has no configure"; }
    grep -q "^PACKAGE_VERSION='$VERSION'" "$tmp/coreutils-$VERSION/configure" \
        || { rm -rf "$tmp"; die "unpacked source is not coreutils $VERSION"; }
    touch "$tmp/coreutils-$VERSION/.trestle-complete"
    rm -rf "$CACHE"
    mv "$tmp/coreutils-$VERSION" "$CACHE" || die "cannot move source into $CACHE"
    rm -rf "$tmp"
}

if [ -f "$CACHE/.trestle-complete" ]; then
    echo "using cached source: $CACHE" >&2
else
    fetch_source
fi

# ---------------------------------------------------------------------------
step "copy source to build dir"
mkdir -p "$OUT" || die "cannot create $OUT"
OUT="$(cd "$OUT" && pwd)"
BUILD="$OUT/coreutils-$VERSION-build"
rm -rf "$BUILD"
# -a keeps timestamps, so make does not try to rerun autoconf/automake
cp -a "$CACHE" "$BUILD" || die "cannot copy $CACHE to $BUILD"
rm -f "$BUILD/.trestle-complete"

# ---------------------------------------------------------------------------
step "configure (CC=$CC_PATH)"
cd "$BUILD"
# --disable-dependency-tracking: faster one-shot builds.
# The --without/--disable options keep the build free of optional libraries.
# coreutils' configure refuses to run as root without FORCE_UNSAFE_CONFIGURE.
# TRESTLE_CONFIG_CACHE=FILE (optional) shares configure results between builds
# with the SAME compiler and flags (the caller picks one file per compiler).
cache_opt=()
if [ -n "${TRESTLE_CONFIG_CACHE:-}" ]; then
    mkdir -p "$(dirname "$TRESTLE_CONFIG_CACHE")"
    cache_opt=(--cache-file="$(cd "$(dirname "$TRESTLE_CONFIG_CACHE")" && pwd)/$(basename "$TRESTLE_CONFIG_CACHE")")
fi
if ! FORCE_UNSAFE_CONFIGURE=1 ./configure --quiet "${cache_opt[@]}" \
        CC="$CC_PATH" CFLAGS="$CFLAGS_ARG" \
        --disable-nls --disable-rpath --disable-dependency-tracking \
        --disable-acl --disable-xattr --disable-libcap --disable-libsmack \
        --without-selinux --without-openssl --without-libgmp --without-linux-crypto \
        >"$BUILD/trestle-configure.log" 2>&1; then
    tail -n 30 "$BUILD/trestle-configure.log" >&2
    die "configure failed; see $BUILD/trestle-configure.log and $BUILD/config.log"
fi

# ---------------------------------------------------------------------------
JOBS="${TRESTLE_JOBS:-$(nproc 2>/dev/null || echo 2)}"
targets=()
for p in "${PROGS[@]}"; do targets+=("src/$p"); done
step "make ${targets[*]}"
# Building only src/PROG (not 'all') skips the man pages (help2man/perl).
# Targets other than all/check/install do not build BUILT_SOURCES
# (gnulib's replacement headers etc.), so build those first.
built_sources="$(make -s -f Makefile -f - print-built-sources <<'EOF' 2>/dev/null || true
print-built-sources:
	@echo $(BUILT_SOURCES)
EOF
)"
if ! { { [ -z "$built_sources" ] || make -j"$JOBS" $built_sources; } \
        && make -j"$JOBS" "${targets[@]}"; } >"$BUILD/trestle-make.log" 2>&1; then
    tail -n 40 "$BUILD/trestle-make.log" >&2
    die "make failed; see $BUILD/trestle-make.log"
fi

# ---------------------------------------------------------------------------
step "install binaries to $OUT/bin"
mkdir -p "$OUT/bin"
for p in "${PROGS[@]}"; do
    [ -x "src/$p" ] || die "src/$p was not built"
    cp -f "src/$p" "$OUT/bin/$p"
    echo "built $OUT/bin/$p" >&2
done
STEP="done"
echo "== [${SECONDS}s] done" >&2

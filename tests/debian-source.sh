# Shared steps of the scripts that build a Debian source package with a given
# compiler (tests/coreutils/build.sh, tests/sed/build.sh, tests/bc/build.sh,
# bench/mawk/build.sh). A script sources this first, sets PKG, VERSION, DEB_VERSIONS
# (pinned Debian versions, tried first), ORIG (the upstream tarball's name),
# ORIG_SHA256 (its pinned hash, or empty where apt's check is the only one) and CACHE
# (where the unpacked tree is kept), then calls `build_start "$@"`, which parses the
# options every script takes (CC_ARG, OUT, CFLAGS_ARG, LDFLAGS_ARG, PATCHES).
# VERSION_CHECK (optional, "FILE:REGEX") names what proves the unpacked tree is
# $VERSION, for a tree whose configure sets no PACKAGE_VERSION (mawk's).

STEP="startup"
die() { echo "build.sh: error in step '$STEP': $*" >&2; exit 1; }
step() { STEP="$1"; echo "== [${SECONDS}s] $1" >&2; }

# The caller's usage (the lines USAGE_LINES of it, 2,4 unless said), then exit 2.
usage() {
    trap - EXIT
    sed -n "${USAGE_LINES:-2,4}p" "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# Parse the options every build script takes; a script with options of its own
# defines `extra_option "$@"`, which sets TAKEN to the words it took (0: not its).
# A failure from here on names the step it happened in.
build_start() {
    trap 'rc=$?; if [ $rc -ne 0 ]; then echo "build.sh: FAILED in step: $STEP (exit $rc)" >&2; fi' EXIT
    CC_ARG=""
    OUT=""
    CFLAGS_ARG="-O2 -g"
    LDFLAGS_ARG=""
    PATCHES=()
    local p
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
            -h|--help) usage ;;
            *)
                TAKEN=0
                if declare -F extra_option >/dev/null; then extra_option "$@"; fi
                [ "$TAKEN" -gt 0 ] || { echo "build.sh: unknown argument: $1" >&2; usage; }
                shift "$TAKEN"
                ;;
        esac
    done
    [ -n "$CC_ARG" ] || { echo "build.sh: --cc is required" >&2; usage; }
    [ -n "$OUT" ] || { echo "build.sh: --out is required" >&2; usage; }
}

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

# CC_PATH: the compiler named by CC_ARG (a path, or a name on PATH), absolute.
resolve_compiler() {
    step "check compiler"
    if [[ "$CC_ARG" == */* ]]; then
        CC_PATH="$(cd "$(dirname "$CC_ARG")" 2>/dev/null && pwd)/$(basename "$CC_ARG")" \
            || die "compiler directory not found: $CC_ARG"
        [ -x "$CC_PATH" ] || die "compiler not executable: $CC_PATH"
    else
        CC_PATH="$(command -v "$CC_ARG" || true)"
        [ -n "$CC_PATH" ] || die "compiler not found in PATH: $CC_ARG"
    fi
}

# Install make, xz, tar, sha256sum, the C library's headers and a linker when
# missing, and each extra "command:package" pair given.
install_build_tools() {
    step "install build tools"
    local need=() pair
    command -v make >/dev/null 2>&1 || need+=(make)
    command -v xz >/dev/null 2>&1 || need+=(xz-utils)
    command -v tar >/dev/null 2>&1 || need+=(tar)
    command -v sha256sum >/dev/null 2>&1 || need+=(coreutils)
    # configure needs a C library's headers and a linker even when CC is clang
    [ -e /usr/include/stdio.h ] || need+=(libc6-dev)
    command -v ld >/dev/null 2>&1 || need+=(binutils)
    [ ${#PATCHES[@]} -eq 0 ] || command -v patch >/dev/null 2>&1 || need+=(patch)
    for pair in "$@"; do
        command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
    done
    if [ ${#need[@]} -gt 0 ]; then
        echo "installing: ${need[*]}" >&2
        apt_install "${need[@]}"
    fi
}

# A deb-src entry for bookworm, added (as tests/coreutils/build.sh adds it) when
# there is none. $1 names the script, for the entry's comment.
enable_deb_src() {
    step "enable deb-src for bookworm"
    local have_src=0 f
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
# added by trestle $1 to fetch source packages
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: $keyring
EOF
        APT_UPDATED=0
        apt_update
    fi
}

# The pristine upstream tree of $PKG $VERSION in $CACHE: downloaded (without the
# Debian patches, so without dpkg-source) and unpacked once, then reused. $1 names
# the calling script, for the deb-src entry it may add. A script whose package is
# laid out otherwise sets SRC_PKG (the source package, if not $PKG), TREE (the
# tarball's top directory, if not $PKG-$VERSION), TREE_MARK (a file every good tree
# has, if not configure) and may define prepare_tree (run in the unpacked tree
# before the version check: expat makes its configure there) and check_tree (a
# version check of its own, beside VERSION_CHECK).
fetch_upstream() {
    if [ -f "$CACHE/.trestle-complete" ]; then
        echo "using cached source: $CACHE" >&2
        return
    fi
    enable_deb_src "$1"
    local src_pkg="${SRC_PKG:-$PKG}"
    step "download $src_pkg ${DEB_VERSIONS[0]} source package"
    local parent tmp
    parent="$(dirname "$CACHE")"
    mkdir -p "$parent" || die "cannot create cache dir $parent"
    tmp="$(mktemp -d "$parent/.$PKG-dl.XXXXXX")"
    # The pinned versions, then whatever bookworm has; if all fail the package lists
    # may be stale, so update once and try again.
    local ok=0 try v
    for try in 1 2; do
        for v in "${DEB_VERSIONS[@]}" ""; do
            if (cd "$tmp" && apt-get source --download-only -qq "$src_pkg${v:+=$v}" >&2 2>"$tmp/.apt-err"); then
                echo "downloaded source package $src_pkg=${v:-(current bookworm version)}" >&2
                ok=1; break 2
            fi
        done
        [ $try -eq 1 ] && { APT_UPDATED=0; apt_update; }
    done
    [ $ok -eq 1 ] || { cat "$tmp/.apt-err" >&2; rm -rf "$tmp"; die "apt-get source $src_pkg failed (deb-src entry or network missing?)"; }
    local orig="$tmp/$ORIG"
    [ -f "$orig" ] || { ls -l "$tmp" >&2; rm -rf "$tmp"; die "no $ORIG downloaded (wrong version?)"; }
    if [ -n "$ORIG_SHA256" ]; then
        echo "$ORIG_SHA256  $orig" | sha256sum -c --quiet - >&2 \
            || { rm -rf "$tmp"; die "$ORIG does not have the expected SHA-256"; }
    fi
    step "unpack $PKG $VERSION source into cache"
    tar -C "$tmp" -xf "$orig" || { rm -rf "$tmp"; die "cannot unpack $orig"; }
    local tree="$tmp/${TREE:-$PKG-$VERSION}" mark="${TREE_MARK:-configure}"
    [ -e "$tree/$mark" ] || { rm -rf "$tmp"; die "unpacked tree has no $mark"; }
    if declare -F prepare_tree >/dev/null; then
        (cd "$tree" && prepare_tree) || { rm -rf "$tmp"; die "preparing the unpacked tree failed"; }
    fi
    local check="${VERSION_CHECK:-configure:^PACKAGE_VERSION='$VERSION'}"
    grep -q "${check#*:}" "$tree/${check%%:*}" \
        || { rm -rf "$tmp"; die "unpacked source is not $PKG $VERSION"; }
    if declare -F check_tree >/dev/null; then
        (cd "$tree" && check_tree) || { rm -rf "$tmp"; die "unpacked source is not $PKG $VERSION"; }
    fi
    touch "$tree/.trestle-complete"
    rm -rf "$CACHE"
    mv "$tree" "$CACHE" || die "cannot move source into $CACHE"
    rm -rf "$tmp"
}

# A fresh copy of the cached tree in BUILD=$OUT/$PKG-$VERSION-build (OUT made
# absolute); the working directory becomes BUILD.
copy_to_build() {
    step "copy source to build dir"
    mkdir -p "$OUT" || die "cannot create $OUT"
    OUT="$(cd "$OUT" && pwd)"
    BUILD="$OUT/$PKG-$VERSION-build"
    rm -rf "$BUILD"
    # -a keeps timestamps, so make does not try to rerun autoconf/automake (or
    # makeinfo, bison, flex on generated files that are newer than their sources)
    cp -a "$CACHE" "$BUILD" || die "cannot copy $CACHE to $BUILD"
    rm -f "$BUILD/.trestle-complete"
    cd "$BUILD"
    apply_patches
}

# Apply each of PATCHES (unified diffs against the upstream tree, -p1; the build's
# --patch options) in order; a patch that does not apply cleanly stops the build.
# The patched files keep a fresh timestamp, so make rebuilds what they feed.
apply_patches() {
    local p
    for p in "${PATCHES[@]}"; do
        step "apply $(basename "$p")"
        patch -p1 --forward --batch --quiet <"$p" >"$BUILD/trestle-patch.log" 2>&1 \
            || { cat "$BUILD/trestle-patch.log" >&2; die "patch $p does not apply to $PKG $VERSION"; }
    done
}

# ./configure --quiet with CC and CFLAGS and the given options, its output in
# trestle-configure.log. TRESTLE_CONFIG_CACHE=FILE (optional) shares configure
# results between builds with the SAME compiler and flags (the caller picks one file
# per compiler).
run_configure() {
    step "configure (CC=$CC_PATH)"
    local cache_opt=()
    if [ -n "${TRESTLE_CONFIG_CACHE:-}" ]; then
        mkdir -p "$(dirname "$TRESTLE_CONFIG_CACHE")"
        cache_opt=(--cache-file="$(cd "$(dirname "$TRESTLE_CONFIG_CACHE")" && pwd)/$(basename "$TRESTLE_CONFIG_CACHE")")
    fi
    # FORCE_UNSAFE_CONFIGURE: gnulib's checks refuse to run as root without it.
    if ! FORCE_UNSAFE_CONFIGURE=1 ./configure --quiet "${cache_opt[@]}" CC="$CC_PATH" CFLAGS="$CFLAGS_ARG" LDFLAGS="$LDFLAGS_ARG" "$@" \
            >"$BUILD/trestle-configure.log" 2>&1; then
        tail -n 30 "$BUILD/trestle-configure.log" >&2
        die "configure failed; see $BUILD/trestle-configure.log and $BUILD/config.log"
    fi
}

JOBS="${TRESTLE_JOBS:-$(nproc 2>/dev/null || echo 2)}"

# make the given targets of a gnulib-based tree, its output in trestle-make.log.
# Targets other than all/check/install do not build BUILT_SOURCES (gnulib's
# replacement headers etc.), so those come first; building only the programs skips
# the manuals (makeinfo, help2man).
make_programs() {
    step "make $*"
    local built_sources
    built_sources="$(make -s -f Makefile -f - print-built-sources <<'MAKE' 2>/dev/null || true
print-built-sources:
	@echo $(BUILT_SOURCES)
MAKE
)"
    if ! { { [ -z "$built_sources" ] || make -j"$JOBS" $built_sources; } \
            && make -j"$JOBS" "$@"; } >"$BUILD/trestle-make.log" 2>&1; then
        tail -n 40 "$BUILD/trestle-make.log" >&2
        die "make failed; see $BUILD/trestle-make.log"
    fi
}

# Copy each built program (paths relative to BUILD) to $OUT/bin.
install_programs() {
    step "install binaries to $OUT/bin"
    mkdir -p "$OUT/bin"
    local p
    for p in "$@"; do
        [ -x "$p" ] || die "$p was not built"
        cp -f "$p" "$OUT/bin/"
        # trestle-cc's lean sibling (what the system fuzzer runs), when it linked one;
        # any older one there is stale.
        local lean
        lean="$(dirname "$p")/.$(basename "$p").trestle-lean"
        rm -f "$OUT/bin/.$(basename "$p").trestle-lean"
        if [ -x "$lean" ]; then
            cp -f "$lean" "$OUT/bin/"
        fi
        echo "built $OUT/bin/$(basename "$p")" >&2
    done
    STEP="done"
    echo "== [${SECONDS}s] done" >&2
}

# Shared steps of the scripts that build a Debian source package with a given
# compiler (tests/sed/build.sh, tests/bc/build.sh). Sourced after the caller defined
# `die` and `step` and parsed its arguments (CC_ARG).

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

//! Fixed text of an export: the C helpers every exported test carries, and the
//! `build.sh` template that builds tests against the subject's own objects.

use super::SUBJECT_MAIN;

/// Run-time helpers every exported test carries.
pub(super) const HELPERS: &str = r#"/* A heap extent: a malloc'ed copy, so the function may free or realloc it. */
static unsigned char *heap_copy(const unsigned char *bytes, size_t len, size_t align)
{
    unsigned char *p = align > 16 ? aligned_alloc(align, (len + align - 1) / align * align) : malloc(len);
    if (!p) {
        perror("heap_copy");
        exit(3);
    }
    memcpy(p, bytes, len);
    return p;
}

/* Open PATH as descriptor FD at OFFSET, as the program had it open. */
static int reopen(int fd, const char *path, int flags, long long offset)
{
    int got = open(path, flags & ~O_TRUNC, 0644);
    if (got < 0) {
        fprintf(stderr, "warning: cannot reopen %s as descriptor %d\n", path, fd);
        return -1;
    }
    if (offset >= 0)
        lseek(got, (off_t)offset, SEEK_SET);
    if (fd >= 0 && got != fd) {
        dup2(got, fd);
        close(got);
        got = fd;
    }
    return got;
}

/* A stream on PATH, as the program had it open (on /dev/null if it is gone). */
static FILE *reopen_stream(int fd, const char *path, int flags, long long offset, const char *mode)
{
    int got = reopen(fd, path, flags, offset);
    FILE *f = got >= 0 ? fdopen(got, mode) : NULL;
    return f ? f : fopen("/dev/null", mode);
}

static float float_of(uint32_t bits) { float f; memcpy(&f, &bits, sizeof f); return f; }
static double double_of(uint64_t bits) { double d; memcpy(&d, &bits, sizeof d); return d; }
"#;

pub(super) const AT_AND_PUT: &str = r#"/* The address OFFSET bytes into extent I. */
static void *at(int i, uint64_t offset) { return (void *)((uintptr_t)mem[i] + offset); }

/* Store pointer P in the word OFFSET bytes into extent I. */
static void put(int i, uint64_t offset, const void *p) { memcpy(mem[i] + offset, &p, sizeof p); }

"#;

/// The build script written next to an exported test. `default_test` is the file name
/// of the test it was written with; it builds any exported test it is given.
pub fn build_script(default_test: &str) -> String {
    BUILD_SH
        .replace("@DEFAULT_TEST@", &default_test.replace('\'', ""))
        .replace("@SUBJECT_MAIN@", SUBJECT_MAIN)
        .replace("@TRESTLE_CC@", &beside_trestle("trestle-cc"))
        .replace("@TRESTLE_CXX@", &beside_trestle("trestle-cxx"))
}

/// The tool installed next to this trestle, or its bare name (then found on PATH).
fn beside_trestle(tool: &str) -> String {
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join(tool)))
        .filter(|p| p.is_file())
        .map(|p| p.display().to_string().replace('\'', ""))
        .unwrap_or_else(|| tool.to_owned())
}

const BUILD_SH: &str = r#"#!/bin/sh
# Build unit tests exported by `trestle export` against the subject's own code.
#
#   ./build.sh [-o OUT] [TEST.c ...] SUBJECT.c|SUBJECT.o ... [-lLIB ...]
#
# Subject sources are compiled with $CC -g -O0 (plus $CFLAGS); object files are used
# as given, those of the trestle-cc build the unit was recorded from included (they
# are linked by trestle-cc, $TRESTLE_CC, which adds its runtime). Static functions and globals the test needs are made global in a copy of
# each object (objcopy --globalize-symbol) and the subject's main is renamed, so the
# test can call into the subject. Without a TEST.c, builds '@DEFAULT_TEST@'.
# Each test becomes an executable named after it, next to it (or OUT).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
CC=${CC:-clang-19}
CXX=${CXX:-clang++-19}
CFLAGS=${CFLAGS:-}
LDFLAGS=${LDFLAGS:-}
pick() { for t in "$@"; do if command -v "$t" >/dev/null 2>&1; then echo "$t"; return; fi; done; echo "build.sh: none of $* is installed" >&2; exit 2; }
OBJCOPY=${OBJCOPY:-$(pick llvm-objcopy-19 objcopy llvm-objcopy)}
NM=${NM:-$(pick llvm-nm-19 nm llvm-nm)}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=""
tests=""
objects=""
linkargs=""
cxx=0
n=0
while [ $# -gt 0 ]; do
    case "$1" in
    -o) out=$2; shift 2; continue ;;
    *.c)
        if head -n 1 "$1" | grep -q '^/\* Unit test exported by trestle'; then
            tests="$tests $1"
        else
            n=$((n + 1)); $CC -g -O0 $CFLAGS -c "$1" -o "$work/subject$n.o"; objects="$objects $work/subject$n.o"
            echo "$work/subject$n.o $1" >>"$work/origins"
        fi ;;
    *.cc|*.cpp|*.cxx|*.C)
        n=$((n + 1)); cxx=1; $CXX -g -O0 $CFLAGS -c "$1" -o "$work/subject$n.o"; objects="$objects $work/subject$n.o"
        echo "$work/subject$n.o $1" >>"$work/origins" ;;
    *.o)
        n=$((n + 1)); cp "$1" "$work/subject$n.o"; objects="$objects $work/subject$n.o"
        echo "$work/subject$n.o $1" >>"$work/origins" ;;
    *) linkargs="$linkargs $1" ;;
    esac
    shift
done
[ -n "$tests" ] || tests="$here/@DEFAULT_TEST@"
if [ -z "$objects" ]; then
    echo "usage: $0 [-o OUT] [TEST.c ...] SUBJECT.c|SUBJECT.o ... [-lLIB ...]" >&2
    exit 2
fi
if [ -n "$out" ] && [ "$(echo $tests | wc -w)" -gt 1 ]; then
    echo "build.sh: -o names one executable, but there are several tests" >&2
    exit 2
fi
origin() { awk -v o="$1" '$1 == o { $1 = ""; sub(/^ /, ""); print; exit }' "$work/origins"; }
stem() { b=$(basename "$1"); echo "${b%.*}"; }

# The symbols the tests use: "symbol NAME KIND SIZE LINKAGE MODULE" lines of their headers.
for t in $tests; do
    sed -n 's/^ \*   symbol //p' "$t"
done | sort -u >"$work/symbols"

# Which object defines each static symbol: the only one that has it, else the one
# named after the symbol's source file.
: >"$work/globalize"
while read -r name kind size linkage module; do
    [ "$linkage" = local ] || continue
    defs=""
    for o in $objects; do
        if $NM --defined-only "$o" 2>/dev/null | awk -v s="$name" '$NF == s { f = 1 } END { exit !f }'; then
            defs="$defs $o"
        fi
    done
    count=$(echo $defs | wc -w)
    if [ "$count" -gt 1 ]; then
        pick_def=""
        for o in $defs; do
            if [ "$(stem "$(origin "$o")")" = "$(stem "$module")" ]; then pick_def=$o; fi
        done
        if [ -z "$pick_def" ]; then
            echo "build.sh: static symbol $name is defined in several objects ($(for o in $defs; do origin "$o"; done | tr '\n' ' ')); the test needs the one from $module" >&2
            exit 1
        fi
        defs=$pick_def
    fi
    for o in $defs; do echo "$o $name" >>"$work/globalize"; done
done <"$work/symbols"

for o in $objects; do
    args="--redefine-sym main=@SUBJECT_MAIN@"
    for s in $(awk -v o="$o" '$1 == o { print $2 }' "$work/globalize"); do
        args="$args --globalize-symbol=$s"
    done
    $OBJCOPY $args "$o"
done

# Every symbol the tests need must be there (static ones can be gone: inlined and
# dropped, or renamed, when the subject was optimised), with the size the unit recorded.
for o in $objects; do $NM -S --defined-only "$o"; done >"$work/defined" 2>/dev/null || true
status=0
while read -r name kind size linkage module; do
    want=$name
    [ "$want" = main ] && want=@SUBJECT_MAIN@
    line=$(awk -v s="$want" '$NF == s { print; exit }' "$work/defined")
    if [ -z "$line" ]; then
        if [ "$linkage" = local ]; then
            echo "build.sh: static $kind $name (from $module) is not in the subject's objects: optimisation inlined or removed it; compile the subject with -O0 (or at least -fno-inline)" >&2
            status=1
        fi
        continue
    fi
    if [ "$kind" = data ]; then
        got=$(echo "$line" | awk 'NF == 4 { print $2 }')
        if [ -n "$got" ] && [ "$(printf '%d' "0x$got")" != "$size" ]; then
            echo "build.sh: global $name has $(printf '%d' "0x$got") bytes in the subject's objects, $size in the recorded unit: the source changed since the recording, or optimisation shrank it (a global that only ever holds two values becomes one byte at -O2); build against the objects of the trestle-cc build the unit was recorded from" >&2
            status=1
        fi
    fi
done <"$work/symbols"
[ "$status" = 0 ] || exit "$status"

if [ "$cxx" = 1 ] || for o in $objects; do $NM -u "$o"; done 2>/dev/null | grep -q '__gxx_personality\|_ZSt\|__cxa_'; then
    linker=$CXX
    wrapper=${TRESTLE_CXX:-'@TRESTLE_CXX@'}
else
    linker=$CC
    wrapper=${TRESTLE_CC:-'@TRESTLE_CC@'}
fi
# Objects of a trestle-cc build (the build the unit was recorded from) call the
# carving runtime: its wrapper links them, adding it (inert without trestle's
# variables).
if for o in $objects; do $NM -u "$o"; done 2>/dev/null | grep -q '__trestle_'; then
    command -v "$wrapper" >/dev/null 2>&1 || {
        echo "build.sh: the objects were built by trestle-cc and need its runtime; set TRESTLE_CC (TRESTLE_CXX) to the wrapper" >&2
        exit 2
    }
    linker=$wrapper
fi
for t in $tests; do
    exe=${out:-$(dirname "$t")/$(stem "$t")}
    $CC -g -O0 $CFLAGS -c "$t" -o "$work/test.o"
    $linker -g $LDFLAGS "$work/test.o" $objects $linkargs -lm -o "$exe"
    echo "built $exe"
done
"#;

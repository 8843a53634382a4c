#!/usr/bin/env bash
# Build every subject under tests/subjects/ at -O0 and -O2 and run each of its
# seeds (tests/subjects/<name>/seeds/*.json) in a fresh temporary directory,
# checking that every run exits with status 0.
#
# Usage: tests/subjects/check-seeds.sh [subject...]
# Env:   CC / CXX     compilers (default clang-19 / clang++-19)
#        SANITIZE=1   also build and run an -O1 ASan+UBSan variant
#        VERBOSE=1    print each seed's stdout
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CC="${CC:-clang-19}"
CXX="${CXX:-clang++-19}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

subjects=("$@")
if [ ${#subjects[@]} -eq 0 ]; then
    for d in "$here"/*/; do
        [ -d "$d/seeds" ] && subjects+=("$(basename "$d")")
    done
fi

variants=("O0:-O0 -g" "O2:-O2")
if [ "${SANITIZE:-0}" = 1 ]; then
    variants+=("san:-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all")
fi

fail=0
total=0
for s in "${subjects[@]}"; do
    dir="$here/$s"
    shopt -s nullglob
    csrc=("$dir"/*.c)
    cxxsrc=("$dir"/*.cpp)
    shopt -u nullglob
    if [ ${#cxxsrc[@]} -gt 0 ]; then
        compiler="$CXX"; srcs=("${cxxsrc[@]}")
    else
        compiler="$CC"; srcs=("${csrc[@]}")
    fi
    for v in "${variants[@]}"; do
        tag="${v%%:*}"
        flags="${v#*:}"
        exe="$work/$s.$tag"
        # shellcheck disable=SC2086
        if ! "$compiler" $flags -Wall -Wextra -Werror "${srcs[@]}" -o "$exe"; then
            echo "FAIL build $s ($tag)"
            fail=$((fail + 1))
            continue
        fi
        for seed in "$dir"/seeds/*.json; do
            total=$((total + 1))
            name="$s/$(basename "$seed" .json) [$tag]"
            rundir="$(mktemp -d "$work/run.XXXXXX")"
            if python3 - "$seed" "$exe" "$rundir" <<'PY'
import base64, json, os, subprocess, sys
seed, exe, rundir = sys.argv[1:4]
with open(seed, encoding="utf-8") as f:
    t = json.load(f)
if not isinstance(t, dict):
    sys.exit("seed is not a JSON object")

def content(v):
    if isinstance(v, str):
        return v.encode("utf-8")
    return base64.b64decode(v["base64"])

for name, v in t.get("files", {}).items():
    p = os.path.join(rundir, name)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb") as f:
        f.write(content(v))
env = dict(os.environ)
env.update(t.get("env", {}))
stdin = content(t["stdin"]) if "stdin" in t else b""
r = subprocess.run([exe] + list(t.get("args", [])), input=stdin, cwd=rundir,
                   env=env, capture_output=True, timeout=30)
if os.environ.get("VERBOSE") == "1":
    sys.stdout.write(r.stdout.decode("utf-8", "replace"))
if r.returncode != 0:
    sys.stderr.write(r.stderr.decode("utf-8", "replace"))
    sys.exit("exit status %d" % r.returncode)
PY
            then
                echo "ok   $name"
            else
                echo "FAIL $name"
                fail=$((fail + 1))
            fi
        done
    done
done

echo "$((total - fail))/$total seed runs passed, $fail failure(s)"
[ "$fail" -eq 0 ]

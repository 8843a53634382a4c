#!/usr/bin/env bash
# Run system-test seeds (JSON) against a program binary.
#
# usage: run-seeds.sh [-v] BIN SEEDS_DIR
#
# For each SEEDS_DIR/*.json: make a fresh temp dir, create the seed's "files"
# there, run BIN (with argv[0] = its basename) and the seed's "args" in that
# dir, feed "stdin" (empty if absent), environment = PATH=/usr/bin:/bin plus
# the seed's "env". Prints one line per seed:
#   NAME  exit=N  stdout=NB  stderr=NB
# With -v also prints stdout and stderr. Exits 1 if a seed could not be run
# (bad JSON, timeout, killed by a signal), else 0; a non-zero exit status of
# BIN is reported, not treated as a failure.
set -euo pipefail
VERBOSE=0
if [ "${1:-}" = "-v" ]; then VERBOSE=1; shift; fi
if [ $# -ne 2 ]; then
    sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
exec python3 - "$1" "$2" "$VERBOSE" <<'PY'
import base64, json, os, subprocess, sys, tempfile, glob

bin_path, seeds_dir, verbose = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
bin_path = os.path.abspath(bin_path)
if not os.access(bin_path, os.X_OK):
    sys.exit(f"run-seeds: not an executable: {bin_path}")
seeds = sorted(glob.glob(os.path.join(seeds_dir, "*.json")))
if not seeds:
    sys.exit(f"run-seeds: no *.json in {seeds_dir}")

def content(v):
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, dict) and "base64" in v:
        return base64.b64decode(v["base64"])
    raise ValueError(f"bad file content: {v!r}")

broken = 0
width = max(len(os.path.basename(s)[:-5]) for s in seeds)
for path in seeds:
    name = os.path.basename(path)[:-5]
    try:
        with open(path, encoding="utf-8") as f:
            seed = json.load(f)
        args = seed.get("args", [])
        if not all(isinstance(a, str) for a in args):
            raise ValueError("args must be strings")
        stdin = seed.get("stdin", "")
        stdin = content(stdin) if stdin is not None else b""
        env = {"PATH": "/usr/bin:/bin"}
        env.update({str(k): str(v) for k, v in seed.get("env", {}).items()})
        with tempfile.TemporaryDirectory(prefix="seed-") as wd:
            for fname, v in seed.get("files", {}).items():
                fp = os.path.join(wd, fname)
                if os.path.commonpath([wd, os.path.abspath(fp)]) != wd:
                    raise ValueError(f"file outside work dir: {fname}")
                os.makedirs(os.path.dirname(fp), exist_ok=True)
                with open(fp, "wb") as f:
                    f.write(content(v))
            p = subprocess.run([os.path.basename(bin_path)] + args,
                               executable=bin_path, cwd=wd, env=env,
                               input=stdin, capture_output=True, timeout=10)
    except subprocess.TimeoutExpired:
        print(f"{name:<{width}}  TIMEOUT"); broken += 1; continue
    except Exception as e:
        print(f"{name:<{width}}  ERROR {e}"); broken += 1; continue
    status = f"exit={p.returncode}" if p.returncode >= 0 else f"SIGNAL={-p.returncode}"
    if p.returncode < 0:
        broken += 1
    print(f"{name:<{width}}  {status:<7}  stdout={len(p.stdout)}B  stderr={len(p.stderr)}B")
    if verbose:
        for label, data in (("stdout", p.stdout), ("stderr", p.stderr)):
            if data:
                print(f"  --- {label}:")
                for line in data.decode("utf-8", "backslashreplace").splitlines():
                    print("  | " + line)
sys.exit(1 if broken else 0)
PY

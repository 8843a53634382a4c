#!/usr/bin/env python3
"""Time to bug and coverage over time: the bridge (`trestle run`) against the
system-level fuzzer alone (`trestle run --system-only`) and against AFL++ at full
strength, on subjects with planted bugs: the bundled requests and kvshell, and the
paper's six real programs (coreutils 9.1 cut, paste, tac, b2sum; GNU sed 4.9; dc from
bc 1.07.1), built from Debian sources with the patches of bench/bugs/PROG/ (three
planted bugs each, listed in bench/bugs/PROG/bugs.json). Pictures: bench/plots.py.

    python3 bench/bugs.py [--subjects cut,sed,dc,...] [--reps 5] [--time 600]
                          [--columns bridge,system-only,aflpp] [--jobs 1]
                          [--smoke] [--table-only] [--self-check] [--work DIR]
                          [--results DIR] [--stop-by HH:MM]

Columns (one core each; --jobs 2 runs two at a time on a 2-core machine; each run binds
itself to a free core, so do not bind this script with taskset: afl-fuzz counts a
process bound to a core alone as taking it, and then finds no free core):
  bridge       trestle run --program TRESTLE_BUILD --seeds SEEDS --validate-with COV_BUILD
               --time T --out DIR --seed REP+1 --plain
  system-only  the same with --system-only
  aflpp        Debian's afl++ (afl-fuzz, one instance): an afl-clang-fast build, a CmpLog
               build (AFL_LLVM_CMPLOG=1) passed with -c and `-l 2AT`, the dictionary
               AFL_LLVM_DICT2FILE wrote while compiling passed with -x, the subject's seeds
               turned into AFL inputs, -V T, -s REP+1.

  changed      the bridge with --changed-since HEAD --source TREE, TREE a work tree whose
               one uncommitted change is the patch of the program's first bug; the run
               stops once an alarm in that bug's function is reported (its question is
               the time to that alarm, so it has no coverage curve).

Every crash a column reports is classified by the innermost frame of the subject's own
code on its crash stack when the crashing system test runs on the plain build (clang-19
-O2 -g) under `trestle validate --json`: a bug is found when that frame is on a line the
bug's patch added (the planted code itself failed; the lines are looked up in the
patched source the plain build compiled) or, failing that, is in the bug's function; a
crash elsewhere is an "other crash" (with its signature); a reported crash that does not
crash the plain build is kept as "unreproduced".

Times (seconds since the start of the run):
  trestle  an alarm's `found_at` in alarms.json when present; otherwise the first row of
           timeline.csv whose `alarms` column reaches the alarm's rank, the alarms ranked
           by the time their files under alarms/<id>/ were written (alarms.json is sorted
           by deduplication key, not by discovery). timeline.csv is sampled every ~2 s
           while system fuzzing and once per round, so this is an upper bound that can be
           late by up to one unit round (~10-20 s).
  AFL++    `time:` (ms since the fuzzer started) in the name of each file of
           out/default/crashes/.
A bug's time is the earliest crash classified to it; a run that does not find it counts
as the full budget in medians and tests.

Coverage over time (the six programs): every system test a run produced (trestle: its
queue, crashes, effective lifted tests and alarms, timed by file modification within the
session that wrote them; AFL++: its queue and crashes, timed by `time:`), plus the
seeds, replayed window by window (every 30 s) on a clang coverage build with `trestle
exec`; branch coverage of the program's own files as bench/paper.py defines them.

Outputs: bench/results/bugs/<subject>/<column>-<rep>.json per run, written when the run
ends (re-running skips finished runs; an interrupted trestle campaign goes on with
`trestle run --resume`, an interrupted AFL++ run starts again), and
bench/results/bugs/<subject>.md, rewritten after every run. Builds, campaign and AFL++
output directories live in WORK (default ~/.cache/trestle/bench-bugs).
"""
import argparse, base64, csv, hashlib, json, math, os, platform, re, shutil, signal, statistics, subprocess
import sys, threading, time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RELEASE = REPO / "target" / "release"
RESULTS = REPO / "bench" / "results" / "bugs"
TOOLS = ["trestle", "trestle-exec", "trestle-fuzz-launcher", "libtrestle_crashstack.so", "libtrestle_inproc.so"]
COLUMNS = ["bridge", "system-only", "aflpp", "changed"]
# The columns run unless --columns says otherwise ("changed": the bridge told which
# function a change touched, the six programs only; see changed_tree).
DEFAULT_COLUMNS = ["bridge", "system-only", "aflpp"]
COV_FLAGS = ["-O1", "-g", "-fprofile-instr-generate", "-fcoverage-mapping"]
PLAIN_FLAGS = ["-O2", "-g"]
# afl-fuzz at full strength: it binds itself to a free core, as trestle does.
AFL_ENV = {"AFL_NO_UI": "1", "AFL_SKIP_CPUFREQ": "1", "AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES": "1"}

# ---------------------------------------------------------------------------------
# Subjects. dir: under the repository; sources: file names in dir (None: every *.c /
# *.cc / *.cpp in it); seeds / crashers: sub-directories of dir; afl: how a system test
# maps to an AFL++ input:
#   {"mode": "stdin"}                          the test's stdin bytes; its args are dropped
#   {"mode": "file", "args": [...], "file": N} `prog ARGS... @@`; the input is the test's
#                                               file N (or its only file)
# bugs: {bug name: innermost function of the crash on the plain build}.
# ---------------------------------------------------------------------------------
SUBJECTS = {
    "requests": {
        "dir": "tests/subjects/requests",
        "sources": ["requests.c"],
        "seeds": "seeds",
        "crashers": "crashers",
        # The seeds use arguments and stdin; AFL++ fuzzes stdin only (no arguments), so
        # it gets the stdin of the five seeds that have one (set, login, token, echo/sum,
        # mixed) and never the args-only seeds (set_args, login_args).
        "afl": {"mode": "stdin"},
        "bugs": {"store_value": "store_value", "check_login": "check_login"},
        "note": "AFL++ fuzzes stdin only: the seeds' arguments are dropped (set_args and login_args give "
                "no AFL++ input; the others give their stdin). Every request can be written on stdin, so "
                "no bug is out of AFL++'s reach.",
    },
    "kvshell": {
        "dir": "tests/subjects/kvshell",
        "sources": ["kvshell.c"],
        "seeds": "seeds",
        "crashers": "crashers",
        "afl": {"mode": "stdin"},
        # From tests/subjects/kvshell/SUBJECT.md: bug 1 (set KEY 90210 with a 5..15
        # character key) and bug 2 (swap with a missing second key). Bug 3 (key_hash) is
        # unit-only, so a crash there would be an "other crash" (a false alarm).
        "bugs": {"store_value": "store_value", "swap_values": "swap_values"},
        "note": "stdin-driven (arguments ignored): AFL++ gets exactly the seeds' stdin.",
    },
}

# The paper's six real programs, from Debian source packages (built by tests/*/build.sh
# with the patches of bench/bugs/PROG/ applied, in name order). Their bugs come from
# bench/bugs/PROG/bugs.json ({name: innermost function}); AFL++ fuzzes their arguments
# and stdin through bench/aflpp/argv_stdin.c ("argv" mode: a system test's arguments,
# with its one input file given on stdin instead, see test_to_afl).
PACKAGES = {
    "coreutils": {"script": "tests/coreutils/build.sh", "prog_args": True},
    "sed": {"script": "tests/sed/build.sh", "prog_args": False},
    "bc": {"script": "tests/bc/build.sh", "prog_args": False},
}
ARGV_HARNESS = REPO / "bench" / "aflpp" / "argv_stdin.c"


def planted(prog, package, seeds):
    return {"dir": f"bench/bugs/{prog}", "prog": prog, "package": package, "seeds_path": seeds,
            "crashers": "crashers", "afl": {"mode": "argv"}, "bugs": {}, "sources": None,
            "note": "AFL++ fuzzes the arguments and stdin (bench/aflpp/argv_stdin.c); a seed's one input "
                    "file becomes its stdin, and a seed with several files keeps only its arguments."}


SUBJECTS.update({p: planted(p, "coreutils", f"tests/coreutils/{p}/seeds") for p in ["cut", "paste", "tac", "b2sum"]})
SUBJECTS["sed"] = planted("sed", "sed", "tests/sed/seeds")
SUBJECTS["dc"] = planted("dc", "bc", "tests/bc/dc-seeds")
for _name, _cfg in SUBJECTS.items():
    _table = REPO / _cfg["dir"] / "bugs.json"
    if _cfg.get("package") and _table.exists():
        _cfg["bugs"] = {b["name"]: b["function"] for b in json.loads(_table.read_text())["bugs"]}


def log(msg):
    print(f"[bugs {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def write_atomic(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # two invocations may share the results
    tmp.write_text(text)
    os.replace(tmp, path)


def content(c):
    """A test's stdin or file: text, or {"base64": ...}; bytes."""
    if c is None:
        return b""
    if isinstance(c, dict):
        return base64.b64decode(c["base64"])
    return c.encode()


def sha1_files(paths):
    h = hashlib.sha1()
    for p in paths:
        h.update(str(p).encode())
        h.update(Path(p).read_bytes() if Path(p).exists() else b"-")
    return h.hexdigest()


def subject_dir(name):
    return REPO / SUBJECTS[name]["dir"]


def seeds_dir(name):
    cfg = SUBJECTS[name]
    return REPO / cfg["seeds_path"] if cfg.get("seeds_path") else subject_dir(name) / cfg["seeds"]


# Subjects whose seeds --seeds replaced: their runs live apart from the usual ones.
OTHER_SEEDS = {}


def run_dir_of(work, subj, col, rep):
    tag = ""
    if subj in OTHER_SEEDS:
        tag = "@seeds-" + hashlib.sha1(str(OTHER_SEEDS[subj]).encode()).hexdigest()[:8]
    return work / "runs" / f"{subj}{tag}" / f"{col}-{rep}"


def patches(name):
    return sorted(subject_dir(name).glob("*.patch"))


def subject_sources(name):
    cfg = SUBJECTS[name]
    d = subject_dir(name)
    if cfg["sources"]:
        return [d / s for s in cfg["sources"]]
    return sorted(p for p in d.iterdir() if p.suffix in (".c", ".cc", ".cpp", ".cxx"))


def is_cxx(sources):
    return any(p.suffix != ".c" for p in sources)


def subject_problem(name):
    """Why the subject cannot run yet, or None."""
    cfg = SUBJECTS[name]
    d = subject_dir(name)
    if not d.is_dir():
        return f"{d} does not exist yet"
    if cfg.get("package"):
        if not cfg["bugs"]:
            return f"no bug table in {d / 'bugs.json'}"
        if not patches(name):
            return f"no patches in {d}"
        return None if seeds_dir(name).is_dir() else f"no seeds in {seeds_dir(name)}"
    if not cfg["bugs"]:
        return f"its bug table is a TODO in bench/bugs.py (fill it in from {d / 'SUBJECT.md'})"
    if not subject_sources(name):
        return f"no sources in {d}"
    if not (d / cfg["seeds"]).is_dir():
        return f"no seeds in {d / cfg['seeds']}"
    return None


# ---------------------------------------------------------------------------------
# system test <-> AFL++ input
# ---------------------------------------------------------------------------------

def test_to_afl(test, afl):
    """The AFL++ input of a system test, or None when it has none."""
    if afl["mode"] == "stdin":
        data = content(test.get("stdin"))
    elif afl["mode"] == "argv":
        files = test.get("files", {})
        args = list(test.get("args", []))
        stdin = content(test.get("stdin"))
        named = [a for a in args if a in files]
        if len(files) == 1 and len(named) == 1 and not stdin:
            # The one input file, on stdin instead ("-" reads it there).
            stdin = content(files[named[0]])
            args = ["-" if a == named[0] else a for a in args]
        if any("\0" in a for a in args):
            return None
        data = b"".join(a.encode() + b"\0" for a in args) + b"\0" + stdin
        return data
    elif afl["mode"] == "file":
        files = test.get("files", {})
        if afl.get("file"):
            data = content(files.get(afl["file"])) if afl["file"] in files else b""
        else:
            data = content(next(iter(files.values()))) if len(files) == 1 else b""
    else:
        raise ValueError(f"unknown AFL++ input mode {afl['mode']}")
    return data or None  # afl-fuzz skips empty inputs


def afl_to_test(data, afl):
    """The system test an AFL++ input stands for."""
    if afl["mode"] == "argv":
        # As bench/aflpp/argv_stdin.c reads it: NUL-ended arguments up to an empty one
        # (at most 64), the rest stdin; an input cut short is all arguments.
        args, rest, start = [], b"", 0
        while True:
            end = data.find(b"\0", start)
            if end < 0:
                if start < len(data):
                    args.append(data[start:])
                break
            if end == start:
                rest = data[end + 1:]
                break
            args.append(data[start:end])
            start = end + 1
        args = args[:64]
        # trestle's system tests hold arguments as text: bytes that are not UTF-8 become
        # U+FFFD (such a crash may then not reproduce, and is counted as unreproduced).
        t = {"args": [a.decode("utf-8", "replace") for a in args]}
        if rest:
            t["stdin"] = {"base64": base64.b64encode(rest).decode()}
        return t
    if afl["mode"] == "stdin":
        t = {"stdin": {"base64": base64.b64encode(data).decode()}}
        if afl.get("args"):
            t["args"] = list(afl["args"])
        return t
    name = afl.get("file") or "input"
    return {"args": list(afl.get("args", [])) + [name], "files": {name: {"base64": base64.b64encode(data).decode()}}}


def afl_target_args(afl):
    if afl["mode"] in ("stdin", "argv"):
        return list(afl.get("args", []))
    return list(afl.get("args", [])) + ["@@"]


# ---------------------------------------------------------------------------------
# classification: trestle validate on the plain build
# ---------------------------------------------------------------------------------

def validate(trestle, plain, tests, scratch, timeout="5s"):
    """Run the system tests (list of dicts) on the plain build with `trestle validate
    --json`; returns one dict per test (status, crash, frames), in order."""
    if not tests:
        return []
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    paths = []
    for i, t in enumerate(tests):
        p = scratch / f"t{i:05d}.json"
        p.write_text(json.dumps(t))
        paths.append(p)
    r = subprocess.run([str(trestle), "validate", "--program", str(plain), "--json", "--timeout", timeout, str(scratch)],
                       capture_output=True, text=True)
    by_path = {}
    for line in r.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                o = json.loads(line)
            except ValueError:
                continue
            by_path[str(Path(o.get("test", "")).resolve())] = o
    out = []
    for p in paths:
        o = by_path.get(str(p.resolve()))
        if o is None:
            raise RuntimeError(f"trestle validate gave no result for {p} (exit {r.returncode}): {r.stderr[-2000:]}")
        out.append(o)
    shutil.rmtree(scratch, ignore_errors=True)
    return out


def added_lines(subj, tree):
    """{bug: {(file, line)}}: the lines each planted bug's patch added, as numbered in
    the patched source tree `tree` that the builds compiled. Each hunk is found in the
    final text by its new side (context and added lines), nearest to where it says it
    goes: patches apply with offsets, and later ones move the lines of earlier ones."""
    table = subject_dir(subj) / "bugs.json"
    if not table.exists():
        return {}
    bug_of = {b["patch"]: b["name"] for b in json.loads(table.read_text())["bugs"]}
    texts, out = {}, {}
    for patch in patches(subj):
        bug = bug_of.get(patch.name)
        if bug is None:
            continue
        for path, hunks in parse_patch(patch.read_text(errors="replace")):
            if path not in texts:
                f = tree / path
                texts[path] = f.read_text(errors="replace").splitlines() if f.exists() else []
            text = texts[path]
            for start, block in hunks:
                new_lines = [l for l in block if l[:1] in (" ", "+")]
                new_side = [l[1:] for l in new_lines]
                plus = [i for i, l in enumerate(new_lines) if l[0] == "+"]
                at = find_block(text, new_side, start - 1)
                if at is not None:
                    out.setdefault(bug, set()).update((path, at + i + 1) for i in plus)
                    continue
                # A later patch changed the context: find each run of added lines alone.
                for run in runs(plus):
                    at = find_block(text, [new_side[i] for i in run], start - 1 + run[0])
                    if at is not None:
                        out.setdefault(bug, set()).update((path, at + k + 1) for k in range(len(run)))
    return out


def parse_patch(text):
    """[(path, [(new start, hunk lines)])] of a unified diff applied with -p1."""
    files, hunks = [], None
    for line in text.splitlines():
        if line.startswith("+++ "):
            path = line[4:].split("\t")[0].strip()
            hunks = []
            files.append((path.split("/", 1)[1] if "/" in path else path, hunks))
        elif line.startswith("@@ ") and hunks is not None:
            m = re.match(r"@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@", line)
            hunks.append((int(m.group(1)), []))
        elif hunks and line[:1] in (" ", "-", "+") and not line.startswith(("--- ", "+++ ")):
            hunks[-1][1].append(line)
    return files


def runs(indexes):
    """Consecutive runs of sorted indexes: [1, 2, 5] -> [[1, 2], [5]]."""
    out = []
    for i in indexes:
        if out and out[-1][-1] == i - 1:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def find_block(text, block, near):
    """The index in `text` where the lines `block` occur (ignoring trailing blanks),
    nearest to index `near`; None when they do not."""
    if not block:
        return None
    want = [l.rstrip() for l in block]
    first = want[0]
    hits = [i for i, l in enumerate(text) if l.rstrip() == first and [x.rstrip() for x in text[i:i + len(want)]] == want]
    return min(hits, key=lambda i: abs(i - near)) if hits else None


ADDED_LINES = {}


def classify(v, subj):
    """(kind, what): ("bug", name), ("other", signature) or ("none", status). A crash
    is a bug's when the innermost frame of the program's own code is on a line that
    bug's patch added (the Magma way: the planted code itself failed), or else is in
    the bug's function."""
    if not v.get("crash"):
        limit = v.get("limit")
        return "none", (v.get("status") or "?") + (f" ({limit})" if limit else "")
    bugs = SUBJECTS[subj]["bugs"]
    own = next((f for f in (v.get("stack") or []) if f.get("own")), None)
    if own and own.get("file") and own.get("line"):
        for b, lines in ADDED_LINES.get(subj, {}).items():
            if b in bugs and any(own["line"] == l and (own["file"] == p or own["file"].endswith("/" + p)) for p, l in lines):
                return "bug", b
    frames = v.get("frames") or []
    by_fn = {fn: b for b, fn in bugs.items()}
    if frames and frames[0] in by_fn:
        return "bug", by_fn[frames[0]]
    return "other", v["crash"]


# ---------------------------------------------------------------------------------
# setup: tools and builds
# ---------------------------------------------------------------------------------

def ensure_afl():
    if shutil.which("afl-fuzz") and shutil.which("afl-clang-fast"):
        return
    log("afl-fuzz missing: apt-get install -y afl++")
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    r = subprocess.run(sudo + ["apt-get", "install", "-y", "-qq", "afl++"], env=env, stdout=subprocess.DEVNULL)
    if r.returncode != 0:
        subprocess.run(sudo + ["apt-get", "update", "-qq"], env=env, check=True)
        subprocess.run(sudo + ["apt-get", "install", "-y", "-qq", "afl++"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
    if not shutil.which("afl-fuzz"):
        sys.exit("bugs: afl-fuzz still missing after installing afl++")


def copy_tools(work):
    """A copy of trestle's binaries in WORK/bin, so a rebuild during the benchmark
    changes nothing (the same as bench/paper.py)."""
    if not (RELEASE / "trestle").exists():
        sys.exit(f"bugs: {RELEASE / 'trestle'} missing; build trestle first (cargo build --workspace --release)")
    bin_dir = work / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for t in TOOLS:
        src = RELEASE / t
        if not src.exists():
            sys.exit(f"bugs: {src} missing; build trestle first")
        dst = bin_dir / t
        if not dst.exists() or dst.read_bytes() != src.read_bytes():
            shutil.copy2(src, dst)
    for tool in ["clang-19", "bwrap"]:
        if not shutil.which(tool):
            sys.exit(f"bugs: {tool} not found (bash tests/setup.sh installs it)")
    return bin_dir


def build_package_variant(subj, variant, work):
    """Build one variant of a planted-bug program with its package's build script and
    every patch of bench/bugs/PROG/ (rebuilt when the patches, the compiler or the
    command change). Returns DIR/bin/PROG (for afl, the dictionary is DIR/bin/dict.txt)."""
    cfg = SUBJECTS[subj]
    pkg = PACKAGES[cfg["package"]]
    d = work / "build" / subj / variant
    (d / "bin").mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    cflags, ldflags, identity = " ".join(PLAIN_FLAGS), "", []
    if variant == "trestle":
        cc = str(RELEASE / "trestle-cc")
        identity = [RELEASE / "trestle-cc", RELEASE / "libtrestle_runtime.a"]
    elif variant in ("plain", "cov"):
        cc = "clang-19"
        cflags = " ".join(PLAIN_FLAGS if variant == "plain" else COV_FLAGS)
    elif variant in ("afl", "cmplog"):
        cc = "afl-clang-fast"
        # One object for every program: its path is part of LDFLAGS, which the
        # package's shared configure cache must see unchanged.
        harness = work / "build" / "configure" / "argv_stdin.o"
        harness.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["clang-19", "-O2", "-c", str(ARGV_HARNESS), "-o", str(harness)], check=True)
        ldflags = f"-Wl,--wrap=main {harness}"
        identity = [Path(shutil.which(cc) or cc), ARGV_HARNESS]
        if variant == "afl":
            env["AFL_LLVM_DICT2FILE"] = str(d / "bin" / "dict.txt")
        else:
            env["AFL_LLVM_CMPLOG"] = "1"
    else:
        raise ValueError(variant)
    # One configure cache per package, variant, compiler and flags: autoconf refuses a
    # cache made with another CC or other LDFLAGS (a work tree's trestle-cc is another CC).
    flags_key = hashlib.sha1(f"{cc}|{cflags}|{ldflags}".encode()).hexdigest()[:8]
    env["TRESTLE_CONFIG_CACHE"] = str(work / "build" / "configure" / f"{cfg['package']}-{variant}-{flags_key}.cache")
    cmd = ["bash", str(REPO / pkg["script"]), "--cc", cc, "--out", str(d), "--cflags", cflags]
    cmd += ["--ldflags", ldflags] if ldflags else []
    cmd += ["--prog", cfg["prog"]] if pkg["prog_args"] else []
    for patch in patches(subj):
        cmd += ["--patch", str(patch)]
    out = d / "bin" / cfg["prog"]
    stamp = d / "build.stamp"
    key = hashlib.sha1((json.dumps(cmd) + sha1_files(patches(subj) + identity)).encode()).hexdigest()
    if out.exists() and stamp.exists() and stamp.read_text() == key:
        return note_source(subj, variant, d, out)
    log(f"{subj}: building the {variant} variant")
    if variant == "afl":
        (d / "bin" / "dict.txt").unlink(missing_ok=True)
    logf = d / "build.log"
    with logf.open("w") as fh:
        fh.write(" ".join(cmd) + "\n")
        fh.flush()
        r = subprocess.run(cmd, stdout=fh, stderr=fh, env=env)
    if r.returncode != 0 or not out.exists():
        sys.exit(f"bugs: building {subj} ({variant}) failed; see {logf}")
    stamp.write_text(key)
    return note_source(subj, variant, d, out)


def note_source(subj, variant, d, out):
    """Crashes are classified on the plain build: read where its patched source has
    each bug's lines (ADDED_LINES). Returns `out`."""
    if variant == "plain":
        tree = next((p for p in d.iterdir() if p.is_dir() and p.name.endswith("-build")), None)
        if tree is not None:
            ADDED_LINES[subj] = added_lines(subj, tree)
    return out


def build_variant(subj, variant, work):
    """Build one variant of a subject (rebuilt when the sources, the compiler or the
    command change). Returns the binary (and for afl, the dictionary next to it)."""
    if SUBJECTS[subj].get("package"):
        return build_package_variant(subj, variant, work)
    srcs = subject_sources(subj)
    cxx = is_cxx(srcs)
    d = work / "build" / subj
    d.mkdir(parents=True, exist_ok=True)
    out = d / f"{subj}-{variant}"
    env = dict(os.environ)
    if variant == "trestle":
        cc = str(RELEASE / ("trestle-cxx" if cxx else "trestle-cc"))
        cmd = [cc] + PLAIN_FLAGS
        identity = [RELEASE / "trestle-cc", RELEASE / "libtrestle_runtime.a"]
    elif variant == "plain":
        cmd = ["clang++-19" if cxx else "clang-19"] + PLAIN_FLAGS
        identity = []
    elif variant == "cov":
        cmd = ["clang++-19" if cxx else "clang-19"] + COV_FLAGS
        identity = []
    elif variant == "afl":
        cmd = ["afl-clang-fast++" if cxx else "afl-clang-fast"] + PLAIN_FLAGS
        env["AFL_LLVM_DICT2FILE"] = str(d / "dict.txt")
        identity = [Path(shutil.which(cmd[0]) or cmd[0])]
    elif variant == "cmplog":
        cmd = ["afl-clang-fast++" if cxx else "afl-clang-fast"] + PLAIN_FLAGS
        env["AFL_LLVM_CMPLOG"] = "1"
        identity = [Path(shutil.which(cmd[0]) or cmd[0])]
    else:
        raise ValueError(variant)
    cmd = cmd + [str(s) for s in srcs] + ["-o", str(out)]
    if not cxx:
        cmd.append("-lm")
    stamp = d / f"{subj}-{variant}.stamp"
    key = hashlib.sha1((json.dumps(cmd) + variant + sha1_files(srcs + identity)).encode()).hexdigest()
    if out.exists() and stamp.exists() and stamp.read_text() == key:
        return out
    log(f"{subj}: building the {variant} variant")
    if variant == "afl":
        (d / "dict.txt").unlink(missing_ok=True)
    logf = d / f"{variant}.log"
    with logf.open("w") as fh:
        fh.write(" ".join(cmd) + "\n")
        fh.flush()
        r = subprocess.run(cmd, stdout=fh, stderr=fh, env=env)
    if r.returncode != 0:
        sys.exit(f"bugs: building {subj} ({variant}) failed; see {logf}")
    stamp.write_text(key)
    return out


def build_subject(subj, work, columns):
    variants = ["plain"]
    if "bridge" in columns or "system-only" in columns or "changed" in columns:
        variants += ["trestle", "cov"]
    elif SUBJECTS[subj].get("package"):
        variants += ["cov"]  # coverage over time, for every column
    if "aflpp" in columns:
        variants += ["afl", "cmplog"]
    return {v: build_variant(subj, v, work) for v in variants}


# ---------------------------------------------------------------------------------
# trestle columns
# ---------------------------------------------------------------------------------

def run_guarded(cmd, logf, env, limit, cwd=None, stop_when=None):
    """Run cmd (its own process group), output to logf; after `limit` seconds send it
    SIGINT, 60 s later SIGKILL. With stop_when (a function polled every 2 s), send the
    SIGINT as soon as it returns true. Returns (exit code, wall seconds, overran)."""
    t0 = time.monotonic()
    with logf.open("a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        p = subprocess.Popen(cmd, stdout=fh, stderr=fh, env=env, cwd=cwd, start_new_session=True)
        overran = False
        try:
            if stop_when is None:
                p.wait(timeout=limit)
            else:
                while p.poll() is None:
                    if time.monotonic() - t0 > limit:
                        raise subprocess.TimeoutExpired(cmd, limit)
                    if stop_when():
                        fh.write("[bench] the awaited alarm is reported: stopping the run\n")
                        fh.flush()
                        os.killpg(p.pid, signal.SIGINT)
                        p.wait(timeout=60)
                        break
                    time.sleep(2)
        except subprocess.TimeoutExpired:
            overran = p.poll() is None
            os.killpg(p.pid, signal.SIGINT)
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    return p.returncode, time.monotonic() - t0, overran


def dir_bytes(path):
    """Bytes of the files under path (what `du --apparent-size` counts), 0 if absent."""
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass  # removed while walking
    return total


class DiskWatch:
    """The largest size a campaign directory reached, sampled every `every` seconds in
    a thread while the campaign runs (its disk footprint; the final size alone misses
    units and traces a campaign removes as it goes)."""

    def __init__(self, path, every=15.0):
        self.path, self.every, self.peak = path, every, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while True:
            self.peak = max(self.peak, dir_bytes(self.path))
            if self.stop.wait(self.every):
                break

    def done(self):
        self.stop.set()
        self.thread.join()
        self.peak = max(self.peak, dir_bytes(self.path))
        return self.peak


def read_timeline(camp):
    rows = []
    f = camp / "timeline.csv"
    if not f.exists():
        return rows
    lines = f.read_text().splitlines()
    if not lines:
        return rows
    head = lines[0].split(",")
    for line in lines[1:]:
        vals = line.split(",")
        if len(vals) != len(head):
            continue
        try:
            rows.append({k: float(v) for k, v in zip(head, vals)})
        except ValueError:
            continue
    return rows


def alarm_tests(camp, alarms):
    """[(alarm, file name, test)]: each alarm's reduced and lifted tests that exist, in
    that order."""
    out = []
    for al in alarms:
        for name in ("reduced.json", "lifted.json"):
            p = camp / "alarms" / al["id"] / name
            if p.exists():
                out.append((al, name, json.loads(p.read_text())))
    return out


def alarm_times(camp, alarms):
    """{alarm id: (seconds, source)}: found_at when alarms.json has it, otherwise the
    first timeline row whose alarm count reaches the alarm's rank in discovery order
    (by the write time of its files under alarms/<id>/)."""
    res = {}
    missing = [a for a in alarms if a.get("found_at") is None]
    for a in alarms:
        if a.get("found_at") is not None:
            res[a["id"]] = (float(a["found_at"]), "found_at")
    if missing:
        def written(a):
            d = camp / "alarms" / a["id"]
            ts = [p.stat().st_mtime for p in d.iterdir()] if d.is_dir() else []
            return min(ts) if ts else float("inf")
        order = sorted(alarms, key=lambda a: (written(a), a["id"]))
        rows = read_timeline(camp)
        for rank, a in enumerate(order, 1):
            if a.get("found_at") is not None:
                continue
            t = next((r["seconds"] for r in rows if r.get("alarms", 0) >= rank), None)
            if t is None:  # not sampled yet when the campaign ended: its last row
                t = rows[-1]["seconds"] if rows else None
            res[a["id"]] = (t, "timeline")
    return res


def changed_bug(subj):
    """The bug the "changed" column introduces as a change: the program's first (its
    magic-value bug)."""
    return next(iter(SUBJECTS[subj]["bugs"]))


def changed_tree(subj, trestle_bin):
    """The trestle build's source tree as a git work tree whose only uncommitted change
    is the patch of changed_bug (the other patches are committed): what a user sees who
    just wrote that bug. The binary was built from exactly this text."""
    cfg = SUBJECTS[subj]
    tree = next(p for p in trestle_bin.parent.parent.iterdir() if p.is_dir() and p.name.endswith("-build"))
    patch = subject_dir(subj) / next(b["patch"] for b in json.loads((subject_dir(subj) / "bugs.json").read_text())["bugs"]
                                     if b["name"] == changed_bug(subj))
    stamp = tree / ".trestle-changed"
    if stamp.exists() and stamp.read_text() == patch.name:
        return tree
    git = ["git", "-C", str(tree), "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    shutil.rmtree(tree / ".git", ignore_errors=True)

    def patch_cmd(*flags, dry=False):
        # --forward: never guess a reversed patch (with --batch, patch would otherwise
        # "assume -R" and undo what it was asked to do); no .orig files left behind.
        cmd = ["patch", "-p1", "--batch", "--quiet", "--forward", "--no-backup-if-mismatch", "-d", str(tree), "-i", str(patch)]
        return subprocess.run(cmd + list(flags) + (["--dry-run"] if dry else []), capture_output=True, text=True)

    # The build applied every patch; a run cut short here may have left this one
    # reversed. Take it out if it is in, and check it then applies.
    if patch_cmd("-R", dry=True).returncode == 0:
        r = patch_cmd("-R")
        if r.returncode != 0:
            raise RuntimeError(f"cannot take {patch.name} out of {tree}: {r.stdout}{r.stderr}")
    if patch_cmd(dry=True).returncode != 0:
        raise RuntimeError(f"{patch.name} neither applies to nor is applied in {tree}; rebuild the subject")
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    (tree / ".git" / "info" / "exclude").write_text("*.o\n*.a\n*.orig\n*.rej\n.trestle-changed\n")
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", f"{cfg['prog']} with the other planted bugs"], check=True)
    r = patch_cmd()
    if r.returncode != 0:
        raise RuntimeError(f"cannot apply {patch.name} in {tree}: {r.stdout}{r.stderr}")
    stamp.write_text(patch.name)
    return tree


def trestle_run(task, a, work, bin_dir, builds):
    subj, col, rep = task
    cfg = SUBJECTS[subj]
    d = run_dir_of(work, subj, col, rep)
    camp = d / "campaign"
    d.mkdir(parents=True, exist_ok=True)
    t = bin_dir / "trestle"
    env = dict(os.environ, TRESTLE_BIN=str(bin_dir))
    seeds = seeds_dir(subj)
    cj = camp / "campaign.json"
    state = json.loads(cj.read_text()) if cj.exists() else None
    if state is not None and state["settings"]["budget"] != float(a.time):
        state = None  # another budget: start again
    # A campaign left by another trestle build is neither reused nor resumed.
    build_file = d / "trestle.sha1"
    this_build = sha1_files([t])
    if state is not None and (not build_file.exists() or build_file.read_text().strip() != this_build):
        log(f"{subj} {col}-{rep}: the campaign in {camp} is from another trestle build; starting again")
        state = None
    first_cmd = [str(t), "run", "--program", str(builds["trestle"]), "--seeds", str(seeds),
                 "--validate-with", str(builds["cov"]), "--time", f"{a.time}s", "--out", str(camp),
                 "--seed", str(rep + 1), "--plain"] + (["--system-only"] if col == "system-only" else [])
    if col == "changed":
        first_cmd += ["--changed-since", "HEAD", "--source", str(changed_tree(subj, builds["trestle"]))]
    resumed = False
    wall = 0.0
    overran = False
    stop_when = None
    stopped = d / "stopped-at-change"  # the changed column's run ended at its alarm
    if col == "changed":
        # Its question is only how soon it reports the change's bug: the run stops
        # once an alarm in that function is reported (the classification on the plain
        # build below decides whether it counts).
        fn = cfg["bugs"][changed_bug(subj)]

        def stop_when():
            try:
                got = json.loads((camp / "alarms.json").read_text())["alarms"]
            except (OSError, ValueError, KeyError):
                return False
            if any(al.get("function") == fn for al in got):
                stopped.write_text(time.strftime("%Y-%m-%d %H:%M:%S") + "\n")
                return True
            return False
    if state is None:
        stopped.unlink(missing_ok=True)
        shutil.rmtree(camp, ignore_errors=True)
        (d / "run.log").unlink(missing_ok=True)
        write_atomic(build_file, this_build + "\n")
        cmd = first_cmd
    elif not state.get("finished") and state["elapsed"] < state["settings"]["budget"] - 1 and not stopped.exists():
        cmd = [str(t), "run", "--resume", str(camp), "--plain"]
        resumed = True
    else:
        cmd = None
    if cmd:
        log(f"{subj} {col}-{rep}: {'resuming' if resumed else 'starting'} ({a.time} s)")
        sessions = json.loads((d / "sessions.json").read_text()) if resumed and (d / "sessions.json").exists() else []
        sessions.append({"wall_start": time.time(), "elapsed_before": state["elapsed"] if resumed else 0.0})
        write_atomic(d / "sessions.json", json.dumps(sessions) + "\n")
        watch = DiskWatch(camp)
        rc, wall, overran = run_guarded(cmd, d / "run.log", env, a.time + max(180, a.time), stop_when=stop_when)
        peak = watch.done()
        disk = json.loads((d / "disk.json").read_text()) if resumed and (d / "disk.json").exists() else {}
        write_atomic(d / "disk.json", json.dumps({"peak_bytes": max(peak, disk.get("peak_bytes", 0)),
                                                  "final_bytes": dir_bytes(camp)}) + "\n")
        if rc != 0 and not overran and not stopped.exists():
            raise RuntimeError(f"trestle run exited {rc}; see {d / 'run.log'}")
    c = json.loads(cj.read_text())
    if not c.get("finished") and not stopped.exists():
        # Stopped from outside before its budget (its campaign saved): no result; the
        # next sitting resumes it.
        raise RuntimeError(f"the campaign stopped after {c.get('elapsed', 0):.0f} s of {a.time} s "
                           f"without finishing; it resumes next time (see {d / 'run.log'})")
    af = camp / "alarms.json"
    alarms = json.loads(af.read_text())["alarms"] if af.exists() else []  # not written while there is none
    times = alarm_times(camp, alarms)
    # Classify every alarm on the plain build: its reduced test, else its lifted test.
    found_tests = alarm_tests(camp, alarms)
    tests = [test for _, _, test in found_tests]
    which = [(al, name) for al, name, _ in found_tests]
    verdicts = validate(t, builds["plain"], tests, d / "validate")
    plain = {}
    for (al, name), v in zip(which, verdicts):
        if al["id"] not in plain or plain[al["id"]][0] == "none":
            plain[al["id"]] = classify(v, subj) + (name,)
    # An out-of-memory alarm whose test ran out of time before it ran out of memory on
    # the plain build (sed's regex compiler allocating 4 GiB slowly): once more with
    # room to get there.
    slow = [(al, name, test) for (al, name, test) in found_tests
            if (al.get("signature") or "").startswith("out-of-memory") and plain.get(al["id"], ("none", ""))[0] == "none"
            and "timeout" in plain[al["id"]][1]]
    for (al, name, _), v in zip(slow, validate(t, builds["plain"], [x[2] for x in slow], d / "validate", "60s")):
        if plain[al["id"]][0] == "none":
            plain[al["id"]] = classify(v, subj) + (name,)
    found = {b: None for b in cfg["bugs"]}
    others, unreproduced, crashes = {}, [], []
    for al in alarms:
        sec, src = times.get(al["id"], (None, "?"))
        kind, what, name = plain.get(al["id"], ("none", "no test", None))
        if (al.get("signature") or "").startswith("hang"):
            # A hang finding (confirmed twice on the validation build by the campaign):
            # no crash for `validate` to see, and none of the planted bugs.
            kind, what = "other", al["signature"]
        elif (al.get("signature") or "").startswith("out-of-memory") and kind == "none" and "(memory" in what:
            # Out of memory: the plain build runs into the same memory limit (no
            # crash for `validate` to see; it exits as the program does then).
            kind, what = "other", al["signature"]
        crashes.append({"id": al["id"], "function": al.get("function"), "signature": al.get("signature"),
                        "source": al.get("source"), "roadblock": al.get("roadblock"),
                        "descends_from": al.get("descends_from"), "seconds": sec, "time_from": src,
                        "plain": {"kind": kind, "what": what, "test": name}})
        if kind == "bug":
            if found[what] is None or (sec is not None and sec < found[what]):
                found[what] = sec
        elif kind == "other":
            if what not in others or (sec is not None and sec < others[what]):
                others[what] = sec
        else:
            unreproduced.append({"id": al["id"], "signature": al.get("signature"), "seconds": sec})
    disk = json.loads((d / "disk.json").read_text()) if (d / "disk.json").exists() else {}
    if c.get("finished") or stopped.exists():
        # Carved units are no result and run to gigabytes on sed (a resumed campaign
        # would need them; a finished one does not).
        shutil.rmtree(camp / "units", ignore_errors=True)
        shutil.rmtree(camp / "traces", ignore_errors=True)
    degenerate = None
    if col in ("bridge", "changed") and not c.get("fuzzed"):
        degenerate = "no unit was fuzzed (see run.log): the run was system-only in effect"
    return {
        "subject": subj, "column": col, "rep": rep, "seed": rep + 1, "budget": float(a.time),
        "bugs": found, "execs": c["system_executions"] + c["unit_executions"],
        "system_execs": c["system_executions"], "unit_execs": c["unit_executions"],
        "units_carved": c.get("units_carved"), "units_fuzzed": len(c.get("fuzzed", [])),
        "other_crashes": [{"signature": s, "seconds": v} for s, v in sorted(others.items())],
        "unreproduced": unreproduced, "crashes": crashes,
        "time_source": sorted({x["time_from"] for x in crashes}),
        "elapsed": c["elapsed"], "wall_time": wall, "resumed": resumed, "overran": overran,
        "degenerate": degenerate, "command": first_cmd, "trestle_sha1": sha1_files([t])[:12],
        "stopped_at_change": stopped.exists(),
        "disk_peak_bytes": disk.get("peak_bytes"), "disk_final_bytes": disk.get("final_bytes"),
        "roadblocks": roadblock_figures(c), "lineage": c.get("lineage"),
        "phase_seconds": c.get("phase_seconds"),
        "first_unit_round_at": first_unit_round_at(camp, c) if col in ("bridge", "changed") else None,
    }


def first_unit_round_at(camp, c):
    """When the campaign first fuzzed a unit, in seconds of campaign time: the earliest
    roadblock attempt, or else the first timeline.csv row with unit executions (an upper
    bound: rows are sampled every ~2 s and once per round). None if no unit ran."""
    starts = [x["at"] for x in (c.get("roadblocks") or {}).get("attempts") or [] if x.get("at") is not None]
    timeline = camp / "timeline.csv"
    if timeline.exists():
        with timeline.open() as f:
            for row in csv.DictReader(f):
                if int(float(row.get("unit_execs") or 0)) > 0:
                    starts.append(float(row["seconds"]))
                    break
    return min(starts) if starts else None


def roadblock_figures(c):
    """What a bridge campaign did at roadblocks, from its campaign.json: seen at the
    last look, units fuzzed at one, flipped in the unit, solved at system level."""
    r = c.get("roadblocks") or {}
    at = r.get("attempts") or []
    return {"seen": r.get("seen", 0), "attempted": len(at),
            "flipped": sum(1 for x in at if x.get("flipped_at") is not None),
            "solved": sum(1 for x in at if x.get("solved_at") is not None)}


# ---------------------------------------------------------------------------------
# AFL++ column
# ---------------------------------------------------------------------------------

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def afl_seeds(subj, dest):
    """Write the subject's seeds as AFL++ inputs into dest; returns (written, dropped)."""
    cfg = SUBJECTS[subj]
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    seen, dropped = set(), []
    for p in sorted(seeds_dir(subj).glob("*.json")):
        data = test_to_afl(json.loads(p.read_text()), cfg["afl"])
        if data is None:
            dropped.append(p.stem)
            continue
        h = hashlib.sha1(data).hexdigest()
        if h in seen:
            dropped.append(p.stem)
            continue
        seen.add(h)
        (dest / p.stem).write_bytes(data)
    return sorted(seen), dropped


def afl_crashes(crash_dir, subj, trestle, plain, scratch):
    """Classify every file of AFL++'s crashes/ on the plain build: (bug times, other
    crashes, unreproduced, all crashes)."""
    cfg = SUBJECTS[subj]
    files = sorted(p for p in crash_dir.glob("id:*"))
    tests, meta = [], []
    for p in files:
        m = re.search(r"time:(\d+)", p.name)
        e = re.search(r"execs:(\d+)", p.name)
        data = p.read_bytes()
        # The input itself, so the run file keeps what triage needs once the run
        # directory is gone (bench/triage_afl.py; a few KB a run).
        meta.append({"file": p.name, "seconds": int(m.group(1)) / 1000 if m else None,
                     "execs": int(e.group(1)) if e else None,
                     "input_b64": base64.b64encode(data).decode()})
        tests.append(afl_to_test(data, cfg["afl"]))
    verdicts = validate(trestle, plain, tests, scratch)
    found = {b: None for b in cfg["bugs"]}
    others, unreproduced, crashes = {}, [], []
    for m, v in zip(meta, verdicts):
        kind, what = classify(v, subj)
        sec = m["seconds"]
        crashes.append(dict(m, plain={"kind": kind, "what": what}))
        if kind == "bug":
            if found[what] is None or (sec is not None and sec < found[what]):
                found[what] = sec
        elif kind == "other":
            if what not in others or (sec is not None and sec < others[what]):
                others[what] = sec
        else:
            unreproduced.append(dict(m, status=what))
    return found, others, unreproduced, crashes


def afl_run(task, a, work, bin_dir, builds):
    subj, col, rep = task
    cfg = SUBJECTS[subj]
    d = run_dir_of(work, subj, col, rep)
    shutil.rmtree(d, ignore_errors=True)  # an AFL++ run cut short starts again
    d.mkdir(parents=True)
    inputs, dropped = afl_seeds(subj, d / "in")
    if not inputs:
        raise RuntimeError("no seed gives an AFL++ input")
    dict_file = builds["afl"].parent / "dict.txt"
    cmd = ["afl-fuzz", "-i", str(d / "in"), "-o", str(d / "out"), "-c", str(builds["cmplog"]), "-l", "2AT"]
    if dict_file.exists() and dict_file.stat().st_size > 0:
        cmd += ["-x", str(dict_file)]
    cmd += ["-V", str(a.time), "-s", str(rep + 1), "--", str(builds["afl"])] + afl_target_args(cfg["afl"])
    env = dict(os.environ, **AFL_ENV)
    if cfg["afl"]["mode"] == "argv":
        env["TRESTLE_AFL_ARGV"] = "1"  # bench/aflpp/argv_stdin.c: the input is argv + stdin
    log(f"{subj} {col}-{rep}: starting ({a.time} s, {len(inputs)} inputs)")
    rc, wall, overran = run_guarded(cmd, d / "run.log", env, a.time + 120, cwd=d)
    out = d / "out" / "default"
    stats = {}
    if (out / "fuzzer_stats").exists():
        for line in (out / "fuzzer_stats").read_text().splitlines():
            k, _, v = line.partition(":")
            stats[k.strip()] = v.strip()
    if rc != 0 and not stats:
        raise RuntimeError(f"afl-fuzz exited {rc}; see {d / 'run.log'}")
    ran = float(stats.get("run_time", 0) or 0)
    if ran < a.time - 5:
        # Stopped from outside (or it died): a run cut short is no result.
        raise RuntimeError(f"afl-fuzz ran {ran:.0f} s of {a.time} s (exit {rc}); see {d / 'run.log'}")
    logtext = ANSI.sub("", (d / "run.log").read_text(errors="replace"))
    ops = {}
    for q in (out / "queue").glob("id:*"):
        m = re.search(r"op:([a-z0-9_]+)", q.name)
        op = m.group(1) if m else ("seed" if "orig:" in q.name else "?")
        ops[op] = ops.get(op, 0) + 1
    cmplog = {"forkserver_started": "Cmplog forkserver successfully started" in logtext,
              "level": (re.search(r"CmpLog level: (\S+)", logtext) or [None, None])[1],
              "queue_from_colorization": ops.get("colorization", 0), "queue_by_op": ops,
              "dict_tokens": int((re.search(r"Loaded (\d+) extra tokens", logtext) or [0, 0])[1]),
              "fuzzer_stats_command_line": stats.get("command_line")}
    found, others, unreproduced, crashes = afl_crashes(out / "crashes", subj, bin_dir / "trestle", builds["plain"],
                                                       d / "validate")
    execs = int(stats.get("execs_done", 0) or 0)
    return {
        "subject": subj, "column": col, "rep": rep, "seed": rep + 1, "budget": float(a.time),
        "bugs": found, "execs": execs, "execs_per_sec": float(stats.get("execs_per_sec", 0) or 0),
        "other_crashes": [{"signature": s, "seconds": v} for s, v in sorted(others.items())],
        "unreproduced": unreproduced, "crashes": crashes, "time_source": ["afl-filename"],
        "elapsed": float(stats.get("run_time", 0) or 0), "wall_time": wall, "overran": overran,
        "afl_exit": rc, "afl_inputs": len(inputs), "seeds_without_afl_input": dropped,
        "saved_crashes": int(stats.get("saved_crashes", 0) or 0), "edges_found": stats.get("edges_found"),
        "corpus_count": stats.get("corpus_count"), "cmplog": cmplog, "afl_version": stats.get("afl_version"),
        "command": cmd, "env": AFL_ENV, "degenerate": None if cmplog["forkserver_started"] else "CmpLog did not start",
    }


# ---------------------------------------------------------------------------------
# coverage over time: every test a run produced, replayed on the coverage build by
# the time it was found
# ---------------------------------------------------------------------------------

# Sampled every 30 s; the table reports 60, 120, 300 and 600 s (those within the budget).
COVERAGE_STEP = 30
COVERAGE_MARKS = [60, 120, 300, 600]


def load_json(path):
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError) as e:
        raise RuntimeError(f"cannot read the system test {path}: {e}") from e


def trestle_timed_tests(run_dir):
    """(seconds into the campaign, test) for every system test a trestle run produced:
    its system fuzzer's queue and crashes, the effective lifted tests and the alarms'
    tests, timed by their files' modification times within the session that wrote them
    (sessions.json: each session's wall-clock start and the campaign time before it)."""
    camp = run_dir / "campaign"
    sessions = sorted(json.loads((run_dir / "sessions.json").read_text()), key=lambda x: x["wall_start"])
    def seconds(path):
        m = path.stat().st_mtime
        s = max((x for x in sessions if x["wall_start"] <= m), key=lambda x: x["wall_start"], default=sessions[0])
        return max(0.0, s["elapsed_before"] + m - s["wall_start"])
    files = []
    for sub in ["system/queue", "system/crashes", "effective"]:
        files += [p for p in (camp / sub).glob("*.json") if not p.name.startswith(".")]
    for al in (camp / "alarms").glob("*/"):
        files += [p for p in (al / "lifted.json", al / "reduced.json") if p.exists()]
    return [(seconds(p), load_json(p)) for p in sorted(files)]


def afl_timed_tests(run_dir, cfg):
    """(seconds, test) for AFL++'s queue and crashes (`time:` in the name, in ms; the
    seeds at 0), as system tests."""
    out = run_dir / "out" / "default"
    items = []
    for p in sorted(list((out / "queue").glob("id:*")) + list((out / "crashes").glob("id:*"))):
        m = re.search(r"time:(\d+)", p.name)
        items.append((int(m.group(1)) / 1000 if m else 0.0, afl_to_test(p.read_bytes(), cfg["afl"])))
    return items


def coverage_over_time(subj, cov_bin, items, budget, bin_dir, scratch):
    """Branch coverage of the program's own files (bench/paper.py's definition) by the
    seeds (at 0 s) and the tests found up to each sample time: [{"seconds", "branches",
    "branches_total", "lines", "lines_total"}]. Each window's tests run once on the
    coverage build; the profiles merge cumulatively."""
    import paper  # noqa: E402 (bench/paper.py: run_tests, own_file)
    paper.TRESTLE = bin_dir / "trestle"
    seeds = [(0.0, load_json(p)) for p in sorted(seeds_dir(subj).glob("*.json"))]
    marks = list(range(COVERAGE_STEP, int(budget) + 1, COVERAGE_STEP)) or [int(budget)]
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    merged, curve, start = None, [], -1.0
    for mark in [0] + marks:
        window = [t for sec, t in seeds + items if start < sec <= mark or (mark == 0 and sec <= 0)]
        start = max(start, mark)
        if window:
            raw = scratch / f"raw-{mark}"
            raw.mkdir()
            paper.run_tests(cov_bin, window, {}, profile_dir=raw)
            profiles = [str(r) for r in sorted(raw.glob("*.profraw"))] + ([str(merged)] if merged else [])
            nxt = scratch / f"merged-{mark}.profdata"
            subprocess.run(["llvm-profdata-19", "merge", "-sparse", "-o", str(nxt)] + profiles, check=True)
            shutil.rmtree(raw)
            merged = nxt
        if merged is None:
            raise RuntimeError(f"no profile written by {cov_bin} (not a coverage build?)")
        cov = paper.profile_coverage(subj, cov_bin, merged)
        curve.append({"seconds": mark, **{k: cov[k] for k in ("branches", "branches_total", "lines", "lines_total")}})
    shutil.rmtree(scratch, ignore_errors=True)
    return curve


# What a run needs past its budget (validating its alarms, replaying its tests on the
# coverage build) when --stop-by decides whether it can still start.
REPLAY_ALLOWANCE = 150


def parse_stop_by(text):
    """--stop-by HH:MM: the next such wall-clock time (today, else tomorrow)."""
    m = re.fullmatch(r"(\d{1,2}):(\d{2})", text)
    if not m or int(m.group(1)) > 23 or int(m.group(2)) > 59:
        sys.exit(f"bugs: --stop-by wants HH:MM (24-hour clock), not {text!r}")
    now = time.localtime()
    target = time.mktime(now[:3] + (int(m.group(1)), int(m.group(2)), 0) + now[6:])
    return target if target > time.time() else target + 86400


def one_run(task, a, work, bin_dir, builds):
    subj, col, rep = task
    res_file = RESULTS / subj / f"{col}-{rep}.json"
    t0 = time.time()
    if a.stop_by is not None and t0 + a.time + REPLAY_ALLOWANCE > a.stop_by:
        log(f"{subj} {col}-{rep}: not started (it would end after --stop-by); left for the next sitting")
        return None
    res = (afl_run if col == "aflpp" else trestle_run)(task, a, work, bin_dir, builds[subj])
    # Coverage over time for the three columns (the changed column's question is its
    # time to alarm; its runs stop there).
    if "cov" in builds[subj] and SUBJECTS[subj].get("package") and col != "changed":
        run_dir = run_dir_of(work, subj, col, rep)
        items = afl_timed_tests(run_dir, SUBJECTS[subj]) if col == "aflpp" else trestle_timed_tests(run_dir)
        res["coverage"] = coverage_over_time(subj, builds[subj]["cov"], items, res["budget"], bin_dir, run_dir / "cov")
    # A campaign can run past its budget (trestle finishes the unit round it is in):
    # what it finds after the budget does not count.
    late = {b: v for b, v in res["bugs"].items() if v is not None and v > res["budget"]}
    for b in late:
        res["bugs"][b] = None
    res["found_after_budget"] = late
    res["finished_at"] = time.strftime("%Y-%m-%d %H:%M:%S")
    res["script_seconds"] = round(time.time() - t0, 1)
    write_atomic(res_file, json.dumps(res, indent=1) + "\n")
    got = ", ".join(f"{b} {'-' if s is None else f'{s:.1f}s'}" for b, s in res["bugs"].items())
    log(f"{subj} {col}-{rep}: {got}; {res['execs']} execs; {len(res['other_crashes'])} other crash(es)"
        + (f"; DEGENERATE: {res['degenerate']}" if res.get("degenerate") else ""))
    return res


# ---------------------------------------------------------------------------------
# statistics
# ---------------------------------------------------------------------------------

# Mann-Whitney U and Vargha-Delaney A12, on scipy (bench/stats.py).
from stats import a12_faster, mann_whitney  # noqa: E402


# ---------------------------------------------------------------------------------
# the table
# ---------------------------------------------------------------------------------

def load_results(subj, budget=None):
    rs = []
    for f in sorted((RESULTS / subj).glob("*.json")):
        try:
            r = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if budget is None or r.get("budget") == float(budget):
            rs.append(r)
    return rs


def table_budget(subj, a):
    if a.time_given:
        return float(a.time)
    budgets = [r.get("budget") for r in load_results(subj)]
    if not budgets:
        return float(a.time)
    return max(set(budgets), key=lambda b: (budgets.count(b), b))


def fmt_s(v):
    return "–" if v is None else f"{v:.0f}" if v >= 10 else f"{v:.1f}"


def write_table(subj, a):
    budget = table_budget(subj, a)
    rs = load_results(subj, budget)
    if not rs:
        log(f"{subj}: no result files yet; no table")
        return ""
    cfg = SUBJECTS[subj]
    bugs = list(cfg["bugs"] or sorted({b for r in rs for b in r["bugs"]}))
    cols = [c for c in COLUMNS if any(r["column"] == c for r in rs)]
    runs = {c: sorted((r for r in rs if r["column"] == c), key=lambda r: r["rep"]) for c in cols}
    L = [f"# Time to bug: {subj}", ""]
    L.append(f"Machine: {platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}. "
             f"Written {time.strftime('%Y-%m-%d %H:%M')} by `python3 bench/bugs.py` "
             f"(last command: `{' '.join(['python3', 'bench/bugs.py'] + sys.argv[1:])}`).")
    L.append("")
    L.append(f"Budget {budget:.0f} s per run, one core per run; runs per column: "
             + ", ".join(f"{c} {len(runs[c])}" for c in cols) + ". Random seed of run r: r+1 (trestle `--seed`, "
             "afl-fuzz `-s`). Columns: **bridge** `trestle run` (units fuzzed in-process, validated on a clang-19 "
             "coverage build); **system-only** `trestle run --system-only`; **aflpp** Debian's afl++ "
             f"{next((r.get('afl_version') for r in runs.get('aflpp', []) if r.get('afl_version')), '')}: "
             "afl-clang-fast -O2 -g build, CmpLog build (`-c`, `-l 2AT`), the AFL_LLVM_DICT2FILE dictionary "
             "(`-x`), the seeds as AFL++ inputs.")
    if "changed" in cols:
        L.append("")
        L.append(f"**changed**: the bridge told what changed (`--changed-since HEAD --source TREE`, TREE the "
                 f"trestle build's source as a git work tree whose one uncommitted change is the patch of "
                 f"`{changed_bug(subj)}`); the question is how soon it reports that bug.")
    if cfg.get("note"):
        L.append("")
        L.append(f"Subject: {cfg['note']}")
    L.append("")
    L.append("A crash counts for a bug when the crashing test, run on the plain build (clang-19 -O2 -g) with "
             "`trestle validate`, crashes with the bug's function innermost: "
             + ", ".join(f"{b} → `{fn}`" for b, fn in (cfg["bugs"] or {}).items()) + ". Time: seconds from the "
             "start of the run to the first such crash (trestle: the alarm's `found_at`, or the first "
             "timeline.csv sample whose alarm count reaches the alarm's rank; AFL++: `time:` in the crash file's "
             "name); a crash found after the budget (a trestle campaign ends the unit round it is in) does not count. A run that misses a bug counts as the full budget. Median [min–max] over all runs, "
             "misses included.")
    L.append("")
    L.append("p: two-sided Mann-Whitney U test of bridge against the column (exact permutation distribution "
             "with mid-ranks for ties when there are at most 200,000 splits, as here; otherwise the normal "
             "approximation with tie correction). A12: Vargha-Delaney, the probability that a bridge run finds the "
             "bug sooner than a run of the column (ties count half; above 0.5: the bridge is faster).")
    L.append("")
    L.append("| bug | column | found | median s | range s | p (bridge vs) | A12 (bridge faster) |")
    L.append("|---|---|---|---|---|---|---|")
    for b in bugs:
        bridge = [budget if r["bugs"].get(b) is None else r["bugs"][b] for r in runs.get("bridge", [])]
        for c in cols:
            ts = [budget if r["bugs"].get(b) is None else r["bugs"][b] for r in runs[c]]
            k = sum(1 for r in runs[c] if r["bugs"].get(b) is not None)
            if c != "bridge" and bridge:
                _, p, _ = mann_whitney(bridge, ts)
                a12 = a12_faster(bridge, ts)
                ps, as_ = (f"{p:.3f}" if p is not None else "–"), (f"{a12:.2f}" if a12 is not None else "–")
            else:
                ps = as_ = ""
            med = fmt_s(statistics.median(ts)) if ts else "–"
            rng = f"{fmt_s(min(ts))}–{fmt_s(max(ts))}" if ts else "–"
            L.append(f"| {b} | {c} | {k}/{len(ts)} | {med} | {rng} | {ps} | {as_} |")
    L.append("")
    L.append("## Runs")
    L.append("")
    L.append("| run | " + " | ".join(bugs) + " | execs | other crashes | unreproduced | wall s | notes |")
    L.append("|---|" + "---|" * len(bugs) + "---|---|---|---|---|")
    for c in cols:
        for r in runs[c]:
            notes = []
            if r.get("degenerate"):
                notes.append(f"**{r['degenerate']}**")
            if r.get("overran"):
                notes.append("overran its budget, stopped")
            if r.get("found_after_budget"):
                notes.append("after the budget (not counted): " + ", ".join(
                    f"{b} {fmt_s(v)} s" for b, v in r["found_after_budget"].items()))
            if r.get("elapsed", 0) > r["budget"] + 1:
                notes.append(f"ran {r['elapsed']:.0f} s")
            if r.get("resumed"):
                notes.append("resumed")
            if c == "aflpp":
                cm = r.get("cmplog", {})
                notes.append(f"CmpLog {'on' if cm.get('forkserver_started') else 'OFF'} (level {cm.get('level')}, "
                             f"{cm.get('queue_from_colorization', 0)} queue entries from it), "
                             f"{cm.get('dict_tokens', 0)} dict tokens, {r.get('afl_inputs')} inputs, "
                             f"{r.get('saved_crashes')} crash files")
            elif "time_source" in r and r["time_source"]:
                notes.append("time from " + "/".join(r["time_source"]))
            if c == "bridge":
                notes.append(f"{r.get('units_fuzzed')} units fuzzed")
            L.append(f"| {c} {r['rep']} | " + " | ".join(fmt_s(r["bugs"].get(b)) for b in bugs)
                     + f" | {r['execs']} | {len(r['other_crashes'])} | {len(r.get('unreproduced', []))} | "
                     f"{r.get('wall_time', 0):.0f} | {'; '.join(notes)} |")
    other = {}
    for c in cols:
        for r in runs[c]:
            for o in r["other_crashes"]:
                other.setdefault(o["signature"], {}).setdefault(c, []).append(o["seconds"])
    L.append("")
    L.append("## Other crashes")
    L.append("")
    if not other:
        L.append("None: every crash that reproduced on the plain build was one of the planted bugs.")
    else:
        L.append("| signature (plain build) | " + " | ".join(cols) + " |")
        L.append("|---|" + "---|" * len(cols))
        for sig, per in sorted(other.items()):
            cells = [f"{len(per[c])} run(s), first {fmt_s(min((x for x in per[c] if x is not None), default=None))} s"
                     if c in per else "–" for c in cols]
            L.append(f"| `{sig}` | " + " | ".join(cells) + " |")
    L += find_sources_table(bugs, runs.get("bridge", []), budget)
    L += coverage_table([c for c in cols if c != "changed"], runs, budget)
    unrep = sum(len(r.get("unreproduced", [])) for c in cols for r in runs[c])
    if unrep:
        L.append("")
        L.append(f"{unrep} reported crash(es) did not crash the plain build (listed as `unreproduced` in the "
                 "run files).")
    text = "\n".join(L) + "\n"
    write_atomic(RESULTS / f"{subj}.md", text)
    return text


def find_source(crash):
    """Where a trestle run's crash came from: a roadblock's unit slice, another unit
    slice, the system fuzzer on a test that descends from a lifted one (alarms.json's
    `descends_from`, written from trestle 2026-12-01 on), or the system fuzzer alone."""
    if crash.get("source") == "unit":
        return "roadblock slice" if crash.get("roadblock") else "unit slice"
    if crash.get("descends_from"):
        return "system, from a lifted test"
    return "system" if crash.get("source") == "system" else (crash.get("source") or "?")


def first_find_sources(run, budget):
    """{bug: source of the crash that found it first} for the bugs a run found in budget."""
    out = {}
    for b, t in run["bugs"].items():
        if t is None or t > budget:
            continue
        firsts = [c for c in run["crashes"] if c["plain"]["kind"] == "bug" and c["plain"]["what"] == b
                  and c["seconds"] is not None and abs(c["seconds"] - t) < 1e-6]
        if firsts:
            out[b] = find_source(firsts[0])
    return out


def find_sources_table(bugs, bridge_runs, budget):
    """Where the bridge's first finds of the planted bugs came from."""
    if not bridge_runs:
        return []
    per = {b: {} for b in bugs}
    for r in bridge_runs:
        for b, src in first_find_sources(r, budget).items():
            if b in per:
                per[b][src] = per[b].get(src, 0) + 1
    kinds = ["roadblock slice", "unit slice", "system, from a lifted test", "system"]
    total = {k: sum(per[b].get(k, 0) for b in bugs) for k in kinds}
    L = ["", "## Where the bridge's first finds came from", "",
         "The crash that found each bug first in each bridge run: a unit slice at a roadblock, another unit "
         "slice, the system fuzzer on a test that descends by mutation from a test lifted from a unit "
         "(`descends_from` in alarms.json; runs of trestle before 2026-12-01 do not record it and count as "
         "system), or the system fuzzer from the seeds alone.", "",
         "| bug | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
    for b in bugs:
        L.append(f"| {b} | " + " | ".join(str(per[b].get(k, 0)) for k in kinds) + " |")
    L.append("| all | " + " | ".join(str(total[k]) for k in kinds) + " |")
    return L


SIX = ["cut", "paste", "tac", "b2sum", "sed", "dc"]


def bug_times(runs, bug, budget):
    """Times to `bug` of these runs, a miss counting as the budget; and how many found it."""
    ts = [budget if r["bugs"].get(bug) is None else r["bugs"][bug] for r in runs]
    return ts, sum(1 for r in runs if r["bugs"].get(bug) is not None)


def write_summary(a):
    """bench/results/bugs/SUMMARY.md: the six programs side by side, with each target of
    the benchmark checked against what the run files hold (n/a while runs are missing)."""
    L = ["# The six programs: summary and targets", "",
         f"Written {time.strftime('%Y-%m-%d %H:%M')} by `python3 bench/bugs.py` from the run files under "
         "bench/results/bugs/ (per-program tables: bench/results/bugs/PROG.md). Times in seconds, medians over "
         "the runs with a miss counted as the budget; `n/m`: runs that found it.", "",
         "## Bugs", "",
         "| program | bug | bridge | system-only | aflpp | changed | bridge found all a baseline found | "
         "bridge median ≤ ⅓ AFL++'s | changed ≤ ⅕ AFL++'s |", "|---|---|---|---|---|---|---|---|---|"]
    cov = ["## Coverage at the end of the budget", "",
           "Branch coverage of the program's own files in %, median [min–max]; p: Mann-Whitney U of the bridge "
           "against the column, A12: the probability that a bridge run covers more.", "",
           "| program | bridge | system-only | aflpp | bridge / system-only | p, A12 vs system-only | p, A12 vs AFL++ | "
           "target | bridge reaches system-only's median at |", "|---|---|---|---|---|---|---|---|---|"]
    false = ["## False alarms", "",
             "An alarm trestle reported (bridge, system-only, changed) whose test does not crash the plain build; "
             "must be 0. Alarms per bug (issue #35): in each run, the alarms whose test crashes the plain build "
             "in a planted bug, over the planted bugs they are (ground truth: the bug's own lines or function); "
             "other findings likewise over their distinct plain-build signatures (crashes) or trestle's own "
             "(hangs, out of memory), a weaker check.", "",
             "| program | runs | false alarms | alarms per planted bug | alarms per other finding |", "|---|---|---|---|---|"]
    ratios, sources, cov_above, peaks, per_bug, before_units = [], {}, [], [], [0, 0], [0, 0]
    for subj in SIX:
        rs = load_results(subj)
        if not rs:
            continue
        budget = max(set(r["budget"] for r in rs), key=lambda b: sum(1 for r in rs if r["budget"] == b))
        rs = [r for r in rs if r["budget"] == budget]
        runs = {c: [r for r in rs if r["column"] == c] for c in COLUMNS}
        for b in SUBJECTS[subj]["bugs"]:
            cells, med = [], {}
            for c in COLUMNS:
                if not runs[c]:
                    cells.append("–")
                    continue
                ts, k = bug_times(runs[c], b, budget)
                med[c] = (statistics.median(ts), k, len(ts))
                cells.append(f"{fmt_s(med[c][0])} ({k}/{len(ts)})")
            found_all = "n/a"
            if "bridge" in med and ("system-only" in med or "aflpp" in med):
                base = any(med[c][1] > 0 for c in ("system-only", "aflpp") if c in med)
                found_all = "yes" if med["bridge"][1] > 0 or not base else "**no**"
            third = "n/a"
            if "bridge" in med and "aflpp" in med:
                if med["bridge"][1] == 0 and med["aflpp"][1] == 0:
                    third = "neither found it"
                else:
                    third = "yes" if med["bridge"][0] <= med["aflpp"][0] / 3 else "**no**"
                    third += f" ({med['bridge'][0] / max(med['aflpp'][0], 1e-9):.2f}×)"
            fifth = "–"
            if b == changed_bug(subj) and "changed" in med and "aflpp" in med:
                fifth = ("yes" if med["changed"][0] <= med["aflpp"][0] / 5 else "**no**") + \
                        f" ({med['changed'][0] / max(med['aflpp'][0], 1e-9):.2f}×)"
            L.append(f"| {subj} | {b}{' (the change)' if b == changed_bug(subj) else ''} | " + " | ".join(cells)
                     + f" | {found_all} | {third} | {fifth} |")
        last = int(budget)
        at = {c: [v for v in (coverage_at(r, last) for r in runs[c]) if v is not None] for c in COLUMNS}
        if at["bridge"]:
            def cell(c):
                return f"{statistics.median(at[c]):.1f} [{min(at[c]):.1f}–{max(at[c]):.1f}]" if at[c] else "–"

            def versus(c):
                if ps[c] is None:
                    return "–"
                return f"{ps[c]:.3f}, {a12_faster([-x for x in at['bridge']], [-y for y in at[c]]):.2f}"
            ratio = (statistics.median(at["bridge"]) / statistics.median(at["system-only"])) if at["system-only"] else None
            ps = {c: mann_whitney(at["bridge"], at[c])[1] if at[c] else None for c in ("system-only", "aflpp")}
            target, reach = "n/a", "–"
            if subj in ("sed", "dc"):
                if ratio is not None and ps["aflpp"] is not None:
                    ok = ratio >= 1.2 and statistics.median(at["bridge"]) > statistics.median(at["aflpp"]) and ps["aflpp"] < 0.05
                    target = ("met" if ok else "**missed**") + " (≥ 1.2× system-only, above AFL++ with p < 0.05)"
            if at["system-only"]:
                goal = statistics.median(at["system-only"])
                hits = [next((pt["seconds"] for pt in r.get("coverage") or [] if pt["branches_total"]
                              and 100.0 * pt["branches"] / pt["branches_total"] >= goal), None) for r in runs["bridge"]]
                med_hit = statistics.median([budget if h is None else h for h in hits])
                reach = f"{fmt_s(med_hit)} s"
                if subj not in ("sed", "dc"):
                    target = ("met" if med_hit <= budget / 2 else "**missed**") + " (system-only's median in ≤ half the time)"
            L_c = (f"| {subj} | {cell('bridge')} | {cell('system-only')} | {cell('aflpp')} | "
                   f"{'–' if ratio is None else f'{ratio:.2f}×'} | "
                   + " | ".join(versus(c) for c in ("system-only", "aflpp"))
                   + f" | {target} | {reach} |")
            cov.append(L_c)
        for b in SUBJECTS[subj]["bugs"]:
            if runs["bridge"] and runs["system-only"]:
                ratios.append((subj, b, statistics.median(bug_times(runs["bridge"], b, budget)[0]),
                               statistics.median(bug_times(runs["system-only"], b, budget)[0]),
                               len(runs["bridge"]), len(runs["system-only"])))
        for r in runs["bridge"]:
            for b, src in first_find_sources(r, budget).items():
                sources[src] = sources.get(src, 0) + 1
                first_unit = r.get("first_unit_round_at")
                if src.startswith("system") and "first_unit_round_at" in r:
                    # Found before any unit ran (or in a run where none did): no unit
                    # could have found it first.
                    before_units[0 if first_unit is None or r["bugs"][b] < first_unit else 1] += 1
        if at["bridge"] and at["system-only"]:
            p_cov = mann_whitney(at["bridge"], at["system-only"])[1]
            above = statistics.median(at["bridge"]) > statistics.median(at["system-only"]) and p_cov is not None and p_cov < 0.05
            cov_above.append((subj, above, p_cov))
        if subj == "sed":
            peaks += [r["disk_peak_bytes"] for r in runs["bridge"] if r.get("disk_peak_bytes") is not None]
        trestle_runs = [r for c in ("bridge", "system-only", "changed") for r in runs[c]]
        planted, other = alarms_per_bug(trestle_runs)
        per_bug[0] += planted[0]
        per_bug[1] += planted[1]
        false.append(f"| {subj} | {len(trestle_runs)} | {sum(len(r.get('unreproduced', [])) for r in trestle_runs)} | "
                     f"{per_bug_cell(planted)} | {per_bug_cell(other)} |")
    if per_bug[1]:
        ratio = per_bug[0] / per_bug[1]
        false += ["", f"Over all programs: {per_bug[0]} alarms for {per_bug[1]} planted bugs found, "
                      f"{ratio:.2f} per bug (target at most 1.1): {'met' if ratio <= 1.1 else '**missed**'}."]
    text = "\n".join(L + [""] + cov + [""] + false + [""] + bridge_targets(ratios, sources, cov_above, peaks, before_units)) + "\n"
    write_atomic(RESULTS / "SUMMARY.md", text)
    if RESULTS == REPO / "bench" / "results" / "bugs":
        into_results_md(text)  # the matrix's own results only, not a --results elsewhere
    return text


def alarms_per_bug(runs):
    """([alarms, bugs], [alarms, findings]) summed over `runs`: the alarms that are a
    planted bug on the plain build against the distinct planted bugs they are, and the
    other findings' alarms against their distinct signatures, run by run."""
    planted, other = [0, 0], [0, 0]
    for r in runs:
        bugs = [c["plain"]["what"] for c in r.get("crashes", []) if c["plain"]["kind"] == "bug"]
        rest = [c["plain"]["what"] for c in r.get("crashes", []) if c["plain"]["kind"] == "other"]
        planted[0] += len(bugs)
        planted[1] += len(set(bugs))
        other[0] += len(rest)
        other[1] += len(set(rest))
    return planted, other


def per_bug_cell(pair):
    alarms, bugs = pair
    return f"{alarms / bugs:.2f} ({alarms} for {bugs})" if bugs else "–"


def bridge_targets(ratios, sources, cov_above, peaks, before_units=(0, 0)):
    """Issue #32's targets for the bridge against its own system-only, checked against
    the run files: median time to bug at most system-only's on 16 of the 18 bugs and
    never above 1.25x it, at most half of it on 6; 40% of the first finds from roadblock
    slices; coverage above system-only with p < 0.05 on three programs; a sed campaign
    under 500 MB on disk."""
    if not ratios:
        return []
    L = ["## The bridge against its own system-only (issue #32's targets)", "",
         "Ratio: the bridge's median time to the bug over system-only's (misses counted as the budget; both "
         "missing is 1.00×).", "",
         "| program | bug | bridge | system-only | ratio | runs |", "|---|---|---|---|---|---|"]
    rs = []
    for subj, b, mb, ms, nb, ns in ratios:
        ratio = mb / max(ms, 1e-9)
        rs.append(ratio)
        L.append(f"| {subj} | {b} | {fmt_s(mb)} | {fmt_s(ms)} | {ratio:.2f}× | {nb}, {ns} |")
    full = len(ratios) == 18
    def verdict(ok):
        return ("met" if ok else "**missed**") + ("" if full else f" (so far: {len(ratios)} of 18 bugs)")
    at_most = sum(1 for r in rs if r <= 1.0)
    half = sum(1 for r in rs if r <= 0.5)
    L += ["", f"- At most system-only's median: {at_most} of {len(rs)} bugs (target 16 of 18): {verdict(at_most >= 16 * len(rs) / 18)}.",
          f"- Never above 1.25×: the largest ratio is {max(rs):.2f}× ({sum(1 for r in rs if r > 1.25)} above): {verdict(max(rs) <= 1.25)}.",
          f"- At most half of system-only's: {half} bugs (target 6): {verdict(half >= 6)}."]
    firsts = sum(sources.values())
    if firsts:
        rb = sources.get("roadblock slice", 0)
        parts = ", ".join(f"{k} {v}" for k, v in sorted(sources.items()))
        L.append(f"- First finds from roadblock slices: {rb} of {firsts} ({100 * rb / firsts:.0f}%; target 40%): "
                 f"{verdict(rb >= 0.4 * firsts)}. All first finds by source: {parts}.")
        if sum(before_units):
            L.append(f"  Of the system fuzzer's first finds in runs that say when units first ran, {before_units[0]} came "
                     f"before the run's first unit round (no unit could have made them), {before_units[1]} after it.")
    if cov_above:
        k = sum(1 for _, above, _ in cov_above if above)
        detail = ", ".join(f"{s} p {'–' if p is None else f'{p:.3f}'}{' (above)' if a else ''}" for s, a, p in cov_above)
        L.append(f"- Coverage above system-only with p < 0.05: {k} of {len(cov_above)} programs (target 3 of 6): "
                 f"{'met' if k >= 3 else '**missed**'}{'' if len(cov_above) == 6 else ' (so far)'}; {detail}.")
    if peaks:
        L.append(f"- Disk of a 600 s bridge campaign on sed: peak {max(peaks) / 1e6:.0f} MB at most over {len(peaks)} "
                 f"run(s) (target 500 MB): {'met' if max(peaks) <= 500e6 else '**missed**'}.")
    return L


SUMMARY_START = "<!-- bench/bugs.py writes from here: the summary of bench/results/bugs/ -->"
SUMMARY_END = "<!-- bench/bugs.py writes up to here -->"


def into_results_md(summary):
    """Put the summary into bench/RESULTS.md between its two marker lines (the section
    headings one level down), when the file has them; the prose around them is kept."""
    md = REPO / "bench" / "RESULTS.md"
    text = md.read_text() if md.exists() else ""
    if SUMMARY_START not in text or SUMMARY_END not in text:
        return
    body = summary.split("\n", 1)[1].replace("\n## ", "\n### ")
    head, rest = text.split(SUMMARY_START, 1)
    tail = rest.split(SUMMARY_END, 1)[1]
    write_atomic(md, head + SUMMARY_START + "\n" + body.strip("\n") + "\n" + SUMMARY_END + tail)


def coverage_at(run, mark):
    """A run's branch coverage (%) at `mark` seconds (its last sample before), or None."""
    pts = [p for p in run.get("coverage") or [] if p["seconds"] <= mark]
    if not pts or not pts[-1]["branches_total"]:
        return None
    return 100.0 * pts[-1]["branches"] / pts[-1]["branches_total"]


def coverage_table(cols, runs, budget):
    """The coverage section: branch coverage at each mark (median [range]), p and A12 of
    the bridge against each column at the last mark, and how soon each column reaches
    the system-only median of the last mark."""
    if not any(r.get("coverage") for c in cols for r in runs[c]):
        return []
    marks = [m for m in COVERAGE_MARKS if m < budget] + [int(budget)]
    last = marks[-1]
    L = ["", "## Branch coverage over time", "",
         "Branch coverage of the program's own files (bench/paper.py's definition) by the seeds and every test the "
         "run produced up to the time (trestle: queue, crashes, effective lifted tests, alarms, by file time; "
         "AFL++: queue and crashes, by `time:`), replayed on the coverage build with `trestle exec`. "
         f"Median [min–max] in %; p and A12 (the probability that a bridge run covers more) at {last} s.", "",
         "| column | " + " | ".join(f"{m} s" for m in marks) + " | p (bridge vs) | A12 (bridge more) | reaches system-only's "
         f"{last} s median at |", "|---|" + "---|" * (len(marks) + 3)]
    at = {c: [v for v in (coverage_at(r, last) for r in runs[c]) if v is not None] for c in cols}
    target = statistics.median(at["system-only"]) if at.get("system-only") else None
    for c in cols:
        cells = []
        for m in marks:
            xs = [v for v in (coverage_at(r, m) for r in runs[c]) if v is not None]
            cells.append(f"{statistics.median(xs):.1f} [{min(xs):.1f}–{max(xs):.1f}]" if xs else "–")
        p = a12 = "–"
        if c != "bridge" and at.get("bridge") and at[c]:
            _, pv, _ = mann_whitney(at["bridge"], at[c])
            p = "–" if pv is None else f"{pv:.3f}"
            a12 = f"{a12_faster([-x for x in at['bridge']], [-y for y in at[c]]):.2f}"
        reach = "–"
        if target is not None:
            times = []
            for r in runs[c]:
                hit = next((pt["seconds"] for pt in r.get("coverage") or []
                            if pt["branches_total"] and 100.0 * pt["branches"] / pt["branches_total"] >= target), None)
                times.append(hit)
            got = sorted(t for t in times if t is not None)
            reach = (f"median {statistics.median(got):.0f} s ({len(got)}/{len(times)} runs)" if got else f"never (0/{len(times)})")
        L.append(f"| {c} | " + " | ".join(cells) + f" | {p} | {a12} | {reach} |")
    return L


# ---------------------------------------------------------------------------------
# self-check
# ---------------------------------------------------------------------------------

def self_check(subjects, work):
    bin_dir = copy_tools(work)
    ok = True
    for s in subjects:
        cfg = SUBJECTS[s]
        crashers = subject_dir(s) / cfg["crashers"]
        files = sorted(crashers.glob("*.json"))
        if not files:
            log(f"self-check {s}: no crashers in {crashers}")
            ok = False
            continue
        plain = build_variant(s, "plain", work)
        tests = [json.loads(p.read_text()) for p in files]
        # The same crashers as AFL++ would hand them back (stdin / file only).
        afl_tests, afl_names = [], []
        for p, t in zip(files, tests):
            data = test_to_afl(t, cfg["afl"])
            if data is not None:
                afl_tests.append(afl_to_test(data, cfg["afl"]))
                afl_names.append(p.stem + " (as AFL++ input)")
        verdicts = validate(bin_dir / "trestle", plain, tests + afl_tests, work / "self-check" / s)
        hit = set()
        for name, v in zip([p.stem for p in files] + afl_names, verdicts):
            kind, what = classify(v, s)
            good = kind == "bug"
            ok &= good
            hit.add(what if good else None)
            log(f"self-check {s}: {name}: {'OK' if good else 'FAIL'} {kind} {what} ({v.get('crash') or v.get('status')})")
        for b in cfg["bugs"]:
            if b not in hit:
                log(f"self-check {s}: no crasher reaches bug {b}")
                ok = False
        seeds, dropped = afl_seeds(s, work / "self-check" / f"{s}-afl-in")
        log(f"self-check {s}: {len(seeds)} AFL++ input(s) from the seeds; without one: {', '.join(dropped) or 'none'}")
    if not ok:
        sys.exit("bugs: self-check FAILED")
    log("self-check passed")


# ---------------------------------------------------------------------------------

def stop_gently(signum, frame):
    raise KeyboardInterrupt


def main():
    # SIGINT (Ctrl-C) and SIGTERM both mean: start no further run. A shell without job
    # control starts background jobs with SIGINT ignored, and Python then leaves it
    # ignored: set the handler explicitly.
    signal.signal(signal.SIGINT, stop_gently)
    signal.signal(signal.SIGTERM, stop_gently)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subjects", default=",".join(SUBJECTS), help="comma-separated (default: all declared)")
    ap.add_argument("--reps", type=int, help="repetitions per column (default 5; --smoke 1)")
    ap.add_argument("--time", type=int, help="seconds per run (default 600, the matrix budget; --smoke 30)")
    ap.add_argument("--columns", default=",".join(DEFAULT_COLUMNS), help=f"comma-separated subset of {','.join(COLUMNS)}")
    ap.add_argument("--jobs", type=int, default=1, help="runs at a time (default 1; 2 on a 2-core machine)")
    ap.add_argument("--smoke", action="store_true", help="1 repetition of 30 s")
    ap.add_argument("--table-only", action="store_true", help="only rewrite the tables from the result files")
    ap.add_argument("--self-check", action="store_true", help="classify each subject's crashers (also as AFL++ "
                    "inputs) and check each maps to a known bug")
    ap.add_argument("--results", help="where the result files and tables go (default bench/results/bugs; "
                    "another directory for runs that are not the matrix's)")
    ap.add_argument("--work", help="builds and run directories (default ~/.cache/trestle/bench-bugs)")
    ap.add_argument("--seeds", action="append", default=[], metavar="SUBJECT=DIR",
                    help="seed system tests for SUBJECT other than its own (e.g. captured from its test suite "
                         "with `trestle capture`); its runs are kept apart; use with --results")
    ap.add_argument("--stop-by", metavar="HH:MM", help="start no run that would not end (with its replay) by "
                    "this wall-clock time; the rest are left for the next sitting")
    a = ap.parse_args()
    a.time_given = a.time is not None
    a.stop_by = parse_stop_by(a.stop_by) if a.stop_by else None
    if a.results:
        global RESULTS
        RESULTS = Path(a.results).resolve()
    a.time = a.time or (30 if a.smoke else 600)
    a.reps = a.reps or (1 if a.smoke else 5)
    a.columns = [c for c in a.columns.split(",") if c]
    for c in a.columns:
        if c not in COLUMNS:
            sys.exit(f"bugs: unknown column {c} (columns: {', '.join(COLUMNS)})")
    for spec in a.seeds:
        subj, _, d = spec.partition("=")
        if subj not in SUBJECTS or not d or not Path(d).is_dir():
            sys.exit(f"bugs: --seeds {spec}: want SUBJECT=DIR with a declared subject and an existing directory")
        OTHER_SEEDS[subj] = Path(d).resolve()
        SUBJECTS[subj]["seeds_path"] = str(OTHER_SEEDS[subj])
    a.subjects = [s for s in a.subjects.split(",") if s]
    for s in a.subjects:
        if s not in SUBJECTS:
            sys.exit(f"bugs: unknown subject {s} (declared: {', '.join(SUBJECTS)})")
    work = Path(a.work) if a.work else Path(os.environ.get("HOME", "/root")) / ".cache/trestle/bench-bugs"
    ready = []
    for s in a.subjects:
        why = subject_problem(s)
        if why:
            log(f"skipping {s}: {why}")
        else:
            ready.append(s)
    if not a.table_only:
        a.time_given = True  # the table follows the budget being run
    if a.table_only:
        for s in ready:
            print(write_table(s, a))
        print(write_summary(a))
        return
    work.mkdir(parents=True, exist_ok=True)
    if a.self_check:
        self_check(ready, work)
        return
    if not ready:
        sys.exit("bugs: no subject to run")
    if "aflpp" in a.columns:
        ensure_afl()
    bin_dir = copy_tools(work)
    builds = {s: build_subject(s, work, a.columns) for s in ready}
    tasks = []
    for rep in range(a.reps):
        for s in ready:
            for c in a.columns:
                if c == "changed" and not SUBJECTS[s].get("package"):
                    continue  # a change needs a source tree: the six programs only
                f = RESULTS / s / f"{c}-{rep}.json"
                if f.exists():
                    try:
                        old = json.loads(f.read_text())
                    except ValueError:
                        old = {}
                    if old.get("budget") == float(a.time):
                        continue
                    log(f"{s} {c}-{rep}: the result file is for a budget of {old.get('budget')} s; running it again")
                tasks.append((s, c, rep))
    log(f"work directory {work}; {len(tasks)} run(s) to do, {a.jobs} at a time, {a.time} s each")
    failed = []
    lock = threading.Lock()
    pool = ThreadPoolExecutor(max_workers=max(1, a.jobs))
    futures = {pool.submit(one_run, t, a, work, bin_dir, builds): t for t in tasks}
    try:
        for fut in as_completed(futures):
            t = futures[fut]
            try:
                if fut.result() is None:
                    continue  # not started: --stop-by
            except Exception as e:  # one broken run must not lose the others
                failed.append(f"{t}: {e}")
                log(f"run {t} failed: {e}")
            with lock:
                write_table(t[0], a)
                write_summary(a)
    except KeyboardInterrupt:
        # Ctrl-C: start no further run (the executor would otherwise go on through
        # the whole list). A run under way (its own session) goes on to its end and
        # writes its result; the interpreter exits after it.
        pool.shutdown(wait=False, cancel_futures=True)
        sys.exit("bugs: interrupted; the runs not started are left for the next sitting")
    pool.shutdown()
    for s in ready:
        print(write_table(s, a))
    if failed:
        sys.exit("bugs: some runs failed:\n  " + "\n  ".join(failed))


if __name__ == "__main__":
    main()

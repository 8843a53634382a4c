#!/usr/bin/env python3
"""The paper's comparison on GNU coreutils, sed and dc: the bridge (`trestle run`) against
a coverage-guided system fuzzer (`trestle run --system-only`), same budget and seeds.

    python3 bench/paper.py [--smoke] [--time S] [--reps N] [--jobs J]
                           [--subjects cut,paste,tac,b2sum,sed,dc] [--work DIR] [--out FILE]

Subjects (SUBJECTS below; default cut,paste,tac,b2sum): coreutils 9.1 programs (any
with seeds in tests/coreutils/PROG/seeds), GNU sed 4.9 and dc from GNU bc 1.07.1, each
from Debian's source package, built at run time by its tests/*/build.sh.

Figures, per subject:
  coverage  branch coverage (clang source-based coverage, llvm-cov) of the program's own
            source files (coreutils: the build tree's src/; sed: sed/; dc: dc/ and bc's
            number library lib/number.c; never gnulib) over every system test a run
            produced: the seeds, the system fuzzer's queue and crashes, the lifted tests
            that were effective and the alarms' tests; median and range over --reps runs
            per mode;
  speed     unit executions per second (in-process and persistent forkserver harness)
            against spawning the program on its seeds; recording overhead;
  lifting   unit crashes and queue inputs lifted, lifted tests, effective share, true
            alarms, false positives suppressed, and false alarms: reported alarms whose
            reduced test does not crash a fresh run of the coverage build.

Every run writes its results as it finishes (WORK/runs/NAME/result.json); running the
same command again skips finished runs, resumes interrupted campaigns (`trestle run
--resume`) and rewrites the table. Default work dir: ~/.cache/trestle/bench-paper
(--smoke: ...-smoke). --smoke is a short budget: 120 s, 2 repetitions.
"""
import argparse, hashlib, json, os, platform, shutil, statistics, subprocess, sys, tempfile, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The trestle that runs system tests (run_tests); main() points it at WORK/bin's copy.
TRESTLE = REPO / "target" / "release" / "trestle"
sys.path.insert(0, str(Path(__file__).resolve().parent))
import unit_speed, record_overhead  # noqa: E402

# The build scripts: each copies its package's source to a fresh tree DIR/TREE, builds the
# programs asked for with the given compiler and flags and copies them to DIR/bin (which
# the others leave alone, so the packages share one DIR per variant).
PACKAGES = {
    "coreutils": {"script": "tests/coreutils/build.sh", "tree": "coreutils-9.1-build", "prog_args": True},
    "sed": {"script": "tests/sed/build.sh", "tree": "sed-4.9-build", "prog_args": False},  # gnulib's regex
    "bc": {"script": "tests/bc/build.sh", "tree": "bc-1.07.1-build", "prog_args": False},  # bin/bc, bin/dc
}


def coreutils(prog):
    return {"package": "coreutils", "seeds": f"tests/coreutils/{prog}/seeds", "group": "coreutils",
            # the program's own files: src/ of the build tree, shown without the "src/"
            "own": ["src/"], "strip": "src/", "own_text": "coreutils `src/`, not gnulib"}


# The subjects, by program name (the binary DIR/bin/NAME): build script, seeds, which
# files of the build tree are the program's own (a trailing "/": a directory) for the
# coverage figures, and the prefix dropped from their names in the tables. Any other
# coreutils program with seeds in tests/coreutils/PROG/seeds works too.
SUBJECTS = {p: coreutils(p) for p in ["cut", "paste", "tac", "b2sum"]}
SUBJECTS["sed"] = {"package": "sed", "seeds": "tests/sed/seeds", "group": "sed", "own": ["sed/"], "strip": "",
                   "own_text": "sed `sed/`, not gnulib and its regex matcher"}
SUBJECTS["dc"] = {"package": "bc", "seeds": "tests/bc/dc-seeds", "group": "dc", "own": ["dc/", "lib/number.c"],
                  "strip": "", "own_text": "dc `dc/` and bc's number library `lib/number.c`"}
DEFAULT_SUBJECTS = ["cut", "paste", "tac", "b2sum"]
COV_FLAGS = "-O1 -g -fprofile-instr-generate -fcoverage-mapping"
TOOLS = ["trestle", "trestle-exec", "trestle-fuzz-launcher", "libtrestle_crashstack.so", "libtrestle_inproc.so"]


def subject(name):
    """The registry entry of a subject (see SUBJECTS), or None."""
    if name in SUBJECTS:
        return SUBJECTS[name]
    if "/" not in name and (REPO / "tests/coreutils" / name / "seeds").is_dir():
        return coreutils(name)
    return None


def seeds_of(subj):
    return REPO / subject(subj)["seeds"]


def own_file(subj, filename):
    """The short name of `filename` (a path in llvm-cov's output) if it is one of the
    subject's own source files, else None (gnulib, other libraries, system headers)."""
    s = subject(subj)
    marker = "/" + PACKAGES[s["package"]]["tree"] + "/"
    if marker not in filename:
        return None
    rel = os.path.normpath(filename.rsplit(marker, 1)[1])
    if not any(rel == o or (o.endswith("/") and rel.startswith(o)) for o in s["own"]):
        return None
    return rel[len(s["strip"]):] if s["strip"] and rel.startswith(s["strip"]) else rel


def describe(subjects):
    """What the subjects are, for the table's heading: "GNU coreutils", "GNU sed and dc"."""
    groups = list(dict.fromkeys(subject(s)["group"] for s in subjects))
    return "GNU " + (", ".join(groups[:-1]) + " and " + groups[-1] if len(groups) > 1 else groups[0])


def log(msg):
    print(f"[paper {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def write_atomic(path, text):
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------
# setup: tools, trestle, the three builds of each subject
# ---------------------------------------------------------------------------------

def setup(work):
    """Install what is missing, build trestle, and keep a copy of its binaries in
    WORK/bin (so rebuilding trestle during a long benchmark changes nothing)."""
    r = subprocess.run(["bash", "-c", "source tests/setup.sh >&2 && echo \"$TRESTLE_BIN\""], cwd=REPO,
                       stdout=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit("paper: tests/setup.sh failed (see above)")
    built = Path(r.stdout.strip())
    for tool in ["llvm-profdata-19", "llvm-cov-19", "clang-19"]:
        if not shutil.which(tool):
            sys.exit(f"paper: {tool} not found after setup (llvm-19 / clang-19 packages)")
    bin_dir = work / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for t in TOOLS:
        src = built / t
        if not src.exists():
            sys.exit(f"paper: {src} missing after the build")
        dst = bin_dir / t
        if not dst.exists() or dst.read_bytes() != src.read_bytes():
            shutil.copy2(src, dst)
    return built, bin_dir


def build_subjects(work, built, subjects):
    """trestle-cc -O2 -g (fuzzing, carving, unit harness), clang-19 -O2 -g (recording
    overhead), clang-19 coverage build (validation, effective tests, measuring): each
    variant in WORK/build/VARIANT, each build script run once for its subjects."""
    variants = {
        "trestle": (str(built / "trestle-cc"), "-O2 -g"),
        "plain": ("clang-19", "-O2 -g"),
        "cov": ("clang-19", COV_FLAGS),
    }
    packages = {}
    for s in subjects:
        packages.setdefault(subject(s)["package"], []).append(s)
    out = {}
    for name, (cc, flags) in variants.items():
        d = work / "build" / name
        for pkg, progs in packages.items():
            if all((d / "bin" / s).exists() for s in progs):
                continue
            log(f"building {', '.join(progs)} ({pkg}) with {cc} {flags} (a few minutes)")
            logf = work / "build" / f"{name}-{pkg}.log"
            logf.parent.mkdir(parents=True, exist_ok=True)
            cmd = ["bash", str(REPO / PACKAGES[pkg]["script"]), "--cc", cc, "--cflags", flags, "--out", str(d)]
            if PACKAGES[pkg]["prog_args"]:
                cmd += ["--prog", ",".join(progs)]
            # one configure cache per package and variant (compiler and flags)
            cache = work / "build" / f"{name}-{pkg}.config.cache"
            with logf.open("w") as fh:
                r = subprocess.run(cmd, stdout=fh, stderr=fh, env=dict(os.environ, TRESTLE_CONFIG_CACHE=str(cache)))
            if r.returncode != 0 or not all((d / "bin" / s).exists() for s in progs):
                sys.exit(f"paper: building the {name} variant of {pkg} failed; see {logf}")
        out[name] = d / "bin"
    return out


# ---------------------------------------------------------------------------------
# running system tests on the coverage build
# ---------------------------------------------------------------------------------

def produced_tests(campaign, seeds):
    """Every system test a campaign produced, deduplicated by content."""
    files = sorted(Path(seeds).glob("*.json"))
    for sub in ["system/queue", "system/crashes", "effective"]:
        files += sorted(p for p in (campaign / sub).glob("*.json") if not p.name.startswith("."))
    for a in sorted((campaign / "alarms").glob("*/")):
        files += [a / "lifted.json", a / "reduced.json"]
    seen, tests = set(), []
    for f in files:
        try:
            t = json.loads(f.read_bytes())
        except (OSError, ValueError):
            continue
        h = hashlib.sha1(json.dumps(t, sort_keys=True).encode()).hexdigest()
        if h not in seen:
            seen.add(h)
            tests.append(t)
    return tests


def run_tests(binary, tests, env_extra, timeout=5.0, profile_dir=None):
    """Run JSON system tests on `binary` as trestle does: `trestle exec --sandbox`,
    trestle's one executor (each test in a fresh working directory holding its files,
    stdin read from a file beside it, its own process group, isolated by bubblewrap so
    that a fuzzed test writing to /bin/sh cannot; environment PATH=/usr/bin:/bin, the
    test's env, then env_extra). With profile_dir each run's LLVM profile lands there.
    One result per test: the exit status (negative: the signal that ended it), or None
    on a timeout or a test the executor could not run."""
    if not tests:
        return []
    with tempfile.TemporaryDirectory(prefix="trestle-paper-") as root:
        for i, t in enumerate(tests):
            Path(root, f"{i:06}.json").write_text(json.dumps(t))
        cmd = [str(TRESTLE), "exec", "--sandbox", "--program", str(binary), root, "--json", "--timeout", f"{timeout}s"]
        if profile_dir is not None:
            cmd += ["--profile-dir", str(profile_dir)]
        for k, v in env_extra.items():
            cmd += ["--env", f"{k}={v}"]
        r = subprocess.run(cmd, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    runs = {v["name"]: v for v in map(json.loads, r.stdout.splitlines())}
    if r.returncode != 0 and not runs:
        raise RuntimeError(f"trestle exec on {binary} failed ({r.returncode}): {r.stderr.strip()}")
    codes = []
    for i in range(len(tests)):
        v = runs.get(f"{i:06}", {})
        codes.append(v["exit"] if v.get("exit") is not None else -v["signal"] if v.get("signal") is not None else None)
    return codes


def branch_coverage(subj, cov_bin, tests, scratch, keep_profile=False):
    """Branch (and line) coverage of the program's own sources (own_file) over `tests`;
    with keep_profile, the merged profile stays in scratch/merged.profdata."""
    prof = scratch / "prof"
    shutil.rmtree(prof, ignore_errors=True)
    prof.mkdir(parents=True)
    run_tests(cov_bin, tests, {}, profile_dir=prof)
    raws = sorted(prof.glob("*.profraw"))
    if not raws:
        raise RuntimeError(f"no profile written by {cov_bin} (not a coverage build?)")
    merged = scratch / "merged.profdata"
    subprocess.run(["llvm-profdata-19", "merge", "-sparse", "-o", str(merged)] + [str(r) for r in raws], check=True)
    shutil.rmtree(prof, ignore_errors=True)
    res = profile_coverage(subj, cov_bin, merged)
    if not keep_profile:
        merged.unlink()
    return res


def profile_coverage(subj, cov_bin, profdata):
    """Branch and line coverage of the program's own sources (own_file) in a merged
    profile of `cov_bin`, and the files counted."""
    out = subprocess.run(["llvm-cov-19", "export", "-summary-only", "-instr-profile", str(profdata), str(cov_bin)],
                         check=True, capture_output=True, text=True).stdout
    res = {"branches": 0, "branches_total": 0, "lines": 0, "lines_total": 0, "files": []}
    for f in json.loads(out)["data"][0]["files"]:
        name = own_file(subj, f["filename"])
        if name is None:
            continue  # gnulib (lib/) and system headers are not the program's own code
        s = f["summary"]
        res["branches"] += s["branches"]["covered"]
        res["branches_total"] += s["branches"]["count"]
        res["lines"] += s["lines"]["covered"]
        res["lines_total"] += s["lines"]["count"]
        res["files"].append(name)
    return res


def unreached_branches(subj, cov_bin, profdata):
    """The branch directions of the program's own files no test took: {file: [[line,
    "true"/"false"/"both", source text]]}, and how many sit in macro expansions."""
    out = subprocess.run(["llvm-cov-19", "export", "-instr-profile", str(profdata), str(cov_bin)],
                         check=True, capture_output=True, text=True).stdout
    res, in_macros = {}, 0
    for f in json.loads(out)["data"][0]["files"]:
        name = own_file(subj, f["filename"])
        if name is None:
            continue
        try:
            # split on newlines only, as llvm-cov counts lines (dc's sources hold form feeds,
            # which splitlines would count as line breaks too)
            text = Path(f["filename"]).read_text(errors="replace").split("\n")
        except OSError:
            text = []
        rows = []
        for b in f["branches"]:
            line, t, fl = b[0], b[4], b[5]
            dirs = "both" if t == 0 and fl == 0 else "true" if t == 0 else "false" if fl == 0 else None
            if dirs:
                src = text[line - 1].strip() if 0 < line <= len(text) else ""
                rows.append([line, dirs, src[:70]])
        for e in f.get("expansions", []):
            in_macros += sum((b[4] == 0) + (b[5] == 0) for b in e.get("branches", []))
        if rows:
            res[name] = sorted(rows)
    return res, in_macros


def union_coverage(subj, work, builds):
    """Coverage of every test any run of the subject produced (both modes together),
    and the branches none of them reached."""
    f = work / "union" / f"{subj}.json"
    if f.exists():
        return json.loads(f.read_text())
    seeds = seeds_of(subj)
    seen, tests = set(), []
    for d in sorted((work / "runs").glob(f"{subj}-*")):
        for t in produced_tests(d / "campaign", seeds):
            k = json.dumps(t, sort_keys=True)
            if k not in seen:
                seen.add(k)
                tests.append(t)
    scratch = work / "union" / subj
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    log(f"{subj}: coverage of all runs together ({len(tests)} tests)")
    cov = branch_coverage(subj, builds["cov"] / subj, tests, scratch, keep_profile=True)
    cov["unreached"], cov["unreached_in_macros"] = unreached_branches(subj, builds["cov"] / subj,
                                                                      scratch / "merged.profdata")
    cov["tests"] = len(tests)
    shutil.rmtree(scratch, ignore_errors=True)
    write_atomic(f, json.dumps(cov, indent=1))
    return cov


# ---------------------------------------------------------------------------------
# one campaign
# ---------------------------------------------------------------------------------

def campaign_run(task, a, work, bin_dir, builds):
    subj, mode, rep = task
    d = work / "runs" / f"{subj}-{mode}-{rep}"
    result = d / "result.json"
    if result.exists():
        return json.loads(result.read_text())
    d.mkdir(parents=True, exist_ok=True)
    camp = d / "campaign"
    seeds = seeds_of(subj)
    t = bin_dir / "trestle"
    env = dict(os.environ, TRESTLE_BIN=str(bin_dir))
    cj = camp / "campaign.json"
    state = json.loads(cj.read_text()) if cj.exists() else None
    if state is None:
        shutil.rmtree(camp, ignore_errors=True)
        cmd = [str(t), "run", "--program", str(builds["trestle"] / subj), "--seeds", str(seeds),
               "--validate-with", str(builds["cov"] / subj), "--time", f"{a.time}s", "--out", str(camp),
               "--seed", str(rep + 1), "--plain"]
        if mode == "system":
            cmd.append("--system-only")
        elif a.forkserver:
            cmd.append("--forkserver")
    elif not state.get("finished") and state["elapsed"] < state["settings"]["budget"] - 1:
        cmd = [str(t), "run", "--resume", str(camp), "--plain"]
    else:
        cmd = None
    if cmd:
        log(f"{d.name}: {'resuming' if state else 'starting'} ({a.time}s)")
        with (d / "run.log").open("a") as fh:
            r = subprocess.run(cmd, stdout=fh, stderr=fh, env=env)
        if r.returncode != 0:
            raise RuntimeError(f"{d.name}: trestle run exited {r.returncode}; see {d / 'run.log'}")
    c = json.loads(cj.read_text())
    log(f"{d.name}: measuring coverage")
    tests = produced_tests(camp, seeds)
    cov = branch_coverage(subj, builds["cov"] / subj, tests, d)
    lift = json.loads((camp / "lift.json").read_text()) if (camp / "lift.json").exists() else {}
    alarms = json.loads((camp / "alarms.json").read_text())["alarms"] if (camp / "alarms.json").exists() else []
    # A false alarm is a reported alarm whose reduced test does not crash the program
    # when run again here, outside the campaign.
    confirmed, false_alarms = [], []
    for al in alarms:
        red = camp / "alarms" / al["id"] / "reduced.json"
        rc = run_tests(builds["cov"] / subj, [json.loads(red.read_text())], {"LLVM_PROFILE_FILE": "/dev/null"})[0] \
            if red.exists() else None
        (confirmed if rc is not None and rc < 0 else false_alarms).append(al["id"])
    res = {
        "subject": subj, "mode": mode, "rep": rep, "budget": c["settings"]["budget"], "elapsed": c["elapsed"],
        "system_executions": c["system_executions"], "unit_executions": c["unit_executions"],
        "units_carved": c["units_carved"], "units_parameterized": c["units_parameterized"],
        "units_fuzzed": len(c["fuzzed"]), "unit_errors": sum(1 for f in c["fuzzed"] if f.get("error")),
        "tests_measured": len(tests), "coverage": cov, "lift": lift,
        "alarms": [al.get("signature", al["id"]) for al in alarms], "alarms_confirmed": len(confirmed),
        "false_alarms": false_alarms,
    }
    write_atomic(result, json.dumps(res, indent=1))
    log(f"{d.name}: {cov['branches']}/{cov['branches_total']} branches, {len(tests)} tests, "
        f"{len(alarms)} alarm(s)")
    return res


# ---------------------------------------------------------------------------------
# speed: unit against system executions, recording overhead
# ---------------------------------------------------------------------------------

def speed(subj, work, bin_dir, builds, seconds):
    d = work / "speed" / subj
    result = d / "result.json"
    if result.exists():
        return json.loads(result.read_text())
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    t = bin_dir / "trestle"
    seeds = seeds_of(subj)
    env = dict(os.environ, TRESTLE_BIN=str(bin_dir))
    log(f"speed {subj}: recording and carving the seeds")
    subprocess.run([str(t), "record", "--program", str(builds["trestle"] / subj), "--tests", str(seeds),
                    "--out", str(d / "traces")], check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run([str(t), "carve", str(d / "traces"), "--out", str(d / "units")], check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    index = json.loads((d / "units" / "index.json").read_text())
    rows = [r for r in index["units"] if r.get("params", 0) > 0]
    counts = {}
    for r in rows:
        counts[r["function"]] = counts.get(r["function"], 0) + 1
    funcs = [f for f, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:5]]
    unit_speed.T = record_overhead.T = t
    sys_rate = unit_speed.system_rate(builds["trestle"] / subj, seeds, seconds)
    per_fn = []
    for f in funcs:
        units = [r for r in rows if r["function"] == f][:2]
        inproc = [x for x in (unit_speed.unit_rate(d / "units" / u["file"], seconds, ["--in-process"]) for u in units) if x]
        pers = [x for x in (unit_speed.unit_rate(d / "units" / u["file"], seconds, []) for u in units) if x]
        per_fn.append({"function": f, "units": len(units),
                       "in_process": statistics.median(inproc) if inproc else None,
                       "persistent": statistics.median(pers) if pers else None})
        log(f"speed {subj}: {f}: in-process {per_fn[-1]['in_process']}, persistent {per_fn[-1]['persistent']}")
    log(f"speed {subj}: recording overhead")
    med, worst, _ = record_overhead.measure(builds["plain"] / subj, builds["trestle"] / subj, seeds, 5)
    res = {"subject": subj, "system_rate": sys_rate, "functions": per_fn, "record_overhead_median": med,
           "record_overhead_worst": worst, "units_carved": len(index["units"]), "units_parameterized": len(rows)}
    write_atomic(result, json.dumps(res, indent=1))
    return res


# ---------------------------------------------------------------------------------
# the table
# ---------------------------------------------------------------------------------

def fmt_range(xs):
    return f"{statistics.median(xs):.0f} [{min(xs):.0f}–{max(xs):.0f}]" if xs else "–"


def write_results(a, work, builds, results, speeds, seeds_cov, out, unions=None):
    unions = unions or {}
    lines = [f"# trestle against the paper on {describe(a.subjects)}", ""]
    lines.append(f"Machine: {platform.machine()}, {os.cpu_count()} cores, "
                 f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB, {platform.system()} "
                 f"{platform.release()}; {a.jobs} runs at a time. Written {time.strftime('%Y-%m-%d %H:%M')}.")
    lines.append("")
    lines.append(f"Command: `{' '.join(['python3', 'bench/paper.py'] + sys.argv[1:])}`")
    lines.append("")
    lines.append(f"Budget {a.time} s per run, {a.reps} repetitions per mode (random seeds 1..{a.reps}, the same for "
                 "both modes). Branch coverage: clang source-based coverage (llvm-cov, both directions of every "
                 "branch counted) of the program's own files ("
                 + "; ".join(dict.fromkeys(subject(s)["own_text"] for s in a.subjects))
                 + ") over every system test the run produced (seeds, system fuzzer queue and crashes, effective "
                 "lifted tests, alarms). Median [min–max].")
    lines.append("")
    lines.append("## Branch coverage (the paper's table 2)")
    lines.append("")
    lines.append("| subject | branches | seeds only | system-only | bridge | bridge / system-only (medians) "
                 "| all runs together | ceiling | runs |")
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for s in a.subjects:
        sysv = [r["coverage"]["branches"] for r in results if r["subject"] == s and r["mode"] == "system"]
        brv = [r["coverage"]["branches"] for r in results if r["subject"] == s and r["mode"] == "bridge"]
        total = next((r["coverage"]["branches_total"] for r in results if r["subject"] == s), None)
        ratio = f"{statistics.median(brv) / statistics.median(sysv):.2f}x" if sysv and brv else "–"
        # The most any run could reach over the system-only median: every branch.
        ceiling = f"{total / statistics.median(sysv):.2f}x" if sysv and total else "–"
        sc = seeds_cov.get(s)
        u = unions.get(s)
        lines.append(f"| {s} | {total or '–'} | {sc['branches'] if sc else '–'} | {fmt_range(sysv)} | "
                     f"{fmt_range(brv)} | {ratio} | {u['branches'] if u else '–'} | {ceiling} | "
                     f"{len(sysv)} + {len(brv)} |")
    lines.append("")
    lines.append("All runs together: the branches the tests of every run of the subject (both modes) reach. "
                 "Ceiling: all branches of the program's files over the system-only median, the largest ratio "
                 "the bridge could have reached.")
    lines.append("")
    lines.append("## Runs")
    lines.append("")
    lines.append("| run | branches | lines | tests measured | system execs | unit execs | units carved / fuzzed | "
                 "alarms | false alarms |")
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for r in sorted(results, key=lambda r: (a.subjects.index(r["subject"]), r["mode"], r["rep"])):
        c = r["coverage"]
        lines.append(f"| {r['subject']} {r['mode']} {r['rep']} | {c['branches']}/{c['branches_total']} | "
                     f"{c['lines']}/{c['lines_total']} | {r['tests_measured']} | {r['system_executions']} | "
                     f"{r['unit_executions']} | {r['units_carved']} / {r['units_fuzzed']} | {len(r['alarms'])} | "
                     f"{len(r['false_alarms'])} |")
    lines.append("")
    lines.append("## Lifting (the paper's tables 4 and 5), bridge runs summed per subject")
    lines.append("")
    lines.append("| subject | unit crashes | queue inputs | lifted tests | effective | effective share | "
                 "true-alarm tests | distinct alarms | false positives suppressed | false alarms |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    for s in a.subjects:
        rs = [r for r in results if r["subject"] == s and r["mode"] == "bridge"]
        if not rs:
            continue
        g = lambda k: sum(r["lift"].get(k, 0) for r in rs)
        alarms = sorted({x for r in rs for x in r["alarms"]})
        lines.append(f"| {s} | {g('unit_crashes')} | {g('unit_queue')} | {g('lifted_tests')} | {g('effective')} | "
                     f"{100 * g('effective') / max(g('lifted_tests'), 1):.1f}% | {g('true_alarm_tests')} | "
                     f"{len(alarms)} | {g('false_positives')} | {sum(len(r['false_alarms']) for r in rs)} |")
    sys_alarms = sorted({x for r in results if r["mode"] == "system" for x in r["alarms"]})
    lines.append("")
    lines.append(f"Alarms, bridge: {', '.join(sorted({x for r in results if r['mode'] == 'bridge' for x in r['alarms']})) or 'none'}; "
                 f"system-only: {', '.join(sys_alarms) or 'none'}.")
    if unions:
        lines.append("")
        lines.append("## Branches no run reached")
        lines.append("")
        lines.append("Line, the direction never taken, and the line's source, for the branches of the program's "
                     "own files that no test of any run took (both modes together); branches inside macro "
                     "expansions are counted only.")
        for s in a.subjects:
            u = unions.get(s)
            if not u:
                continue
            n = sum(len(v) for v in u["unreached"].values())
            lines.append("")
            lines.append(f"<details><summary>{s}: {n} branch(es) with a direction never taken, and "
                         f"{u['unreached_in_macros']} direction(s) in macro expansions</summary>")
            lines.append("")
            for f, rows in u["unreached"].items():
                seen = {}
                for line, dirs, src in rows:
                    seen[(line, dirs, src)] = seen.get((line, dirs, src), 0) + 1
                for (line, dirs, src), k in seen.items():
                    times = f" (x{k})" if k > 1 else ""
                    lines.append(f"- `{f}:{line}` {dirs}{times}: `{src.replace('`', chr(39))}`")
            lines.append("")
            lines.append("</details>")
    if speeds:
        lines.append("")
        lines.append("## Speed (the paper's table 6)")
        lines.append("")
        lines.append("Unit executions per second of `trestle fuzz` (CmpLog on) on parameterized units carved from "
                     "the seeds (median over up to 2 units of each of the 5 functions with the most units), against "
                     "spawning the trestle build on its seeds; recording overhead: median over seeds of the wall "
                     "time with recording on over a clang-19 -O2 -g build.")
        lines.append("")
        lines.append("| subject | system tests/s | function | in-process exec/s | vs system | persistent exec/s | vs system |")
        lines.append("|---|---|---|---|---|---|---|")
        for s in a.subjects:
            sp = speeds.get(s)
            if not sp:
                continue
            for f in sp["functions"]:
                ip, pe = f["in_process"], f["persistent"]
                lines.append(f"| {s} | {sp['system_rate']:.0f} | {f['function']} | {ip or 0:.0f} | "
                             f"{(ip or 0) / sp['system_rate']:.0f}x | {pe or 0:.0f} | {(pe or 0) / sp['system_rate']:.0f}x |")
        lines.append("")
        lines.append("Mapping of the units carved from the seeds (parameters by where they live and what they are) "
                     "and recording overhead:")
        lines.append("")
        lines.append("| subject | units carved | with parameters | parameters by kind | recording overhead (median) "
                     "| worst seed |")
        lines.append("|---|---|---|---|---|---|")
        for s in a.subjects:
            sp = speeds.get(s)
            if sp:
                try:
                    kinds = json.loads((work / "speed" / s / "units" / "index.json").read_text())["param_kinds"]
                    kinds = ", ".join(f"{v} {k}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))
                except (OSError, ValueError, KeyError):
                    kinds = "–"
                lines.append(f"| {s} | {sp['units_carved']} | {sp['units_parameterized']} | {kinds} | "
                             f"{sp['record_overhead_median']:.2f}x | {sp['record_overhead_worst']:.2f}x |")
    text = "\n".join(lines) + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, text)
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="short budget: 120 s per run, 2 repetitions")
    ap.add_argument("--time", type=int, help="seconds per run (default 600; --smoke 120)")
    ap.add_argument("--reps", type=int, help="repetitions per mode (default 3; --smoke 2)")
    ap.add_argument("--jobs", type=int, default=2, help="runs at a time (default 2: one per core)")
    ap.add_argument("--subjects", default=",".join(DEFAULT_SUBJECTS),
                    help=f"comma-separated (default {','.join(DEFAULT_SUBJECTS)}; known: {','.join(SUBJECTS)}, "
                    "and any coreutils program with seeds in tests/coreutils/PROG/seeds)")
    ap.add_argument("--forkserver", action="store_true", help="bridge runs fuzz units through the forkserver, "
                    "not in-process")
    ap.add_argument("--speed-seconds", type=int, default=3, help="seconds per speed measurement")
    ap.add_argument("--no-speed", action="store_true", help="skip the speed figures")
    ap.add_argument("--work", help="work directory (kept; rerunning continues it)")
    ap.add_argument("--out", help="Markdown result (default bench/results/paper.md; --smoke: bench/results/paper-smoke.md)")
    a = ap.parse_args()
    a.time = a.time or (120 if a.smoke else 600)
    a.reps = a.reps or (2 if a.smoke else 3)
    a.subjects = [s for s in a.subjects.split(",") if s]
    for s in a.subjects:
        if subject(s) is None:
            sys.exit(f"paper: unknown subject {s} (known: {', '.join(SUBJECTS)}, or a coreutils program with "
                     f"tests/coreutils/{s}/seeds)")
        if not seeds_of(s).is_dir():
            sys.exit(f"paper: no seeds for {s} ({subject(s)['seeds']})")
    cache = Path(os.environ.get("HOME", "/root")) / ".cache/trestle"
    work = Path(a.work) if a.work else cache / ("bench-paper-smoke" if a.smoke else "bench-paper")
    work.mkdir(parents=True, exist_ok=True)
    out = Path(a.out) if a.out else REPO / ("bench/results/paper-smoke.md" if a.smoke else "bench/results/paper.md")
    settings = {"time": a.time, "reps": a.reps, "forkserver": a.forkserver}
    sfile = work / "settings.json"
    if sfile.exists() and json.loads(sfile.read_text()) != settings:
        sys.exit(f"paper: {work} holds runs with other settings ({sfile.read_text().strip()}); choose another --work")
    write_atomic(sfile, json.dumps(settings))
    log(f"work directory {work}; results go to {out}")
    built, bin_dir = setup(work)
    global TRESTLE
    TRESTLE = bin_dir / "trestle"
    builds = build_subjects(work, built, a.subjects)

    seeds_cov = {}
    for s in a.subjects:
        f = work / "seeds" / f"{s}.json"
        if not f.exists():
            f.parent.mkdir(parents=True, exist_ok=True)
            tests = [json.loads(p.read_text()) for p in sorted(seeds_of(s).glob("*.json"))]
            write_atomic(f, json.dumps(branch_coverage(s, builds["cov"] / s, tests, f.parent)))
        seeds_cov[s] = json.loads(f.read_text())

    # A bridge run and its system-only twin go side by side, so both see the same load.
    tasks = [(s, m, rep) for s in a.subjects for rep in range(a.reps) for m in ("bridge", "system")]
    results, failed = [], []
    with ThreadPoolExecutor(max_workers=a.jobs) as pool:
        futures = {pool.submit(campaign_run, t, a, work, bin_dir, builds): t for t in tasks}
        for fut, t in futures.items():
            try:
                results.append(fut.result())
            except Exception as e:  # one broken run must not lose the others
                failed.append(f"{t}: {e}")
                log(f"run {t} failed: {e}")
            write_results(a, work, builds, results, {}, seeds_cov, out)
    unions = {}
    for s in a.subjects:
        if sum(1 for r in results if r["subject"] == s) == 2 * a.reps:
            try:
                unions[s] = union_coverage(s, work, builds)
            except Exception as e:
                failed.append(f"union {s}: {e}")
                log(f"union {s} failed: {e}")
    write_results(a, work, builds, results, {}, seeds_cov, out, unions)
    speeds = {}
    if not a.no_speed:
        for s in a.subjects:
            try:
                speeds[s] = speed(s, work, bin_dir, builds, a.speed_seconds)
            except Exception as e:
                failed.append(f"speed {s}: {e}")
                log(f"speed {s} failed: {e}")
            write_results(a, work, builds, results, speeds, seeds_cov, out, unions)
    text = write_results(a, work, builds, results, speeds, seeds_cov, out, unions)
    print(text)
    if failed:
        sys.exit("paper: some runs failed:\n  " + "\n  ".join(failed))


if __name__ == "__main__":
    main()

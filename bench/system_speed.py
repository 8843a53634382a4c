#!/usr/bin/env python3
"""System-level fuzzing speed: `trestle sysfuzz` against AFL++, executions per second.

    python3 bench/system_speed.py [--subjects kvshell,cut,sed] [--reps 3] [--time 60]
                                  [--columns trestle,aflpp,...] [--results DIR]
                                  [--work DIR] [--table-only] [--profile]

Per subject, one after the other on one core (never two runs at once):
  trestle     `trestle sysfuzz --time T --json --no-cmplog` on a trestle-cc -O2 -g build,
              from the subject's own seeds (arguments, stdin and files vary): the
              forkserver at the start of main of the build's lean sibling (what
              sysfuzz runs by default); without CmpLog, as the aflpp column (both
              count trimming executions, as afl-fuzz does);
  program     the same with --no-lean: the recording build itself (the whole
              recording runtime in every forked child);
  spawn       the same with --no-forkserver: the program started for every test
              (what the forkserver saves);
  aflpp       afl-fuzz -V T on an afl-clang-fast -O2 -g build (Debian's afl++,
              forkserver, no CmpLog: its fastest; bound to a free core, as it does
              by default and as trestle does), the seeds' stdin (kvshell) or their
              input file behind fixed arguments with @@ (cut, sed);
  roundtrip   the lean build on one fixed small test through the system fuzzer's own
              executor, unmutated: `trestle sysfuzz --repeat-seeds --no-cmplog` with
              that test as the only seed (per run its stdin file, the request, fork,
              run, exit, wait, the edge map classified and compared, as for a fuzzed
              input): what an execution costs the fuzzer apart from mutating;
  roundtrip-program  the same on the recording build (--no-lean). (Before, a Python copy of the forkserver protocol sent
              bare requests; the aflpp-roundtrip column still does that for AFL++'s
              protocol, which is AFL++'s, not ours.)
The ratio is trestle / aflpp (medians). Results: bench/results/system-speed/<subject>-
<column>-<rep>.json as each run ends (finished runs are skipped when the command runs
again); the table bench/results/system-speed.md is rewritten after every run. With
--results DIR, the runs go to DIR and the table to DIR.md (a new measurement beside
the old); --columns measures only those columns.
--profile then runs the three round trips (roundtrip, roundtrip-program, aflpp-roundtrip)
again under `perf record -a`, 10 s each, and adds to the table where each microsecond of
an execution goes: CPU per execution by process and object, and the program's busiest
functions, per build (<subject>-cpu-<column>.json).
"""
import argparse, base64, bisect, collections, hashlib, json, os, re, shutil, signal, statistics, subprocess, sys, tempfile, time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
import unit_speed  # noqa: E402  (a test's file or stdin: text, or {"base64": ...})

RELEASE = REPO / "target" / "release"
RESULTS = REPO / "bench" / "results" / "system-speed"
CFLAGS = "-O2 -g"
# afl-fuzz at full strength: it binds itself to a free core (as trestle does).
AFL_ENV = {"AFL_NO_UI": "1", "AFL_SKIP_CPUFREQ": "1", "AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES": "1"}
SUBJECTS = {
    "kvshell": {"seeds": "tests/subjects/kvshell/seeds", "afl": ["@stdin"]},
    "cut": {"seeds": "tests/coreutils/cut/seeds", "afl": ["-d", ":", "-f", "1,3-", "@@"]},
    "sed": {"seeds": "tests/sed/seeds", "afl": ["-n", "-E", "s/([a-z]+) ([0-9]+)/\\2 \\1/gp", "@@"]},
}
COLUMNS = ["trestle", "program", "spawn", "aflpp", "roundtrip", "roundtrip-program", "aflpp-roundtrip"]
# The identical-work columns --profile breaks down per execution.
PROFILED = ["roundtrip", "roundtrip-program", "aflpp-roundtrip"]


def log(msg):
    print(f"[system-speed {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def content(c):
    return b"" if c is None else unit_speed.content(c)


def build(subject, cc, work, tag):
    """The subject built with `cc`; built again when the compiler (trestle-cc and the
    runtime it links, or afl-clang-fast) changed since."""
    out = work / f"build-{subject}-{tag}"
    prog = out / "bin" / subject
    stamp = out / "compiler.sha1"
    cc_path = Path(shutil.which(cc) or cc)
    ident = hashlib.sha1(cc_path.read_bytes()).hexdigest()
    if tag == "trestle":  # the runtime is a static library beside the wrapper
        for lib in sorted(cc_path.parent.glob("libtrestle_runtime*.a")):
            ident += hashlib.sha1(lib.read_bytes()).hexdigest()
    if prog.exists() and stamp.exists() and stamp.read_text() == ident:
        return prog
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    if subject == "kvshell":
        (out / "bin").mkdir(exist_ok=True)
        subprocess.run([cc, *CFLAGS.split(), str(REPO / "tests/subjects/kvshell/kvshell.c"), "-o", str(prog)], check=True)
    elif subject == "sed":
        subprocess.run(["bash", str(REPO / "tests/sed/build.sh"), "--cc", cc, "--out", str(out)], check=True, stdout=subprocess.DEVNULL)
    else:
        subprocess.run(["bash", str(REPO / "tests/coreutils/build.sh"), "--cc", cc, "--out", str(out), "--prog", subject],
                       check=True, stdout=subprocess.DEVNULL)
    stamp.write_text(ident)
    return prog


def afl_inputs(subject, dest):
    """The seeds as AFL++ inputs: stdin, or the (first) input file."""
    dest.mkdir(parents=True, exist_ok=True)
    n = 0
    for p in sorted((REPO / SUBJECTS[subject]["seeds"]).glob("*.json")):
        t = json.loads(p.read_text())
        data = content(t.get("stdin")) if SUBJECTS[subject]["afl"] == ["@stdin"] else \
            next((content(v) for v in (t.get("files") or {}).values()), content(t.get("stdin")))
        if data:
            (dest / p.stem).write_bytes(data)
            n += 1
    return n


def run_trestle(prog, subject, secs, work, extra):
    out = Path(tempfile.mkdtemp(prefix="sysfuzz-", dir=work))
    cmd = [str(RELEASE / "trestle"), "sysfuzz", "--program", str(prog), "--seeds", str(REPO / SUBJECTS[subject]["seeds"]),
           "--time", f"{secs}s", "--out", str(out / "o"), "--json", "--no-cmplog"] + extra
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=True)
    d = json.loads(r.stdout)
    shutil.rmtree(out, ignore_errors=True)
    return {"execs": d["executions"], "seconds": d["seconds"], "execs_per_sec": d["execs_per_sec"], "edges": d["edges"],
            "build": d.get("build"), "build_note": d.get("build_note")}


def lean_of(prog):
    """The lean sibling trestle-cc links beside a program (trestle_abi::lean::sibling)."""
    lean = prog.with_name(f".{prog.name}.trestle-lean")
    if not lean.exists():
        raise RuntimeError(f"{prog} has no lean sibling {lean}: built by an older trestle-cc?")
    return lean


def run_afl(prog, subject, secs, work, rep):
    d = Path(tempfile.mkdtemp(prefix="afl-", dir=work))
    n = afl_inputs(subject, d / "in")
    args = SUBJECTS[subject]["afl"]
    target = [str(prog)] + ([] if args == ["@stdin"] else args)
    env = dict(os.environ, **AFL_ENV)
    subprocess.run(["afl-fuzz", "-i", str(d / "in"), "-o", str(d / "out"), "-V", str(secs), "-s", str(rep + 1), "--", *target],
                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    stats = {}
    for line in (d / "out" / "default" / "fuzzer_stats").read_text().splitlines():
        k, _, v = line.partition(":")
        stats[k.strip()] = v.strip()
    execs = int(stats["execs_done"])
    seconds = int(stats["last_update"]) - int(stats["start_time"])
    shutil.rmtree(d, ignore_errors=True)
    return {"execs": execs, "seconds": seconds, "execs_per_sec": execs / max(seconds, 1), "inputs": n,
            "edges": int(stats.get("edges_found", 0))}


def fixed_test(subject, work):
    """The test both round trips run: the first seed as AFL++ gets it, its stdin (kvshell)
    or its input file behind the fixed arguments (cut, sed). (args, stdin bytes)."""
    d = work / f"fixed-{subject}"
    afl_inputs(subject, d)
    data = sorted(d.iterdir())[0].read_bytes()
    args = SUBJECTS[subject]["afl"]
    if args == ["@stdin"]:
        return [], data
    (d / "input").write_bytes(data)
    return [str(d / "input") if a == "@@" else a for a in args], b""


def pipes_on_198_199():
    """A server's control and status pipes on descriptors 198 and 199 (the AFL
    convention both forkservers follow): (preexec function, our write end, our read end)."""
    cr, cw = os.pipe()
    sr, sw = os.pipe()

    def pre():
        os.dup2(cr, 198)
        os.dup2(sw, 199)
    return pre, (cr, cw), (sr, sw)


def timed(secs, once):
    """Run `once` in batches of 100 for about `secs`, bound to one core (as the
    fuzzers bind themselves): executions per second."""
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})
    n, start = 0, time.time()
    while time.time() - start < secs:
        for _ in range(100):
            once()
        n += 100
    secs = time.time() - start
    os.sched_setaffinity(0, allowed)
    return {"execs": n, "seconds": secs, "execs_per_sec": n / secs}


def run_roundtrip(prog, subject, secs, work, extra):
    """The fixed test through the system fuzzer's executor, unmutated (`trestle sysfuzz
    --repeat-seeds`, which binds itself to a free core as the fuzzers do)."""
    args, stdin = fixed_test(subject, work)
    seeds = work / f"fixed-{subject}-seed"
    shutil.rmtree(seeds, ignore_errors=True)
    seeds.mkdir()
    (seeds / "fixed.json").write_text(json.dumps({"args": args, "stdin": {"base64": base64.b64encode(stdin).decode()}}))
    out = Path(tempfile.mkdtemp(prefix="sysfuzz-", dir=work))
    cmd = [str(RELEASE / "trestle"), "sysfuzz", "--program", str(prog), "--seeds", str(seeds), "--time", f"{secs}s",
           "--out", str(out / "o"), "--json", "--no-cmplog", "--repeat-seeds"] + extra
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=True)
    shutil.rmtree(out, ignore_errors=True)
    d = json.loads(r.stdout)
    return {"execs": d["executions"], "seconds": d["seconds"], "execs_per_sec": d["execs_per_sec"],
            "executor": "sysfuzz --repeat-seeds", "build": d.get("build"), "build_note": d.get("build_note")}


def run_afl_roundtrip(prog, subject, secs, work):
    """The AFL++ build's forkserver alone (its protocol: a status word, then per run a
    word from us, the child's pid and its wait status) on the same fixed test; stdin
    is a file we seek back to the start before each run, as afl-fuzz does."""
    args, stdin = fixed_test(subject, work)
    path = Path(tempfile.mkdtemp(prefix="rt-", dir="/dev/shm")) / "stdin"
    path.write_bytes(stdin)
    fin = os.open(path, os.O_RDONLY)
    pre, (cr, cw), (sr, sw) = pipes_on_198_199()
    p = subprocess.Popen([str(prog), *args], env=dict(os.environ, LD_BIND_NOW="1"), preexec_fn=pre, close_fds=False,
                         stdin=fin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(cr)
    os.close(sw)
    assert len(os.read(sr, 4)) == 4, "no hello from the AFL++ forkserver"

    def once():
        os.lseek(fin, 0, 0)
        os.write(cw, b"\0\0\0\0")
        os.read(sr, 4)
        os.read(sr, 4)
    r = timed(secs, once)
    p.kill()
    p.wait()
    os.close(fin)
    shutil.rmtree(path.parent, ignore_errors=True)
    return r


def load_segments(path):
    """The file's loadable segments as (file offset, virtual address, file size), from readelf."""
    out = subprocess.run(["readelf", "-lW", str(path)], capture_output=True, text=True, check=True).stdout
    segs = []
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == "LOAD":
            segs.append((int(f[1], 16), int(f[2], 16), int(f[4], 16)))
    return segs


def text_symbols(path):
    """The file's function symbols, sorted by address: [(address, name)]."""
    out = subprocess.run(["nm", "--defined-only", "--no-demangle", str(path)], capture_output=True, text=True, check=True).stdout
    syms = sorted({(int(f[0], 16), f[2]) for f in (l.split() for l in out.splitlines()) if len(f) == 3 and f[1] in "tTwW"})
    return syms


def symbolise(samples, files):
    """Each (ip, mapping) sample of a program's own code as a function name, read from the
    file that was really mapped (`files`: inode -> path). The lean sibling runs bound over
    the program's path in the sandbox, so perf, which reads the path, would name the
    recording build's functions; the mapping's inode says which file it was."""
    cache, names = {}, collections.Counter()
    for ip, (start, pgoff, inode) in samples:
        path = files.get(inode)
        if path is None:
            names["(another file)"] += 1
            continue
        if path not in cache:
            syms = text_symbols(path)
            cache[path] = (load_segments(path), [a for a, _ in syms], [n for _, n in syms])
        segs, addrs, syms = cache[path]
        off = pgoff + (ip - start)
        vaddr = next((v + off - o for o, v, n in segs if o <= off < o + n), None)
        i = bisect.bisect_right(addrs, vaddr) - 1 if vaddr is not None else -1
        names[syms[i] if i >= 0 else "(unknown)"] += 1
    return names


def cpu_per_execution(column, subject, run, build_files, work):
    """Where each microsecond of an execution goes, on identical work: `run()` (one of the
    round trips) under `perf record -a`, its samples per execution as microseconds of CPU
    by process (host: the fuzzer's side, trestle or our Python driver for AFL++'s
    protocol; target: the program's forkserver and children) and object, and the
    program's own busiest functions. Idle CPUs are left out; the elapsed time per
    execution is beside them."""
    data = work / f"perf-{subject}-{column}.data"
    freq = 4999
    perf = subprocess.Popen(["perf", "record", "-q", "-a", "-F", str(freq), "-o", str(data)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)  # perf is recording before the first run
    try:
        r = run()
    finally:
        perf.send_signal(signal.SIGINT)
        perf.wait()
    script = subprocess.run(["perf", "script", "-i", str(data), "--show-mmap-events", "-F", "comm,ip,dso"],
                            capture_output=True, text=True, check=True).stdout
    if not os.environ.get("KEEP_PERF"):
        data.unlink(missing_ok=True)
    inodes = {os.stat(p).st_ino: str(p) for p in build_files}
    paths = {str(p) for p in build_files}
    maps, own, by = [], [], collections.Counter()
    target_comm = {Path(p).name[:15] for p in build_files}
    for line in script.splitlines():
        if "PERF_RECORD_MMAP2" in line:
            m = re.search(r"\[(0x[0-9a-f]+)\((0x[0-9a-f]+)\) @ (0x[0-9a-f]+|0) [0-9a-f]+:[0-9a-f]+ (\d+) \d+\]: r-xp (\S+)", line)
            if m and m.group(5) in paths:
                maps.append((int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16), int(m.group(4))))
            continue
        m = re.match(r"\s*(.+?)\s+([0-9a-f]+) \((.*)\)\s*$", line)
        if not m:
            continue
        comm, ip, dso = m.group(1), int(m.group(2), 16), m.group(3)
        if comm == "swapper":
            continue
        who = ("host (trestle)" if comm == "trestle" else "host (Python driver)" if comm.startswith("python")
               else "target" if comm in target_comm else f"other ({comm})")
        obj = ("kernel" if dso == "[kernel.kallsyms]" else "the program" if dso in paths else Path(dso).name)
        by[f"{who}: {obj}"] += 1
        if who == "target" and obj == "the program":
            hit = next(((s, o, i) for s, n, o, i in maps if s <= ip < s + n), None)
            own.append((ip, hit) if hit else (ip, (0, 0, -1)))
    per = 1e6 / freq / max(r["execs"], 1)
    top = symbolise(own, inodes).most_common(15)
    return {"column": column, "subject": subject, "execs": r["execs"], "execs_per_sec": r["execs_per_sec"],
            "elapsed_us": 1e6 / r["execs_per_sec"],
            "cpu_us": {k: v * per for k, v in by.most_common()},
            "program_functions_us": [[name, n * per] for name, (_, n) in zip(demangled([k for k, _ in top]), top)]}


def demangled(names):
    """C++ and Rust names as people read them (c++filt; Rust's hash suffix dropped)."""
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    if len(out) != len(names):
        return names
    return [re.sub(r"::h[0-9a-f]{16}$", "", n) for n in out]


def current(r):
    """Whether a result was measured as this script measures its column now: roundtrip
    figures from before it went through `trestle exec` measured another thing, and
    trestle and roundtrip figures from before the lean build ran the recording build."""
    if r["column"] in ("roundtrip", "roundtrip-program") and r.get("executor") != "sysfuzz --repeat-seeds":
        return False
    if r["column"] in ("trestle", "roundtrip"):
        return r.get("build") == "lean"
    return True


def table_path():
    """The table beside the results directory: DIR.md."""
    return RESULTS.parent / f"{RESULTS.name}.md"


def table():
    rows = [json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json")) if "-profile" not in p.stem and "-cpu-" not in p.stem]
    rows = [r for r in rows if current(r)]
    out = ["# System-level fuzzing speed", "",
           "Executions per second, median (range) over repetitions, one run at a time on one core",
           "(`python3 bench/system_speed.py`). trestle: `trestle sysfuzz --no-cmplog` (forkserver started once",
           "in bubblewrap) on the build's lean sibling, as sysfuzz runs it; program: the same with --no-lean,",
           "on the recording build; spawn: the same starting the program per test (and bubblewrap with it);",
           "aflpp: afl-fuzz, afl-clang-fast build, no CmpLog; roundtrip: the lean build on one fixed test, the",
           "first seed as AFL++ gets it, through the system fuzzer's executor unmutated (`sysfuzz --repeat-seeds`:",
           "stdin file, request, fork, run, wait, edge map classified, per run); roundtrip-program: the same on",
           "the recording build; aflpp-roundtrip: the AFL++ build's forkserver",
           "alone (bare requests from Python) on the same test. The roundtrip ratio compares the two executors",
           "on the same test; the other ratio compares whole fuzzers, whose inputs differ. Each bound to one core.", "",
           "| subject | trestle | program | spawn | aflpp | roundtrip | roundtrip-program | aflpp-roundtrip | trestle / aflpp | roundtrip ratio |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for s in SUBJECTS:
        cells, med = [], {}
        for c in COLUMNS:
            v = [r["execs_per_sec"] for r in rows if r["subject"] == s and r["column"] == c]
            if v:
                med[c] = statistics.median(v)
                cells.append(f"{med[c]:.0f} ({min(v):.0f}-{max(v):.0f}, n={len(v)})")
            else:
                cells.append("–")
        ratio = f"{med['trestle'] / med['aflpp']:.2f}x" if "trestle" in med and "aflpp" in med else "–"
        rt = f"{med['roundtrip'] / med['aflpp-roundtrip']:.2f}x" if "roundtrip" in med and "aflpp-roundtrip" in med else "–"
        out.append(f"| {s} | " + " | ".join(cells) + f" | {ratio} | {rt} |")
    out.append("")
    profiles = {f"{s} {c}": json.loads(f.read_text()) for s in SUBJECTS for c in PROFILED
                if (f := RESULTS / f"{s}-cpu-{c}.json").exists()}
    if profiles:
        subs = list(profiles)
        out += ["## Where each microsecond of an execution goes", "",
                "The round trips again, each under `perf record -a` (`--profile`): microseconds of CPU per",
                "execution (samples / frequency / executions) by process and object. host: the fuzzer's side",
                "(trestle, or the Python driver that speaks AFL++'s protocol for aflpp-roundtrip: not AFL++'s own",
                "cost); target: the program's forkserver and its children. Idle time is left out; elapsed is the",
                "wall-clock time of one execution in that run. Below, the program's own busiest functions, named",
                "from the file each run really mapped (the lean sibling runs bound over the program's path).", "",
                "| process: object | " + " | ".join(subs) + " |", "|---|" + "---|" * len(subs)]
        keys = sorted({k for p in profiles.values() for k in p["cpu_us"]},
                      key=lambda k: -sum(p["cpu_us"].get(k, 0.0) for p in profiles.values()))
        for k in keys:
            if max(p["cpu_us"].get(k, 0.0) for p in profiles.values()) >= 0.5:
                out.append(f"| {k} | " + " | ".join(f"{profiles[x]['cpu_us'].get(k, 0.0):.1f}" for x in subs) + " |")
        out.append("| **CPU, all** | " + " | ".join(f"{sum(profiles[x]['cpu_us'].values()):.1f}" for x in subs) + " |")
        out.append("| elapsed | " + " | ".join(f"{profiles[x]['elapsed_us']:.1f}" for x in subs) + " |")
        for x in subs:
            top = ", ".join(f"`{f}` {us:.1f}" for f, us in profiles[x]["program_functions_us"][:10])
            out += ["", f"{x}, the program's own code (µs per execution): {top}"]
    table_path().write_text("\n".join(out) + "\n")


def main():
    global RESULTS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subjects", default=",".join(SUBJECTS))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--time", type=int, default=60)
    ap.add_argument("--work", type=Path, default=Path.home() / ".cache" / "trestle" / "bench-system-speed")
    ap.add_argument("--table-only", action="store_true")
    ap.add_argument("--profile", action="store_true",
                    help="also break the round trips down per execution with perf (microseconds by process and object)")
    ap.add_argument("--columns", default=",".join(COLUMNS), help="the columns to measure (default: all)")
    ap.add_argument("--results", type=Path, default=RESULTS, help="where the runs go (the table beside it, DIR.md)")
    a = ap.parse_args()
    RESULTS = a.results.resolve()
    columns = [c for c in a.columns.split(",") if c]
    unknown = sorted(set(columns) - set(COLUMNS))
    if unknown:
        ap.error(f"unknown column(s) {', '.join(unknown)}; the columns are {', '.join(COLUMNS)}")
    if not a.table_only:
        if not shutil.which("afl-fuzz"):
            subprocess.run(["apt-get", "install", "-y", "-qq", "afl++"], check=True)
        a.work.mkdir(parents=True, exist_ok=True)
        RESULTS.mkdir(parents=True, exist_ok=True)
        for s in a.subjects.split(","):
            tprog = build(s, str(RELEASE / "trestle-cc"), a.work, "trestle")
            aprog = build(s, "afl-clang-fast", a.work, "afl")
            for rep in range(a.reps):
                for c in columns:
                    dest = RESULTS / f"{s}-{c}-{rep}.json"
                    if dest.exists() and current(json.loads(dest.read_text())):
                        continue
                    log(f"{s} {c} {rep}: {a.time} s")
                    if c == "trestle":
                        r = run_trestle(tprog, s, a.time, a.work, [])
                        if r["build"] != "lean":
                            raise RuntimeError(f"sysfuzz did not run the lean build of {tprog}: {r['build_note']}")
                    elif c == "program":
                        r = run_trestle(tprog, s, a.time, a.work, ["--no-lean"])
                    elif c == "spawn":
                        r = run_trestle(tprog, s, a.time, a.work, ["--no-forkserver", "--no-lean"])
                    elif c == "aflpp":
                        r = run_afl(aprog, s, a.time, a.work, rep)
                    elif c == "roundtrip":
                        r = run_roundtrip(tprog, s, min(a.time, 10), a.work, [])
                        if r["build"] != "lean":
                            raise RuntimeError(f"sysfuzz did not run the lean build of {tprog}: {r['build_note']}")
                    elif c == "roundtrip-program":
                        r = run_roundtrip(tprog, s, min(a.time, 10), a.work, ["--no-lean"])
                    else:
                        r = run_afl_roundtrip(aprog, s, min(a.time, 10), a.work)
                    r.update({"subject": s, "column": c, "rep": rep, "time": a.time})
                    dest.write_text(json.dumps(r, indent=2))
                    log(f"{s} {c} {rep}: {r['execs_per_sec']:.0f} execs/s")
                    table()
            if a.profile:
                if not shutil.which("perf"):
                    raise SystemExit("--profile needs perf (apt-get install linux-perf)")
                lean = lean_of(tprog)
                runs = {"roundtrip": (lambda: run_roundtrip(tprog, s, 10, a.work, []), [tprog, lean]),
                        "roundtrip-program": (lambda: run_roundtrip(tprog, s, 10, a.work, ["--no-lean"]), [tprog]),
                        "aflpp-roundtrip": (lambda: run_afl_roundtrip(aprog, s, 10, a.work), [aprog])}
                for c in PROFILED:
                    dest = RESULTS / f"{s}-cpu-{c}.json"
                    if not dest.exists():
                        log(f"{s} {c}: profiling 10 s")
                        run, files = runs[c]
                        dest.write_text(json.dumps(cpu_per_execution(c, s, run, files, a.work), indent=2))
                        table()
    table()
    print(table_path().read_text())


if __name__ == "__main__":
    main()

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
"""
import argparse, base64, hashlib, json, os, shutil, statistics, subprocess, sys, tempfile, time
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


def run_profile(prog, subject, secs, work, extra):
    """`perf record` of one `trestle sysfuzz` run: the share of all CPU samples (self
    time) per process (host: trestle; target: the program's server and children),
    kernel or user space, and per object; and the target's busiest kernel functions."""
    data = work / "perf.data"
    out = Path(tempfile.mkdtemp(prefix="sysfuzz-", dir=work))
    cmd = [str(RELEASE / "trestle"), "sysfuzz", "--program", str(prog), "--seeds", str(REPO / SUBJECTS[subject]["seeds"]),
           "--time", f"{secs}s", "--out", str(out / "o"), "--no-cmplog"] + extra
    subprocess.run(["perf", "record", "-q", "-o", str(data), "--", *cmd], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shutil.rmtree(out, ignore_errors=True)

    def report(*args):
        r = subprocess.run(["perf", "report", "-i", str(data), "--stdio", "--no-children", *args],
                           capture_output=True, text=True, check=True)
        return [l.split() for l in r.stdout.splitlines() if l.strip() and not l.startswith("#")]
    res = {"by_object": {}, "target_kernel_top": []}
    lean = lean_of(prog).name
    for f in report("--sort", "comm,dso"):
        who = "host" if f[1] == "trestle" else "target"
        obj = "kernel" if f[2] == "[kernel.kallsyms]" else ("the program" if who == "target" and f[2] in (Path(prog).name, lean) else f[2])
        key = f"{who}: {obj}"
        res["by_object"][key] = res["by_object"].get(key, 0.0) + float(f[0].rstrip("%"))
    # The kernel keeps 15 characters of a command name; the lean build runs as itself.
    target = (Path(prog).name if "--no-lean" in extra else lean)[:15]
    for f in report("--comm", target, "--dso", "[kernel.kallsyms]", "--sort", "sym", "--percentage", "absolute")[:8]:
        res["target_kernel_top"].append([f[-1], float(f[0].rstrip("%"))])
    if not os.environ.get("KEEP_PERF"):
        data.unlink(missing_ok=True)
    return res


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
    rows = [json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json")) if "-profile" not in p.stem]
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
    profiles = {}
    for s in SUBJECTS:
        for build, suffix in (("lean", ""), ("program", "-program")):
            f = RESULTS / f"{s}-profile{suffix}.json"
            if f.exists():
                profiles[f"{s} ({build})"] = json.loads(f.read_text())
    if profiles:
        subs = list(profiles)
        out += ["## Where the time per execution goes", "",
                "Share of all CPU samples (self time) of one `trestle sysfuzz --no-cmplog` run under `perf record`",
                "(`--profile`), on the lean build and on the recording build (`--no-lean`), by process (host:",
                "trestle's fuzzer; target: the program's forkserver and its children) and object. Below, the",
                "target's busiest kernel functions.", "",
                "| process: object | " + " | ".join(subs) + " |", "|---|" + "---|" * len(subs)]
        keys = sorted({k for p in profiles.values() for k in p["by_object"]},
                      key=lambda k: -sum(p["by_object"].get(k, 0.0) for p in profiles.values()))
        for k in keys:
            out.append(f"| {k} | " + " | ".join(f"{profiles[x]['by_object'].get(k, 0.0):.1f}%" for x in subs) + " |")
        for x in subs:
            top = ", ".join(f"`{sym}` {pct:.1f}%" for sym, pct in profiles[x]["target_kernel_top"])
            out += ["", f"{x}, target kernel: {top}"]
    table_path().write_text("\n".join(out) + "\n")


def main():
    global RESULTS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subjects", default=",".join(SUBJECTS))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--time", type=int, default=60)
    ap.add_argument("--work", type=Path, default=Path.home() / ".cache" / "trestle" / "bench-system-speed")
    ap.add_argument("--table-only", action="store_true")
    ap.add_argument("--profile", action="store_true", help="also profile one trestle run per subject with perf")
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
            for suffix, extra in (("", []), ("-program", ["--no-lean"])):
                dest = RESULTS / f"{s}-profile{suffix}.json"
                if a.profile and not dest.exists():
                    if shutil.which("perf"):
                        log(f"{s}: profiling {min(a.time, 20)} s{' ' + ' '.join(extra) if extra else ''}")
                        dest.write_text(json.dumps(run_profile(tprog, s, min(a.time, 20), a.work, extra), indent=2))
                        table()
                    else:
                        log("perf not found: no profile (apt-get install linux-perf)")
    table()
    print(table_path().read_text())


if __name__ == "__main__":
    main()

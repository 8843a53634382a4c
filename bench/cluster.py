#!/usr/bin/env python3
"""One machine's core against two: a campaign on one node and one core, against a main
node and one worker (`trestle run --listen` + `trestle join`), one core each, on the
bundled subjects with planted bugs (requests, kvshell; their bugs as bench/bugs.py
declares them). Measures executions per second (all nodes together) and the time until
the main node reports each planted bug.

    python3 bench/cluster.py [--subjects requests,kvshell] [--reps 5] [--time 90]
                             [--bin DIR] [--work DIR] [--stop-by HH:MM] [--table-only]

Configurations (seed of repetition r: r+1):
  one          trestle run --program P --seeds S --validate-with PLAIN --time T --plain --pin 0
  main+worker  the same with --listen 127.0.0.1:PORT, and 2 s later
               taskset -c 1 trestle join 127.0.0.1:PORT --program P --name w1
               (the worker runs until the main node says the campaign is over)

A bug counts when an alarm's reduced (else lifted) test crashes the plain build
(clang-19 -O2 -g) with the bug's function innermost; its time is the alarm's
`found_at` on the main node (for a worker's find: when the main node had validated
it, which includes the seconds the message took). Needs the machine to itself: the
two configurations are compared on 1 and 2 busy cores.

Outputs: bench/results/cluster/<subject>/<config>-<rep>.json per run (finished runs
are skipped when run again) and bench/results/cluster.md, rewritten after every run.
"""
import argparse, json, os, shutil, socket, subprocess, statistics, sys, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bugs  # noqa: E402  (the subjects, validation, classification and statistics)

REPO = bugs.REPO
RESULTS = REPO / "bench" / "results" / "cluster"
CONFIGS = ["one", "main+worker"]
SUBJECTS = ["requests", "kvshell"]


def log(msg):
    print(f"[cluster {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def build(subj, bin_dir, work):
    """The trestle build (trestle-cc -O2 -g) and the plain build of a bundled subject,
    rebuilt when the sources or the compiler change."""
    srcs = bugs.subject_sources(subj)
    d = work / "build" / subj
    d.mkdir(parents=True, exist_ok=True)
    out = {}
    for variant, cc in [("trestle", str(bin_dir / "trestle-cc")), ("plain", "clang-19")]:
        cmd = [cc, "-O2", "-g"] + [str(s) for s in srcs] + ["-o", str(d / f"{subj}-{variant}"), "-lm"]
        ident = srcs + ([bin_dir / "trestle-cc", bin_dir / "libtrestle_runtime.a"] if variant == "trestle" else [])
        key = bugs.sha1_files(ident) + json.dumps(cmd)
        stamp = d / f"{variant}.stamp"
        if not (d / f"{subj}-{variant}").exists() or not stamp.exists() or stamp.read_text() != key:
            log(f"{subj}: building the {variant} variant")
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"cluster: building {subj} ({variant}) failed:\n{r.stderr[-3000:]}")
            stamp.write_text(key)
        out[variant] = d / f"{subj}-{variant}"
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_run(subj, config, rep, a, bin_dir, work, builds):
    d = work / "runs" / subj / f"{config}-{rep}"
    shutil.rmtree(d, ignore_errors=True)  # a run cut short starts again: no resuming a two-node campaign
    d.mkdir(parents=True)
    camp = d / "campaign"
    t = bin_dir / "trestle"
    env = dict(os.environ, TRESTLE_BIN=str(bin_dir))
    cmd = [str(t), "run", "--program", str(builds["trestle"]), "--seeds", str(bugs.seeds_dir(subj)),
           "--validate-with", str(builds["plain"]), "--time", f"{a.time}s", "--out", str(camp),
           "--seed", str(rep + 1), "--plain", "--pin", "0"]
    worker_cmd = None
    if config == "main+worker":
        addr = f"127.0.0.1:{free_port()}"
        key = d / "cluster.key"
        key.unlink(missing_ok=True)
        cmd += ["--listen", addr, "--key", str(key)]
        worker_cmd = ["taskset", "-c", "1", str(t), "join", addr, "--key", str(key), "--program", str(builds["trestle"]),
                      "--name", "w1", "--out", str(d / "w1")]
    log(f"{subj} {config}-{rep}: starting ({a.time} s)")
    limit = a.time + 240
    t0 = time.monotonic()
    with (d / "main.log").open("w") as mlog:
        main = subprocess.Popen(cmd, stdout=mlog, stderr=mlog, env=env, start_new_session=True)
        worker = None
        if worker_cmd:
            time.sleep(2)
            wlog = (d / "w1.log").open("w")
            worker = subprocess.Popen(worker_cmd, stdout=wlog, stderr=wlog, env=env, start_new_session=True)
        try:
            rc = main.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(main.pid, 9)
            rc = main.wait()
            raise RuntimeError(f"the main node ran past {limit} s; see {d / 'main.log'}")
        finally:
            if worker:
                try:
                    worker.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(worker.pid, 9)
                    worker.wait()
    wall = time.monotonic() - t0
    if rc != 0:
        raise RuntimeError(f"trestle run exited {rc}; see {d / 'main.log'}")
    c = json.loads((camp / "campaign.json").read_text())
    af = camp / "alarms.json"
    alarms = json.loads(af.read_text())["alarms"] if af.exists() else []
    times = bugs.alarm_times(camp, alarms)
    tests, which = [], []
    for al, _, test in bugs.alarm_tests(camp, alarms):
        if not which or which[-1]["id"] != al["id"]:  # the reduced test when there is one
            tests.append(test)
            which.append(al)
    verdicts = bugs.validate(t, builds["plain"], tests, d / "validate")
    cfg = bugs.SUBJECTS[subj]
    found = {b: None for b in cfg["bugs"]}
    found_on = {}
    others = []
    for al, v in zip(which, verdicts):
        kind, what = bugs.classify(v, cfg["bugs"])
        sec = times.get(al["id"], (None, ""))[0]
        node = al.get("found_on") or "main"
        if kind == "bug" and sec is not None and sec <= a.time and (found[what] is None or sec < found[what]):
            found[what], found_on[what] = sec, node
        elif kind != "bug":
            others.append({"id": al["id"], "signature": al.get("signature"), "plain": [kind, what], "node": node})
    nodes = c.get("nodes") or [{"name": "main", "cores": 1, "execs": c["system_executions"] + c["unit_executions"]}]
    execs = sum(n["execs"] for n in nodes)
    res = {
        "subject": subj, "config": config, "rep": rep, "seed": rep + 1, "budget": float(a.time),
        "bugs": found, "found_on": found_on, "other_alarms": others,
        "execs": execs, "elapsed": c["elapsed"], "execs_per_s": execs / max(c["elapsed"], 1e-9),
        "nodes": nodes, "units_fuzzed": len(c.get("fuzzed", [])), "wall_time": round(wall, 1),
        "command": cmd, "worker_command": worker_cmd, "trestle_sha1": bugs.sha1_files([t])[:12],
        "finished_at": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    bugs.write_atomic(RESULTS / subj / f"{config}-{rep}.json", json.dumps(res, indent=1) + "\n")
    got = ", ".join(f"{b} {'-' if s is None else f'{s:.1f}s'}" for b, s in found.items())
    log(f"{subj} {config}-{rep}: {got}; {execs} execs ({res['execs_per_s']:.0f}/s)"
        + (f"; {len(others)} other alarm(s)" if others else ""))
    return res


def med_range(xs, fmt=bugs.fmt_s):
    if not xs:
        return "–", "–"
    return fmt(statistics.median(xs)), f"{fmt(min(xs))}–{fmt(max(xs))}"


def write_table(a):
    L = ["# One core against two: one node, and a main node plus a worker", ""]
    L.append(f"Machine: {os.uname().machine}, {os.cpu_count()} cores, Linux {os.uname().release}. Written "
             f"{time.strftime('%Y-%m-%d %H:%M')} by `python3 bench/cluster.py` (see its header for the commands).")
    L.append("")
    L.append("**one**: `trestle run` on core 0. **main+worker**: the same with `--listen`, plus `trestle join` "
             "on core 1 (the main node fuzzes too). Executions: every node's, over the main node's elapsed "
             "time. Bug time: seconds until the main node reported it (a run that misses counts as the "
             "budget). p: two-sided Mann-Whitney U, main+worker against one; A12: probability that a "
             "main+worker run is sooner (for executions per second: higher).")
    for subj in a.subjects:
        runs = {cfg: [] for cfg in CONFIGS}
        for f in sorted((RESULTS / subj).glob("*.json")):
            r = json.loads(f.read_text())
            if r.get("budget") == float(a.time) and r["config"] in runs:
                runs[r["config"]].append(r)
        if not any(runs.values()):
            continue
        L += ["", f"## {subj} ({a.time} s per run)", "",
              "| measure | config | runs | median | range | p | A12 (main+worker better) |", "|---|---|---|---|---|---|---|"]
        eps = {cfg: [r["execs_per_s"] for r in rs] for cfg, rs in runs.items()}
        for cfg in CONFIGS:
            m, rg = med_range(eps[cfg], lambda v: f"{v:,.0f}")
            p = a12 = ""
            if cfg == "main+worker" and eps["one"] and eps[cfg]:
                p = f"{bugs.mann_whitney(eps[cfg], eps['one'])[1]:.3f}"
                a12 = f"{bugs.a12_faster([-v for v in eps[cfg]], [-v for v in eps['one']]):.2f}"
            L.append(f"| execs/s | {cfg} | {len(eps[cfg])} | {m} | {rg} | {p} | {a12} |")
        for b in bugs.SUBJECTS[subj]["bugs"]:
            t = {cfg: [r["bugs"][b] if r["bugs"].get(b) is not None else r["budget"] for r in rs]
                 for cfg, rs in runs.items()}
            for cfg in CONFIGS:
                n = sum(1 for r in runs[cfg] if r["bugs"].get(b) is not None)
                m, rg = med_range(t[cfg])
                p = a12 = ""
                if cfg == "main+worker" and t["one"] and t[cfg]:
                    p = f"{bugs.mann_whitney(t[cfg], t['one'])[1]:.3f}"
                    a12 = f"{bugs.a12_faster(t[cfg], t['one']):.2f}"
                on = sorted({r["found_on"].get(b) for r in runs[cfg] if r["found_on"].get(b)})
                L.append(f"| {b} (s; found {n}/{len(runs[cfg])}{', on ' + ', '.join(on) if cfg != 'one' and on else ''}) "
                         f"| {cfg} | {len(t[cfg])} | {m} | {rg} | {p} | {a12} |")
        L += ["", "| run | " + " | ".join(bugs.SUBJECTS[subj]["bugs"]) + " | execs/s | nodes (execs) | other alarms |",
              "|---|" + "---|" * (len(bugs.SUBJECTS[subj]["bugs"]) + 3)]
        for cfg in CONFIGS:
            for r in sorted(runs[cfg], key=lambda r: r["rep"]):
                cells = [bugs.fmt_s(r["bugs"].get(b)) + (f" ({r['found_on'][b]})" if r["found_on"].get(b) and cfg != "one" else "")
                         for b in bugs.SUBJECTS[subj]["bugs"]]
                nodes = ", ".join(f"{n['name']} {n['execs']:,}" for n in r["nodes"])
                L.append(f"| {cfg} {r['rep']} | " + " | ".join(cells) + f" | {r['execs_per_s']:,.0f} | {nodes} | {len(r['other_alarms'])} |")
    text = "\n".join(L) + "\n"
    bugs.write_atomic(REPO / "bench" / "results" / "cluster.md", text)
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subjects", default=",".join(SUBJECTS))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--time", type=int, default=90, help="seconds per run (default 90)")
    ap.add_argument("--bin", help="trestle's binaries (default target/release)")
    ap.add_argument("--work", help="builds and runs (default ~/.cache/trestle/bench-cluster)")
    ap.add_argument("--stop-by", metavar="HH:MM", help="start no run that would not end by then")
    ap.add_argument("--table-only", action="store_true")
    a = ap.parse_args()
    a.subjects = [s for s in a.subjects.split(",") if s]
    for s in a.subjects:
        if s not in bugs.SUBJECTS or bugs.SUBJECTS[s].get("package"):
            sys.exit(f"cluster: {s} is not a bundled subject of bench/bugs.py ({', '.join(SUBJECTS)})")
    if a.table_only:
        print(write_table(a))
        return
    if (os.cpu_count() or 1) < 2:
        sys.exit("cluster: needs two cores (one per node)")
    bin_dir = Path(a.bin).resolve() if a.bin else bugs.RELEASE
    for tool in ["trestle", "trestle-cc", "trestle-exec"]:
        if not (bin_dir / tool).exists():
            sys.exit(f"cluster: {bin_dir / tool} missing; build trestle first (cargo build --workspace --release)")
    work = Path(a.work) if a.work else Path(os.environ.get("HOME", "/root")) / ".cache/trestle/bench-cluster"
    stop_by = bugs.parse_stop_by(a.stop_by) if a.stop_by else None
    builds = {s: build(s, bin_dir, work) for s in a.subjects}
    failed = []
    for rep in range(a.reps):
        for s in a.subjects:
            for cfg in CONFIGS:
                f = RESULTS / s / f"{cfg}-{rep}.json"
                if f.exists() and json.loads(f.read_text()).get("budget") == float(a.time):
                    continue
                if stop_by is not None and time.time() + a.time + 90 > stop_by:
                    log(f"{s} {cfg}-{rep}: not started (it would end after --stop-by)")
                    continue
                try:
                    one_run(s, cfg, rep, a, bin_dir, work, builds[s])
                except Exception as e:  # one broken run must not lose the others
                    failed.append(f"{s} {cfg}-{rep}: {e}")
                    log(f"{s} {cfg}-{rep} failed: {e}")
                write_table(a)
    print(write_table(a))
    if failed:
        sys.exit("cluster: some runs failed:\n  " + "\n  ".join(failed))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Recording overhead: median wall time of each seed system test with recording on,
over the same test on an uninstrumented build of the same program.

    bench/record_overhead.py [--runs N] [--cut-plain BIN --cut-trestle BIN] [--out FILE]

Builds every bundled subject twice (clang-19 -O2, and trestle-cc -O2), runs each
seed --runs times per build (recording into a fresh directory each time), and
reports per subject the median over seeds of median(recorded) / median(plain).
cut is included when both of its builds are given (tests/coreutils/build.sh makes
them). Writes a Markdown table to --out (default bench/results/record-overhead.md).

Each run is `trestle exec --no-forkserver` (trestle's own executor, starting the
program for the run as `trestle record` does, in a fresh directory, with stdin from a
file), with address-space randomisation off (`setarch -R`) as in recording; the
time is the program's wall time as the executor measures it (start to exit, its
crash-stack preload included for both builds). Recording is `--env
TRESTLE_TRACE_DIR=<fresh directory>`.
"""
import argparse, json, os, platform, statistics, subprocess, sys, tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The trestle that runs the seeds; --bin (or paper.py) points it elsewhere.
T = REPO / "target/release/trestle"

def run_seed(binary, seed_file, env_extra):
    """Seconds of one run of `binary` on the seed file, as `trestle exec` measures them."""
    cmd = ["setarch", platform.machine(), "-R", str(T), "exec", "--no-sandbox", "--program", str(binary), str(seed_file),
           "--json", "--no-forkserver", "--timeout", "60s"]
    for k, v in env_extra.items():
        cmd += ["--env", f"{k}={v}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"trestle exec {binary} {seed_file} failed ({r.returncode}): {r.stderr.strip()}")
    return json.loads(r.stdout)["wall_ms"] / 1000

def measure(plain, instrumented, seeds_dir, runs):
    ratios, rows = [], []
    for sf in sorted(Path(seeds_dir).glob("*.json")):
        tp, tr = [], []
        for _ in range(runs):
            tp.append(run_seed(plain, sf, {}))
            with tempfile.TemporaryDirectory(prefix="trestle-bench-trace-") as td:
                tr.append(run_seed(instrumented, sf, {"TRESTLE_TRACE_DIR": td}))
        mp, mr = statistics.median(tp), statistics.median(tr)
        ratios.append(mr / mp)
        rows.append((sf.stem, mp, mr))
    return statistics.median(ratios), max(ratios), rows

def build(compiler, sources, opt, out):
    subprocess.run([str(compiler), opt] + [str(s) for s in sources] + ["-o", str(out)], check=True)

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--bin", default=str(REPO / "target/release"), help="directory with trestle-cc and trestle")
    ap.add_argument("--cut-plain"); ap.add_argument("--cut-trestle")
    ap.add_argument("--out", default=str(REPO / "bench/results/record-overhead.md"))
    a = ap.parse_args()
    tb = Path(a.bin)
    global T
    T = tb / "trestle"
    results = []
    with tempfile.TemporaryDirectory(prefix="trestle-bench-build-") as bd:
        for subj in sorted((REPO / "tests/subjects").iterdir()):
            if not (subj / "seeds").is_dir():
                continue
            srcs = sorted(list(subj.glob("*.c")) + list(subj.glob("*.cpp")))
            cxx = any(s.suffix == ".cpp" for s in srcs)
            plain, instr = Path(bd, subj.name + ".plain"), Path(bd, subj.name + ".trestle")
            build("clang++-19" if cxx else "clang-19", srcs, "-O2", plain)
            build(tb / ("trestle-cxx" if cxx else "trestle-cc"), srcs, "-O2", instr)
            med, worst, rows = measure(plain, instr, subj / "seeds", a.runs)
            results.append((subj.name, len(rows), med, worst, rows))
            print(f"{subj.name}: median overhead {med:.2f}x (worst seed {worst:.2f}x)", file=sys.stderr)
        if a.cut_plain and a.cut_trestle:
            med, worst, rows = measure(a.cut_plain, a.cut_trestle, REPO / "tests/coreutils/cut/seeds", a.runs)
            results.append(("coreutils cut", len(rows), med, worst, rows))
            print(f"cut: median overhead {med:.2f}x (worst seed {worst:.2f}x)", file=sys.stderr)
    out = Path(a.out); out.parent.mkdir(parents=True, exist_ok=True)
    lines = ["# Recording overhead", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}; "
             f"{a.runs} runs per seed and build; builds at -O2.", "",
             "Command: `python3 bench/record_overhead.py " + " ".join(sys.argv[1:]) + "`", "",
             "Overhead = median wall time with recording on (trestle-cc build, TRESTLE_TRACE_DIR set) "
             "over the median on a plain clang-19 build, per seed, each run by `trestle exec --no-forkserver` "
             "(its wall time); the table gives the median and the worst seed of each subject.", "",
             "| subject | seeds | median overhead | worst seed |", "|---|---|---|---|"]
    for name, n, med, worst, _ in results:
        lines.append(f"| {name} | {n} | {med:.2f}x | {worst:.2f}x |")
    lines += ["", "Per seed (median seconds, plain / recording):", ""]
    for name, _, _, _, rows in results:
        lines.append(f"- {name}: " + ", ".join(f"{s} {p*1000:.1f}/{r*1000:.1f} ms" for s, p, r in rows))
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}", file=sys.stderr)

if __name__ == "__main__":
    main()

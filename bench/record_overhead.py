#!/usr/bin/env python3
"""Recording overhead: median wall time of each seed system test with recording on,
over the same test on an uninstrumented build of the same program.

    bench/record_overhead.py [--runs N] [--cut-plain BIN --cut-trestle BIN] [--out FILE]

Builds every bundled subject twice (clang-19 -O2, and trestle-cc -O2), runs each
seed --runs times per build (recording into a fresh directory each time), and
reports per subject the median over seeds of median(recorded) / median(plain).
cut is included when both of its builds are given (tests/coreutils/build.sh makes
them). Writes a Markdown table to --out (default bench/results/record-overhead.md).
"""
import argparse, base64, ctypes, json, os, platform, shutil, statistics, subprocess, sys, tempfile, time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ADDR_NO_RANDOMIZE = 0x0040000
libc = ctypes.CDLL(None, use_errno=True)

def no_aslr():
    libc.personality(ADDR_NO_RANDOMIZE)

def content(c):
    return base64.b64decode(c["base64"]) if isinstance(c, dict) else c.encode()

def run_seed(binary, seed, env_extra):
    with tempfile.TemporaryDirectory(prefix="trestle-bench-") as d:
        for name, c in seed.get("files", {}).items():
            p = Path(d, name); p.parent.mkdir(parents=True, exist_ok=True); p.write_bytes(content(c))
        stdin_path = Path(d).parent / (Path(d).name + ".stdin")
        stdin_path.write_bytes(content(seed["stdin"]) if "stdin" in seed else b"")
        env = dict(os.environ); env.update(seed.get("env", {})); env.update(env_extra)
        with open(stdin_path, "rb") as stdin:
            t0 = time.perf_counter()
            subprocess.run([str(binary)] + seed.get("args", []), cwd=d, stdin=stdin, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=no_aslr, timeout=60)
            t = time.perf_counter() - t0
        stdin_path.unlink()
        return t

def measure(plain, instrumented, seeds_dir, runs):
    ratios, rows = [], []
    for sf in sorted(Path(seeds_dir).glob("*.json")):
        seed = json.loads(sf.read_text())
        tp, tr = [], []
        for _ in range(runs):
            tp.append(run_seed(plain, seed, {}))
            with tempfile.TemporaryDirectory(prefix="trestle-bench-trace-") as td:
                tr.append(run_seed(instrumented, seed, {"TRESTLE_TRACE_DIR": td}))
        mp, mr = statistics.median(tp), statistics.median(tr)
        ratios.append(mr / mp)
        rows.append((sf.stem, mp, mr))
    return statistics.median(ratios), max(ratios), rows

def build(compiler, sources, opt, out):
    subprocess.run([str(compiler), opt] + [str(s) for s in sources] + ["-o", str(out)], check=True)

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--bin", default=str(REPO / "target/release"), help="directory with trestle-cc")
    ap.add_argument("--cut-plain"); ap.add_argument("--cut-trestle")
    ap.add_argument("--out", default=str(REPO / "bench/results/record-overhead.md"))
    a = ap.parse_args()
    tb = Path(a.bin)
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
             "over the median on a plain clang-19 build, per seed; the table gives the median and the "
             "worst seed of each subject.", "",
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

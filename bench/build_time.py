#!/usr/bin/env python3
"""Build time: configure + make of GNU coreutils 9.1 programs with clang-19, with
trestle-cc without its lean sibling (TRESTLE_CC_LEAN=0: the build as it was before
trestle-cc linked a lean build beside every program) and with trestle-cc as it is.

    bench/build_time.py [--reps 3] [--progs cut,paste,tac,b2sum] [--jobs 2]
                        [--results DIR] [--trestle-cc PATH]

Each build is `tests/coreutils/build.sh --cc COMPILER --out FRESH_DIR --prog ...`
(a fresh copy of the unpacked source, configure, make of the programs and the library
they need), timed by wall clock; the builds of one repetition run one after the other,
in a rotating order so no variant always runs first. The source download is done once
before timing. Writes DIR/runs.csv and DIR.md (the medians and the ratios #37 asks
for: trestle-cc with its lean sibling against trestle-cc without it, at most 1.3x).
"""
import argparse, csv, os, platform, shutil, statistics, subprocess, sys, tempfile, time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "tests/coreutils/build.sh"
VARIANTS = ["clang-19", "trestle-cc-no-lean", "trestle-cc"]


CC = REPO / "target/release/trestle-cc"


def compiler(variant):
    """(compiler, extra environment) of a variant."""
    cc = str(CC)
    if variant == "clang-19":
        return "clang-19", {}
    if variant == "trestle-cc-no-lean":
        return cc, {"TRESTLE_CC_LEAN": "0"}
    return cc, {}


def build(variant, progs, jobs, work):
    """Wall seconds of one build of `progs` with `variant`, in a fresh directory."""
    cc, env = compiler(variant)
    out = Path(tempfile.mkdtemp(prefix=f"build-{variant}-", dir=work))
    cmd = ["bash", str(BUILD), "--cc", cc, "--out", str(out), "--prog", ",".join(progs)]
    t0 = time.monotonic()
    r = subprocess.run(cmd, env=dict(os.environ, TRESTLE_JOBS=str(jobs), **env),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    secs = time.monotonic() - t0
    if r.returncode != 0:
        sys.exit(f"build_time: {' '.join(cmd)} failed ({r.returncode}):\n{r.stdout[-3000:]}")
    missing = [p for p in progs if not (out / "bin" / p).is_file()]
    if missing:
        sys.exit(f"build_time: {variant} built no {', '.join(missing)} in {out}/bin")
    lean = [p for p in progs if (out / "bin" / f".{p}.trestle-lean").is_file()]
    shutil.rmtree(out, ignore_errors=True)
    return secs, len(lean)


def main():
    global CC
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--progs", default="cut,paste,tac,b2sum")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--work", default=str(Path.home() / ".cache/trestle/bench-build-time"))
    ap.add_argument("--results", default=str(REPO / "bench/results/build-time"))
    ap.add_argument("--trestle-cc", default=str(REPO / "target/release/trestle-cc"),
                    help="the trestle-cc to time (default: this checkout's release build)")
    a = ap.parse_args()
    CC = Path(a.trestle_cc).resolve()
    if not CC.is_file():
        sys.exit(f"build_time: no trestle-cc at {CC} (cargo build --release)")
    progs = [p for p in a.progs.split(",") if p]
    work, results = Path(a.work), Path(a.results)
    work.mkdir(parents=True, exist_ok=True)
    results.mkdir(parents=True, exist_ok=True)
    # The download and unpacking (cached) outside the timed builds.
    build("clang-19", progs[:1], a.jobs, work)
    rows = []
    for rep in range(a.reps):
        order = VARIANTS[rep % len(VARIANTS):] + VARIANTS[:rep % len(VARIANTS)]
        for v in order:
            secs, lean = build(v, progs, a.jobs, work)
            rows.append({"rep": rep, "variant": v, "seconds": round(secs, 2), "lean_siblings": lean})
            print(f"[build_time] rep {rep} {v}: {secs:.1f} s ({lean} lean siblings)", flush=True)
    with (results / "runs.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    med = {v: statistics.median(r["seconds"] for r in rows if r["variant"] == v) for v in VARIANTS}
    cmd = " ".join(["python3", "bench/build_time.py", *sys.argv[1:]])
    L = [f"# Build time: configure + make of coreutils 9.1 ({', '.join(progs)})", "",
         f"Command: `{cmd}`. Machine: {platform.machine()}, {os.cpu_count()} cores, "
         f"{platform.system()} {platform.release()}; make -j{a.jobs} (TRESTLE_JOBS); {a.reps} repetitions, medians of wall seconds.", "",
         "| compiler | median s | all runs (s) |", "|---|---|---|"]
    for v in VARIANTS:
        runs = ", ".join(f"{r['seconds']:.1f}" for r in rows if r["variant"] == v)
        L.append(f"| {v} | {med[v]:.1f} | {runs} |")
    L += ["", f"trestle-cc / trestle-cc without the lean sibling: **{med['trestle-cc'] / med['trestle-cc-no-lean']:.2f}x** "
          f"(#37: at most 1.3x); trestle-cc / clang-19: {med['trestle-cc'] / med['clang-19']:.2f}x; "
          f"without the lean sibling / clang-19: {med['trestle-cc-no-lean'] / med['clang-19']:.2f}x.", ""]
    Path(str(results) + ".md").write_text("\n".join(L))
    print("\n".join(L))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Pictures of the time-to-bug benchmark (bench/bugs.py), as plain SVG files beside its
tables, from whatever run files bench/results/bugs/SUBJECT/*.json hold:

    python3 bench/plots.py [--subjects cut,sed,...]

  SUBJECT-coverage.svg  branch coverage over time per column: the median of the runs as
                        a line, their range (min to max) as a band;
  SUBJECT-survival.svg  per planted bug, the share of runs of each column that found it
                        by time t (a step function; one panel per bug).

Drawn with matplotlib (SVG backend); `--results DIR` reads another results directory.
"""
import argparse, json, statistics, sys
from pathlib import Path

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "bugs"
COLORS = {"bridge": "#1f77b4", "system-only": "#ff7f0e", "aflpp": "#2ca02c", "changed": "#d62728"}
# One panel, in inches at matplotlib's 100 dpi: the size of the hand-drawn pictures before.
PANEL = (6.8, 3.6)


def load_runs(subj):
    runs = []
    for p in sorted((RESULTS / subj).glob("*.json")):
        try:
            runs.append(json.loads(p.read_text()))
        except ValueError as e:
            sys.exit(f"plots: {p} is not a run file: {e}")
    return runs


def finish(fig, out):
    fig.tight_layout()
    fig.savefig(out, format="svg")
    plt.close(fig)


def coverage_svg(subj, runs, out):
    """Branch coverage over time per column into `out`; False when no run has a curve."""
    by_col = {}
    for r in runs:
        pts = [(p["seconds"], 100.0 * p["branches"] / p["branches_total"]) for p in r.get("coverage") or []
               if p["branches_total"]]
        if pts and r["column"] != "changed":  # its runs stop at the change's alarm
            by_col.setdefault(r["column"], []).append(dict(pts))
    if not by_col:
        return False
    times = sorted({t for curves in by_col.values() for c in curves for t in c})
    fig, ax = plt.subplots(figsize=PANEL)
    for col in [c for c in COLORS if c in by_col]:
        curves = by_col[col]
        ts, med, low, high = [], [], [], []
        for t in times:
            xs = [c[t] for c in curves if t in c]
            if xs:
                ts.append(t)
                med.append(statistics.median(xs))
                low.append(min(xs))
                high.append(max(xs))
        ax.fill_between(ts, low, high, color=COLORS[col], alpha=0.18, linewidth=0)
        ax.plot(ts, med, color=COLORS[col], linewidth=2, label=f"{col} ({len(curves)})")
    ax.set(title=f"{subj}: branch coverage over time", xlabel="seconds", ylabel="branch coverage (%)", xlim=(0, times[-1]))
    ax.grid(color="#ddd")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    finish(fig, out)
    return True


def survival_svg(subj, runs, out):
    """Per planted bug, the share of each column's runs that found it by time t, one
    panel a bug, into `out`; False when no run names a bug."""
    bugs = sorted({b for r in runs for b in r.get("bugs", {})})
    if not bugs:
        return False
    budget = max(r["budget"] for r in runs)
    fig, axes = plt.subplots(len(bugs), 1, figsize=(PANEL[0], PANEL[1] * len(bugs)), squeeze=False)
    for ax, b in zip(axes[:, 0], bugs):
        for col in [c for c in COLORS if any(r["column"] == c for r in runs)]:
            rs = [r for r in runs if r["column"] == col]
            found = sorted(r["bugs"].get(b) for r in rs if r["bugs"].get(b) is not None)
            ts, shares = [0.0] + found + [budget], [0.0] + [(i + 1) / len(rs) for i in range(len(found))]
            shares.append(shares[-1])
            ax.step(ts, shares, where="post", color=COLORS[col], linewidth=2, linestyle="-" if col == "bridge" else "--",
                    label=f"{col} ({len(found)}/{len(rs)})")
        ax.set(title=f"{subj}: {b}", xlabel="seconds", ylabel="share of runs that found it", xlim=(0, budget), ylim=(0, 1))
        ax.grid(color="#ddd")
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    finish(fig, out)
    return True


def main():
    global RESULTS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subjects", help="comma-separated (default: every subject with run files)")
    ap.add_argument("--results", help=f"the results directory (default {RESULTS})")
    a = ap.parse_args()
    if a.results:
        RESULTS = Path(a.results).resolve()
    subjects = a.subjects.split(",") if a.subjects else sorted(p.name for p in RESULTS.iterdir() if p.is_dir())
    for subj in subjects:
        runs = load_runs(subj)
        if not runs:
            print(f"plots: {subj}: no run files", file=sys.stderr)
            continue
        for name, draw in [("coverage", coverage_svg), ("survival", survival_svg)]:
            out = RESULTS / f"{subj}-{name}.svg"
            if draw(subj, runs, out):
                print(f"wrote {out}")


if __name__ == "__main__":
    main()

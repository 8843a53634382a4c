#!/usr/bin/env python3
"""Pictures of the time-to-bug benchmark (bench/bugs.py), as plain SVG files beside its
tables, from whatever run files bench/results/bugs/SUBJECT/*.json hold:

    python3 bench/plots.py [--subjects cut,sed,...]

  SUBJECT-coverage.svg  branch coverage over time per column: the median of the runs as
                        a line, their range (min to max) as a band;
  SUBJECT-survival.svg  per planted bug, the share of runs of each column that found it
                        by time t (a step function; one panel per bug).

No plotting library: the SVG is written by hand, so the script runs wherever Python does.
"""
import argparse, json, statistics, sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "bugs"
COLORS = {"bridge": "#1f77b4", "system-only": "#ff7f0e", "aflpp": "#2ca02c", "changed": "#d62728"}
W, H, LEFT, RIGHT, TOP, BOTTOM = 680, 360, 60, 170, 30, 45


def load_runs(subj):
    runs = []
    for p in sorted((RESULTS / subj).glob("*.json")):
        try:
            runs.append(json.loads(p.read_text()))
        except ValueError as e:
            sys.exit(f"plots: {p} is not a run file: {e}")
    return runs


class Frame:
    """A plot area with linear axes from (0, y0) to (x1, y1)."""

    def __init__(self, x1, y0, y1, title, xlabel, ylabel, ox=0, oy=0, w=W, h=H):
        self.x1, self.y0, self.y1 = max(x1, 1e-9), y0, y1 if y1 > y0 else y0 + 1
        self.ox, self.oy, self.w, self.h = ox, oy, w, h
        self.parts = [f'<g transform="translate({ox},{oy})">',
                      f'<text x="{LEFT}" y="18" font-size="14" font-weight="bold">{title}</text>',
                      f'<text x="{LEFT + (w - LEFT - RIGHT) / 2}" y="{h - 8}" font-size="12" text-anchor="middle">{xlabel}</text>',
                      f'<text x="14" y="{TOP + (h - TOP - BOTTOM) / 2}" font-size="12" text-anchor="middle" '
                      f'transform="rotate(-90 14 {TOP + (h - TOP - BOTTOM) / 2})">{ylabel}</text>']
        for i in range(6):
            vy = self.y0 + (self.y1 - self.y0) * i / 5
            vx = self.x1 * i / 5
            self.parts.append(f'<line x1="{LEFT}" x2="{w - RIGHT}" y1="{self.y(vy):.1f}" y2="{self.y(vy):.1f}" stroke="#ddd"/>')
            self.parts.append(f'<text x="{LEFT - 6}" y="{self.y(vy) + 4:.1f}" font-size="11" text-anchor="end">{vy:.3g}</text>')
            self.parts.append(f'<text x="{self.x(vx):.1f}" y="{h - BOTTOM + 16}" font-size="11" text-anchor="middle">{vx:.0f}</text>')
        self.parts.append(f'<rect x="{LEFT}" y="{TOP}" width="{w - LEFT - RIGHT}" height="{h - TOP - BOTTOM}" fill="none" stroke="#888"/>')

    def x(self, v):
        return LEFT + (self.w - LEFT - RIGHT) * v / self.x1

    def y(self, v):
        return self.h - BOTTOM - (self.h - TOP - BOTTOM) * (v - self.y0) / (self.y1 - self.y0)

    def line(self, pts, color, dash=False):
        if pts:
            d = " ".join(f"{self.x(a):.1f},{self.y(b):.1f}" for a, b in pts)
            extra = ' stroke-dasharray="5,3"' if dash else ""
            self.parts.append(f'<polyline points="{d}" fill="none" stroke="{color}" stroke-width="2"{extra}/>')

    def band(self, lows, highs, color):
        if lows:
            pts = [(self.x(a), self.y(b)) for a, b in lows] + [(self.x(a), self.y(b)) for a, b in reversed(highs)]
            d = " ".join(f"{a:.1f},{b:.1f}" for a, b in pts)
            self.parts.append(f'<polygon points="{d}" fill="{color}" fill-opacity="0.18" stroke="none"/>')

    def legend(self, entries):
        for i, (name, color) in enumerate(entries):
            y = TOP + 14 + 18 * i
            self.parts.append(f'<line x1="{self.w - RIGHT + 10}" x2="{self.w - RIGHT + 30}" y1="{y - 4}" y2="{y - 4}" '
                              f'stroke="{color}" stroke-width="3"/>')
            self.parts.append(f'<text x="{self.w - RIGHT + 36}" y="{y}" font-size="12">{name}</text>')

    def svg(self):
        return "\n".join(self.parts + ["</g>"])


def document(width, height, body):
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'font-family="sans-serif">\n<rect width="100%" height="100%" fill="white"/>\n{body}\n</svg>\n')


def coverage_svg(subj, runs):
    by_col = {}
    for r in runs:
        pts = [(p["seconds"], 100.0 * p["branches"] / p["branches_total"]) for p in r.get("coverage") or []
               if p["branches_total"]]
        if pts and r["column"] != "changed":  # its runs stop at the change's alarm
            by_col.setdefault(r["column"], []).append(dict(pts))
    if not by_col:
        return None
    times = sorted({t for curves in by_col.values() for c in curves for t in c})
    values = [v for curves in by_col.values() for c in curves for v in c.values()]
    lo, hi = min(values), max(values)
    pad = max(0.5, (hi - lo) * 0.1)
    f = Frame(times[-1], max(0.0, lo - pad), min(100.0, hi + pad), f"{subj}: branch coverage over time",
              "seconds", "branch coverage (%)")
    legend = []
    for col in [c for c in COLORS if c in by_col]:
        curves = by_col[col]
        med, low, high = [], [], []
        for t in times:
            xs = [c[t] for c in curves if t in c]
            if xs:
                med.append((t, statistics.median(xs)))
                low.append((t, min(xs)))
                high.append((t, max(xs)))
        f.band(low, high, COLORS[col])
        f.line(med, COLORS[col])
        legend.append((f"{col} ({len(curves)})", COLORS[col]))
    f.legend(legend)
    return document(W, H, f.svg())


def survival_svg(subj, runs):
    bugs = sorted({b for r in runs for b in r.get("bugs", {})})
    if not bugs:
        return None
    budget = max(r["budget"] for r in runs)
    panels = []
    for i, b in enumerate(bugs):
        f = Frame(budget, 0.0, 1.0, f"{subj}: {b}", "seconds", "share of runs that found it", oy=i * H)
        legend = []
        for col in [c for c in COLORS if any(r["column"] == c for r in runs)]:
            rs = [r for r in runs if r["column"] == col]
            found = sorted(r["bugs"].get(b) for r in rs if r["bugs"].get(b) is not None)
            pts, share = [(0.0, 0.0)], 0.0
            for t in found:
                pts.append((t, share))
                share += 1 / len(rs)
                pts.append((t, share))
            pts.append((budget, share))
            f.line(pts, COLORS[col], dash=col != "bridge")
            legend.append((f"{col} ({len(found)}/{len(rs)})", COLORS[col]))
        f.legend(legend)
        panels.append(f.svg())
    return document(W, H * len(bugs), "\n".join(panels))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subjects", help="comma-separated (default: every subject with run files)")
    a = ap.parse_args()
    subjects = a.subjects.split(",") if a.subjects else sorted(p.name for p in RESULTS.iterdir() if p.is_dir())
    for subj in subjects:
        runs = load_runs(subj)
        if not runs:
            print(f"plots: {subj}: no run files", file=sys.stderr)
            continue
        for name, svg in [("coverage", coverage_svg(subj, runs)), ("survival", survival_svg(subj, runs))]:
            if svg:
                out = RESULTS / f"{subj}-{name}.svg"
                out.write_text(svg)
                print(f"wrote {out}")


if __name__ == "__main__":
    main()

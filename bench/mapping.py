#!/usr/bin/env python3
"""Mapping figures: how many carved units get parameters, and of which kinds.

    python3 bench/mapping.py [--bin DIR] [--label NAME] [--subjects cut,paste,tac,b2sum,sed]
                             [--work DIR] [--table-only]

Builds each subject with DIR/trestle-cc -O2 -g (coreutils 9.1 and GNU sed 4.9 from
Debian's source packages, through tests/coreutils/build.sh and tests/sed/build.sh),
records its seeds with DIR/trestle, carves them, and reads the unit index: units,
units with at least one parameter, units with a parameter of each kind (argument
int, heap/stack/global/argv string, token string, number, stream) and parameters by
kind. DIR defaults to target/release; point it at the binaries of an older trestle
(copied aside before a change) to measure "before". Results go to
bench/results/mapping/<label>-<subject>.json as each subject finishes (a finished
subject is skipped when run again) and the table bench/results/mapping.md is
regenerated from every result file there.
"""
import argparse, json, os, subprocess, sys, time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results" / "mapping"
SUBJECTS = {
    "cut": ("coreutils", "tests/coreutils/cut/seeds"),
    "paste": ("coreutils", "tests/coreutils/paste/seeds"),
    "tac": ("coreutils", "tests/coreutils/tac/seeds"),
    "b2sum": ("coreutils", "tests/coreutils/b2sum/seeds"),
    "sed": ("sed", "tests/sed/seeds"),
}
KINDS = ["argument int", "argv string", "heap string", "stack string", "global string", "token string", "number", "stream"]


def log(msg):
    print(f"[mapping {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def build(bindir, subject, work):
    """The subject built with bindir's trestle-cc (cached per bindir)."""
    package, _ = SUBJECTS[subject]
    out = work / f"build-{package}"
    prog = out / "bin" / subject
    if prog.exists():
        return prog
    cc = str(bindir / "trestle-cc")
    if package == "coreutils":
        progs = ",".join(s for s, (p, _) in SUBJECTS.items() if p == "coreutils")
        cmd = ["bash", str(REPO / "tests/coreutils/build.sh"), "--cc", cc, "--out", str(out), "--prog", progs]
    else:
        cmd = ["bash", str(REPO / f"tests/{package}/build.sh"), "--cc", cc, "--out", str(out)]
    log(f"building {package} with {cc}")
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return prog


def measure(bindir, label, subject, work):
    dest = RESULTS / f"{label}-{subject}.json"
    if dest.exists():
        log(f"{label} {subject}: done before, skipped")
        return
    prog = build(bindir, subject, work)
    seeds = REPO / SUBJECTS[subject][1]
    traces, units = work / f"traces-{subject}", work / f"units-{subject}"
    for d in (traces, units):
        subprocess.run(["rm", "-rf", str(d)], check=True)
    t = time.time()
    subprocess.run([str(bindir / "trestle"), "record", "--program", str(prog), "--tests", str(seeds), "--out", str(traces)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    carve = subprocess.run([str(bindir / "trestle"), "carve", str(traces), "--out", str(units)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    index = json.loads((units / "index.json").read_text())
    rows = index["units"]
    result = {
        "label": label,
        "subject": subject,
        "trestle": str(bindir),
        "seeds": len(list(seeds.glob("*.json"))),
        "seconds": round(time.time() - t, 1),
        "units": len(rows),
        "parameterized": index.get("parameterized_units", sum(1 for r in rows if r.get("params", 0) > 0)),
        "units_by_kind": index.get("units_by_param_kind"),
        "params_by_kind": index.get("param_kinds", {}),
        "unmapped_streams": index.get("unmapped_streams", {}),
        "carve_summary": [l for l in carve.stderr.splitlines() if "parameter" in l or "stream" in l],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=2))
    os.replace(tmp, dest)
    log(f"{label} {subject}: {result['units']} units, {result['parameterized']} with parameters")


def pct(n, d):
    return f"{100.0 * n / d:.1f}%" if d else "–"


def table():
    rows = [json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json"))]
    out = ["# Mapping figures", "",
           "Share of carved units with at least one parameter, and with a parameter of each kind",
           "(`python3 bench/mapping.py`; units from each subject's own seeds, built -O2 -g). A",
           "version without a per-kind unit count (before stream, token and number parameters)",
           "shows parameters by kind instead, in brackets.", "",
           "| subject | trestle | units | with parameters | " + " | ".join(KINDS) + " |",
           "|---|---|---|---|" + "---|" * len(KINDS)]
    for r in sorted(rows, key=lambda r: (r["subject"], r["label"])):
        cells = []
        for k in KINDS:
            if r["units_by_kind"] is not None:
                cells.append(pct(r["units_by_kind"].get(k, 0), r["units"]))
            else:
                cells.append(f"[{r['params_by_kind'].get(k, 0)}]")
        out.append(f"| {r['subject']} | {r['label']} | {r['units']} | {pct(r['parameterized'], r['units'])} | " + " | ".join(cells) + " |")
    unmapped = [(r["subject"], r["label"], r["unmapped_streams"]) for r in rows if r.get("unmapped_streams")]
    if unmapped:
        out += ["", "Streams read but not mapped, by reason:", ""]
        for s, l, u in unmapped:
            out.append(f"- {s} ({l}): " + ", ".join(f"{n} {why}" for why, n in u.items()))
    (REPO / "bench" / "results" / "mapping.md").write_text("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", type=Path, default=REPO / "target" / "release")
    ap.add_argument("--label", default="now")
    ap.add_argument("--subjects", default=",".join(SUBJECTS))
    ap.add_argument("--work", type=Path)
    ap.add_argument("--table-only", action="store_true")
    a = ap.parse_args()
    if not a.table_only:
        bindir = a.bin.resolve()
        work = (a.work or Path.home() / ".cache" / "trestle" / f"bench-mapping-{a.label}").resolve()
        work.mkdir(parents=True, exist_ok=True)
        for s in a.subjects.split(","):
            if s not in SUBJECTS:
                sys.exit(f"mapping: unknown subject {s} (one of {', '.join(SUBJECTS)})")
            measure(bindir, a.label, s, work)
    table()
    print((REPO / "bench" / "results" / "mapping.md").read_text())


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A long campaign, watched: does a bridge campaign stay steady over hours?

    python3 bench/soak.py [--subject sed] [--time 7200] [--cores 2] [--max-disk 2G]
                          [--work DIR] [--results DIR]

Builds the subject as bench/bugs.py does (its planted-bug sources, the trestle and
coverage builds), runs one `trestle run` bridge campaign for --time with --cores, and
every --every seconds (60) appends a sample to RESULTS/samples.csv: the campaign
directory's size on disk, the resident memory of every process of the campaign
(trestle and all its descendants: the forkservers, the sandboxed programs, the unit
fuzzing clients) and the system and unit executions per second since the last
sample (from the campaign's timeline.csv). RESULTS/processes.csv breaks each sample's
memory down by program name (trestle, trestle-fuzz-launcher, the subject, bwrap, ...),
so growth can be traced to the process that grows.

Resumable: run the same command again after an interruption (a reboot, a session's
end) and it goes on with `trestle run --resume` where the campaign stopped, appending
to the same samples (the campaign's own clock, not the wall clock, is the x axis).

At the end it writes RESULTS/soak.json and RESULTS/SUMMARY.md: final and peak disk
against the budget, and total RSS and executions per second over the last 10 minutes
against minutes 10-20 (steady when within 20%; RSS as the median of the samples,
executions per second as the executions of the window over its length), and RESULTS/soak.svg (the three
series over time, SVG written by hand).
"""
import argparse, csv, json, os, signal, statistics, subprocess, sys, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bugs  # noqa: E402  (the subjects and how to build them)

FIELDS = ["campaign_s", "wall", "disk_bytes", "rss_bytes", "processes", "system_execs", "unit_execs",
          "system_per_s", "unit_per_s", "edges", "units_fuzzed", "alarms"]


def tree_processes(root):
    """(pid, rss bytes, name) of `root` and every live descendant (by parent pid: a
    sandboxed program runs in a session of its own, so the session would miss it)."""
    parent, rss, name = {}, {}, {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            stat = (p / "stat").read_text()
            # Fields after the command (which may hold spaces) start past its ')'.
            rest = stat[stat.rindex(")") + 2:].split()
            pid = int(p.name)
            name[pid] = stat[stat.index("(") + 1:stat.rindex(")")]
            parent[pid] = int(rest[1])  # field 4 of stat: the parent pid
            rss[pid] = 0
            for line in (p / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss[pid] = int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    children = {}
    for pid, pp in parent.items():
        children.setdefault(pp, []).append(pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in rss:
            out.append((pid, rss[pid], name.get(pid, "?")))
        todo.extend(children.get(pid, []))
    return out


def last_timeline_row(camp):
    rows = bugs.read_timeline(camp)
    return rows[-1] if rows else None


def campaign_state(camp):
    try:
        return json.loads((camp / "campaign.json").read_text())
    except (OSError, ValueError):
        return None


def read_samples(path):
    if not path.exists():
        return []
    with path.open() as fh:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(fh)]


def append_sample(path, row):
    new = not path.exists()
    with path.open("a", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        if new:
            w.writeheader()
        w.writerow(row)


def window(samples, lo, hi, key):
    vals = [s[key] for s in samples if lo <= s["campaign_s"] < hi]
    return statistics.median(vals) if vals else None


def window_rate(samples, lo, hi, execs):
    """Executions per second over [lo, hi): from the last sample before the window (or
    its first) to the last sample in it. Per-sample rates jump where the campaign's
    timeline counts a unit round's executions at its end."""
    before = [s for s in samples if s["campaign_s"] < lo]
    inside = [s for s in samples if lo <= s["campaign_s"] < hi]
    if not inside:
        return None
    start = before[-1] if before else inside[0]
    dt = inside[-1]["campaign_s"] - start["campaign_s"]
    return (inside[-1][execs] - start[execs]) / dt if dt > 0 else None


def process_windows(path, early, late):
    """{program name: (median RSS in the early window, in the late one)} from
    processes.csv, a program absent from a sample counting 0 there."""
    if not path.exists():
        return {}
    rows = {}
    with path.open() as fh:
        for r in csv.DictReader(fh):
            rows.setdefault(float(r["campaign_s"]), {})[r["name"]] = int(r["rss_bytes"])
    names = {n for per in rows.values() for n in per}
    out = {}
    for n in names:
        def med(lo, hi):
            vals = [per.get(n, 0) for t, per in rows.items() if lo <= t < hi]
            return statistics.median(vals) if vals else None
        out[n] = (med(*early), med(*late))
    return out


def append_processes(path, campaign_s, procs):
    """One row per program name: how many processes of it and their RSS."""
    by = {}
    for _, rss, name in procs:
        n, b = by.get(name, (0, 0))
        by[name] = (n + 1, b + rss)
    new = not path.exists()
    with path.open("a", newline="") as fh:
        w = csv.writer(fh)
        if new:
            w.writerow(["campaign_s", "name", "processes", "rss_bytes"])
        for name, (n, b) in sorted(by.items()):
            w.writerow([campaign_s, name, n, b])


def svg(samples, budget, out):
    """Three panels (disk, RSS, executions per second) against campaign minutes, drawn
    with matplotlib."""
    import matplotlib

    matplotlib.use("svg")
    import matplotlib.pyplot as plt

    panels = [("disk (MB)", [("disk_bytes", 1e-6, "#1f77b4")], budget / 1e6),
              ("RSS of the campaign (MB)", [("rss_bytes", 1e-6, "#d62728")], None),
              ("executions per second", [("system_per_s", 1, "#ff7f0e"), ("unit_per_s", 1, "#2ca02c")], None)]
    fig, axes = plt.subplots(len(panels), 1, figsize=(7.2, 6.2), sharex=True)
    minutes = [s["campaign_s"] / 60 for s in samples]
    for ax, (title, series, limit) in zip(axes, panels):
        for k, f, color in series:
            ax.plot(minutes, [s[k] * f for s in samples], color=color, linewidth=1.5, label=k.replace("_per_s", ""))
        if limit:
            ax.axhline(limit, color="#1f77b4", linestyle="--", linewidth=1, label="--max-disk")
        ax.set_title(title, loc="left", fontweight="bold", fontsize=11)
        ax.set_ylim(bottom=0)
        ax.grid(color="#ddd")
        if len(series) > 1 or limit:
            ax.legend(loc="upper right", frameon=False)
    axes[-1].set_xlabel("campaign minutes")
    axes[-1].set_xlim(0, max(minutes + [1]))
    fig.tight_layout()
    fig.savefig(out, format="svg")
    plt.close(fig)


def summarise(samples, a, state, results):
    budget_disk = a.max_disk_bytes
    early = (600, 1200)
    late = (a.time - 600, a.time + 1)
    s = {"subject": a.subject, "time": a.time, "cores": a.cores, "max_disk": budget_disk, "samples": len(samples),
         "final_disk": samples[-1]["disk_bytes"] if samples else None,
         "peak_disk": max((x["disk_bytes"] for x in samples), default=None),
         "campaign_disk": (state or {}).get("disk")}
    for key in ["rss_bytes", "system_per_s", "unit_per_s"]:
        if key == "rss_bytes":
            e, l = window(samples, *early, key), window(samples, *late, key)
        else:
            execs = key.replace("_per_s", "_execs")
            e, l = window_rate(samples, *early, execs), window_rate(samples, *late, execs)
        s[key] = {"minutes_10_20": e, "last_10": l, "ratio": (l / e) if e else None}
    s["disk_within_budget"] = s["peak_disk"] is not None and s["peak_disk"] <= budget_disk
    s["steady"] = {k: (s[k]["ratio"] is not None and abs(s[k]["ratio"] - 1) <= 0.2) for k in ["rss_bytes", "system_per_s"]}
    (results / "soak.json").write_text(json.dumps(s, indent=2) + "\n")
    mb = lambda v: "—" if v is None else f"{v / 1e6:.0f} MB"
    rate = lambda v: "—" if v is None else f"{v:.0f}/s"
    ratio = lambda v: "—" if v is None else f"{v:.2f}"
    lines = [f"# Soak: {a.subject}, {a.time / 3600:.1f} h bridge campaign, --cores {a.cores}, --max-disk {mb(budget_disk)}", "",
             f"Samples every {a.every} s: {len(samples)}. Command: `python3 bench/soak.py --subject {a.subject} --time {a.time} "
             f"--cores {a.cores} --max-disk {a.max_disk}`.", "",
             f"- disk: final {mb(s['final_disk'])}, peak {mb(s['peak_disk'])} (budget {mb(budget_disk)}; "
             f"{'within' if s['disk_within_budget'] else 'OVER'})",
             "", "| | minutes 10–20 | last 10 minutes | ratio |", "|---|---|---|---|"]
    for key, fmt in [("rss_bytes", mb), ("system_per_s", rate), ("unit_per_s", rate)]:
        lines.append(f"| {key} | {fmt(s[key]['minutes_10_20'])} | {fmt(s[key]['last_10'])} | {ratio(s[key]['ratio'])} |")
    if state and state.get("disk"):
        d = state["disk"]
        lines += ["", f"Evicted: {d.get('corpora_evicted', 0)} unit corpora, {len(d.get('batches_evicted', []))} unit batches "
                      f"({mb(d.get('bytes_evicted', 0))})."]
    by_name = process_windows(results / "processes.csv", early, late)
    if by_name:
        lines += ["", "RSS by program (median over the samples of each window; 0 where none ran):", "",
                  "| program | minutes 10–20 | last 10 minutes |", "|---|---|---|"]
        for name, (e, l) in sorted(by_name.items(), key=lambda kv: -kv[1][1]):
            lines.append(f"| {name} | {mb(e)} | {mb(l)} |")
        s["rss_by_program"] = {n: {"minutes_10_20": e, "last_10": l} for n, (e, l) in by_name.items()}
        (results / "soak.json").write_text(json.dumps(s, indent=2) + "\n")
    lines += ["", "![disk, RSS and executions per second](soak.svg)", ""]
    (results / "SUMMARY.md").write_text("\n".join(lines))
    svg(samples, budget_disk, results / "soak.svg")
    print("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subject", default="sed", help="a subject of bench/bugs.py (default sed: GNU sed 4.9)")
    ap.add_argument("--time", type=int, default=7200, help="campaign seconds (default 7200)")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--max-disk", default="2G", help="the campaign's --max-disk (default 2G)")
    ap.add_argument("--every", type=int, default=60, help="seconds between samples (default 60)")
    ap.add_argument("--work", default=str(Path.home() / ".cache" / "trestle" / "soak"), help="builds and the campaign")
    ap.add_argument("--results", default=str(bugs.REPO / "bench" / "results" / "soak"), help="samples, summary and plot")
    a = ap.parse_args()
    if a.subject not in bugs.SUBJECTS:
        sys.exit(f"soak: no subject {a.subject!r}; bench/bugs.py has {', '.join(bugs.SUBJECTS)}")
    units = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
    m = a.max_disk.strip()
    try:
        a.max_disk_bytes = int(float(m[:-1]) * units[m[-1].upper()]) if m[-1].isalpha() else int(m)
    except (KeyError, ValueError):
        sys.exit(f"soak: --max-disk {m!r} is no size (say 2G)")
    work, results = Path(a.work), Path(a.results)
    work.mkdir(parents=True, exist_ok=True)
    results.mkdir(parents=True, exist_ok=True)
    bin_dir = bugs.copy_tools(work)
    builds = {v: bugs.build_variant(a.subject, v, work) for v in ["trestle", "cov"]}
    camp = work / "campaign"
    samples_path = results / "samples.csv"
    state = campaign_state(camp)
    if state is not None and state.get("finished"):
        print(f"soak: the campaign in {camp} is finished; summarising")
        summarise(read_samples(samples_path), a, state, results)
        return
    t = bin_dir / "trestle"
    if state is None:
        if camp.exists():
            subprocess.run(["rm", "-rf", str(camp)], check=True)
        samples_path.unlink(missing_ok=True)
        (results / "processes.csv").unlink(missing_ok=True)
        cmd = [str(t), "run", "--program", str(builds["trestle"]), "--seeds", str(bugs.seeds_dir(a.subject)),
               "--validate-with", str(builds["cov"]), "--time", f"{a.time}s", "--out", str(camp), "--cores", str(a.cores),
               "--max-disk", a.max_disk, "--seed", "1", "--plain"]
    else:
        print(f"soak: resuming the campaign in {camp} at {state.get('elapsed', 0):.0f}s")
        cmd = [str(t), "run", "--resume", str(camp), "--plain"]
    env = dict(os.environ, TRESTLE_BIN=str(bin_dir))
    logf = (work / "run.log").open("a")
    logf.write(f"$ {' '.join(cmd)}\n")
    logf.flush()
    p = subprocess.Popen(cmd, stdout=logf, stderr=logf, env=env, start_new_session=True)

    def stop(signum, frame):
        os.killpg(p.pid, signal.SIGINT)  # the campaign saves itself; run again to resume

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    prev = read_samples(samples_path)
    last = prev[-1] if prev else None
    while p.poll() is None:
        time.sleep(a.every)
        row = last_timeline_row(camp)
        if row is None:
            continue
        procs = tree_processes(p.pid)
        sample = {"campaign_s": row["seconds"], "wall": time.time(), "disk_bytes": bugs.dir_bytes(camp),
                  "rss_bytes": sum(r for _, r, _ in procs), "processes": len(procs),
                  "system_execs": row["system_execs"], "unit_execs": row["unit_execs"], "edges": row["edges"],
                  "units_fuzzed": row["units_fuzzed"], "alarms": row["alarms"]}
        dt = (row["seconds"] - last["campaign_s"]) if last else row["seconds"]
        if dt <= 0:
            continue  # no new timeline row yet
        sample["system_per_s"] = (row["system_execs"] - (last["system_execs"] if last else 0)) / dt
        sample["unit_per_s"] = (row["unit_execs"] - (last["unit_execs"] if last else 0)) / dt
        append_sample(samples_path, sample)
        append_processes(results / "processes.csv", row["seconds"], procs)
        last = sample
        print(f"[soak {row['seconds']:6.0f}s] disk {sample['disk_bytes'] / 1e6:7.1f} MB | rss {sample['rss_bytes'] / 1e6:7.1f} MB "
              f"in {len(procs)} processes | system {sample['system_per_s']:6.0f}/s unit {sample['unit_per_s']:7.0f}/s | "
              f"{row['edges']:.0f} edges, {row['alarms']:.0f} alarms", flush=True)
    state = campaign_state(camp)
    if state is not None and state.get("finished"):
        summarise(read_samples(samples_path), a, state, results)
    else:
        print(f"soak: the campaign stopped at {state.get('elapsed', 0) if state else 0:.0f}s before its end; "
              f"run the same command again to resume (log: {work / 'run.log'})")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Run the commands of README.md and docs/ as they are written.

    python3 tests/doc-commands.py [--list]

Every ```sh or ```bash block is run, in bash with `set -euo pipefail`, from the
repository's root with B=target/release, README.md first and then docs/carving.md,
docs/parameters.md and docs/lifting.md (later examples use what earlier ones made), then
the other pages. A block right after `<!-- doc-test: skip: REASON -->` is not run; its
reason is printed. The /tmp paths the run blocks name are removed first, so the
examples start as a new user's would. Exit status 1 when a block fails (its output is
printed); --list only says what would run and what is skipped.
"""
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIRST = ["README.md", "docs/carving.md", "docs/parameters.md", "docs/lifting.md"]
SKIP = re.compile(r"<!-- doc-test: skip: (.*) -->")


def blocks(path):
    """(line, run, reason, text) for each shell block of a Markdown file."""
    lines = path.read_text().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        if m.group(1) in ("sh", "bash"):
            k = i - 1
            while k >= 0 and not lines[k].strip():
                k -= 1
            skip = SKIP.match(lines[k].strip()) if k >= 0 else None
            out.append((i + 1, skip is None, skip.group(1) if skip else None, "\n".join(lines[i + 1:j])))
        i = j + 1
    return out


def main():
    listing = "--list" in sys.argv[1:]
    pages = FIRST + sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md") if str(p.relative_to(REPO)) not in FIRST)
    todo = []
    for page in pages:
        for line, run, reason, text in blocks(REPO / page):
            todo.append((page, line, run, reason, text))
    runs = [t for t in todo if t[2]]
    for page, line, _, reason, _ in todo:
        if reason is not None:
            print(f"doc-commands: skipped {page}:{line}: {reason}")
    if listing:
        for page, line, *_ in runs:
            print(f"doc-commands: would run {page}:{line}")
        return 0
    paths = sorted({m for t in runs for m in re.findall(r"/tmp/[A-Za-z0-9_.-]+", t[4])})
    for p in paths:
        shutil.rmtree(p, ignore_errors=True) if Path(p).is_dir() else Path(p).unlink(missing_ok=True)
    failed = 0
    for page, line, _, _, text in runs:
        t0 = time.monotonic()
        script = "set -euo pipefail\nB=target/release\n" + text + "\n"
        r = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True)
        secs = time.monotonic() - t0
        if r.returncode == 0:
            print(f"doc-commands: ok {page}:{line} ({secs:.0f} s)")
        else:
            failed += 1
            print(f"doc-commands: FAILED {page}:{line} (exit {r.returncode} after {secs:.0f} s)\n{text}\n--- stdout\n{r.stdout[-3000:]}\n--- stderr\n{r.stderr[-3000:]}")
    print(f"doc-commands: {len(runs) - failed} of {len(runs)} block(s) ran as written, {len(todo) - len(runs)} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

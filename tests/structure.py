#!/usr/bin/env python3
"""The workspace's structure, checked: no cycle between the top-level modules of any
crate, and no printing or argument parsing in the bridge's stages.

A module depends on another when its code (comments and `#[cfg(test)]` modules left
out) names it: `crate::other`, `use crate::{other, ...}`, or `super::other` from a
file one level down. Crates cannot form cycles (cargo refuses them); inside a crate
nothing else stops two modules from using each other, and a cycle means neither can
be understood, tested or moved alone.

Stages print nothing: `println!`, `eprintln!`, `outln!`, `out!` and clap belong to
the bridge's `cli/` (and `main.rs`, `stdout.rs`); a stage hands its results back as
values. Stages listed in PRINTING_ALLOWED still print, each with the reason.

Usage: python3 tests/structure.py [--list]   (--list prints every crate's module graph)
Exits 1 and names the cycle or the line otherwise.
"""

import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CRATES = {
    "trestle-abi": "runtime/abi/src",
    "runtime": "runtime/src",
    "crashstack": "runtime/crashstack/src",
    "instrument": "instrument/src",
    "trestle-exec": "exec/src",
    "trestle-unit-fuzz": "unit-fuzz/src",
    "trestle-sysfuzz": "sysfuzz/src",
    "trestle-bridge": "bridge/src",
}
# Files of the bridge that may print: the command line itself and its output helper.
CLI = ("cli/", "main.rs", "stdout.rs")
# Stage modules that still print, and why (an empty dict is the goal).
PRINTING_ALLOWED = {}
PRINT = re.compile(r"\b(println!|eprintln!|print!|eprint!|outln!|out!)\s*\(|\bclap::")


def code_of(path):
    """The file's code: comments and `#[cfg(test)]` modules removed."""
    text = open(path, encoding="utf-8").read()
    cut = re.search(r"^#\[cfg\(test\)\]\s*\n\s*(pub(\(\w+\))? )?mod tests\b", text, re.M)
    if cut:
        text = text[: cut.start()]
    lines = []
    for line in text.split("\n"):
        s = line.strip()
        if s.startswith("//"):
            continue
        lines.append(re.sub(r"\s//.*$", "", line))
    return "\n".join(lines)


def top_module(src, path):
    rel = os.path.relpath(path, src)
    first = rel.split(os.sep)[0]
    return first[:-3] if first.endswith(".rs") else first


def graph(src):
    mods = set()
    deps = {}
    files = []
    for dp, _, fns in os.walk(src):
        for fn in fns:
            if fn.endswith(".rs"):
                p = os.path.join(dp, fn)
                files.append(p)
                m = top_module(src, p)
                if m not in ("lib", "main"):
                    mods.add(m)
    for p in files:
        m = top_module(src, p)
        if m in ("lib", "main"):
            continue
        code = code_of(p)
        named = set(re.findall(r"\bcrate::(\w+)", code))
        for group in re.findall(r"\bcrate::\{([^}]*)\}", code, re.S):
            named |= set(re.findall(r"(?:^|,)\s*(\w+)", group))
        # `super::x` from a file directly under a top-level module's directory.
        depth = len(os.path.relpath(p, src).split(os.sep))
        if depth == 2 and not p.endswith("mod.rs"):
            pass  # super:: is the module itself
        elif depth == 1:
            named |= set(re.findall(r"\bsuper::(\w+)", code))
        deps.setdefault(m, set()).update(n for n in named if n in mods and n != m)
    return mods, deps


def cycles(mods, deps):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(deps.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(mods):
        if v not in index:
            visit(v)
    return out


def printing(src):
    found = []
    for dp, _, fns in os.walk(src):
        for fn in sorted(fns):
            if not fn.endswith(".rs"):
                continue
            p = os.path.join(dp, fn)
            rel = os.path.relpath(p, src)
            if rel.startswith(CLI) or top_module(src, p) in PRINTING_ALLOWED:
                continue
            for n, line in enumerate(code_of(p).split("\n"), 1):
                if PRINT.search(line):
                    found.append(f"{os.path.relpath(p, ROOT)}:{n}: {line.strip()}")
    return found


def main():
    bad = False
    for crate, rel in CRATES.items():
        src = os.path.join(ROOT, rel)
        if not os.path.isdir(src):
            continue
        mods, deps = graph(src)
        if "--list" in sys.argv:
            print(f"{crate}:")
            for m in sorted(mods):
                print(f"  {m} -> {' '.join(sorted(deps.get(m, ()))) or '-'}")
        for c in cycles(mods, deps):
            bad = True
            edges = [f"{a}->{b}" for a in c for b in sorted(deps.get(a, ())) if b in c]
            print(f"structure: a cycle between modules of {crate}: {', '.join(edges)}")
    stage_prints = printing(os.path.join(ROOT, CRATES["trestle-bridge"]))
    for line in stage_prints:
        print(f"structure: a stage prints (printing belongs to cli/): {line}")
    bad |= bool(stage_prints)
    if not bad:
        n = sum(1 for r in CRATES.values() if os.path.isdir(os.path.join(ROOT, r)))
        print(f"structure: {n} crates, no cycle between modules; no stage prints")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

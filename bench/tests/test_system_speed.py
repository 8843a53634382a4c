"""system_speed.py's per-execution profile names a sample's function from the file the
run really mapped, not from the path perf saw."""
import os
import shutil
import subprocess

import pytest

from system_speed import load_segments, symbolise, text_symbols

CC = shutil.which("clang-19") or shutil.which("cc")


def build(tmp_path, name, functions):
    src = tmp_path / f"{name}.c"
    body = "".join(f"int {f}(int x) {{ return x * {i + 3} + {i}; }}\n" for i, f in enumerate(functions))
    src.write_text(body + "int main(int c, char **v) { (void)v; return " + " + ".join(f"{f}(c)" for f in functions) + "; }\n")
    out = tmp_path / name
    subprocess.run([CC, "-O1", "-fPIE", "-pie", str(src), "-o", str(out)], check=True)
    return out


def sample_at(path, function, start):
    """A sample inside `function` of `path` as perf gives it: the instruction pointer and
    its mapping (start, file offset of the start, inode), for an executable segment
    mapped at `start`."""
    addr = dict((n, a) for a, n in text_symbols(path))[function]
    off, vaddr, _ = next(s for s in load_segments(path) if s[1] <= addr < s[1] + s[2])
    page = off & ~0xFFF
    return (start + (addr - vaddr + off - page) + 1, (start, page, os.stat(path).st_ino))


@pytest.mark.skipif(CC is None, reason="no C compiler")
def test_a_sample_is_named_from_the_file_its_mapping_came_from(tmp_path):
    lean = build(tmp_path, "lean", ["lean_only", "shared"])
    program = build(tmp_path, "program", ["recording_hook", "other", "shared"])
    files = {os.stat(p).st_ino: str(p) for p in (lean, program)}
    samples = [sample_at(lean, "lean_only", 0x5555_0000_0000), sample_at(lean, "lean_only", 0x5555_0000_0000),
               sample_at(program, "recording_hook", 0x7777_0000_0000)]
    names = symbolise(samples, files)
    assert names == {"lean_only": 2, "recording_hook": 1}
    # A mapping of a file that is neither build is counted, not named.
    assert symbolise([(0x1000, (0x1000, 0, -1))], files) == {"(another file)": 1}

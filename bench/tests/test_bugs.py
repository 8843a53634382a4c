"""How bench/bugs.py assigns a crash to a planted bug and reads AFL++'s inputs, and
that its tables regenerate unchanged from committed run files."""
import shutil
import types
from pathlib import Path

import bugs

RESULTS = Path(__file__).resolve().parent.parent / "results"


def verdict(frames, own=None, crash="SIGSEGV"):
    return {"crash": crash, "frames": frames, "stack": [dict(own, own=True)] if own else []}


def test_a_crash_on_a_line_the_patch_added_is_that_bug(monkeypatch):
    monkeypatch.setitem(bugs.ADDED_LINES, "dc", {"dump-bytes-length": [("dc/numeric.c", 120)]})
    v = verdict(["dc_register_pop"], own={"file": "/build/bc-1.07.1/dc/numeric.c", "line": 120})
    assert bugs.classify(v, "dc") == ("bug", "dump-bytes-length")


def test_else_the_innermost_function_names_the_bug(monkeypatch):
    monkeypatch.setitem(bugs.ADDED_LINES, "dc", {})
    assert bugs.classify(verdict(["dc_register_pop", "dc_func"]), "dc") == ("bug", "register-pop-sequence")
    # A bug's function further out is not enough: the crash is another.
    assert bugs.classify(verdict(["xmalloc", "dc_register_pop"]), "dc") == ("other", "SIGSEGV")


def test_no_crash_is_none_with_how_it_ended():
    assert bugs.classify({"status": "exit 0"}, "dc") == ("none", "exit 0")
    assert bugs.classify({"status": "killed", "limit": "cpu"}, "dc") == ("none", "killed (cpu)")


def test_an_afl_input_is_arguments_then_stdin():
    t = bugs.afl_to_test(b"-d\0:\0\0a:b\n", {"mode": "argv"})
    assert t["args"] == ["-d", ":"]
    assert t["stdin"] == {"base64": "YTpiCg=="}
    # Cut short before the empty argument: all of it is arguments.
    assert bugs.afl_to_test(b"-s\0x", {"mode": "argv"}) == {"args": ["-s", "x"]}
    assert bugs.afl_to_test(b"1 2 +p", {"mode": "stdin"})["stdin"] == {"base64": "MSAyICtw"}


def test_the_tables_regenerate_unchanged_from_the_run_files(tmp_path, monkeypatch):
    src = RESULTS / "bugs-aa4a00d"
    copy = tmp_path / "r"
    shutil.copytree(src, copy)
    monkeypatch.setattr(bugs, "RESULTS", copy)
    a = types.SimpleNamespace(time=600, time_given=True)
    for subj in bugs.SIX:
        bugs.write_table(subj, a)
    bugs.write_summary(a)

    def body(p):
        return [line for line in p.read_text().split("\n") if "Written 20" not in line]

    for md in sorted(src.glob("*.md")):
        if md.name == "NOTES.md":
            continue
        assert body(copy / md.name) == body(md), md.name

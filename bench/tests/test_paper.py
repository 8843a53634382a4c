"""Which files count as a program's own code in the coverage figures (bench/paper.py)."""
import paper


def test_own_files_are_the_programs_not_gnulib_or_headers():
    tree = paper.PACKAGES[paper.subject("cut")["package"]]["tree"]
    assert paper.own_file("cut", f"/w/build/{tree}/src/cut.c") == "cut.c"
    assert paper.own_file("cut", f"/w/build/{tree}/lib/quotearg.c") is None
    assert paper.own_file("cut", "/usr/include/stdio.h") is None


def test_coverage_sums_the_own_files_of_llvm_cov_s_summary(monkeypatch):
    tree = paper.PACKAGES[paper.subject("cut")["package"]]["tree"]
    files = [
        {"filename": f"/b/{tree}/src/cut.c", "summary": {"branches": {"covered": 30, "count": 40}, "lines": {"covered": 90, "count": 100}}},
        {"filename": f"/b/{tree}/lib/xalloc.c", "summary": {"branches": {"covered": 1, "count": 9}, "lines": {"covered": 5, "count": 50}}},
    ]

    class Done:
        stdout = __import__("json").dumps({"data": [{"files": files}]})

    monkeypatch.setattr(paper.subprocess, "run", lambda *a, **k: Done())
    res = paper.profile_coverage("cut", "cov", "merged.profdata")
    assert (res["branches"], res["branches_total"], res["lines"], res["lines_total"]) == (30, 40, 90, 100)
    assert res["files"] == ["cut.c"]

"""No Python module above ``MAX_LINES`` lines in the package, the stages, the tests or the
benchmarks.

A module that long holds more than one job, and every reader pays for it (issue #25 item 5
split the last ones: gpu_check into benchmarks/gpu/, three test files by topic). Split a module
that grows past it along its topics: tests into new test files with shared helpers in
tests/helpers_*.py, code into modules of one job each. Lines are counted as ``wc -l`` does.
"""

from __future__ import annotations

from pathlib import Path

from tests.test_dvc_deps import REPO

MAX_LINES = 400
ROOTS = ("leakpipe", "stages", "tests", "benchmarks")


def long_modules(repo: Path, max_lines: int = MAX_LINES) -> list[str]:
    """``<path>: <n> lines`` for every .py file under ``ROOTS`` of ``repo`` above ``max_lines``."""
    found = []
    for root in ROOTS:
        for path in sorted((repo / root).rglob("*.py")):
            n = path.read_bytes().count(b"\n")
            if n > max_lines:
                found.append(f"{path.relative_to(repo)}: {n} lines")
    return found


def test_no_module_is_longer_than_400_lines() -> None:
    assert long_modules(REPO) == []


def test_a_module_of_401_lines_is_caught(tmp_path: Path) -> None:
    """The check itself: 400 lines pass, 401 fail, in any of the roots and below."""
    for root, n in (("leakpipe/sub", 400), ("tests", 401), ("benchmarks/gpu", 401)):
        (tmp_path / root).mkdir(parents=True)
        (tmp_path / root / "m.py").write_text("x = 1\n" * n)
    assert long_modules(tmp_path) == ["tests/m.py: 401 lines", "benchmarks/gpu/m.py: 401 lines"]

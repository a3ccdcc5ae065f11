"""No Python module above its root's cap in ``MAX_LINES``: 350 lines in the package, 400 in the
stages, the tests and the benchmarks.

A module that long holds more than one job, and every reader pays for it (issue #25 item 5
split the last ones: gpu_check into benchmarks/perf/gpu/, three test files by topic; issue #38
brought every package module to 350 or fewer). Split a module that grows past it along its
topics: tests into new test files with shared helpers in tests/helpers_*.py, code into modules
of one job each. Lines are counted as ``wc -l`` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tests.test_dvc_deps import REPO

MAX_LINES: Mapping[str, int] = {"leakpipe": 350, "stages": 400, "tests": 400,
                                "benchmarks": 400, "tools": 400}


def long_modules(repo: Path, max_lines: Mapping[str, int] = MAX_LINES) -> list[str]:
    """``<path>: <n> lines`` for every .py file under a root of ``max_lines`` in ``repo`` above
    that root's cap."""
    found = []
    for root, cap in max_lines.items():
        for path in sorted((repo / root).rglob("*.py")):
            n = path.read_bytes().count(b"\n")
            if n > cap:
                found.append(f"{path.relative_to(repo)}: {n} lines")
    return found


def test_no_module_is_longer_than_its_roots_cap() -> None:
    assert long_modules(REPO) == []


def test_a_module_one_line_over_its_roots_cap_is_caught(tmp_path: Path) -> None:
    """The check itself: the package caps at 350, the others at 400, in any subfolder."""
    for root, n in (("leakpipe/sub", 350), ("leakpipe", 351), ("stages", 400),
                    ("tests", 401), ("benchmarks/perf/gpu", 401)):
        (tmp_path / root).mkdir(parents=True, exist_ok=True)
        (tmp_path / root / f"m{n}.py").write_text("x = 1\n" * n)
    assert long_modules(tmp_path) == ["leakpipe/m351.py: 351 lines", "tests/m401.py: 401 lines",
                                      "benchmarks/perf/gpu/m401.py: 401 lines"]


MAX_FUNCTION_LINES = 60     # a function longer than a screen holds more than one step


def long_functions(root: Path, cap: int = MAX_FUNCTION_LINES) -> list[str]:
    """``<path>:<line> <name>: <n> lines`` for every function under ``root`` longer than
    ``cap`` lines (its decorators aside, its docstring included)."""
    import ast

    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                if n > cap:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name}: "
                                 f"{n} lines")
    return found


def test_no_package_function_is_longer_than_a_screen(tmp_path: Path) -> None:
    assert long_functions(REPO / "leakpipe") == []
    (tmp_path / "pkg").mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "pkg" / "m.py").write_text(f"def short():\n{body[:-len('    x59 = 59')-1]}\n"
                                           f"def long():\n{body}")
    assert long_functions(tmp_path / "pkg") == ["pkg/m.py:62 long: 61 lines"]   # short: 60, kept

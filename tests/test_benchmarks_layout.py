"""Research code in its place: benchmarks/perf/ (speed, memory, scaling) and benchmarks/studies/
(science) beside benchmarks/results/; every script names the doc pages its figures go to and each
such page cites it; the package holds only what the product runs.

Why: package code that only a benchmark uses is shipped in every logged model's code and read by
every newcomer as part of the product; a script no doc cites produces figures nobody can find.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.test_dvc_deps import REPO, tool

GROUPS = ("perf", "studies")
TOP_LEVEL = {"perf", "studies", "results"}
DOC_PAGE = re.compile(r"\b(docs/[\w./-]+\.md|README\.md)")
# the paragraph naming the pages its figures go to
FIGURES_LINE = re.compile(r"^Figures: (.+(?:\n.+)*)", re.MULTILINE)
# Loaded by path, not imported: MLflow runs it when a logged model loads (serve/model.py
# MODEL_CODE).
LOADED_BY_PATH = {"leakpipe/serve/model_code.py"}


def scripts(root: Path = REPO) -> list[Path]:
    """The top-level modules of benchmarks/perf and benchmarks/studies (packages left out)."""
    return sorted(p for group in GROUPS for p in (root / "benchmarks" / group).glob("*.py"))


def named_pages(script: Path) -> set[str]:
    """Doc pages the ``Figures:`` line of a script's docstring names."""
    doc = ast.get_docstring(ast.parse(script.read_text())) or ""
    return {page for line in FIGURES_LINE.findall(doc) for page in DOC_PAGE.findall(line)}


def importers(script: Path, root: Path) -> list[Path]:
    """Sibling scripts that import ``script`` (a helper module run through them)."""
    return [p for p in scripts(root) if p.parent == script.parent and p != script
            and script.stem in {n.split(".")[0] for n in _plain_imports(p)}]


def _plain_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def cites(page: Path, script: Path, root: Path) -> bool:
    """The page names the script's path, or that of a sibling script that runs it."""
    text = page.read_text()
    return any(p.relative_to(root).as_posix() in text
               for p in [script, *importers(script, root)])


def uncited(root: Path = REPO) -> list[str]:
    problems = []
    for script in scripts(root):
        rel = script.relative_to(root).as_posix()
        pages = named_pages(script)
        if not pages:
            problems.append(f"{rel}: no `Figures: docs/....md` line in its docstring")
        for page in sorted(pages):
            if not (root / page).is_file():
                problems.append(f"{rel}: names {page}, which does not exist")
            elif not cites(root / page, script, root):
                problems.append(f"{rel}: names {page}, which does not cite it")
    return problems


def product_modules() -> set[str]:
    """Package files that the CLI's commands and the stage scripts load, transitively."""
    start = {"leakpipe.cli"} | {f"leakpipe.commands.{p.stem}"
                                for p in (REPO / "leakpipe" / "commands").glob("*.py")}
    for script in (REPO / "stages").glob("*.py"):
        start |= {n for n in tool.imported_names(script, REPO) if n.startswith("leakpipe")}
    return {p.relative_to(REPO).as_posix() for p in tool.import_closure(start, REPO)}


def test_benchmarks_holds_perf_studies_and_results_only() -> None:
    entries = {p.name for p in (REPO / "benchmarks").iterdir()
               if not p.name.startswith((".", "__pycache__"))}
    assert entries == TOP_LEVEL, f"benchmarks/: {sorted(entries - TOP_LEVEL)} outside " \
                                 "perf/ (speed, memory, scaling), studies/ (science), results/"


def test_every_script_names_its_doc_pages_and_each_page_cites_it() -> None:
    assert uncited() == []


def test_no_package_module_is_used_only_outside_the_product() -> None:
    package = {p.relative_to(REPO).as_posix() for p in (REPO / "leakpipe").rglob("*.py")}
    unused = sorted(package - product_modules() - LOADED_BY_PATH)
    assert unused == [], f"{unused}: no command or stage loads these; benchmark or test code " \
                         "belongs under benchmarks/ or tests/"


def test_the_layout_checks_catch_an_uncited_script(tmp_path: Path) -> None:
    """The check itself: a script whose docstring names no page, or a page that does not cite
    it, is reported."""
    for group in GROUPS:
        (tmp_path / "benchmarks" / group).mkdir(parents=True)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("Figures from `benchmarks/perf/cited.py`.\n")
    (tmp_path / "docs" / "b.md").write_text("Nothing here.\n")
    (tmp_path / "benchmarks" / "perf" / "cited.py").write_text('"""Figures: docs/a.md."""\n')
    (tmp_path / "benchmarks" / "perf" / "quiet.py").write_text('"""Background: docs/a.md."""\n')
    (tmp_path / "benchmarks" / "studies" / "wrong.py").write_text('"""Figures: docs/b.md."""\n')
    assert uncited(tmp_path) == [
        "benchmarks/perf/quiet.py: no `Figures: docs/....md` line in its docstring",
        "benchmarks/studies/wrong.py: names docs/b.md, which does not cite it"]

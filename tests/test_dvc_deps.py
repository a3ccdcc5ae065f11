"""Every module a DVC stage imports is one of that stage's deps in dvc.yaml.

DVC re-runs a stage only when one of its listed `deps` changes. A module the stage imports
but does not list can change while `dvc repro` still calls the stage up to date, although
running it again would give a different result. The imports are read statically (AST only,
nothing is imported, no torch), so this stays a fast unit test.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "leakpipe"
CLI = f"{PACKAGE}.cli"  # its dispatch table imports every command, so no stage starts from it
STAGE_SCRIPT = re.compile(r"\bpython\s+(stages/\w+\.py)\b")


def module_file(name: str) -> Path | None:
    """`leakpipe.a.b` -> leakpipe/a/b.py or leakpipe/a/b/__init__.py; None if no such file."""
    if name.split(".")[0] != PACKAGE:
        return None
    base = REPO.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _package_of(path: Path) -> str:
    """The package relative imports in `path` start from."""
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1])


def imported_names(path: Path) -> set[str]:
    """Every name an import statement anywhere in `path` (functions included) may load.

    `from a import b` yields both `a` and `a.b`: `b` counts when it is a submodule.
    """
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = _package_of(path).split(".")
                parent = ".".join(package[: len(package) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def _with_parents(name: str) -> Iterator[str]:
    """`a.b.c` -> a, a.b, a.b.c: importing a module runs its packages' __init__.py first."""
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        yield ".".join(parts[:i])


def import_closure(start: Iterable[str]) -> set[Path]:
    """The package's module files that importing `start` loads, transitively."""
    todo = list(start)
    seen: set[Path] = set()
    while todo:
        for name in _with_parents(todo.pop()):
            path = module_file(name)
            if path is not None and path not in seen:
                seen.add(path)
                todo.extend(imported_names(path))
    return seen


def command_module(subcommand: str) -> str:
    """The module under leakpipe/commands whose `NAME` is `subcommand` (how cli.py dispatches)."""
    for path in sorted((REPO / PACKAGE / "commands").glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if (isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "NAME" for t in node.targets)
                    and isinstance(node.value, ast.Constant) and node.value.value == subcommand):
                return f"{PACKAGE}.commands.{path.stem}"
    raise LookupError(f"no leakpipe/commands module has NAME = {subcommand!r}")


def entry_modules(script: Path) -> set[str]:
    """What a stage script runs: the command its `main([...])` call names, plus whatever else
    of the package it imports (leakpipe.cli left out, see CLI)."""
    entries = {name for name in imported_names(script)
               if name.split(".")[0] == PACKAGE and not name.startswith(CLI)}
    for node in ast.walk(ast.parse(script.read_text())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "main" and node.args and isinstance(node.args[0], ast.List)
                and node.args[0].elts and isinstance(node.args[0].elts[0], ast.Constant)):
            entries.add(command_module(node.args[0].elts[0].value))
    return entries


def script_stages() -> dict[str, tuple[str, list[str]]]:
    """Stages whose cmd runs `python stages/<name>.py`: stage -> (script, deps)."""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    found: dict[str, tuple[str, list[str]]] = {}
    for name, stage in stages.items():
        match = STAGE_SCRIPT.search(str(stage["cmd"]))
        if match:
            found[name] = (match.group(1), [d for d in stage.get("deps", []) if isinstance(d, str)])
    return found


def required_files(script: str) -> set[str]:
    """Repo-relative files a stage's result depends on: its script and the import closure."""
    closure = import_closure(entry_modules(REPO / script))
    return {script} | {path.relative_to(REPO).as_posix() for path in closure}


def uncovered(required: Iterable[str], deps: Iterable[str]) -> list[str]:
    """The required files no dep covers (a file dep covers itself, a folder everything under it)."""
    prefixes = [dep.rstrip("/") for dep in deps]
    return sorted(f for f in required
                  if not any(f == p or f.startswith(f"{p}/") for p in prefixes))


STAGES = script_stages()


def test_script_stages_are_found() -> None:
    assert {"train", "evaluate", "build"} <= STAGES.keys()


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_stage_deps_cover_its_imports(stage: str) -> None:
    script, deps = STAGES[stage]
    assert entry_modules(REPO / script), f"{script}: found nothing it runs from {PACKAGE}"
    missing = uncovered(required_files(script), deps)
    assert not missing, (
        f"stage {stage!r} imports modules that are not among its deps: {', '.join(missing)}; "
        "add them to the stage's deps in dvc.yaml")


def test_a_missing_dep_is_reported() -> None:
    # leakpipe/train/stage.py is reached only through an import inside commands/train.py's
    # run(), so this also shows that function-level imports are followed.
    script, deps = STAGES["train"]
    required = required_files(script)
    assert "leakpipe/train/stage.py" in required
    assert uncovered(required, deps) == []
    without = [dep for dep in deps if dep != "leakpipe/train/stage.py"]
    assert "leakpipe/train/stage.py" in uncovered(required, without)


def test_only_quality_figures_are_dvc_metrics() -> None:
    # `dvc metrics show` / `dvc exp show` print every key of every metrics file as a column;
    # reports (paths, hashes, per-check results) declared as metrics made both unreadable.
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    declared = [next(iter(entry)) if isinstance(entry, dict) else entry
                for stage in stages.values() for entry in stage.get("metrics", [])]
    assert declared and all(path.startswith("metrics/") for path in declared), declared


def test_curves_are_drawn_point_by_point() -> None:
    # DVC's default `linear` template smooths (loess) and joins points that share an x value:
    # a ROC curve with AUC 1.0 was drawn as a line from (0, 0.52) to (1, 1). Curves whose x is
    # not a step (ROC, PR, F1 over the threshold) must use `simple`, which draws every point.
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    curves = {path: props for entry in stages["evaluate"]["plots"] if isinstance(entry, dict)
              for path, props in entry.items() if props.get("template") != "confusion"}
    assert set(curves) == {"plots/eval/roc.json", "plots/eval/pr.json",
                           "plots/eval/threshold.json", "plots/eval/reliability.csv"}
    assert {path: props.get("template") for path, props in curves.items()} == dict.fromkeys(
        curves, "simple")


def test_tune_depends_on_every_train_key_its_trials_use() -> None:
    # Trials take epochs and compile from `tune`; every other `train` key changes what a trial
    # measures, so tune lists exactly those (a new train key must be added to dvc.yaml).
    import dataclasses

    from leakpipe.config import TrainConfig
    from leakpipe.tune.names import TRIAL_OVERRIDES

    params = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]["tune"]["params"]
    listed = {p.removeprefix("train.") for p in params if p.startswith("train.")}
    used = {f.name for f in dataclasses.fields(TrainConfig)} - set(TRIAL_OVERRIDES)
    assert "train" not in params and listed == used, sorted(listed ^ used)

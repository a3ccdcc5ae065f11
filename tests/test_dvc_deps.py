"""Every module a DVC stage imports is part of that stage's declared code.

DVC re-runs a stage only when one of its listed `deps` changes. A module the stage imports
but that no dep covers can change while `dvc repro` still calls the stage up to date, although
running it again would give a different result. Each stage's code is one dep, its digest file
``digests/<stage>.txt`` (written by stage `check` with tools/code_digests.py): the sha256 of
the stage's script and of every package module it imports. These tests check that the digest
files list exactly each stage's import closure and that dvc.yaml declares them as
``make deps`` writes it. The imports are read statically (AST only, nothing is imported, no
torch), so this stays a fast unit test.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


def _load_tool() -> ModuleType:
    """tools/code_digests.py (tools/ is no package: loaded by path, once)."""
    name = "leakpipe_stage_code_digests"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "tools" / "code_digests.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


tool = _load_tool()
PACKAGE = tool.PACKAGE
FIX = "run `make deps` (tools/code_digests.py write, then dvc repro check)"


# REPO is read at call time: tests/test_layers.py points it at a copy of the package.
def module_file(name: str) -> Path | None:
    return tool.module_file(name, REPO)


def imported_names(path: Path) -> set[str]:
    return tool.imported_names(path, REPO)


def required_files(script: str) -> set[str]:
    """Repo-relative files a stage's result depends on: its script and the import closure."""
    return tool.required_files(script, REPO)


def script_stages() -> dict[str, tuple[str, list[str]]]:
    """Stages whose cmd runs `python stages/<name>.py`: stage -> (script, deps)."""
    text = (REPO / "dvc.yaml").read_text()
    stages = yaml.safe_load(text)["stages"]
    return {name: (script, [d for d in stages[name].get("deps", []) if isinstance(d, str)])
            for name, script in tool.stage_scripts(text).items()}


def uncovered(required: Iterable[str], deps: Iterable[str]) -> list[str]:
    """The required files no dep covers (a file dep covers itself, a folder everything under it)."""
    prefixes = [dep.rstrip("/") for dep in deps]
    return sorted(f for f in required
                  if not any(f == p or f.startswith(f"{p}/") for p in prefixes))


def disagreement(required: set[str], listed: set[str]) -> list[str]:
    """What a digest file lacks (`+path`) and lists in vain (`-path`)."""
    return ([f"+{p}" for p in sorted(required - listed)]
            + [f"-{p}" for p in sorted(listed - required)])


STAGES = script_stages()
WRITER = tool.writer_stage((REPO / "dvc.yaml").read_text())


def test_script_stages_are_found() -> None:
    assert {"train", "evaluate", "build", "check"} <= STAGES.keys()
    assert WRITER == "check"             # it runs first: every other stage depends on it


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_stage_code_is_declared(stage: str) -> None:
    script, deps = STAGES[stage]
    assert tool.entry_modules(REPO / script, REPO), f"{script}: runs nothing from {PACKAGE}"
    required = required_files(script)
    if stage == WRITER:                  # the writer depends on the whole package itself
        assert not uncovered(required, deps), uncovered(required, deps)
        return
    digest = tool.digest_path(script)
    assert digest in deps and not [d for d in deps if d.startswith(f"{PACKAGE}/")], (
        f"stage {stage!r}: its code dep is {digest} and no module files; {FIX}")
    path = REPO / digest
    listed = tool.listed_files(path.read_text()) if path.is_file() else set()
    wrong = disagreement(required, listed)
    assert not wrong, f"stage {stage!r}: {digest} disagrees with its imports {wrong}; {FIX}"


def test_dvc_yaml_is_as_make_deps_writes_it() -> None:
    text = (REPO / "dvc.yaml").read_text()
    new = tool.render(text)
    diff = [f"{a!r} -> {b!r}" for a, b in zip(text.splitlines(), new.splitlines(), strict=False)
            if a != b]
    assert new == text, f"dvc.yaml's code declarations are stale ({diff[:3]}); {FIX}"


def test_a_missing_module_is_reported() -> None:
    # leakpipe/train/stage.py is reached only through an import inside commands/train.py's
    # run(), so this also shows that function-level imports are followed.
    script, _ = STAGES["train"]
    required = required_files(script)
    assert "leakpipe/train/stage.py" in required
    text = tool.digest_text(script, REPO)
    assert disagreement(required, tool.listed_files(text)) == []
    without = "".join(line for line in text.splitlines(keepends=True)
                      if not line.endswith("  leakpipe/train/stage.py\n"))
    assert disagreement(required, tool.listed_files(without)) == ["+leakpipe/train/stage.py"]


def test_a_module_change_changes_exactly_its_importers_digests(tmp_path: Path) -> None:
    """A copy of the package and scripts: one module edited, the digest files of the stages
    that import it change, every other file keeps its bytes (five stages, for speed)."""
    for folder in (PACKAGE, "stages"):
        shutil.copytree(REPO / folder, tmp_path / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))
    scripts = [STAGES[stage][0] for stage in ("build", "train", "evaluate", "baselines", "tune")]
    before = {p.name: p.read_bytes() for p in tool.write_digests(tmp_path / "d", scripts, tmp_path)}
    module = "leakpipe/evaluate/figures.py"
    with (tmp_path / module).open("a") as handle:
        handle.write("\n# edited\n")
    after = {p.name: p.read_bytes() for p in tool.write_digests(tmp_path / "d", scripts, tmp_path)}
    importers = {Path(tool.digest_path(s)).name for s in scripts
                 if module in tool.required_files(s, tmp_path)}
    assert {"evaluate.txt", "baselines.txt"} <= importers and "train.txt" not in importers
    assert {name for name in before if before[name] != after[name]} == importers
    assert sorted(after) == sorted(before) and len(after) == len(scripts)


def test_rewrite_declares_each_stages_digest_and_names_it_in_check(tmp_path: Path) -> None:
    old = ("stages:\n"
           "  check:\n    cmd:\n      - python stages/check.py\n"
           "      - python tools/code_digests.py digests --out digests synth\n"
           "    deps: [leakpipe, stages, tools]\n    outs:\n      - digests: {cache: false}\n\n"
           "  train:   # a stage as dvc.yaml listed them before\n"
           "    cmd: python stages/train.py --model m.pt\n    deps:\n      - stages/train.py\n"
           "      - leakpipe/__init__.py\n      - leakpipe/train/fit.py\n"
           "      - data/train.h5   # kept\n    params: [train]\n    outs:\n      - m.pt\n\n"
           "plots:\n  - m.csv\n")
    new = tool.render(old)
    assert tool.render(new) == new
    assert "      - python stages/check.py\n      - >-\n        python tools/code_digests.py " \
           "digests --out digests train\n    deps: [leakpipe, stages, tools]\n" in new
    assert "      - stages/train.py\n      - digests/train.txt\n      - data/train.h5   # kept\n" \
           "    params: [train]\n" in new
    assert PACKAGE + "/" not in new and new.endswith("plots:\n  - m.csv\n")
    assert yaml.safe_load(new)["stages"]["train"]["deps"] == [
        "stages/train.py", "digests/train.txt", "data/train.h5"]
    broken = old.replace("deps: [leakpipe, stages, tools]", "deps: [stages, tools]")
    with pytest.raises(tool.DepsError, match="'check' must list leakpipe as deps"):
        tool.render(broken)


def test_an_unknown_script_writes_nothing(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "digests"
    out.mkdir()
    (out / "train.txt").write_text("previous\n")
    assert tool.main(["digests", "--out", str(out), "train", "nosuch"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "tools/code_digests.py: stages/nosuch.py: no such stage script"
    assert [p.name for p in out.iterdir()] == ["train.txt"]
    assert (out / "train.txt").read_text() == "previous\n"
    assert [p.name for p in tmp_path.iterdir()] == ["digests"]       # no staging folder left


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

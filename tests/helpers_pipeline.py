"""One `dvc repro` of this project, shrunk to a tiny synthetic set, shared by every module that
reads a reproduced pipeline (tests/test_pipeline.py, tests/test_pipeline_grid.py).

The repro is minutes of stage start-ups (each stage a Python process importing torch and
MLflow), so it runs once per `pytest` session, not once per module: the first test process
to ask builds it under a file lock in the session's shared temporary root (pytest-xdist's
workers share it), the others wait for that lock and then find it built. Each module works on
its own copy (``copy_of_reproduced``): the tests edit params, touch modules and queue
experiments, and a module on the other worker must never see those edits half-way.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock

from tests.conftest import REPO

BIN = Path(sys.executable).parent
DVC_CONFIG = "[core]\n    analytics = false\n"   # no usage reports from a test's repository
# The smallest data set that still has every class in every split.
TINY = {
    "synth": {"n_sites": 5, "recordings_per_class": 1, "duration_s": 4.0},
    "field": {"n_sites": 2, "recordings_per_class": 1, "duration_s": 4.0},
    "build": {"workers": 1},
    "validate": {"min_recordings_per_class": 1},  # one site per split holds one of each
    "train": {"epochs": 1, "batch_size": 256},
    "evaluate": {"bootstrap_resamples": 20},
    "tune": {"n_trials": 2, "epochs": 1},
    "adapt": {"rounds": 1, "epochs": 1},
    "cv": {"folds": 2, "epochs": 1, "bootstrap_resamples": 20, "methods": "[cnn, level_logreg]"},
}
# Committed files outside stages/ and leakpipe/ that dvc.yaml lists as deps (the model card
# quotes the sim-to-real report).
FILE_DEPS = ("benchmarks/results/sim_to_real_zero_shot.json",)


def project_env(cwd: Path) -> dict[str, str]:
    """The environment of commands in the project ``cwd``: the venv first on PATH and no DVC /
    MLflow variables of the outer run, but DVC's analytics off (``dvc init`` reports too).

    The project's own copy of the package comes first on the import path: the venv's editable
    install points at the checkout, whose files a test here may not touch.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DVC_", "MLFLOW_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(cwd)
    env["DVC_NO_ANALYTICS"] = "1"
    return env


def run_any(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``cmd`` in the project ``cwd`` (``project_env``), its output captured."""
    return subprocess.run(cmd, cwd=cwd, env=project_env(cwd), capture_output=True, text=True,
                          check=False)


def run(cmd: list[str], cwd: Path) -> str:
    out = run_any(cmd, cwd)
    assert out.returncode == 0, f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout + out.stderr


def git(cwd: Path, *args: str) -> str:
    return run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd)


def shrink(params: Path, overrides: dict) -> None:
    # Edit values in place, line by line, so params.yaml keeps its comments.
    lines = params.read_text().splitlines()
    section = None
    for i, line in enumerate(lines):
        if line and not line.startswith((" ", "#")):
            section = line.split(":")[0]
            continue
        key = line.strip().split(":")[0]
        if section in overrides and key in overrides[section] and line.startswith("  " + key):
            comment = line[line.index("#"):] if "#" in line else ""
            lines[i] = f"  {key}: {overrides[section][key]}  {comment}"
    params.write_text("\n".join(lines) + "\n")


def new_project(root: Path) -> Path:
    """This repository's pipeline (dvc.yaml, params shrunk to ``TINY``, stages, package) in a
    new git + DVC repository ``root``, committed."""
    root.mkdir(parents=True)
    for name in ("dvc.yaml", "params.yaml", ".dvcignore", ".gitignore"):
        shutil.copy(REPO / name, root / name)
    for folder in ("stages", "tools", "leakpipe"):
        shutil.copytree(REPO / folder, root / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))
    for name in FILE_DEPS:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, root / name)
    shrink(root / "params.yaml", TINY)
    git(root, "init", "-q")
    run([str(BIN / "dvc"), "init", "-q"], root)
    (root / ".dvc" / "config").write_text(DVC_CONFIG)     # as the project's own .dvc/config
    git(root, "add", "-A")
    git(root, "commit", "-qm", "init")
    return root


def _reproduced(factory: pytest.TempPathFactory) -> Path:
    """The session's reproduced project (built by the first process that asks), committed."""
    shared = factory.getbasetemp()            # this session's; an xdist worker's is one of
    if os.environ.get("PYTEST_XDIST_WORKER"):     # the session's, each worker's own folder
        shared = shared.parent
    root, done = shared / "reproduced", shared / "reproduced.log"
    failed = shared / "reproduced.failed"     # the other process gets the error, not a rerun
    with FileLock(str(shared / "reproduced.lock")):
        if failed.is_file():
            pytest.fail(failed.read_text(), pytrace=False)
        if not done.is_file():                # written last: the repro finished
            try:
                new_project(root)
                out = run([str(BIN / "dvc"), "repro"], root)
                git(root, "add", "-A")
                git(root, "commit", "-qm", "repro")
            except AssertionError as error:
                failed.write_text(str(error))
                raise
            done.write_text(out)
    return root


def copy_of_reproduced(factory: pytest.TempPathFactory, name: str) -> tuple[Path, str]:
    """A copy of the session's reproduced project (git history, DVC cache, outputs, MLflow
    store) for one module, and the repro's output."""
    source = _reproduced(factory)
    root = factory.mktemp(name) / "project"
    shutil.copytree(source, root, symlinks=True)
    return root, source.with_name("reproduced.log").read_text()

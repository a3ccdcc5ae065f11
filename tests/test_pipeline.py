"""The real pipeline: `dvc repro` and `dvc exp run` in a temporary git repository.

Uses the repo's own dvc.yaml, stages and params (shrunk to a tiny synthetic set), real DVC,
real HDF5 files and a real MLflow SQLite store under the temporary repo's mlruns/.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from tests.conftest import REPO
from tests.test_dvc_deps import STAGES, required_files

pytestmark = pytest.mark.slow
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


def _run_any(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``cmd`` in the project ``cwd`` (``project_env``), its output captured."""
    return subprocess.run(cmd, cwd=cwd, env=project_env(cwd), capture_output=True, text=True,
                          check=False)


def _run(cmd: list[str], cwd: Path) -> str:
    out = _run_any(cmd, cwd)
    assert out.returncode == 0, f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout + out.stderr


def _git(cwd: Path, *args: str) -> str:
    return _run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd)


def _shrink(params: Path, overrides: dict) -> None:
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


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pipeline")
    for name in ("dvc.yaml", "params.yaml", ".dvcignore", ".gitignore"):
        shutil.copy(REPO / name, root / name)
    for folder in ("stages", "leakpipe"):
        shutil.copytree(REPO / folder, root / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))
    for name in FILE_DEPS:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, root / name)
    _shrink(root / "params.yaml", TINY)
    _git(root, "init", "-q")
    _run([str(BIN / "dvc"), "init", "-q"], root)
    (root / ".dvc" / "config").write_text(DVC_CONFIG)     # as the project's own .dvc/config
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "init")
    return root


@pytest.fixture(scope="module")
def reproduced(project: Path) -> tuple[Path, str]:
    out = _run([str(BIN / "dvc"), "repro"], project)
    _git(project, "add", "-A")
    _git(project, "commit", "-qm", "repro")
    return project, out


def test_repro_builds_every_output(reproduced: tuple[Path, str]) -> None:
    project, _ = reproduced
    assert (project / "data" / "raw" / "manifest.csv").is_file()
    for split in ("train", "val", "test"):
        assert (project / "data" / "processed" / f"{split}.h5").is_file()
    report = json.loads((project / "reports" / "build.json").read_text())
    assert report["n_unusable"] == 0 and report["n_recordings"] > 0
    lock = yaml.safe_load((project / "dvc.lock").read_text())
    assert set(lock["stages"]) == {"check", "synth", "field", "index", "build", "validate",
                                   "preload", "train", "evaluate", "baselines", "tune", "adapt",
                                   "crossval", "ship"}
    for output in ("models/model.pt", "metrics/train.json", "metrics/eval.json",
                   "metrics/baselines.json", "plots/baselines/comparison.json",
                   "metrics/tune.json", "tuning/best_params.yaml", "reports/preload.json",
                   "reports/validation.json", "reports/predictions.csv", "reports/model_card.md",
                   "models/adapted_detector.pt", "metrics/adapt.json", "plots/adapt/rounds.csv",
                   "metrics/cv.json", "reports/cv_predictions.csv", "plots/cv/folds.png",
                   "reports/cv_predictions_recordings.csv", "models/shipped.pt",
                   "metrics/ship.json", "reports/shipped_model_card.md"):
        assert (project / output).is_file(), output
    cv = json.loads((project / "metrics" / "cv.json").read_text())
    ship = json.loads((project / "metrics" / "ship.json").read_text())
    assert ship["kind"] == cv["selected"] and ship["method"] == "auto"   # what cv picked


def test_second_repro_does_nothing(reproduced: tuple[Path, str]) -> None:
    project, _ = reproduced
    out = _run([str(BIN / "dvc"), "repro"], project)
    # only `index` (always_changed) runs: it re-hashes the recordings and finds them unchanged
    assert "Running stage" not in out.replace("Running stage 'index'", "")
    assert "Stage 'build' didn't change, skipping" in out


def test_a_remote_round_trip_of_this_projects_pipeline(reproduced: tuple[Path, str],
                                                       tmp_path: Path) -> None:
    """docs/scale-out.md "The data" on the real dvc.yaml: push every output to a remote, clone
    the repository elsewhere, pull: every cached output arrives byte for byte, every output
    dvc.lock records is there, and `dvc status` names only the always-changed `index`. The
    resume folders (`checkpoints/*`) stay on the machine that ran the stages: git-ignored and
    no outputs, so a clone without them has nothing to re-run."""
    project, _ = reproduced
    assert (project / "checkpoints" / "train").is_dir()          # the run's working state
    remote = tmp_path / "remote"
    _run([str(BIN / "dvc"), "remote", "add", "-d", "shared", str(remote)], project)
    _git(project, "add", ".dvc/config")
    _git(project, "commit", "-qm", "remote")
    _run([str(BIN / "dvc"), "push"], project)
    clone = tmp_path / "clone"
    _git(tmp_path, "clone", "-q", str(project), str(clone))
    assert not (clone / "models" / "shipped.pt").exists()        # outputs are not in git
    _run([str(BIN / "dvc"), "pull"], clone)
    for output in ("models/shipped.pt", "models/model.pt", "data/processed/train.h5"):
        assert (clone / output).read_bytes() == (project / output).read_bytes(), output
    lock = yaml.safe_load((clone / "dvc.lock").read_text())["stages"]
    recorded = {out["path"] for stage in lock.values() for out in stage.get("outs", [])}
    assert "digests" in recorded and not [p for p in recorded if p.startswith("checkpoints")]
    assert not [p for p in recorded if not (clone / p).exists()]
    assert not (clone / "checkpoints").exists()
    status = _run([str(BIN / "dvc"), "status"], clone)
    stale = {line.split(":")[0].strip() for line in status.splitlines()
             if line and not line.startswith((" ", "\t"))}
    assert stale == {"index"} and "always changed" in status, status
    assert not [line for line in status.splitlines() if line.startswith("\t\t")], status


def test_bytecode_caches_do_not_make_stages_stale(reproduced: tuple[Path, str]) -> None:
    # Another interpreter (or numba) writing its caches into a package folder a stage depends
    # on must not change that stage's dependency hash.
    project, _ = reproduced
    cache = project / "leakpipe" / "validate" / "__pycache__"
    cache.mkdir(exist_ok=True)
    written = [cache / "other.cpython-399.pyc", cache / "summary.kernel-1.py399.nbi",
               cache / "summary.kernel-1.py399.1.nbc"]
    for path in written:
        path.write_bytes(b"\0" * 16)
    try:
        out = _run([str(BIN / "dvc"), "status"], project)
    finally:
        for path in written:
            path.unlink()
    assert "modified" not in out and "changed deps" not in out, out


def _stale(project: Path) -> set[str]:
    """Stages `dvc status` calls changed, `index` (always_changed) left out."""
    status = json.loads(_run([str(BIN / "dvc"), "status", "--json"], project) or "{}")
    return {name.split(":")[-1] for name in status} - {"index"}


@pytest.mark.parametrize(("module", "must", "must_not"), [
    ("leakpipe/evaluate/figures.py", {"evaluate", "baselines"}, {"train", "tune", "build"}),
    ("leakpipe/scoring/score.py", {"train", "evaluate", "tune"}, {"build", "synth"}),
    ("leakpipe/predict_scoring.py", {"evaluate"}, {"train", "tune", "build", "synth"}),  # serve's
])
def test_touching_a_module_makes_exactly_its_importers_stale(
        reproduced: tuple[Path, str], module: str, must: set[str], must_not: set[str]) -> None:
    """Each stage's code is its import closure (digests/<stage>.txt, written by `check`): a
    change to a module re-runs `check`, then the stages that import it (directly or not) and
    no other."""
    project, _ = reproduced
    importers = {stage for stage, (script, _) in STAGES.items()
                 if module in required_files(script)}
    assert must <= importers and not must_not & importers
    path = project / module
    original = path.read_text()
    path.write_text(original + "\n# touched\n")
    try:
        assert _stale(project) == {"check"}        # its deps: the whole package
        _run([str(BIN / "dvc"), "repro", "check"], project)    # the digests: seconds
        stale = _stale(project)
    finally:
        path.write_text(original)
        _git(project, "checkout", "--", "dvc.lock", "digests")   # check's run undone
    # a stale stage also makes the stages after it stale: compare the directly changed ones
    assert importers <= stale and not must_not & stale, (module, sorted(stale))
    assert _stale(project) == set()


def test_a_bad_param_stops_the_run_before_any_output_is_removed(
        reproduced: tuple[Path, str]) -> None:
    # DVC deletes a stage's outputs before running it; the `check` stage runs first and stops
    # the run on a bad value, so a typo in `train` costs the user nothing.
    project, _ = reproduced
    params = project / "params.yaml"
    original = params.read_text()
    kept = ["models/model.pt", "models/detector.pt", "metrics/train.json", "metrics/eval.json",
            "plots/train/history.csv", "reports/predictions.csv"]
    before = {name: (project / name).read_bytes() for name in kept}
    assert "\n  epochs: 1 " in original               # train comes before tune in params.yaml
    params.write_text(original.replace("\n  epochs: 1 ", "\n  epochs: -1 ", 1))
    try:
        out = _run_any([str(BIN / "dvc"), "repro"], project)
    finally:
        params.write_text(original)
    assert out.returncode != 0
    assert "train.epochs: must be >= 1" in out.stdout + out.stderr
    assert "Running stage 'train'" not in out.stdout
    for name in kept:
        assert (project / name).read_bytes() == before[name], name
    # with the value fixed, only `check` runs again (its stamp has the same bytes)
    again = _run([str(BIN / "dvc"), "repro"], project)
    ran = [line for line in again.splitlines() if line.startswith("Running stage")]
    assert set(ran) <= {"Running stage 'check':", "Running stage 'index':"}, ran


def test_adapt_is_stale_only_when_its_inputs_change(reproduced: tuple[Path, str]) -> None:
    """`adapt` depends on its params, the detector, the splits and the field set: after a
    repro nothing is stale (test_second_repro_does_nothing ran it); a new margin makes `adapt`
    stale and no stage upstream of it (`check` reads every section, its stamp is unchanged)."""
    project, _ = reproduced
    params = project / "params.yaml"
    original = params.read_text()
    assert "\n  margin: 0.05 " in original
    params.write_text(original.replace("\n  margin: 0.05 ", "\n  margin: 0.01 ", 1))
    try:
        assert _stale(project) == {"check", "adapt"}
    finally:
        params.write_text(original)
    assert _stale(project) == set()
    field = project / "data" / "field" / "check" / "manifest.csv"
    text = field.read_text()
    field.write_text(text + "\n")
    try:
        assert _stale(project) == {"field", "adapt"}     # a field-set change: adapt, nothing else
    finally:
        field.write_text(text)


def test_runs_land_in_the_project_store(reproduced: tuple[Path, str]) -> None:
    project, _ = reproduced
    client = MlflowClient(tracking_uri=f"sqlite:///{project / 'mlruns' / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    stages = {r.data.tags["leakpipe.stage"] for r in runs}
    assert {"synth", "build", "validate", "preload", "train", "evaluate", "baselines",
            "tune"} <= stages
    assert all(r.info.status == "FINISHED" for r in runs)
    build_run = next(r for r in runs if r.data.tags["leakpipe.stage"] == "build")
    assert build_run.data.params["build.n_mels"] == "64"
    assert "mlflow.source.git.commit" in build_run.data.tags


# Two cells, neither the default windows, so both re-build and take about as long: with
# `--jobs 2` they run at once. 512 and 1024: cells of 256-sample short windows hold 2-4x the
# segments and train that much slower; the queue, not the windows, is under test here (the
# grid's cell rules are tests/test_study_grid.py's).
GRID = ("--long", "0.5", "--short", "512,1024")
CELLS = {"grid-l500ms-s512", "grid-l500ms-s1024"}
CELL_STAGES = {"build", "validate", "preload", "train", "evaluate"}   # what a cell re-runs


def _study(root: Path, *args: str) -> str:
    return _run([sys.executable, "-m", "leakpipe.cli", "study", "grid", *GRID,
                 "--no-progress", *args], root)


def test_segmentation_grid_runs_queued_experiments_two_at_a_time(
        reproduced: tuple[Path, str]) -> None:
    """`leakpipe study grid` on a 1 x 2 grid: two `dvc exp run --queue` experiments with build
    params set (-S), run by `dvc queue start -j 2`; both finish, they ran at once, their
    runs are in the project's store nested under the study run, nothing is locked or mixed up,
    and a second study keeps every cell."""
    project, _ = reproduced
    dvc = str(BIN / "dvc")
    try:
        out = _study(project, "--jobs", "2")
    finally:
        _run_any([dvc, "queue", "stop", "--kill"], project)    # no worker outlives the test
    report = json.loads((project / "reports/grid/grid.json").read_text())
    # the study's own sample of `dvc queue status` (every 5 s, each call a DVC start-up: on a
    # busy machine a short overlap can fall between two samples); the run times below decide
    assert 1 <= report["peak_running"] <= 2, out
    with (project / "reports/grid/grid.csv").open(newline="") as handle:
        rows = {r["experiment"]: r for r in csv.DictReader(handle)}
    assert set(rows) == CELLS and all(r["status"] == "done" for r in rows.values()), rows
    assert all(0 <= float(r["test.file_f1"]) <= 1 for r in rows.values())
    assert (project / "reports/grid/heatmap.png").stat().st_size > 0
    assert "best test.file_f1" in out
    for name in CELLS:
        log = _run([dvc, "queue", "logs", name], project)
        assert "Stage 'evaluate'" in log or "Running stage 'evaluate'" in log, log
        assert "Running stage 'synth'" not in log and "database is locked" not in log, log
        assert "Running stage 'build'" in log, log
    shown = json.loads(_run([dvc, "exp", "show", "--json"], project))
    windows = {run["name"]: run["data"]["params"]["params.yaml"]["data"]["build"]
               for rev in shown for exp in rev.get("experiments") or []
               for run in exp.get("revs") or [] if run.get("name") in CELLS}
    assert windows["grid-l500ms-s1024"]["long_window_s"] == 0.5
    assert windows["grid-l500ms-s1024"]["short_window"] == windows["grid-l500ms-s1024"]["n_fft"]

    client = MlflowClient(tracking_uri=f"sqlite:///{project / 'mlruns' / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    (study,) = [r for r in runs if r.data.tags.get("leakpipe.stage") == "study"]
    assert study.data.metrics["best/test.file_f1"] == max(
        float(r["test.file_f1"]) for r in rows.values())
    for name in CELLS:
        mine = [r for r in runs if r.data.tags.get("dvc.exp_name") == name]
        assert mine and all(r.info.status == "FINISHED" for r in mine), name
        assert all(r.data.tags.get("mlflow.parentRunId") == study.info.run_id for r in mine)
        assert {r.data.tags["leakpipe.stage"] for r in mine} >= CELL_STAGES, name
    spans = [(min(r.info.start_time for r in runs if r.data.tags.get("dvc.exp_name") == name),
              max(r.info.end_time for r in runs if r.data.tags.get("dvc.exp_name") == name))
             for name in CELLS]
    assert min(end for _, end in spans) > max(start for start, _ in spans), spans  # at once

    again = _study(project, "--jobs", "2")          # the same commit: every cell is kept
    assert "2 cells kept from an earlier run" in again
    assert "Queued" not in _run([dvc, "queue", "status"], project)

"""The real pipeline: `dvc repro` and `dvc exp run` in a temporary git repository.

Uses the repo's own dvc.yaml, stages and params (shrunk to a tiny synthetic set), real DVC,
real HDF5 files and a real MLflow SQLite store under the temporary repo's mlruns/: one repro
per test session (tests/helpers_pipeline.py), copied for this module; the queued experiments
of `leakpipe study grid` run on another copy (tests/test_pipeline_grid.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from tests.helpers_pipeline import BIN, copy_of_reproduced, git, run, run_any, shrink
from tests.test_dvc_deps import STAGES, required_files

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reproduced(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """This module's copy of the session's reproduced project, and the repro's output."""
    return copy_of_reproduced(tmp_path_factory, "pipeline")


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
    # the shipped detector's own errors, a record per test recording, whatever its kind
    confusion = json.loads((project / "plots" / "ship" / "confusion.json").read_text())
    assert confusion and {(r["actual"], r["predicted"]) for r in confusion} <= {
        (a, p) for a in ("LEAK", "NOLEAK") for p in ("LEAK", "NOLEAK")}
    client = MlflowClient(f"sqlite:///{project / 'mlruns' / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()],
                              filter_string="tags.`leakpipe.stage` = 'ship'")
    assert runs, "no ship run"
    logged = {a.path for a in client.list_artifacts(runs[0].info.run_id, "ship")}
    assert "ship/confusion_test.png" in logged, logged


def test_second_repro_does_nothing(reproduced: tuple[Path, str]) -> None:
    project, _ = reproduced
    out = run([str(BIN / "dvc"), "repro"], project)
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
    run([str(BIN / "dvc"), "remote", "add", "-d", "shared", str(remote)], project)
    git(project, "add", ".dvc/config")
    git(project, "commit", "-qm", "remote")
    run([str(BIN / "dvc"), "push"], project)
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(project), str(clone))
    assert not (clone / "models" / "shipped.pt").exists()        # outputs are not in git
    run([str(BIN / "dvc"), "pull"], clone)
    for output in ("models/shipped.pt", "models/model.pt", "data/processed/train.h5"):
        assert (clone / output).read_bytes() == (project / output).read_bytes(), output
    lock = yaml.safe_load((clone / "dvc.lock").read_text())["stages"]
    recorded = {out["path"] for stage in lock.values() for out in stage.get("outs", [])}
    assert "digests" in recorded and not [p for p in recorded if p.startswith("checkpoints")]
    assert not [p for p in recorded if not (clone / p).exists()]
    assert not (clone / "checkpoints").exists()
    status = run([str(BIN / "dvc"), "status"], clone)
    stale = {line.split(":")[0].strip() for line in status.splitlines()
             if line and not line.startswith((" ", "\t"))}
    assert stale == {"index"} and "always changed" in status, status
    assert not [line for line in status.splitlines() if line.startswith("\t\t")], status


def test_a_users_recordings_added_to_dvc_travel_through_the_remote(
        tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
    """README "Your own recordings": recordings added with `dvc add` inside the repository as
    `build.source`, pushed with the rest: a fresh clone pulls them (byte for byte) and its
    `dvc repro build` runs nothing but the always-changed `index` (which re-hashes them and
    finds them unchanged). A copy of its own: the source changes here."""
    project, _ = copy_of_reproduced(tmp_path_factory, "own-recordings")
    dvc = str(BIN / "dvc")
    shutil.copytree(project / "data" / "raw", project / "recordings")   # "the user's own"
    run([dvc, "add", "recordings"], project)
    shrink(project / "params.yaml", {"build": {"source": "recordings"}})
    out = run([dvc, "repro", "build"], project)
    assert "Running stage 'build'" in out
    assert json.loads((project / "reports" / "build.json").read_text())["n_unusable"] == 0
    remote = tmp_path / "remote"
    run([dvc, "remote", "add", "-d", "shared", str(remote)], project)
    git(project, "add", "-A")
    git(project, "commit", "-qm", "own recordings")
    assert "recordings/" not in git(project, "ls-files")         # in DVC, not in git
    run([dvc, "push"], project)
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(project), str(clone))
    run([dvc, "pull"], clone)
    wavs = sorted(p.relative_to(project) for p in (project / "recordings").rglob("*.wav"))
    assert wavs and all((clone / w).read_bytes() == (project / w).read_bytes() for w in wavs)
    again = run([dvc, "repro", "build"], clone)
    assert "Running stage" not in again.replace("Running stage 'index'", ""), again


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
        out = run([str(BIN / "dvc"), "status"], project)
    finally:
        for path in written:
            path.unlink()
    assert "modified" not in out and "changed deps" not in out, out


def _stale(project: Path) -> set[str]:
    """Stages `dvc status` calls changed, `index` (always_changed) left out."""
    status = json.loads(run([str(BIN / "dvc"), "status", "--json"], project) or "{}")
    return {name.split(":")[-1] for name in status} - {"index"}


@pytest.mark.parametrize(("module", "must", "must_not"), [
    ("leakpipe/evaluate/figures.py", {"evaluate", "baselines"}, {"train", "tune", "build"}),
    ("leakpipe/scoring/score.py", {"train", "evaluate", "tune"}, {"build", "synth"}),
    ("leakpipe/predict/scoring.py", {"evaluate"}, {"train", "tune", "build", "synth"}),  # serve's
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
        run([str(BIN / "dvc"), "repro", "check"], project)    # the digests: seconds
        stale = _stale(project)
    finally:
        path.write_text(original)
        git(project, "checkout", "--", "dvc.lock", "digests")   # check's run undone
    # a stale stage also makes the stages after it stale: compare the directly changed ones
    assert importers <= stale and not must_not & stale, (module, sorted(stale))
    assert _stale(project) == set()


def test_a_bad_param_stops_the_run_before_any_output_is_removed(
        reproduced: tuple[Path, str]) -> None:
    # DVC deletes a stage's outputs before running it; the `check` stage runs first and stops
    # the run on a bad value, so a typo in `train` costs the user nothing: check's own outputs
    # (in git, every stage's dep) persist through its refusal too.
    project, _ = reproduced
    params = project / "params.yaml"
    original = params.read_text()
    kept = ["models/model.pt", "models/detector.pt", "metrics/train.json", "metrics/eval.json",
            "plots/train/history.csv", "reports/predictions.csv", "reports/params_checked.json",
            *sorted(p.relative_to(project).as_posix() for p in (project / "digests").iterdir())]
    assert len(kept) > 10
    before = {name: (project / name).read_bytes() for name in kept}
    assert "\n  epochs: 1 " in original               # train comes before tune in params.yaml
    params.write_text(original.replace("\n  epochs: 1 ", "\n  epochs: -1 ", 1))
    try:
        out = run_any([str(BIN / "dvc"), "repro"], project)
    finally:
        params.write_text(original)
    assert out.returncode != 0
    assert "train.epochs: must be >= 1" in out.stdout + out.stderr
    assert "Running stage 'train'" not in out.stdout
    for name in kept:
        assert (project / name).read_bytes() == before[name], name
    # with the value fixed, only `check` runs again (its stamp has the same bytes)
    again = run([str(BIN / "dvc"), "repro"], project)
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

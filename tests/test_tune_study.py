"""Studies in this process on a real journal file: budget, resume, pruning, failures, MLflow."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
import torch
import yaml
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from leakpipe.cli import main
from leakpipe.train import fit as fit_module
from leakpipe.train.losses import NonFiniteLossError
from leakpipe.tune import driver, objective
from leakpipe.tune.driver import run_study
from leakpipe.tune.names import ATTR_REASON, ATTR_RUN_ID, TAG_PRUNED_AT, TAG_STATE, TAG_TRIAL
from leakpipe.tune.study import TuneError, open_storage
from leakpipe.tune.workers import close_run
from tests.helpers_detector import copied_store
from tests.helpers_tune import TuneWorkspace, make_workspace, spec

BAD_AUX = 100.0   # an auxiliary BCE weight that makes val/loss ~50x worse: a bad region


@pytest.fixture(autouse=True)
def _torch_globals() -> Iterator[None]:
    """fit() switches deterministic algorithms on; restore them for the other test modules."""
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    yield
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(deterministic)


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """cli.main() points the root logger at this test's captured stderr; undo that after."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def ws(tmp_path: Path) -> TuneWorkspace:
    return make_workspace(tmp_path)


@pytest.fixture
def mlflow_uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A private, already migrated MLflow store; artifacts under tmp_path (DVC_ROOT)."""
    uri = copied_store(tmp_path / "mlruns")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    return uri


def _states(ws: TuneWorkspace) -> list[TrialState]:
    return [t.state for t in ws.study().get_trials()]


def _set_tune(ws: TuneWorkspace, **values) -> None:
    raw = yaml.safe_load(ws.params.read_text())
    raw["tune"].update(values)
    ws.params.write_text(yaml.safe_dump(raw, sort_keys=False))


def _runs(uri: str) -> list:
    client = MlflowClient(tracking_uri=uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(experiments)


def test_study_runs_to_budget_resumes_and_logs_one_parent_with_a_child_per_trial(
        ws: TuneWorkspace, mlflow_uri: str, capsys) -> None:
    assert main(["tune", *ws.stage_args()]) == 0
    assert "tune: study leakpipe-" in capsys.readouterr().out
    assert len(_states(ws)) == 3
    _set_tune(ws, n_trials=4)                               # a larger budget: one more trial
    summary = run_study(ws.params, ws.paths, progress=False)
    assert sum(summary.counts.values()) == 4 and len(_states(ws)) == 4
    run_study(ws.params, ws.paths, progress=False)          # budget met: nothing runs
    assert len(_states(ws)) == 4

    runs = _runs(mlflow_uri)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert parents[0].info.run_name.startswith("tune p")        # stage + params digest
    trials = ws.study().get_trials()
    assert {r.info.run_name for r in children} == {   # named once, kept on resume
        objective.trial_run_name(t.number, t.state) for t in trials}
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parents[0].info.run_id}
    assert sorted(int(r.data.tags[TAG_TRIAL]) for r in children) == [0, 1, 2, 3]
    states = {t.number: t.state.name for t in trials}
    assert {int(r.data.tags[TAG_TRIAL]): r.data.tags[TAG_STATE] for r in children} == states
    assert all("train.learning_rate" in r.data.params and "train/loss" in r.data.metrics
               for r in children)
    artifacts = MlflowClient(mlflow_uri).list_artifacts(parents[0].info.run_id, "tuning")
    assert {"best_params.yaml", "optimization_history.png"} <= {
        Path(a.path).name for a in artifacts}


def test_a_finished_study_is_resumed_under_the_same_code_only(
        ws: TuneWorkspace, monkeypatch: pytest.MonkeyPatch) -> None:
    """The package's source digest is part of the study's identity: after a code change the
    stage (``dvc repro`` re-runs it) starts a new study in the same journal instead of
    reporting the trials the old code finished; back under the old code, the old study
    resumes where it stopped. The digest is set, not the package edited (other tests read it)."""
    monkeypatch.setattr(driver, "package_digest", lambda: "a" * 64)
    old = run_study(ws.params, ws.paths, progress=False, tracked=False)
    assert sum(old.counts.values()) == 3
    started = {t.number: t.datetime_start for t in ws.study().get_trials()}

    monkeypatch.setattr(driver, "package_digest", lambda: "b" * 64)    # other code
    new = run_study(ws.params, ws.paths, progress=False, tracked=False)
    assert new.study_name != old.study_name
    assert sum(new.counts.values()) == 3                     # its own three trials, run afresh
    setup = driver.load_setup(ws.params, ws.paths)
    storage = open_storage(setup.spec, setup.tune)
    assert set(optuna.get_all_study_names(storage)) == {old.study_name, new.study_name}
    assert ws.study().study_name == new.study_name

    monkeypatch.setattr(driver, "package_digest", lambda: "a" * 64)    # the old code again
    _set_tune(ws, n_trials=4)
    again = run_study(ws.params, ws.paths, progress=False, tracked=False)
    assert again.study_name == old.study_name and sum(again.counts.values()) == 4
    trials = ws.study().get_trials()
    assert {t.number: t.datetime_start for t in trials if t.number < 3} == started  # kept
    assert len(trials) == 4                                  # one trial ran: the budget's 4th


def test_outputs_hold_the_best_trial_and_the_counts(ws: TuneWorkspace) -> None:
    summary = run_study(ws.params, ws.paths, progress=False, tracked=False)
    best = yaml.safe_load(ws.paths.best.read_text())
    trials = ws.study().get_trials()
    top = max((t for t in trials if t.state == TrialState.COMPLETE), key=lambda t: t.value)
    assert best["trial"] == top.number == summary.best_trial
    assert best["value"] == pytest.approx(top.value)
    assert best["params"]["train"]["learning_rate"] == top.user_attrs["values"][
        "train.learning_rate"]
    metrics = json.loads(ws.paths.metrics.read_text())
    assert metrics["tune/trials_complete"] == 3 and metrics["tune/trials_total"] == 3
    assert metrics["tune/best_value"] == pytest.approx(top.value)


def test_default_pruner_prunes_a_bad_region(tmp_path: Path) -> None:
    space = {"model": {}, "train": {"leak_aux_weight": spec("categorical",
                                                            choices=[0.0, BAD_AUX])}}
    ws = make_workspace(tmp_path, space=space, tune={"objective": "val/loss", "epochs": 2,
                                                     "n_trials": 4})
    study = ws.study()
    for aux in (0.0, 0.0, BAD_AUX, BAD_AUX):    # two good trials first: the pruner's startup
        study.enqueue_trial({"train.leak_aux_weight": aux})
    run_study(ws.params, ws.paths, progress=False, tracked=False)
    trials = ws.study().get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2 + [TrialState.PRUNED] * 2
    assert all(set(t.intermediate_values) == {0} for t in trials[2:])   # after epoch 1 of 2
    assert "pruned after epoch 1" in trials[2].user_attrs[ATTR_REASON]


def _failing_fit(errors: list[BaseException]):
    """fit() that raises the next error of ``errors`` per call, then trains for real."""
    real = fit_module.fit

    def fit(*args, **kwargs):
        if errors:
            raise errors.pop(0)
        return real(*args, **kwargs)
    return fit


def test_failing_trials_are_recorded_and_the_study_goes_on(ws, monkeypatch) -> None:
    errors = [torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"),
              NonFiniteLossError("non-finite loss at step 3: total nan")]
    monkeypatch.setattr(objective, "fit", _failing_fit(errors))
    _set_tune(ws, nan_loss="fail")
    summary = run_study(ws.params, ws.paths, progress=False, tracked=False)
    trials = ws.study().get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.FAIL, TrialState.COMPLETE]
    assert trials[0].user_attrs[ATTR_REASON].startswith("OutOfMemoryError: CUDA out of memory")
    assert trials[1].user_attrs[ATTR_REASON].startswith("NonFiniteLossError: non-finite loss")
    assert summary.best_trial == 2


def test_a_nan_loss_prunes_the_trial_by_default(ws, monkeypatch) -> None:
    monkeypatch.setattr(objective, "fit", _failing_fit([NonFiniteLossError("loss nan")]))
    run_study(ws.params, ws.paths, progress=False, tracked=False)
    trials = ws.study().get_trials()
    assert trials[0].state == TrialState.PRUNED
    assert trials[0].user_attrs[ATTR_REASON] == "non-finite loss: loss nan"


def test_an_unexpected_error_is_recorded_then_stops_the_worker(ws, monkeypatch) -> None:
    monkeypatch.setattr(objective, "fit", _failing_fit([KeyError("surprise")]))
    with pytest.raises(KeyError, match="surprise"):
        run_study(ws.params, ws.paths, progress=False, tracked=False)
    trials = ws.study().get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL]
    assert trials[0].user_attrs[ATTR_REASON] == "KeyError: 'surprise'"
    run_study(ws.params, ws.paths, progress=False, tracked=False)       # resumes the budget
    assert _states(ws) == [TrialState.FAIL, TrialState.COMPLETE, TrialState.COMPLETE]


def test_a_study_without_a_complete_trial_fails_the_stage(ws, monkeypatch, capsys) -> None:
    monkeypatch.setattr(objective, "fit", _failing_fit([RuntimeError("boom")] * 3))
    with pytest.raises(TuneError, match=r"no trial completed \(trials: 3 FAIL\); first "
                                        r"failure: trial 0: RuntimeError: boom"):
        run_study(ws.params, ws.paths, progress=False, tracked=False)
    assert not ws.paths.best.exists() and not ws.paths.metrics.exists()


def test_pruned_and_failed_trials_say_so_in_mlflow(tmp_path: Path, mlflow_uri: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A pruned trial's run: KILLED, named so, its step tagged and described; a failed one's:
    FAILED with the error's line; the parent run began before the study was opened."""
    space = {"model": {}, "train": {"leak_aux_weight": spec("categorical",
                                                            choices=[0.0, BAD_AUX])}}
    ws = make_workspace(tmp_path / "ws", space=space,
                        tune={"objective": "val/loss", "n_trials": 4, "epochs": 2})
    study = ws.study()
    for aux in (0.0, 0.0, 0.0, BAD_AUX):        # the first fails; two good ones; a bad one
        study.enqueue_trial({"train.leak_aux_weight": aux})
    monkeypatch.setattr(objective, "fit", _failing_fit([RuntimeError("boom\nmore")]))
    opened: list[float] = []                   # when the stage opened the study
    real_open = driver.open_study

    def open_study(*args, **kwargs):
        opened.append(time.time())
        return real_open(*args, **kwargs)
    monkeypatch.setattr(driver, "open_study", open_study)
    run_study(ws.params, ws.paths, progress=False)
    runs = {r.info.run_name: r for r in _runs(mlflow_uri)}
    pruned, failed = runs["trial-003 (pruned)"], runs["trial-000 (failed)"]
    assert pruned.info.status == "KILLED" and pruned.data.tags[TAG_STATE] == "PRUNED"
    assert pruned.data.tags[TAG_PRUNED_AT] == "0"
    assert pruned.data.tags["mlflow.note.content"].split("\n\n")[-1].startswith(
        "Pruned at step 0: pruned after epoch 1: val/loss = ")
    assert failed.info.status == "FAILED" and failed.data.tags[TAG_STATE] == "FAIL"
    assert failed.data.tags["leakpipe.error"] == "RuntimeError: boom"
    assert failed.data.tags["mlflow.note.content"].endswith("\n\nFAILED: RuntimeError: boom")
    assert {runs[f"trial-00{n}"].info.status for n in (1, 2)} == {"FINISHED"}
    (parent,) = [r for r in runs.values() if "mlflow.parentRunId" not in r.data.tags]
    assert parent.info.start_time <= round(opened[0] * 1000) + 1


def test_same_seed_same_study(tmp_path: Path) -> None:
    """CPU trials are deterministic and TPE is seeded from params: a re-run is identical."""
    found = []
    for name in ("a", "b"):
        ws = make_workspace(tmp_path / name)
        run_study(ws.params, ws.paths, progress=False, tracked=False)
        best = yaml.safe_load(ws.paths.best.read_text())
        found.append({k: v for k, v in best.items() if k != "study"})  # names hash the files
    assert found[0] == found[1]
    assert found[0]["params"]["train"]["learning_rate"] > 0


@pytest.mark.parametrize("pruner", ["hyperband", "none"])
def test_other_pruners_run_the_budget(tmp_path: Path, pruner: str) -> None:
    ws = make_workspace(tmp_path, tune={"pruner": pruner, "epochs": 2})
    summary = run_study(ws.params, ws.paths, progress=False, tracked=False)
    assert sum(summary.counts.values()) == 3
    if pruner == "none":
        assert summary.counts == {"COMPLETE": 3}


def test_a_timeout_only_budget_stops_starting_trials(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, tune={"n_trials": 0, "timeout_s": 0.5})
    started = time.monotonic()
    summary = run_study(ws.params, ws.paths, progress=False, tracked=False)
    assert summary.counts.get("COMPLETE", 0) >= 1
    assert time.monotonic() - started < 30


class _AlwaysPrune:
    """A trial whose pruner always says prune."""

    def __init__(self) -> None:
        self.reported: list[tuple[int, float]] = []

    def report(self, value: float, step: int) -> None:
        self.reported.append((step, value))

    def should_prune(self) -> bool:
        return True


def test_reporter_never_prunes_after_the_last_epoch() -> None:
    trial = _AlwaysPrune()
    reporter = objective.EpochReporter(trial, "val/loss", "minimize", epochs=2)
    with pytest.raises(optuna.TrialPruned, match="pruned after epoch 1: val/loss = 1.0000"):
        reporter(0, {"val/loss": 1.0})
    reporter(1, {"val/loss": float("nan")})             # last epoch: no pruning; NaN unreported
    assert trial.reported == [(0, 1.0)]
    assert reporter.best() == 1.0


def test_an_interrupted_trial_is_queued_again(ws, monkeypatch) -> None:
    monkeypatch.setattr(objective, "fit", _failing_fit([KeyboardInterrupt()]))
    with pytest.raises(KeyboardInterrupt):
        run_study(ws.params, ws.paths, progress=False, tracked=False)
    assert _states(ws) == [TrialState.FAIL, TrialState.WAITING]
    run_study(ws.params, ws.paths, progress=False, tracked=False)
    trials = ws.study().get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL] + [TrialState.COMPLETE] * 3
    assert trials[1].system_attrs["failed_trial"] == 0 and trials[1].params == trials[0].params


def test_a_dead_workers_child_run_is_closed_as_killed(mlflow_uri: str) -> None:
    client = MlflowClient(mlflow_uri)
    run = client.create_run(client.create_experiment("orphans"))    # left RUNNING by a worker
    trial = optuna.trial.create_trial(state=TrialState.FAIL,
                                      user_attrs={ATTR_RUN_ID: run.info.run_id})
    close_run(trial)
    assert client.get_run(run.info.run_id).info.status == "KILLED"

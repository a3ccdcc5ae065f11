"""Stopping and crashing: SIGINT / SIGTERM checkpoint mid-epoch and exit 130 / 143 with the
MLflow run KILLED; after a signal, re-running the stage ends exactly like a run that was never
interrupted (deterministic CPU mode, one thread). SIGKILL at seeded points, inside checkpoint
writes too, is tests/test_faults.py's."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import itertools
import logging
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from leakpipe.config import load_section
from leakpipe.detector import load_network
from leakpipe.files import save_torch_atomic
from leakpipe.preload.plan import read_plan
from leakpipe.runtime import cpu_runtime
from leakpipe.tracking import NullTracker
from leakpipe.train import checkpoint as ck
from leakpipe.train.fit import FitOptions, FitResult, fit
from leakpipe.train.inputs import prepare_training
from leakpipe.train.interrupt import StopRequested
from tests.conftest import REPO
from tests.helpers_shared import built_once
from tests.test_checkpoint import OWN_TEMPORARIES, USER_FILES, _litter
from tests.test_train_stage import (
    Workspace,
    comparable,
    fresh_mlflow_uri,
    make_workspace,
    mlflow_runs,
    read_metrics,
    stage_args,
)

STAGE = REPO / "stages" / "train.py"
FILES_PER_CLASS = 12        # 60 files x 49 segments: 184 steps of 16 per epoch
SIGNAL_TRAIN = {"batch_size": 16, "epochs": 2, "warmup_epochs": 0.2}
QUIET_MONITOR = {"enabled": False, "mlflow_system_metrics": False}   # tested in test_train_stage
STEP_LINE = "epoch 1 step 5:"   # the loop's log line once epoch index 1 took 5 steps
WAIT_S = 120


def _env(uri: str, root: Path | None = None) -> dict[str, str]:
    """The stage's environment: the test's MLflow store and, with ``root``, its artifacts under
    ``root`` (the stage runs from the repo, whose own mlruns/ it must not touch)."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "OMP_NUM_THREADS": "1",
           "PYTHONUNBUFFERED": "1"}
    return env if root is None else {**env, "DVC_ROOT": str(root)}


def _spawn(ws: Workspace, uri: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(STAGE), *stage_args(ws)], cwd=REPO,
                            env=_env(uri, ws.root), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def _finish(ws: Workspace, uri: str) -> None:
    done = subprocess.run([sys.executable, str(STAGE), *stage_args(ws)], cwd=REPO,
                          env=_env(uri, ws.root), capture_output=True, text=True, timeout=WAIT_S)
    assert done.returncode == 0, done.stderr[-3000:]


def _with_params(ws: Workspace, name: str, **train: object) -> Workspace:
    params = yaml.safe_load(ws.params.read_text())
    params["train"].update(train)
    path = ws.root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return dataclasses.replace(ws, params=path, out=ws.root / name)


@dataclass(frozen=True)
class Reference:
    ws: Workspace
    uri: str


def _reference_run(root: Path) -> dict[str, Any]:
    """Workspace, store and one uninterrupted run in ``root``; their paths as JSON."""
    ws = make_workspace(root, files_per_class=FILES_PER_CLASS, train=SIGNAL_TRAIN,
                        monitor=QUIET_MONITOR)
    uri = fresh_mlflow_uri(root)
    _finish(ws, uri)
    fields = {k: str(v) for k, v in dataclasses.asdict(ws).items() if k != "data"}
    return {"ws": {**fields, "data": {s: str(p) for s, p in ws.data.items()}}, "uri": uri}


@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Reference:
    """One uninterrupted run; every interrupted run here and in tests/test_faults.py must end
    exactly like it. Built once per session for both modules, whichever worker runs them
    (``tests.helpers_shared``): each interrupted run writes its own params file and output
    folder beside it (``_with_params``), never the reference's."""
    made = built_once(tmp_path_factory, "signals-reference", _reference_run)
    ws = {k: Path(v) for k, v in made["ws"].items() if k != "data"}
    data = {s: Path(p) for s, p in made["ws"]["data"].items()}
    return Reference(Workspace(**ws, data=data), made["uri"])


def _assert_same_result(ws: Workspace, ref: Workspace) -> None:
    assert comparable(read_metrics(ws)) == comparable(read_metrics(ref))
    got, want = load_network(ws.model), load_network(ref.model)
    assert ws.model.read_bytes() == ref.model.read_bytes()          # no timings, no paths
    for key, value in want.model.state_dict().items():
        assert torch.equal(got.model.state_dict()[key], value), key
    assert _history(ws) == _history(ref)


def _history(ws: Workspace) -> list[dict[str, str]]:
    """plots data without the timing columns."""
    with ws.plots.open() as handle:
        return [{k: v for k, v in row.items() if not k.startswith("vitals/")}
                for row in csv.DictReader(handle)]


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code", "rerun"), [(signal.SIGINT, 130, True),
                                                      (signal.SIGTERM, 143, False)])
def test_signal_checkpoints_mid_epoch_and_the_rerun_ends_the_same(
        reference: Reference, signum: int, code: int, rerun: bool) -> None:
    ws = _with_params(reference.ws, f"sig{signum}", log_every_steps=1)
    proc = _spawn(ws, reference.uri)
    for line in proc.stderr:
        if STEP_LINE in line:
            proc.send_signal(signum)
            break
    _, rest = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == code, rest[-3000:]
    partial = ck.load_checkpoint(ws.checkpoints / ck.PARTIAL_NAME)["partial"]
    steps = _batches_per_epoch(ws)
    assert partial["epoch"] == 1 and 5 <= partial["source"]["position"] < steps
    assert not ws.model.exists()
    assert mlflow_runs(reference.uri)[-1].info.status == "KILLED"
    if not rerun:
        return
    _finish(ws, reference.uri)
    assert not (ws.checkpoints / ck.PARTIAL_NAME).exists()
    _assert_same_result(ws, reference.ws)


def _batches_per_epoch(ws: Workspace) -> int:
    data = prepare_training(ws.data["train"], ws.data["val"], read_plan(ws.plan),
                            load_section(ws.params, "train"), torch.device("cpu"))
    data.close()
    return len(data.train_source)


# ---------------------------------------------------------------------------------------------
# fit() itself, in process: a stop flag mid-epoch, for both kinds of batch source
# ---------------------------------------------------------------------------------------------


def _fit(ws: Workspace, directory: Path, stop_after: int | None = None) -> FitResult:
    cfg, model_cfg = load_section(ws.params, "train"), load_section(ws.params, "model")
    data = prepare_training(ws.data["train"], ws.data["val"], read_plan(ws.plan), cfg,
                            torch.device("cpu"))
    polls = itertools.count(1)
    stop = (lambda: next(polls) > stop_after) if stop_after is not None else None
    try:
        return fit(model_cfg, cfg, runtime=cpu_runtime(),
                   decision=load_section(ws.params, "decision"), train_source=data.train_source,
                   val=data.val, class_counts=data.class_counts, tracker=NullTracker(),
                   checkpoint_dir=directory, features=data.features.to_dict(),
                   options=FitOptions(should_stop=stop, data_id=data.data_id))
    finally:
        data.close()


@pytest.mark.parametrize("mode", ["ram", "stream"])
def test_fit_stopped_mid_epoch_resumes_to_the_same_result(tmp_path: Path, mode: str) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ws = make_workspace(tmp_path, files_per_class=4, mode=mode)
        whole = _fit(ws, tmp_path / "whole")
        steps = _batches_per_epoch(ws)
        with pytest.raises(StopRequested) as stopped:      # polls: 1 + steps, 1, then 5 steps
            _fit(ws, tmp_path / "split", stop_after=steps + 6)
        assert stopped.value.checkpoint == tmp_path / "split" / ck.PARTIAL_NAME
        partial = ck.load_checkpoint(stopped.value.checkpoint)
        assert partial["epoch"] == 0 and partial["partial"]["epoch"] == 1
        assert partial["partial"]["source"] == {"epoch": 1, "position": 5}
        resumed = _fit(ws, tmp_path / "split")
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(False)
    assert resumed.resumed_from == stopped.value.checkpoint and resumed.epochs_run == 2
    strip = [{k: v for k, v in h.items() if not k.startswith("vitals/")} for h in whole.history]
    assert strip == [{k: v for k, v in h.items() if not k.startswith("vitals/")}
                     for h in resumed.history]
    for key, value in whole.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[key], value), key
    assert not (tmp_path / "split" / ck.PARTIAL_NAME).exists()


def test_a_resume_removes_the_temporaries_of_killed_checkpoint_writes(tmp_path: Path) -> None:
    """A SIGKILL inside a write leaves e.g. ``.partial.pt.tmp``: the resumed run deletes the
    writers' own temporaries before it writes anything, and nothing else of the folder."""
    ws = make_workspace(tmp_path, files_per_class=2, train={"epochs": 1})
    directory = tmp_path / "ck"
    with pytest.raises(StopRequested):
        _fit(ws, directory, stop_after=3)                       # writes partial.pt
    _litter(directory)
    resumed = _fit(ws, directory)
    assert resumed.resumed_from == directory / ck.PARTIAL_NAME
    names = {p.name for p in directory.iterdir()}
    assert not names & set(OWN_TEMPORARIES) and set(USER_FILES) <= names


def test_a_stale_partial_checkpoint_is_ignored(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, files_per_class=2, train={"epochs": 2})
    directory = tmp_path / "ck"
    with pytest.raises(StopRequested):
        _fit(ws, directory, stop_after=3)
    stale = (directory / ck.PARTIAL_NAME).read_bytes()
    result = _fit(ws, directory)
    (directory / ck.PARTIAL_NAME).write_bytes(stale)           # older than epoch-0001.pt
    again = _fit(ws, directory)
    assert again.epochs_run == 0 and again.best_epoch == result.best_epoch
    assert not (directory / ck.PARTIAL_NAME).exists()


def test_resume_takes_the_best_weights_from_the_epoch_checkpoint(tmp_path: Path) -> None:
    """best.pt is a convenience copy: a stale or foreign one never becomes the result."""
    ws = make_workspace(tmp_path, files_per_class=2, train={"epochs": 1, "warmup_epochs": 0.0})
    directory = tmp_path / "ck"
    first = _fit(ws, directory)
    best = ck.load_checkpoint(directory / ck.BEST_NAME)
    best["model"] = {k: torch.zeros_like(v) for k, v in best["model"].items()}
    save_torch_atomic(best, directory / ck.BEST_NAME)             # e.g. from a crashed later epoch
    again = _fit(ws, directory)
    assert again.epochs_run == 0
    for key, value in first.model.state_dict().items():
        assert torch.equal(again.model.state_dict()[key], value), key



# ---------------------------------------------------------------------------------------------
# What a stop names: the file the re-run resumes from (restore's choice), never best.pt
# ---------------------------------------------------------------------------------------------


def test_a_stop_before_an_epoch_names_the_partial_checkpoint_it_resumed_from(
        tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, files_per_class=2, train={"epochs": 1})
    directory = tmp_path / "ck"
    with pytest.raises(StopRequested):
        _fit(ws, directory, stop_after=3)                       # partial.pt, no epoch yet
    with pytest.raises(StopRequested) as stopped:
        _fit(ws, directory, stop_after=0)                       # resumed, stopped at once
    assert stopped.value.checkpoint == directory / ck.PARTIAL_NAME


def test_a_stop_during_the_last_validation_names_the_checkpoint_the_rerun_resumes_from(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        ) -> None:
    """Ctrl-C while the last epoch validates: fit returns, the stage stops (exit 130) and says
    which file the re-run starts from, the one ``restore`` resumes from (the message used to
    name best.pt, the resume used epoch-NNNN.pt)."""
    from leakpipe import cli
    from leakpipe.train import stage

    ws = make_workspace(tmp_path, files_per_class=1, train={"epochs": 1},
                        monitor=QUIET_MONITOR)
    real_fit = stage.fit

    def fit_then_ctrl_c(*args: object, **kwargs: object) -> FitResult:
        result = real_fit(*args, **kwargs)
        signal.raise_signal(signal.SIGINT)       # caught by the stage's GracefulStop
        return result

    monkeypatch.setattr(stage, "fit", fit_then_ctrl_c)
    monkeypatch.setattr(stage, "_tracker", lambda *_: contextlib.nullcontext(NullTracker()))
    # the log records themselves, on the stage's own logger: the CLI replaces the root's
    # handlers (basicConfig force) and an earlier test may have left levels or streams behind
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = records.append                       # type: ignore[method-assign]
    logger = logging.getLogger("leakpipe.train.stage")
    level, disabled = logger.level, logger.disabled
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.disabled = False
    logging.disable(logging.NOTSET)
    try:
        assert cli.main(["train", *stage_args(ws)]) == 130
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.disabled = disabled
    told = [r.getMessage() for r in records if "stopped after the last epoch" in r.getMessage()]
    resumed = _fit(ws, ws.checkpoints)                          # what the re-run does
    assert resumed.resumed_from == ws.checkpoints / "epoch-0000.pt" and resumed.epochs_run == 0
    assert len(told) == 1, told
    assert told[0].endswith(f"re-run the stage to resume from {resumed.resumed_from}"), told

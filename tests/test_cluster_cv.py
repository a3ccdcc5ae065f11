"""`leakpipe cv --scheduler` on a real Dask cluster: a `dask scheduler` and a `dask worker`
process (2 workers, 1 thread each, nannies) on 127.0.0.1, as docs/scale-out.md starts them.

The data are test_cv.py's manifest (12 sites, 24 recordings of 2 s at 4096 Hz), 2 folds, the
CNN (1 epoch), logger_stats, fused and level_logreg: every kind of task (the CNN's, a fused one
that takes the CNN's and logger_stats' results as inputs, a baselines one). The run on the
cluster is compared with one sequential run of the same command: `cv.json`, both prediction
tables and each fold's record (less the wall-clock spans of its MLflow runs) must agree, with
a worker killed mid-task and the driver killed between folds on the way (one run for both:
each start of the cluster, the driver and the workers' imports is seconds). The drivers run
torch and BLAS on one thread, as the sequential run does (the CNN's float sums depend on the
thread count; a cluster task uses its driver's). On this one machine they are equal bytes; as
the workers are other processes, which may round a float32 sum another way, the comparison
holds every name, id, count and decision exactly and the scores and figures to ``REL``.

A task is held on request by a worker preload (tests/helpers_cluster_cv_hooks.py), so that a
kill lands mid-task and not by luck.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from threadpoolctl import threadpool_limits

from leakpipe.cli import main
from tests.helpers_close import assert_csv_close, assert_json_close
from tests.helpers_cluster import scheduler, workers
from tests.helpers_cluster_cv_hooks import CONTROL_ENV
from tests.helpers_detector import copied_store, restore_logging
from tests.test_cv import REPO, _recordings, _small_params

pytestmark = pytest.mark.slow

HOOKS = Path(__file__).with_name("helpers_cluster_cv_hooks.py")
METHODS = ["cnn", "logger_stats", "fused", "level_logreg"]
OUTPUTS = ("cv.json", "predictions.csv", "predictions_recordings.csv")
WAIT_S = 180
# Scores and figures of two runs whose float32 rounding may differ at a step: through a CNN
# epoch (a few dozen Adam steps) a last-bit difference stays far below 1e-4 of a score, and
# the tables print 6 significant digits (a last digit may round the other way: 1e-5), while
# another fold, model or threshold moves a score or figure by 1e-2 and more. A decision would
# flip only for a score that close to its threshold.
REL, ABS = 1e-4, 1e-6


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """This process, the drivers' and the sequential run's, on one torch and BLAS thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with threadpool_limits(1):
        yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    uri = copied_store(tmp_path_factory.mktemp("mlruns"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", uri)
        yield uri


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The manifest and the params file."""
    root = tmp_path_factory.mktemp("cv-data")
    manifest, params = _recordings(root), _small_params(root)
    values = yaml.safe_load(params.read_text())
    values["cv"]["methods"] = METHODS
    params.write_text(yaml.safe_dump(values))
    return manifest, params


@pytest.fixture(scope="module")
def control(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("control")


@pytest.fixture(scope="module")
def address(tmp_path_factory: pytest.TempPathFactory, control: Path) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("dask")
    env = {"DASK_DISTRIBUTED__WORKER__PRELOAD": repr([str(HOOKS)]), CONTROL_ENV: str(control)}
    with scheduler(tmp) as addr, workers(addr, tmp, 2, env=env):
        yield addr


def _args(data: tuple[Path, Path], out: Path, address: str) -> list[str]:
    manifest, params = data
    return ["cv", "--source", str(manifest), "--params", str(params), "--folds", "2",
            "--out", str(out), "--scheduler", address, "--no-progress"]


def _cv(data: tuple[Path, Path], out: Path, address: str) -> None:
    logging_state = restore_logging()
    next(logging_state)
    try:
        assert main(_args(data, out, address)) == 0
    finally:
        next(logging_state, None)


def _outputs(out: Path) -> dict[str, Any]:
    """What must not depend on where the folds ran: the outputs (the tables as text, cv.json
    read), and each fold's record less its methods' MLflow spans (wall-clock times)."""
    found: dict[str, Any] = {name: (out / name).read_text() for name in OUTPUTS}
    found["cv.json"] = json.loads(found["cv.json"])
    for path in sorted((out / "work").glob("fold-*/result.json")):
        record = json.loads(path.read_text())
        for method in record["methods"].values():
            method.pop("span")
        found[path.parent.name] = record
    return found


@pytest.fixture(scope="module")
def sequential(tmp_path_factory: pytest.TempPathFactory, data: tuple[Path, Path], store: str,
               one_thread: None) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("sequential") / "out"
    _cv(data, out, "")
    found = _outputs(out)
    assert sorted(found) == sorted([*OUTPUTS, "fold-01", "fold-02"])
    assert sorted(found["fold-01"]["methods"]) == sorted(METHODS)
    return found


def _wait_for(path: Path, proc: subprocess.Popen | None = None,
              log: Path | None = None) -> None:
    deadline = time.monotonic() + WAIT_S
    while not path.exists() and time.monotonic() < deadline:
        assert proc is None or proc.poll() is None, \
            f"the driver ended early:\n{log.read_text()[-3000:] if log else ''}"
        time.sleep(0.02)
    assert path.exists(), f"{path.name} never appeared"


def _kill_when_held(control: Path, name: str, killed: list[int]) -> threading.Thread:
    """A thread that SIGKILLs the worker holding task ``name`` (a worker process this module
    started), then lets the task go."""
    hold, pid_file = control / f"hold-{name}", control / f"pid-{name}"
    hold.touch()

    def kill() -> None:
        try:
            _wait_for(pid_file)
            killed.append(int(pid_file.read_text()))
            os.kill(killed[0], signal.SIGKILL)
        finally:
            hold.unlink()

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


def test_a_killed_worker_and_a_killed_driver_change_nothing(
        tmp_path: Path, data: tuple[Path, Path], address: str, control: Path, store: str,
        sequential: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """`leakpipe cv --scheduler` in a process of its own: fold 1's logger_stats task is held
    until its worker is SIGKILLed (Dask runs it again on another worker, or on the one the
    nanny starts), fold 2's baselines task until fold 1 is written; then the driver is
    SIGKILLed and the command run again here: fold 1 is kept as it is, fold 2 computed, and
    every output is the sequential run's."""
    out, log = tmp_path / "out", tmp_path / "driver.log"
    first = out / "work" / "fold-01" / "result.json"
    killed: list[int] = []
    killer = _kill_when_held(control, "1-logger_stats", killed)
    hold = control / "hold-2-baselines"
    hold.touch()
    env = {**os.environ, "MLFLOW_TRACKING_URI": store, "PYTHONPATH": str(REPO),
           "OMP_NUM_THREADS": "1"}
    try:
        with log.open("wb") as sink, subprocess.Popen(
                [sys.executable, "-m", "leakpipe.cli", *_args(data, out, address)], cwd=tmp_path,
                env=env, stdout=subprocess.DEVNULL, stderr=sink) as proc:
            try:
                _wait_for(first, proc, log)
            finally:
                proc.send_signal(signal.SIGKILL)
            assert proc.wait(60) == -signal.SIGKILL
    finally:
        hold.unlink()
    killer.join(5)
    assert killed, "the held logger_stats task never started"
    assert not (out / "work" / "fold-02" / "result.json").exists()
    assert not (out / "cv.json").exists()
    stamp = first.stat().st_mtime_ns
    capsys.readouterr()
    _cv(data, out, address)
    err = capsys.readouterr().err
    assert "resuming in" in err and "finished: fold-01)" in err, err[-3000:]
    assert "fold 1/2:" not in err and "fold 2/2:" in err
    # one fold left to compute; how many workers the scheduler counts right after the kill
    # depends on whether the nanny has restarted the killed one yet
    assert re.search(r"1 folds computed on [12] Dask workers \(\d+ lost", err), err[-3000:]
    assert first.stat().st_mtime_ns == stamp
    found = _outputs(out)
    assert sorted(found) == sorted(sequential)
    for name, want in sequential.items():
        if name.endswith(".csv"):
            assert_csv_close(found[name], want, rel=REL, abs_=ABS)
        else:
            assert_json_close(found[name], want, rel=REL, abs_=ABS, at=name)

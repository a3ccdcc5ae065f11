"""leakpipe.cluster: where the scheduler comes from, the local default that never loads dask,
the ordered and bounded map, the code check. Real builds on a cluster: test_cluster_build.py."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from leakpipe import cluster
from leakpipe.cli import main
from leakpipe.cluster import (
    AHEAD,
    SCHEDULER_ENV,
    ClusterSettings,
    CodeMismatch,
    Session,
    scheduler_address,
)
from leakpipe.config import BuildConfig
from tests.conftest import REPO
from tests.helpers_cluster import workers
from tests.test_build import make_recordings


@pytest.mark.parametrize(("flag", "env", "expected"), [
    (None, None, None),                                   # the default: the local pool
    (None, "tcp://head:8786", "tcp://head:8786"),         # LEAKPIPE_SCHEDULER, as dvc repro sees it
    ("tcp://a:1", "tcp://head:8786", "tcp://a:1"),        # the flag wins
    ("", "tcp://head:8786", None),                        # even empty: computes here
    (None, "  ", None),
])
def test_the_flag_wins_over_the_environment(flag: str | None, env: str | None,
                                            expected: str | None) -> None:
    environ = {} if env is None else {SCHEDULER_ENV: env}
    assert scheduler_address(flag, environ) == expected


# `leakpipe index` whole; `build` without its MLflow run (seconds of store set-up, no dask)
DEFAULT_PATH = """
import json, sys
from pathlib import Path
from leakpipe.build import build
from leakpipe.cli import main
from leakpipe.config import load_section
params, root, tmp = sys.argv[1:]
assert main(["index", "--params", params, "--source", root, "--out", tmp + "/index.json",
             "--no-progress"]) == 0
report = build(load_section(Path(params), "build"), Path(root), Path(tmp) / "out", False)
Path(tmp, "build.json").write_text(json.dumps(report.to_dict()))
print(sorted(m for m in sys.modules if m.split(".")[0] in ("dask", "distributed")))
"""


def _params(tmp: Path, cfg: BuildConfig) -> Path:
    params = tmp / "params.yaml"
    build = json.loads(json.dumps(dataclasses.asdict(dataclasses.replace(cfg, workers=2))))
    params.write_text(yaml.safe_dump({"build": build}))
    return params


def test_the_local_default_never_imports_dask(tmp_path: Path, tiny_build_cfg: BuildConfig) -> None:
    """`leakpipe index` and `build` with no scheduler, in a fresh interpreter."""
    make_recordings(tmp_path / "raw", n_sites=3, per_class=1)
    env = {k: v for k, v in os.environ.items() if k != SCHEDULER_ENV}
    params = _params(tmp_path, tiny_build_cfg)
    run = subprocess.run([sys.executable, "-c", DEFAULT_PATH, str(params), str(tmp_path / "raw"),
                          str(tmp_path)], capture_output=True, text=True, env=env, cwd=REPO,
                         check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().splitlines()[-1] == "[]"
    report = json.loads((tmp_path / "build.json").read_text())
    assert (report["backend"], report["workers"], report["workers_lost"]) == ("local", 2, 0)


def test_the_environment_variable_sends_a_stage_to_the_cluster(
        tmp_path: Path, tiny_build_cfg: BuildConfig, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """LEAKPIPE_SCHEDULER alone is enough: with nothing listening there, one line says so."""
    make_recordings(tmp_path / "raw", n_sites=3, per_class=1)
    monkeypatch.setenv(SCHEDULER_ENV, "tcp://127.0.0.1:9")
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 1)
    code = main(["index", "--params", str(_params(tmp_path, tiny_build_cfg)), "--source",
                 str(tmp_path / "raw"), "--out", str(tmp_path / "index.json")])
    assert code != 0
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in capsys.readouterr().err
    assert not (tmp_path / "index.json").exists()


# -- Session.map on a stand-in client: order, window, KilledWorker ------------------------------


class _Future:
    """Computes on first look; a chunk holding a negative item dies as KilledWorker does."""

    def __init__(self, client: _Client, fn, chunk: list[int]) -> None:  # noqa: ANN001
        self.client, self.fn, self.chunk, self.done = client, fn, chunk, False

    def _finish(self) -> None:
        if not self.done:
            self.done = True
            self.client.running.remove(self)

    def result(self) -> list[int]:
        from distributed import KilledWorker

        self._finish()
        if any(i < 0 for i in self.chunk):
            raise KilledWorker("task", None, 3)
        return self.fn(self.chunk)

    def exception(self) -> None:
        self._finish()

    def release(self) -> None:
        pass


class _Client:
    """Records how many tasks were in flight at each submit, and what ran alone."""

    def __init__(self, threads: int) -> None:
        self.threads, self.running, self.most, self.alone = threads, [], 0, []

    def submit(self, _checked, fn, chunk, digest, setup, pure):  # noqa: ANN001, ANN201, ARG002
        if len(chunk) == 1 and self.running == []:
            self.alone.append(chunk[0])
        future = _Future(self, fn, chunk)
        self.running.append(future)
        self.most = max(self.most, len(self.running))
        return future

    def nthreads(self) -> dict[str, int]:
        return {f"tcp://w{i}": 1 for i in range(self.threads)}

    def get_events(self, topic: str) -> tuple:  # noqa: ARG002
        return ()


def _squares(chunk: list[int]) -> list[int]:
    return [i * i for i in chunk]


@pytest.mark.parametrize(("threads", "chunk"), [(1, 1), (2, 3), (5, 8)])
def test_results_come_in_order_with_a_bounded_window(threads: int, chunk: int) -> None:
    client = _Client(threads)
    session = Session(client, ClusterSettings("tcp://x:1", chunk), "digest")
    items = list(range(50))
    assert list(session.map(_squares, items, on_killed=lambda i, why: None)) == [
        i * i for i in items]
    assert client.most == min(AHEAD * threads, -(-len(items) // chunk))
    assert session.workers == threads


def test_a_chunk_that_killed_its_workers_runs_again_item_by_item_alone() -> None:
    client = _Client(2)
    session = Session(client, ClusterSettings("tcp://x:1", 4), "digest")
    items = [0, 1, 2, 3, 4, -5, 6, 7, 8, 9]   # -5 kills every worker that reads it
    out = list(session.map(_squares, items, on_killed=lambda i, why: f"{i}: {why}"))
    assert out[:5] == [0, 1, 4, 9, 16] and out[6:] == [36, 49, 64, 81]
    assert out[5] == "-5: killed its Dask worker each of 4 times it ran (a crash in the " \
                     "reader or out of memory?)"
    assert client.alone == [4, -5, 6, 7]  # its chunk, one at a time, with nothing else out


# -- the code check -------------------------------------------------------------------------------


def test_a_task_on_a_worker_with_other_code_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check each task makes (a worker may join after connect's check)."""
    monkeypatch.setattr(cluster, "_prepared", lambda: "0" * 64)
    with pytest.raises(CodeMismatch, match=r"Dask worker process \d+ runs other leakpipe code "
                                           r"\(digest 000000000000, the client's ffffffffffff\)"):
        cluster._checked(_squares, [1], "f" * 64, None)


def test_a_worker_with_other_code_is_refused_at_connect(tmp_path: Path) -> None:
    """A `dask worker` whose leakpipe has one more comment joins a LocalCluster's scheduler."""
    from distributed import Client, LocalCluster

    other = tmp_path / "other"
    shutil.copytree(REPO / "leakpipe", other / "leakpipe",
                    ignore=shutil.ignore_patterns("__pycache__"))
    with (other / "leakpipe" / "constants.py").open("a") as handle:
        handle.write("# an edit this worker's checkout has and the client's has not\n")
    env = {"PYTHONPATH": str(other)}
    with (LocalCluster(n_workers=0, processes=False, protocol="tcp", host="127.0.0.1",
                       dashboard_address="127.0.0.1:0") as local,
          workers(local.scheduler_address, tmp_path, 1, nanny=False, env=env),
          Client(local.scheduler_address, set_as_default=False) as client):
        (stranger,) = client.nthreads()
        with pytest.raises(CodeMismatch) as caught:
            with cluster.connect(ClusterSettings(local.scheduler_address)):
                pass
    message = str(caught.value)
    assert message.startswith(f"Dask worker {stranger} runs other leakpipe code (digest ")
    assert "\n" not in message


def test_a_worker_pins_one_thread_per_pool() -> None:
    code = ("import numpy, json\nfrom threadpoolctl import threadpool_info\n"
            "from leakpipe.cluster import pin_threads\npin_threads()\n"
            "print(json.dumps([p['num_threads'] for p in threadpool_info()]))")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True)
    threads = json.loads(run.stdout)
    assert threads and set(threads) == {1}


# -- crossval ------------------------------------------------------------------------------------


def test_the_cv_modules_load_no_dask() -> None:
    """`leakpipe cv` without a scheduler: everything it imports, the cluster path's modules
    included, in a fresh interpreter, and nothing of dask is loaded (connect() alone does)."""
    code = ("import sys\nimport leakpipe.commands.cv, leakpipe.cv.stage, leakpipe.cv.dispatch, "
            "leakpipe.cv.tasks\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == "[]"


def test_cv_with_an_unreachable_scheduler_is_one_line_and_no_result(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """LEAKPIPE_SCHEDULER sends `cv` to the cluster as it sends `build`: nothing listens there,
    so one line says so, and no fold result nor cv.json is written."""
    from tests.helpers_detector import restore_logging, write_plan
    from tests.helpers_h5 import write_splits
    from tests.test_cv import _small_params

    splits = write_splits(tmp_path / "data")
    monkeypatch.setenv(SCHEDULER_ENV, "tcp://127.0.0.1:9")
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 1)
    logging_state = restore_logging()
    next(logging_state)
    try:
        code = main(["cv", "--params", str(_small_params(tmp_path)), "--data-dir",
                     str(splits["train"].parent), "--unvalidated", "--folds", "2",
                     "--plan", str(write_plan(tmp_path / "plan.json")),
                     "--work", str(tmp_path / "work"), "--metrics", str(tmp_path / "cv.json"),
                     "--predictions", str(tmp_path / "cv.csv"),
                     "--plots-dir", str(tmp_path / "plots"), "--no-progress"])
    finally:
        next(logging_state, None)
    err = capsys.readouterr().err
    assert code != 0
    assert "error: cannot reach the Dask scheduler at tcp://127.0.0.1:9" in err, err[-2000:]
    assert not (tmp_path / "cv.json").exists()
    assert list((tmp_path / "work").glob("fold-*")) == []


def test_a_cuda_cnn_task_asks_for_a_gpu_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """runtime.device cuda: the CNN's task needs a worker offering the GPU resource, and
    without one the run stops with one line; on the CPU no resource is asked for."""
    from distributed import LocalCluster

    from leakpipe.config import RuntimeConfig
    from leakpipe.cv import dispatch
    from leakpipe.cv.methods import Settings

    def settings(device: str) -> Settings:
        runtime = RuntimeConfig(device=device, amp="off", channels_last=False)
        return Settings(cv=None, model=None, train=None, runtime=runtime, decision=None,
                        evaluate=None, baselines=None, detector=None, preload=None, plan={})

    monkeypatch.setattr(cluster, "WORKER_WAIT_S", 0)
    for offered in ({"GPU": 1}, {}):
        with (LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp",
                           host="127.0.0.1", dashboard_address="127.0.0.1:0",
                           resources=offered) as local,
              cluster.connect(ClusterSettings(local.scheduler_address)) as session):
            assert dispatch._resources(session, settings("cpu")) is None
            if offered:
                assert dispatch._resources(session, settings("cuda")) == {"GPU": 1}
            else:
                with pytest.raises(cluster.ClusterError, match=r"no Dask worker of tcp://\S+ "
                                   r"offers the GPU resource within 0 s \(runtime.device is "
                                   r"cuda; start them with: dask worker \.\.\. --resources "
                                   r"GPU=1\)"):
                    dispatch._resources(session, settings("cuda"))


def test_a_crossval_task_refuses_split_files_other_than_the_drivers(tmp_path: Path) -> None:
    """A worker that sees other bytes at a split's path, or no file there, stops its task
    with one line naming the file, before any fold is written."""
    from leakpipe.cv.folds import Fold
    from leakpipe.cv.tasks import FoldTask, Threads, run_group
    from leakpipe.errors import DataError
    from leakpipe.files import file_sha256
    from tests.helpers_h5 import write_splits

    splits = [p.resolve() for p in write_splits(tmp_path / "data").values()]
    sha = tuple(file_sha256(p) for p in splits)
    empty = np.zeros(0, dtype=int)

    def task(paths: list[Path], digests: tuple[str, ...]) -> FoldTask:
        return FoldTask(fold=Fold(0, empty, empty, empty), group="baselines",
                        methods=("level_logreg",), settings=None, splits=tuple(paths),
                        sha256=digests, threads=Threads(1, 1), tables=True)

    other = (*sha[:2], "0" * 64)
    with pytest.raises(DataError, match=rf"^{splits[2]}: other bytes on Dask worker process "
                                        r"\d+ than on the machine that runs crossval"):
        run_group([task(splits, other)])
    missing = [*splits[:2], tmp_path / "elsewhere" / "test.h5"]
    with pytest.raises(DataError, match=r"elsewhere/test.h5: not found on Dask worker process "
                                        r"\d+ \(crossval on a cluster reads the split files at "
                                        r"the same absolute path"):
        run_group([task(missing, sha)])

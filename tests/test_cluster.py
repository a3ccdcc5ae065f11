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

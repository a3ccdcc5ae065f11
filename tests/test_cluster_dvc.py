"""`dvc repro` with and without ``LEAKPIPE_SCHEDULER``: the same dvc.lock.

A temporary git + DVC repository holds this project's `index` and `build` stages as dvc.yaml
defines them (their command, params and outputs; as deps their script, the package and what
they read), a params.yaml whose `build` section is shrunk to a tiny build, and 9 synthetic
recordings at 3 sites. It is reproduced here (the local pool), then with the variable set to a
real `dask scheduler` with 2 workers on 127.0.0.1 (tests/helpers_cluster.py), whose workers run
the repository's own copy of the package, as the stages do.

The address is in no DVC file, and forcing both stages onto the cluster writes the same lock:
every dep, param and output hash equal (so switching the variable makes no stage stale), but
for `reports/build.json`, the report, which says where and how fast the build ran (``WHERE``)
and in which nothing else differs. That report is no dependency of any stage (dvc.yaml), so
no later stage re-runs for it. One more is allowed to differ: the split folder's content hash
(and the splits' sha256 in the report). Its bytes are the same on one machine, but the workers
are other processes, which may round float32 sums another way; the splits are then compared
as floats allow (tests/helpers_close.py): ids, labels and layout exactly, values within float32
rounding.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from leakpipe.cluster import SCHEDULER_ENV
from tests.conftest import REPO
from tests.helpers_close import assert_builds_close
from tests.helpers_cluster import scheduler, workers
from tests.helpers_detector import copied_store
from tests.helpers_pipeline import DVC_CONFIG, project_env
from tests.test_build import make_recordings

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
STAGES = ("index", "build")
READS = {"index": ["${build.source}"], "build": ["reports/recordings.json"]}
REPORT = "reports/build.json"
SPLITS_DIR = "data/processed"
WHERE = ("backend", "workers", "workers_lost", "seconds", "recordings_per_s")
FLOAT_BYTES = ("sha256",)   # the report's digests of the splits: the floats' bytes
TINY_BUILD = {"workers": 1, "sample_rate": 4096, "clip_s": 1.0, "clips_per_recording": 2,
              "long_window_s": 0.25, "long_hop_s": 0.125, "short_window": 256, "short_hop": 128,
              "n_fft": 256, "hop_length": 256, "n_mels": 16, "fmax": 2048.0}


def _dvc_yaml() -> dict[str, Any]:
    """The project's `index` and `build` stages, their deps cut to what this repository has."""
    real = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    return {"stages": {name: {**{k: v for k, v in real[name].items() if k != "deps"},
                              "deps": [f"stages/{name}.py", "leakpipe", *READS[name]]}
                       for name in STAGES}}


def _run(cwd: Path, env: dict[str, str], *cmd: str) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    root = tmp_path_factory.mktemp("dvc-cluster")
    project = root / "project"
    shutil.copytree(REPO / "leakpipe", project / "leakpipe",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (project / "stages").mkdir()
    for name in STAGES:
        shutil.copy(REPO / "stages" / f"{name}.py", project / "stages" / f"{name}.py")
    for name in (".dvcignore", ".gitignore"):
        shutil.copy(REPO / name, project / name)
    build = yaml.safe_load((REPO / "params.yaml").read_text())["build"]
    (project / "params.yaml").write_text(yaml.safe_dump({"build": {**build, **TINY_BUILD}}))
    (project / "dvc.yaml").write_text(yaml.safe_dump(_dvc_yaml(), sort_keys=False))
    make_recordings(project / "data" / "raw", n_sites=3, per_class=1)
    env = {**project_env(project), "MLFLOW_TRACKING_URI": copied_store(root / "mlruns")}
    env.pop(SCHEDULER_ENV, None)
    git = ("git", "-c", "user.name=t", "-c", "user.email=t@t")
    _run(project, env, *git, "init", "-q")
    _run(project, env, str(BIN / "dvc"), "init", "-q")
    (project / ".dvc" / "config").write_text(DVC_CONFIG)
    _run(project, env, *git, "add", "-A")
    _run(project, env, *git, "commit", "-qm", "init")
    yield project, env


@pytest.fixture(scope="module")
def address(tmp_path_factory: pytest.TempPathFactory,
            project: tuple[Path, dict[str, str]]) -> Iterator[str]:
    """Workers on the repository's copy of the package: the code the stages run."""
    tmp = tmp_path_factory.mktemp("dask")
    with scheduler(tmp) as addr, workers(addr, tmp, 2, env={"PYTHONPATH": str(project[0])}):
        yield addr


def _lock(project: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """dvc.lock's stages, and the build report."""
    lock = yaml.safe_load((project / "dvc.lock").read_text())["stages"]
    return lock, json.loads((project / REPORT).read_text())


def _without_report(stage: dict[str, Any]) -> dict[str, Any]:
    """The stage's lock entry less the report and the split folder's content hash (its size
    and file count stay: float rounding changes no length)."""
    return {**stage, "outs": [{k: v for k, v in o.items()
                               if not (o["path"] == SPLITS_DIR and k == "md5")}
                              for o in stage["outs"] if o["path"] != REPORT]}


def test_the_scheduler_changes_no_hash_in_dvc_lock(project: tuple[Path, dict[str, str]],
                                                   address: str, tmp_path: Path) -> None:
    root, env = project
    dvc = str(BIN / "dvc")
    out = _run(root, env, dvc, "repro", "build")
    assert "Running stage 'build'" in out
    local, local_report = _lock(root)
    assert local_report["backend"] == "local"
    shutil.copytree(root / SPLITS_DIR, tmp_path / "local")      # the cluster's build replaces it

    out = _run(root, {**env, SCHEDULER_ENV: address}, dvc, "repro", "--force", "build")
    assert "Running stage 'index'" in out and "Running stage 'build'" in out
    remote, remote_report = _lock(root)
    assert (remote_report["backend"], remote_report["workers"]) == ("dask", 2)
    assert sorted(remote) == sorted(STAGES)
    for name in STAGES:
        assert _without_report(remote[name]) == _without_report(local[name]), name
    assert_builds_close(root / SPLITS_DIR, tmp_path / "local")
    assert {k: v for k, v in remote_report.items() if k not in WHERE + FLOAT_BYTES} == \
        {k: v for k, v in local_report.items() if k not in WHERE + FLOAT_BYTES}
    for name in ("dvc.lock", "dvc.yaml", "params.yaml"):
        assert address not in (root / name).read_text(), name
    assert [o["path"] for o in remote["build"]["outs"]] == ["data/processed", REPORT]

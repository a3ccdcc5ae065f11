"""`build` and `index` on a real Dask cluster: a `dask scheduler` and a `dask worker` process
(2 workers, 1 thread each, nannies) on 127.0.0.1, as docs/scale-out.md starts them.

The split files are compared with the local pool's: the workers run the same code and the
build process writes the rows in manifest order, so the ids, labels, attributes and HDF5's
layout are the same, and the floats too on one machine; other processes may round float32
sums another way, so these are held to float32 rounding (tests/helpers_close.py), not to
their bytes. The scheduler allows one death per task
(``allowed-failures`` 1, Dask's default is 3) so that a recording that kills its worker is
given up after 2 + 2 deaths, not 4 + 4: the same path, in a few seconds.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from leakpipe.build import BuildFailed, build
from leakpipe.cluster import ClusterSettings, connect
from leakpipe.config import BuildConfig
from leakpipe.index import index_recordings
from tests.helpers_close import assert_builds_close
from tests.helpers_cluster import scheduler, workers
from tests.test_build import make_recordings

pytestmark = pytest.mark.slow  # real processes: started first, so the two test workers stay busy

ALLOWED_FAILURES = {"DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "1"}


@pytest.fixture(scope="module")
def address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("dask")
    with scheduler(tmp, ALLOWED_FAILURES) as addr, workers(addr, tmp, 2, hooks=True):
        yield addr


@pytest.fixture
def cfg(tiny_build_cfg: BuildConfig) -> BuildConfig:
    return dataclasses.replace(tiny_build_cfg, workers=2)


def _recordings(root: Path, rename: dict[str, str] | None = None) -> Path:
    """4 sites x 3 classes x 2 recordings; ``rename`` gives some a marker name for the hooks
    (tests/helpers_cluster_hooks.py), in the manifest too."""
    make_recordings(root, n_sites=4)
    manifest = (root / "manifest.csv").read_text()
    for old, new in (rename or {}).items():
        (root / old).rename(root / new)
        manifest = manifest.replace(old, new)
    (root / "manifest.csv").write_text(manifest)
    return root


def _on_cluster(cfg: BuildConfig, address: str, root: Path, out: Path, chunk: int = 4,
                **kwargs: object):  # noqa: ANN202
    with connect(ClusterSettings(address, chunk)) as session:
        return build(cfg, root, out, progress=False, session=session, **kwargs)


def test_the_cluster_writes_the_local_pools_bytes(tmp_path: Path, address: str,
                                                  cfg: BuildConfig,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """From a relative source, as `dvc repro` names data/raw: the workers run elsewhere."""
    _recordings(tmp_path / "raw")
    monkeypatch.chdir(tmp_path)
    root = Path("raw")
    local = build(cfg, root, tmp_path / "local", progress=False)
    remote = _on_cluster(cfg, address, root, tmp_path / "dask", chunk=3, verify=4)
    assert_builds_close(tmp_path / "dask", tmp_path / "local")
    info = remote.to_dict()
    assert (info["backend"], info["workers"], info["workers_lost"]) == ("dask", 2, 0)
    assert local.to_dict()["backend"] == "local"
    verify = info["verify"]       # byte-identical on one machine so far; not promised
    assert verify["recordings"] == 4 and verify["identical"] + len(verify["differing"]) == 4
    # a float32 rounding apart rounds a stored float16 at most one ulp the other way: 2^-4 dB
    # for |mel| < 128 dB (the log floor is -100 dB); a wrong clip is off by dB
    assert all(d["max_abs_db"] is not None and d["max_abs_db"] <= 2.0**-4
               for d in verify["differing"]), verify


def test_a_worker_killed_mid_build_changes_nothing(tmp_path: Path, address: str,
                                                   cfg: BuildConfig) -> None:
    slow = "LEAK/s1_0_slow.wav"
    root = _recordings(tmp_path / "raw", {"LEAK/s1_0.wav": slow})
    build(cfg, root, tmp_path / "local", progress=False)
    killed = []

    def kill_the_worker_reading_it() -> None:
        pid_file = root / f"{slow}.pid"
        deadline = time.monotonic() + 60
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        killed.append(int(pid_file.read_text()))
        os.kill(killed[0], signal.SIGKILL)  # a worker process these tests started

    killer = threading.Thread(target=kill_the_worker_reading_it, daemon=True)
    killer.start()
    remote = _on_cluster(cfg, address, root, tmp_path / "dask")
    killer.join(5)
    assert killed, "the slow recording never started"
    assert_builds_close(tmp_path / "dask", tmp_path / "local")
    assert remote.workers_lost >= 1
    assert remote.unusable == []


def test_a_recording_that_kills_its_worker_is_skipped(tmp_path: Path, address: str,
                                                      cfg: BuildConfig) -> None:
    """The same splits as a local build where that file is merely unreadable: unusable
    either way, every other recording where it was."""
    poison = "NORMAL/s2_1_poison.wav"
    root = _recordings(tmp_path / "raw", {"NORMAL/s2_1.wav": poison})
    (root / poison).write_bytes(b"not audio")  # locally: unreadable (the hook never reads it)
    skip = dataclasses.replace(cfg, on_error="skip")
    build(skip, root, tmp_path / "local", progress=False)
    remote = _on_cluster(skip, address, root, tmp_path / "dask")
    assert [u["path"] for u in remote.unusable] == [str(root / poison)]
    assert "killed its Dask worker each of 2 times" in remote.unusable[0]["reason"]
    assert_builds_close(tmp_path / "dask", tmp_path / "local")
    assert remote.workers_lost >= 4  # twice in its chunk, twice alone


def test_with_on_error_fail_it_leaves_no_file(tmp_path: Path, address: str,
                                              cfg: BuildConfig) -> None:
    poison = "LEAK/s0_0_poison.wav"
    root = _recordings(tmp_path / "raw", {"LEAK/s0_0.wav": poison})
    out = tmp_path / "dask"
    with pytest.raises(BuildFailed, match="killed its Dask worker"):
        _on_cluster(cfg, address, root, out, chunk=1)
    assert not out.exists() or sorted(p.name for p in out.iterdir()) == []  # nor a temp file


def test_index_on_the_cluster_equals_the_local_one(tmp_path: Path, address: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _recordings(tmp_path / "raw")
    monkeypatch.chdir(tmp_path)
    root = Path("raw")  # relative, as in dvc.yaml
    (root / "LEAK" / "s3_1.wav").unlink()  # listed, unreadable: an error line either way
    local = index_recordings(root, workers=2)
    with connect(ClusterSettings(address, 5)) as session:
        remote = index_recordings(root, session=session)
    assert remote == local
    assert [e["path"] for e in remote["recordings"] if "error" in e] == ["LEAK/s3_1.wav"]

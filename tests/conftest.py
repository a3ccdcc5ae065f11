"""Shared fixtures: the repo's params, a tiny feature config, an isolated MLflow store."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from leakpipe.config import BuildConfig, FeatureConfig, load_section

REPO = Path(__file__).resolve().parents[1]
PARAMS = REPO / "params.yaml"


def pytest_configure(config: pytest.Config) -> None:
    """Keep the order below under ``--dist loadfile``: pytest-xdist otherwise re-sorts the
    modules by their number of tests (its ``--loadscope-reorder`` default), which would start
    a module of one long test (test_ddp, test_faults) or a pipeline module late, leaving a worker
    alone at the end."""
    if getattr(config.option, "loadscopereorder", None):
        config.option.loadscopereorder = False


# The slow group's first and last modules. The grid builds the session's one pipeline repro
# (tests/helpers_pipeline.py) and then runs the suite's longest chain, its queued experiments:
# started first, it ends before the many short modules do. test_pipeline reads the same repro:
# started last of the slow ones, it finds it built instead of waiting on it.
SLOW_FIRST, SLOW_LAST = "test_pipeline_grid.py", "test_pipeline.py"
# pytest-timeout guards against hangs, never against a slow machine: an end-to-end item (and
# the module fixture its setup builds) gets at least 3x its time on one core of a slow CPU
# (`make test-kernels`), every other item pyproject.toml's `timeout`.
SLOW_TIMEOUT_S = 1800


def _rank(item: pytest.Item) -> tuple[bool, int]:
    name = item.path.name
    return item.get_closest_marker("slow") is None, (name != SLOW_FIRST) + (name == SLOW_LAST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow end-to-end tests first, in their modules' order (but ``SLOW_FIRST`` and
    ``SLOW_LAST``), the rest after them; each slow item with ``SLOW_TIMEOUT_S``.

    `make test` runs the suite on two workers, a module at a time each (``--dist loadfile``);
    the pipeline modules take minutes. Started last, they would run on one worker while the
    other sat idle; started first, the many short modules fill the other worker meanwhile. A
    stable sort: the order inside each group stays the collection order.
    """
    items.sort(key=_rank)
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))


@pytest.fixture(scope="session")
def build_cfg() -> BuildConfig:
    return load_section(PARAMS, "build")


@pytest.fixture(scope="session")
def tiny_build_cfg(build_cfg: BuildConfig) -> BuildConfig:
    """1 s clips at 4096 Hz -> (7 long, 7 short, 16 mels, 1 frame) per clip; one worker."""
    return dataclasses.replace(
        build_cfg, workers=1, sample_rate=4096, clip_s=1.0, clips_per_recording=2,
        long_window_s=0.25, long_hop_s=0.125, short_window=256, short_hop=128, n_fft=256,
        hop_length=256, n_mels=16, fmax=2048.0)


@pytest.fixture(scope="session")
def tiny_features(tiny_build_cfg: BuildConfig) -> FeatureConfig:
    return tiny_build_cfg.features


@pytest.fixture
def mlflow_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A real MLflow SQLite store private to the test: a copy of an empty, migrated store
    made once per test process (a new store runs MLflow's schema migrations, seconds each)."""
    from tests.helpers_detector import copied_store

    uri = copied_store(tmp_path)                    # tmp_path / "mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return uri


@pytest.fixture(autouse=True)
def _restore_root_logging() -> Iterator[None]:
    """`leakpipe.cli.main` configures the root logger; undo it so later tests' captures work."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A real PostgreSQL server (pgserver: a self-contained build from the lock) for the
    session, reachable only through a Unix socket in a private folder; yields its socket dir.

    ``LEAKPIPE_TEST_POSTGRES_URL`` is not needed: the shared-storage tests always run.
    """
    import shutil
    import tempfile

    import pgserver

    # Run as root, pgserver runs PostgreSQL as its own user, which must reach the data folder:
    # pytest's temporary folders are private (0700), so the server gets one of its own.
    root = Path(tempfile.mkdtemp(prefix="leakpipe-pg-"))
    root.chmod(0o755)
    # its exit hook logs after pytest closed the streams ("--- Logging error ---"): INFO off
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    server = pgserver.get_server(root / "data", cleanup_mode="stop")
    try:
        yield server.get_uri().split("host=", 1)[1]
    finally:
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server: str, request: pytest.FixtureRequest) -> str:
    """A fresh, empty database on the session's server: ``postgresql://...`` (no driver named,
    as a user writes it)."""
    import psycopg

    name = "t_" + "".join(c if c.isalnum() else "_" for c in request.node.name.lower())[:55]
    with psycopg.connect(dbname="postgres", user="postgres", host=postgres_server,
                         autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"postgresql://postgres@/{name}?host={postgres_server}"

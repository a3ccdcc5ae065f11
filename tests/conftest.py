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
    """A real MLflow SQLite store private to the test."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
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

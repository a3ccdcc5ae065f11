"""One domain answer for a detector trained on loggers slower than its model rate: a band the
training recordings could not fill either (their own Nyquist frequency lies below it) is no
shift. Before, predict called every one of such a detector's own test recordings shifted
(their rate cannot fill the model's top bands) while evaluate, reading distances only,
reported none: two answers for the same recordings."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from leakpipe.decision import domain as dm
from leakpipe.evaluate.domain_reference import (
    build_reference,
    domain_figures,
    split_profiles_and_bands,
)
from leakpipe.features.mel import band_centers_hz
from tests.helpers_h5 import SMALL_FEATURES as F
from tests.helpers_h5 import write_split

CENTERS = band_centers_hz(F.n_mels, F.fmin, F.fmax)     # up to ~2 kHz: the model's 4096 Hz
LOGGER_RATE = 2048                                      # the loggers': Nyquist 1024 Hz


def _reference(band_hz: np.ndarray | None) -> dm.DomainReference:
    rng = np.random.default_rng(0)
    profiles = rng.normal(-40.0, 1.0, (60, F.n_mels))
    ref = dm.fit_reference(profiles, band_hz=band_hz)
    return dm.fit_threshold(ref, rng.normal(-40.0, 1.0, (40, F.n_mels)))


def test_a_band_training_lacked_too_is_no_shift() -> None:
    assert (CENTERS > LOGGER_RATE / 2).any() and (CENTERS < LOGGER_RATE / 4).any()
    ref = _reference(np.full(60, LOGGER_RATE / 2))
    assert ref.train_band_hz == LOGGER_RATE / 2
    typical = np.full(F.n_mels, -40.0)
    assert dm.assess(ref, typical, CENTERS, LOGGER_RATE / 2).domain == dm.IN
    slower = dm.assess(ref, typical, CENTERS, LOGGER_RATE / 4)    # bands training did fill
    assert slower.domain == dm.SHIFTED and slower.reason.startswith("band: ")
    old = dataclasses.replace(ref, train_band_hz=None)             # stored before the band
    assert dm.assess(old, typical, CENTERS, LOGGER_RATE / 2).domain == dm.SHIFTED


def test_the_training_band_ignores_a_few_slower_recordings() -> None:
    bands = np.full(60, 2048.0)
    bands[:2] = 512.0                                  # 2 of 60 (3 %) at a lower rate
    assert _reference(bands).train_band_hz == 2048.0
    bands[:6] = 512.0                                  # 6 of 60 (10 %): their band is normal
    assert _reference(bands).train_band_hz == 512.0


def test_the_stored_form_keeps_the_band_and_reads_references_without_it() -> None:
    ref = _reference(np.full(60, 1024.0))
    back = dm.DomainReference.from_dict(ref.to_dict())
    assert back.train_band_hz == 1024.0
    raw = ref.to_dict()
    del raw["train_band_hz"]
    assert dm.DomainReference.from_dict(raw).train_band_hz is None
    with pytest.raises(ValueError, match="train_band_hz"):
        dm.DomainReference.from_dict({**ref.to_dict(), "train_band_hz": -1})


def test_evaluate_and_predict_agree_on_the_detectors_own_test_recordings(
        tmp_path: Path) -> None:
    """Real HDF5 splits of loggers at half the model's rate: evaluate's flagged share is the
    share predict's per-recording check (each recording at its own Nyquist) flags."""
    paths = {s: write_split(tmp_path / f"{s}.h5", s, rate=LOGGER_RATE, seed=3)
             for s in ("train", "val", "test")}
    network = SimpleNamespace(input_norm="none")   # the one field build_reference reads
    ref = build_reference(network, paths)
    assert ref.train_band_hz == LOGGER_RATE / 2
    figures = domain_figures(ref, paths, CENTERS)
    profiles, bands = split_profiles_and_bands(paths["test"])
    predicted = [dm.assess(ref, p, CENTERS, b).domain == dm.SHIFTED
                 for p, b in zip(profiles, bands, strict=True)]
    assert figures["domain/test_shifted_rate"] == pytest.approx(np.mean(predicted))
    assert figures["domain/test_shifted_rate"] < 0.5       # not every recording, as before

"""Band limiting (``train.augment.band_limit_*``): a file drawn for an epoch gets what a
logger at a lower sample rate would have given, the empty bands measured through the build path;
on hand-made batches, on the batch sources and against a sound logged at 4096 Hz.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from leakpipe.audio.clips import plan_clips
from leakpipe.audio.io import read_clips
from leakpipe.audio.opening import waveform_source
from leakpipe.config import AugmentConfig, ConfigError, load_section
from leakpipe.data.augment import TrainTransform, band_octaves
from leakpipe.data.band_limiting import BandLimit
from leakpipe.data.empty_band import empty_bands
from leakpipe.data.input_norm import clip_offsets, normalize_clips
from leakpipe.features.mel import band_centers_hz, clip_features
from tests.conftest import PARAMS
from tests.helpers_augment import (
    KINDS,
    NOTHING,
    assert_same,
    cat,
    run,
    source,
    write_split,
)


@pytest.fixture
def split(tmp_path: Path, tiny_features) -> Path:
    """20 files, labels cycling through KNOWN_CLASSES (4 LEAK files), ids written in the data."""
    return write_split(tmp_path / "train.h5", tiny_features)


# -- band limiting -------------------------------------------------------------------------------

BAND = dataclasses.replace(NOTHING, band_limit_prob=1.0, band_limit_hz=(1024.0,))   # 2048 Hz


def limiter(features, augment: AugmentConfig, *, n_files: int = 8, norm: str = "none",
            band_means: torch.Tensor | None = None, seed: int = 0,
            epoch: int = 0) -> TrainTransform:
    """A transform of hand-made batches, its empty bands measured for ``features``."""
    bands = tuple(empty_bands(features, hz) for hz in augment.band_limit_hz)
    offsets = None if norm == "none" else clip_offsets(band_means[:, None, :, None], norm)
    t = TrainTransform(n_files=n_files, offsets=offsets, norm=norm, augment=augment,
                       octaves=band_octaves(features), leak_label=1, seed=seed, rank=0,
                       device=torch.device("cpu"), band_limit=BandLimit(bands, band_means))
    t.begin(epoch=epoch, start=0)
    return t


def limited_raw(x: torch.Tensor, bands) -> torch.Tensor:
    """(..., M, T) full-band values -> what the build gives a recording at 2 * nyquist_hz."""
    src = torch.from_numpy(bands.source)
    image = x[..., src, :] + torch.from_numpy(bands.atten_db)[:, None]
    lost = torch.from_numpy(bands.replaced)[:, None]
    return torch.where(lost, torch.clamp(image, min=bands.floor_db), x)


def test_the_empty_band_is_the_resamplers_image_measured_through_the_build_path(
        tiny_features) -> None:
    """For a 2048 Hz logger under 4096 Hz features: the bands centred above 1024 Hz and the
    resampler's transition below it are replaced, each by a mirror image far below the band it
    images (stop band: > 40 dB down), none by the constant log floor."""
    bands = empty_bands(tiny_features, 1024.0)
    centres = band_centers_hz(tiny_features.n_mels, tiny_features.fmin, tiny_features.fmax)
    assert bands.replaced[centres > 1024.0].all()
    assert not bands.replaced[centres < 0.8 * 1024.0].any()
    above = centres > 1024.0
    assert (bands.source[above] < bands.first).all()                 # images of kept bands
    assert float(bands.atten_db[above][-3:].max()) < -40.0           # stop band
    assert float(bands.atten_db[~bands.replaced].max()) == 0.0
    assert bands.floor_db == -100.0 and float(bands.level_db.min()) > -100.0 + 5
    assert empty_bands(tiny_features, 2048.0).first == tiny_features.n_mels   # the model's own


def test_band_limit_replaces_exactly_the_bands_above_the_cutoff(tiny_features) -> None:
    bands = empty_bands(tiny_features, 1024.0)
    x = torch.randn(64, 1, 16, 1, generator=torch.Generator().manual_seed(0)) * 10 - 40
    x[:8] = -95.0                                           # quiet segments: images reach the floor
    got = limiter(tiny_features, BAND)(x, torch.zeros(64, dtype=torch.int64), torch.arange(64) % 8)
    kept = torch.from_numpy(~bands.replaced)
    assert torch.equal(got[:, :, kept], x[:, :, kept])
    torch.testing.assert_close(got, limited_raw(x, bands), atol=1e-5, rtol=0)
    assert bool((got[:8, :, ~kept] == bands.floor_db).any())


@pytest.mark.parametrize("norm", ["none", "clip_level", "clip_band"])
def test_a_band_limited_file_is_normalised_as_that_file_would_be(tiny_features,
                                                                 norm: str) -> None:
    """The band limit comes before the clip normalisation, as it does in a real recording: the
    batch equals normalize_clips of the band-limited file (values kept above the floor)."""
    gen = torch.Generator().manual_seed(1)
    spf = 49
    files = torch.randn(4, spf, 16, 1, generator=gen) * 3 + torch.linspace(10, 0, 16)[:, None]
    x = files.reshape(-1, 1, 16, 1)
    means = clip_offsets(files, "clip_band")                         # (F, M)
    got = limiter(tiny_features, BAND, n_files=4, norm=norm, band_means=means)(
        x, torch.zeros(len(x), dtype=torch.int64), torch.arange(len(x)) // spf)
    want = normalize_clips(limited_raw(files, empty_bands(tiny_features, 1024.0)), norm)
    torch.testing.assert_close(got, want.reshape(x.shape), atol=2e-4, rtol=0)


def test_band_limit_draws_its_share_of_files_per_epoch_under_the_seed(tiny_features) -> None:
    two = dataclasses.replace(BAND, band_limit_prob=0.3, band_limit_hz=(1024.0, 512.0))
    which = limiter(tiny_features, two, n_files=4000).band_limited(0)
    assert abs(float((which >= 0).float().mean()) - 0.3) < 0.03
    assert abs(float((which == 1).float().mean()) - 0.15) < 0.025   # cutoffs drawn evenly
    assert torch.equal(which, limiter(tiny_features, two, n_files=4000).band_limited(0))
    assert not torch.equal(which, limiter(tiny_features, two, n_files=4000).band_limited(1))
    assert not torch.equal(which, limiter(tiny_features, two, n_files=4000, seed=1).band_limited(0))
    x = torch.randn(400, 1, 16, 1, generator=torch.Generator().manual_seed(2)) * 10 - 40
    file_idx = torch.arange(400) % 40
    t = limiter(tiny_features, two, n_files=40, epoch=3)
    got = t(x, torch.zeros(400, dtype=torch.int64), file_idx)
    drawn = (t.band_limited(3) >= 0)[file_idx]                      # (B,)
    assert torch.equal(got[~drawn], x[~drawn])                      # the others: untouched
    assert bool((got[drawn] != x[drawn]).flatten(1).any(dim=1).all())


@pytest.mark.parametrize("norm", ["none", "clip_level", "clip_band"])
@pytest.mark.parametrize("kind", KINDS)
def test_sources_band_limit_only_the_drawn_files_and_prob_0_nothing(
        split: Path, tiny_features, kind: str, norm: str) -> None:
    want = run(source(kind, split, input_norm=norm, augment=NOTHING), epoch=0)
    off = source(kind, split, input_norm=norm,
                 augment=dataclasses.replace(NOTHING, band_limit_hz=(1024.0, 700.0)))
    assert off.transform.band_limit is None
    assert_same(run(off, epoch=0), want)                            # prob 0: nothing drawn
    half = dataclasses.replace(NOTHING, band_limit_prob=0.5, band_limit_hz=(1024.0,))
    src = source(kind, split, input_norm=norm, augment=half)
    got = run(src, epoch=0)
    assert_same(run(source(kind, split, input_norm=norm, augment=half), epoch=0), got)
    drawn = (src.transform.band_limited(0) >= 0)[cat(got, 2)]       # (B,)
    assert 0 < int(drawn.sum()) < len(drawn)
    x, before = cat(got, 0), cat(want, 0).float()
    assert torch.equal(x[~drawn], before[~drawn])
    first = empty_bands(tiny_features, 1024.0).first
    assert bool((x[drawn][:, :, first:] != before[drawn][:, :, first:]).flatten(1).any(1).all())
    if norm != "clip_level":                                        # clip_level moves them all
        assert torch.equal(x[drawn][:, :, :first], before[drawn][:, :, :first])


def _shaped_noise(rate: int, seconds: float, seed: int) -> np.ndarray:
    """Noise of one continuous spectrum at any rate: a low-frequency slope and two resonances."""
    n = int(rate * seconds)
    spectrum = np.fft.rfft(np.random.default_rng(seed).standard_normal(n) * np.sqrt(rate / 8192))
    hz = np.fft.rfftfreq(n, 1 / rate)
    shape = (1 / (1 + (hz / 300) ** 2) + 2 * np.exp(-0.5 * ((hz - 700) / 60) ** 2)
             + np.exp(-0.5 * ((hz - 1900) / 80) ** 2) + 0.02)
    return (0.1 * np.fft.irfft(spectrum * shape, n)).astype(np.float32)


@pytest.mark.parametrize("norm", ["none", "clip_level"])
def test_a_band_limited_file_looks_like_the_same_sound_logged_at_4096_hz(norm: str) -> None:
    """The default features: a sound logged at 8192 Hz and band-limited to 2048 Hz has, band
    by band, the mean log-mel of the same sound logged at 4096 Hz and built: its kept bands
    within 1.5 dB, its lost bands within 2 dB on average (the stop band, 60-70 dB down,
    mostly within 1 dB; an image of a sharp resonance that falls between two bands, where the
    nearest band stands in for the mirror frequency, up to 10 dB off)."""
    features = load_section(PARAMS, "build").features

    def built(rate: int, seed: int) -> torch.Tensor:
        x = _shaped_noise(rate, 8 * features.clip_s, seed)
        source = waveform_source("x", x, rate)
        plan = plan_clips(source.frames, rate, features, None, 1.0)
        return torch.from_numpy(clip_features(read_clips(source, plan), features))

    full, logged = built(features.sample_rate, 0), built(4096, 1)    # (C, L, S, M, T)
    files = full.reshape(len(full), -1, features.n_mels, 1)
    augment = dataclasses.replace(BAND, band_limit_hz=(2048.0,))
    t = limiter(features, augment, n_files=len(full), norm=norm,
                band_means=clip_offsets(files, "clip_band"))
    x = files.reshape(-1, 1, features.n_mels, 1)
    got = t(x, torch.zeros(len(x), dtype=torch.int64),
            torch.arange(len(x)) // files.shape[1]).reshape(files.shape).mean(dim=(0, 1, 3))
    want = normalize_clips(logged, norm).reshape(files.shape).mean(dim=(0, 1, 3))
    error = (got - want).abs()
    first = empty_bands(features, 2048.0).first
    assert float(error[:first].max()) < 1.5
    assert float(error[first:].mean()) < 2.0 and float(error[first:].max()) < 10.0
    assert float(error[first:].median()) < 1.0


def test_band_limit_params_are_checked(tmp_path: Path) -> None:
    raw = yaml.safe_load(PARAMS.read_text())
    for value, message in [([1000.3], "1000.3 is not the Nyquist frequency of an integer"),
                           ([], "needs at least one frequency")]:
        raw["train"]["augment"].update(band_limit_prob=0.5, band_limit_hz=value)
        path = tmp_path / "params.yaml"
        path.write_text(yaml.safe_dump(raw))
        with pytest.raises(ConfigError, match=rf"train\.augment\.band_limit_hz: {message}"):
            load_section(path, "train")

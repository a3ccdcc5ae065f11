"""Training-batch normalisation and augmentation: off is the plain path bit for bit, on changes
only the training batches, reproducibly and resumably; each operation on a table of cases.

The tiny split stores each segment's identity in its data (mel bin 0 = file row, bin 1 = the
segment's index inside the file), as in test_batches, so plain batches name every row.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from leakpipe.audio.clips import plan_clips
from leakpipe.audio.io import read_clips, waveform_source
from leakpipe.config import AugmentConfig, ConfigError, load_section
from leakpipe.constants import KNOWN_CLASSES
from leakpipe.data.augment import BandLimit, TrainTransform, band_octaves
from leakpipe.data.batches import make_train_source
from leakpipe.data.empty_band import empty_bands
from leakpipe.data.input_norm import clip_offsets, normalize_clips
from leakpipe.data.reader import open_split
from leakpipe.data.resident_source import ResidentSource
from leakpipe.data.split_info import load_resident
from leakpipe.data.stream_source import StreamSource
from leakpipe.data.writer import SplitWriter
from leakpipe.detector import load_network
from leakpipe.features.mel import band_centers_hz, clip_features
from leakpipe.preload.plan import read_plan
from leakpipe.train.inputs import prepare_training
from leakpipe.train.interrupt import StopRequested
from leakpipe.train.outputs import input_example, save_model
from tests.conftest import PARAMS
from tests.test_train_signals import _fit
from tests.test_train_stage import Workspace, make_workspace

N_FILES = 20
CHUNK_MB = 0.005      # 3 files per chunk with the tiny features -> 7 chunks
BUFFER_CHUNKS = 2
BATCH = 64
SEED = 11
KINDS = ("ram", "stream")
DEFAULTS = load_section(PARAMS, "train").augment
ON = dataclasses.replace(DEFAULTS, enabled=True)
OFF = dataclasses.replace(DEFAULTS, enabled=False)
NOTHING = dataclasses.replace(ON, gain_db=0.0, tilt_db_per_octave=0.0, eq_bumps=0, mix_prob=0.0,
                              freq_masks=0)


@pytest.fixture
def split(tmp_path: Path, tiny_features) -> Path:
    """20 files, labels cycling through KNOWN_CLASSES (4 LEAK files), ids written in the data."""
    path = tmp_path / "train.h5"
    n_long, n_short = tiny_features.segment_shape[:2]
    rng = np.random.default_rng(0)
    with SplitWriter(path, "train", tiny_features, KNOWN_CLASSES, chunk_mb=CHUNK_MB) as writer:
        for row in range(N_FILES):
            mel = rng.normal(-40, 10, (1, *tiny_features.segment_shape)).astype(np.float16)
            mel[0, :, :, 0, 0] = row
            mel[0, :, :, 1, 0] = np.arange(n_long * n_short).reshape(n_long, n_short)
            writer.append(mel, row % len(KNOWN_CLASSES), f"rec{row}.wav", f"site{row % 4}")
    return path


def source(kind: str, path: Path, **kw) -> ResidentSource | StreamSource:
    return make_train_source(path, kind, BATCH, seed=SEED, binary=True,
                             buffer_chunks=BUFFER_CHUNKS, **kw)


def plain(kind: str, path: Path) -> ResidentSource | StreamSource:
    """Today's sources, built without any of the new arguments."""
    if kind == "ram":
        return ResidentSource(load_resident(path, "ram", "cpu", True), BATCH, seed=SEED)
    return StreamSource(path, BATCH, seed=SEED, binary=True, buffer_chunks=BUFFER_CHUNKS)


def run(src, epoch: int | None = None) -> list[tuple[torch.Tensor, ...]]:
    if epoch is not None:
        src.set_epoch(epoch)
    return [tuple(t.clone() for t in batch) for batch in src]


def cat(batches: list[tuple[torch.Tensor, ...]], i: int) -> torch.Tensor:
    return torch.cat([b[i] for b in batches])


def segment_ids(x: torch.Tensor, spf: int) -> torch.Tensor:
    return x[:, 0, 0, 0].long() * spf + x[:, 0, 1, 0].long()


def assert_same(got: list[tuple[torch.Tensor, ...]], want: list[tuple[torch.Tensor, ...]]) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        for s, t in zip(a, b, strict=True):
            assert s.dtype == t.dtype and torch.equal(s, t)


# -- off / on -------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_off_gives_todays_batches_bit_for_bit(split: Path, kind: str) -> None:
    want = run(plain(kind, split), epoch=2)
    off = source(kind, split, input_norm="none", augment=OFF)            # enabled: false
    assert off.transform is None
    assert_same(run(off, epoch=2), want)
    assert_same(run(source(kind, split), epoch=2), want)                 # arguments left out
    with open_split(split) as data:                                      # and the file's values
        mel = torch.from_numpy(data.mel[:])
    spf = mel.shape[1] * mel.shape[2]
    x = cat(want, 0)
    assert x.dtype == torch.float16
    assert torch.equal(x[:, 0], mel.reshape(-1, *mel.shape[-2:])[segment_ids(x, spf)])


@pytest.mark.parametrize("kind", KINDS)
def test_on_changes_the_values_only(split: Path, kind: str) -> None:
    want = run(plain(kind, split), epoch=1)
    got = run(source(kind, split, augment=ON), epoch=1)
    assert len(got) == len(want)
    assert torch.equal(cat(got, 1), cat(want, 1)) and torch.equal(cat(got, 2), cat(want, 2))
    x, before = cat(got, 0), cat(want, 0).float()
    assert x.dtype == torch.float32 and bool(torch.isfinite(x).all())
    changed = (x != before).flatten(1).any(dim=1)
    assert changed.float().mean() > 0.9                                 # every file has a gain


@pytest.mark.parametrize("kind", KINDS)
def test_augmentation_is_seeded_per_epoch_and_resumes_exactly(split: Path, kind: str) -> None:
    first = run(source(kind, split, augment=ON, input_norm="clip_level"), epoch=1)
    again = source(kind, split, augment=ON, input_norm="clip_level")
    assert_same(run(again, epoch=1), first)
    assert not torch.equal(cat(run(again, epoch=2), 0), cat(first, 0))
    again.load_state_dict({"epoch": 1, "position": 3})
    assert_same(run(again), first[3:])


# -- normalisation and the channel (gain / EQ) ---------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_train_batches_normalise_like_the_evaluation_of_their_files(split: Path,
                                                                    kind: str) -> None:
    spf = plain(kind, split).info.segments_per_file
    ids = segment_ids(cat(run(plain(kind, split), epoch=0), 0), spf)
    with open_split(split) as data:
        mel = torch.from_numpy(data.mel[:])
    want = normalize_clips(mel, "clip_band").reshape(-1, *mel.shape[-2:])[ids]
    x = cat(run(source(kind, split, input_norm="clip_band"), epoch=0), 0)
    assert torch.equal(x[:, 0], want)


@pytest.mark.parametrize(("norm", "channel"), [
    ("clip_level", {"gain_db": 10.0}),
    ("clip_band", {"gain_db": 10.0, "tilt_db_per_octave": 6.0, "eq_bumps": 3}),
])
@pytest.mark.parametrize("kind", KINDS)
def test_a_channel_the_norm_removes_cancels_bit_for_bit(split: Path, kind: str, norm: str,
                                                        channel: dict) -> None:
    augment = dataclasses.replace(NOTHING, **channel)
    want = run(source(kind, split, input_norm=norm), epoch=0)
    assert_same(run(source(kind, split, input_norm=norm, augment=augment), epoch=0), want)


def test_gain_is_one_draw_per_file_and_epoch(split: Path) -> None:
    gain = dataclasses.replace(NOTHING, gain_db=10.0)
    want = run(plain("ram", split), epoch=0)
    got = run(source("ram", split, augment=gain), epoch=0)
    shift = (cat(got, 0) - cat(want, 0).float())[:, 0]                  # (N, M, T)
    files = cat(got, 2)
    per_file = torch.stack([shift[files == f].flatten() for f in range(N_FILES)])
    torch.testing.assert_close(per_file, per_file[:, :1].expand_as(per_file))
    assert float(per_file.abs().max()) <= 10.0 and float(per_file.std()) > 1.0
    other = cat(run(source("ram", split, augment=gain), epoch=1), 0)
    assert not torch.equal(other.sort(dim=0).values, cat(got, 0).sort(dim=0).values)


def test_tilt_and_bumps_keep_their_band_mean_under_clip_level(split: Path) -> None:
    eq = dataclasses.replace(NOTHING, gain_db=10.0, tilt_db_per_octave=3.0, eq_bumps=2)
    want = cat(run(source("ram", split, input_norm="clip_level"), epoch=0), 0)
    got = cat(run(source("ram", split, input_norm="clip_level", augment=eq), epoch=0), 0)
    offset = (got - want)[:, 0, :, 0]                                    # (N, M)
    assert float(offset.abs().max()) > 1.0
    torch.testing.assert_close(offset.mean(dim=1), torch.zeros(len(offset)), atol=1e-4, rtol=0)


# -- mixing and masks, on hand-made batches ------------------------------------------------------

def transform(augment: AugmentConfig, n_mels: int) -> TrainTransform:
    t = TrainTransform(n_files=8, offsets=None, norm="none", augment=augment,
                       octaves=torch.zeros(n_mels), leak_label=1, seed=0,
                       rank=0, device=torch.device("cpu"))
    t.begin(epoch=0, start=0)
    return t


def test_mixing_power_adds_the_non_leak_segment_at_the_drawn_snr() -> None:
    mix = dataclasses.replace(NOTHING, mix_prob=1.0, mix_snr_min_db=5.0, mix_snr_max_db=5.0)
    x = torch.tensor([[0.0, 10.0, -20.0], [3.0, 3.0, 3.0], [20.0, -40.0, -40.0], [1.0, 2.0, 3.0]])
    y = torch.tensor([1, 1, 0, 1])                                       # row 2: the only NOLEAK
    got = transform(mix, 3)(x[:, None, :, None], y, torch.arange(4))[:, 0, :, 0]
    a, b = x.double().numpy(), x[2].double().numpy()
    g = a.mean(axis=1, keepdims=True) - b.mean() - 5.0                  # noise level for 5 dB SNR
    want = 10 * np.log10(10 ** (a / 10) + 10 ** ((b + g) / 10))
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-4)
    only_leak = torch.ones(4, dtype=torch.int64)                         # nothing to mix with
    same = transform(mix, 3)(x[:, None, :, None], only_leak, torch.arange(4))
    assert torch.equal(same[:, 0, :, 0], x)


@pytest.mark.parametrize("value", ["mean", "min"])
def test_frequency_masks_set_band_ranges_to_the_segment_mean_or_min(value: str) -> None:
    masks = dataclasses.replace(NOTHING, freq_masks=2, freq_mask_bands=3, freq_mask_value=value)
    x = torch.randn(256, 1, 16, 1, generator=torch.Generator().manual_seed(0)) * 10
    got = transform(masks, 16)(x, torch.zeros(256, dtype=torch.int64), torch.zeros(256).long())
    fill = (x.mean(dim=2) if value == "mean" else x.amin(dim=2))[:, :, 0]   # (B, 1)
    changed = got[:, 0, :, 0] != x[:, 0, :, 0]                           # (B, M)
    assert torch.equal(got[:, 0, :, 0][changed], fill.expand(-1, 16)[changed])
    assert int(changed.sum(dim=1).max()) <= 6 and changed.any(dim=1).float().mean() > 0.5


# -- the training path: validation untouched, resume exact ------------------------------------

def _workspace(root: Path, mode: str) -> Workspace:
    augment = yaml.safe_load(PARAMS.read_text())["train"]["augment"]
    return make_workspace(root, files_per_class=4, mode=mode,
                          train={"input_norm": "clip_level",
                                 "augment": {**augment, "enabled": True}})


def _batches_per_epoch(ws: Workspace) -> int:
    data = prepare_training(ws.data["train"], ws.data["val"], read_plan(ws.plan),
                            load_section(ws.params, "train"), torch.device("cpu"))
    data.close()
    return len(data.train_source)


def test_validation_data_is_never_augmented(tmp_path: Path) -> None:
    ws = _workspace(tmp_path, "ram")
    cfg = load_section(ws.params, "train")
    plain_cfg = dataclasses.replace(cfg, augment=OFF)
    augmented = prepare_training(ws.data["train"], ws.data["val"], read_plan(ws.plan), cfg,
                                 torch.device("cpu"))
    base = prepare_training(ws.data["train"], ws.data["val"], read_plan(ws.plan), plain_cfg,
                            torch.device("cpu"))
    try:
        for (x_a, y_a, _), (x_b, y_b, _) in zip(augmented.val.batches, base.val.batches,
                                                strict=True):
            assert torch.equal(x_a, x_b) and torch.equal(y_a, y_b)
        example = input_example(augmented.val)                          # (4, 1, M, T)
        with open_split(ws.data["val"]) as val:
            first = normalize_clips(torch.from_numpy(val.mel[:1]).float(), "clip_level")
        assert np.array_equal(example, first.reshape(-1, 1, *first.shape[-2:])[:4].numpy())
        assert augmented.train_source.transform.augment is not None
        assert base.train_source.transform.augment is None               # clip_level only
        x_aug = next(iter(augmented.train_source.epoch(0)))[0]
        x_base = next(iter(base.train_source.epoch(0)))[0]
        assert not torch.equal(x_aug, x_base)
    finally:
        augmented.close()
        base.close()


@pytest.mark.parametrize("mode", ["ram", "stream"])
def test_fit_with_augmentation_stopped_mid_epoch_resumes_to_the_same_result(
        tmp_path: Path, mode: str) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ws = _workspace(tmp_path, mode)
        whole = _fit(ws, tmp_path / "whole")
        steps = _batches_per_epoch(ws)
        with pytest.raises(StopRequested) as stopped:      # polls: 1 + steps, 1, then 5 steps
            _fit(ws, tmp_path / "split", stop_after=steps + 6)
        partial = stopped.value.checkpoint
        assert partial is not None and partial.name == "partial.pt"
        resumed = _fit(ws, tmp_path / "split")
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(False)
    strip = [{k: v for k, v in h.items() if not k.startswith("perf/")} for h in whole.history]
    assert strip == [{k: v for k, v in h.items() if not k.startswith("perf/")}
                     for h in resumed.history]
    for key, value in whole.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[key], value), key
    cfg, model_cfg = load_section(ws.params, "train"), load_section(ws.params, "model")
    data = prepare_training(ws.data["train"], ws.data["val"], read_plan(ws.plan), cfg,
                            torch.device("cpu"))
    data.close()
    save_model(tmp_path / "model.pt", whole, data, model_cfg, cfg)
    assert load_network(tmp_path / "model.pt").input_norm == "clip_level"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("band_limit_prob", [0.0, 0.5])
@pytest.mark.parametrize("placement", ["device", "ram", "stream"])
def test_cuda_augmented_batches_equal_cpu_batches(split: Path, placement: str,
                                                  band_limit_prob: float) -> None:
    """The side-stream finish draws the CPU's numbers: the same batches up to float rounding."""
    augment = dataclasses.replace(ON, band_limit_prob=band_limit_prob, band_limit_hz=(1024.0,))
    kw = {"augment": augment, "input_norm": "clip_level"}
    on_cpu = run(source("ram" if placement != "stream" else "stream", split, **kw), epoch=1)
    on_gpu = run(source(placement, split, device="cuda", **kw), epoch=1)
    assert all(t.is_cuda for t in on_gpu[0])
    for got, want in zip(on_gpu, on_cpu, strict=True):
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a.cpu(), b, atol=1e-4, rtol=1e-5)


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

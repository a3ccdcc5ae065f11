"""Training-batch normalisation and augmentation: off is the plain path bit for bit, on changes
only the training batches, reproducibly and resumably; each operation on a table of cases.

The tiny split (tests/helpers_augment.py) stores each segment's identity in its data (mel bin
0 = file row, bin 1 = the segment's index inside the file), as in test_batches, so plain batches
name every row. Band limiting is tested in test_augment_band_limit.py.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from leakpipe.config import AugmentConfig, load_section
from leakpipe.data.augment import TrainTransform
from leakpipe.data.input_norm import normalize_clips
from leakpipe.data.reader import open_split
from leakpipe.detector import load_network
from leakpipe.preload.plan import read_plan
from leakpipe.train.inputs import prepare_training
from leakpipe.train.interrupt import StopRequested
from leakpipe.train.outputs import input_example, save_model
from tests.conftest import PARAMS
from tests.helpers_augment import (
    KINDS,
    N_FILES,
    NOTHING,
    OFF,
    ON,
    assert_same,
    cat,
    plain,
    run,
    segment_ids,
    source,
    write_split,
)
from tests.helpers_close import EPS32
from tests.test_train_signals import _fit
from tests.test_train_stage import Workspace, make_workspace


@pytest.fixture
def split(tmp_path: Path, tiny_features) -> Path:
    """20 files, labels cycling through KNOWN_CLASSES (4 LEAK files), ids written in the data."""
    return write_split(tmp_path / "train.h5", tiny_features)


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
    # the transform's own mean, of its own pieces of the batch: a float32 sum of 16 values
    # perhaps in another order, a few ulp of the largest (a wrong fill is off by dB)
    torch.testing.assert_close(got[:, 0, :, 0][changed], fill.expand(-1, 16)[changed],
                               rtol=0, atol=16 * EPS32 * float(x.abs().max()))
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
    strip = [{k: v for k, v in h.items() if not k.startswith("vitals/")} for h in whole.history]
    assert strip == [{k: v for k, v in h.items() if not k.startswith("vitals/")}
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

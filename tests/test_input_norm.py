"""Per-clip input normalisation: the pure functions on small tables, the offset tables of a
split, and evaluation batches normalised per file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from leakpipe.data.batches import make_eval_batches
from leakpipe.data.input_norm import (
    clip_offsets,
    normalize_clips,
    normalize_segments,
    resident_offsets,
    split_offsets,
)
from leakpipe.data.reader import open_split
from leakpipe.data.split_info import load_resident
from tests.helpers_close import assert_floats_close
from tests.helpers_h5 import write_split

# two clips of (L=1, S=2, M=3, T=1): band values per segment
CLIPS = torch.tensor([[[[1.0, 2.0, 6.0], [3.0, 4.0, 8.0]]],
                      [[[0.0, 0.0, 0.0], [-2.0, 4.0, 10.0]]]]).unsqueeze(-1)   # (2, 1, 2, 3, 1)


@pytest.mark.parametrize(("norm", "expected"), [
    ("none", [[0, 0, 0], [0, 0, 0]]),
    ("clip_level", [[4, 4, 4], [2, 2, 2]]),
    ("clip_band", [[2, 3, 7], [-1, 2, 5]]),
])
def test_clip_offsets_on_a_small_table(norm: str, expected: list[list[float]]) -> None:
    offsets = clip_offsets(CLIPS, norm)
    assert offsets.dtype == torch.float32 and offsets.shape == (2, 3)
    torch.testing.assert_close(offsets, torch.tensor(expected, dtype=torch.float32))


def test_normalized_clips_have_zero_means() -> None:
    assert normalize_clips(CLIPS, "none") is CLIPS
    level = normalize_clips(CLIPS, "clip_level")
    band = normalize_clips(CLIPS, "clip_band")
    assert level.shape == band.shape == CLIPS.shape
    torch.testing.assert_close(level.mean(dim=(1, 2, 3, 4)), torch.zeros(2))
    torch.testing.assert_close(band.mean(dim=(1, 2, 4)), torch.zeros(2, 3))
    torch.testing.assert_close(band[0, 0, :, :, 0], torch.tensor([[-1.0, -1, -1], [1, 1, 1]]))


def test_gain_and_band_offsets_cancel_as_documented() -> None:
    rng = np.random.default_rng(0)
    clips = torch.from_numpy(rng.normal(-40, 10, (3, 4, 5, 8, 1)).astype(np.float32))
    gain = torch.tensor([12.0, -7.5, 3.0]).view(3, 1, 1, 1, 1)           # per clip
    eq = torch.linspace(-6, 6, 8).view(1, 1, 1, 8, 1)                    # per band
    for norm in ("clip_level", "clip_band"):                             # a gain cancels
        torch.testing.assert_close(normalize_clips(clips + gain, norm),
                                   normalize_clips(clips, norm), atol=1e-4, rtol=0)
    torch.testing.assert_close(normalize_clips(clips + gain + eq, "clip_band"),
                               normalize_clips(clips, "clip_band"), atol=1e-4, rtol=0)
    level = normalize_clips(clips + eq, "clip_level") - normalize_clips(clips, "clip_level")
    torch.testing.assert_close(level, eq.expand_as(level) - eq.mean(), atol=1e-4, rtol=0)


def test_segments_of_whole_files_normalise_like_their_clips() -> None:
    segments = CLIPS.reshape(-1, 1, 3, 1)                               # (4, 1, M, T)
    got = normalize_segments(segments, 2, "clip_band")
    torch.testing.assert_close(got, normalize_clips(CLIPS, "clip_band").reshape(-1, 1, 3, 1))
    assert normalize_segments(segments, 2, "none") is segments
    with pytest.raises(ValueError, match="input_norm 'pcen'"):
        normalize_clips(CLIPS, "pcen")


@pytest.mark.parametrize("norm", ["clip_level", "clip_band"])
def test_split_offsets_resident_and_streamed_agree_within_rounding(tmp_path: Path,
                                                               norm: str) -> None:
    path = write_split(tmp_path / "val.h5", "val", recordings_per_class=3)
    with open_split(path) as split:
        direct = clip_offsets(torch.from_numpy(split.mel[:]), norm)      # (F, M)
    data = load_resident(path, "ram", "cpu", binary=True)
    # the same means over differently sized blocks (streamed) or one tensor (resident): the
    # reductions may sum in another order, so float32 rounding of the largest offset
    assert_floats_close(split_offsets(path, norm).numpy(), direct.numpy(), "streamed")
    assert_floats_close(resident_offsets(data.segments, data.info.segments_per_file,
                                         norm).numpy(), direct.numpy(), "resident")


@pytest.mark.parametrize("placement", ["ram", "stream"])
def test_eval_batches_are_normalised_per_file(tmp_path: Path, placement: str) -> None:
    path = write_split(tmp_path / "val.h5", "val", recordings_per_class=2)
    with open_split(path) as split:
        mel = torch.from_numpy(split.mel[:])                            # (F, L, S, M, T)
    want = normalize_clips(mel, "clip_band").reshape(-1, 1, *mel.shape[-2:])
    batches = make_eval_batches(path, placement, 200, binary=True, input_norm="clip_band")
    got = torch.cat([x for x, _, _ in batches])
    assert got.dtype == torch.float32
    assert_floats_close(got.numpy(), want.numpy(), placement)   # batched vs whole: rounding
    plain = torch.cat([x for x, _, _ in make_eval_batches(path, placement, 200, binary=True)])
    assert plain.dtype == torch.float16
    assert torch.equal(plain, mel.reshape(-1, 1, *mel.shape[-2:]))

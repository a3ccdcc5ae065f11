"""Batch sources for training and evaluation: one index operation per batch, no worker processes.

The original trainer starved its GPU: a DataLoader with up to 20 workers read one segment per
``__getitem__`` from HDF5 and collated them, so the GPU waited on Python. Here a batch is
never built sample by sample:

* ``ResidentSource`` (placements ``device`` and ``ram``, ``leakpipe.data.resident_source``):
  every segment of a split lives in one contiguous tensor (N, 1, n_mels, n_frames); a batch is
  one index operation (``host_take`` in RAM, ``index_select`` on the device) with a slice of a
  seeded per-epoch permutation. On CUDA with ``ram`` the tensor is pinned and the next batch is
  copied on a side stream while the current one computes.
* ``StreamSource`` (placement ``stream``, ``leakpipe.data.stream_source``): one background
  thread reads chunk-aligned blocks of whole files in a shuffled chunk order, ``buffer_chunks``
  chunks (a window) at a time; segments are shuffled within the window and the next window is
  read while this one is consumed.
* ``FileOrderBatches`` (``leakpipe.data.file_order``): every segment exactly once, in file
  order, batches of whole files (validation and evaluation vote per file).

All yield ``(x, y, file_idx)``: x (B, 1, n_mels, n_frames) on the target device, y (B,) int64
task labels (a segment inherits its file's label), file_idx (B,) int64 row of the file in the
split. Segment s belongs to file s // (n_long * n_short). Each source records in
``wait_times`` the seconds the consumer waited for each batch of the current pass.

The other modules: ``leakpipe.data.split_info`` (``SplitInfo``, ``read_split_info``,
``ResidentData``, ``load_resident``), ``leakpipe.data.feed`` (seeds, orders, shards,
``DeviceFeed``, ``timed``, ``EpochState``, ``host_take``), ``leakpipe.data.background`` (the
reader thread, ``read_file_block``); the placement names are in ``leakpipe.constants``. This
module holds the factories that pick a source for a placement.
"""

from __future__ import annotations

from pathlib import Path

import torch

from leakpipe.config import AugmentConfig
from leakpipe.constants import PLACEMENT_STREAM, PLACEMENTS
from leakpipe.data.augment import make_transform
from leakpipe.data.file_order import FileOrderBatches
from leakpipe.data.input_norm import NORM_NONE
from leakpipe.data.resident_source import ResidentSource
from leakpipe.data.split_info import (
    ResidentData,
    SplitInfo,
    check_placement,
    load_resident,
    read_split_info,
)
from leakpipe.data.stream_source import DEFAULT_BUFFER_CHUNKS, StreamSource

TrainSource = ResidentSource | StreamSource


def make_train_source(path: Path | str, placement: str, batch_size: int, *, seed: int,
                      binary: bool, device: torch.device | str = "cpu",
                      dtype: torch.dtype | None = None, leak_oversample: int = 1,
                      rank: int = 0, world_size: int = 1, drop_last: bool = False,
                      buffer_chunks: int = DEFAULT_BUFFER_CHUNKS, input_norm: str = NORM_NONE,
                      augment: AugmentConfig | None = None) -> TrainSource:
    """The training source for a placement chosen by the preload stage.

    ``input_norm`` and ``augment`` (``train.input_norm`` / ``train.augment``) transform each
    batch on the device (``leakpipe.data.augment``); by default batches are as stored.
    """
    check_placement(placement, PLACEMENTS)
    if placement == PLACEMENT_STREAM:
        info = read_split_info(path, binary)
        transform = make_transform(info, norm=input_norm, augment=augment, seed=seed,
                                   rank=rank, device=device)
        return StreamSource(path, batch_size, seed=seed, binary=binary, device=device,
                            dtype=dtype, buffer_chunks=buffer_chunks,
                            leak_oversample=leak_oversample, rank=rank, world_size=world_size,
                            drop_last=drop_last, transform=transform)
    data = load_resident(path, placement, device, binary)
    transform = make_transform(data.info, norm=input_norm, augment=augment, seed=seed,
                               rank=rank, device=device, segments=data.segments)
    return ResidentSource(data, batch_size, seed=seed, dtype=dtype,
                          leak_oversample=leak_oversample, rank=rank, world_size=world_size,
                          drop_last=drop_last, transform=transform)


def make_eval_batches(path: Path | str, placement: str, max_segments: int, *, binary: bool,
                      device: torch.device | str = "cpu", dtype: torch.dtype | None = None,
                      input_norm: str = NORM_NONE) -> FileOrderBatches:
    """File-order batches of a split for validation / evaluation, for a placement."""
    check_placement(placement, PLACEMENTS)
    if placement == PLACEMENT_STREAM:
        source: ResidentData | SplitInfo = read_split_info(path, binary)
    else:
        source = load_resident(path, placement, device, binary)
    return FileOrderBatches(source, max_segments, device=device, dtype=dtype,
                            input_norm=input_norm)

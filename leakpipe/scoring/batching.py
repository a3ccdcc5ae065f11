"""Batches of whole files for scoring, sized from the memory free now.

A batch's size is a segment budget: what fits in the memory left after the split was placed
(the preload plan's ``safety`` and reserves), capped by ``max_segments`` on CUDA and
``cpu_max_segments`` on CPU (on CPU a pass of a few files already keeps every core busy and
larger passes only fall out of the caches: benchmarks/perf/bench_evaluate.py). Never a fixed number.
Files are never split, so votes stay per file.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from leakpipe.config import ModelConfig
from leakpipe.constants import PLACEMENT_DEVICE, PLACEMENT_RAM, PLACEMENT_STREAM
from leakpipe.data.file_order import FileOrderBatches
from leakpipe.data.input_norm import NORM_NONE, normalize_clips
from leakpipe.data.split_info import load_resident, read_split_info
from leakpipe.preload.budget import measure_budget
from leakpipe.scoring.score import Batch

log = logging.getLogger(__name__)

FLOAT_BYTES = 4            # activations are float32 (an upper bound under autocast)
ACTIVATION_HEADROOM = 2.0  # allocator rounding, cuDNN workspaces, the batch being prepared
POOL_STEPS = 2             # LeakCNN halves the mel axis twice (leakpipe.model.POOL)


@dataclass(frozen=True)
class BatchLimits:
    """Caps and memory margins of scoring batches (from params or the detector)."""

    max_segments: int          # most segments per forward pass on CUDA
    cpu_max_segments: int      # most segments per forward pass on CPU
    safety: float              # share of the free memory batches may use
    host_reserve_mb: float     # host RAM kept free
    device_reserve_mb: float   # GPU memory kept free

    def cap(self, device: torch.device) -> int:
        """The most segments per forward pass on ``device``."""
        return self.max_segments if device.type == "cuda" \
            else min(self.max_segments, self.cpu_max_segments)


def activation_bytes(model_cfg: ModelConfig, n_mels: int, n_frames: int) -> int:
    """Bytes one segment needs in an inference forward pass of LeakCNN (with headroom)."""
    c1, c2, c3 = model_cfg.widths
    area = n_mels * n_frames
    values = (area * (2 if model_cfg.level_input else 1)   # float32 input (level_input: - level)
              + (c1 + c2) * area                           # conv1, conv2 (ReLU in place)
              + (c2 + c3) * area // POOL_STEPS             # pool, conv3
              + c3 * area // POOL_STEPS**2                 # pool
              + c3 * model_cfg.pool_h + model_cfg.hidden)  # adaptive pool, fc
    return int(values * FLOAT_BYTES * ACTIVATION_HEADROOM)


def batch_segments(model_cfg: ModelConfig, mel_shape: tuple[int, int], device: torch.device,
                   limits: BatchLimits) -> int:
    """Segments per forward pass that fit in the memory free now (at least 1, at most the cap)."""
    budget = measure_budget()
    if device.type == "cuda":
        usable = budget.device_usable(limits.safety, limits.device_reserve_mb)
    else:
        usable = budget.host_usable(limits.safety, limits.host_reserve_mb)
    fits = usable // activation_bytes(model_cfg, *mel_shape)
    if fits < 1:
        log.warning("scoring: free memory allows less than one segment per batch "
                    "(%d bytes usable); going on with one file per batch", usable)
    return int(max(1, min(limits.cap(device), fits)))


def scoring_placement(placement: str, device: torch.device) -> str:
    """The plan's placement, with ``device`` falling back to ``ram`` when running on CPU."""
    if placement == PLACEMENT_DEVICE and device.type != "cuda":
        return PLACEMENT_RAM
    return placement


def open_batches(path: Path, placement: str, model_cfg: ModelConfig, device: torch.device,
                 limits: BatchLimits, binary: bool, input_norm: str = NORM_NONE,
                 dtype: torch.dtype | None = None) -> FileOrderBatches:
    """Place a split as planned, then size its file-order batches from the memory left;
    each batch normalised per file by ``input_norm``."""
    placement = scoring_placement(placement, device)
    if placement == PLACEMENT_STREAM:
        source: Any = read_split_info(path, binary)
        info = source
    else:
        source = load_resident(path, placement, device, binary)
        info = source.info
    segments = batch_segments(model_cfg, info.mel_shape, device, limits)
    batches = FileOrderBatches(source, segments, device=device, input_norm=input_norm,
                               dtype=dtype)
    log.info("%s: %d files, %s placement, %d files (%d segments) per forward pass", path,
             info.n_files, placement, batches.files_per_batch,
             batches.files_per_batch * info.segments_per_file)
    return batches


def array_batches(mel: np.ndarray, max_segments: int, input_norm: str = NORM_NONE,
                  labels: np.ndarray | None = None) -> Iterator[Batch]:
    """File-order batches of an in-memory (F, L, S, M, T) array (``leakpipe predict``).

    Each file is normalised by ``input_norm`` as in training; ``labels`` (F,) default to 0.
    """
    n_files, spf = mel.shape[0], mel.shape[1] * mel.shape[2]
    per_batch = max(1, max_segments // spf)
    file_labels = torch.zeros(n_files, dtype=torch.int64) if labels is None \
        else torch.as_tensor(labels, dtype=torch.int64)
    for a in range(0, n_files, per_batch):
        block = normalize_clips(torch.from_numpy(mel[a:a + per_batch]), input_norm)
        files = torch.arange(a, a + len(block)).repeat_interleave(spf)  # (B,)
        yield (block.reshape(-1, 1, *mel.shape[-2:]),                # (B, 1, M, T)
               file_labels.index_select(0, files), files)

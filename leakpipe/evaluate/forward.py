"""Run a detector over every file of a split in large batches of whole files.

Batches come from ``FileOrderBatches`` (resident in RAM / on the GPU, or streamed from HDF5 with
read-ahead, as the preload plan placed the data). Their size is a segment budget derived from
the memory free now and the preload plan's safety and reserves, capped by
``evaluate.max_batch_segments`` (``cpu_max_batch_segments`` on CPU); never a fixed number. The
network runs in its exact inference form (``leakpipe.inference``). Outputs stay on the device
until the end of the split, then come back in one transfer per output.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from leakpipe.config import ModelConfig
from leakpipe.constants import PLACEMENT_DEVICE, PLACEMENT_RAM, PLACEMENT_STREAM
from leakpipe.data.file_order import FileOrderBatches
from leakpipe.data.input_norm import NORM_NONE
from leakpipe.data.split_info import load_resident, read_split_info
from leakpipe.errors import ConfigError
from leakpipe.evaluate.voting import ProbMode, segment_leak_prob
from leakpipe.preload.budget import measure_budget
from leakpipe.train.loop import Precision, to_device

log = logging.getLogger(__name__)

FLOAT_BYTES = 4            # activations are float32 (an upper bound under autocast)
ACTIVATION_HEADROOM = 2.0  # allocator rounding, cuDNN workspaces, the batch being prepared
POOL_STEPS = 2             # LeakCNN halves the mel axis twice (leakpipe.model.POOL)


@dataclass(frozen=True)
class SplitScores:
    """Model outputs for every file of one split, in file order."""

    seg_probs: np.ndarray          # (F, L, S) leak probability per short segment
    class_probs: np.ndarray        # (F, C) mean class softmax per file
    seg_pred: np.ndarray           # (F * L * S,) argmax class per short segment
    labels: np.ndarray             # (F,) task labels
    class_names: tuple[str, ...]   # the task's classes
    seconds: float
    batch_files: int               # files per forward pass

    @property
    def n_files(self) -> int:
        return int(self.seg_probs.shape[0])


def resolve_device(name: str, key: str = "evaluate.device") -> torch.device:
    """'auto' -> cuda when available, else cpu; 'cuda' without CUDA is a ``ConfigError``."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{key}: 'cuda' asked for, but no CUDA device is available")
    return torch.device(name)


def activation_bytes(model_cfg: ModelConfig, n_mels: int, n_frames: int) -> int:
    """Bytes one segment needs in an inference forward pass of LeakCNN (with headroom)."""
    c1, c2, c3 = model_cfg.widths
    area = n_mels * n_frames
    values = (area                                         # float32 copy of the input
              + (c1 + c2) * area                           # conv1, conv2 (ReLU in place)
              + (c2 + c3) * area // POOL_STEPS             # pool, conv3
              + c3 * area // POOL_STEPS**2                 # pool
              + c3 * model_cfg.pool_h + model_cfg.hidden)  # adaptive pool, fc
    return int(values * FLOAT_BYTES * ACTIVATION_HEADROOM)


def batch_segments(model_cfg: ModelConfig, mel_shape: tuple[int, int], device: torch.device,
                   memory: Mapping[str, Any], cap: int) -> int:
    """Segments per forward pass that fit in the memory free now (at least 1, at most cap).

    ``memory`` holds the preload plan's ``safety``, ``host_reserve_mb`` and
    ``device_reserve_mb``; the budget is measured after the split was placed.
    """
    budget = measure_budget()
    if device.type == "cuda":
        usable = budget.device_usable(memory["safety"], memory["device_reserve_mb"])
    else:
        usable = budget.host_usable(memory["safety"], memory["host_reserve_mb"])
    fits = usable // activation_bytes(model_cfg, *mel_shape)
    if fits < 1:
        log.warning("evaluation: free memory allows less than one segment per batch "
                    "(%d bytes usable); going on with one file per batch", usable)
    return int(max(1, min(cap, fits)))


def segment_cap(max_segments: int, cpu_max_segments: int, device: torch.device) -> int:
    """The most segments per forward pass on ``device``.

    On CPU a pass of a few files already keeps every core busy, and larger passes only fall
    out of the caches (measured: benchmarks/bench_evaluate.py), so CPUs get the smaller cap.
    """
    return max_segments if device.type == "cuda" else min(max_segments, cpu_max_segments)


def eval_placement(placement: str, device: torch.device) -> str:
    """The plan's placement, with ``device`` falling back to ``ram`` when running on CPU."""
    if placement == PLACEMENT_DEVICE and device.type != "cuda":
        return PLACEMENT_RAM
    return placement


def open_batches(path: Path, placement: str, model_cfg: ModelConfig, device: torch.device,
                 memory: Mapping[str, Any], cap: int, binary: bool,
                 input_norm: str = NORM_NONE) -> FileOrderBatches:
    """Place a split as planned, then size its file-order batches from the memory left;
    each batch normalised per file by the detector's ``input_norm``."""
    if placement == PLACEMENT_STREAM:
        source = read_split_info(path, binary)
        info = source
    else:
        source = load_resident(path, placement, device, binary)
        info = source.info
    segments = batch_segments(model_cfg, info.mel_shape, device, memory, cap)
    batches = FileOrderBatches(source, segments, device=device, input_norm=input_norm)
    log.info("%s: %d files, %s placement, %d files (%d segments) per forward pass", path,
             info.n_files, placement, batches.files_per_batch,
             batches.files_per_batch * info.segments_per_file)
    return batches


def score_split(model: nn.Module, batches: FileOrderBatches, prob_mode: ProbMode,
                precision: Precision, *, channels_last: bool = False,
                progress: bool = False, desc: str = "evaluate") -> SplitScores:
    """Leak probability of every segment, file-mean class probabilities, segment argmax."""
    model.eval()
    info, device = batches.info, batches.device
    spf, start = info.segments_per_file, time.perf_counter()
    probs, means, preds = [], [], []
    with torch.inference_mode():
        for x, _, _ in tqdm(batches, desc=desc, unit="batch", disable=not progress):
            x = to_device(x, device, channels_last)                 # (B, 1, M, T)
            with precision.autocast():
                logits, leak_logit = model(x)                       # (B, C), (B,)
            probs.append(segment_leak_prob(logits, leak_logit, info.leak_label, prob_mode))
            soft = torch.softmax(logits.float(), dim=-1)            # (B, C)
            means.append(soft.view(-1, spf, soft.shape[-1]).mean(dim=1))  # (B / spf, C)
            preds.append(logits.argmax(dim=-1).to(torch.int16))    # (B,)
    seg_probs = torch.cat(probs).cpu().numpy().astype(np.float32)  # (F * L * S,)
    return SplitScores(
        seg_probs=seg_probs.reshape(info.n_files, *info.segment_shape[:2]),
        class_probs=torch.cat(means).cpu().numpy().astype(np.float64),
        seg_pred=torch.cat(preds).cpu().numpy(), labels=info.file_labels,
        class_names=info.classes, seconds=time.perf_counter() - start,
        batch_files=min(batches.files_per_batch, info.n_files))

"""What the batch sources know about a split: its metadata, and the split loaded resident.

``read_split_info`` reads labels (in task space), classes and shapes without the mel data;
``load_resident`` reads every segment of a split into one contiguous tensor on the device
(placement ``device``) or in RAM (``ram``, pinned when it feeds a CUDA device).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from leakpipe.constants import PLACEMENT_DEVICE, PLACEMENT_RAM
from leakpipe.data.reader import open_split
from leakpipe.data.schema import DataFormatError, leak_index, task_classes, task_labels

log = logging.getLogger(__name__)

_TORCH_DTYPES = {"float16": torch.float16, "float32": torch.float32}


@dataclass(frozen=True)
class SplitInfo:
    """What a batch source needs to know about a split, read once without the mel data."""

    path: Path
    file_labels: np.ndarray        # (files,) int64 task labels
    classes: tuple[str, ...]       # task class names (binary or the split's classes)
    leak_label: int                # task-space index of the leak class
    segment_shape: tuple[int, ...]  # (n_long, n_short, n_mels, n_frames)
    chunk_rows: int
    dtype: torch.dtype             # storage dtype of `mel`

    @property
    def n_files(self) -> int:
        return len(self.file_labels)

    @property
    def segments_per_file(self) -> int:
        return self.segment_shape[0] * self.segment_shape[1]

    @property
    def n_segments(self) -> int:
        return self.n_files * self.segments_per_file

    @property
    def mel_shape(self) -> tuple[int, int]:
        return self.segment_shape[2], self.segment_shape[3]

    @property
    def file_bytes(self) -> int:
        return math.prod(self.segment_shape) * self.dtype.itemsize


def read_split_info(path: Path | str, binary: bool) -> SplitInfo:
    """Labels (in task space), classes and shapes of a split; the mel data is not read."""
    with open_split(path) as split:
        classes = task_classes(split.class_names, binary)
        leak = leak_index(classes) if binary else split.leak_index
        dtype = _TORCH_DTYPES.get(split.mel.dtype.name)
        if dtype is None:
            raise DataFormatError(f"{path}: dataset 'mel' has dtype {split.mel.dtype}, "
                                  f"expected one of {sorted(_TORCH_DTYPES)}")
        return SplitInfo(Path(path), task_labels(split.labels, split.class_names, binary),
                         classes, leak, tuple(split.mel.shape[1:]), split.chunk_rows, dtype)


@dataclass(frozen=True)
class ResidentData:
    """A whole split as one tensor of segments, plus its file labels on the target device."""

    info: SplitInfo
    segments: torch.Tensor      # (N, 1, n_mels, n_frames), N = files * segments_per_file
    file_labels: torch.Tensor   # (files,) int64, on `device`
    device: torch.device        # where batches are delivered

    @property
    def overlap_copies(self) -> bool:
        """Host-resident data feeding a CUDA device: pinned, copied on a side stream."""
        return self.device.type == "cuda" and self.segments.device.type == "cpu"


def load_resident(path: Path | str, placement: str, device: torch.device | str,
                  binary: bool) -> ResidentData:
    """Read a split into one contiguous tensor on the device (``device``) or in RAM (``ram``)."""
    check_placement(placement, (PLACEMENT_DEVICE, PLACEMENT_RAM))
    info = read_split_info(path, binary)
    device = torch.device(device)
    store = device if placement == PLACEMENT_DEVICE else torch.device("cpu")
    pin = store.type == "cpu" and device.type == "cuda"
    segments = torch.empty((info.n_segments, 1, *info.mel_shape), dtype=info.dtype,
                           device=store, pin_memory=pin)  # (N, 1, n_mels, n_frames)
    spf = info.segments_per_file
    with open_split(path) as split:
        for start, block in split.iter_chunks():  # block (k, n_long, n_short, M, T)
            seg = torch.from_numpy(split.as_segments(block)).unsqueeze(1)  # (k * spf, 1, M, T)
            segments[start * spf:start * spf + len(seg)].copy_(seg)
    log.info("loaded %s: %d segments, %.1f MiB on %s%s", path, info.n_segments,
             segments.numel() * segments.element_size() / 2**20, store,
             " (pinned)" if pin else "")
    labels = torch.from_numpy(info.file_labels).to(device)
    return ResidentData(info, segments, labels, device)


def check_placement(placement: str, allowed: tuple[str, ...]) -> None:
    if placement not in allowed:
        raise ValueError(f"placement {placement!r} is not one of {list(allowed)}")

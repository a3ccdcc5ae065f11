"""What training holds in memory for a split, per placement: a pure function of the shapes.

The model follows the training data path (``leakpipe.data.batches`` and the sources it builds:
``split_info.load_resident``, ``resident_source``, ``stream_source``, ``file_order``) allocation
by allocation, so train can call ``estimate`` again at run time and compare it with what it
measures:

* resident placements (``device``, ``ram``): one contiguous tensor of every segment,
  (files * n_long * n_short, 1, n_mels, n_frames) in the resident dtype, plus int64 labels
  *per file* (a segment's file is ``segment // segments_per_file``; no per-segment labels);
* the training split (role ``train``) keeps an int64 index pool (one entry per segment, more
  with leak oversampling) and, per epoch, an int64 order (the permuted pool); the permutation
  itself is transient. With ``ram`` on CUDA the order is also pinned, and each batch is gathered
  into a pinned host buffer before its copy;
* evaluation splits (role ``eval``) are read in file order: batches are views of the resident
  tensor plus int64 file indices;
* ``stream``: two windows of ``buffer_chunks`` HDF5 chunks (the one consumed and the one being
  read) with their int64 file index, pool and order;
* two batches are in flight (the one computing and the next one being prepared).

Transient parts (freed again before training steps) count towards the peak only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from leakpipe.constants import PLACEMENT_DEVICE, PLACEMENT_RAM, PLACEMENT_STREAM, PLACEMENTS

HOST = "host"
DEVICE = "device"
INDEX_BYTES = 8          # int64 labels, indices, permutations
BOOL_BYTES = 1
BATCHES_IN_FLIGHT = 2    # the batch being computed and the next one being prepared
ROLE_TRAIN = "train"     # shuffled training batches (ResidentSource / StreamSource)
ROLE_EVAL = "eval"       # file-order evaluation batches (FileOrderBatches)


@dataclass(frozen=True)
class SplitShape:
    """The shape of a split's mel dataset, all ``estimate`` needs to know about the data."""

    files: int
    segment_shape: tuple[int, int, int, int]  # (n_long, n_short, n_mels, n_frames)
    chunk_rows: int = 1
    stored_dtype: str = "float16"

    @property
    def segments_per_file(self) -> int:
        return self.segment_shape[0] * self.segment_shape[1]

    @property
    def segments(self) -> int:
        return self.files * self.segments_per_file

    @property
    def segment_values(self) -> int:
        return self.segment_shape[2] * self.segment_shape[3]

    def resident_shape(self) -> tuple[int, int, int, int]:
        """(segments, 1, n_mels, n_frames): the one tensor a resident placement allocates."""
        return (self.segments, 1, self.segment_shape[2], self.segment_shape[3])


@dataclass(frozen=True)
class Part:
    """One allocation: what, where, how many bytes, and whether it is freed again at once."""

    name: str
    where: str
    nbytes: int
    transient: bool = False


@dataclass(frozen=True)
class Footprint:
    """Every allocation of one split under one placement."""

    placement: str
    role: str
    parts: tuple[Part, ...]

    def total(self, where: str, peak: bool = True) -> int:
        return sum(p.nbytes for p in self.parts
                   if p.where == where and (peak or not p.transient))

    @property
    def host_bytes(self) -> int:
        return self.total(HOST)

    @property
    def device_bytes(self) -> int:
        return self.total(DEVICE)

    def to_dict(self) -> dict[str, Any]:
        return {"placement": self.placement, "role": self.role,
                "host_bytes": self.host_bytes, "device_bytes": self.device_bytes,
                "host_steady_bytes": self.total(HOST, peak=False),
                "device_steady_bytes": self.total(DEVICE, peak=False),
                "parts": [{"name": p.name, "where": p.where, "bytes": p.nbytes,
                           "transient": p.transient} for p in self.parts]}


def itemsize(dtype: str) -> int:
    return int(np.dtype(dtype).itemsize)


def estimate(shape: SplitShape, dtype: str, batch_size: int, placement: str, *,
             cuda: bool = False, role: str = ROLE_TRAIN, buffer_chunks: int = 1,
             oversample: float = 1.0) -> Footprint:
    """Bytes training holds for one split; ``batch_size`` segments per batch.

    ``dtype`` is the resident (and batch) dtype, ``cuda`` whether batches go to a GPU,
    ``buffer_chunks`` the stream window in HDF5 chunks, ``oversample`` the index pool length
    relative to the segments (leak oversampling makes it longer).
    """
    if placement not in PLACEMENTS:
        raise ValueError(f"placement {placement!r} is not one of {list(PLACEMENTS)}")
    if placement == PLACEMENT_DEVICE and not cuda:
        raise ValueError("placement 'device' needs a CUDA device")
    parts = [*_labels(shape, cuda)]
    if placement == PLACEMENT_STREAM and role == ROLE_TRAIN:
        parts += _stream(shape, buffer_chunks, oversample)
    elif placement == PLACEMENT_STREAM:
        parts += _read_ahead(shape, batch_size)
    else:
        parts += _resident(shape, dtype, placement)
        parts += (_train_index(shape, placement, cuda, oversample) if role == ROLE_TRAIN
                  else [])
    parts += _batches(shape, dtype, batch_size, placement, cuda, role)
    return Footprint(placement, role, tuple(p for p in parts if p.nbytes))


def _labels(shape: SplitShape, cuda: bool) -> list[Part]:
    labels = shape.files * INDEX_BYTES
    return [Part("file_labels", HOST, labels), Part("file_labels", DEVICE, labels if cuda else 0)]


def _resident(shape: SplitShape, dtype: str, placement: str) -> list[Part]:
    where = DEVICE if placement == PLACEMENT_DEVICE else HOST
    chunk = shape.chunk_rows * shape.segments_per_file * shape.segment_values
    return [Part("segments", where, shape.segments * shape.segment_values * itemsize(dtype)),
            Part("load_chunk", HOST, chunk * itemsize(shape.stored_dtype), transient=True)]


def _train_index(shape: SplitShape, placement: str, cuda: bool, oversample: float) -> list[Part]:
    pool = int(round(shape.segments * oversample)) * INDEX_BYTES
    return [
        Part("leak_mask", HOST, shape.segments * BOOL_BYTES, transient=True),
        Part("index_pool", HOST, pool),
        Part("epoch_order", HOST, pool),
        Part("epoch_permutation", HOST, pool, transient=True),
        Part("epoch_order_pinned", HOST, pool if cuda and placement == PLACEMENT_RAM else 0),
        Part("epoch_order", DEVICE, pool if placement == PLACEMENT_DEVICE else 0),
    ]


def _stream(shape: SplitShape, buffer_chunks: int, oversample: float) -> list[Part]:
    rows = min(shape.files, buffer_chunks * shape.chunk_rows)
    segments = rows * shape.segments_per_file
    index = int(round(segments * oversample)) * INDEX_BYTES
    windows = BATCHES_IN_FLIGHT  # the window consumed and the one being read
    return [
        Part("stream_windows", HOST,
             windows * segments * shape.segment_values * itemsize(shape.stored_dtype)),
        Part("stream_window_index", HOST, windows * (segments * INDEX_BYTES + index)),
        Part("stream_window_shuffle", HOST, 2 * index, transient=True),
    ]


def _eval_segments(shape: SplitShape, batch_size: int) -> int:
    """Segments of one file-order batch: whole files, at least one."""
    files = max(1, batch_size // shape.segments_per_file)
    return min(shape.segments, files * shape.segments_per_file)


def _read_ahead(shape: SplitShape, batch_size: int) -> list[Part]:
    segments = _eval_segments(shape, batch_size)
    per_block = segments * (shape.segment_values * itemsize(shape.stored_dtype) + INDEX_BYTES)
    return [Part("eval_read_ahead", HOST, BATCHES_IN_FLIGHT * per_block)]


def _batches(shape: SplitShape, dtype: str, batch_size: int, placement: str, cuda: bool,
             role: str) -> list[Part]:
    values = shape.segment_values * itemsize(dtype)
    staged = cuda and placement != PLACEMENT_DEVICE
    if role == ROLE_EVAL:
        batch = _eval_segments(shape, batch_size)
        # a resident batch is a view of the segments; a streamed one is its read-ahead block;
        # only a copy to the GPU allocates x again
        x_bytes = batch * values if staged else 0
        pinned = 0
    else:
        batch = min(shape.segments, batch_size)
        x_bytes = batch * values
        pinned = batch * values if staged else 0
    per_batch = x_bytes + 2 * batch * INDEX_BYTES  # x, file index, labels
    return [Part("batches", DEVICE if cuda else HOST, BATCHES_IN_FLIGHT * per_batch),
            Part("pinned_batches", HOST, BATCHES_IN_FLIGHT * pinned)]

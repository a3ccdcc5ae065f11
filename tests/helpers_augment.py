"""The tiny training split and batch-source helpers test_augment*.py share.

The split stores each segment's identity in its data (mel bin 0 = file row, bin 1 = the
segment's index inside the file), as in test_batches, so plain batches name every row; the
sources are built with the same batch size, seed and buffer as each other, so a batch of one
equals the same batch of another bit for bit unless augmentation changed it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch

from leakpipe.config import load_section
from leakpipe.constants import KNOWN_CLASSES
from leakpipe.data.batches import make_train_source
from leakpipe.data.resident_source import ResidentSource
from leakpipe.data.split_info import load_resident
from leakpipe.data.stream_source import StreamSource
from leakpipe.data.writer import SplitWriter
from tests.conftest import PARAMS

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


def write_split(path: Path, tiny_features) -> Path:
    """20 files, labels cycling through KNOWN_CLASSES (4 LEAK files), ids written in the data."""
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

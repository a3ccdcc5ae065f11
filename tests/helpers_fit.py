"""Tiny in-memory training data and a fit() runner shared by test_fit.py, test_train_loop.py
and test_level_input.py: five classes over a few mel bands (class c raises band c), so a
4-channel network learns them in a few epochs on one CPU thread.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from leakpipe.config import ModelConfig, TrainConfig, load_section
from leakpipe.constants import KNOWN_CLASSES
from leakpipe.data.file_order import FileOrderBatches
from leakpipe.data.schema import leak_index, task_classes, task_labels
from leakpipe.data.split_info import ResidentData, SplitInfo
from leakpipe.runtime import cpu_runtime
from leakpipe.tracking import NullTracker
from leakpipe.train import loop
from leakpipe.train.fit import fit
from leakpipe.train.validation import ValSplit
from tests.conftest import PARAMS

CPU = torch.device("cpu")
RUNTIME = cpu_runtime()
DECISION = load_section(PARAMS, "decision")
N_LONG, N_SHORT, N_MELS = 3, 2, 8
TINY_MODEL = ModelConfig(widths=(4, 8, 8), dropout=0.1, pool_h=2, hidden=16)


def torch_globals() -> Iterator[None]:
    """One thread (tiny tensors; immune to a busy machine); undo configure_torch's switches."""
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(deterministic)


def tiny_train_cfg() -> TrainConfig:
    return dataclasses.replace(
        load_section(PARAMS, "train"), epochs=3, batch_size=32,
        learning_rate=1e-2, eta_min=1e-4, warmup_epochs=0.5, early_stop_patience=5,
        keep_last_checkpoints=2, log_every_steps=0, compile=False, init_checkpoint="")


def _files(n_per_class: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Five classes; class c raises mel band c: (F, L, S, M, 1) float16 and (F,) labels."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(len(KNOWN_CLASSES)), n_per_class)
    mel = rng.normal(size=(len(labels), N_LONG, N_SHORT, N_MELS, 1))
    mel[np.arange(len(labels)), :, :, labels] += 3.0
    return mel.astype(np.float16), labels


class InMemorySource:
    """Shuffled segment batches; the permutation depends only on (seed, epoch)."""

    def __init__(self, mel: np.ndarray, labels: np.ndarray, batch_size: int, seed: int) -> None:
        per_file = N_LONG * N_SHORT
        self.x = torch.from_numpy(mel).reshape(-1, 1, N_MELS, 1)           # (N, 1, M, 1)
        self.y = torch.from_numpy(labels).repeat_interleave(per_file)      # (N,)
        self.file = torch.arange(len(labels)).repeat_interleave(per_file)  # (N,)
        self.batch_size, self.seed = batch_size, seed
        self.nan_epoch: int | None = None

    def __len__(self) -> int:
        return -(-len(self.y) // self.batch_size)

    def epoch(self, epoch: int) -> Iterator[loop.Batch]:
        order = torch.randperm(len(self.y), generator=torch.Generator().manual_seed(
            self.seed * 1000 + epoch))
        for start in range(0, len(order), self.batch_size):
            idx = order[start:start + self.batch_size]
            x = self.x[idx].clone()
            if epoch == self.nan_epoch:
                x[0] = float("nan")
            yield x, self.y[idx], self.file[idx]


def val_split(mel: np.ndarray, labels: np.ndarray, classes: tuple[str, ...],
              batch_segments: int = 12, input_norm: str = "none") -> ValSplit:
    """An in-memory (F, L, S, M, T) split as the file-order batches validation reads."""
    labels = np.asarray(labels, dtype=np.int64)
    shape = tuple(mel.shape[1:])
    info = SplitInfo(Path("memory"), labels, tuple(classes), leak_index(tuple(classes)), shape,
                     1, torch.float32)
    segments = torch.as_tensor(np.asarray(mel, np.float32)).reshape(-1, 1, *shape[2:])
    resident = ResidentData(info, segments, torch.from_numpy(labels), CPU)
    return ValSplit(FileOrderBatches(resident, batch_segments, input_norm=input_norm))


def _data(binary: bool, cfg: TrainConfig, seed: int = 0) -> tuple[InMemorySource, ValSplit,
                                                                   list[int]]:
    train_mel, train_raw = _files(8, seed)
    val_mel, val_raw = _files(4, seed + 1)
    labels = task_labels(train_raw, KNOWN_CLASSES, binary)
    source = InMemorySource(train_mel, labels, cfg.batch_size, cfg.seed)
    val = val_split(val_mel, task_labels(val_raw, KNOWN_CLASSES, binary),
                    task_classes(KNOWN_CLASSES, binary), cfg.batch_size)
    counts = np.bincount(labels, minlength=len(val.class_names)).tolist()
    return source, val, counts


def _fit(cfg: TrainConfig, directory: Path, binary: bool = False, **kw):
    source, val, counts = _data(binary, cfg)
    source.nan_epoch = kw.pop("nan_epoch", None)
    tracker = kw.pop("tracker", NullTracker())
    return fit(TINY_MODEL, dataclasses.replace(cfg, binary=binary), runtime=RUNTIME,
               decision=DECISION, train_source=source, val=val, class_counts=counts,
               tracker=tracker,
               checkpoint_dir=directory, features={"n_mels": N_MELS}, **kw)

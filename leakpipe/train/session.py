"""Training inputs from the preload plan: the one place train and tune get their data.

Reads `reports/preload.json` (placement, dtype, stream window) and opens the train split as a
batch source for that placement and the val split for whole-split validation every epoch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from leakpipe.config import FeatureConfig, TrainConfig
from leakpipe.data.batches import make_train_source
from leakpipe.data.reader import SplitReader, open_split
from leakpipe.data.schema import task_classes, task_labels
from leakpipe.errors import DataError
from leakpipe.train.fit import TrainSource
from leakpipe.train.loop import ValData

PLAN_KEYS = ("placement", "dtype", "stream")


@dataclass
class TrainingData:
    """What ``fit`` needs, plus the metadata the detector file keeps."""

    train_source: TrainSource
    val_data: ValData
    class_counts: list[int]               # training files per task class, before oversampling
    class_names: tuple[str, ...]          # the task's classes
    data_class_names: tuple[str, ...]     # the HDF5 classes
    features: FeatureConfig
    placement: str
    val_reader: SplitReader               # kept open while val_data streams from it

    def close(self) -> None:
        close = getattr(self.train_source, "close", None)
        if close is not None:
            close()
        self.val_reader.close()


def read_plan(path: Path) -> dict[str, Any]:
    """The preload stage's decision; a missing or foreign file is a ``DataError``."""
    try:
        plan = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise DataError(f"{path}: no preload plan; run `dvc repro preload` first") from None
    except json.JSONDecodeError:
        raise DataError(f"{path}: preload plan is not valid JSON") from None
    missing = [k for k in PLAN_KEYS if k not in plan]
    if missing:
        raise DataError(f"{path}: preload plan lacks {missing[0]!r}")
    return plan


def prepare_training(train_path: Path, val_path: Path, plan: dict[str, Any],
                     cfg: TrainConfig, device: torch.device, *, rank: int = 0,
                     world_size: int = 1) -> TrainingData:
    """Open both splits for the planned placement; the splits must share classes / features."""
    with open_split(train_path) as train:
        data_classes, features = train.class_names, train.features
        labels = task_labels(train.labels, train.class_names, cfg.binary)
    val = open_split(val_path)
    if val.class_names != data_classes or val.features != features:
        val.close()
        raise DataError(f"{val_path}: class names or feature config differ from {train_path}")
    classes = task_classes(data_classes, cfg.binary)
    placement = plan["placement"]
    source = make_train_source(
        train_path, placement, cfg.batch_size, seed=cfg.seed, binary=cfg.binary,
        device=device,
        dtype=getattr(torch, plan["dtype"]), leak_oversample=cfg.leak_oversample_factor,
        rank=rank, world_size=world_size, drop_last=world_size > 1,
        buffer_chunks=int(plan["stream"]["buffer_chunks"]))
    counts = np.bincount(labels, minlength=len(classes)).tolist()
    return TrainingData(train_source=source, val_data=ValData.from_reader(val, cfg.binary),
                        class_counts=counts, class_names=classes, data_class_names=data_classes,
                        features=features, placement=placement, val_reader=val)

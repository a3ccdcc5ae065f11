"""Training inputs from the preload plan: the one place train and tune get their data.

Reads `reports/preload.json` (placement, dtype, stream window) and opens the train split as a
batch source for that placement and the val split for whole-split validation every epoch.

The plan may have been made on another machine (DVC does not re-run `preload` when only the
machine changes), so ``check_placement`` re-measures the memory free here and re-estimates
what the planned placement holds (``leakpipe.preload``); when it no longer fits, training
streams instead, with one WARNING line. Resident placements also keep the val split in
memory; validation reads it in file-order batches of whole files, as evaluate does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from leakpipe.config import FeatureConfig, PreloadConfig, TrainConfig, from_mapping
from leakpipe.constants import H5_LABELS, H5_RECORDING_ID, PLACEMENT_DEVICE, PLACEMENT_STREAM
from leakpipe.data.batches import make_eval_batches, make_train_source
from leakpipe.data.reader import SplitReader, open_split
from leakpipe.data.schema import task_classes, task_labels
from leakpipe.errors import ConfigError, DataError
from leakpipe.train.fit import TrainSource
from leakpipe.train.validation import ValSplit

log = logging.getLogger(__name__)

DATA_ID_CHARS = 16   # hex digits of the split fingerprint kept in checkpoints


@dataclass
class TrainingData:
    """What ``fit`` needs, plus the metadata the detector file keeps."""

    train_source: TrainSource
    val: ValSplit                         # file-order batches of the whole val split
    class_counts: list[int]               # training files per task class, before oversampling
    class_names: tuple[str, ...]          # the task's classes
    data_class_names: tuple[str, ...]     # the HDF5 classes
    features: FeatureConfig
    placement: str                        # what training uses (may differ from the plan)
    data_id: dict[str, str] = dataclasses.field(default_factory=dict)  # split -> fingerprint

    def close(self) -> None:
        close = getattr(self.train_source, "close", None)
        if close is not None:
            close()


def check_placement(plan: dict[str, Any], paths: dict[str, Path], batch_size: int,
                    device: torch.device, processes: int = 1) -> str:
    """The planned placement if it still fits this machine, else ``stream`` (one WARNING).

    ``processes`` ranks on this host each hold a resident copy (DDP).
    """
    from leakpipe.preload import measure_budget, read_shapes
    from leakpipe.preload.plan import training_footprints

    placement = plan["placement"]
    if placement == PLACEMENT_STREAM:
        return placement
    if placement == PLACEMENT_DEVICE and device.type != "cuda":
        return _fallback(placement, f"this run trains on {device}, not on a GPU")
    cfg = _plan_params(plan)
    budget = measure_budget()
    footprints = training_footprints(read_shapes(paths), cfg, placement, device.type == "cuda",
                                     batch_size, int(plan["stream"]["buffer_chunks"]))
    host = processes * sum(f.host_bytes for f in footprints)
    gpu = sum(f.device_bytes for f in footprints)
    host_usable = budget.host_usable(cfg.safety, cfg.host_reserve_mb)
    gpu_usable = budget.device_usable(cfg.safety, cfg.device_reserve_mb)
    if host > host_usable:
        return _fallback(placement, f"needs {host / 2**20:.0f} MiB of host RAM, "
                                    f"{host_usable / 2**20:.0f} MiB usable here")
    if placement == PLACEMENT_DEVICE and gpu > gpu_usable:
        return _fallback(placement, f"needs {gpu / 2**20:.0f} MiB of GPU memory, "
                                    f"{gpu_usable / 2**20:.0f} MiB usable here")
    log.info("placement %s still fits: %.0f MiB host, %.0f MiB GPU", placement, host / 2**20,
             gpu / 2**20)
    return placement


def _plan_params(plan: dict[str, Any]) -> PreloadConfig:
    try:
        return from_mapping(PreloadConfig, plan.get("params", {}), "preload", "preload plan")
    except ConfigError as exc:
        raise DataError(f"preload plan: its params do not load ({exc}); re-run preload") \
            from None


def _fallback(placement: str, why: str) -> str:
    log.warning("preload plan said %s, but it does not fit here (%s): streaming instead",
                placement, why)
    return PLACEMENT_STREAM


def split_fingerprint(reader: SplitReader) -> str:
    """Identity of a split: its shape, features, classes, labels and recording ids."""
    digest = hashlib.sha256()
    for part in (reader.mel.shape, reader.features.to_dict(), reader.class_names):
        digest.update(json.dumps(part, sort_keys=True, default=list).encode())
    digest.update(np.asarray(reader.h5[H5_LABELS][:], dtype=np.int64).tobytes())
    ids = reader.h5[H5_RECORDING_ID].asstr()[:]                      # (F,) str
    digest.update("\n".join(ids).encode())
    return digest.hexdigest()[:DATA_ID_CHARS]


def _require_rows(reader: SplitReader, role: str) -> None:
    """Refuse a split with no rows when it is opened: an empty train split has no batch to
    draw, and an empty val split would let a whole epoch train before validation fails."""
    if reader.n_files == 0:
        raise DataError(f"{reader.path}: the {role} split holds no rows (0 clips); "
                        "nothing to train or validate on")


def prepare_training(train_path: Path, val_path: Path, plan: dict[str, Any],
                     cfg: TrainConfig, device: torch.device, *, rank: int = 0,
                     world_size: int = 1, local_world_size: int = 1,
                     recheck: bool = True) -> TrainingData:
    """Open both splits for the planned placement; the splits must share classes / features.

    With ``recheck`` the plan is first checked against this machine (``check_placement``).
    """
    paths = {"train": Path(train_path), "val": Path(val_path)}
    placement = (check_placement(plan, paths, cfg.batch_size, device, local_world_size)
                 if recheck else plan["placement"])
    with open_split(train_path) as train:
        _require_rows(train, "train")
        data_classes, features = train.class_names, train.features
        labels = task_labels(train.labels, train.class_names, cfg.binary)
        data_id = {"train": split_fingerprint(train)}
    with open_split(val_path) as val:
        _require_rows(val, "val")
        if val.class_names != data_classes or val.features != features:
            raise DataError(f"{val_path}: class names or feature config differ from "
                            f"{train_path}")
        data_id["val"] = split_fingerprint(val)
    classes = task_classes(data_classes, cfg.binary)
    dtype = getattr(torch, plan["dtype"])
    source = make_train_source(
        train_path, placement, cfg.batch_size, seed=cfg.seed, binary=cfg.binary,
        device=device, dtype=dtype, leak_oversample=cfg.leak_oversample_factor,
        rank=rank, world_size=world_size, drop_last=world_size > 1,
        buffer_chunks=int(plan["stream"]["buffer_chunks"]), input_norm=cfg.input_norm,
        augment=cfg.augment)
    counts = np.bincount(labels, minlength=len(classes)).tolist()
    val_batches = make_eval_batches(val_path, placement, cfg.batch_size, binary=cfg.binary,
                                    device=device, dtype=dtype, input_norm=cfg.input_norm)
    return TrainingData(train_source=source, val=ValSplit(val_batches), class_counts=counts,
                        class_names=classes, data_class_names=data_classes, features=features,
                        placement=placement, data_id=data_id)

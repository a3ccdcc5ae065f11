"""One fold's result: what it records, where it lives in the work folder, and the preload plan
a fold uses when none was given.

Shared by the two ways folds are computed (``leakpipe.cv.stage``: here, one after another;
``leakpipe.cv.dispatch``: on a Dask cluster), so that a fold's ``result.json`` is the same
record whichever computed it, and a run of either kind resumes a work folder of the other.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from leakpipe.baselines.logger_stats import read_recordings
from leakpipe.constants import H5_CLIP_INDEX
from leakpipe.cv.folds import ROLES, Fold
from leakpipe.cv.methods import MethodResult, Settings
from leakpipe.data.reader import open_split
from leakpipe.files import write_json_atomic
from leakpipe.preload import plan_training, read_shapes

STATE_FILE = "state.json"
RESULT_FILE = "result.json"
PLANNED = "preload.json"      # the plan made here when none is given


def fold_dir(work: Path, fold: Fold) -> Path:
    return work / f"fold-{fold.index + 1:02d}"


def finished(work: Path, fold: Fold) -> dict[str, Any] | None:
    """The fold's saved result, or None when it has none yet."""
    done = fold_dir(work, fold) / RESULT_FILE
    return json.loads(done.read_text()) if done.is_file() else None


def test_tables(path: Path) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    """The fold's test file as the result records it: a row per clip, and a row per
    recording."""
    with open_split(path) as split:
        clip = split.h5[H5_CLIP_INDEX][:]
        clips = {"recording_id": split.recording_ids.tolist(), "group": split.groups.tolist(),
                 "clip": np.asarray(clip).astype(int).tolist(),
                 "leak": split.binary_labels.astype(int).tolist()}
    table = read_recordings(path)
    recordings = {"recording_id": table.recording_id.tolist(), "group": table.group.tolist(),
                  "leak": table.truth.astype(int).tolist()}
    return clips, recordings


def fold_record(fold: Fold, tables: tuple[dict[str, list[Any]], dict[str, list[Any]]],
                methods: Sequence[MethodResult]) -> dict[str, Any]:
    """What ``fold-NN/result.json`` holds: the test rows, the sizes, every method's output."""
    test, recordings = tables
    return {"fold": fold.index, "test": test, "test_recordings": recordings,
            "sizes": {r: int(len(fold.rows(r))) for r in ROLES},
            "methods": {m.name: m.to_dict() for m in methods}}


def save(work: Path, fold: Fold, result: Mapping[str, Any]) -> None:
    write_json_atomic(fold_dir(work, fold) / RESULT_FILE, dict(result))


def planned(settings: Settings, files: Mapping[str, Path], work: Path) -> Settings:
    """No preload plan given (``leakpipe cv --source``): plan one for this fold's train and val
    files (saved as ``PLANNED``, which the later folds read)."""
    cfg = settings.preload
    shapes = read_shapes({"train": files["train"], "val": files["val"]})
    plan = plan_training(shapes, cfg)[0].to_dict(cfg, shapes)
    write_json_atomic(work / PLANNED, plan)
    return dataclasses.replace(settings, plan=plan)


def with_plan(settings: Settings, work: Path) -> Settings:
    """``settings`` with the saved plan, once a fold made one (and none was given)."""
    saved = work / PLANNED
    if settings.plan or not saved.is_file():
        return settings
    return dataclasses.replace(settings, plan=json.loads(saved.read_text()))

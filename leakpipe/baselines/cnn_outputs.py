"""The CNN's side of stage `baselines`: evaluate's metrics and its test decisions, read and
aligned with the test split's clips for the paired comparison.
"""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from leakpipe.baselines.data import ClipFeatures
from leakpipe.baselines.selection import TEST
from leakpipe.config import EvaluateConfig
from leakpipe.constants import LEAK_CLASS
from leakpipe.errors import DataError
from leakpipe.tracking import flatten

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PairedTest:
    """The CNN's test decisions, aligned with the test split's clips, and the bootstrap."""

    truth: np.ndarray                 # (F,) bool
    cnn_decision: np.ndarray          # (F,) bool
    recording_id: np.ndarray          # (F,) str
    resamples: int
    confidence: float
    seed: int


def read_eval_metrics(path: Path) -> dict[str, Any] | None:
    """evaluate's metrics as flat ``test/clip_f1`` names; None when the file does not exist."""
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        log.info("%s not found: the comparison leaves the CNN out", path)
        return None
    except json.JSONDecodeError:
        raise DataError(f"{path}: not valid JSON; re-run `dvc repro evaluate`") from None
    if not isinstance(raw, dict):
        raise DataError(f"{path}: expected a JSON object of evaluate metrics")
    return flatten(raw, sep="/")


def read_cnn_decisions(path: Path) -> dict[tuple[str, int], bool] | None:
    """evaluate's test decisions per (recording, k-th clip of it); None when the file is absent.

    The k-th clip of a recording is its k-th row in the split (clips of a recording are
    consecutive rows in clip order), so the key does not depend on how clips are numbered.
    """
    try:
        with open(path, newline="") as fh:
            reader = csv.DictReader(fh)
            if "leak_decision" not in (reader.fieldnames or ()):
                raise DataError(f"{path}: no leak_decision column (a predictions table from "
                                "before it was renamed from decision?); re-run `dvc repro "
                                "evaluate`")
            rows = [r for r in reader if r.get("split") == TEST]
    except FileNotFoundError:
        return None
    try:
        per_recording: dict[str, list[tuple[int, bool]]] = {}
        for r in rows:
            per_recording.setdefault(r["recording_id"], []).append(
                (int(r["clip"]), r["leak_decision"] == LEAK_CLASS))
    except (KeyError, ValueError) as exc:
        raise DataError(f"{path}: not evaluate's predictions table ({exc})") from None
    return {(rec, k): decision for rec, clips in per_recording.items()
            for k, (_, decision) in enumerate(sorted(clips))}


def paired_test(test: ClipFeatures, decisions: Mapping[tuple[str, int], bool], source: str,
                ev: EvaluateConfig) -> PairedTest:
    """The CNN's decisions in the test split's clip order; a missing clip is an error."""
    seen: dict[str, int] = {}
    aligned = np.zeros(test.n_files, dtype=bool)
    for i, rec in enumerate(test.recording_id):
        k = seen[rec] = seen.get(rec, -1) + 1
        if (rec, k) not in decisions:
            raise DataError(f"{source}: no test prediction for clip {k} of {rec}; re-run "
                            f"`dvc repro evaluate`")
        aligned[i] = decisions[(rec, k)]
    return PairedTest(test.truth, aligned, test.recording_id, ev.bootstrap_resamples,
                      ev.confidence, ev.seed)

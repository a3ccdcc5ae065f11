"""Stage ship's `cnn` kind: evaluate's detector, shipped byte for byte, and its test figures
per recording from evaluate's clip predictions (evaluate keeps no val recordings' scores to
choose a recording operating point: the clip one is kept)."""

from __future__ import annotations

import csv
import logging
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from leakpipe.baselines.recording_figures import recording_figures
from leakpipe.config import EvaluateConfig
from leakpipe.decision.voting import decide
from leakpipe.errors import DataError
from leakpipe.files import temporary_sibling
from leakpipe.ship.figures import MEAN_CLIP_SCORE, ShippedCalls

log = logging.getLogger(__name__)


def cnn_test_calls(predictions: Path, threshold: float) -> ShippedCalls | None:
    """The CNN kind's call per test recording (``cnn_recording_figures``'s scores)."""
    found = _cnn_test_recordings(predictions)
    if found is None:
        return None
    _, truth, scores = found
    return ShippedCalls(truth=truth, score=scores, decision=decide(scores, threshold)[0],
                     threshold=threshold, scale=MEAN_CLIP_SCORE)


def cnn_recording_figures(predictions: Path, threshold: float,
                          ev: EvaluateConfig) -> dict[str, float]:
    """The CNN detector's test figures per recording, from evaluate's clip predictions: a
    recording's score is the mean of its clips' rule scores, decided at evaluate's threshold
    (the clip operating point: evaluate keeps no val predictions to choose a recording one);
    site-bootstrap intervals as logger_stats'. {} without the file."""
    found = _cnn_test_recordings(predictions)
    if found is None:
        return {}
    groups, truth, scores = found
    return recording_figures("test", truth, decide(scores, threshold)[0], scores, groups,
                             intervals=ev, counts=True)


def _cnn_test_recordings(predictions: Path
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(groups, truth, mean clip score) of every test recording in evaluate's predictions;
    None without the file or a test row."""
    if not predictions.is_file():
        log.info("%s not found: no recording figures for the cnn kind", predictions)
        return None
    per: dict[str, list[Any]] = {}
    try:
        with predictions.open(newline="") as handle:
            for row in csv.DictReader(handle):
                if row["split"] == "test":
                    entry = per.setdefault(row["recording_id"], [row["group"],
                                                                 int(row["leak"]), []])
                    entry[2].append(float(row["leak_score"]))
    except (KeyError, ValueError) as exc:
        raise DataError(f"{predictions}: not evaluate's predictions table ({exc})") from None
    if not per:
        return None
    groups = np.asarray([v[0] for v in per.values()])
    truth = np.asarray([v[1] for v in per.values()], dtype=bool)
    scores = np.asarray([float(np.mean(v[2])) for v in per.values()])
    return groups, truth, scores


def copy_detector(source: Path, target: Path) -> None:
    if not source.is_file():
        raise DataError(f"{source}: no such detector file; run `dvc repro evaluate`")
    tmp = temporary_sibling(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, tmp)
    tmp.replace(target)


__all__ = ["cnn_recording_figures", "cnn_test_calls", "copy_detector"]

"""Method `logger_stats`: a recording's level statistics -> a regularised linear leak score.

What a noise logger decides on (leakpipe/features/recording_stats.py): the quiet moments and
the steadiness of a recording's level, overall and per octave band. The model is the simplest
that can weigh them: the statistics standardised on train (a band missing at a recording's rate
takes train's mean, i.e. 0 after standardising: it adds no evidence either way), then an
L2-regularised logistic regression. Its strength ``C`` is chosen on val only, by the same
criterion and threshold grid as every other method.

The fitted model is a small torch module (``LoggerStatsNet``) holding the train means, scales
and coefficients, so a detector of this kind is one file that predict, serve and the ONNX
export read like the CNN's. The solver is scikit-learn's (L-BFGS on the convex problem):
its optimum does not depend on an initialisation or a learning rate.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression

from leakpipe.baselines.operating_point import choose_on_val
from leakpipe.config import DecisionConfig, EvaluateConfig, LoggerStatsConfig
from leakpipe.data.reader import open_split
from leakpipe.decision.select import OperatingPoint
from leakpipe.errors import DataError
from leakpipe.evaluate.figures import ranking_metrics
from leakpipe.features.recording_stats import is_gain_free
from leakpipe.stats_model import LoggerStatsNet

log = logging.getLogger(__name__)

MAX_ITER = 1000
MIN_SCALE = 1e-6   # a statistic constant on train is kept but cannot dominate


@dataclass(frozen=True)
class RecordingTable:
    """One split's recordings (in order of first appearance) and where each clip belongs."""

    path: Path
    recording_id: np.ndarray    # (R,) str
    group: np.ndarray           # (R,) str
    truth: np.ndarray           # (R,) bool: the recording is LEAK
    stats: np.ndarray           # (R, S) float32, NaN where a band is missing
    names: tuple[str, ...]      # (S,)
    clip_recording: np.ndarray  # (F,) int: each clip's index into the recordings

    def __len__(self) -> int:
        return len(self.recording_id)


def read_recordings(path: Path) -> RecordingTable:
    """The recordings of one split file with their statistics (clips of a recording are
    consecutive rows, as build and the fold writer store them)."""
    with open_split(path) as split:
        ids = split.recording_ids
        if not len(ids):
            raise DataError(f"{path}: the split holds no files")
        starts = np.r_[True, ids[1:] != ids[:-1]]
        first = np.flatnonzero(starts)
        has = split.has_stats   # without: a table for the clip methods' recording verdicts
        table = RecordingTable(
            path=path, recording_id=ids[first], group=split.groups[first],
            truth=split.binary_labels[first].astype(bool),
            stats=split.recording_stats[first] if has else np.zeros((len(first), 0), np.float32),
            names=split.stats_names if has else (), clip_recording=np.cumsum(starts) - 1)
    if len(np.unique(table.recording_id)) != len(table):
        raise DataError(f"{path}: a recording's clips are not consecutive rows; rebuild it")
    return table


def recording_means(clip_scores: np.ndarray, clip_recording: np.ndarray, n: int) -> np.ndarray:
    """(F,) clip scores -> (R,) the mean over each recording's clips."""
    sums = np.bincount(clip_recording, weights=clip_scores, minlength=n)
    counts = np.bincount(clip_recording, minlength=n)
    return sums / np.maximum(counts, 1)


def columns(names: Sequence[str], forms: str) -> np.ndarray:
    """Indices of the statistics a model uses: every one, or only the gain-free ones."""
    keep = [i for i, n in enumerate(names) if forms == "all" or is_gain_free(n)]
    if not keep:
        raise DataError(f"no statistics of form {forms!r} among {list(names)[:4]}...")
    return np.asarray(keep)


def standardiser(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Train means and scales of (R, S) statistics, NaN ignored (a column missing on every
    train recording: mean 0, scale 1, and it never counts)."""
    present = np.isfinite(x)
    n = present.sum(axis=0)
    mean = np.where(n > 0, np.nansum(x, axis=0) / np.maximum(n, 1), 0.0)
    var = np.where(n > 0, np.nansum((x - mean) ** 2, axis=0) / np.maximum(n, 1), 1.0)
    return mean, np.maximum(np.sqrt(var), MIN_SCALE)


def fit_net(x: np.ndarray, truth: np.ndarray, c: float, names: Sequence[str]) -> LoggerStatsNet:
    """Standardise on these recordings and fit the L2 logistic regression of strength ``c``."""
    mean, scale = standardiser(x)
    z = (np.where(np.isfinite(x), x, mean) - mean) / scale
    if len(np.unique(truth)) < 2:
        raise DataError("logger_stats: the training recordings hold one class only")
    lr = LogisticRegression(C=c, max_iter=MAX_ITER).fit(z, truth.astype(int))
    return LoggerStatsNet(mean, scale, lr.coef_[0], float(lr.intercept_[0]), names)


def leak_probability(net: LoggerStatsNet, x: np.ndarray) -> np.ndarray:
    """(R, S) statistics -> (R,) P(LEAK) in [0, 1], float64."""
    with torch.inference_mode():
        logit = net(torch.as_tensor(x, dtype=torch.float32))
    return torch.sigmoid(logit).double().numpy()


@dataclass(frozen=True)
class StatsFit:
    """The val-chosen model and what it chose."""

    net: LoggerStatsNet
    used: np.ndarray              # column indices into the table's statistics
    c: float
    point: OperatingPoint         # on val recordings
    val_scores: np.ndarray        # (R_val,)
    grid: list[dict[str, float]]


def fit_and_select(train: RecordingTable, val: RecordingTable, cfg: LoggerStatsConfig,
                   ev: EvaluateConfig, decision: DecisionConfig) -> StatsFit:
    """Every ``C`` fitted on train and scored on val; the best by evaluate's criterion (ties:
    val ROC-AUC, then the stronger regularisation, i.e. the first of the grid's order)."""
    if not train.names:
        raise DataError(f"{train.path}: no recording statistics (built before them); rebuild "
                        "the splits with `leakpipe build` to use logger_stats")
    if train.names != val.names:
        raise DataError(f"{val.path}: statistics differ from {train.path}; rebuild the splits")
    used = columns(train.names, cfg.forms)
    names = [train.names[i] for i in used]
    best, best_key, rows = None, None, []
    for c in sorted(cfg.C):
        net = fit_net(train.stats[:, used], train.truth, c, names)
        scores = leak_probability(net, val.stats[:, used])
        point = choose_on_val(scores, val.truth, ev, decision)
        auc = ranking_metrics(val.truth, scores)["roc_auc"]
        key = (point.met, point.value, auc if math.isfinite(auc) else -math.inf)
        rows.append({"C": c, "val_criterion": point.value, "val_roc_auc": auc,
                     "threshold": point.threshold})
        if best_key is None or key > best_key:
            best, best_key = StatsFit(net, used, c, point, scores, []), key
    assert best is not None
    log.info("logger_stats: C %g chosen on val (%s %.4f at threshold %g, %d statistics)",
             best.c, ev.criterion, best.point.value, best.point.threshold, len(used))
    return StatsFit(best.net, best.used, best.c, best.point, best.val_scores, rows)


__all__ = ["LoggerStatsNet", "RecordingTable", "StatsFit", "columns", "fit_and_select",
           "fit_net", "leak_probability", "read_recordings", "recording_means"]

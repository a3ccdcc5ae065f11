"""Method `logger_stats`: a recording's level statistics -> a regularised linear leak score.

What a noise logger decides on (leakpipe/features/recording_stats.py): the quiet moments and
the steadiness of a recording's level, overall and per octave band. The model is the simplest
that can weigh them: the statistics standardised on train (a band missing at a recording's rate
takes train's mean, i.e. 0 after standardising: it adds no evidence either way), then an
L2-regularised logistic regression.

How it is fitted (``fit_and_select``): a utility's data set holds a few dozen recordings, so a
fold's val split is a handful of them, too few to rank strengths ``C`` (one recording moves a
val ROC-AUC of 9 recordings by 0.05 or more). The train and val recordings are therefore pooled
and split again, by site, into ``inner_folds`` folds (grouped, stratified): each ``C`` is scored
by the ROC-AUC of its out-of-fold scores over every pooled recording (ties: the stronger
regularisation), the model of the chosen ``C`` is refitted on all of them, and the threshold is
chosen on the out-of-fold scores by the same criterion and grid as every other method. No test
recording takes part. ``inner_folds: 1`` is the plain route (fit on train, choose on val).
What it changes is measured by ``benchmarks/studies/logger_stats_fitting.py``.

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
from leakpipe.data.splits import assign_splits
from leakpipe.decision.select import OperatingPoint
from leakpipe.decision.stats_domain import stats_distances
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


def held_out_distances(x: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """(R, S) statistics of the recordings a net is fitted on and their (R,) sites -> (R,)
    domain distances D (``decision.stats_domain.stats_distances``), each site's recordings
    against the means and scales of the other sites: how far a new site's recordings lie,
    the set domain check's reference (a net's own means would put its recordings closer than
    any new site's)."""
    out = np.full(len(x), np.nan)
    for site in np.unique(groups):
        held = groups == site
        if held.all():                      # one site: no other to measure it against
            break
        mean, scale = standardiser(x[~held])
        out[held] = stats_distances(mean, scale, x[held])
    return out


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
    """The chosen model and what it chose."""

    net: LoggerStatsNet           # refitted on train + val
    used: np.ndarray              # column indices into the table's statistics
    c: float
    point: OperatingPoint         # on the pooled recordings' out-of-fold scores
    val_scores: np.ndarray        # (R_val,) out-of-fold: no model that scored one saw it
    grid: list[dict[str, float]]
    pooled_scores: np.ndarray     # out-of-fold scores the threshold was chosen on: train's,
    pooled_truth: np.ndarray      # then val's (inner_folds 1: val's only); truth, bool


def inner_folds(truth: np.ndarray, group: np.ndarray, k: int, seed: int) -> np.ndarray | None:
    """Inner fold (0 .. k' - 1) of every pooled recording, by site and stratified; k' is ``k``
    or fewer when a class has fewer sites. None: fewer than two sites of a class."""
    labels = np.where(truth, "LEAK", "NOLEAK")
    sites = min(len(set(group[truth])), len(set(group[~truth])))
    k = min(k, sites)
    if k < 2:
        return None
    fold = assign_splits(labels, group, [1.0 / k] * k, seed)
    for f in range(k):       # each fold's training part must hold both classes
        if len(np.unique(truth[fold != f])) < 2:
            return None
    return fold


def out_of_fold(x: np.ndarray, truth: np.ndarray, fold: np.ndarray, c: float,
                names: Sequence[str]) -> np.ndarray:
    """(R,) P(LEAK) of every recording from the model fitted without its inner fold."""
    out = np.empty(len(truth))
    for f in np.unique(fold):
        held = fold == f
        out[held] = leak_probability(fit_net(x[~held], truth[~held], c, names), x[held])
    return out


def fit_and_select(train: RecordingTable, val: RecordingTable, cfg: LoggerStatsConfig,
                   ev: EvaluateConfig, decision: DecisionConfig) -> StatsFit:
    """``C`` by grouped inner CV over train + val, the model refitted on them, the threshold on
    their out-of-fold scores (module docstring)."""
    if not train.names:
        raise DataError(f"{train.path}: no recording statistics (built before them); rebuild "
                        "the splits with `leakpipe build` to use logger_stats")
    if train.names != val.names:
        raise DataError(f"{val.path}: statistics differ from {train.path}; rebuild the splits")
    used = columns(train.names, cfg.forms)
    names = [train.names[i] for i in used]
    if cfg.inner_folds == 1:
        return _select_on_val(train, val, used, cfg, ev, decision)
    x = np.concatenate([train.stats[:, used], val.stats[:, used]])
    truth = np.concatenate([train.truth, val.truth])
    group = np.concatenate([train.group, val.group])
    fold = inner_folds(truth, group, cfg.inner_folds, cfg.seed)
    if fold is None:
        raise DataError(f"{train.path}, {val.path}: logger_stats needs at least two sites of "
                        "each class among the train and val recordings")
    best: tuple[tuple[float, ...], float, np.ndarray] | None = None
    rows = []
    for c in sorted(cfg.C):          # ascending: a tie keeps the stronger regularisation
        scores = out_of_fold(x, truth, fold, c, names)
        auc = ranking_metrics(truth, scores)["roc_auc"]
        rows.append({"C": c, "inner_roc_auc": auc})
        key = (auc if math.isfinite(auc) else -math.inf,)
        if best is None or key > best[0]:
            best = (key, c, scores)
    assert best is not None
    _, c, oof = best
    point = choose_on_val(oof, truth, ev, decision)
    rows[[r["C"] for r in rows].index(c)].update(threshold=point.threshold,
                                                 criterion=point.value)
    net = fit_net(x, truth, c, names)
    log.info("logger_stats: C %g chosen by %d-fold grouped inner CV over %d recordings (ROC-AUC "
             "%.4f), threshold %g (%s %.4f), %d statistics", c, len(np.unique(fold)), len(truth),
             best[0][0], point.threshold, ev.criterion, point.value, len(used))
    return StatsFit(net, used, c, point, oof[len(train):], rows, oof, truth)


def _select_on_val(train: RecordingTable, val: RecordingTable, used: np.ndarray,
                   cfg: LoggerStatsConfig, ev: EvaluateConfig,
                   decision: DecisionConfig) -> StatsFit:
    """``inner_folds: 1``: every ``C`` fitted on train and ranked on val (evaluate's criterion,
    then val ROC-AUC, then the stronger regularisation), the threshold on val: cheaper, and
    enough when val holds hundreds of recordings."""
    names = [train.names[i] for i in used]
    best: tuple[tuple[float, ...], float, LoggerStatsNet, np.ndarray] | None = None
    rows = []
    for c in sorted(cfg.C):
        net = fit_net(train.stats[:, used], train.truth, c, names)
        scores = leak_probability(net, val.stats[:, used])
        point = choose_on_val(scores, val.truth, ev, decision)
        auc = ranking_metrics(val.truth, scores)["roc_auc"]
        rows.append({"C": c, "val_roc_auc": auc, "threshold": point.threshold,
                     "criterion": point.value})
        key = (float(point.met), point.value, auc if math.isfinite(auc) else -math.inf)
        if best is None or key > best[0]:
            best = (key, c, net, scores)
    assert best is not None
    _, c, net, scores = best
    point = choose_on_val(scores, val.truth, ev, decision)
    log.info("logger_stats: C %g chosen on val (%s %.4f at threshold %g, %d statistics)",
             c, ev.criterion, point.value, point.threshold, len(used))
    return StatsFit(net, used, c, point, scores, rows, scores, val.truth)


__all__ = ["LoggerStatsNet", "RecordingTable", "StatsFit", "columns", "fit_and_select",
           "fit_net", "held_out_distances", "inner_folds", "leak_probability", "out_of_fold",
           "read_recordings", "recording_means"]

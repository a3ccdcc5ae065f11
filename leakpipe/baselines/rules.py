"""The rules a noise logger applies, as baselines: nothing learned but the threshold.

A leak is broadband noise that never stops: it fills the quiet moments between traffic, pumps
and footsteps, so the recording's quietest short-time level rises. Commercial noise loggers
rank their recordings by just that (the night's minimum, or a low percentile, of the level);
leakpipe measures it the same way (``build.stats``: frames of ``frame_s``, DC removed, the
frame levels' percentiles, overall and per octave band) and keeps two rules of it:

- ``min_level``: the recording's ``baselines.rules.percentile``-th percentile of its frame
  level (``level_p<q>``), higher = LEAK;
- ``band_min_level``: the same in one octave band (``band<c>_p<q>``), the band chosen on the
  TRAINING recordings only (the highest ROC-AUC of the fixed orientation among the bands every
  training recording has; a tie takes the lower band), since loggers' leak-band limits
  (about 50-1000 Hz) differ with pipe material and diameter.

The orientation is fixed by the physics (louder in the quiet moments = LEAK), never fitted.
The threshold is chosen as every method's is (evaluate's criterion and grid on ``[0, 1]``) on
the train and val recordings pooled, after a strictly monotone map of the level in dB to
``(0, 1)`` (a logistic centred on their median, the inter-quartile range mapped onto
0.25-0.75): the map changes no ranking, so the rule's ROC-AUC is that of the level itself. A
recording missing the band (a rate whose Nyquist frequency lies below it) scores 0.5: no
evidence either way. Pure functions of the recordings' statistics.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from leakpipe.baselines.logger_stats import RecordingTable
from leakpipe.baselines.operating_point import choose_on_val
from leakpipe.config import DecisionConfig, EvaluateConfig
from leakpipe.decision.select import OperatingPoint
from leakpipe.errors import DataError
from leakpipe.evaluate.figures import ranking_metrics

MIN_LEVEL, BAND_MIN_LEVEL = "min_level", "band_min_level"
RULES = (MIN_LEVEL, BAND_MIN_LEVEL)
IQR_LOGIT = 2.0 * math.log(3.0)      # logit(0.75) - logit(0.25): the IQR onto 0.25-0.75
MIN_WIDTH_DB = 1e-3                   # a set of equal levels still maps strictly


@dataclass(frozen=True)
class RuleFit:
    """A rule with its statistic chosen and its threshold placed."""

    name: str
    statistic: str                   # the column it reads: level_p5, band500_p5, ...
    centre_db: float                 # the map's centre (median of train + val)
    width_db: float                  # dB per unit of logit
    point: OperatingPoint            # on the mapped scale, chosen on train + val
    pooled_scores: np.ndarray        # (R_train + R_val,) mapped scores the point was chosen on
    pooled_truth: np.ndarray
    n_train: int                     # the first n_train of them are train's
    band_from_train: bool            # the statistic was chosen on train (band_min_level)

    def inner_roc_auc(self) -> float:
        """The rule's honest figure on the recordings it saw: over train + val where nothing
        but the threshold came from them (the ROC-AUC does not depend on a threshold), over
        val alone where train chose the band."""
        part = slice(self.n_train if self.band_from_train else 0, None)
        return float(ranking_metrics(self.pooled_truth[part],
                                     self.pooled_scores[part])["roc_auc"])

    def levels(self, table: RecordingTable) -> np.ndarray:
        """(R,) the rule's level in dB (NaN: missing)."""
        return column(table, self.statistic)

    def scores(self, table: RecordingTable) -> np.ndarray:
        """(R,) in (0, 1), increasing with the level; 0.5 where the level is missing."""
        return to_unit(self.levels(table), self.centre_db, self.width_db)


def column(table: RecordingTable, statistic: str) -> np.ndarray:
    return np.asarray(table.stats[:, list(table.names).index(statistic)], dtype=np.float64)


def to_unit(level_db: np.ndarray, centre_db: float, width_db: float) -> np.ndarray:
    """dB -> (0, 1), strictly increasing; NaN -> 0.5."""
    z = (np.asarray(level_db, dtype=np.float64) - centre_db) / width_db
    return np.where(np.isfinite(z), 1.0 / (1.0 + np.exp(-np.clip(z, -700, 700))), 0.5)


def statistic_name(stem: str, percentile: float) -> str:
    """``level`` / ``band500`` and 5 -> ``level_p5`` (build's names)."""
    return f"{stem}_p{percentile:g}"


def candidates(rule: str, names: Sequence[str], percentile: float) -> list[str]:
    """The statistics ``rule`` may read at ``percentile``; a ``DataError`` when build did not
    compute that percentile."""
    if rule == MIN_LEVEL:
        found = [statistic_name("level", percentile)]
    else:
        found = [n for n in names if n.startswith("band") and
                 n == statistic_name(n.split("_")[0], percentile)]
    if not found or any(n not in names for n in found):
        raise DataError(f"baselines.rules.percentile {percentile:g}: the splits' statistics "
                        f"have no {found[0] if found else f'band*_p{percentile:g}'} (it must be "
                        "one of build.stats.percentiles; rebuild the splits with it)")
    return found


def choose_band(train: RecordingTable, names: Sequence[str]) -> str:
    """Of the band statistics ``names``, the one whose level ranks the TRAIN recordings best
    (higher = LEAK), among those every training recording has; the lower band on a tie."""
    best, best_auc = None, -math.inf
    for name in names:                                        # build's order: low to high
        x = column(train, name)
        if not np.isfinite(x).all():
            continue
        auc = ranking_metrics(train.truth, x)["roc_auc"]
        if math.isfinite(auc) and auc > best_auc:
            best, best_auc = name, auc
    if best is None:
        raise DataError(f"{train.path}: band_min_level needs a band that every training "
                        "recording has and both classes to rank")
    return best


def fit_rule(rule: str, train: RecordingTable, val: RecordingTable, percentile: float,
             ev: EvaluateConfig, decision: DecisionConfig) -> RuleFit:
    """``rule``'s statistic (the band on train only), its map and threshold on train + val."""
    if train.names != val.names:
        raise DataError(f"{val.path}: statistics differ from {train.path}; rebuild the splits")
    if not train.names:
        raise DataError(f"{train.path}: no recording statistics (built before them); rebuild "
                        f"the splits with `leakpipe build` to use {rule}")
    found = candidates(rule, train.names, percentile)
    statistic = found[0] if rule == MIN_LEVEL else choose_band(train, found)
    pooled = np.concatenate([column(train, statistic), column(val, statistic)])
    truth = np.concatenate([train.truth, val.truth])
    present = pooled[np.isfinite(pooled)]
    if not present.size:
        raise DataError(f"{train.path}: {statistic} is missing on every recording")
    q25, centre, q75 = np.percentile(present, [25, 50, 75])
    width = max(float(q75 - q25) / IQR_LOGIT, MIN_WIDTH_DB)
    scores = to_unit(pooled, float(centre), width)
    point = choose_on_val(scores, truth, ev, decision)
    return RuleFit(rule, statistic, float(centre), width, point, scores, truth, len(train),
                   rule != MIN_LEVEL)


__all__ = ["BAND_MIN_LEVEL", "MIN_LEVEL", "RULES", "RuleFit", "candidates", "choose_band",
           "column", "fit_rule", "statistic_name", "to_unit"]

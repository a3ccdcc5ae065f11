"""Domain check of a `logger_stats` detector: are a recording's statistics like the training
recordings'? Pure numpy.

A `logger_stats` detector keeps the train mean and standard deviation of every statistic it
reads (``LoggerStatsNet``'s standardisation) and, in files written since, the share of its
training recordings on which each statistic was missing (``missing_shares``): all of the
training distribution that it stores. A recording's standardised statistic
``z = (x - mean) / scale`` says how many train standard deviations it lies from the typical
training recording, and

    D = max over the statistics present of |z| / Z_LIMIT,

so D = 1 is ``Z_LIMIT`` train standard deviations out in the worst statistic. A recording is
``shifted`` (``leakpipe.decision.domain``'s answers, ``DomainCheck``) when D > 1, reason
``statistic: <name> <z> train sd ...``, or when a statistic the detector reads is missing at
its sample rate (an octave band above its Nyquist frequency: the model takes the train mean for
it) **and** training rarely lacked it: missing on fewer than ``MIN_MISSING_SHARE`` of the
training recordings, reason ``band: ...`` naming those statistics. A band that loggers of a
rate common in training lack (the 4 kHz band of every 8 kHz logger, when training holds 8 kHz
loggers) was missing on many training recordings and the model was fitted with its imputation
there, so missing it is a property of the logger's rate that the model has seen, not a shift;
a band training never lacked (a 4096 Hz logger also lacking the 2 kHz band) is one. A detector
without the shares (``missing_share`` None: a file written before them) keeps the stricter
rule: any missing statistic is ``shifted``.

Unlike the CNN's check, the limit is fixed rather than set on val (the recordings the net was
fitted on are train and val pooled, so no split is left to set it on): ``Z_LIMIT`` = 6 standard
deviations, beyond which at most 1 / 36 of any distribution lies (Chebyshev), about 2e-9 of a
normal one. The share of val and test recordings it flags is reported with the shipped
detector's model card, so whether it flags new sites of the training network too often is
measured, not assumed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from leakpipe.decision.domain import IN, SHIFTED, DomainCheck
from leakpipe.decision.metrics import wilson_interval

Z_LIMIT = 6.0             # |z| (train standard deviations) at which a statistic is out of range
# A statistic missing on at least this share of the training recordings is a missing pattern
# the model was fitted with (imputed at the train mean on those recordings): one in twenty is
# many recordings of a benchmark, a logger rate of the training network rather than a few odd
# files, so a recording missing it is not out of domain for that reason.
MIN_MISSING_SHARE = 0.05
NAMED = 6                 # statistics a ``band:`` reason names before "+N more"
BAND, STATISTIC = "band", "statistic"


def missing_shares(stats: np.ndarray) -> np.ndarray:
    """(R, S) training statistics (NaN = missing) -> (S,) the share of recordings on which each
    statistic is missing (0 for a table of no recordings)."""
    x = np.atleast_2d(np.asarray(stats, dtype=np.float64))
    if not len(x):
        return np.zeros(x.shape[1])
    return np.mean(~np.isfinite(x), axis=0)


def unlearned_missing(stats: np.ndarray, missing_share: np.ndarray | None) -> np.ndarray:
    """(R, S) statistics -> (R, S) bool: missing, and missing on fewer than
    ``MIN_MISSING_SHARE`` of the training recordings (every missing one when ``missing_share``
    is None: a detector that does not know)."""
    missing = ~np.isfinite(np.atleast_2d(np.asarray(stats, dtype=np.float64)))
    if missing_share is None:
        return missing
    rare = np.asarray(missing_share, dtype=np.float64) < MIN_MISSING_SHARE          # (S,)
    return missing & rare


def standardised(mean: np.ndarray, scale: np.ndarray, stats: np.ndarray) -> np.ndarray:
    """(R, S) statistics (NaN = missing) -> (R, S) z, NaN kept."""
    x = np.atleast_2d(np.asarray(stats, dtype=np.float64))
    return (x - np.asarray(mean, dtype=np.float64)) / np.asarray(scale, dtype=np.float64)


def stats_distances(mean: np.ndarray, scale: np.ndarray, stats: np.ndarray) -> np.ndarray:
    """(R, S) statistics -> (R,) D, the largest |z| over the statistics present over
    ``Z_LIMIT``; NaN for a recording with none present."""
    z = np.abs(standardised(mean, scale, stats))                        # (R, S)
    present = np.isfinite(z)
    worst = np.max(np.where(present, z, -np.inf), axis=1)              # (R,)
    return np.where(present.any(axis=1), worst / Z_LIMIT, np.nan)


def shifted(mean: np.ndarray, scale: np.ndarray, stats: np.ndarray,
            missing_share: np.ndarray | None = None) -> np.ndarray:
    """(R, S) statistics -> (R,) bool: D > 1 or a statistic missing that training rarely
    lacked (``assess_stats``'s ``shifted``, for many recordings at once)."""
    x = np.atleast_2d(np.asarray(stats, dtype=np.float64))
    d = stats_distances(mean, scale, x)
    return unlearned_missing(x, missing_share).any(axis=1) | (np.nan_to_num(d, nan=0.0) > 1.0)


def assess_stats(mean: np.ndarray, scale: np.ndarray, names: Sequence[str],
                 values: np.ndarray, missing_share: np.ndarray | None = None) -> DomainCheck:
    """One recording's (S,) statistics (the detector's, in ``names`` order) against the train
    means and scales and, where the detector has them, the shares of training recordings on
    which each statistic was missing."""
    x = np.asarray(values, dtype=np.float64).reshape(1, -1)
    distance = float(stats_distances(mean, scale, x)[0])
    unlearned = np.flatnonzero(unlearned_missing(x, missing_share)[0])
    if len(unlearned):
        return DomainCheck(SHIFTED, distance, _band_reason([names[i] for i in unlearned],
                                                           x.shape[1], missing_share is None))
    if not distance > 1.0:
        return DomainCheck(IN, distance, "")
    z = standardised(mean, scale, x)[0]
    worst = int(np.nanargmax(np.abs(z)))          # a learnt missing statistic has no z
    return DomainCheck(SHIFTED, distance, f"{STATISTIC}: {names[worst]} {z[worst]:+.1f} train "
                                          f"sd from the train mean (limit {Z_LIMIT:g})")


def _band_reason(missing: Sequence[str], total: int, any_missing: bool) -> str:
    """``band: ...`` naming the missing statistics that shift the recording."""
    named = ", ".join(missing[:NAMED]) + (f" +{len(missing) - NAMED} more"
                                          if len(missing) > NAMED else "")
    which = ("" if any_missing else
             f" that training lacked on under {MIN_MISSING_SHARE:.0%} of its recordings")
    return (f"{BAND}: {len(missing)} of {total} statistics missing{which} ({named}; octave "
            "bands above the recording's Nyquist frequency)")


def shifted_shares(mean: np.ndarray, scale: np.ndarray, stats: Mapping[str, np.ndarray],
                   missing_share: np.ndarray | None = None) -> dict[str, float]:
    """``domain/<split>_shifted_rate`` (with a 95 % Wilson interval) and
    ``domain/<split>_recordings`` of each split's (R, S) statistics (the detector's)."""
    out: dict[str, float] = {}
    for name, values in stats.items():
        flagged = shifted(mean, scale, values, missing_share)               # (R,)
        k, n = int(flagged.sum()), int(flagged.size)
        low, high = wilson_interval(k, n)
        out.update({f"domain/{name}_shifted_rate": k / n if n else float("nan"),
                    f"domain/{name}_shifted_rate_ci_low": low,
                    f"domain/{name}_shifted_rate_ci_high": high,
                    f"domain/{name}_recordings": float(n)})
    return out


__all__ = ["MIN_MISSING_SHARE", "Z_LIMIT", "assess_stats", "missing_shares", "shifted",
           "shifted_shares", "standardised", "stats_distances", "unlearned_missing"]

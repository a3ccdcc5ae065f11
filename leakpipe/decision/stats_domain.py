"""Domain check of a `logger_stats` detector: are a recording's statistics like the training
recordings'? Pure numpy.

A `logger_stats` detector keeps the train mean and standard deviation of every statistic it
reads (``LoggerStatsNet``'s standardisation), which is all of the training distribution that it
stores. A recording's standardised statistic ``z = (x - mean) / scale`` says how many train
standard deviations it lies from the typical training recording, and

    D = max over the statistics present of |z| / Z_LIMIT,

so D = 1 is ``Z_LIMIT`` train standard deviations out in the worst statistic. A recording is
``shifted`` (``leakpipe.decision.domain``'s answers, ``DomainCheck``) when D > 1, reason
``statistic: <name> <z> train sd ...``, or when statistics the detector reads are missing at
its sample rate (octave bands above its Nyquist frequency: the model takes the train mean for
them, so the call rests on fewer statistics than it was fitted on), reason ``band: ...``, as
the CNN's check says of mel bands above a recording's Nyquist frequency.

Unlike the CNN's check, the limit is fixed rather than set on val (a detector file of this kind
keeps no val distances): ``Z_LIMIT`` = 6 standard deviations, beyond which at most 1 / 36 of
any distribution lies (Chebyshev), about 2e-9 of a normal one. The share of val and test
recordings it flags is reported with the shipped detector's model card, so whether it flags
new sites of the training network too often is measured, not assumed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from leakpipe.decision.domain import IN, SHIFTED, DomainCheck
from leakpipe.decision.metrics import wilson_interval

Z_LIMIT = 6.0             # |z| (train standard deviations) at which a statistic is out of range
BAND, STATISTIC = "band", "statistic"


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


def shifted(mean: np.ndarray, scale: np.ndarray, stats: np.ndarray) -> np.ndarray:
    """(R, S) statistics -> (R,) bool: D > 1 or a statistic missing (``assess_stats``'s
    ``shifted``, for many recordings at once)."""
    x = np.atleast_2d(np.asarray(stats, dtype=np.float64))
    d = stats_distances(mean, scale, x)
    return ~np.isfinite(x).all(axis=1) | (np.nan_to_num(d, nan=0.0) > 1.0)


def assess_stats(mean: np.ndarray, scale: np.ndarray, names: Sequence[str],
                 values: np.ndarray) -> DomainCheck:
    """One recording's (S,) statistics (the detector's, in ``names`` order) against the train
    means and scales."""
    x = np.asarray(values, dtype=np.float64).reshape(1, -1)
    distance = float(stats_distances(mean, scale, x)[0])
    missing = int(np.sum(~np.isfinite(x)))
    if missing:
        return DomainCheck(SHIFTED, distance, f"{BAND}: {missing} of {x.shape[1]} statistics "
                                              "missing (octave bands above the recording's "
                                              "Nyquist frequency)")
    if not distance > 1.0:
        return DomainCheck(IN, distance, "")
    z = standardised(mean, scale, x)[0]
    worst = int(np.argmax(np.abs(z)))
    return DomainCheck(SHIFTED, distance, f"{STATISTIC}: {names[worst]} {z[worst]:+.1f} train "
                                          f"sd from the train mean (limit {Z_LIMIT:g})")


def shifted_shares(mean: np.ndarray, scale: np.ndarray,
                   stats: Mapping[str, np.ndarray]) -> dict[str, float]:
    """``domain/<split>_shifted_rate`` (with a 95 % Wilson interval) and
    ``domain/<split>_recordings`` of each split's (R, S) statistics (the detector's)."""
    out: dict[str, float] = {}
    for name, values in stats.items():
        flagged = shifted(mean, scale, values)                              # (R,)
        k, n = int(flagged.sum()), int(flagged.size)
        low, high = wilson_interval(k, n)
        out.update({f"domain/{name}_shifted_rate": k / n if n else float("nan"),
                    f"domain/{name}_shifted_rate_ci_low": low,
                    f"domain/{name}_shifted_rate_ci_high": high,
                    f"domain/{name}_recordings": float(n)})
    return out


__all__ = ["Z_LIMIT", "assess_stats", "shifted", "shifted_shares", "standardised",
           "stats_distances"]

"""Evaluate's domain reference: the training distribution of band profiles, its threshold set on
val and the share of test recordings it flags (``leakpipe.decision.domain`` holds the method).

The reference comes from the **train** split: it is what the network learnt from, so "like the
training recordings" is measured against the training recordings themselves, and the threshold
is set on val, recordings of other sites the reference never saw, so that about 1 % of them
exceed it (a threshold set on the reference's own recordings would be in-sample and flag more
new-site recordings than it says). Evaluate depends on ``data/processed/train.h5`` for this
(dvc.yaml). A caller passing no train split (cross-validation folds) gets no reference.

A `logger_stats` detector keeps its own reference, the training recordings' means and standard
deviations of its statistics: its check and the share of a split it flags are
``leakpipe.decision.stats_domain``'s (reported on the shipped detector's model card).

The test split is only reported: its flagged share with a 95 % Wilson interval over its
recordings (``domain/test_shifted_rate``, ``_ci_low``, ``_ci_high``); the default test split
holds sites the reference never saw, so a rate well above 1 % says the sites differ more than
val's do. The set check of the test recordings against val's (``domain/test_set_p_value``, a
one-sided rank test; ``domain/test_set_shifted`` 1 when it is below ``SET_ALPHA``) says the
same of the split as a whole: on a test split drawn like val it should be 0.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from leakpipe.data.reader import open_split
from leakpipe.decision.domain import (
    SHIFTED,
    DomainReference,
    band_profile,
    beyond_band,
    distances,
    fit_reference,
    fit_threshold,
    recording_profiles,
)
from leakpipe.decision.domain_set import set_check
from leakpipe.decision.metrics import wilson_interval
from leakpipe.detector import Network

log = logging.getLogger(__name__)

READ_ROWS = 256           # clips read from the HDF5 file at a time
NORM_WITH_LEVEL = "none"  # the input_norm under which the network sees the absolute level


def split_profiles(path: Path) -> np.ndarray:
    """(R, M) band profiles of a split's recordings (clips of one recording averaged)."""
    return split_profiles_and_bands(path)[0]


def split_profiles_and_bands(path: Path) -> tuple[np.ndarray, np.ndarray | None]:
    """(R, M) band profiles of a split's recordings and (R,) each one's Nyquist frequency at
    its own rate (None for a split built without recording rates), in recording id order."""
    with open_split(path) as split:
        ids = split.recording_ids
        clips = [np.stack([band_profile(clip) for clip in block])
                 for _, block in split.iter_chunks(READ_ROWS)]
        rates = split.recording_rates if split.has_stats else None
    _, profiles = recording_profiles(np.concatenate(clips), ids)
    if rates is None:
        return profiles, None
    _, first = np.unique(np.asarray(ids), return_index=True)      # in sorted_ids' order
    return profiles, rates[first] / 2.0


def build_reference(network: Network, paths: Mapping[str, Path]) -> DomainReference:
    """The reference of ``paths['train']`` (and the band its recordings reached at their own
    rates) with its threshold set on ``paths['val']``."""
    profiles, band_hz = split_profiles_and_bands(paths["train"])
    ref = fit_reference(profiles, uses_level=network.input_norm == NORM_WITH_LEVEL,
                        band_hz=band_hz)
    return fit_threshold(ref, split_profiles(paths["val"]))


def domain_figures(ref: DomainReference, paths: Mapping[str, Path],
                   centers_hz: np.ndarray | None = None) -> dict[str, float]:
    """Threshold, val exceedance and test flagged share (with a 95 % Wilson interval). With
    the mel bands' ``centers_hz``, a recording is shifted as predict judges it: D over the
    threshold, or a band training filled beyond its own rate's Nyquist frequency."""
    out = {"domain/threshold": ref.threshold}
    for name in ("val", "test"):
        profiles, band_hz = split_profiles_and_bands(paths[name])
        d = distances(ref, profiles)                                          # (R,)
        shifted = d > ref.threshold
        if centers_hz is not None and band_hz is not None:
            shifted |= np.array([beyond_band(ref, centers_hz, b).any() for b in band_hz])
        k, n = int(shifted.sum()), int(shifted.size)
        low, high = wilson_interval(k, n)
        out.update({f"domain/{name}_shifted_rate": k / n, f"domain/{name}_shifted_rate_ci_low":
                    low, f"domain/{name}_shifted_rate_ci_high": high,
                    f"domain/{name}_recordings": float(n)})
    test_set = set_check(ref, d)
    out.update({"domain/test_set_p_value": test_set.p_value,
                "domain/test_set_shifted": float(test_set.domain == SHIFTED)})
    log.info("domain check: threshold %.3f (%s); val %.1f %% shifted, test %.1f %% "
             "(%.1f-%.1f %%); test split as a set: %s", ref.threshold, ref.fitted_on,
             100 * out["domain/val_shifted_rate"], 100 * out["domain/test_shifted_rate"],
             100 * out["domain/test_shifted_rate_ci_low"],
             100 * out["domain/test_shifted_rate_ci_high"], test_set.line())
    return out

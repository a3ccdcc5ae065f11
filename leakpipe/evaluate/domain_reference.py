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
    with open_split(path) as split:
        ids = split.recording_ids
        clips = [np.stack([band_profile(clip) for clip in block])
                 for _, block in split.iter_chunks(READ_ROWS)]
    return recording_profiles(np.concatenate(clips), ids)[1]


def build_reference(network: Network, paths: Mapping[str, Path]) -> DomainReference:
    """The reference of ``paths['train']`` with its threshold set on ``paths['val']``."""
    ref = fit_reference(split_profiles(paths["train"]),
                        uses_level=network.input_norm == NORM_WITH_LEVEL)
    return fit_threshold(ref, split_profiles(paths["val"]))


def domain_figures(ref: DomainReference, paths: Mapping[str, Path]) -> dict[str, float]:
    """Threshold, val exceedance and test flagged share (with a 95 % Wilson interval)."""
    out = {"domain/threshold": ref.threshold}
    for name in ("val", "test"):
        d = distances(ref, split_profiles(paths[name]))                     # (R,)
        shifted = d > ref.threshold
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

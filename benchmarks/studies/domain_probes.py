"""Candidate third parts of the domain check, measured, not shipped (domain_check.py uses them).

Issue #24 asks for the synthetic field set (a machine working near every sensor: a one-octave
noise band at 300-2000 Hz that runs in bursts of 0.5-3 s, amplitude-modulated at 15-40 Hz) to
be flagged. The detector's two parts (level, spectral shape of the time-averaged band profile)
do not flag it. Two physically different candidates are measured here with the same rule as
the shipped parts (reference on the train recordings, scaled by its training 99th percentile,
threshold the ``ceil(0.99 n)``-th val value), each on its own and joined with the shipped D:

- **embedding**: the network's penultimate layer (``model.fc``, after its ReLU) averaged over
  every short segment of a recording, with a low-rank Mahalanobis distance (``AXES`` principal
  axes of the training recordings' embeddings plus per-dimension residual variance): what the
  network itself makes of the recording, the issue's suggestion.
- **band switching**: the machine switches a one-octave band on and off, which nothing in a
  time average shows. Per recording, for windows one octave wide centred from 250 Hz to 2.5
  kHz (1/6-octave steps), the band contrast of every long segment: the window's inner octave
  minus its two half-octave flanks, with the level and tilt over the window projected out (a
  broadband source wandering in level or a spectral slope gives no contrast). Its spread over
  the recording's segments (90th - 10th percentile, so a single knock or click does not count)
  over the training recordings' 99th percentile at that window, maximised over windows.

Pure numpy apart from ``embedding_features`` (one forward pass of the network).

Figures: docs/evaluation.md, docs/results/domain-check.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from leakpipe.decision.domain import threshold_rank
from leakpipe.decision.lowrank import fit_lowrank, lowrank_distance
from leakpipe.decision.metrics import wilson_interval

AXES = 4                  # principal axes of the training embeddings (as the shape part)
SCALE_QUANTILE = 99.0     # training percentile that scales a part to 1 (as the shipped parts)
MIN_VARIANCE = 1e-6       # floor of an embedding axis' / residual variance (relative)
WINDOW_LOW_HZ, WINDOW_HIGH_HZ, WINDOW_STEP_OCT = 250.0, 2600.0, 1.0 / 6.0
INNER_OCT, FLANK_OCT = 0.5, 1.0   # half-widths: inner octave, flanks out to +-1 octave
SPREAD = (10.0, 90.0)     # percentiles of a window's contrast over a recording's segments
BATCH = 8192              # short segments per forward pass


@dataclass(frozen=True)
class Probe:
    """A candidate part fitted on train: its training scale and its val threshold."""

    name: str
    scale: float
    threshold: float


def contrast_windows(centers_hz: np.ndarray) -> np.ndarray:
    """(K, M) weights: each row gives one window's band contrast of an (M,) dB spectrum.

    Inner bands (within ``INNER_OCT`` of the centre) count +1, flanks (out to ``FLANK_OCT``)
    -1; the projection on [1, log2 f] over the window is removed, so a level change or a
    spectral tilt across the window gives 0, and the row is scaled so that a 1 dB rise of the
    inner octave alone reads 1 dB.
    """
    centres = WINDOW_LOW_HZ * 2.0 ** np.arange(
        0.0, math.log2(WINDOW_HIGH_HZ / WINDOW_LOW_HZ) + 1e-9, WINDOW_STEP_OCT)
    rows = []
    for fc in centres:
        octs = np.log2(np.maximum(centers_hz, 1e-3) / fc)
        inner = np.abs(octs) <= INNER_OCT
        support = np.abs(octs) <= FLANK_OCT
        w0 = np.where(inner, 1.0, np.where(support, -1.0, 0.0))
        basis = np.stack([support * 1.0, support * octs], axis=1)
        w = (w0 - basis @ np.linalg.lstsq(basis, w0, rcond=None)[0]) * support
        rows.append(w / (w @ inner))
    return np.stack(rows)


def switching_features(mel: np.ndarray, windows: np.ndarray) -> np.ndarray:
    """(clips, L, S, M, T) log-mel -> (K,) spread of each window's contrast over the long
    segments (each long segment's band level: the mean over its short segments and frames)."""
    x = np.asarray(mel, dtype=np.float64)
    levels = x.mean(axis=(2, 4)).reshape(-1, x.shape[3])          # (clips * L, M)
    contrast = levels @ windows.T                                 # (clips * L, K)
    low, high = np.percentile(contrast, SPREAD, axis=0)
    return high - low


def embedding_features(model: torch.nn.Module, mel: np.ndarray) -> np.ndarray:
    """(clips, L, S, M, T) log-mel (already input-normalised) -> (H,) mean of the network's
    penultimate layer over every short segment."""
    x = torch.from_numpy(np.ascontiguousarray(mel, dtype=np.float32))
    x = x.reshape(-1, 1, *x.shape[-2:])
    seen: list[torch.Tensor] = []
    hook = model.fc.register_forward_hook(lambda _m, _i, out: seen.append(out.double().sum(0)))
    try:
        with torch.inference_mode():
            for start in range(0, len(x), BATCH):
                model(x[start:start + BATCH])
    finally:
        hook.remove()
    return (torch.stack(seen).sum(0) / len(x)).numpy()


def lowrank_part(train: np.ndarray, axes: int = AXES):  # noqa: ANN201 (a closure)
    """A distance (R, H) -> (R,) fitted on (R0, H) training rows: the shape part's low-rank
    Mahalanobis (``decision.lowrank.fit_lowrank``), its variance floor relative to the largest
    eigenvalue (embeddings have no dB scale)."""
    model = fit_lowrank(train, axes, MIN_VARIANCE, relative=True)
    return lambda rows: lowrank_distance(model, rows)


def switching_part(train: np.ndarray):  # noqa: ANN201 (a closure)
    """(R, K) -> (R,): the largest window spread over the training 99th percentile there."""
    q = np.maximum(np.percentile(train, SCALE_QUANTILE, axis=0), 1e-9)
    return lambda rows: np.max(rows / q, axis=1)


def fit_probe(name: str, raw_train: np.ndarray, raw_val: np.ndarray) -> Probe:
    """Scale a part's raw values by their training 99th percentile, threshold on val."""
    scale = max(float(np.percentile(raw_train, SCALE_QUANTILE)), 1e-9)
    val = np.sort(raw_val / scale)
    return Probe(name, scale, float(val[threshold_rank(val.size) - 1]))


def rate(flags: np.ndarray) -> dict[str, float | int]:
    """n, flagged count, rate and its 95 % Wilson interval."""
    k, n = int(np.sum(flags)), int(np.size(flags))
    low, high = wilson_interval(k, n)
    return {"n": n, "shifted": k, "shifted_rate": k / n if n else math.nan,
            "ci95_low": low, "ci95_high": high}

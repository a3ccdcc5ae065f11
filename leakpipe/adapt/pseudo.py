"""Pseudo-labels and segment selection: pure functions on probability tables.

One adaptation round turns the current detector's view of an unlabelled recording into
training rows:

1. ``pseudo_label``: the recording's label is the detector's own file decision (its rule's
   score against its threshold), unless the score lies within ``margin`` of the threshold:
   then the recording is not pseudo-labelled at all (a coin-flip decision teaches noise).
2. ``select_segments``: of a recording judged LEAK, the ``keep_fraction`` of its long
   segments with the HIGHEST leak probability are kept; of one judged not LEAK, those with the
   LOWEST. So a leak recording contributes its clearest leak sound and an interference burst
   inside a quiet recording is not taught as "not leak" unless the detector is sure of it.
   The count is ``ceil(keep_fraction * n)`` (at least one); equal probabilities keep the
   earlier segment (a stable sort), so the choice is reproducible.
3. ``pack_rows``: kept long segments become rows of the training HDF5 (n_long long segments
   per row, as a clip); the last row is filled by repeating the recording's kept segments
   from the start. Training sees short segments one by one, so a row's order is immaterial.

``label_pool`` is the pseudo-label step of a round: 1 and 2 for every pool recording, with its
labels by recording key and its counts, as the round records them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

LEAK, NOT_LEAK = 1, 0
FRACTION_DECIMALS = 9   # 0.3 * 10 is 3.0000000000000004 in floats: round before the ceiling


@dataclass(frozen=True)
class Pseudo:
    """What one round makes of one recording."""

    label: int | None      # LEAK / NOT_LEAK, None = within the margin (not used)
    kept: np.ndarray       # (k,) long-segment indices kept, ascending; empty when label is None


def pseudo_label(score: float, threshold: float, margin: float) -> int | None:
    """The file decision ``score >= threshold``; None when ``|score - threshold| < margin``."""
    if abs(score - threshold) < margin:
        return None
    return LEAK if score >= threshold else NOT_LEAK


def keep_count(n: int, fraction: float) -> int:
    """Long segments kept of ``n``: ``ceil(fraction * n)``, at least 1 (0 of 0)."""
    if n <= 0:
        return 0
    return max(1, math.ceil(round(fraction * n, FRACTION_DECIMALS)))


def select_segments(long_probs: np.ndarray, label: int, fraction: float) -> np.ndarray:
    """Indices (ascending) of the kept long segments of one recording: (n,) -> (k,).

    LEAK keeps the highest probabilities, NOT_LEAK the lowest; ties keep the earlier segment.
    """
    probs = np.asarray(long_probs, dtype=np.float64)
    key = -probs if label == LEAK else probs
    order = np.argsort(key, kind="stable")
    return np.sort(order[:keep_count(len(probs), fraction)])


def pseudo_labels(scores: np.ndarray, long_probs: list[np.ndarray], threshold: float, *,
                  margin: float, fraction: float) -> list[Pseudo]:
    """``pseudo_label`` + ``select_segments`` for every recording: (R,) scores, R long-prob
    vectors (each recording its own length)."""
    out = []
    for score, probs in zip(scores, long_probs, strict=True):
        label = pseudo_label(float(score), threshold, margin)
        kept = (np.zeros(0, dtype=np.int64) if label is None
                else select_segments(probs, label, fraction))
        out.append(Pseudo(label, kept))
    return out


@dataclass(frozen=True)
class PoolLabels:
    """What one round makes of the whole pool."""

    pseudo: tuple[Pseudo, ...]           # per recording, in the pool's order
    labels: dict[str, int | None]        # recording key -> LEAK / NOT_LEAK / None
    counts: dict[str, int]               # ``label_counts``


def label_pool(keys: Sequence[str], scores: np.ndarray, long_probs: list[np.ndarray],
               threshold: float, *, margin: float, fraction: float) -> PoolLabels:
    """``pseudo_labels`` of the pool recordings ``keys`` (their rule scores and long-segment
    probabilities under the round's detector, whose threshold is ``threshold``)."""
    pseudo = pseudo_labels(scores, long_probs, threshold, margin=margin, fraction=fraction)
    labels = {key: p.label for key, p in zip(keys, pseudo, strict=True)}
    return PoolLabels(tuple(pseudo), labels, label_counts(pseudo))


def pack_rows(segments: np.ndarray, n_long: int) -> np.ndarray:
    """(k, S, M, T) kept long segments -> (ceil(k / n_long), n_long, S, M, T) rows; the last
    row is completed with the first segments again."""
    k = len(segments)
    if k == 0:
        return np.zeros((0, n_long, *segments.shape[1:]), dtype=segments.dtype)
    rows = math.ceil(k / n_long)
    take = np.arange(rows * n_long) % k
    return segments[take].reshape(rows, n_long, *segments.shape[1:])


def label_counts(pseudo: Sequence[Pseudo]) -> dict[str, int]:
    """Recordings pseudo-labelled LEAK / not LEAK / left out, and the long segments kept."""
    labels = [p.label for p in pseudo]
    return {"leak": labels.count(LEAK), "not_leak": labels.count(NOT_LEAK),
            "within_margin": labels.count(None),
            "segments": int(sum(len(p.kept) for p in pseudo))}


def changed_labels(before: Mapping[str, int | None], after: Mapping[str, int | None]) -> int:
    """Recordings whose pseudo-label (LEAK, not LEAK or none) differs between two rounds."""
    return sum(before.get(key) != value for key, value in after.items())


def label_accuracy(labels: Mapping[str, int | None], truth: Mapping[str, int]) -> float:
    """Share of the pseudo-labelled recordings whose label is right (nan when none is)."""
    scored = [(labels[k], truth[k]) for k in labels if labels[k] is not None and k in truth]
    if not scored:
        return float("nan")
    return sum(a == b for a, b in scored) / len(scored)

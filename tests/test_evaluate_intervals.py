"""Intervals of every figure evaluate reports: file, segment and per-class, each bracketing its
point value, drawn over recordings (leakpipe/evaluate/split_metrics.py)."""

from __future__ import annotations

import numpy as np
import pytest

from leakpipe.evaluate.figures import FileTable
from leakpipe.evaluate.split_metrics import Resampling, class_figures, split_figures

CLASSES = ("BACKGROUND", "LEAK", "NORMAL")
BINARY_FIGURES = ("accuracy", "precision", "recall", "specificity", "f1", "roc_auc", "pr_auc")
RESAMPLING = Resampling(resamples=300, confidence=0.9, seed=0)


def _split(seed: int = 0, recordings: int = 30,
           segments: tuple[int, int] = (4, 2)) -> tuple[FileTable, np.ndarray]:
    """Two clips per recording, a recording's label shared; leaks score higher, with overlap."""
    rng = np.random.default_rng(seed)
    label = np.repeat(rng.integers(0, len(CLASSES), recordings), 2)
    files = len(label)
    table = FileTable(recording_id=np.repeat(np.arange(recordings), 2).astype(str),
                      clip=np.tile([0, 1], recordings), group=np.array(["g"] * files),
                      label=label, class_names=CLASSES, leak_index=1)
    leak = (label == 1)[:, None, None]
    seg_probs = np.clip(0.15 * leak + 0.85 * rng.random((files, *segments)), 0, 1)
    return table, seg_probs.astype(np.float32)


def _assert_bracketed(metrics: dict[str, float], prefix: str, names: tuple[str, ...]) -> None:
    for name in names:
        key = f"{prefix}_{name}"
        low, high = metrics[f"{key}_ci_low"], metrics[f"{key}_ci_high"]
        assert low <= metrics[key] <= high, key
        assert low < high, key          # 30 recordings: no figure is certain


def test_file_and_segment_figures_get_intervals_that_bracket_them() -> None:
    table, seg_probs = _split()
    file_score = seg_probs.max(axis=(1, 2))                   # any segment: scores spread
    got = split_figures("val", table, file_score >= 0.9, file_score, seg_probs, 0.5, RESAMPLING)
    _assert_bracketed(got, "val/clip", BINARY_FIGURES)
    _assert_bracketed(got, "val/seg", BINARY_FIGURES)
    plain = split_figures("val", table, file_score >= 0.9, file_score, seg_probs, 0.5, None)
    assert not any("_ci_" in key for key in plain)
    assert plain == {k: v for k, v in got.items() if "_ci_" not in k}


def test_per_class_rates_get_intervals_that_bracket_them() -> None:
    table, seg_probs = _split(1)
    rng = np.random.default_rng(1)
    class_probs = 0.5 * np.eye(len(CLASSES))[table.label] + rng.random((len(table.label), 3))
    per_file = seg_probs[0].size
    n = len(table.label) * per_file
    seg_pred = np.where(rng.random(n) < 0.6, np.repeat(table.label, per_file),
                        rng.integers(0, 3, n))                     # 60 % right, rest random
    got = class_figures("test", table, class_probs, seg_pred, per_file, RESAMPLING)
    for name in CLASSES:
        for level in ("clip", "seg"):
            _assert_bracketed(got, f"test/class/{name}/{level}", ("precision", "recall", "f1"))
            assert f"test/class/{name}/{level}_support_ci_low" not in got


def test_identical_segments_give_the_intervals_of_their_file() -> None:
    """Every segment of a file equal to the file's score: the segment figures and intervals
    are the file's, since a resample draws recordings and a file's segments move with it (a
    bootstrap of segments as if independent would give far narrower intervals)."""
    table, seg_probs = _split(2, segments=(3, 5))
    file_score = seg_probs[:, 0, 0]
    same = np.broadcast_to(file_score[:, None, None], seg_probs.shape)
    got = split_figures("test", table, file_score >= 0.5, file_score, same, 0.5, RESAMPLING)
    for name in BINARY_FIGURES:
        for suffix in ("", "_ci_low", "_ci_high"):
            assert got[f"test/seg_{name}{suffix}"] == pytest.approx(
                got[f"test/clip_{name}{suffix}"]), name + suffix

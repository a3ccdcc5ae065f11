"""The shipped detector's own errors: figures of its calls per test recording, on its scale
(not evaluate's CNN clips), written by stage ship for every kind."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from leakpipe.ship.cnn_evaluation import cnn_test_calls
from leakpipe.ship.figures import (
    LEAK_PROB,
    MEAN_CLIP_SCORE,
    ShippedCalls,
    calls_from_rows,
    plot_records,
    shipped_figures,
)
from leakpipe.ship.stage import PREDICTION_COLUMNS


def _rows() -> list[dict[str, str]]:
    """ship's predictions table: val rows (ignored) and six test recordings."""
    rows = [{"split": "val", "recording_id": "v.wav", "group": "s9", "truth": "1",
             "leak_prob": "0.9", "decision": "LEAK", "threshold": "0.4", "raw_score": "0.9"}]
    for i, (truth, prob) in enumerate([(1, 0.91), (1, 0.62), (1, 0.35), (0, 0.45), (0, 0.1),
                                       (0, 0.05)]):
        rows.append({"split": "test", "recording_id": f"r{i}.wav", "group": f"s{i}",
                     "truth": str(truth), "leak_prob": str(prob),
                     "decision": "LEAK" if prob >= 0.4 else "NOLEAK", "threshold": "0.4",
                     "raw_score": str(prob)})
    return rows


def test_the_calls_are_the_test_rows_and_the_confusion_counts_them() -> None:
    calls = calls_from_rows(_rows())
    assert calls is not None and calls.scale == LEAK_PROB and calls.threshold == 0.4
    assert calls.truth.tolist() == [True, True, True, False, False, False]
    records = plot_records(calls)
    pairs = [(r["actual"], r["predicted"]) for r in records["confusion"]]
    assert pairs.count(("LEAK", "LEAK")) == 2 and pairs.count(("LEAK", "NOLEAK")) == 1
    assert pairs.count(("NOLEAK", "LEAK")) == 1 and pairs.count(("NOLEAK", "NOLEAK")) == 2
    assert records["roc"] and records["pr"] and len(records["reliability"]) == 10
    assert calls_from_rows([r for r in _rows() if r["split"] == "val"]) is None


def test_every_figure_names_the_kind_and_the_operating_point() -> None:
    calls = calls_from_rows(_rows())
    figures = shipped_figures("fused", calls)
    assert set(figures) == {"confusion_test", "roc_test", "pr_test", "reliability_test"}
    title = figures["confusion_test"].axes[0].get_title()
    assert "shipped fused: 6 test recordings (3 leaks)" in title and "leak_prob 0.4000" in title
    cnn = ShippedCalls(calls.truth, calls.score, calls.decision, 0.4, MEAN_CLIP_SCORE)
    assert "reliability_test" not in shipped_figures("cnn", cnn)   # not a probability


def test_the_cnn_kind_is_called_per_recording_from_evaluates_clips(tmp_path: Path) -> None:
    path = tmp_path / "predictions.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, ["split", "recording_id", "group", "leak", "leak_score"])
        writer.writeheader()
        for rid, leak, scores in (("a", 1, (0.9, 0.7)), ("b", 0, (0.2, 0.6)), ("c", 0, (0.1,))):
            for s in scores:
                writer.writerow({"split": "test", "recording_id": rid, "group": rid,
                                 "leak": leak, "leak_score": s})
    calls = cnn_test_calls(path, 0.5)
    assert calls is not None and calls.scale == MEAN_CLIP_SCORE
    np.testing.assert_allclose(calls.score, [0.8, 0.4, 0.1])
    assert calls.decision.tolist() == [True, False, False]
    assert cnn_test_calls(tmp_path / "missing.csv", 0.5) is None


@pytest.mark.parametrize("column", PREDICTION_COLUMNS)
def test_the_rows_read_are_ships_columns(column: str) -> None:
    assert column in _rows()[0]

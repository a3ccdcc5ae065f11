"""A `logger_stats` detector as ONNX: (batch, S) recording statistics -> (batch,) P(LEAK).

The graph is ``StatsScorer``: the detector's ``LoggerStatsNet`` (NaN -> train mean, standardise,
linear) and a sigmoid, so an edge device that computes the statistics as `build` does
(rules.json says how: frame length, percentiles, bands, floor) runs one small graph and compares
its output with the threshold. NaN inputs (a band above the device's Nyquist frequency) are
part of the contract and of the check: the check rows carry missing bands, and onnxruntime must
agree with torch on them within ``TOLERANCE``.
"""

from __future__ import annotations

import dataclasses
import io
import warnings
from typing import Any

import numpy as np
import torch
from torch import nn

from leakpipe.export.graph import OPSET, TOLERANCE, ExportError, cpu_session
from leakpipe.features.recording_stats import stat_names
from leakpipe.stats_detector import StatsDetector

INPUT_NAME = "statistics"   # (batch, S) float32, the columns of rules.json "statistics"
OUTPUT_NAME = "leak_prob"   # (batch,) float32: the net's P(LEAK) (compare with "threshold")
CHECK_ROWS = 64
CHECK_SEED = 0
RULES_FORMAT = "leakpipe.edge_rules"
RULES_VERSION = 1
DOC = ("leakpipe logger_stats scorer: (batch, S) whole-recording level statistics (NaN = band "
       "above Nyquist) -> P(LEAK); see metadata leakpipe_rules")


class StatsScorer(nn.Module):
    """(B, S) statistics -> (B,) probability."""

    def __init__(self, detector: StatsDetector) -> None:
        super().__init__()
        self.net = detector.net.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.net(x))


def onnx_bytes(detector: StatsDetector) -> bytes:
    example = torch.zeros((2, len(detector.net.names)))
    buffer = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore", DeprecationWarning)   # as leakpipe.export.graph
        torch.onnx.export(StatsScorer(detector), (example,), buffer, dynamo=False,
                          opset_version=OPSET, input_names=[INPUT_NAME],
                          output_names=[OUTPUT_NAME],
                          dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}})
    return buffer.getvalue()


def check_rows(detector: StatsDetector, n: int = CHECK_ROWS) -> np.ndarray:
    """(n, S) float32: the train means plus 2 standard deviations of noise, every fourth row
    with a missing (NaN) statistic."""
    net = detector.net
    rng = np.random.default_rng(CHECK_SEED)
    rows = net.mean.numpy() + 2.0 * net.scale.numpy() * rng.standard_normal(
        (n, len(net.names)))
    rows[::4, rng.integers(0, len(net.names), len(rows[::4]))] = np.nan
    return rows.astype(np.float32)


def max_difference(detector: StatsDetector, model: bytes) -> float:
    rows = check_rows(detector)
    session = cpu_session(model)
    worst = 0.0
    for batch in (rows, rows[:1]):
        with torch.inference_mode():
            expected = StatsScorer(detector)(torch.from_numpy(batch)).numpy()
        got = session.run([OUTPUT_NAME], {INPUT_NAME: np.ascontiguousarray(batch)})[0]
        worst = max(worst, float(np.abs(got - expected).max()))
    return worst


def checked_onnx(detector: StatsDetector, where: str) -> tuple[bytes, float]:
    model = onnx_bytes(detector)
    diff = max_difference(detector, model)
    if not diff <= TOLERANCE:
        raise ExportError(f"{where}: the ONNX graph differs from the PyTorch model by "
                          f"{diff:.3g} (> {TOLERANCE:g}) on {CHECK_ROWS} check rows; nothing "
                          "written")
    return model, diff


def stats_rules(detector: StatsDetector, *, source: str, sha256: str, onnx_file: str,
                max_diff: float) -> dict[str, Any]:
    """What a device needs beside the graph: how to measure, which columns, the threshold."""
    every = stat_names(detector.stats)
    return {
        "format": RULES_FORMAT, "version": RULES_VERSION, "kind": detector.kind,
        "source": {"model": source, "sha256": sha256},
        "onnx": {"file": onnx_file, "opset": OPSET, "input": INPUT_NAME,
                 "input_shape": ["batch", len(detector.net.names)], "output": OUTPUT_NAME,
                 "max_abs_diff_vs_torch": max_diff},
        "statistics_config": dataclasses.asdict(detector.stats),
        "all_statistics": list(every),
        "statistics": list(detector.net.names),
        "missing": "NaN: a band above the recording's Nyquist frequency",
        "threshold": float(detector.threshold),
        "calibration": detector.calibration.to_dict(),
        "prob_threshold": detector.prob_threshold,
        "quality": dataclasses.asdict(detector.quality),
        "metrics": detector.metrics,
    }


__all__ = ["StatsScorer", "check_rows", "checked_onnx", "onnx_bytes", "stats_rules"]

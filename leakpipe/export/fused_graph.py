"""A `fused` detector as one ONNX graph: a recording's segments and statistics -> its P(LEAK).

Inputs: ``segments`` (B, 1, M, T) float32, every segment of the recording's clips, clip by
clip (clip-major: clip, long segment, short segment, as ``clips.reshape(-1, 1, M, T)`` lays
them out), the log-mel clips as `leakpipe predict` computes them (rules.json ``features``) and
each clip normalised by rules.json ``input_norm``: exactly what the CNN kind's graph takes,
B = clips x L x S dynamic; ``statistics`` (1, S) float32, the statistics part's columns
(rules.json ``statistics``; NaN = a band above the recording's Nyquist frequency). Output
``leak_prob`` (1,) float32: the stacked probability, compared with rules.json ``threshold``
(``calibration`` maps it to the reported leak_prob).

The graph holds the rest of the decision (``FusedScorer``): the CNN on every segment (the 2-D
network, as ``leakpipe.export.graph`` exports it), the detector's voting rule per clip (a k-th
largest is a ``TopK``), the mean over the clips, the statistics' model (``LoggerStatsNet``: NaN
-> train mean), both parts' logits clipped as the stacker reads them (``decision.stacking``),
the stacker and a sigmoid. From the segment probabilities on it computes in float64, as the
detector does: a mean near 0 or 1 would lose its logit in float32. The normalisation stays
outside, as for the CNN kind: inside, the regrouping of segments by clip before the network
hides the mel axis's length from the exporter (its adaptive pool then cannot be exported).
The check runs recordings of one and of several clips, with and without missing statistics,
through onnxruntime and the same module in torch.
"""

from __future__ import annotations

import dataclasses
import io
import warnings
from typing import Any

import numpy as np
import torch
from torch import nn

from leakpipe.data.input_norm import normalize_clips
from leakpipe.decision.stacking import LOGIT_MAX, PROB_EPS
from leakpipe.decision.voting import min_votes
from leakpipe.export import stats_graph
from leakpipe.export.graph import (
    BATCH_AXIS,
    CHECK_DB,
    CHECK_SEED,
    INPUT_NAME,
    OPSET,
    TOLERANCE,
    ExportError,
    check_exportable,
    cpu_session,
    scorer,
)
from leakpipe.stats_detector import FusedDetector

SEGMENTS, STATISTICS, OUTPUT = INPUT_NAME, "statistics", "leak_prob"
CHECK_CLIPS = (1, 3)     # recordings of one and of several clips
CHECK_RECORDINGS = 8     # statistics rows per clip count (every fourth one with a NaN)
DOC = ("leakpipe fused scorer: (clips x L x S, 1, n_mels, n_frames) log-mel dB, each clip "
       "normalised, and (1, S) recording statistics (NaN = band above Nyquist) -> stacked "
       "P(LEAK); see metadata leakpipe_rules")


class FusedScorer(nn.Module):
    """(N * L * S, 1, M, T) normalised segments of N clips and (1, S_stats) statistics -> (1,)
    stacked probability."""

    def __init__(self, detector: FusedDetector) -> None:
        super().__init__()
        cnn = detector.cnn
        self.segments = scorer(cnn)                       # (B, 1, M, T) -> (B, C + 1)
        self.stats = detector.logger_stats.net.eval()
        self.rule = cnn.voting.rule
        self.shape = tuple(cnn.features.segment_shape)   # (L, S, M, T)
        n_long, n_short = self.shape[:2]
        votes_over = n_short * n_long if self.rule == "frac_vote" else n_long
        self.votes = min_votes(votes_over, cnn.voting.vote_fraction)
        self.register_buffer("weights", torch.tensor(detector.stacker.weights,
                                                     dtype=torch.float64))
        self.bias = float(detector.stacker.bias)

    def forward(self, segments: torch.Tensor, statistics: torch.Tensor) -> torch.Tensor:
        n_long, n_short = self.shape[:2]
        probs = self.segments(segments)[:, -1]                           # (N * L * S,)
        probs = probs.double().reshape(-1, n_long, n_short)              # (N, L, S)
        p = self.clip_scores(probs).mean(dim=0, keepdim=True)            # (1,)
        p = p.clamp(PROB_EPS, 1.0 - PROB_EPS)
        cnn_logit = torch.log(p / (1.0 - p))                             # (1,)
        stats_logit = self.stats(statistics).double().clamp(-LOGIT_MAX, LOGIT_MAX)   # (1,)
        z = torch.stack([cnn_logit, stats_logit], dim=-1)                # (1, 2)
        return torch.sigmoid((z * self.weights).sum(dim=-1) + self.bias).float()

    def clip_scores(self, probs: torch.Tensor) -> torch.Tensor:
        """(N, L, S) -> (N,) each clip's rule score (``decision.voting.file_scores``)."""
        n_long, n_short = self.shape[:2]
        if self.rule == "mean":
            return probs.reshape(-1, n_long * n_short).mean(dim=-1)
        if self.rule == "frac_vote":
            return _kth_largest(probs.reshape(-1, n_long * n_short), self.votes,
                                n_long * n_short)
        long = probs.mean(dim=-1)                                        # (N, L)
        return _kth_largest(long, 1 if self.rule == "any_long" else self.votes, n_long)


def _kth_largest(values: torch.Tensor, k: int, n: int) -> torch.Tensor:
    """(N, n) -> (N,) as ``voting.kth_largest``: +inf for k = 0, -inf for k > n."""
    if k == 0 or k > n:
        return torch.full_like(values[:, 0], float("inf") if k == 0 else float("-inf"))
    return torch.topk(values, k, dim=-1).values[:, k - 1]


def onnx_bytes(detector: FusedDetector, where: str) -> bytes:
    check_exportable(detector.cnn, where)
    segments = torch.zeros((2 * _segments_per_clip(detector), 1,
                            *detector.cnn.features.segment_shape[2:]))   # (2 * L * S, 1, M, T)
    statistics = torch.zeros((1, len(detector.logger_stats.net.names)))
    buffer = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore", DeprecationWarning)   # as leakpipe.export.graph
        torch.onnx.export(FusedScorer(detector).eval(), (segments, statistics), buffer,
                          dynamo=False, opset_version=OPSET, input_names=[SEGMENTS, STATISTICS],
                          output_names=[OUTPUT], dynamic_axes={SEGMENTS: {0: BATCH_AXIS}})
    return buffer.getvalue()


def _segments_per_clip(detector: FusedDetector) -> int:
    n_long, n_short = detector.cnn.features.segment_shape[:2]
    return n_long * n_short


def as_segments(clips: np.ndarray, input_norm: str) -> np.ndarray:
    """(N, L, S, M, T) log-mel clips -> (N * L * S, 1, M, T) float32, each clip normalised by
    ``input_norm`` as predict normalises it: the graph's ``segments``."""
    x = normalize_clips(torch.from_numpy(np.ascontiguousarray(clips, np.float32)), input_norm)
    return x.reshape(-1, 1, *clips.shape[-2:]).numpy()


def check_recordings(detector: FusedDetector) -> list[tuple[np.ndarray, np.ndarray]]:
    """(segments (N * L * S, 1, M, T), statistics (1, S)) pairs, seeded: ``CHECK_RECORDINGS``
    of each clip count in ``CHECK_CLIPS``, every fourth with a missing statistic."""
    rng = np.random.default_rng(CHECK_SEED)
    rows = stats_graph.check_rows(detector.logger_stats, CHECK_RECORDINGS)     # (R, S)
    mean, spread = CHECK_DB
    cnn = detector.cnn
    return [(as_segments(rng.normal(mean, spread, (n, *cnn.features.segment_shape)),
                         cnn.input_norm), rows[i:i + 1])
            for n in CHECK_CLIPS for i in range(len(rows))]


def max_difference(detector: FusedDetector, model: bytes) -> float:
    """Largest |onnxruntime - torch| of the stacked probability over the check recordings."""
    module = FusedScorer(detector).eval()
    session = cpu_session(model)
    worst = 0.0
    for segments, statistics in check_recordings(detector):
        with torch.inference_mode():
            expected = module(torch.from_numpy(segments), torch.from_numpy(statistics)).numpy()
        got = session.run([OUTPUT], {SEGMENTS: segments, STATISTICS: statistics})[0]
        worst = max(worst, float(np.abs(got - expected).max()))
    return worst


def checked_onnx(detector: FusedDetector, where: str) -> tuple[bytes, float]:
    model = onnx_bytes(detector, where)
    diff = max_difference(detector, model)
    if not diff <= TOLERANCE:
        raise ExportError(f"{where}: the ONNX graph differs from the PyTorch detector by "
                          f"{diff:.3g} (> {TOLERANCE:g}) on {len(check_recordings(detector))} "
                          "check recordings; nothing written")
    return model, diff


def fused_rules(detector: FusedDetector, *, source: str, sha256: str, onnx_file: str,
                max_diff: float) -> dict[str, Any]:
    """What a device needs beside the graph: how to make the clips and measure the statistics,
    the threshold and its calibration."""
    cnn = detector.cnn
    stats = stats_graph.stats_rules(detector.logger_stats, source=source, sha256=sha256,
                                    onnx_file=onnx_file, max_diff=max_diff)
    return {
        "format": stats_graph.RULES_FORMAT, "version": stats_graph.RULES_VERSION,
        "kind": detector.kind, "source": stats["source"],
        "onnx": {"file": onnx_file, "opset": OPSET, "inputs": {
                     SEGMENTS: [f"clips x {_segments_per_clip(detector)}", 1,
                                *cnn.features.segment_shape[2:]],
                     STATISTICS: [1, len(detector.logger_stats.net.names)]},
                 "output": OUTPUT, "max_abs_diff_vs_torch": max_diff},
        "features": dataclasses.asdict(cnn.features),
        "segment_shape": list(cnn.features.segment_shape),
        "segment_order": "clip, long segment, short segment (clips.reshape(-1, 1, M, T))",
        "input_norm": cnn.input_norm,
        "min_clip_fraction": cnn.min_clip_fraction,
        "in_graph": {"voting": dataclasses.asdict(cnn.voting),
                     "cnn_part": "the mean of the clips' rule scores",
                     "stacker": detector.stacker.to_dict()},
        **{k: stats[k] for k in ("statistics_config", "all_statistics", "statistics",
                                 "missing")},
        "threshold": float(detector.threshold),
        "calibration": detector.calibration.to_dict(),
        "prob_threshold": detector.prob_threshold,
        "quality": dataclasses.asdict(detector.quality),
        "metrics": detector.metrics,
    }


__all__ = ["FusedScorer", "check_recordings", "checked_onnx", "fused_rules", "onnx_bytes"]

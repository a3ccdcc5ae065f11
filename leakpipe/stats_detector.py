"""The detector kinds beyond the CNN, one verdict per recording each, and loading any kind.

The `logger_stats` detector: a recording's level statistics -> a leak probability -> LEAK or
not.

It is the same file format as the CNN's detector (``leakpipe.detector``: format
``leakpipe.detector``, read with ``torch.load(weights_only=True)``) with ``kind:
logger_stats``: the statistics' settings (``build.stats``, so a new recording is measured as the
training ones were), the fitted ``LoggerStatsNet`` (train means and scales, coefficients, the
statistics' names), the threshold chosen on the val recordings, the Platt calibration fitted
there, the signal checks of ``build.quality``, the headline figures and (kind version 2 on) the
share of the recordings the net was fitted on on which each of its statistics was missing
(``missing_share``: the domain check's ``decision.stats_domain``; a file without it loads with
None, and its check keeps the older rule, any missing statistic ``shifted``), and (kind
version 3 on) the domain distances of those recordings, each site's measured against the
means and scales of the other sites (``val_distances``: the set domain check's reference,
``set_reference``; a file without it has none, and a set of recordings is not checked).

``score_file`` measures one recording as `build` did (decoded block by block at its own rate,
the signal checks on every channel): a recording that fails a check of ``quality.reject``
(a dead logger above all) is ``unusable``, never ``NOLEAK``.

The `fused` detector (``kind: fused``, the same format): a whole CNN detector (its file's dict as
``cnn``: ``leakpipe.detector.detector_dict``), a whole `logger_stats` detector (its dict as
``logger_stats``), and the stacker fitted on the val recordings (``decision.stacking``: one
weight on each part's recording logit, and a bias) with the threshold chosen and the calibration
fitted on the stacked val probabilities (stage `ship`, ``leakpipe.ship.fused_evaluation``).
The CNN part's recording probability is the mean of its clips' rule scores (computed in
float64), the statistics part's the net's, and the stacker reads their clipped logits, as grouped
CV's `fused` method stacks them (``leakpipe.cv.recording_level.fit_stacker``). Predict scores a
recording with it from one decoding (``leakpipe.predict.fused``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from leakpipe.audio.quality import SignalStats, find_issues, truncation
from leakpipe.config import QualityConfig, RecordingStatsConfig, from_mapping
from leakpipe.decision.calibration import Calibration
from leakpipe.decision.domain import DomainCheck, DomainReference
from leakpipe.decision.domain_set import ValDistances
from leakpipe.decision.stacking import Stacker, clip_logit, logit
from leakpipe.decision.stats_domain import assess_stats
from leakpipe.decision.voting import file_scores
from leakpipe.detector import Detector, detector_dict, detector_from
from leakpipe.errors import DataError, LeakpipeError
from leakpipe.features.recording_stats import StatsAccumulator, stat_names
from leakpipe.files import save_torch_atomic
from leakpipe.metric_names import current_names
from leakpipe.stats_model import LoggerStatsNet

KIND = "logger_stats"
FUSED_KIND = "fused"
FORMAT = "leakpipe.detector"     # one detector format for every kind (leakpipe.detector)
FILE_VERSION = 8                 # leakpipe.detector.KINDED_VERSION: a file with a kind
VERSION = 3                      # of the logger_stats kind's fields (2: missing_share,
#                                  3: val_distances)
FUSED_VERSION = 1                # of the fused kind's fields
FUSED_PARTS = ("cnn", KIND)      # the stacker's inputs, in its weights' order


@dataclass(frozen=True, kw_only=True)
class StatsDetector:
    """What decides a recording from its statistics."""

    net: LoggerStatsNet
    stats: RecordingStatsConfig
    threshold: float                     # on the net's probability, chosen on val recordings
    calibration: Calibration             # net probability -> reported leak_prob (val)
    metrics: dict[str, float]
    quality: QualityConfig
    # (S,) share of the recordings the net was fitted on on which each of its statistics
    # (``net.names`` order) was missing; None: a file written before it was kept
    missing_share: np.ndarray | None = None
    # (V,) the domain distances of the recordings the net was fitted on, each site's against
    # the other sites' means and scales (what a set of new sites is compared with); None: an
    # older file
    val_distances: np.ndarray | None = None
    kind: str = KIND

    def leak_prob(self, score: float) -> float:
        return float(self.calibration.prob(score))

    @property
    def prob_threshold(self) -> float:
        """The operating point on the reported leak_prob's scale."""
        return self.leak_prob(self.threshold)

    @property
    def columns(self) -> np.ndarray:
        """Indices of the net's statistics among every statistic build.stats computes."""
        every = stat_names(self.stats)
        missing = [n for n in self.net.names if n not in every]
        if missing:
            raise DataError(f"the detector's statistic {missing[0]!r} is not one build.stats "
                             "computes")
        return np.asarray([every.index(n) for n in self.net.names])

    def probability(self, stats: np.ndarray) -> np.ndarray:
        """(R, S_all) statistics in ``stat_names`` order -> (R,) the net's P(LEAK)."""
        x = torch.as_tensor(np.asarray(stats, np.float32)[:, self.columns])
        with torch.inference_mode():
            return torch.sigmoid(self.net(x)).double().numpy()

    def logit(self, stats: np.ndarray) -> np.ndarray:
        """(R, S_all) statistics -> (R,) the net's leak logit, float64."""
        x = torch.as_tensor(np.asarray(stats, np.float32)[:, self.columns])
        with torch.inference_mode():
            return self.net(x).double().numpy()

    def contributions(self, stats: np.ndarray) -> dict[str, float]:
        """One recording's (S_all,) statistics -> name -> coefficient x standardised value:
        what moved its logit away from the bias (positive: towards LEAK)."""
        x = torch.as_tensor(np.asarray(stats, np.float32)[None, self.columns])
        with torch.inference_mode():
            values = self.net.contributions(x)[0].double().numpy()
        return dict(zip(self.net.names, values.tolist(), strict=True))

    @property
    def set_reference(self) -> ValDistances | None:
        """What the set domain check compares a set's distances with: the fitted recordings'
        held-out distances (``val_distances``); None for a file without them."""
        if self.val_distances is None or not self.val_distances.size:
            return None
        return ValDistances(np.sort(np.asarray(self.val_distances, np.float64)))

    def domain(self, stats: np.ndarray) -> DomainCheck:
        """One recording's (S_all,) statistics -> the domain check of those the net reads
        (``decision.stats_domain``: train means and scales, and the missing shares where the
        file has them)."""
        used = np.asarray(stats, dtype=np.float64)[self.columns]                     # (S,)
        return assess_stats(self.net.mean.numpy(), self.net.scale.numpy(), self.net.names,
                            used, self.missing_share)


@dataclass(frozen=True, kw_only=True)
class FusedDetector:
    """A CNN and a logger_stats detector whose recording probabilities are stacked."""

    cnn: Detector                        # evaluate's CNN detector, whole
    logger_stats: StatsDetector          # fitted as ship fits that kind (its threshold unused)
    stacker: Stacker                     # weights on (cnn, logger_stats) logits, and a bias
    threshold: float                     # on the stacked probability, chosen on val recordings
    calibration: Calibration             # stacked probability -> reported leak_prob (val)
    metrics: dict[str, float]
    kind: str = FUSED_KIND

    @property
    def quality(self) -> QualityConfig:
        """build.quality's signal checks (the statistics part's: every kind refuses alike)."""
        return self.logger_stats.quality

    @property
    def set_reference(self) -> DomainReference | None:
        """What the set domain check compares a set's distances with: the CNN part's reference
        (its val recordings' distances D of their band profiles; None for an older CNN)."""
        return self.cnn.domain

    def leak_prob(self, score: float) -> float:
        return float(self.calibration.prob(score))

    @property
    def prob_threshold(self) -> float:
        """The operating point on the reported leak_prob's scale."""
        return self.leak_prob(self.threshold)

    def cnn_probability(self, seg_probs: np.ndarray) -> float:
        """One recording's (clips, L, S) segment probabilities -> the CNN part's recording
        probability: the mean of its clips' rule scores (in float64: its logit is taken)."""
        voting = self.cnn.voting
        scores = file_scores(np.asarray(seg_probs, np.float64), voting.rule,
                             voting.vote_fraction)                              # (clips,)
        return float(np.mean(scores))

    def part_logits(self, cnn_prob: np.ndarray | float, stats: np.ndarray) -> np.ndarray:
        """(R,) CNN probabilities and (R, S_all) statistics -> (R, 2) the parts' logits in
        ``FUSED_PARTS`` order (``decision.stacking``: clipped as the stacker reads them)."""
        stats_logit = self.logger_stats.logit(np.atleast_2d(stats))             # (R,)
        cnn_logit = np.broadcast_to(logit(cnn_prob), stats_logit.shape)
        return clip_logit(np.stack([cnn_logit, stats_logit], axis=-1))

    def probability(self, cnn_prob: np.ndarray | float, stats: np.ndarray) -> np.ndarray:
        """(R,) CNN probabilities and (R, S_all) statistics -> (R,) the stacked P(LEAK)."""
        return self.stacker.prob(self.part_logits(cnn_prob, stats))

    def evidence(self, cnn_prob: float, stats: np.ndarray) -> dict[str, float]:
        """One recording's part -> its weight x its logit: what each part moved the stacked
        logit by from the stacker's bias (positive: towards LEAK)."""
        terms = self.stacker.terms(self.part_logits(cnn_prob, stats))[0]
        return dict(zip(self.stacker.names, terms.tolist(), strict=True))


def stats_detector_dict(detector: StatsDetector) -> dict[str, Any]:
    """What a logger_stats detector file holds (a fused one holds it as its ``logger_stats``)."""
    net = detector.net
    out: dict[str, Any] = {
        "format": FORMAT, "version": FILE_VERSION, "kind": KIND, "kind_version": VERSION,
        "stats_config": detector.stats.to_dict(), "names": list(net.names),
        "mean": net.mean.clone(), "scale": net.scale.clone(),
        "weight": net.linear.weight.detach().clone()[0], "bias": float(net.linear.bias.detach()[0]),
        "threshold": float(detector.threshold),
        "calibration": detector.calibration.to_dict(),
        "metrics": {k: float(v) for k, v in detector.metrics.items()},
        "quality": _plain(dataclasses.asdict(detector.quality)),
    }
    if detector.missing_share is not None:
        out["missing_share"] = [float(v) for v in detector.missing_share]
    if detector.val_distances is not None:
        out["val_distances"] = [float(v) for v in detector.val_distances]
    return out


def save_stats_detector(path: Path, detector: StatsDetector) -> None:
    save_torch_atomic(stats_detector_dict(detector), Path(path))


def save_fused_detector(path: Path, detector: FusedDetector) -> None:
    save_torch_atomic({
        "format": FORMAT, "version": FILE_VERSION, "kind": FUSED_KIND,
        "kind_version": FUSED_VERSION, "cnn": detector_dict(detector.cnn),
        "logger_stats": stats_detector_dict(detector.logger_stats),
        "stacker": detector.stacker.to_dict(), "threshold": float(detector.threshold),
        "calibration": detector.calibration.to_dict(),
        "metrics": {k: float(v) for k, v in detector.metrics.items()},
    }, Path(path))


def fused_detector_from(raw: dict[str, Any], path: Path) -> FusedDetector:
    """The detector of a loaded file of kind fused; a bad field is one ``DataError``."""
    try:
        cnn, stats = raw["cnn"], raw["logger_stats"]
        if not isinstance(cnn, dict) or not isinstance(stats, dict):
            raise TypeError("its cnn and logger_stats parts must be detector dicts")
        out = FusedDetector(
            cnn=detector_from(cnn, path), logger_stats=stats_detector_from(stats, path),
            stacker=Stacker.from_dict(raw["stacker"]), threshold=float(raw["threshold"]),
            calibration=Calibration.from_dict(raw["calibration"]),
            metrics={k: float(v) for k, v in current_names(raw["metrics"]).items()})
    except LeakpipeError:         # a part's own named problem
        raise
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as exc:
        raise DataError(f"{path} is not a leakpipe detector file (damaged fused detector: "
                        f"{type(exc).__name__} {exc})") from None
    if out.stacker.names != FUSED_PARTS:
        raise DataError(f"{path}: stacker parts {list(out.stacker.names)} are not "
                        f"{list(FUSED_PARTS)}")
    if not math.isfinite(out.threshold):
        raise DataError(f"{path}: threshold {out.threshold} is not finite")
    return out


def stats_detector_from(raw: dict[str, Any], path: Path) -> StatsDetector:
    """The detector of a loaded file of kind logger_stats; a bad field is one ``DataError``."""
    try:
        names = [str(n) for n in raw["names"]]
        net = LoggerStatsNet(np.asarray(raw["mean"]), np.asarray(raw["scale"]),
                             np.asarray(raw["weight"]), float(raw["bias"]), names)
        out = StatsDetector(
            net=net.eval(), threshold=float(raw["threshold"]),
            stats=from_mapping(RecordingStatsConfig, raw["stats_config"], "stats", str(path)),
            calibration=Calibration.from_dict(raw["calibration"]),
            metrics={k: float(v) for k, v in current_names(raw["metrics"]).items()},
            quality=from_mapping(QualityConfig, raw["quality"], "quality", str(path)),
            missing_share=_missing_share(raw.get("missing_share"), len(names), path),
            val_distances=_val_distances(raw.get("val_distances"), path))
    except LeakpipeError:
        raise
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise DataError(f"{path} is not a leakpipe detector file (damaged logger_stats "
                        f"detector: {type(exc).__name__} {exc})") from None
    if not math.isfinite(out.threshold):
        raise DataError(f"{path}: threshold {out.threshold} is not finite")
    out.columns  # noqa: B018  (its names must be statistics build.stats computes)
    return out


@dataclass(frozen=True)
class Measured:
    """One recording measured as build measures it."""

    stats: np.ndarray | None          # (S_all,) None when unusable
    rate: int
    seconds: float
    problems: tuple[str, ...]         # failed checks of quality.reject: unusable
    flags: tuple[str, ...]            # the other failed checks: scored, noted


def measure(source: Any, detector: StatsDetector) -> Measured:
    """Decode an ``AudioSource`` once (``leakpipe.audio.io``), block by block: statistics at
    its own rate and every channel's signal checks."""
    from leakpipe.audio.io import stream_clips

    signal = SignalStats(source.channels, source.subtype)
    levels = StatsAccumulator(detector.stats, source.sample_rate)

    def on_block(block: np.ndarray) -> None:
        signal.add(block)
        levels.add(block)

    for _ in stream_clips(source, None, on_block):
        pass
    issues = (*find_issues(signal.stats(), detector.quality, source.subtype),
              *truncation(source.frames, source.claimed_frames))
    problems = tuple(i.reason for i in issues if i.check in detector.quality.reject)
    flags = tuple(i.reason for i in issues if i.check not in detector.quality.reject)
    seconds = source.frames / source.sample_rate
    return Measured(None if problems else levels.values(), int(source.sample_rate), seconds,
                    problems, flags)


def _missing_share(raw: Any, n: int, path: Path) -> np.ndarray | None:
    """A file's ``missing_share`` (None when it has none: written before the field)."""
    if raw is None:
        return None
    share = np.asarray(raw, dtype=np.float64)
    if share.shape != (n,) or not np.all((share >= 0.0) & (share <= 1.0)):
        raise DataError(f"{path}: missing_share must be {n} shares in [0, 1] (one per "
                        "statistic the detector reads)")
    return share


def _val_distances(raw: Any, path: Path) -> np.ndarray | None:
    """A file's ``val_distances`` (None when it has none: written before the field)."""
    if raw is None:
        return None
    d = np.asarray(raw, dtype=np.float64)
    if d.ndim != 1 or not np.all(np.isfinite(d) & (d >= 0.0)):
        raise DataError(f"{path}: val_distances must be a list of finite distances >= 0")
    return d


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


__all__ = ["FUSED_KIND", "FUSED_PARTS", "KIND", "FusedDetector", "Measured", "StatsDetector",
           "fused_detector_from", "measure", "save_fused_detector",
           "save_stats_detector", "stats_detector_dict", "stats_detector_from"]

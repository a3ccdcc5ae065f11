"""The `logger_stats` kind: a regularised logistic model over a recording's level statistics
(the quiet-night level, its spread, band levels), one verdict per recording.

Its file is written by `ship` (``stats_detector``); predict measures each recording as build
measured the training ones and writes one row (``predict.stats``); serve measures a waveform
the same way (``serve.stats``); explain gives each statistic's exact share of the logit
(``explain.stats``); export writes the statistics -> probability graph (``export.stats_graph``);
promote reads the statistics stored with a split; ship fits it on train and chooses its
strength, threshold and calibration on val (``ship.stats_evaluation``); its card is
``evaluate.stats_card``'s.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from leakpipe.detectors.interface import (
    ExplainSetup,
    Exported,
    PredictJob,
    Rendered,
    RowScorer,
)
from leakpipe.stats_detector import KIND as STATS_KIND
from leakpipe.stats_detector import StatsDetector, stats_detector_from


class LoggerStatsKind:
    """``DetectorKind`` of a ``stats_detector.StatsDetector``."""

    name = STATS_KIND
    file_stage = "ship"

    def load(self, raw: dict[str, Any], path: Path) -> StatsDetector:
        return stats_detector_from(raw, path)

    def predict(self, detector: StatsDetector, job: PredictJob) -> None:
        from leakpipe.predict.stats import run_predict_stats, score_file, stamp_of

        run_predict_stats(job.paths, detector, job.out,
                          stamp=stamp_of(job.model, job.file, detector), resume=job.resume,
                          progress=job.progress,
                          score=functools.partial(score_file, detector=detector))

    def serve_scorer(self, detector: StatsDetector) -> RowScorer:
        from leakpipe.serve.stats import StatsScorer

        return StatsScorer(detector)

    def example_seconds(self, detector: StatsDetector) -> float:
        from leakpipe.serve.stats import EXAMPLE_SECONDS

        return EXAMPLE_SECONDS

    def explainer(self, detector: StatsDetector,
                  setup: ExplainSetup) -> Callable[[Path], Rendered]:
        from leakpipe.explain import stats
        from leakpipe.explain.figure import call_text
        from leakpipe.explain.lines import top_statistic_text

        def explain(path: Path) -> Rendered:
            ex = stats.explain_stats_recording(path, detector)
            return Rendered(stats.stats_figure(ex), stats.to_json(ex),
                            f"{call_text(ex.call)}; {top_statistic_text(ex.contributions)}")

        return explain

    def export(self, detector: StatsDetector, source: str, path: Path) -> Exported:
        from leakpipe.export import stats_graph
        from leakpipe.export.stage import ONNX_FILE
        from leakpipe.files import file_sha256

        graph, diff = stats_graph.checked_onnx(detector, str(path))
        rules = stats_graph.stats_rules(detector, source=source, sha256=file_sha256(path),
                                        onnx_file=ONNX_FILE, max_diff=diff)
        return Exported(graph, rules, stats_graph.DOC, diff,
                        f"logger_stats, {len(detector.net.names)} statistics",
                        f"threshold {detector.threshold:g}")

    def decide_split(self, detector: StatsDetector, path: Path, setup: Any, desc: str) -> Any:
        from leakpipe.evaluate.promotion_scoring import stats_decisions

        return stats_decisions(detector, path, setup, desc)

    def ship(self, job: Any) -> Any:
        from leakpipe.config import load_section
        from leakpipe.data.stamp import trust_splits
        from leakpipe.ship.figures import calls_from_rows
        from leakpipe.ship.stage import ShipOutcome
        from leakpipe.ship.stats_evaluation import evaluate_stats_detector
        from leakpipe.stats_detector import save_stats_detector

        job.run.set_tags(trust_splits(job.paths.validated, job.splits).tags)
        evaluation = evaluate_stats_detector(
            job.splits, load_section(job.params, "baselines"),
            load_section(job.params, "evaluate"), load_section(job.params, "decision"),
            load_section(job.params, "build").quality)
        save_stats_detector(job.paths.shipped, evaluation.detector)
        return ShipOutcome(evaluation.metrics, evaluation.rows,
                           calls_from_rows(evaluation.rows))

    def card(self, shipped: Any) -> str:
        from leakpipe.config import load_section
        from leakpipe.detectors.registry import load_any_detector
        from leakpipe.evaluate.stats_card import StatsCardInputs, stats_model_card
        from leakpipe.ship.registration import conditions_section, stats_shares

        detector = load_any_detector(shipped.file)
        ev = load_section(shipped.params, "evaluate")
        return stats_model_card(StatsCardInputs(
            detector=detector, metrics=shipped.metrics, criterion=ev.criterion,
            confidence=ev.confidence, detector_sha=shipped.sha256,
            split_sha=dict(shipped.split_sha or {}),
            source=str(load_section(shipped.params, "build").source),
            domain=stats_shares(shipped.data_dir, detector),
            per_condition=conditions_section(shipped)))

    def version_tags(self, detector: StatsDetector) -> dict[str, str]:
        return {}

    def adapter(self, detector: StatsDetector, context: Any) -> Any:
        from leakpipe.adapt.stats_adapter import StatsAdapter

        return StatsAdapter(detector, context)


__all__ = ["LoggerStatsKind"]

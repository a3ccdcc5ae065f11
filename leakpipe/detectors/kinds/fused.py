"""The `fused` kind: evaluate's CNN and a logger_stats part, stacked by a logistic model on the
val recordings (the clips' shape and the recording's level, from one decoding).

Its file is written by `ship` (``stats_detector``: the CNN detector and the statistics
detector inside it); predict decodes each recording once into the CNN's clips and the
statistics (``predict.fused``); serve does the same with a waveform (``serve.fused``); explain
splits the stacked logit into the parts' evidence and the intercept, with the CNN's
long-segment timeline and the statistics' shares (``explain.fused``); export writes one graph
from a recording's segments and statistics (``export.fused_graph``); promote scores a split's
clips and reads its statistics; ship stacks the parts (``ship.fused_evaluation``); its card is
``evaluate.fused_card``'s.
"""

from __future__ import annotations

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
from leakpipe.stats_detector import FUSED_KIND, FusedDetector, fused_detector_from


class FusedKind:
    """``DetectorKind`` of a ``stats_detector.FusedDetector``."""

    name = FUSED_KIND
    file_stage = "ship"

    def load(self, raw: dict[str, Any], path: Path) -> FusedDetector:
        return fused_detector_from(raw, path)

    def predict(self, detector: FusedDetector, job: PredictJob) -> None:
        from leakpipe.predict.fused import run_predict_fused
        from leakpipe.predict.rules import scoring_rules
        from leakpipe.predict.scoring import clip_scoring
        from leakpipe.predict.stats import stamp_of

        scoring = clip_scoring(detector.cnn, scoring_rules(detector.cnn, job.params),
                               job.runtime, job.max_batch_segments)
        run_predict_fused(job.paths, detector, job.out, scoring=scoring,
                          stamp=stamp_of(job.model, job.file, detector), resume=job.resume,
                          progress=job.progress)

    def serve_scorer(self, detector: FusedDetector) -> RowScorer:
        from leakpipe.serve.fused import FusedScorer

        return FusedScorer(detector)

    def example_seconds(self, detector: FusedDetector) -> float:
        from leakpipe.serve.fused import FusedScorer

        return FusedScorer.example_seconds(detector)

    def explainer(self, detector: FusedDetector,
                  setup: ExplainSetup) -> Callable[[Path], Rendered]:
        from leakpipe.detectors.kinds.cnn import CnnKind
        from leakpipe.explain import fused
        from leakpipe.explain.figure import call_text
        from leakpipe.explain.lines import main_term
        from leakpipe.predict.rules import scoring_rules
        from leakpipe.predict.scoring import clip_scoring

        rules = scoring_rules(detector.cnn, setup.params)
        scoring = clip_scoring(detector.cnn, rules, setup.runtime)
        cnn = CnnKind().band_explainer(detector.cnn, setup, rules)

        def explain(path: Path) -> Rendered:
            ex = fused.explain_fused_recording(path, detector, scoring, cnn)
            return Rendered(fused.fused_figure(ex), fused.to_json(ex),
                            f"{call_text(ex.call)}; {main_term(ex)}")

        return explain

    def export(self, detector: FusedDetector, source: str, path: Path) -> Exported:
        from leakpipe.export import fused_graph
        from leakpipe.export.stage import ONNX_FILE
        from leakpipe.files import file_sha256

        graph, diff = fused_graph.checked_onnx(detector, str(path))
        rules = fused_graph.fused_rules(detector, source=source, sha256=file_sha256(path),
                                        onnx_file=ONNX_FILE, max_diff=diff)
        return Exported(graph, rules, fused_graph.DOC, diff,
                        f"fused: segments and {len(detector.logger_stats.net.names)} "
                        "statistics", f"threshold {detector.threshold:g}")

    def decide_split(self, detector: FusedDetector, path: Path, setup: Any, desc: str) -> Any:
        from leakpipe.evaluate.promotion_scoring import fused_decisions

        return fused_decisions(detector, path, setup, desc)

    def ship(self, job: Any) -> Any:
        from leakpipe.config import load_section
        from leakpipe.data.stamp import trust_splits
        from leakpipe.detector import load_detector
        from leakpipe.runtime import make_runtime
        from leakpipe.ship.figures import calls_from_rows
        from leakpipe.ship.fused_evaluation import evaluate_fused_detector
        from leakpipe.ship.stage import ShipOutcome
        from leakpipe.stats_detector import save_fused_detector

        job.run.set_tags(trust_splits(job.paths.validated, job.splits).tags)
        rt = load_section(job.params, "runtime")
        evaluation = evaluate_fused_detector(
            job.splits, load_detector(job.paths.cnn_detector),
            baselines=load_section(job.params, "baselines"),
            ev=load_section(job.params, "evaluate"), decision=load_section(job.params, "decision"),
            fusion_c=load_section(job.params, "detector").fusion_C,
            quality=load_section(job.params, "build").quality,
            runtime=make_runtime(rt.device, rt.amp, rt.channels_last))
        save_fused_detector(job.paths.shipped, evaluation.detector)
        return ShipOutcome(evaluation.metrics, evaluation.rows,
                           calls_from_rows(evaluation.rows))

    def card(self, shipped: Any) -> str:
        from leakpipe.config import load_section
        from leakpipe.detectors.registry import load_any_detector
        from leakpipe.evaluate.fused_card import FusedCardInputs, fused_model_card
        from leakpipe.ship.registration import conditions_section, stats_shares

        detector = load_any_detector(shipped.file)
        ev = load_section(shipped.params, "evaluate")
        return fused_model_card(FusedCardInputs(
            detector=detector, metrics=shipped.metrics, criterion=ev.criterion,
            confidence=ev.confidence,
            fusion_c=load_section(shipped.params, "detector").fusion_C,
            detector_sha=shipped.sha256, split_sha=dict(shipped.split_sha or {}),
            source=str(load_section(shipped.params, "build").source),
            domain=stats_shares(shipped.data_dir, detector.logger_stats),
            per_condition=conditions_section(shipped)))

    def version_tags(self, detector: FusedDetector) -> dict[str, str]:
        return {}

    def adapter(self, detector: FusedDetector, context: Any) -> Any:
        from leakpipe.adapt.fused_adapter import FusedAdapter

        return FusedAdapter(detector, context)


__all__ = ["FusedKind"]

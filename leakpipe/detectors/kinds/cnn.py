"""The `cnn` kind: a convolutional network over mel clips, voted over long segments.

Its file is evaluate's ``models/detector.pt`` (``leakpipe.detector``); predict scores its
recordings a batch of clips at a time and writes a long-segment timeline beside the rows
(``predict.clips``); serve answers through the same scoring (``serve.cnn``); explain occludes
mel band groups (``explain.recording``); export writes the segment network as ONNX with the
voting rules as JSON (``export.graph``, ``export.rules``); promote scores a split's clips
(``evaluate.promotion_scoring.cnn_decisions``); ship copies evaluate's file
(``ship.cnn_evaluation``), and its card is evaluate's per-clip card with ship's figures per
recording.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from leakpipe.decision.verdict import DECIMALS, counts_text
from leakpipe.detector import CNN_KIND, Detector, load_detector
from leakpipe.detectors.interface import (
    ExplainSetup,
    Exported,
    PredictJob,
    Rendered,
    RowScorer,
)
from leakpipe.errors import DataError


class CnnKind:
    """``DetectorKind`` of a ``leakpipe.detector.Detector``."""

    name = CNN_KIND
    file_stage = "evaluate"            # ship copies evaluate's file: evaluate's run wrote it

    def load(self, raw: dict[str, Any], path: Path) -> Detector:
        return load_detector(path)

    def predict(self, detector: Detector, job: PredictJob) -> None:
        from leakpipe.predict.clips import predict
        from leakpipe.predict.rows import say_set_check, timeline_path
        from leakpipe.predict.rules import scoring_rules
        from leakpipe.predict.target import DetectorStamp, stamp_path

        summary = predict(job.paths, detector, job.out, runtime=job.runtime,
                          rules=scoring_rules(detector, job.params), resume=job.resume,
                          progress=job.progress, max_batch_segments=job.max_batch_segments,
                          stamp=DetectorStamp.of(job.model, job.file, detector))
        say_set_check(summary.domain_set, job.out)
        print(f"predict: {summary.written} recordings ({counts_text(summary.verdicts)}, "
              f"{summary.unusable} unusable, {summary.errors} unreadable, {summary.skipped} "
              f"kept from before) in {summary.seconds:.1f} s -> {job.out}, timeline "
              f"{timeline_path(job.out)}, detector {stamp_path(job.out)} (cnn detector, rule "
              f"{detector.voting.rule}: leak_prob threshold "
              f"{round(detector.prob_threshold, DECIMALS):.4f})")

    def serve_scorer(self, detector: Detector) -> RowScorer:
        from leakpipe.serve.cnn import CnnScorer

        return CnnScorer(detector)

    def example_seconds(self, detector: Detector) -> float:
        return float(detector.features.clip_s)           # one clip

    def explainer(self, detector: Detector,
                  setup: ExplainSetup) -> Callable[[Path], Rendered]:
        from leakpipe.explain.figure import call_text, explanation_figure
        from leakpipe.explain.lines import top_band_group
        from leakpipe.explain.recording import to_json
        from leakpipe.predict.rules import scoring_rules

        bands = self.band_explainer(detector, setup, scoring_rules(detector, setup.params))

        def explain(path: Path) -> Rendered:
            ex = bands(path)
            return Rendered(explanation_figure(ex), to_json(ex),
                            f"{call_text(ex.shown)}; {top_band_group(ex)}")

        return explain

    @staticmethod
    def band_explainer(detector: Detector, setup: ExplainSetup,
                       rules: Any) -> Callable[[Path], Any]:
        """A recording -> its band-occlusion ``explain.recording.Explanation`` under
        ``detector`` and its scoring ``rules`` (a fused detector's CNN part explains so)."""
        from leakpipe.explain.recording import explain_recording
        from leakpipe.predict.rules import batch_budget

        if setup.bands_per_group > detector.features.n_mels:
            raise DataError(f"--bands-per-group: {setup.bands_per_group} is more than the "
                            f"model's {detector.features.n_mels} mel bands")
        net = detector.inference_model().to(setup.runtime.device)
        budget = batch_budget(detector, rules, setup.runtime)

        def explain(path: Path) -> Any:
            return explain_recording(path, detector, net, runtime=setup.runtime,
                                     budget=budget, min_fraction=rules.min_clip_fraction,
                                     bands_per_group=setup.bands_per_group, fill=setup.fill,
                                     quality=rules.quality)

        return explain

    def export(self, detector: Detector, source: str, path: Path) -> Exported:
        from leakpipe.export.graph import SEGMENT_DOC, checked_onnx
        from leakpipe.export.rules import edge_rules, raw_detector
        from leakpipe.export.stage import ONNX_FILE
        from leakpipe.files import file_sha256

        graph, diff = checked_onnx(detector, str(path))
        rules = edge_rules(detector, raw_detector(path), source=source,
                           sha256=file_sha256(path), onnx_file=ONNX_FILE, max_diff=diff)
        return Exported(graph, rules, SEGMENT_DOC, diff, "cnn: the segment network",
                        f"input_norm {detector.input_norm}, rule {detector.voting.rule}, "
                        f"threshold {detector.threshold:g}")

    def decide_split(self, detector: Detector, path: Path, setup: Any, desc: str) -> Any:
        from leakpipe.evaluate.promotion_scoring import cnn_decisions

        return cnn_decisions(detector, path, setup, desc)

    def ship(self, job: Any) -> Any:
        from leakpipe.config import load_section
        from leakpipe.ship.cnn_evaluation import (
            cnn_recording_figures,
            cnn_test_calls,
            copy_detector,
        )
        from leakpipe.ship.stage import ShipOutcome

        copy_detector(job.paths.cnn_detector, job.paths.shipped)
        threshold = load_detector(job.paths.cnn_detector).threshold
        metrics = cnn_recording_figures(job.paths.cnn_predictions, threshold,
                                        load_section(job.params, "evaluate"))
        # the cnn kind's val / test predictions are evaluate's (reports/predictions.csv)
        return ShipOutcome(metrics, [], cnn_test_calls(job.paths.cnn_predictions, threshold))

    def card(self, shipped: Any) -> str:
        """evaluate's card of the network (per clip), then ship's test figures per recording."""
        from leakpipe.evaluate.registration import SHA_CHARS
        from leakpipe.ship.registration import ship_figures_section

        card = shipped.cnn_card
        if card is not None and card.is_file():
            text = card.read_text()
        else:
            text = (f"# Model card: cnn detector {shipped.sha256[:SHA_CHARS]}\n\nevaluate's "
                    f"model card (`{card}`) was not found: run `dvc repro evaluate` for the "
                    "network's description and its figures per clip.")
        return text.rstrip() + "\n\n" + ship_figures_section(shipped)

    def version_tags(self, detector: Detector) -> dict[str, str]:
        from leakpipe import tracking

        clip_f1 = detector.metrics.get("test/clip_f1")      # evaluate's, kept in the file
        return {tracking.TAG_TEST_F1: f"{clip_f1:.4f}"} if clip_f1 is not None else {}

    def adapter(self, detector: Detector, context: Any) -> Any:
        from leakpipe.adapt.cnn_adapter import CnnAdapter

        return CnnAdapter(detector, context, seed_file=context.paths.detector)


__all__ = ["CnnKind"]

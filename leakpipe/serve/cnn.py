"""A served `cnn` detector: `leakpipe predict`'s rows of in-memory recordings, through the same
code (``predict.scoring.score_recordings``: segmentation, voting, threshold, signal checks,
domain)."""

from __future__ import annotations

import logging
from typing import Any

from leakpipe.audio.opening import AudioSource
from leakpipe.audio.quality import DEAD_ONLY
from leakpipe.detector import Detector
from leakpipe.errors import DataError
from leakpipe.predict.rows import SET_DISTANCE, Failed, error_row
from leakpipe.predict.rules import ScoringRules, batch_budget
from leakpipe.predict.scoring import score_recordings
from leakpipe.runtime import make_runtime

log = logging.getLogger(__name__)


def served_rules(detector: Detector) -> ScoringRules:
    """The detector's own scoring rules: a served model has no params.yaml to fall back on.

    A detector file older than its signal checks (version 7) is served with those that need
    no threshold (a dead recording is refused), with one WARNING.
    """
    if detector.batch_limits is None or detector.min_clip_fraction is None:
        raise DataError("the detector was written before detector files held their scoring "
                        "rules and cannot be served; re-run evaluate")
    quality = detector.quality
    if quality is None:
        log.warning("the detector was written before detector files held build.quality: "
                    "dead recordings are refused, none is flagged clipped or DC; re-run "
                    "evaluate")
        quality = DEAD_ONLY
    return ScoringRules(detector.batch_limits, detector.min_clip_fraction, quality)


class CnnScorer:
    """The network on the serving device, the detector's rules and the batch budget, once."""

    def __init__(self, detector: Detector) -> None:
        self.detector = detector
        self.runtime = make_runtime("auto", "auto", device_key="serve device")
        self.network = detector.inference_model().to(self.runtime.device)
        self.rules = served_rules(detector)
        self.budget = batch_budget(detector, self.rules, self.runtime)

    @staticmethod
    def example_seconds(detector: Detector) -> float:
        """How long the logged input example's recordings are: one clip."""
        return float(detector.features.clip_s)

    def rows(self, sources: list[AudioSource | Failed]) -> list[dict[str, Any]]:
        """predict's row of each source, in order (an error row for a ``Failed``)."""
        usable = [s for s in sources if isinstance(s, AudioSource)]
        scored = iter([row for batch in score_recordings(
            usable, self.detector, self.network, runtime=self.runtime, budget=self.budget,
            min_fraction=self.rules.min_clip_fraction, quality=self.rules.quality)
            for row in batch])
        rows = [next(scored) if isinstance(s, AudioSource) else error_row(s, self.detector)
                for s in sources]
        for row in rows:              # the set domain check reads the rows' D (serve.request)
            d = row.get("domain_distance")
            row[SET_DISTANCE] = float(d) if d not in ("", None) else float("nan")
        return rows


__all__ = ["CnnScorer", "served_rules"]

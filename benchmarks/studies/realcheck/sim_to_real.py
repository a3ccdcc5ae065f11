"""The whole sim-to-real check: zero-shot figures, then leave-one-recording-out adaptation.

``sim_to_real`` returns the JSON-ready summary (``realcheck.findings``), whose
``detector`` block names the scored file with its sha256 (the model card quotes the figures only
for that very file); ``write_outputs`` writes it and its figure. Training happens in a
temporary folder that is removed afterwards; nothing is written into the project's data, models
or metrics.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

from leakpipe.config import DecisionConfig, RuntimeConfig, TrainConfig
from leakpipe.detector import load_detector
from leakpipe.files import file_sha256
from leakpipe.predict.rules import scoring_rules
from leakpipe.runtime import make_runtime
from realcheck import findings
from realcheck.fewshot import FewShotConfig, leave_one_out
from realcheck.scoring import Scoring, load_recordings, score_recordings

log = logging.getLogger(__name__)

RESAMPLES = 2000
CONFIDENCE = 0.95


def sim_to_real(detector_path: Path, real_dir: Path, base: TrainConfig,
                cfg: FewShotConfig | None, *, runtime: RuntimeConfig, decision: DecisionConfig,
                params: Path, resamples: int = RESAMPLES, confidence: float = CONFIDENCE,
                seeds: int = 1) -> dict[str, Any]:
    """Score ``real_dir`` with the detector; with ``cfg``, also the few-shot folds, for
    ``seeds`` training seeds from ``cfg.seed`` on (the first seed's folds in full, the spread
    over all of them in ``few_shot_seeds``)."""
    start = time.perf_counter()
    detector = load_detector(Path(detector_path))
    scoring = Scoring(make_runtime(runtime.device, runtime.amp, runtime.channels_last),
                      scoring_rules(detector, params))
    recordings = load_recordings(Path(real_dir), detector, scoring.rules.min_clip_fraction)
    log.info("sim_to_real: %d recordings, %d clips", len(recordings),
             sum(len(r.mel) for r in recordings))
    zero = score_recordings(detector, recordings, scoring)
    summary: dict[str, Any] = {
        "detector": {"path": str(detector_path), "sha256": file_sha256(Path(detector_path)),
                     **findings.detector_info(detector)},
        "recordings": {r.recording_id: r.label for r in recordings},
        "zero_shot": findings.zero_shot(detector, recordings, zero, resamples=resamples,
                                      confidence=confidence, seed=cfg.seed if cfg else 0),
    }
    if cfg is not None:
        per_seed = {}
        for seed in range(cfg.seed, cfg.seed + max(1, seeds)):
            run_cfg = dataclasses.replace(cfg, seed=seed)
            with tempfile.TemporaryDirectory(prefix="leakpipe-fewshot-") as work:
                folds = leave_one_out(detector, recordings, base, decision, run_cfg, Path(work),
                                      scoring)
            per_seed[seed] = findings.few_shot(folds, zero, detector, recordings)
        summary["few_shot"] = {"config": _config(cfg, base), **per_seed[cfg.seed]}
        if len(per_seed) > 1:
            summary["few_shot_seeds"] = findings.over_seeds(per_seed)
    summary["seconds"] = round(time.perf_counter() - start, 1)
    return summary


def _config(cfg: FewShotConfig, base: TrainConfig) -> dict[str, Any]:
    return {"epochs": cfg.epochs, "batch_size": cfg.batch_size,
            "finetune_lr": cfg.finetune_lr or cfg.scratch_lr or base.learning_rate,
            "scratch_lr": cfg.scratch_lr or base.learning_rate,
            "val_share": cfg.val_share, "noleak_as": cfg.noleak_as, "seed": cfg.seed,
            "protocol": ("leave one recording out; the other recordings' clips split by time "
                         f"(last {cfg.val_share:g} of each recording's clips = val); fit() "
                         "with the params' train section; early stopping and threshold on val"),
            "threshold": ("finetune / scratch: the fold's val-chosen threshold (val = clips "
                          "of the training recordings); synthetic: the detector's own; "
                          "balanced_accuracy_at_0_5 uses 0.5 for all")}


def write_outputs(summary: dict[str, Any], out: Path, figure_path: Path | None) -> None:
    """The summary as JSON and, when asked, its figure as PNG."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2) + "\n")
    if figure_path is not None:
        figure_path.parent.mkdir(parents=True, exist_ok=True)
        findings.figure(summary).savefig(figure_path, dpi=110)

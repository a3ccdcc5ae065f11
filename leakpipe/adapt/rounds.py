"""The fine-tune step of a round and the val check of its result.

- ``fine_tune``: ``fit()`` from the previous round's weights (``train.init_checkpoint``
  with a fresh optimizer), with the round's epochs and learning rate, on the round's split
  (``leakpipe.adapt.round_split``), validating on the labelled val split every epoch; its
  checkpoint folder makes a killed round resume mid-way.
- ``choose_on_val``: the operating point re-chosen on val with evaluate's criterion and the
  `decision` rule (``select_operating_point``, the code evaluate runs), the calibration of the
  leak probability refitted there (``fit_platt``, as evaluate fits it: the adapted network's
  scores are not the seed's, so neither is their map), and the val figures there: the figure
  a round must not worsen beyond ``adapt.tolerance`` (``leakpipe.adapt.guard``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from leakpipe.adapt.scoring import set_figures  # noqa: F401  (benchmarks import it from here)
from leakpipe.config import DecisionConfig, EvaluateConfig, QualityConfig, TrainConfig
from leakpipe.decision.calibration import fit_platt
from leakpipe.decision.domain import DomainReference
from leakpipe.decision.select import OperatingPoint, select_operating_point
from leakpipe.decision.voting import VotingConfig, file_scores, threshold_grid
from leakpipe.detector import Detector, Network, with_operating_point
from leakpipe.errors import DataError
from leakpipe.evaluate.detector_evaluation import batch_limits, read_file_table
from leakpipe.evaluate.figures import binary_figures
from leakpipe.runtime import Runtime
from leakpipe.scoring.batching import open_batches
from leakpipe.scoring.score import score_batches
from leakpipe.tracking import Tracker
from leakpipe.train.fit import FitOptions, fit
from leakpipe.train.inputs import prepare_training


def fine_tune(init: Path, split: Path, val_path: Path, plan: Mapping[str, Any],
              network: Network, train_cfg: TrainConfig, decision: DecisionConfig, *,
              epochs: int, learning_rate: float, runtime: Runtime, tracker: Tracker,
              checkpoint_dir: Path, progress: bool) -> Network:
    """``fit()`` from the weights in ``init`` on ``split``; the best epoch's network."""
    if train_cfg.binary != network.binary or train_cfg.input_norm != network.input_norm:
        raise DataError(f"{init}: the detector was trained with train.binary "
                        f"{network.binary} and input_norm {network.input_norm!r}; params say "
                        f"{train_cfg.binary} and {train_cfg.input_norm!r}")
    cfg = dataclasses.replace(train_cfg, epochs=epochs, learning_rate=learning_rate,
                              init_checkpoint=str(init), reset_optimizer=True)
    data = prepare_training(split, val_path, dict(plan), cfg, runtime.device)
    try:
        result = fit(network.model_cfg, cfg, runtime=runtime, decision=decision,
                     train_source=data.train_source, val=data.val,
                     class_counts=data.class_counts, tracker=tracker,
                     checkpoint_dir=checkpoint_dir, features=data.features.to_dict(),
                     options=FitOptions(progress=progress, data_id=data.data_id))
    finally:
        data.close()
    return Network(model=result.model.cpu().eval(), model_cfg=network.model_cfg,
                   class_names=network.class_names,
                   data_class_names=network.data_class_names, binary=network.binary,
                   features=network.features, input_norm=network.input_norm)


@dataclass(frozen=True)
class ValChoice:
    detector: Detector
    point: OperatingPoint
    figures: dict[str, float]     # file figures on val at the chosen point


def choose_on_val(network: Network, val_path: Path, plan: Mapping[str, Any],
                  decision: DecisionConfig, evaluate: EvaluateConfig, runtime: Runtime,
                  min_clip_fraction: float, domain: DomainReference | None = None,
                  quality: QualityConfig | None = None) -> ValChoice:
    """Score val, choose the operating point and fit the calibration as evaluate does, the
    detector that results; it carries ``domain``, the seed's reference (the band profiles of
    the labelled training recordings do not change with the network's weights), and
    ``quality``, the seed's signal checks."""
    limits = batch_limits(plan, evaluate)
    batches = open_batches(val_path, plan["placement"], network.model_cfg, runtime.device,
                           limits, network.binary, network.input_norm)
    info = batches.info
    model = network.inference_model().to(runtime.device)
    scores = score_batches(model, batches, segments=tuple(info.segment_shape[:2]),
                           leak_index=info.leak_label, prob_mode=decision.prob_mode,
                           runtime=runtime)
    truth = read_file_table(val_path, network).truth
    grid = threshold_grid(decision.threshold_min, decision.threshold_max,
                          decision.threshold_step)
    point = select_operating_point(scores.seg_probs, truth, grid, rule=decision.rule,
                                   vote_fraction=decision.vote_fraction,
                                   criterion=evaluate.criterion, target=evaluate.target,
                                   select_rule=evaluate.select_rule)
    file_score = file_scores(scores.seg_probs, point.rule, point.vote_fraction)
    figures = binary_figures(truth, file_score >= point.threshold, file_score)
    detector = with_operating_point(
        network, voting=VotingConfig(prob_mode=decision.prob_mode, rule=point.rule,
                                     vote_fraction=point.vote_fraction),
        threshold=point.threshold,
        metrics={f"val/clip_{k}": v for k, v in figures.items() if np.isfinite(v)},
        batch_limits=limits, min_clip_fraction=min_clip_fraction,
        calibration=fit_platt(file_score, truth), domain=domain, quality=quality)
    return ValChoice(detector, point, figures)

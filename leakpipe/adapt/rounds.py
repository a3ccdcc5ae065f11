"""One adaptation round's pieces: the round's training split, the fine-tune, the val check.

- ``write_round_split``: the labelled train split copied row for row, plus the pseudo-labelled
  rows of the pool (``leakpipe.adapt.pseudo``), at most ``pseudo_per_labelled`` of them per
  labelled row (a seeded random subset when there are more), as one HDF5 split in the train
  format. So the fine-tune runs the very ``fit()`` of the train stage on an ordinary split,
  and the labelled data keep anchoring what a leak is.
- ``fine_tune``: ``fit()`` from the previous round's weights (``train.init_checkpoint``
  with a fresh optimizer), with the round's epochs and learning rate, validating on the
  labelled val split every epoch; its checkpoint folder makes a killed round resume mid-way.
- ``choose_on_val``: the operating point re-chosen on val with evaluate's criterion and the
  `decision` rule (``select_operating_point``, the code evaluate runs), the calibration of the
  leak probability refitted there (``fit_platt``, as evaluate fits it: the adapted network's
  scores are not the seed's, so neither is their map), and the val figures there: the figure
  a round must not worsen beyond ``adapt.tolerance``.
- ``rejection``: why a round is rejected (val file F1, and with ``adapt.check_guard`` the
  labelled field check set's file F1, more than ``tolerance`` below the seed detector's), or
  "" to accept it. Always the seed's, never the previous accepted round's: against the
  previous round, rounds that each lose a little could together lose any amount.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from leakpipe.adapt.field import FieldScores, FieldSet
from leakpipe.adapt.pseudo import LEAK, Pseudo, pack_rows
from leakpipe.config import DecisionConfig, EvaluateConfig, QualityConfig, TrainConfig
from leakpipe.data.reader import open_split
from leakpipe.data.schema import leak_index
from leakpipe.data.writer import SplitWriter
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

PSEUDO_GROUP = "field"         # group of every pseudo-labelled row
PSEUDO_PREFIX = "field/"       # recording id of a pseudo-labelled row: this + the pool key


@dataclass(frozen=True)
class RoundSplit:
    labelled_rows: int
    pseudo_rows: int           # written (after the cap)
    pseudo_rows_available: int


def data_label(pseudo_label: int, class_probs: np.ndarray, network: Network) -> int:
    """The data class a pseudo-labelled recording is stored as: LEAK, else its most probable
    non-leak class (every non-leak class counts as not LEAK in a binary task)."""
    names = network.data_class_names
    leak = leak_index(names)
    if pseudo_label == LEAK:
        return leak
    if network.binary:
        return next(i for i in range(len(names)) if i != leak)
    probs = np.array(class_probs, dtype=np.float64)                  # task = data classes
    probs[leak] = -np.inf
    return int(np.argmax(probs))


def write_round_split(path: Path, train_path: Path, pool: FieldSet, scores: FieldScores,
                      pseudo: list[Pseudo], network: Network, *, ratio: float,
                      seed: int) -> RoundSplit:
    """Labelled train rows + pseudo-labelled rows -> ``path`` (written atomically)."""
    n_long = network.features.n_long
    rows: list[tuple[int, np.ndarray]] = []           # (recording, packed rows) per recording
    for i, p in enumerate(pseudo):
        if p.label is not None and len(p.kept):
            segments = pool.mel[i].reshape(-1, *pool.mel[i].shape[2:])[p.kept]   # (k, S, M, T)
            rows.append((i, pack_rows(segments, n_long)))
    with open_split(train_path) as train:
        if train.features != network.features:
            raise DataError(f"{train_path}: feature config differs from the detector's")
        labelled = train.n_files
        cap = int(np.floor(ratio * labelled))
        keep = _row_subset([len(r) for _, r in rows], cap, seed)
        with SplitWriter(path, "train", train.features, train.class_names,
                         dtype=str(train.mel.dtype)) as writer:
            _copy_rows(train, writer)
            written = 0
            for (i, packed), chosen in zip(rows, keep, strict=True):
                if len(chosen):
                    label = data_label(pseudo[i].label or 0, scores.class_probs[i], network)
                    writer.append(packed[chosen], label, PSEUDO_PREFIX + pool.keys[i],
                                  PSEUDO_GROUP)
                    written += len(chosen)
    return RoundSplit(labelled, written, sum(len(r) for _, r in rows))


def _row_subset(counts: list[int], cap: int, seed: int) -> list[np.ndarray]:
    """Per recording, the indices of its rows kept: all when the total is within ``cap``, else
    a seeded uniform subset of ``cap`` rows over all recordings."""
    total = sum(counts)
    if total <= cap:
        return [np.arange(c) for c in counts]
    chosen = np.sort(np.random.default_rng(seed).choice(total, size=cap, replace=False))
    bounds = np.cumsum([0, *counts])
    return [chosen[(chosen >= a) & (chosen < b)] - a for a, b in zip(bounds[:-1], bounds[1:],
                                                                      strict=True)]


def _copy_rows(train: Any, writer: SplitWriter) -> None:
    """Every row of ``train``, recording by recording (rows of a recording are consecutive)."""
    ids, labels, groups = train.recording_ids, train.labels, train.groups
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    ends = np.r_[starts[1:], len(ids)]
    for a, b in zip(starts, ends, strict=True):
        writer.append(train.mel[a:b], int(labels[a]), str(ids[a]), str(groups[a]))


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
        metrics={f"val/file_{k}": v for k, v in figures.items() if np.isfinite(v)},
        batch_limits=limits, min_clip_fraction=min_clip_fraction,
        calibration=fit_platt(file_score, truth), domain=domain, quality=quality)
    return ValChoice(detector, point, figures)


def set_figures(truth: np.ndarray, scores: np.ndarray, threshold: float) -> dict[str, float]:
    """File figures of a labelled field set, with the false-positive rate spelled out."""
    figures = binary_figures(truth, scores >= threshold, scores)
    figures["fpr"] = 1.0 - figures["specificity"] if (truth == 0).any() else float("nan")
    return figures


def rejection(r: int, seed: Mapping[str, Any], val_f1: float, check_f1: float | None, *,
              tolerance: float, check_guard: bool, standing: int) -> str:
    """Why round ``r`` is rejected against the ``seed`` round's entry (round 0), or "".

    A figure more than ``tolerance`` below the seed's, or not a number where the seed's is
    (the worst score, as NaN is to early stopping), rejects the round; a figure the seed
    lacks (no check set) guards nothing. ``standing`` is the round whose detector stands."""
    for name, key, now, guard in (("val", "val", val_f1, True),
                                  ("field check set", "check", check_f1, check_guard)):
        before = (seed.get(key) or {}).get("f1")
        if not guard or now is None or before is None or not math.isfinite(before):
            continue
        if math.isfinite(now) and now >= before - tolerance:
            continue
        worse = (f"{now:.4f} is more than {tolerance:g} below" if math.isfinite(now)
                 else "is not a number, against")
        return (f"round {r} rejected: {name} file F1 {worse} the seed's {before:.4f}; "
                f"round {standing}'s detector stands")
    return ""

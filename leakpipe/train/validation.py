"""Per-epoch validation: the whole val split through the one scoring path, then its figures.

Every segment of the split is scored (the original validated on 40 unshuffled batches, so its
metrics described a few files only) with the network's exact inference form, as evaluate and
predict score it. The file threshold is chosen with evaluate's own selection code
(``leakpipe.decision.select``, criterion max F1) over the `decision` grid, so the val F1 that
picks the best epoch is the val F1 evaluate would report for that epoch's weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from torch import nn

from leakpipe.config import DecisionConfig
from leakpipe.data.file_order import FileOrderBatches
from leakpipe.data.schema import leak_index
from leakpipe.decision.metrics import binary_metrics, diagnose, dominant_class, roc_auc
from leakpipe.decision.select import select_operating_point
from leakpipe.decision.voting import file_scores, threshold_grid
from leakpipe.inference import inference_form
from leakpipe.model import unwrap
from leakpipe.runtime import Runtime
from leakpipe.scoring.score import score_batches
from leakpipe.train.losses import LossFn, NonFiniteLossError

VAL_CRITERION = "max_f1"   # per-epoch model selection ranks epochs by val clip F1


@dataclass(frozen=True)
class ValSplit:
    """The val split as file-order batches (re-iterable every epoch) and its labels."""

    batches: FileOrderBatches

    @property
    def labels(self) -> np.ndarray:
        return self.batches.info.file_labels                         # (F,) task labels

    @property
    def class_names(self) -> tuple[str, ...]:
        return tuple(self.batches.info.classes)

    @property
    def leak_index(self) -> int:
        return leak_index(self.class_names)

    @property
    def segments(self) -> tuple[int, int]:
        shape = self.batches.info.segment_shape
        return int(shape[0]), int(shape[1])

    @property
    def n_frames(self) -> int:
        return int(self.batches.info.segment_shape[-1])


@dataclass(frozen=True)
class EvalResult:
    loss: float
    accuracy: float                  # segment-level, over every class
    segment: dict[str, float]        # leak metrics per segment at the segment threshold
    file: dict[str, float]           # leak metrics per file at ``threshold``
    threshold: float                 # grid threshold chosen on val (max clip F1)
    file_f1_curve: np.ndarray        # (K,) clip F1 per grid threshold
    class_names: tuple[str, ...]
    pred_counts: tuple[int, ...]     # predicted class per segment, counted
    true_counts: tuple[int, ...]
    diagnosis: str | None
    seconds: float
    seg_probs: np.ndarray            # (F, L, S) leak probability per segment
    confusion: np.ndarray            # (C, C) segments: true class (rows) x predicted (columns)
    file_confusion: np.ndarray       # (2, 2) files at ``threshold``: [[tn, fp], [fn, tp]]

    def metrics(self, prefix: str = "val") -> dict[str, float]:
        total = max(1, sum(self.pred_counts))
        out = {f"{prefix}/loss": self.loss, f"{prefix}/accuracy": self.accuracy,
               f"{prefix}/clip_threshold": self.threshold, f"vitals/{prefix}_seconds": self.seconds}
        out.update({f"{prefix}/seg_{k}": v for k, v in self.segment.items()})
        out.update({f"{prefix}/clip_{k}": v for k, v in self.file.items()})
        out.update({f"{prefix}/pred_share/{name}": c / total
                    for name, c in zip(self.class_names, self.pred_counts, strict=True)})
        return out


def validate(model: nn.Module, val: ValSplit, loss_fn: LossFn, decision: DecisionConfig,
             runtime: Runtime) -> EvalResult:
    """Score every val segment with ``model``'s inference form, then every val figure.

    Raises ``NonFiniteLossError`` when the val loss is NaN or infinite.
    """
    net = inference_form(unwrap(model), val.n_frames)
    scores = score_batches(net, val.batches, segments=val.segments, leak_index=val.leak_index,
                           prob_mode=decision.prob_mode, runtime=runtime, loss_fn=loss_fn)
    if not math.isfinite(scores.loss):
        raise NonFiniteLossError(f"in validation: val loss is {scores.loss}")
    n_classes = len(val.class_names)
    seg_labels = np.repeat(val.labels, scores.seg_probs[0].size)    # (F * L * S,)
    confusion = np.bincount(seg_labels * n_classes + scores.seg_pred,
                            minlength=n_classes**2).reshape(n_classes, n_classes)
    return _result(scores.seg_probs, scores.loss, confusion, val, decision, scores.seconds)


def _result(seg_probs: np.ndarray, loss: float, confusion: np.ndarray, val: ValSplit,
            decision: DecisionConfig, seconds: float) -> EvalResult:
    file_truth = val.labels == val.leak_index                       # (F,)
    seg_truth = np.repeat(file_truth, seg_probs[0].size)            # (F * L * S,)
    seg = binary_metrics(seg_truth, seg_probs.reshape(-1) >= decision.segment_threshold).at(0)
    grid = threshold_grid(decision.threshold_min, decision.threshold_max,
                          decision.threshold_step)
    point = select_operating_point(seg_probs, file_truth, grid, rule=decision.rule,
                                   vote_fraction=decision.vote_fraction,
                                   criterion=VAL_CRITERION, target=1.0)
    files, best = point.val_curve, point.index
    scores = file_scores(seg_probs, point.rule, point.vote_fraction)
    pred_counts, true_counts = confusion.sum(axis=0), confusion.sum(axis=1)
    notes = [diagnose(file_truth, scores >= point.threshold, scores, point.threshold),
             dominant_class(pred_counts, true_counts, val.class_names)]
    n = max(1, int(confusion.sum()))
    return EvalResult(
        loss=loss, accuracy=float(np.trace(confusion)) / n, segment=seg,
        file={**files.at(best), "roc_auc": roc_auc(file_truth, scores)},
        threshold=point.threshold, file_f1_curve=files.f1, class_names=val.class_names,
        pred_counts=tuple(int(c) for c in pred_counts),
        true_counts=tuple(int(c) for c in true_counts),
        diagnosis="; ".join(note for note in notes if note) or None, seconds=seconds,
        seg_probs=seg_probs, confusion=confusion,
        file_confusion=np.array([[files.tn[best], files.fp[best]],
                                 [files.fn[best], files.tp[best]]], dtype=np.int64))

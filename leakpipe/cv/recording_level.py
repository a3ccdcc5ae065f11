"""One verdict per recording: clip scores pooled per recording, the fused stacker, and the
choice of the detector method (pooled and nested). Pure functions of a fold's scores.

A utility acts on a logger recording, not on a 3 s clip. A method's recording score is the mean
of its clip scores (logger_stats and fused score the recording itself: every clip carries the
same value), and its recording threshold is chosen on the fold's inner val recordings by
evaluate's criterion and threshold grid; the test fold's recordings are then decided with it.

Selection: among the methods a detector file can be (``DETECTOR_KINDS``, simplest first:
logger_stats, cnn, fused), the one with the best recording ROC-AUC, where a more complex method
must beat a simpler one by more than ``margin`` (few sites make small differences noise; the
simpler detector is cheaper to run and to explain). ``selected`` applies the rule to the pooled
out-of-fold figures: it is what `ship` ships, and its figure is flattered by having been
picked after seeing every fold. ``selected_nested`` applies the rule inside each fold to that
fold's inner figures only (each method's ``val_roc_auc``: logger_stats' over its out-of-fold
train + val scores, fused's over val scores from stackers fitted without their site
(``site_out_of_fold``), the CNN's over the val recordings) and pools each fold's pick on its
test recordings: an honest estimate of "run the selection, ship the winner" (the test fold
never takes part in its own choice).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from sklearn.linear_model import LogisticRegression

from leakpipe.baselines.operating_point import choose_on_val
from leakpipe.config import DETECTOR_KINDS, DecisionConfig, EvaluateConfig
from leakpipe.decision.stacking import Stacker, logit
from leakpipe.decision.voting import decide
from leakpipe.evaluate.figures import ranking_metrics


def recording_decisions(val_scores: np.ndarray, val_truth: np.ndarray, test_scores: np.ndarray,
                        ev: EvaluateConfig, decision: DecisionConfig) -> dict[str, object]:
    """(R_val,), (R_val,), (R_test,) recording scores -> the val-chosen threshold and the
    test recordings' decisions, with the val ROC-AUC the selection reads."""
    point = choose_on_val(np.asarray(val_scores, np.float64), val_truth, ev, decision)
    return {"threshold": float(point.threshold),
            "val_roc_auc": float(ranking_metrics(val_truth, val_scores)["roc_auc"]),
            "val_scores": np.asarray(val_scores, np.float64).tolist(),
            "scores": np.asarray(test_scores, np.float64).tolist(),
            "decision": decide(np.asarray(test_scores, np.float64),
                               point.threshold)[0].astype(int).tolist()}


def fuse(val: Sequence[np.ndarray], val_truth: np.ndarray, test: Sequence[np.ndarray],
         c: float) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """Stack methods' recording probabilities (``fit_stacker`` on the val recordings; each
    method's val scores come from a model that never saw them). Returns (val scores, test
    scores, the weights and bias)."""
    stacker = fit_stacker(val, val_truth, c, [str(m) for m in range(len(val))])
    return (stacker.prob(logit(np.stack(val, axis=1))),
            stacker.prob(logit(np.stack(test, axis=1))), [*stacker.weights, stacker.bias])


def site_out_of_fold(val: Sequence[np.ndarray], val_truth: np.ndarray, group: np.ndarray,
                     c: float) -> np.ndarray:
    """(R_val,) stacked probabilities of the val recordings, each site's from a stacker fitted
    on the other val sites (``fit_stacker``): an honest val figure for a method fitted on
    val."""
    x = np.stack([np.asarray(v, np.float64) for v in val], axis=1)       # (R_val, M)
    out = np.empty(len(val_truth))
    names = [str(m) for m in range(x.shape[1])]
    for site in np.unique(group):
        held = group == site
        stacker = fit_stacker(list(x[~held].T), val_truth[~held], c, names)
        out[held] = stacker.prob(logit(x[held]))
    return out


def fit_stacker(val: Sequence[np.ndarray], val_truth: np.ndarray, c: float,
                names: Sequence[str]) -> Stacker:
    """An L2 logistic regression (inverse strength ``c``) on the methods' (R_val,) recording
    logits, one method per ``names``; a fused detector's stacker (stage `ship`) is fitted so
    too. A val set of one class cannot weigh anything: the mean of the logits then."""
    x_val = np.stack([logit(v) for v in val], axis=1)             # (R_val, M)
    if len(np.unique(val_truth)) < 2:
        return Stacker(tuple(names), (1.0 / x_val.shape[1],) * x_val.shape[1], 0.0)
    model = LogisticRegression(C=c, max_iter=1000).fit(x_val, np.asarray(val_truth, int))
    return Stacker(tuple(names), tuple(float(w) for w in model.coef_[0]),
                   float(model.intercept_[0]))


def select_method(auc: Mapping[str, float], margin: float) -> str | None:
    """The simplest detector kind no more complex kind beats by more than ``margin`` in
    ``auc`` (method -> recording ROC-AUC); None when no kind has a finite figure."""
    kinds = [k for k in DETECTOR_KINDS if k in auc and np.isfinite(auc[k])]
    if not kinds:
        return None
    chosen = kinds[0]
    for k in kinds[1:]:                                  # in order of complexity
        if auc[k] > auc[chosen] + margin:
            chosen = k
    return chosen


def nested_choices(results: Sequence[Mapping[str, object]], margin: float) -> list[str | None]:
    """Per fold, the method the rule picks from that fold's inner-val recording ROC-AUC."""
    out = []
    for r in results:
        methods = r["methods"]
        assert isinstance(methods, Mapping)
        auc = {m: float(out_m["recording"]["val_roc_auc"]) for m, out_m in methods.items()
               if "recording" in out_m}
        out.append(select_method(auc, margin))
    return out


__all__ = ["fit_stacker", "fuse", "logit", "nested_choices", "recording_decisions",
           "select_method", "site_out_of_fold"]

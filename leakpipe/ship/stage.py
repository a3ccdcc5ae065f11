"""Stage `ship`: the detector of the kind grouped cross-validation picked -> `models/shipped.pt`.

``detector.method`` names the kind (``logger_stats``, ``cnn`` or ``fused``); ``auto`` takes
`metrics/cv.json`'s ``selected`` (the kind with the best pooled recording ROC-AUC, a more
complex kind winning only by more than ``detector.selection_margin``: leakpipe.cv.recording_level).

- ``cnn``: evaluate's detector (`models/detector.pt`, its operating point chosen on val) is the
  shipped one, byte for byte;
- ``logger_stats``: the statistics model is fitted on train, its strength, threshold and
  calibration chosen on val, test scored once (``leakpipe.ship.stats_evaluation``);
- ``fused``: evaluate's CNN detector and a logger_stats part fitted as above, stacked on the
  val recordings (``detector.fusion_C``), its threshold and calibration chosen there, test
  scored once (``leakpipe.ship.fused_evaluation``).

`metrics/ship.json` says which kind was shipped and why (the method param, cv's selection and
its nested estimate) with the shipped detector's test figures; one MLflow run logs the same
and the detector file. The shipped detector's model card, its served MLflow model and its
registered version (alias ``candidate``) come from ``leakpipe.ship.registration``.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from leakpipe import tracking
from leakpipe.baselines.recording_figures import recording_figures
from leakpipe.config import DETECTOR_KINDS, EvaluateConfig, load_section
from leakpipe.data.stamp import trust_splits
from leakpipe.decision.voting import decide
from leakpipe.detector import load_detector
from leakpipe.errors import DataError
from leakpipe.files import temporary_sibling, write_csv_atomic, write_json_atomic
from leakpipe.metric_names import json_safe, nest
from leakpipe.ship.figures import (
    MEAN_CLIP_SCORE,
    ShippedCalls,
    calls_from_rows,
    plot_records,
    shipped_figures,
)

log = logging.getLogger(__name__)

STAGE = "ship"
CNN, STATS, FUSED = "cnn", "logger_stats", "fused"
SPLITS = ("train", "val", "test")
PREDICTION_COLUMNS = ("split", "recording_id", "group", "truth", "leak_prob", "decision",
                      "threshold", "raw_score")   # `leakpipe predict`'s names and scales


@dataclass(frozen=True)
class ShipPaths:
    cv: Path                   # metrics/cv.json (read when detector.method is auto)
    cnn_detector: Path         # evaluate's models/detector.pt
    cnn_predictions: Path      # evaluate's reports/predictions.csv (the cnn kind's figures)
    data_dir: Path             # the built splits
    validated: Path | None     # validate's stamp; None: --unvalidated
    shipped: Path              # models/shipped.pt
    metrics: Path              # metrics/ship.json
    predictions: Path          # reports/shipped_predictions.csv (a row per val / test recording)
    model_card: Path | None = None   # reports/shipped_model_card.md (None: not written)
    cnn_card: Path | None = None     # evaluate's reports/model_card.md (the cnn kind's card)
    plots_dir: Path | None = None    # plots/ship: the shipped detector's test figures (None: not)


def chosen_kind(method: str, cv_path: Path) -> tuple[str, dict[str, Any]]:
    """The kind to ship and what cv said about it (empty when ``method`` names the kind)."""
    if method != "auto":
        return method, {}
    try:
        summary = json.loads(cv_path.read_text())
    except FileNotFoundError:
        raise DataError(f"{cv_path}: not found; detector.method auto ships what grouped "
                        "cross-validation selects: run `dvc repro crossval` (or set "
                        "detector.method)") from None
    except json.JSONDecodeError:
        raise DataError(f"{cv_path}: not valid JSON; re-run `dvc repro crossval`") from None
    kind = summary.get("selected") if isinstance(summary, dict) else None
    if kind not in DETECTOR_KINDS:
        raise DataError(f"{cv_path}: selected is {kind!r}, not one of {list(DETECTOR_KINDS)} "
                        "(cv.methods must hold at least one of them; or set detector.method)")
    figures = summary["methods"][kind]
    info = {"selected": kind, "selection_margin": summary.get("selection_margin"),
            "cv_recording_roc_auc": figures["recording_roc_auc"],
            "cv_sites": summary.get("sites"), "cv_recordings": summary.get("recordings")}
    if "selected_nested" in summary:
        info["cv_selected_nested"] = {
            "per_fold": summary["selected_nested"]["per_fold"],
            "recording_roc_auc": summary["selected_nested"]["recording_roc_auc"]}
    return kind, info


def run_ship(paths: ShipPaths, params: Path) -> int:
    """The whole stage; returns the exit code (errors raise ``LeakpipeError``)."""
    cfg = load_section(params, "detector")
    kind, selection = chosen_kind(cfg.method, paths.cv)
    splits = {s: paths.data_dir / f"{s}.h5" for s in SPLITS}
    with tracking.start_run(STAGE) as run:
        run.log_params({"detector": dataclasses.asdict(cfg), "kind": kind})
        if kind == CNN:
            _copy(paths.cnn_detector, paths.shipped)
            threshold = load_detector(paths.cnn_detector).threshold
            metrics: dict[str, Any] = cnn_recording_figures(
                paths.cnn_predictions, threshold, load_section(params, "evaluate"))
            rows: list[dict[str, Any]] = []
            calls = cnn_test_calls(paths.cnn_predictions, threshold)
        else:
            trust = trust_splits(paths.validated, splits)
            run.set_tags(trust.tags)
            ship_kind = _ship_stats if kind == STATS else _ship_fused
            metrics, rows = ship_kind(paths, params, splits)
            calls = calls_from_rows(rows)
        if paths.plots_dir is not None:
            _write_figures(run, paths.plots_dir, kind, calls)
        report = {"kind": kind, "method": cfg.method, **selection, **nest(json_safe(metrics))}
        write_json_atomic(paths.metrics, report)
        # a cnn detector's predictions are evaluate's (reports/predictions.csv): a header only
        write_csv_atomic(paths.predictions, rows, columns=PREDICTION_COLUMNS)
        run.log_metrics({k: float(v) for k, v in metrics.items()
                         if isinstance(v, int | float)})
        run.log_artifact(paths.shipped, STAGE)
        run.log_artifact(paths.metrics, STAGE)
        _publish(run, paths, kind, report, metrics, params)
    print(summary_line(report, paths.shipped))
    return 0


def _publish(run: tracking.Tracker, paths: ShipPaths, kind: str, report: dict[str, Any],
             metrics: dict[str, Any], params: Path) -> None:
    """The shipped detector's card, served model and registered version
    (``leakpipe.ship.registration``: the registry's candidate is registered there only)."""
    from leakpipe.ship.registration import Shipped, publish_shipped

    publish_shipped(run, Shipped(kind=kind, file=paths.shipped, report=report,
                                 metrics={k: float(v) for k, v in metrics.items()
                                          if isinstance(v, int | float)},
                                 data_dir=paths.data_dir, cnn_card=paths.cnn_card,
                                 params=params), paths.model_card)


def _ship_stats(paths: ShipPaths, params: Path,
                splits: dict[str, Path]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    from leakpipe.ship.stats_evaluation import evaluate_stats_detector
    from leakpipe.stats_detector import save_stats_detector

    build = load_section(params, "build")
    evaluation = evaluate_stats_detector(splits, load_section(params, "baselines"),
                                         load_section(params, "evaluate"),
                                         load_section(params, "decision"), build.quality)
    save_stats_detector(paths.shipped, evaluation.detector)
    return evaluation.metrics, evaluation.rows


def _ship_fused(paths: ShipPaths, params: Path,
                splits: dict[str, Path]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    from leakpipe.runtime import make_runtime
    from leakpipe.ship.fused_evaluation import evaluate_fused_detector
    from leakpipe.stats_detector import save_fused_detector

    rt = load_section(params, "runtime")
    evaluation = evaluate_fused_detector(
        splits, load_detector(paths.cnn_detector), baselines=load_section(params, "baselines"),
        ev=load_section(params, "evaluate"), decision=load_section(params, "decision"),
        fusion_c=load_section(params, "detector").fusion_C,
        quality=load_section(params, "build").quality,
        runtime=make_runtime(rt.device, rt.amp, rt.channels_last))
    save_fused_detector(paths.shipped, evaluation.detector)
    return evaluation.metrics, evaluation.rows


def _write_figures(run: tracking.Tracker, folder: Path, kind: str,
                   calls: ShippedCalls | None) -> None:
    """``plots/ship/<name>.json`` and the figures on the run (``leakpipe.ship.figures``); the
    folder is rewritten whole, so no file of another kind's run stays behind."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    if calls is None:
        log.info("no test recordings with a call: no figures of the shipped detector")
        return
    for name, records in plot_records(calls).items():
        write_json_atomic(folder / f"{name}.json", records)
    for name, figure in shipped_figures(kind, calls).items():
        run.log_figure(figure, f"{STAGE}/{name}.png")


def cnn_test_calls(predictions: Path, threshold: float) -> ShippedCalls | None:
    """The CNN kind's call per test recording (``cnn_recording_figures``'s scores)."""
    found = _cnn_test_recordings(predictions)
    if found is None:
        return None
    _, truth, scores = found
    return ShippedCalls(truth=truth, score=scores, decision=decide(scores, threshold)[0],
                     threshold=threshold, scale=MEAN_CLIP_SCORE)


def cnn_recording_figures(predictions: Path, threshold: float,
                          ev: EvaluateConfig) -> dict[str, float]:
    """The CNN detector's test figures per recording, from evaluate's clip predictions: a
    recording's score is the mean of its clips' rule scores, decided at evaluate's threshold
    (the clip operating point: evaluate keeps no val predictions to choose a recording one);
    site-bootstrap intervals as logger_stats'. {} without the file."""
    found = _cnn_test_recordings(predictions)
    if found is None:
        return {}
    groups, truth, scores = found
    return recording_figures("test", truth, decide(scores, threshold)[0], scores, groups,
                             intervals=ev, counts=True)


def _cnn_test_recordings(predictions: Path
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(groups, truth, mean clip score) of every test recording in evaluate's predictions;
    None without the file or a test row."""
    if not predictions.is_file():
        log.info("%s not found: no recording figures for the cnn kind", predictions)
        return None
    per: dict[str, list[Any]] = {}
    try:
        with predictions.open(newline="") as handle:
            for row in csv.DictReader(handle):
                if row["split"] == "test":
                    entry = per.setdefault(row["recording_id"], [row["group"],
                                                                 int(row["leak"]), []])
                    entry[2].append(float(row["leak_score"]))
    except (KeyError, ValueError) as exc:
        raise DataError(f"{predictions}: not evaluate's predictions table ({exc})") from None
    if not per:
        return None
    groups = np.asarray([v[0] for v in per.values()])
    truth = np.asarray([v[1] for v in per.values()], dtype=bool)
    scores = np.asarray([float(np.mean(v[2])) for v in per.values()])
    return groups, truth, scores


def _copy(source: Path, target: Path) -> None:
    if not source.is_file():
        raise DataError(f"{source}: no such detector file; run `dvc repro evaluate`")
    tmp = temporary_sibling(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, tmp)
    tmp.replace(target)


def summary_line(report: dict[str, Any], path: Path) -> str:
    text = f"ship: {report['kind']} detector -> {path}"
    if "selected" in report:
        auc = report["cv_recording_roc_auc"]
        text += (f" (grouped CV selected it: recording ROC-AUC {auc['mean']:.3f}, "
                 f"{auc['ci_low']:.2f}-{auc['ci_high']:.2f}")
        nested = report.get("cv_selected_nested")
        if nested:
            text += f"; nested estimate {nested['recording_roc_auc']['mean']:.3f}"
        text += ")"
    test = report.get("test", {})
    if "recording_roc_auc" in test:
        text += (f"; test: recording ROC-AUC {test['recording_roc_auc']:.3f}, F1 "
                 f"{test['recording_f1']:.3f}")
    return text


__all__ = ["ShipPaths", "chosen_kind", "run_ship"]

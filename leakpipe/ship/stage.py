"""Stage `ship`: the detector of the kind grouped cross-validation picked -> `models/shipped.pt`.

``detector.method`` names the kind (``logger_stats``, ``cnn`` or ``fused``); ``auto`` takes
`metrics/cv.json`'s ``selected`` (the kind with the best pooled recording ROC-AUC, a more
complex kind winning only by more than ``detector.selection_margin``: leakpipe.cv.recording_level).

How a kind is fitted and scored is the kind's (``kind_named(kind).ship``, one module per kind in
``leakpipe.detectors.kinds``); the built-in kinds:

- ``cnn``: evaluate's detector (`models/detector.pt`, its operating point chosen on val) is the
  shipped one, byte for byte (``leakpipe.ship.cnn_evaluation``);
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

import dataclasses
import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leakpipe import tracking
from leakpipe.config import DETECTOR_KINDS, load_section
from leakpipe.detectors.registry import kind_named, registered
from leakpipe.errors import DataError
from leakpipe.files import write_csv_atomic, write_json_atomic
from leakpipe.metric_names import json_safe, nest
from leakpipe.ship.figures import (
    ShippedCalls,
    plot_records,
    shipped_figures,
)

log = logging.getLogger(__name__)

STAGE = "ship"
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


@dataclass(frozen=True)
class ShipJob:
    """What a kind's ``ship`` (``leakpipe.detectors``) fits and scores from."""

    paths: ShipPaths
    params: Path
    splits: dict[str, Path]            # train / val / test -> the built split
    run: tracking.Tracker              # ship's MLflow run (a kind tags it with what it read)


@dataclass(frozen=True)
class ShipOutcome:
    """A kind's shipped detector, written to ``paths.shipped``, and its test figures."""

    metrics: dict[str, Any]            # flat: test/recording_f1, ...
    rows: list[dict[str, Any]]         # ``PREDICTION_COLUMNS`` per val / test recording
    calls: ShippedCalls | None         # the test recordings' calls (the figures); None: none


def chosen_kind(method: str, cv_path: Path) -> tuple[str, dict[str, Any]]:
    """The kind to ship and what cv said about it (empty when ``method`` names the kind)."""
    if method != "auto":
        if method not in registered():
            raise DataError(f"detector.method: {method!r} is not auto or a detector kind "
                            f"({registered()})")
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
        outcome = kind_named(kind).ship(ShipJob(paths, params, splits, run))
        metrics, rows, calls = outcome.metrics, outcome.rows, outcome.calls
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
        _publish(run, paths, kind, report, metrics, params, rows)
    print(summary_line(report, paths.shipped))
    return 0


def _publish(run: tracking.Tracker, paths: ShipPaths, kind: str, report: dict[str, Any],
             metrics: dict[str, Any], params: Path, rows: list[dict[str, Any]]) -> None:
    """The shipped detector's card, served model and registered version
    (``leakpipe.ship.registration``: the registry's candidate is registered there only)."""
    from leakpipe.ship.registration import Shipped, publish_shipped

    publish_shipped(run, Shipped(kind=kind, file=paths.shipped, report=report,
                                 metrics={k: float(v) for k, v in metrics.items()
                                          if isinstance(v, int | float)},
                                 data_dir=paths.data_dir, cnn_card=paths.cnn_card,
                                 params=params, rows=tuple(rows)), paths.model_card)


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

"""The preload stage: split shapes + measured memory -> the placement plan, one MLflow run.

``run_preload`` is what `leakpipe preload` (and stages/preload.py) calls: check the splits
against the validation stamp when one is given, read their shapes (metadata only), measure the
memory budget, choose the placement, write the decision to reports/preload.json (what train and
tune depend on: nothing measured in it) and the measured memory and reasons to
reports/preload.measured.json (not a DVC output: free memory differs on every run, and a plan
that changed with it would make training stale for nothing), and log both.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from leakpipe import tracking
from leakpipe.config import load_section
from leakpipe.data.stamp import require_validated
from leakpipe.files import write_json_atomic
from leakpipe.preload import plan_training, read_shapes
from leakpipe.preload.plan import human_bytes

STAGE = "preload"
MEASURED_SUFFIX = ".measured"
log = logging.getLogger(__name__)


def run_preload(splits: Mapping[str, Path], report_path: Path, params: Path,
                validated: Path | None = None) -> int:
    """The whole stage; returns the exit code (errors raise ``LeakpipeError``)."""
    cfg = load_section(params, STAGE)
    if validated is not None:
        require_validated(validated, splits)
    shapes = read_shapes(splits)
    plan, budget = plan_training(shapes, cfg, source=str(params))
    report, measured = plan.to_dict(cfg, shapes), plan.measurement(budget, cfg)
    measured_path = measurement_path(report_path)
    write_json_atomic(report_path, report)
    write_json_atomic(measured_path, measured)
    with tracking.start_run(STAGE) as run:
        run.log_params({STAGE: report["params"]})
        run.log_metrics(plan_metrics(report, measured))
        run.log_artifact(report_path, STAGE)
        run.log_artifact(measured_path, STAGE)
    print(summary_line(report, measured, report_path))
    return 0


def measurement_path(report_path: Path) -> Path:
    """reports/preload.json -> reports/preload.measured.json (not a DVC output)."""
    return report_path.with_name(f"{report_path.stem}{MEASURED_SUFFIX}{report_path.suffix}")


def _chosen(report: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in report["candidates"] if c["placement"] == report["placement"])


def plan_metrics(report: dict[str, Any], measured: dict[str, Any]) -> dict[str, float]:
    chosen, budget = _chosen(report), measured["budget"]
    return {"preload/host_bytes": chosen["host_bytes"],
            "preload/device_bytes": chosen["device_bytes"],
            "preload/host_usable": budget["host_usable"],
            "preload/device_usable": budget["device_usable"],
            "preload/batch_size_max": report["batch_size"]["max"]}


def summary_line(report: dict[str, Any], measured: dict[str, Any], path: Path) -> str:
    chosen = _chosen(report)
    splits = " + ".join(report["training_splits"])
    return (f"preload: {report['placement']} on {report['device']} ({splits}: "
            f"{human_bytes(chosen['host_bytes'])} host, {human_bytes(chosen['device_bytes'])} "
            f"GPU); batch size <= {report['batch_size']['max']} -> {path} (why: "
            f"{measured['reason']})")

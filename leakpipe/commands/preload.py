"""`leakpipe preload`: decide where training keeps its data (DVC stage `preload`).

Reads the split shapes (metadata only), measures free host / cgroup / GPU memory, estimates
what training holds under each placement and writes the decision to reports/preload.json,
which `train` and `tune` depend on. With ``--validated`` it first checks that `validate`
passed on these very splits.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leakpipe import tracking
from leakpipe.commands._common import add_params_argument
from leakpipe.config import load_section
from leakpipe.constants import SPLITS
from leakpipe.errors import DataError
from leakpipe.files import write_json_atomic

if TYPE_CHECKING:
    from leakpipe.preload import SplitShape

NAME = "preload"
HELP = "plan where training keeps its data (GPU, RAM or streamed) from measured memory"
log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--data-dir", type=Path, default=Path("data/processed"),
                        help="folder holding <split>.h5 (default: data/processed)")
    parser.add_argument("--splits", nargs="+", default=list(SPLITS),
                        help=f"splits to estimate (default: {' '.join(SPLITS)}; needs train)")
    parser.add_argument("--validated", type=Path, default=None,
                        help="the stamp `validate` writes; refuse splits it did not pass")
    parser.add_argument("--report", type=Path, default=Path("reports/preload.json"),
                        help="the plan (JSON)")


def check_validated(stamp_path: Path, shapes: dict[str, SplitShape]) -> None:
    """The splits must be the ones `validate` passed (same names and file counts)."""
    try:
        stamp = json.loads(stamp_path.read_text())
    except FileNotFoundError:
        raise DataError(f"{stamp_path}: no validation stamp; run `leakpipe validate` "
                        "(or `dvc repro validate`) first") from None
    except json.JSONDecodeError:
        raise DataError(f"{stamp_path}: not valid JSON; re-run `leakpipe validate`") from None
    if not stamp.get("passed"):
        raise DataError(f"{stamp_path}: validation did not pass")
    for split, shape in shapes.items():
        files = stamp.get("splits", {}).get(split, {}).get("files")
        if files != shape.files:
            raise DataError(f"{stamp_path}: {split}: validated {files} files, the split holds "
                            f"{shape.files}; re-run `leakpipe validate`")


def run(args: argparse.Namespace) -> int:
    from leakpipe.preload import plan_training, read_shapes

    cfg = load_section(args.params, "preload")
    shapes = read_shapes({split: args.data_dir / f"{split}.h5" for split in args.splits})
    if args.validated is not None:
        check_validated(args.validated, shapes)
    plan, budget = plan_training(shapes, cfg, source=str(args.params))
    report = plan.to_dict(budget, cfg, shapes)
    write_json_atomic(args.report, report)
    with tracking.start_run(NAME) as run:
        run.log_params({"preload": report["params"]})
        run.log_metrics(_metrics(report))
        run.log_artifact(args.report, "preload")
    print(_summary(report, args.report))
    return 0


def _metrics(report: dict[str, Any]) -> dict[str, float]:
    chosen = next(c for c in report["candidates"] if c["placement"] == report["placement"])
    budget = report["budget"]
    return {"preload/host_bytes": chosen["host_bytes"],
            "preload/device_bytes": chosen["device_bytes"],
            "preload/host_usable": budget["host_usable"],
            "preload/device_usable": budget["device_usable"],
            "preload/batch_size_max": report["batch_size"]["max"]}


def _summary(report: dict[str, Any], path: Path) -> str:
    from leakpipe.preload.plan import human_bytes

    chosen = next(c for c in report["candidates"] if c["placement"] == report["placement"])
    splits = " + ".join(report["training_splits"])
    return (f"preload: {report['placement']} on {report['device']} ({splits}: "
            f"{human_bytes(chosen['host_bytes'])} host, {human_bytes(chosen['device_bytes'])} "
            f"GPU); batch size <= {report['batch_size']['max']} -> {path}")

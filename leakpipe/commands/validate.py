"""`leakpipe validate`: check the HDF5 splits before training (DVC stage `validate`).

On success it writes the JSON report, the HTML report and the stamp that `preload` depends on.
On failure it writes the report beside the JSON path as ``<name>.failed.json`` / ``.html``
(never a DVC output), removes stale success outputs and exits non-zero with one line naming
the split, the check and the offending files. Both outcomes are logged to MLflow.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from leakpipe import tracking
from leakpipe.commands._common import add_params_argument
from leakpipe.config import load_section
from leakpipe.constants import SPLITS
from leakpipe.files import write_json_atomic
from leakpipe.validate import ValidationFailed

if TYPE_CHECKING:
    from leakpipe.validate.validation_report import ValidationReport

NAME = "validate"
HELP = "check the HDF5 splits (structure, values, classes, leakage between splits)"
FAILED_SUFFIX = ".failed"
log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--data-dir", type=Path, default=Path("data/processed"),
                        help="folder holding <split>.h5 (default: data/processed)")
    parser.add_argument("--splits", nargs="+", default=list(SPLITS),
                        help=f"splits to check, in order (default: {' '.join(SPLITS)})")
    parser.add_argument("--report", type=Path, default=Path("reports/validation.json"),
                        help="JSON report, written on success")
    parser.add_argument("--html", type=Path, default=Path("reports/validation.html"),
                        help="HTML report, written on success")
    parser.add_argument("--stamp", type=Path, default=Path("reports/validated.json"),
                        help="what passed (split sizes and checksums); `preload` depends on it")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def failed_path(path: Path) -> Path:
    """reports/validation.json -> reports/validation.failed.json"""
    return path.with_name(f"{path.stem}{FAILED_SUFFIX}{path.suffix}")


def write_outputs(report: ValidationReport, args: argparse.Namespace) -> tuple[Path, Path]:
    """Write the success outputs, or the failed report beside them; return (json, html)."""
    success = (args.report, args.html, args.stamp)
    failure = (failed_path(args.report), failed_path(args.html))
    stale = failure if report.passed else success
    for path in stale:
        if path.exists():
            log.info("removing stale %s", path)
            path.unlink()
    from leakpipe.files import write_text_atomic
    from leakpipe.validate.validation_report import render_html

    json_path, html_path = success[:2] if report.passed else failure
    write_json_atomic(json_path, report.to_dict())
    write_text_atomic(html_path, render_html(report))
    if report.passed:
        write_json_atomic(args.stamp, report.stamp())
    return json_path, html_path


def run(args: argparse.Namespace) -> int:
    # torch, pandas: only when validating
    from leakpipe.validate.split_validation import validate_splits

    cfg = load_section(args.params, "validate")
    paths = {split: args.data_dir / f"{split}.h5" for split in args.splits}
    report = validate_splits(paths, cfg, progress=not args.no_progress)
    json_path, html_path = write_outputs(report, args)
    checksums = [info.get("checksum") or "" for info in report.splits.values()]
    tags = {tracking.TAG_DATA: ",".join(checksums)} if all(checksums) else {}
    with tracking.start_run(NAME, tags=tags) as run:
        run.log_params({"validate": report.params})
        run.log_metrics(_metrics(report))
        run.log_artifact(json_path, "validation")
        run.log_artifact(html_path, "validation")
        if not report.passed:
            raise ValidationFailed(report.error_line(json_path))
    print(report.summary_line(json_path))
    return 0


def _metrics(report: ValidationReport) -> dict[str, float]:
    seconds = max(report.seconds, 1e-9)
    return {"validate/checks": len(report.checks), "validate/failed": len(report.failures),
            "validate/files": report.n_files, "validate/mib_read": report.bytes_read / 2**20,
            "validate/seconds": report.seconds,
            "perf/validate_mib_per_s": report.bytes_read / 2**20 / seconds,
            **{f"perf/validate_{name}": value for name, value in report.timings.items()}}

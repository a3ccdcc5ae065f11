"""The validate stage: every check on the splits -> report, stamp (or failed report), one run.

``run_validate`` is what `leakpipe validate` (and stages/validate.py) calls. On success it
writes the JSON report, the HTML report and the stamp that `preload` depends on. On failure it
writes the report beside the JSON path as ``<name>.failed.json`` / ``.html`` (never a DVC
output), removes stale success outputs and raises ``ValidationFailed`` with one line naming the
split, the check and the offending files. Both outcomes are logged to MLflow.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from leakpipe import tracking
from leakpipe.config import load_section
from leakpipe.files import file_sha256, write_json_atomic, write_text_atomic
from leakpipe.validate import ValidationFailed
from leakpipe.validate.split_validation import validate_splits
from leakpipe.validate.validation_report import ValidationReport, render_html

STAGE = "validate"
FAILED_SUFFIX = ".failed"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ValidateOutputs:
    """The success outputs; the failed reports lie beside the first two."""

    report: Path
    html: Path
    stamp: Path


def failed_path(path: Path) -> Path:
    """reports/validation.json -> reports/validation.failed.json"""
    return path.with_name(f"{path.stem}{FAILED_SUFFIX}{path.suffix}")


def run_validate(splits: Mapping[str, Path], outputs: ValidateOutputs, params: Path, *,
                 progress: bool = True) -> int:
    """The whole stage; returns the exit code (a failed check raises ``ValidationFailed``)."""
    started = time.time()       # the run, opened once the report exists, starts here
    cfg = load_section(params, STAGE)
    # hashed before the checks read them: a file changed meanwhile fails the consumers' check
    sha256 = {split: file_sha256(path) for split, path in splits.items() if path.is_file()}
    report = validate_splits(splits, cfg, progress=progress)
    json_path, html_path = write_outputs(report, outputs, sha256)
    with tracking.start_run(STAGE, tags={tracking.TAG_DATA: tracking.split_digests(sha256)},
                            started_at=started) as run:
        for split, digest in sha256.items():
            run.log_dataset(splits[split], split, digest,
                            tracking.DATASET_CONTEXT.get(split, split))
        run.log_params({STAGE: report.params})
        run.log_metrics(report_metrics(report))
        run.log_artifact(json_path, "validation")
        run.log_artifact(html_path, "validation")
        if not report.passed:
            raise ValidationFailed(report.error_line(json_path))
    print(report.summary_line(json_path))
    return 0


def write_outputs(report: ValidationReport, outputs: ValidateOutputs,
                  sha256: Mapping[str, str]) -> tuple[Path, Path]:
    """Write the success outputs (the stamp with each split file's ``sha256``), or the failed
    report beside them; return (json, html)."""
    success = (outputs.report, outputs.html, outputs.stamp)
    failure = (failed_path(outputs.report), failed_path(outputs.html))
    stale = failure if report.passed else success
    for path in stale:
        if path.exists():
            log.info("removing stale %s", path)
            path.unlink()
    json_path, html_path = success[:2] if report.passed else failure
    write_json_atomic(json_path, report.to_dict())
    write_text_atomic(html_path, render_html(report))
    if report.passed:
        write_json_atomic(outputs.stamp, report.stamp(sha256))
    return json_path, html_path


def report_metrics(report: ValidationReport) -> dict[str, float]:
    seconds = max(report.seconds, 1e-9)
    return {"validate/checks": len(report.checks), "validate/failed": len(report.failures),
            "validate/files": report.n_files, "validate/mib_read": report.bytes_read / 2**20,
            "validate/seconds": report.seconds,
            "vitals/validate_mib_per_s": report.bytes_read / 2**20 / seconds,
            **{f"vitals/validate_{name}": value for name, value in report.timings.items()}}

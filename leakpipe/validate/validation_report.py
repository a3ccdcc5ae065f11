"""The validation report: JSON for DVC / MLflow, HTML for people, one line for the terminal.

The JSON is deterministic for the same data and params (no timings, no timestamps): it is a
git-tracked DVC metrics file, so `dvc metrics diff` shows real changes only. Timings go to
MLflow. ``stamp()`` is the small certificate that `preload` depends on: it changes only when
the validated data change, so tightening a `validate` bound re-runs `validate` alone.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from leakpipe.validate.results import CheckResult

REPORT_FORMAT = "leakpipe.validation/1"
MAX_FAILURES_IN_ERROR = 5
MIB = 2**20


@dataclass
class ValidationReport:
    """Every check of one validation run, plus what was validated."""

    checks: list[CheckResult]
    splits: dict[str, dict[str, Any]]
    params: dict[str, Any]
    stopped: bool = False  # a split could not be read at all; later checks did not run
    seconds: float = 0.0
    bytes_read: int = 0
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.stopped and all(c.passed for c in self.checks)

    @property
    def failures(self) -> list[CheckResult]:
        return [c for c in self.checks if not c.passed]

    @property
    def n_files(self) -> int:
        return sum(int(s.get("files", 0)) for s in self.splits.values())

    def to_dict(self) -> dict[str, Any]:
        return jsonable({
            "format": REPORT_FORMAT,
            "passed": self.passed,
            "stopped": self.stopped,
            "n_checks": len(self.checks),
            "n_failed": len(self.failures),
            "n_files": self.n_files,
            "splits": self.splits,
            "params": self.params,
            "failed": [c.summary() for c in self.failures],
            "checks": [c.to_dict() for c in self.checks],
        })

    def stamp(self, sha256: Mapping[str, str]) -> dict[str, Any]:
        """What `preload` depends on and the consumers check: which data passed (not how they
        were checked), with the sha256 of each split file as it was read (``sha256``)."""
        return {"format": REPORT_FORMAT, "passed": self.passed,
                "splits": {name: {"files": info.get("files"), "checksum": info.get("checksum"),
                                  "sha256": sha256.get(name)}
                           for name, info in self.splits.items()}}

    def summary_line(self, path: Path) -> str:
        mib = sum(s.get("mib", 0.0) for s in self.splits.values())
        return (f"validate: passed {len(self.checks)} checks on {len(self.splits)} splits "
                f"({self.n_files} files, {mib:.1f} MiB) -> {path}")

    def error_line(self, path: Path) -> str:
        failures = self.failures
        shown = " | ".join(c.summary() for c in failures[:MAX_FAILURES_IN_ERROR])
        more = len(failures) - MAX_FAILURES_IN_ERROR
        tail = f" | (+{more} more)" if more > 0 else ""
        head = ("validation stopped" if self.stopped else
                f"validation failed ({len(failures)} of {len(self.checks)} checks)")
        return f"{head}: {shown}{tail}; report: {path}"


def jsonable(value: Any) -> Any:
    """numpy scalars, tuples, sets, paths and NaN -> plain JSON values."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        items = sorted(value, key=str) if isinstance(value, set) else value
        return [jsonable(v) for v in items]
    if isinstance(value, np.generic):
        return jsonable(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Path):
        return str(value)
    return value


# -- HTML ----------------------------------------------------------------------------------

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top;font-size:90%}
th{background:#f3f3f3}
.pass{color:#17702a;font-weight:bold}
.fail{color:#b00020;font-weight:bold}
code{font-size:90%}
"""


def render_html(report: ValidationReport) -> str:
    """A self-contained page: verdict, splits, failed checks first, then every check."""
    status = "PASSED" if report.passed else "FAILED"
    css = "pass" if report.passed else "fail"
    checks = sorted(report.checks, key=lambda c: c.passed)
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        "<title>leakpipe validation</title>", f"<style>{_STYLE}</style></head><body>",
        f"<h1>Validation <span class='{css}'>{status}</span></h1>",
        f"<p>{len(report.checks)} checks, {len(report.failures)} failed, "
        f"{report.n_files} files.</p>",
        "<h2>Splits</h2>", _splits_table(report.splits),
        "<h2>Checks</h2>", _checks_table(checks),
        "<h2>Params</h2>", f"<pre>{html.escape(_format_params(report.params))}</pre>",
        "</body></html>",
    ]
    return "\n".join(parts)


def _splits_table(splits: dict[str, dict[str, Any]]) -> str:
    head = "<tr><th>split</th><th>file</th><th>files</th><th>MiB</th><th>dtype</th>" \
           "<th>row shape</th><th>files per class</th><th>recordings per class</th>" \
           "<th>groups per class</th></tr>"
    rows = [
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in (
            name, info.get("path"), info.get("files"), info.get("mib"), info.get("dtype"),
            info.get("row_shape"), _counts(info.get("class_counts") or {}),
            _counts(info.get("recording_counts") or {}),
            _counts(info.get("group_counts") or {}))) + "</tr>"
        for name, info in splits.items()
    ]
    return f"<table>{head}{''.join(rows)}</table>"


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in counts.items())


def _checks_table(checks: list[CheckResult]) -> str:
    head = "<tr><th>result</th><th>split</th><th>check</th><th>what</th><th>observed</th>" \
           "<th>offending files</th><th>message</th></tr>"
    rows = []
    for c in checks:
        verdict = "<span class='pass'>pass</span>" if c.passed else \
            "<span class='fail'>FAIL</span>"
        offending = f"{c.n_offending}: {list(c.rows)}" if c.n_offending else ""
        cells = [verdict] + [html.escape(str(v)) for v in (
            c.split, c.check, c.description, _short(c.observed), offending, c.message)]
        rows.append("<tr>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>")
    return f"<table>{head}{''.join(rows)}</table>"


def _short(value: Any, limit: int = 160) -> str:
    text = "" if value is None else str(jsonable(value))
    return text if len(text) <= limit else text[:limit] + "..."


def _format_params(params: dict[str, Any]) -> str:
    return "\n".join(f"{k}: {v}" for k, v in params.items())

"""What one check found, and the catalogue of every check `validate` runs.

A ``CheckResult`` is the unit of the report: one check on one split (or one pair of splits),
passed or not, with the observed value and the offending files (row indices in the split).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

KIND_STRUCTURE = "structure"      # plain h5py / numpy checks of one file
KIND_EXPECTATION = "expectation"  # great-expectations on the per-file summary
KIND_CROSS = "cross_split"        # comparisons between splits

# Check id -> what it asserts. docs/validation.md lists the same table.
CHECKS: dict[str, str] = {
    "readable": "the split file exists and is a readable HDF5 file",
    "attributes_present": "required attributes are present",
    "schema_version": "schema_version is one this leakpipe reads",
    "class_names_valid": "class_names is a JSON list of distinct names holding the leak class",
    "feature_config_valid": "feature_config is a complete, valid feature configuration",
    "datasets_present": "required datasets are present",
    "mel_rank": "mel has rank 5 (files, n_long, n_short, n_mels, n_frames)",
    "mel_dtype": "mel is float16 or float32",
    "mel_shape": "mel rows have the shape the feature config gives",
    "lengths_match": "labels, recording_id and group hold one entry per mel row",
    "labels_dtype": "labels are integers",
    "not_empty": "the split holds at least one file",
    "finite_values": "every value is finite (finite_fraction == 1)",
    "value_min": "the smallest value of each file is within [value_min, value_max]",
    "value_max": "the largest value of each file is within [value_min, value_max]",
    "labels_known": "every label indexes class_names",
    "shape_consistent": "every file has the feature config's segment shape",
    "not_constant": "no file is constant (max - min > constant_tol): silent or dead sensor",
    "not_all_zero": "no file is all zeros (rows never written)",
    "classes_present": "every required class has at least min_files_per_class files",
    "recordings_present": "every required class has at least min_recordings_per_class distinct "
                          "recordings (recording_id)",
    "class_balance": "every class present has a share within [class_fraction_min, "
                     "class_fraction_max]",
    "class_names_match": "class_names are identical across splits",
    "feature_config_match": "the feature config is identical across splits",
    "mel_dtype_match": "mel has the same dtype in every split",
    "recordings_disjoint": "no recording id is in two splits",
    "groups_disjoint": "no group (site / sensor) is in two splits",
    "no_duplicate_content": "no file's content appears in two splits (fingerprint, then bytes)",
    "stats_present": "recording_stats (files x statistics), their names and each recording's "
                     "sample rate are all present and agree in shape, or all absent (a split "
                     "built before recording statistics)",
    "stats_plausible": "every present statistic is finite; levels lie within [floor_db, 20] dB, "
                       "spreads and standard deviations are >= 0",
    "stats_missing_above_nyquist": "a band's statistics are missing (NaN) exactly when the "
                                   "band lies above the recording's Nyquist frequency",
    "stats_per_recording": "every clip of one recording carries the same statistics",
}


@dataclass(frozen=True)
class CheckResult:
    """One check on one split: ``rows`` are the offending files' row indices (first few)."""

    check: str
    split: str
    passed: bool
    kind: str
    observed: Any = None
    n_offending: int = 0
    rows: tuple[int, ...] = ()
    examples: tuple[dict[str, Any], ...] = ()
    message: str = ""
    expectation: str | None = None
    fatal: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def description(self) -> str:
        return CHECKS.get(self.check, self.check)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "check": self.check, "split": self.split, "passed": self.passed, "kind": self.kind,
            "description": self.description, "observed": self.observed,
            "n_offending": self.n_offending, "offending_rows": list(self.rows),
            "examples": list(self.examples), "message": self.message,
        }
        if self.expectation:
            out["expectation"] = self.expectation
        out.update(self.extra)
        return out

    def summary(self) -> str:
        """``val: finite_values: 2 of 40 files hold NaN or inf values (rows [3, 7])``."""
        text = f"{self.split}: {self.check}: {self.message or self.description}"
        if self.rows:
            rows = ", ".join(str(r) for r in self.rows)
            more = ", ..." if len(self.rows) < self.n_offending else ""
            text += f" (rows [{rows}{more}])"
        return text


def passed(check: str, split: str, kind: str, observed: Any = None, **extra: Any) -> CheckResult:
    return CheckResult(check, split, True, kind, observed=observed, extra=extra)


def failed(check: str, split: str, kind: str, message: str, *, observed: Any = None,
           rows: Sequence[int] = (), n_offending: int | None = None,
           examples: Sequence[dict[str, Any]] = (), fatal: bool = False,
           limit: int | None = None) -> CheckResult:
    """A failed check; ``rows`` are all offending rows, of which the first ``limit`` are kept."""
    rows = [int(r) for r in rows]
    return CheckResult(check, split, False, kind, observed=observed,
                       n_offending=len(rows) if n_offending is None else n_offending,
                       rows=tuple(rows[:limit]), examples=tuple(examples)[:limit],
                       message=message, fatal=fatal)

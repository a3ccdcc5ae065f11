"""The validation report and its params: what DVC depends on, what a person reads."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from leakpipe.config import ValidateConfig, from_mapping, load_section
from leakpipe.constants import SPLITS
from leakpipe.errors import ConfigError
from leakpipe.files import file_sha256
from leakpipe.validate.results import KIND_STRUCTURE, failed, passed
from leakpipe.validate.split_validation import validate_splits
from leakpipe.validate.stage import failed_path
from leakpipe.validate.validation_report import (
    MAX_FAILURES_IN_ERROR,
    ValidationReport,
    jsonable,
    render_html,
)
from tests.helpers_h5 import write_splits

PARAMS = Path(__file__).resolve().parents[1] / "params.yaml"


@pytest.fixture(scope="module")
def cfg() -> ValidateConfig:
    return load_section(PARAMS, "validate")


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_splits(tmp_path_factory.mktemp("splits"))


def test_a_new_bound_changes_the_report_but_not_the_stamp(paths: dict[str, Path],
                                                          cfg: ValidateConfig) -> None:
    first = validate_splits(paths, cfg, progress=False)
    second = validate_splits(paths, dataclasses.replace(cfg, value_max=90.0), progress=False)

    assert first.passed and second.passed
    assert first.to_dict() != second.to_dict()
    sha256 = {split: file_sha256(path) for split, path in paths.items()}
    assert first.stamp(sha256) == second.stamp(sha256)  # `preload` depends on the stamp only


def test_report_is_deterministic(paths: dict[str, Path], cfg: ValidateConfig) -> None:
    assert validate_splits(paths, cfg, progress=False).to_dict() == \
        validate_splits(paths, cfg, progress=False).to_dict()


def test_a_required_class_missing_from_class_names_fails(paths: dict[str, Path],
                                                         cfg: ValidateConfig) -> None:
    strict = dataclasses.replace(cfg, required_classes=("LEAK", "HISS"))

    report = validate_splits(paths, strict, progress=False)

    missing = [c for c in report.failures if c.check == "classes_present"]
    assert {c.split for c in missing} == set(SPLITS)
    assert "class HISS has 0 file(s)" in missing[0].message


def test_error_line_is_one_line_and_capped() -> None:
    checks = [failed("finite_values", "val", KIND_STRUCTURE, f"problem {i}", rows=[i])
              for i in range(MAX_FAILURES_IN_ERROR + 2)]
    report = ValidationReport(checks=[passed("readable", "val", KIND_STRUCTURE), *checks],
                              splits={}, params={})

    line = report.error_line(Path("reports/validation.failed.json"))

    assert "\n" not in line and "(+2 more)" in line
    assert line.startswith(f"validation failed ({MAX_FAILURES_IN_ERROR + 2} of ")
    assert "val: finite_values: problem 0 (rows [0])" in line


def test_offending_rows_are_capped_but_counted() -> None:
    check = failed("finite_values", "val", KIND_STRUCTURE, "bad", rows=range(50), limit=3)

    assert check.rows == (0, 1, 2) and check.n_offending == 50
    assert check.summary().endswith("(rows [0, 1, 2, ...])")


def test_failed_report_sits_beside_the_report() -> None:
    assert failed_path(Path("reports/validation.json")) == \
        Path("reports/validation.failed.json")


def test_jsonable_turns_numpy_and_nan_into_json() -> None:
    assert jsonable({"a": np.float32(1.5), "b": float("nan"), "c": (np.int64(2),),
                     "d": {3, 1}}) == {"a": 1.5, "b": None, "c": [2], "d": [1, 3]}


def test_html_escapes_messages() -> None:
    check = failed("labels_known", "val", KIND_STRUCTURE, "<script>x</script>")
    page = render_html(ValidationReport(checks=[check], splits={}, params={}))

    assert "<script>x" not in page and "&lt;script&gt;" in page and "FAILED" in page


@pytest.mark.parametrize(("key", "value", "problem"), [
    ("value_min", 200.0, "must be below value_max"),
    ("class_fraction_min", 0.95, "must not exceed class_fraction_max"),
    ("required_classes", ["LEAK", "LEAK"], "must not repeat"),
    ("min_files_per_class", 0, "must be >= 1"),
    ("min_recordings_per_class", 0, "must be >= 1"),
])
def test_bad_validate_params_name_the_key(key: str, value: object, problem: str,
                                          cfg: ValidateConfig) -> None:
    raw = {**dataclasses.asdict(cfg), key: value}

    with pytest.raises(ConfigError, match=rf"validate\.{key}: .*{problem}"):
        from_mapping(ValidateConfig, raw, "validate", "params.yaml")

"""`leakpipe tune apply`: best values into params.yaml with every comment and line kept."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from leakpipe.cli import main
from leakpipe.config import ConfigError, load_section
from leakpipe.errors import DataError
from leakpipe.tune.apply import apply_params, exp_run_line, read_best, yaml_scalar
from leakpipe.tune.study_results import StudySummary, write_best_params
from tests.conftest import PARAMS


def _best_values() -> dict[str, dict]:
    """Values that differ from the repo's params, whatever its defaults are today."""
    train = load_section(PARAMS, "train")
    best = {"model": {"dropout": 0.2345},
            "train": {"learning_rate": 3.0e-5, "batch_size": train.batch_size * 2,
                      "grad_clip": not train.grad_clip,
                      "loss": "focal" if train.loss == "ce" else "ce", "focal_gamma": 2.75}}
    assert load_section(PARAMS, "model").dropout != 0.2345
    assert train.learning_rate != 3.0e-5 and train.focal_gamma != 2.75
    return best


BEST = _best_values()
CHANGED = {section: list(keys) for section, keys in BEST.items()}


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """cli.main() points the root logger at this test's captured stderr; undo that after."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def params(tmp_path: Path) -> Path:
    return Path(shutil.copy(PARAMS, tmp_path / "params.yaml"))


def _best_file(tmp_path: Path, values: dict) -> Path:
    summary = StudySummary(study_name="s-123", objective="val/clip_f1", direction="maximize",
                           counts={"COMPLETE": 3}, retried=0, best_trial=2, best_value=0.9,
                           best_values=values)
    path = tmp_path / "tuning" / "best_params.yaml"
    write_best_params(path, summary, trial_epochs=2)
    return path


def _line_of(lines: list[str], section: str, key: str) -> int:
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{section}:"))
    return next(i for i in range(start, len(lines)) if lines[i].startswith(f"  {key}:"))


def test_apply_round_trips_params_with_comments_intact(params: Path, tmp_path: Path) -> None:
    before = params.read_text().splitlines()
    changes = apply_params(params, read_best(_best_file(tmp_path, BEST)))
    after = params.read_text().splitlines()
    assert len(after) == len(before)
    touched = {_line_of(before, s, k) for s, keys in CHANGED.items() for k in keys}
    for i, (old, new) in enumerate(zip(before, after, strict=True)):
        if i not in touched:
            assert new == old                              # every other line byte-identical
        else:
            assert new.split("#", 1)[1] == old.split("#", 1)[1]   # its comment kept
            assert new.index("#") == old.index("#")               # and aligned
    assert {c[0] for c in changes} == {f"{s}.{k}" for s, keys in CHANGED.items() for k in keys}
    train = load_section(params, "train")                  # PyYAML reads the values back
    assert train.learning_rate == 3.0e-5 and isinstance(train.learning_rate, float)
    assert (train.batch_size, train.grad_clip, train.loss) == tuple(
        BEST["train"][k] for k in ("batch_size", "grad_clip", "loss"))
    assert load_section(params, "model").dropout == 0.2345


def test_dry_run_and_a_second_apply_change_nothing(params: Path, tmp_path: Path) -> None:
    original = params.read_text()
    best = read_best(_best_file(tmp_path, BEST))
    assert apply_params(params, best, dry_run=True)
    assert params.read_text() == original
    apply_params(params, best)
    applied = params.read_text()
    assert apply_params(params, best) == []
    assert params.read_text() == applied


@pytest.mark.parametrize(("values", "match"), [
    ({"train": {"no_such_key": 1}}, r"train.no_such_key: missing key"),
    ({"train": {"learning_rate": 0.0}}, r"train.learning_rate: must be > 0.*nothing was changed"),
    ({"train": {"eta_min": 1.0}}, r"train.eta_min: must not exceed learning_rate"),
])
def test_invalid_best_values_leave_params_untouched(params, tmp_path, values, match) -> None:
    original = params.read_text()
    with pytest.raises(ConfigError, match=match):
        apply_params(params, read_best(_best_file(tmp_path, values)))
    assert params.read_text() == original
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize(("text", "match"), [
    (None, "no best params"), ("params: [1, 2]\n", "expected 'params:"),
    ("params: {evaluate: {seed: 1}}\n", "params.evaluate: not a section tune may set"),
    ("params: {train: [\n", "not valid YAML")])
def test_unusable_best_files_are_data_errors(tmp_path: Path, text, match) -> None:
    path = tmp_path / "best.yaml"
    if text is not None:
        path.write_text(text)
    with pytest.raises(DataError, match=match):
        read_best(path)


@pytest.mark.parametrize(("value", "text"), [
    (1.0e-5, "1.0e-05"), (0.002, "0.002"), (2.5e-10, "2.5e-10"), (True, "true"), (512, "512"),
    ("focal", "focal")])
def test_yaml_scalars_read_back_by_pyyaml(value, text: str) -> None:
    assert yaml_scalar(value) == text
    assert yaml.safe_load(text) == value


def test_exp_run_line_and_the_header_agree(tmp_path: Path) -> None:
    line = exp_run_line(BEST)
    assert line.startswith("dvc exp run -S model.dropout=0.2345 -S train.learning_rate=3.0e-05")
    assert f"-S train.loss={BEST['train']['loss']}" in line
    assert f"#   {line}" in _best_file(tmp_path, BEST).read_text()


def test_cli_apply_prints_changes_and_the_dvc_line(params, tmp_path, capsys) -> None:
    best = _best_file(tmp_path, BEST)
    code = main(["tune", "apply", "--params", str(params), "--best", str(best)])
    out = capsys.readouterr().out
    assert code == 0
    old_lr = yaml_scalar(load_section(PARAMS, "train").learning_rate)
    assert f"changed train.learning_rate: {old_lr} -> 3.0e-05" in out
    assert f"equivalent experiment: {exp_run_line(BEST)}" in out
    assert load_section(params, "train").loss == BEST["train"]["loss"]
    assert main(["tune", "apply", "--params", str(params), "--best", str(tmp_path / "x")]) == 3

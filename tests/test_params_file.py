"""`leakpipe check` refuses what DVC would refuse or a stage would trip on (issue #23: 3-5).

A value `check` lets through reaches a stage only after DVC has deleted that stage's outputs,
so every case here goes through the real `leakpipe check` on a tmp params file: a non-finite
float, a duplicated key or section, a file that is not UTF-8, an unknown section. The DVC case
builds a throwaway DVC project with the check stage's real `params` entry and asks DVC itself
whether an unknown section makes the stage stale.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import pytest
import yaml

from leakpipe.cli import main
from leakpipe.config import ConfigError, from_mapping, num
from tests.conftest import PARAMS, REPO


def _check(params: Path, capsys: pytest.CaptureFixture[str],
           stamp_dir: Path | None = None) -> tuple[int, list[str]]:
    """Run `leakpipe check` in-process; (exit code, stderr lines). A failure writes no stamp."""
    stamp = (stamp_dir or params.parent) / "params_checked.json"
    code = main(["check", "--params", str(params), "--stamp", str(stamp)])
    lines = capsys.readouterr().err.strip().splitlines()
    if code != 0:
        assert not stamp.exists()
    return code, lines


def _dumped(tmp_path: Path, mutate) -> Path:
    raw = yaml.safe_load(PARAMS.read_text())
    mutate(raw)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_repo_params_pass_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the finite rule below must not refuse any value the repo ships
    assert _check(PARAMS, capsys, stamp_dir=tmp_path)[0] == 0
    assert (tmp_path / "params_checked.json").exists()


# -- 3: every float is finite ------------------------------------------------------------------

INF, NAN = math.inf, math.nan


@pytest.mark.parametrize(("mutate", "key", "shown"), [
    (lambda r: r["train"].update(learning_rate=INF), "train.learning_rate", "inf"),
    (lambda r: r["validate"].update(value_min=-INF), "validate.value_min", "-inf"),
    (lambda r: r["validate"].update(value_min=NAN), "validate.value_min", "nan"),
    (lambda r: r["validate"].update(value_max=INF), "validate.value_max", "inf"),
    (lambda r: r["train"]["augment"].update(mix_snr_min_db=NAN),
     "train.augment.mix_snr_min_db", "nan"),
    (lambda r: r["train"]["augment"].update(mix_snr_max_db=INF),
     "train.augment.mix_snr_max_db", "inf"),
    (lambda r: r["baselines"]["svm"].update(C=[0.1, INF]), "baselines.svm.C[1]", "inf"),
    (lambda r: r["baselines"]["xgboost"].update(learning_rate=[NAN]),
     "baselines.xgboost.learning_rate[0]", "nan"),
    (lambda r: r["tune"]["space"]["train"]["learning_rate"].update(high=INF),
     "tune.space.train.learning_rate.high", "inf"),
    (lambda r: r["tune"]["space"]["train"]["batch_size"].update(choices=[256, NAN]),
     "tune.space.train.batch_size.choices[1]", "nan"),
])
def test_non_finite_floats_stop_check(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      mutate, key: str, shown: str) -> None:
    path = _dumped(tmp_path, mutate)
    assert _check(path, capsys) == (2, [f"error: {path}: {key}: must be a finite number, "
                                        f"got {shown}"])


def test_a_key_may_document_non_finite_values() -> None:
    @dataclasses.dataclass(frozen=True)
    class Limits:
        ceiling: float = num(finite=False)
        floor: float = num(ge=0)

    assert from_mapping(Limits, {"ceiling": INF, "floor": 0.0}, "x").ceiling == INF
    with pytest.raises(ConfigError, match=r"^p: x\.floor: must be a finite number, got inf$"):
        from_mapping(Limits, {"ceiling": 1.0, "floor": INF}, "x", "p")


# -- 4: duplicate keys, encoding ---------------------------------------------------------------

def _line_of(lines: list[str], start: str, after: int = 0) -> int:
    """0-based index of the first line from `after` on that starts with `start`."""
    return next(i for i in range(after, len(lines)) if lines[i].startswith(start))


def test_duplicated_key_names_key_and_lines(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    lines = PARAMS.read_text().splitlines()
    first = _line_of(lines, "  epochs:", _line_of(lines, "train:"))
    lines.insert(first + 2, "  epochs: 99              # again: DVC refuses the file")
    path = tmp_path / "params.yaml"
    path.write_text("\n".join(lines) + "\n")
    assert _check(path, capsys) == (2, [
        f"error: {path}: train.epochs: duplicate key on line {first + 3} "
        f"(first on line {first + 1})"])


def test_duplicated_section_is_not_a_missing_key(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    text = PARAMS.read_text()
    first = _line_of(text.splitlines(), "train:") + 1
    path = tmp_path / "params.yaml"
    path.write_text(text + "train:\n  epochs: 3\n")
    last = len(text.splitlines()) + 1
    assert _check(path, capsys) == (2, [
        f"error: {path}: train: duplicate key on line {last} (first on line {first})"])


def test_non_utf8_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = PARAMS.read_bytes()
    path = tmp_path / "params.yaml"
    path.write_bytes(text.replace(b"# peak AdamW", b"# peak \xe9 AdamW", 1))
    line = text[:text.index(b"# peak AdamW")].count(b"\n") + 1
    code, err = _check(path, capsys)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: {path}: line {line}: not UTF-8 text"), err


# -- 5: the whole file, unknown sections -------------------------------------------------------

def test_unknown_section_stops_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "params.yaml"
    path.write_text(PARAMS.read_text() + "trian:\n  epochs: 3\n")
    code, err = _check(path, capsys)
    assert code == 2 and len(err) == 1 and err[0].startswith(
        f"error: {path}: trian: unknown section"), err


def test_check_stage_depends_on_the_whole_params_file(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # DVC re-runs `check` only when a param it tracks changes. Tracking named sections let a
    # new, misspelt one through: `dvc repro check` exited 0 and a later stage failed on it,
    # after DVC had deleted that stage's outputs. `- params.yaml:` with no keys tracks it all.
    from dvc.repo import Repo

    stage = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]["check"]
    assert stage["params"] == [{"params.yaml": None}]
    (tmp_path / "params.yaml").write_text(PARAMS.read_text())
    write_stamp = ("import pathlib; p = pathlib.Path('reports/params_checked.json'); "
                   "p.parent.mkdir(exist_ok=True); p.write_text('{}')")
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"check": {
        "cmd": f'"{sys.executable}" -c "{write_stamp}"',
        "params": stage["params"],
        "outs": [out for out in stage["outs"] if "reports/params_checked.json" in out]}}}))
    monkeypatch.chdir(tmp_path)  # DVC resolves stage names against the working directory
    repo = Repo.init(".", no_scm=True)
    try:
        repo.reproduce("check")
        assert repo.status(["check"]) == {}
        with (tmp_path / "params.yaml").open("a") as out:
            out.write("trian:\n  epochs: 3\n")
        assert repo.status(["check"]) == {
            "check": [{"changed deps": {"params.yaml": {"trian": "new"}}}]}
    finally:
        repo.close()

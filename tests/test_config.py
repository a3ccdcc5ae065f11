"""Strict params loading: every bad key or value stops with one line naming file and key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from leakpipe.config import SECTIONS, ConfigError, load_section, read_params
from tests.conftest import PARAMS, REPO


def _write(tmp_path: Path, mutate) -> Path:
    raw = yaml.safe_load(PARAMS.read_text())
    mutate(raw)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_repo_params_load_every_section() -> None:
    raw = read_params(PARAMS)
    for name in raw:
        cfg = load_section(PARAMS, name)
        assert type(cfg) is SECTIONS[name]


def test_repo_params_comment_every_key() -> None:
    for number, line in enumerate(PARAMS.read_text().splitlines(), start=1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#") and ":" in stripped:
            assert "#" in stripped, f"params.yaml line {number} has no comment: {line!r}"


def test_defaults_follow_the_paper(build_cfg) -> None:
    # 3 s at 8192 Hz, long 0.25 s / 50 %, short 512 / 50 % -> 23 x 7 segments
    assert build_cfg.features.segment_shape == (23, 7, 64, 1)


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda r: r["build"].update(bogus=1), "params.yaml: build.bogus: unknown key"),
    (lambda r: r["build"].pop("n_mels"), "params.yaml: build.n_mels: missing key"),
    (lambda r: r["build"].update(n_mels="many"), "build.n_mels: expected an integer, got 'many'"),
    (lambda r: r["build"].update(n_mels=2.5), "build.n_mels: expected an integer"),
    (lambda r: r["build"].update(n_mels=0), "build.n_mels: must be >= 1, got 0"),
    (lambda r: r["build"].update(on_error="ignore"), "build.on_error: expected one of"),
    (lambda r: r["build"].update(store_waveform="yes"), "build.store_waveform: expected true"),
    (lambda r: r["build"]["split"].update(train=0.9), "build.split.train: train + val + test"),
    (lambda r: r["build"]["split"].update(extra=1), "build.split.extra: unknown key"),
    (lambda r: r["build"].update(fmax=9000.0), "build.fmax: must not exceed the Nyquist"),
    (lambda r: r["build"].update(n_fft=1024), "build.n_fft: must not exceed short_window"),
    (lambda r: r["build"].update(classes="LEAK"), "build.classes: expected a list"),
    (lambda r: r["build"].update(classes=["NORMAL"]), "build.classes: must contain LEAK"),
    (lambda r: r["synth"].update(classes=["LEAK", "RAIN"]), "synth.classes: unknown class"),
    (lambda r: r["build"].update(clips_per_recording="every"),
     "build.clips_per_recording: expected an integer or one of ['all'], got 'every'"),
    (lambda r: r["build"].update(clips_per_recording=0),
     "build.clips_per_recording: must be >= 1, got 0"),
    (lambda r: r["build"].update(group_by="site"), "build.group_by: expected one of"),
    (lambda r: r["build"].update(duplicates="keep"), "build.duplicates: expected one of"),
    (lambda r: r["build"].pop("duplicates"), "params.yaml: build.duplicates: missing key"),
    (lambda r: r["build"]["quality"].update(reject=["hum"]), "build.quality.reject[0]: expected"),
    (lambda r: r["build"]["quality"].update(clip_fraction=2), "build.quality.clip_fraction: must"),
    (lambda r: r.update(trian={}), "params.yaml: trian: unknown section"),
])
def test_bad_params_name_file_and_key(tmp_path: Path, mutate, message: str) -> None:
    path = _write(tmp_path, mutate)
    section = "synth" if "synth" in message else "build"
    with pytest.raises(ConfigError) as info:
        load_section(path, section)
    text = str(info.value)
    assert message in text
    assert str(path) in text and "\n" not in text


@pytest.mark.parametrize(("value", "expected"), [(1, 1), (7, 7), ("all", "all")])
def test_clips_per_recording_takes_a_count_or_all(tmp_path: Path, value: object,
                                                 expected: object) -> None:
    path = _write(tmp_path, lambda r: r["build"].update(clips_per_recording=value))
    assert load_section(path, "build").clips_per_recording == expected


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_section(tmp_path / "nope.yaml", "build")
    bad = tmp_path / "bad.yaml"
    bad.write_text("build: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_section(bad, "build")


def test_configs_are_frozen(build_cfg) -> None:
    with pytest.raises(AttributeError):
        build_cfg.n_mels = 3


def test_cli_exits_2_with_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path, lambda r: r["build"].update(n_mels=-1))
    out = subprocess.run([sys.executable, "-m", "leakpipe.cli", "build", "--params", str(path),
                          "--out-dir", str(tmp_path / "out")], capture_output=True, text=True,
                         cwd=REPO, check=False)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"error: {path}: build.n_mels: must be >= 1, got -1"]
    assert not (tmp_path / "out").exists()

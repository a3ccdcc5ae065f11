"""`leakpipe predict`'s integrity (issue #35): no dead logger called NOLEAK, no output over an
input, no two detectors in one CSV, failed rows tried again, and one line with a non-zero exit
for every input it cannot take.

Real files throughout: generated WAV / MP3 recordings, random-weight detector files written as
evaluate writes them (tests/helpers_detector.py), the command run through ``leakpipe.cli``.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from leakpipe.audio.quality import DEAD_ONLY
from leakpipe.cli import main
from leakpipe.config import QualityConfig, load_section
from leakpipe.constants import BINARY_CLASSES
from leakpipe.detector import DETECTOR_VERSION, load_detector, save_detector
from leakpipe.model import create_model
from leakpipe.predict.rules import scoring_rules
from leakpipe.predict.target import stamp_path
from tests.conftest import PARAMS
from tests.helpers_detector import (
    SMALL_MODEL,
    one_torch_thread,
    restore_logging,
    save_small_detector,
)
from tests.helpers_h5 import SMALL_FEATURES
from tests.helpers_predict import read_predictions

RATE = SMALL_FEATURES.sample_rate          # 4096 Hz, 1 s clips
SECONDS = 1.5
MP3_RATE = 8000                            # one of the rates MPEG audio allows
BUILD_QUALITY = QualityConfig(clip_fraction=0.001, dc_offset_max=0.5, reject=("dead",))

_keep_logging = pytest.fixture(autouse=True)(restore_logging)
_one_thread = pytest.fixture(autouse=True)(one_torch_thread)


def _detector(path: Path, seed: int = 0, quality: QualityConfig | None = BUILD_QUALITY) -> Path:
    """A random-weight detector file holding ``quality`` (None: a file older than version 7)."""
    torch.manual_seed(seed)
    save_small_detector(path, create_model(SMALL_MODEL, len(BINARY_CLASSES)).eval(), "none")
    save_detector(path, dataclasses.replace(load_detector(path), quality=quality))
    return path


@pytest.fixture
def detector_path(tmp_path: Path) -> Path:
    return _detector(tmp_path / "detector.pt")


def _noise(path: Path, seed: int = 0, seconds: float = SECONDS, channels: int = 1) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    signal = 0.1 * np.random.default_rng(seed).standard_normal((int(seconds * RATE), channels))
    sf.write(path, signal.astype(np.float32), RATE, subtype="PCM_16")
    return path


def _predict(*args: str | Path) -> int:
    return main(["predict", *map(str, args), "--no-progress", "--device", "cpu"])


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The command's one `error:` line on stderr (no traceback, no second line)."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    [line] = [line for line in err.splitlines() if line.strip()]
    assert line.startswith("error: ")
    return line


# -- case 2: a dead (constant) recording is never NOLEAK -----------------------------------------


def test_dead_and_constant_recordings_are_unusable_with_their_reason(
        tmp_path: Path, detector_path: Path) -> None:
    """build rejects a dead channel; predict gives it an ``unusable`` row: no decision, no
    probability, the reason in notes. The good recording beside it is scored."""
    rec = tmp_path / "rec"
    n = int(SECONDS * RATE)
    sf.write(_dir(rec) / "zeros.wav", np.zeros(n, np.float32), RATE, subtype="PCM_16")
    sf.write(rec / "constant.wav", np.full(n, 0.25, np.float32), RATE, subtype="FLOAT")
    stereo = np.stack([0.1 * np.random.default_rng(1).standard_normal(n), np.zeros(n)], axis=1)
    sf.write(rec / "one_dead_channel.wav", stereo.astype(np.float32), RATE, subtype="PCM_16")
    _noise(rec / "good.wav")
    out = tmp_path / "out.csv"
    assert _predict(rec, "--model", detector_path, "--out", out) == 0
    rows = read_predictions(out)
    assert rows["good.wav"]["status"] == "ok"
    says = {"zeros.wav": "channel 0 is dead (constant, all zero)",
            "constant.wav": "channel 0 is dead (constant)",
            "one_dead_channel.wav": "channel 1 is dead (constant, all zero)"}
    for name, reason in says.items():
        row = rows[name]
        assert (row["status"], row["decision"], row["leak_prob"]) == ("unusable", "", "")
        assert row["notes"].startswith(f"{rec / name}: {reason}")
        assert "no leak decision" in row["notes"]


def test_dead_is_refused_even_when_build_keeps_it(tmp_path: Path) -> None:
    """``build.quality.reject: []`` keeps dead recordings in a build; predict still never
    decides on one."""
    lenient = _detector(tmp_path / "d.pt", quality=dataclasses.replace(BUILD_QUALITY,
                                                                        reject=()))
    sf.write(tmp_path / "zeros.wav", np.zeros(RATE, np.float32), RATE)
    out = tmp_path / "out.csv"
    assert _predict(tmp_path / "zeros.wav", "--model", lenient, "--out", out) == 0
    assert read_predictions(out)["zeros.wav"]["status"] == "unusable"


def _clipped(path: Path) -> Path:
    pcm = np.round(0.2 * np.random.default_rng(5).standard_normal(int(SECONDS * RATE))
                   * 32767).astype(np.int16)
    pcm[::20], pcm[1::20] = 32767, -32768       # 10 % of the samples at full scale
    sf.write(path, pcm, RATE, subtype="PCM_16")
    return path


def test_a_check_outside_reject_flags_the_row_and_one_inside_refuses_it(
        tmp_path: Path, detector_path: Path) -> None:
    """The detector's `build.quality`: clipping only flags (notes), unless in ``reject``."""
    wav = _clipped(tmp_path / "clipped.wav")
    out = tmp_path / "out.csv"
    assert _predict(wav, "--model", detector_path, "--out", out) == 0
    row = read_predictions(out)["clipped.wav"]
    assert row["status"] == "ok" and row["decision"] in ("LEAK", "NOLEAK")
    assert "flagged: channel 0 is clipped: 10.03% of its samples at PCM_16 full scale" in \
        row["notes"]
    strict = _detector(tmp_path / "strict.pt",
                       quality=dataclasses.replace(BUILD_QUALITY, reject=("dead", "clipped")))
    assert _predict(wav, "--model", strict, "--out", out, "--force") == 0
    row = read_predictions(out)["clipped.wav"]
    assert (row["status"], row["decision"]) == ("unusable", "")
    assert "channel 0 is clipped" in row["notes"]


def test_the_detector_holds_build_quality_and_older_files_take_params(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Version 7 detectors carry `build.quality` (evaluate stores it); an older file takes it
    from params, and without a params file only the dead check applies, with a WARNING."""
    strict = dataclasses.replace(BUILD_QUALITY, reject=("dead", "clipped"))
    new = load_detector(_detector(tmp_path / "new.pt", quality=strict))
    assert torch.load(tmp_path / "new.pt", weights_only=True)["version"] == DETECTOR_VERSION == 7
    assert new.quality == strict and scoring_rules(new, PARAMS).quality == strict
    old = load_detector(_detector(tmp_path / "old.pt", quality=None))
    assert old.quality is None
    assert scoring_rules(old, PARAMS).quality == load_section(PARAMS, "build").quality
    with caplog.at_level(logging.WARNING, logger="leakpipe.predict.rules"):
        assert scoring_rules(old, tmp_path / "absent.yaml").quality == DEAD_ONLY
    assert "only dead recordings are refused" in caplog.text


# -- case 3: --resume never mixes detectors and tries failed rows again --------------------------


def test_resume_refuses_a_csv_of_another_detector(tmp_path: Path, detector_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    first = [_noise(tmp_path / "a.wav"), _noise(tmp_path / "b.wav", seed=1)]
    out = tmp_path / "out.csv"
    assert _predict(*first, "--model", detector_path, "--out", out) == 0
    before = out.read_text()
    record = json.loads(stamp_path(out).read_text())
    assert record["model"] == str(detector_path) and len(record["sha256"]) == 64
    other = _detector(tmp_path / "other.pt", seed=1)
    capsys.readouterr()
    assert _predict(*first, _noise(tmp_path / "c.wav", seed=2), "--model", other, "--out", out,
                    "--resume") == 3
    line = _one_error_line(capsys)
    assert f"holds the rows of detector {detector_path} (sha256 {record['sha256'][:12]})" in line
    assert f"not of {other} (sha256 " in line
    assert out.read_text() == before
    assert _predict(*first, "--model", detector_path, "--out", out, "--resume") == 0  # same one


def test_resume_tries_failed_rows_again(tmp_path: Path, detector_path: Path) -> None:
    """A row that failed (unreadable, or dead) may name a file fixed since: --resume scores it
    again; the scored rows are kept as they were."""
    rec = tmp_path / "rec"
    _noise(_dir(rec) / "good.wav")
    (rec / "broken.wav").write_bytes(b"RIFF\x10\x00\x00\x00WAVEjunk")
    sf.write(rec / "dead.wav", np.zeros(RATE, np.float32), RATE)
    out = tmp_path / "out.csv"
    assert _predict(rec, "--model", detector_path, "--out", out) == 0
    kept = read_predictions(out)
    assert [kept[n]["status"] for n in ("good.wav", "broken.wav", "dead.wav")] == [
        "ok", "error", "unusable"]
    _noise(rec / "broken.wav", seed=3)             # the recorder's file, copied again
    _noise(rec / "dead.wav", seed=4)               # the sensor reconnected
    assert _predict(rec, "--model", detector_path, "--out", out, "--resume") == 0
    rows = read_predictions(out)
    assert {name: row["status"] for name, row in rows.items()} == {
        "good.wav": "ok", "broken.wav": "ok", "dead.wav": "ok"}
    assert rows["good.wav"] == kept["good.wav"]
    assert len(out.read_text().splitlines()) == 1 + 3                       # each once


# -- case 4: --out never replaces a recording, nor an existing file unasked ----------------------


@pytest.mark.parametrize("spelling", ["same", "dotted", "in_folder"])
def test_out_may_never_be_a_recording(tmp_path: Path, detector_path: Path, spelling: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    wav = _noise(tmp_path / "rec" / "rec.wav")
    original = wav.read_bytes()
    named, out = {"same": (wav, wav),
                  "dotted": (wav, tmp_path / "rec" / ".." / "rec" / "rec.wav"),
                  "in_folder": (wav.parent, wav)}[spelling]
    capsys.readouterr()
    assert _predict(named, "--model", detector_path, "--out", out, "--force") == 3
    assert "is one of the recordings to score" in _one_error_line(capsys)
    assert wav.read_bytes() == original


def test_an_existing_out_needs_resume_or_force(tmp_path: Path, detector_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _noise(tmp_path / "a.wav"), _noise(tmp_path / "b.wav", seed=1)
    out = tmp_path / "out.csv"
    assert _predict(a, b, "--model", detector_path, "--out", out) == 0
    before = out.read_text()
    capsys.readouterr()
    assert _predict(a, "--model", detector_path, "--out", out) == 3
    assert "exists; --resume continues it, --force replaces it" in _one_error_line(capsys)
    assert out.read_text() == before
    assert _predict(a, "--model", detector_path, "--out", out, "--force") == 0
    assert list(read_predictions(out)) == ["a.wav"]


# -- case 5: one line for a file that is no detector, an --out / --explain that cannot be written


def _not_a_detector(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"model.{kind}"
    if kind == "wav":
        _noise(path)
    elif kind == "json":
        path.write_text(json.dumps({"threshold": 0.5}))
    elif kind == "pickle":
        path.write_bytes(pickle.dumps(collections.Counter(a=1), protocol=2))
    else:                                       # a text file
        path.write_text("hello\n")
    return path


@pytest.mark.parametrize("kind", ["wav", "json", "pickle", "txt"])
def test_a_model_that_is_no_detector_file_is_one_line(tmp_path: Path, kind: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    model = _not_a_detector(tmp_path, kind)
    out = tmp_path / "out.csv"
    assert _predict(_noise(tmp_path / "a.wav"), "--model", model, "--out", out) == 3
    assert _one_error_line(capsys).startswith(
        f"error: {model} is not a leakpipe detector file (")
    assert not out.exists()


@pytest.mark.parametrize("damage", ["KeyError", "RuntimeError"])
def test_a_damaged_detector_file_is_one_line(tmp_path: Path, detector_path: Path, damage: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A key missing, or weights that do not fit the stored model config (torch's error runs
    over many lines): one line naming the file either way."""
    raw = torch.load(detector_path, weights_only=True)
    if damage == "KeyError":
        del raw["model_config"]
    else:
        raw["model_config"]["hidden"] = 16
    torch.save(raw, tmp_path / "damaged.pt")
    out = tmp_path / "out.csv"
    assert _predict(_noise(tmp_path / "a.wav"), "--model", tmp_path / "damaged.pt", "--out",
                    out) == 3
    assert f"damaged.pt is not a leakpipe detector file (damaged or incomplete: {damage}" in \
        _one_error_line(capsys)


@pytest.mark.parametrize("option", ["--out", "--explain"])
def test_an_out_or_explain_that_cannot_be_written_is_one_line_before_scoring(
        tmp_path: Path, detector_path: Path, option: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    wav = _noise(tmp_path / "a.wav")
    a_file = tmp_path / "notes.txt"
    a_file.write_text("a file, not a folder")
    out = tmp_path / "out.csv"
    cases = {"--out": [(a_file / "out.csv", "notes.txt is not a folder"),
                       (tmp_path, "is a folder (--out names the CSV file to write)")],
             "--explain": [(a_file, "exists and is not a folder"),
                           (a_file / "figures", "notes.txt is not a folder")]}[option]
    for target, says in cases:
        args = ["--out", target] if option == "--out" else ["--out", out, option, target]
        capsys.readouterr()
        assert _predict(wav, "--model", detector_path, *args) == 3
        line = _one_error_line(capsys)
        assert line.startswith(f"error: {option} {target}") and says in line, line
        assert not out.exists()                 # refused before anything was scored


# -- case 7: nothing to score is no success ------------------------------------------------------


def test_a_missing_path_or_an_empty_selection_exits_non_zero(
        tmp_path: Path, detector_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.csv"
    typo = tmp_path / "typo" / "path.wav"
    assert _predict(_noise(tmp_path / "a.wav"), typo, "--model", detector_path, "--out",
                    out) == 3
    assert _one_error_line(capsys) == f"error: {typo}: no such file or folder (nothing scored)"
    empty = _dir(tmp_path / "empty")
    (empty / "notes.txt").write_text("no audio here")
    assert _predict(empty, "--model", detector_path, "--out", out) == 3
    assert "no recordings (.wav, .flac, .ogg, .mp3" in _one_error_line(capsys)
    assert not out.exists()


# -- case 9: a header that says 0 data bytes ---------------------------------------------------


def test_a_zero_data_size_header_is_scored_and_flagged_truncated(
        tmp_path: Path, detector_path: Path) -> None:
    wav = _noise(tmp_path / "died.wav")
    raw = bytearray(wav.read_bytes())
    at = raw.index(b"data") + 4
    raw[at:at + 4] = struct.pack("<I", 0)       # the recorder never went back to write it
    wav.write_bytes(bytes(raw))
    out = tmp_path / "out.csv"
    assert _predict(wav, "--model", detector_path, "--out", out) == 0
    row = read_predictions(out)["died.wav"]
    assert row["status"] == "ok" and float(row["duration_s"]) == SECONDS
    assert "flagged: truncated: header claims 0 frames, read 6144" in row["notes"]


# -- case 10: an audio format leakpipe does not read gets a row, in a folder and named -----------


def test_an_mp3_gets_an_unusable_row_in_a_folder_and_named(tmp_path: Path,
                                                          detector_path: Path) -> None:
    rec = _dir(tmp_path / "rec")
    x = 0.1 * np.random.default_rng(0).standard_normal(int(SECONDS * MP3_RATE))
    sf.write(rec / "field.mp3", x.astype(np.float32), MP3_RATE, format="MP3",
             subtype="MPEG_LAYER_III")       # libsndfile decodes it: leakpipe chooses not to
    _noise(rec / "good.wav")
    out = tmp_path / "out.csv"
    for named in ([rec], [rec / "field.mp3", rec / "good.wav"]):
        assert _predict(*named, "--model", detector_path, "--out", out, "--force") == 0
        rows = read_predictions(out)
        assert rows["good.wav"]["status"] == "ok"
        row = rows["field.mp3"]
        assert (row["status"], row["decision"], row["leak_prob"]) == ("unusable", "", "")
        assert row["notes"].startswith(f"{rec / 'field.mp3'}: .mp3 is not a format leakpipe "
                                       "reads (build, cv, predict and explain read .wav, "
                                       ".flac, .ogg")


def _dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path

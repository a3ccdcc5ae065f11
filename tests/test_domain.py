"""The domain check: pure statistics (``leakpipe.decision.domain``, ``lowrank``), the set check
(``domain_set``), the version 6 detector file and predict's ``domain`` columns and set check on
real tiny recordings."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from leakpipe.cli import main
from leakpipe.constants import BINARY_CLASSES
from leakpipe.decision import domain as dm
from leakpipe.decision.domain_set import SET_ALPHA, set_check
from leakpipe.decision.lowrank import fit_lowrank, lowrank_distance
from leakpipe.decision.metrics import wilson_interval
from leakpipe.decision.verdict import CV_COMMAND, SET_NOTE_START, with_set_verdict
from leakpipe.detector import DETECTOR_VERSION, NO_DOMAIN_FILE, load_detector, save_detector
from leakpipe.features.mel import band_centers_hz
from leakpipe.model import create_model
from leakpipe.predict.inputs import prepare
from tests.helpers_detector import (
    SMALL_MODEL,
    one_torch_thread,
    restore_logging,
    save_small_detector,
)
from tests.helpers_predict import read_predictions

_keep_logging = pytest.fixture(autouse=True)(restore_logging)
_one_thread = pytest.fixture(autouse=True)(one_torch_thread)

M = 32
CENTERS = np.linspace(50.0, 4000.0, M)          # Hz, as a 32-band model up to 4096 Hz


def _profiles(rng: np.random.Generator, n: int) -> np.ndarray:
    """(n, M) band profiles: a falling spectrum with a random tilt, level and band noise."""
    bands = np.arange(M) / M
    tilt = rng.normal(-20.0, 4.0, (n, 1)) * bands
    level = rng.normal(-40.0, 6.0, (n, 1))
    return level + tilt + rng.normal(0.0, 1.0, (n, M))


@pytest.fixture
def reference() -> dm.DomainReference:
    rng = np.random.default_rng(0)
    return dm.fit_threshold(dm.fit_reference(_profiles(rng, 400)), _profiles(rng, 300))


def test_recordings_like_the_references_own_are_mostly_in(reference: dm.DomainReference) -> None:
    new = _profiles(np.random.default_rng(1), 500)
    shifted = [dm.assess(reference, p, CENTERS).domain == dm.SHIFTED for p in new]
    assert np.mean(shifted) < 0.05
    assert reference.fitted_on == "400 train recordings; threshold on 300 val recordings"


@pytest.mark.parametrize(("change", "reason"), [
    ("band", f"band: top {int(np.sum(CENTERS > 2048.0))} of 32 mel bands empty"),  # 4096 Hz
    ("level", "level"),
    ("shape", "shape"),
])
def test_a_shifted_recording_names_its_main_reason(reference: dm.DomainReference, change: str,
                                                   reason: str) -> None:
    p = _profiles(np.random.default_rng(2), 1)[0]
    assert dm.assess(reference, p, CENTERS).domain == dm.IN
    nyquist = None
    if change == "band":
        p = np.where(CENTERS > 2048.0, -100.0, p)
    elif change == "level":
        p = p + 80.0
    else:
        p = p + 15.0 * np.sin(np.arange(M))          # ripple the training never had
    check = dm.assess(reference, p, CENTERS, nyquist)
    assert check.domain == dm.SHIFTED and check.distance > reference.threshold
    assert check.reason.startswith(reason)


def test_the_native_rate_alone_marks_missing_bands(reference: dm.DomainReference) -> None:
    p = _profiles(np.random.default_rng(3), 1)[0]
    assert dm.missing_bands(reference, p, CENTERS) == 0
    assert dm.assess(reference, p, CENTERS, nyquist_hz=4096.0).domain == dm.IN
    check = dm.assess(reference, p, CENTERS, nyquist_hz=2048.0)
    assert check.domain == dm.SHIFTED and check.reason.startswith("band")
    assert dm.missing_bands(reference, p, CENTERS, nyquist_hz=2048.0) == int(np.sum(CENTERS >
                                                                                  2048.0))


def test_a_level_the_network_does_not_see_is_no_shift() -> None:
    rng = np.random.default_rng(0)
    ref = dm.fit_threshold(dm.fit_reference(_profiles(rng, 400), uses_level=False),
                           _profiles(rng, 300))
    p = _profiles(np.random.default_rng(2), 1)[0] + 80.0
    assert dm.assess(ref, p, CENTERS).domain == dm.IN


def test_d_is_the_larger_of_its_two_scaled_parts(reference: dm.DomainReference) -> None:
    p = _profiles(np.random.default_rng(6), 50)
    p[:5] += 80.0                                  # five far by level, the rest near
    shape, level = dm.scaled_parts(reference, p)
    assert np.allclose(dm.distances(reference, p), np.maximum(shape, level))
    assert np.all(level[:5] > shape[:5]) and np.all(level[:5] > reference.threshold)


@pytest.mark.parametrize(("n", "exceed"), [(300, 3), (100, 1), (99, 0), (20, 0)])
def test_the_threshold_leaves_about_one_percent_of_val_above_it(n: int, exceed: int) -> None:
    rng = np.random.default_rng(4)
    ref = dm.fit_reference(_profiles(rng, 200))
    val = _profiles(rng, n)
    ref = dm.fit_threshold(ref, val)
    assert int(np.sum(dm.distances(ref, val) > ref.threshold)) == exceed
    assert ("capped" in ref.fitted_on) is (n < 100)


def test_the_low_rank_model_finds_the_strong_axis_and_floors_the_rest() -> None:
    rng = np.random.default_rng(4)
    axis = np.zeros(6)
    axis[:3] = 1 / np.sqrt(3)
    rows = rng.normal(0, 10.0, (500, 1)) * axis + rng.normal(0, 0.01, (500, 6))
    model = fit_lowrank(rows, 1, 0.25)
    assert abs(float(model.axes[0] @ axis)) == pytest.approx(1.0, abs=1e-3)
    assert model.axes[0].sum() > 0                          # the fixed sign
    assert model.axis_var[0] == pytest.approx(100.0, rel=0.15)
    assert np.all(model.resid_var == 0.25)                  # 1e-4 floored to 0.25
    relative = fit_lowrank(rows, 1, 1e-3, relative=True)
    assert np.allclose(relative.resid_var, 1e-3 * relative.axis_var[0])
    along, across = 10.0 * axis, np.r_[1.0, -1.0, 0, 0, 0, 0]
    d = lowrank_distance(model, np.stack([along, across]))
    assert d[0] < 0.5 < 1.0 < d[1]               # far off the axis, near along it


def test_wilson_interval_matches_the_closed_form() -> None:
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert all(math.isnan(v) for v in wilson_interval(0, 0))


def test_the_reference_round_trips_its_stored_form(reference: dm.DomainReference) -> None:
    back = dm.DomainReference.from_dict(reference.to_dict())
    p = _profiles(np.random.default_rng(5), 20)
    assert np.array_equal(dm.distances(back, p), dm.distances(reference, p))
    assert back.threshold == reference.threshold and back.fitted_on == reference.fitted_on
    assert len(reference.to_dict()["shape_axes"]) == dm.AXES * M
    assert reference.val_distances.size == 300
    assert np.array_equal(back.val_distances, reference.val_distances)
    assert np.all(np.diff(back.val_distances) >= 0)
    with pytest.raises(ValueError, match="fields"):
        dm.DomainReference.from_dict({"band_median": []})
    stored = reference.to_dict()
    stored.pop("val_distances")                    # a version 5 reference: no set check
    older = dm.DomainReference.from_dict(stored)
    assert older.val_distances.size == 0 and older.threshold == reference.threshold
    with pytest.raises(ValueError, match="val_distances"):
        dm.DomainReference.from_dict({**reference.to_dict(), "val_distances": [1.0, "x"]})


def _bumped(rng: np.random.Generator, n: int, db: float) -> np.ndarray:
    """Profiles like ``_profiles`` with a stationary ``db`` bump over three middle bands (a
    mount ringing: every recording of the set coloured the same way)."""
    out = _profiles(rng, n)
    out[:, M // 2 - 1: M // 2 + 2] += db
    return out


def test_a_set_moved_too_little_for_any_one_recording_is_shifted_as_a_set(
        reference: dm.DomainReference) -> None:
    bumped = _bumped(np.random.default_rng(11), 60, 1.5)
    alone = dm.distances(reference, bumped) > reference.threshold
    assert alone.mean() < 0.05                      # hardly any recording is flagged alone
    whole = set_check(reference, dm.distances(reference, bumped))
    assert whole.domain == dm.SHIFTED and whole.p_value < SET_ALPHA and whole.n == 60
    assert whole.median > whole.val_median
    assert whole.line().startswith("set domain check: shifted (median D ")


def test_a_set_like_val_is_in(reference: dm.DomainReference) -> None:
    same = _profiles(np.random.default_rng(12), 200)
    whole = set_check(reference, dm.distances(reference, same))
    assert whole.domain == dm.IN and whole.p_value > 0.01
    nearer = set_check(reference, np.full(50, reference.val_distances.min()))
    assert nearer.domain == dm.IN and nearer.p_value > 0.5    # one-sided: closer is no shift


def test_a_set_check_says_the_alpha_it_used(reference: dm.DomainReference) -> None:
    d = dm.distances(reference, _bumped(np.random.default_rng(14), 20, 1.0))
    strict, lax = set_check(reference, d, alpha=1e-12), set_check(reference, d, alpha=0.5)
    assert strict.p_value == lax.p_value and strict.domain == dm.IN and lax.domain == dm.SHIFTED
    assert strict.to_dict()["alpha"] == 1e-12 and "shifted below 0.5)" in lax.line()


def test_one_recording_is_never_a_shifted_set(reference: dm.DomainReference) -> None:
    far = set_check(reference, np.array([100.0 * reference.threshold]))
    assert far.domain == dm.IN                      # p >= 1 / 301 > SET_ALPHA
    assert far.p_value == pytest.approx(1 / (reference.val_distances.size + 1), rel=1e-6)


def test_the_set_check_is_unknown_without_what_it_needs(reference: dm.DomainReference) -> None:
    assert set_check(None, np.ones(5)).domain == dm.UNKNOWN
    assert set_check(reference, np.array([np.nan, np.nan])).domain == dm.UNKNOWN
    bare = dataclasses.replace(reference, val_distances=np.zeros(0))
    check = set_check(bare, np.ones(5))
    assert check.domain == dm.UNKNOWN and check.n == 5 and "keeps no val distances" in check.line()
    with_nan = set_check(reference, np.array([np.nan, *dm.distances(
        reference, _bumped(np.random.default_rng(13), 60, 1.5))]))
    assert with_nan.n == 60 and with_nan.domain == dm.SHIFTED
    assert json.loads(json.dumps(check.to_dict()))["p_value"] is None


# -- the detector file and predict ----------------------------------------------------------

RATE = 4096            # the small features' rate
SECONDS = 2.0


def _noise(path: Path, rng: np.random.Generator, gain_db: float, rate: int = RATE) -> Path:
    x = 0.1 * 10 ** (gain_db / 20) * rng.standard_normal(int(SECONDS * rate))
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, x.astype(np.float32), rate, subtype="FLOAT")
    return path


def _profile(path: Path, detector) -> np.ndarray:       # noqa: ANN001 (a Detector)
    mel = np.concatenate([p.mel for p in prepare(path, detector, 0.5, 64)])
    return dm.band_profile(mel)


@pytest.fixture
def detectors(tmp_path: Path) -> tuple[Path, Path]:
    """(a version 5 detector with a reference of white-noise recordings, the same without)."""
    torch.manual_seed(0)
    old = save_small_detector(tmp_path / "old.pt", create_model(SMALL_MODEL,
                                                                len(BINARY_CLASSES)).eval(),
                              "none")
    detector = load_detector(old)
    rng = np.random.default_rng(0)
    train = [_profile(_noise(tmp_path / "ref" / f"t{i}.wav", rng, rng.uniform(-3, 3)),
                      detector) for i in range(24)]
    val = [_profile(_noise(tmp_path / "ref" / f"v{i}.wav", rng, rng.uniform(-3, 3)), detector)
           for i in range(12)]
    ref = dm.fit_threshold(dm.fit_reference(np.stack(train)), np.stack(val))
    new = tmp_path / "detector.pt"
    save_detector(new, dataclasses.replace(detector, domain=ref))
    return new, old


def test_a_version_6_detector_keeps_its_reference(detectors: tuple[Path, Path]) -> None:
    new, _ = detectors
    raw = torch.load(new, weights_only=True)
    assert raw["version"] == DETECTOR_VERSION >= 6 and raw["domain"] is not None
    ref = load_detector(new).domain
    assert ref is not None and ref.fitted_on.startswith("24 train recordings")
    assert ref.val_distances.size == 12


def test_predict_marks_each_recording_in_or_shifted_with_its_reason(
        tmp_path: Path, detectors: tuple[Path, Path]) -> None:
    rng = np.random.default_rng(7)
    rec = tmp_path / "new"
    _noise(rec / "like.wav", rng, 0.0)
    _noise(rec / "narrow.wav", rng, 0.0, rate=RATE // 2)      # nothing above 1024 Hz
    _noise(rec / "quiet.wav", rng, -40.0)
    out = tmp_path / "out.csv"
    assert main(["predict", str(rec), "--model", str(detectors[0]), "--out", str(out),
                 "--no-progress", "--device", "cpu"]) == 0
    rows = read_predictions(out)
    assert rows["like.wav"]["domain"] == "in" and rows["like.wav"]["domain_reason"] == ""
    assert rows["narrow.wav"]["domain"] == "shifted"
    assert rows["narrow.wav"]["domain_reason"].startswith("band")
    f = load_detector(detectors[0]).features
    assert rows["narrow.wav"]["domain_reason"].startswith(
        f"band: top {int(np.sum(band_centers_hz(f.n_mels, f.fmin, f.fmax) > RATE / 4))} of")
    assert rows["quiet.wav"]["domain"] == "shifted"
    assert re.match(r"level: -(39|40|41) dB vs training", rows["quiet.wav"]["domain_reason"])
    for row in rows.values():                  # a shifted recording keeps its decision
        assert row["decision"] in ("LEAK", "NOLEAK") and float(row["domain_distance"]) >= 0
    written = json.loads((tmp_path / "out_domain.json").read_text())
    assert written["recordings"] == {"in": 1, "shifted": 2, "unknown": 0}
    assert written["set"]["n"] == 3 and written["set"]["domain"] == "in"   # 3 of 12 val: p > 0.001
    assert 0.0 < written["set"]["p_value"] < 1.0
    assert rows["like.wav"]["verdict"] == rows["like.wav"]["decision"]    # a set that is in
    assert not any(SET_NOTE_START in row["notes"] for row in rows.values())


def test_an_older_detector_reports_domain_unknown_and_says_so_once(
        tmp_path: Path, detectors: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    _, old = detectors
    raw = torch.load(old, weights_only=True)
    raw.pop("domain")
    raw["version"] = 4
    torch.save(raw, old)
    _noise(tmp_path / "new" / "a.wav", np.random.default_rng(0), 0.0)
    _noise(tmp_path / "new" / "b.wav", np.random.default_rng(1), 0.0)
    out = tmp_path / "out.csv"
    capsys.readouterr()
    assert main(["predict", str(tmp_path / "new"), "--model", str(old), "--out", str(out),
                 "--no-progress", "--device", "cpu"]) == 0
    rows = read_predictions(out)
    assert {(r["domain"], r["domain_distance"], r["domain_reason"]) for r in rows.values()} \
        == {("unknown", "", "")}
    captured = capsys.readouterr()
    assert captured.err.count(NO_DOMAIN_FILE) == 1                    # the CLI logs to stderr
    assert "set domain check: unknown (no recording with a distance)" in captured.out
    assert json.loads((tmp_path / "out_domain.json").read_text())["set"]["domain"] == "unknown"


def test_a_shifted_set_is_said_on_the_command_line_and_in_the_json(
        tmp_path: Path, detectors: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(3)
    for i in range(8):                         # all 9 dB quieter: far from 12 val recordings
        _noise(tmp_path / "new" / f"q{i}.wav", rng, -9.0)
    out = tmp_path / "out.csv"
    capsys.readouterr()
    assert main(["predict", str(tmp_path / "new"), "--model", str(detectors[0]), "--out",
                 str(out), "--no-progress", "--device", "cpu"]) == 0
    captured = capsys.readouterr()
    written = json.loads((tmp_path / "out_domain.json").read_text())
    assert written["set"]["domain"] == "shifted" and written["set"]["n"] == 8
    assert written["set"]["p_value"] < SET_ALPHA
    assert captured.out.startswith("predict: set domain check: shifted")   # it leads
    assert "taken together, are farther from the training recordings" in captured.err
    assert "every call reads UNCERTAIN" in captured.err
    rows = read_predictions(out)
    assert len(rows) == 8
    for row in rows.values():   # the set's answer reaches every row; the model's call stays
        assert row["verdict"] == "UNCERTAIN" and row["decision"] in ("LEAK", "NOLEAK")
        assert SET_NOTE_START in row["notes"] and CV_COMMAND in row["notes"]
    assert "predict: 8 recordings (0 LEAK, 0 NOLEAK, 8 UNCERTAIN (out of domain;" in captured.out


def test_a_row_follows_the_answer_of_the_set_it_now_belongs_to() -> None:
    row = {"status": "ok", "decision": "LEAK", "domain": "in", "verdict": "LEAK", "notes": "x"}
    shifted = with_set_verdict(row, dm.SHIFTED, 1e-6)
    assert shifted["verdict"] == "UNCERTAIN" and shifted["decision"] == "LEAK"
    assert shifted["notes"].startswith("x; " + SET_NOTE_START) and "p = 1e-06" in shifted["notes"]
    assert with_set_verdict(shifted, dm.SHIFTED, 1e-6) == shifted          # not noted twice
    assert with_set_verdict(shifted, dm.IN) == row                          # a resume that is in
    unusable = {"status": "unusable", "decision": "", "domain": "", "verdict": "UNUSABLE",
                "notes": "dead channel"}
    assert with_set_verdict(unusable, dm.SHIFTED, 1e-6) == unusable   # no call: nothing to doubt
    own = {**row, "domain": dm.SHIFTED, "verdict": "UNCERTAIN", "notes": "its own reason"}
    assert with_set_verdict(own, dm.IN) == own                              # its own check stays
    both = with_set_verdict(own, dm.SHIFTED, 1e-6)
    assert both["notes"].startswith("its own reason; " + SET_NOTE_START)


def test_the_set_check_covers_the_rows_a_resume_keeps(tmp_path: Path,
                                                     detectors: tuple[Path, Path]) -> None:
    rng = np.random.default_rng(5)
    for i in range(2):
        _noise(tmp_path / "new" / f"a{i}.wav", rng, 0.0)
    out = tmp_path / "out.csv"
    args = ["predict", str(tmp_path / "new"), "--model", str(detectors[0]), "--out", str(out),
            "--no-progress", "--device", "cpu"]
    assert main(args) == 0
    first = json.loads((tmp_path / "out_domain.json").read_text())
    _noise(tmp_path / "new" / "b.wav", rng, 0.0)
    assert main([*args, "--resume"]) == 0
    again = json.loads((tmp_path / "out_domain.json").read_text())
    assert first["set"]["n"] == 2 and again["set"]["n"] == 3
    assert sum(again["recordings"].values()) == 3

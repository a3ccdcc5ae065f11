"""The served detector of the `fused` kind: the shipped detector, registered by ship as the
candidate, answers waveforms with one verdict per recording from its CNN clips and its
statistics (one decoding), the same columns as the other kinds', the same figures as `leakpipe
predict`'s rows and as the parts computed apart; a dead logger is ``unusable``, never NOLEAK.

Real pieces: the fused world of ``tests.helpers_fused`` (splits of real clip features and
statistics, a CNN that reads a band level), the real `leakpipe ship` (fit, stack, card,
register) into a real SQLite MLflow store, ``mlflow.pyfunc.load_model`` of the registered
candidate and MLflow's own scoring handler.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
import soundfile as sf

from leakpipe import tracking
from leakpipe.cli import main
from leakpipe.config import load_section
from leakpipe.decision.domain import IN, SHIFTED, UNKNOWN_CHECK, DomainCheck
from leakpipe.detectors.registry import load_any_detector
from leakpipe.features.recording_stats import recording_stats
from leakpipe.predict.scoring import score_segments
from leakpipe.runtime import make_runtime
from leakpipe.serve.fused import combined_domain
from leakpipe.serve.model import OUTPUT_COLUMNS
from leakpipe.stats_detector import FUSED_KIND, FusedDetector
from tests.conftest import PARAMS
from tests.helpers_detector import copied_store
from tests.helpers_fused import SECONDS, clips_of, params_with, ship
from tests.test_serve import _invoke
from tests.test_ship import RATE, SPEC, _recording

NAME = load_section(PARAMS, "evaluate").registered_model
CANDIDATE = f"models:/{NAME}@{tracking.ALIAS_CANDIDATE}"
LOW_RATE = 1000          # Hz: the 1000 Hz octave band lies above its Nyquist frequency


@dataclass(frozen=True)
class Shipped:
    root: Path
    detector: Path


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shipped]:
    root = tmp_path_factory.mktemp("serve-fused")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DVC_ROOT", str(root))
        patch.setenv("MLFLOW_TRACKING_URI", copied_store(root / "mlruns"))
        assert ship(root, params_with(root, FUSED_KIND), root / "absent-cv.json") == 0
        yield Shipped(root, root / "shipped.pt")


def _waveforms() -> dict[str, tuple[np.ndarray, int]]:
    rng = np.random.default_rng(31)
    return {"leak": (_recording(rng, True), RATE), "traffic": (_recording(rng, False), RATE),
            "zeros": (np.zeros(SECONDS * RATE, np.float32), RATE),
            "constant": (np.full(SECONDS * RATE, 0.25, np.float32), RATE),
            "low-rate": (_recording(rng, True)[: SECONDS * LOW_RATE], LOW_RATE)}


def _request(waves: dict[str, tuple[np.ndarray, int]]) -> list[dict]:
    return [{"waveform": x.astype(np.float64).tolist(), "sample_rate": rate, "id": name}
            for name, (x, rate) in waves.items()]


def _stacked(detector: FusedDetector, x: np.ndarray) -> float:
    """A RATE recording's stacked probability from its parts computed apart from serving: the
    whole waveform cut into its 1 s clips and scored by predict's scoring path, the statistics
    of the whole waveform at once."""
    seg = score_segments(detector.cnn, detector.cnn.inference_model(), clips_of(x),
                         make_runtime("cpu"), 4096)                              # (6, L, S)
    stats = recording_stats(x, RATE, SPEC)
    return float(detector.probability(detector.cnn_probability(seg), stats[None, :])[0])


def test_ship_registers_the_fused_detector_as_a_servable_candidate(shipped: Shipped) -> None:
    candidate = tracking.alias_version(NAME, tracking.ALIAS_CANDIDATE)
    assert candidate is not None and candidate.tags[tracking.TAG_DETECTOR_KIND] == FUSED_KIND
    assert tracking.download_model(CANDIDATE).read_bytes() == shipped.detector.read_bytes()
    card = (shipped.root / "card.md").read_text()
    assert card.startswith("# Model card: fused detector ")
    assert candidate.description.strip() == card.strip()       # the card is its description
    info = mlflow.models.get_model_info(CANDIDATE)
    assert [c["name"] for c in info.signature.outputs.to_dict()] == list(OUTPUT_COLUMNS)
    example = mlflow.models.Model.load(CANDIDATE).load_input_example()
    answer = mlflow.pyfunc.load_model(CANDIDATE).predict(example)
    assert list(answer["status"]) == ["ok", "ok"] and set(answer["rule"]) == {FUSED_KIND}


def test_served_fused_detector_decides_recordings_and_refuses_a_dead_logger(
        shipped: Shipped) -> None:
    waves = _waveforms()
    answers = {a["id"]: a for a in _invoke(mlflow.pyfunc.load_model(CANDIDATE),
                                           _request(waves))}
    assert answers["leak"]["decision"] == "LEAK" and answers["traffic"]["decision"] == "NOLEAK"
    for name in ("zeros", "constant"):                   # a silent logger is never NOLEAK
        dead = answers[name]
        assert dead["status"] == "unusable" and dead["decision"] == ""
        assert dead["leak_prob"] is None and dead["rule"] == FUSED_KIND
        assert dead["notes"].startswith(f"{name}: channel 0 is dead (constant")
    detector = load_any_detector(shipped.detector)
    for name in ("leak", "traffic"):
        a = answers[name]
        assert a["status"] == "ok" and a["rule"] == FUSED_KIND and a["prob_mode"] == ""
        assert (a["leak_prob"] >= a["threshold"]) == (a["decision"] == "LEAK")
        assert a["threshold"] == pytest.approx(detector.prob_threshold, abs=1e-4)
        expected = detector.leak_prob(_stacked(detector, waves[name][0].astype(np.float64)))
        assert a["leak_prob"] == pytest.approx(expected, abs=2e-4)
        # what the fused kind does not have is null or empty, never a made-up figure
        assert a["vote_fraction"] is None and a["frac_long_over"] is None and a["n_long"] is None
        assert a["long_probs"] == [] and a["long_starts_s"] == [] and a["long_clips"] == []
        assert (a["duration_s"], a["band_hz"], a["band_limited"]) == (6.0, RATE / 2, False)
        # the CNN part has no domain reference here: the statistics part's check speaks
        assert a["domain"] == "in" and a["domain_reason"] == ""
        assert 0.0 <= a["domain_distance"] <= 1.0
        assert a["kind"] == FUSED_KIND and a["sample_rate"] == RATE
        assert a["top_statistic"].split()[0] in detector.logger_stats.net.names
        assert (a["raw_score"] >= detector.threshold) == (a["decision"] == "LEAK")
    low = answers["low-rate"]                  # a band the statistics part reads is missing
    assert low["status"] == "ok" and low["band_limited"] is True and low["duration_s"] == 6.0
    assert low["domain"] == "shifted" and low["domain_reason"].startswith("logger_stats band: ")
    # shifted: UNCERTAIN, the model's call and leak_prob kept, the notes say why and what to do
    assert low["verdict"] == "UNCERTAIN" and low["decision"] in ("LEAK", "NOLEAK")
    assert low["leak_prob"] is not None and low["domain_reason"] in low["notes"]
    assert "`leakpipe cv --source " in low["notes"]
    assert [answers[n]["verdict"] for n in ("leak", "traffic", "zeros", "constant")] == [
        "LEAK", "NOLEAK", "UNUSABLE", "UNUSABLE"]


def test_a_recording_too_short_for_a_clip_is_an_error_and_the_others_are_answered(
        shipped: Shipped) -> None:
    good = _request({"leak": _waveforms()["leak"]})[0]
    answers = _invoke(mlflow.pyfunc.load_model(CANDIDATE), [
        {**good, "id": "short", "waveform": good["waveform"][: RATE // 10]},
        {**good, "id": "rate", "sample_rate": 4096.5}, good])
    assert [a["status"] for a in answers] == ["error", "error", "ok"]
    assert answers[0]["leak_prob"] is None and answers[0]["notes"].startswith("short: ")
    assert answers[1]["notes"].startswith("rate: sample_rate must be a positive whole number")


def test_served_answers_are_predicts_rows(shipped: Shipped, tmp_path: Path) -> None:
    """The same recordings as WAV files through `leakpipe predict` give the same calls, leak
    probabilities and thresholds."""
    waves = {k: v for k, v in _waveforms().items() if k != "low-rate"}
    for name, (x, rate) in waves.items():
        sf.write(tmp_path / f"{name}.wav", x, rate, subtype="FLOAT")
    out = tmp_path / "pred.csv"
    assert main(["predict", str(tmp_path), "--model", str(shipped.detector), "--out", str(out),
                 "--no-progress", "--device", "cpu"]) == 0
    with out.open(newline="") as handle:
        rows = {Path(r["path"]).stem: r for r in csv.DictReader(handle)}
    answers = mlflow.pyfunc.load_model(CANDIDATE).predict(
        pd.DataFrame(_request(waves))).to_dict("records")
    assert [a["id"] for a in answers] == list(waves)
    for a in answers:
        row = rows[a["id"]]
        assert (a["status"], a["decision"]) == (row["status"], row["decision"])
        assert (a["verdict"], a["domain"]) == (row["verdict"], row["domain"])
        if row["leak_prob"]:
            assert a["leak_prob"] == pytest.approx(float(row["leak_prob"]), abs=1e-4)
        assert a["threshold"] == float(row["threshold"])


LIMITS = {"cnn": 2.0, "logger_stats": 1.0}     # the CNN's val threshold, the statistics' 1


@pytest.mark.parametrize(("cnn", "stats", "domain", "distance", "reason"), [
    (DomainCheck(IN, 1.0, ""), DomainCheck(IN, 0.25, ""), IN, 0.5, ""),
    (DomainCheck(SHIFTED, 1.0, "band: top 4 of 16 mel bands empty"), DomainCheck(IN, 0.75, ""),
     SHIFTED, 0.75, "cnn band: top 4 of 16 mel bands empty"),
    (DomainCheck(IN, 3.0, ""), DomainCheck(SHIFTED, 1.5, "statistic: level_p10 +9.0 train sd"),
     SHIFTED, 1.5, "logger_stats statistic: level_p10 +9.0 train sd"),
    (DomainCheck(SHIFTED, 5.0, "level: +30 dB"), DomainCheck(SHIFTED, 1.25, "band: 1 of 3"),
     SHIFTED, 2.5, "cnn level: +30 dB; logger_stats band: 1 of 3"),
    (UNKNOWN_CHECK, DomainCheck(IN, 0.5, ""), IN, 0.5, ""),    # a CNN without a reference
    (UNKNOWN_CHECK, DomainCheck(SHIFTED, float("nan"), "band: 3 of 3"), SHIFTED, None,
     "logger_stats band: 3 of 3"),
])
def test_both_parts_domain_checks_make_one_answer(cnn: DomainCheck, stats: DomainCheck,
                                                  domain: str, distance: float | None,
                                                  reason: str) -> None:
    got = combined_domain({"cnn": cnn, "logger_stats": stats}, LIMITS)
    assert got == {"domain": domain, "domain_distance": distance, "domain_reason": reason}

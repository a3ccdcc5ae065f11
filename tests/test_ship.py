"""Stage `ship` (leakpipe/ship.py): which kind is shipped, and a logger_stats detector fitted,
chosen on val, reported on test, written as a detector file that loads; real HDF5 splits, a
real MLflow SQLite store, the real command."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from leakpipe import tracking
from leakpipe.cli import main
from leakpipe.config import RecordingStatsConfig, load_section
from leakpipe.constants import KNOWN_CLASSES, LEAK_CLASS, SPLITS
from leakpipe.data.writer import SplitWriter, StatsColumns
from leakpipe.errors import DataError
from leakpipe.features.recording_stats import recording_stats, stat_names
from leakpipe.files import file_sha256
from leakpipe.ship.stage import chosen_kind
from leakpipe.stats_detector import KIND, stats_detector_from
from tests.conftest import PARAMS
from tests.helpers_detector import copied_store, known_detector
from tests.helpers_h5 import SMALL_FEATURES, random_mel

NAME = load_section(PARAMS, "evaluate").registered_model
SPEC = RecordingStatsConfig(frame_s=0.125, percentiles=(10.0, 50.0, 90.0),
                            band_centres_hz=(250.0, 1000.0), floor_db=-160.0)
RATE = 4096


def _cv(tmp: Path, selected: object) -> Path:
    path = tmp / "cv.json"
    auc = {"mean": 0.9, "ci_low": 0.8, "ci_high": 0.97, "folds": [0.9]}
    path.write_text(json.dumps({
        "selected": selected, "selection_margin": 0.01, "sites": 30, "recordings": 55,
        "methods": {"logger_stats": {"recording_roc_auc": auc},
                    "cnn": {"recording_roc_auc": auc}},
        "selected_nested": {"per_fold": ["logger_stats"], "recording_roc_auc": auc}}))
    return path


def test_auto_ships_what_cv_selected_and_an_explicit_method_wins(tmp_path: Path) -> None:
    kind, info = chosen_kind("auto", _cv(tmp_path, "logger_stats"))
    assert kind == "logger_stats" and info["cv_recording_roc_auc"]["mean"] == 0.9
    assert info["cv_selected_nested"]["per_fold"] == ["logger_stats"]
    assert chosen_kind("cnn", tmp_path / "absent.json") == ("cnn", {})


@pytest.mark.parametrize("selected", [None, "svm", "random_forest"])
def test_auto_refuses_a_selection_that_is_no_detector_kind(tmp_path: Path,
                                                          selected: object) -> None:
    with pytest.raises(DataError, match="selected is"):
        chosen_kind("auto", _cv(tmp_path, selected))
    with pytest.raises(DataError, match="not found"):
        chosen_kind("auto", tmp_path / "none.json")


def _recording(rng: np.random.Generator, leak: bool) -> np.ndarray:
    """A 6 s recording: a leak hisses all the time, a quiet site has bursts of traffic."""
    n = 6 * RATE
    background = 0.002 * rng.standard_normal(n)
    if leak:
        return (background + rng.uniform(0.01, 0.03) * rng.standard_normal(n)).astype(np.float32)
    gate = np.zeros(n)
    start = rng.integers(0, n - 2 * RATE)
    gate[start:start + 2 * RATE] = 1.0
    return (background + 0.05 * gate * rng.standard_normal(n)).astype(np.float32)


def _splits(root: Path) -> dict[str, Path]:
    """Splits whose recordings differ only in their level statistics (mel is noise)."""
    root.mkdir(parents=True, exist_ok=True)
    columns = StatsColumns(stat_names(SPEC), SPEC.to_dict())
    rng = np.random.default_rng(0)
    leak = KNOWN_CLASSES.index(LEAK_CLASS)
    out = {}
    for split in SPLITS:
        path = root / f"{split}.h5"
        with SplitWriter(path, split, SMALL_FEATURES, KNOWN_CLASSES, chunk_mb=0.01,
                         stats=columns) as writer:
            for site in range(6):
                label = leak if site % 2 else KNOWN_CLASSES.index("NORMAL")
                for k in range(2):
                    x = _recording(rng, label == leak)
                    writer.append(random_mel(rng, 2), label, f"{split}/s{site}/{k}",
                                  f"{split}-s{site}", stats=recording_stats(x, RATE, SPEC),
                                  rate=RATE)
        out[split] = path
    return out


def _store(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A private MLflow store with its artifacts under ``root`` (ship logs a served model)."""
    monkeypatch.setenv("DVC_ROOT", str(root))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", copied_store(root / "mlruns"))


def test_ship_fits_a_logger_stats_detector_that_loads_and_decides(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _store(tmp_path, monkeypatch)
    _splits(tmp_path / "data")
    params = Path(__file__).resolve().parents[1] / "params.yaml"
    out = tmp_path / "out"
    code = main(["ship", "--params", str(params), "--cv", str(_cv(tmp_path, "logger_stats")),
                 "--data-dir", str(tmp_path / "data"), "--unvalidated",
                 "--shipped", str(out / "shipped.pt"), "--metrics", str(out / "ship.json"),
                 "--predictions", str(out / "predictions.csv"),
                 "--model-card", str(out / "card.md"), "--plots-dir", str(out / "plots")])
    assert code == 0
    report = json.loads((out / "ship.json").read_text())
    assert report["kind"] == "logger_stats" and report["method"] == "auto"
    assert report["test"]["recordings"] == 12 and report["test"]["sites"] == 6
    # the leak / traffic difference is in the statistics: the detector ranks test well
    assert report["test"]["recording_roc_auc"] > 0.8
    assert {"recording_roc_auc_ci_low", "recording_f1_ci_high"} <= set(report["test"])
    raw = torch.load(out / "shipped.pt", weights_only=True)
    assert raw["kind"] == KIND
    detector = stats_detector_from(raw, out / "shipped.pt")
    # the set domain check's reference: every fitted (train + val) recording's held-out D
    assert detector.set_reference is not None
    assert detector.set_reference.val_distances.size == 24
    rng = np.random.default_rng(9)
    leak = recording_stats(_recording(rng, True), RATE, SPEC)
    quiet = recording_stats(_recording(rng, False), RATE, SPEC)
    p_leak, p_quiet = detector.probability(np.stack([leak, quiet]))
    assert p_leak > p_quiet
    assert (p_leak >= detector.threshold) and not (p_quiet >= detector.threshold)
    moved = detector.contributions(leak)
    assert set(moved) == set(detector.net.names) and any(v != 0 for v in moved.values())
    rows = (out / "predictions.csv").read_text().splitlines()
    assert rows[0] == "split,recording_id,group,truth,leak_prob,decision,threshold,raw_score"
    assert len(rows) == 1 + 24                                       # val and test recordings
    # predict's names on predict's scale: the shown leak_prob reaches the shown threshold
    # exactly when the call is LEAK, and the threshold is the detector file's
    with (out / "predictions.csv").open(newline="") as handle:
        table = list(csv.DictReader(handle))
    assert {r["threshold"] for r in table} == {str(round(detector.prob_threshold, 4))}
    assert all((float(r["leak_prob"]) >= float(r["threshold"])) == (r["decision"] == "LEAK")
               for r in table)
    assert all((float(r["raw_score"]) >= detector.threshold) == (r["decision"] == "LEAK")
               for r in table if abs(float(r["raw_score"]) - detector.threshold) > 1e-6)
    test_leaks = sum(r["decision"] == "LEAK" for r in table if r["split"] == "test")
    assert test_leaks == report["test"]["recording_tp"] + report["test"]["recording_fp"]
    # the shipped detector is the registry's candidate, described by its own card
    card = (out / "card.md").read_text()
    sha = file_sha256(out / "shipped.pt")
    assert card.startswith(f"# Model card: logger_stats detector {sha[:12]}")
    assert "grouped cross-validation selected it" in card
    candidate = tracking.alias_version(NAME, tracking.ALIAS_CANDIDATE)
    assert candidate is not None and candidate.description == card
    assert candidate.tags[tracking.TAG_DETECTOR_KIND] == KIND
    assert float(candidate.tags[tracking.TAG_TEST_RECORDING_F1]) == pytest.approx(
        report["test"]["recording_f1"], abs=1e-4)
    assert tracking.TAG_EVALUATE_RUN not in candidate.tags
    assert tracking.download_model(candidate.uri).read_bytes() == (out / "shipped.pt").read_bytes()


def test_ship_of_the_cnn_kind_is_evaluates_detector_byte_for_byte(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """...with recording figures from evaluate's clip predictions: a recording's score is the
    mean of its clips' scores, decided at the detector's threshold."""
    _store(tmp_path, monkeypatch)
    source = known_detector(tmp_path / "detector.pt", threshold=0.5)
    (tmp_path / "model_card.md").write_text("# Model card: leak detector abc\n\nper clip\n")
    rows = ["split,recording_id,clip,group,label,leak,leak_score"]
    for r, (leak, scores) in enumerate([(1, (0.9, 0.3)), (1, (0.7, 0.8)), (0, (0.2, 0.8)),
                                        (0, (0.1, 0.1)), (1, (0.4, 0.5))]):
        rows += [f"test,rec{r},{k},site{r},X,{leak},{s}" for k, s in enumerate(scores)]
    predictions = tmp_path / "predictions.csv"
    predictions.write_text("\n".join(rows) + "\n")
    params = Path(__file__).resolve().parents[1] / "params.yaml"
    code = main(["ship", "--params", str(params), "--cv", str(_cv(tmp_path, "cnn")),
                 "--cnn-detector", str(source), "--cnn-predictions", str(predictions),
                 "--data-dir", str(tmp_path / "none"), "--unvalidated",
                 "--shipped", str(tmp_path / "shipped.pt"),
                 "--metrics", str(tmp_path / "ship.json"),
                 "--predictions", str(tmp_path / "p.csv"),
                 "--model-card", str(tmp_path / "card.md"),
                 "--cnn-card", str(tmp_path / "model_card.md"),
                 "--plots-dir", str(tmp_path / "plots")])
    assert code == 0
    assert (tmp_path / "shipped.pt").read_bytes() == source.read_bytes()
    report = json.loads((tmp_path / "ship.json").read_text())
    assert report["kind"] == "cnn" and report["test"]["recordings"] == 5
    # means 0.6, 0.75 | 0.5, 0.1 | 0.45: every leak above every non-leak but rec4 < rec2
    assert report["test"]["recording_roc_auc"] == pytest.approx(5 / 6)
    assert report["test"]["recording_recall"] == pytest.approx(2 / 3)   # 0.45 < 0.5: missed
    # evaluate's card of the network, then ship's figures per recording and why this kind
    card = (tmp_path / "card.md").read_text()
    assert card.startswith("# Model card: leak detector abc\n\nper clip\n\n## Figures per "
                           "recording")
    assert f"| F1 | {report['test']['recording_f1']:.3f} [" in card
    assert "`leakpipe ship` shipped the cnn detector: `detector.method` auto" in card
    candidate = tracking.alias_version(NAME, tracking.ALIAS_CANDIDATE)
    assert candidate is not None and candidate.tags[tracking.TAG_DETECTOR_KIND] == "cnn"
    assert candidate.description == card        # no evaluate run of this file: no train run


def test_without_a_registered_model_ship_registers_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _store(tmp_path, monkeypatch)
    raw = yaml.safe_load(PARAMS.read_text())
    raw["evaluate"]["registered_model"] = ""
    raw["detector"]["method"] = "cnn"
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(raw))
    source = known_detector(tmp_path / "detector.pt", threshold=0.5)
    assert main(["ship", "--params", str(params), "--cnn-detector", str(source),
                 "--cnn-predictions", str(tmp_path / "none.csv"),
                 "--data-dir", str(tmp_path / "none"), "--unvalidated",
                 "--shipped", str(tmp_path / "shipped.pt"),
                 "--metrics", str(tmp_path / "ship.json"),
                 "--predictions", str(tmp_path / "p.csv"),
                 "--model-card", str(tmp_path / "card.md"),
                 "--cnn-card", str(tmp_path / "absent.md"),
                 "--plots-dir", str(tmp_path / "plots")]) == 0
    assert tracking.alias_version(NAME, tracking.ALIAS_CANDIDATE) is None
    card = (tmp_path / "card.md").read_text()
    assert "evaluate's model card (`" in card and "was not found" in card
    assert "Not measured by ship for this detector." in card
    assert "params.yaml `detector.method` names it (cnn)" in card


def test_a_split_without_statistics_is_one_line(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    _store(tmp_path, monkeypatch)
    data = tmp_path / "data"
    data.mkdir()
    for split in SPLITS:
        with SplitWriter(data / f"{split}.h5", split, SMALL_FEATURES, KNOWN_CLASSES,
                         chunk_mb=0.01) as writer:
            writer.append(random_mel(np.random.default_rng(0), 2), 2, f"{split}/a", "g")
    params = Path(__file__).resolve().parents[1] / "params.yaml"
    code = main(["ship", "--params", str(params), "--cv", str(_cv(tmp_path, "logger_stats")),
                 "--data-dir", str(data), "--unvalidated", "--shipped",
                 str(tmp_path / "s.pt"), "--metrics", str(tmp_path / "s.json"),
                 "--predictions", str(tmp_path / "p.csv"),
                 "--model-card", str(tmp_path / "card.md"), "--plots-dir", str(tmp_path / "plots")])
    assert code == 3
    err = capsys.readouterr().err
    assert "no recording statistics" in err and "Traceback" not in err
    assert not (tmp_path / "s.pt").exists()

"""A detector kind is one module: a fourth kind, defined in this file alone and registered
through the public registry, runs through predict, serve, explain, export (ONNX parity with
onnxruntime), `ship` (its card, its served model, its registered version) and `promote`,
none of which names it.

The kind is the rule a commercial noise logger applies, with nothing learned but the
threshold: LEAK when the recording's quietest short-time level (the 10th percentile of its
0.125 s frame levels, ``level_p10``) is at or above a level chosen on val. Its pieces are
leakpipe's building blocks (the statistics build measures, predict's loop of one verdict per
recording, the served statistics scorer, the stored statistics of a split); everything
kind-specific is below. Real WAV files, real HDF5 splits, a real MLflow SQLite store, real
onnxruntime, the real commands.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import json
import math
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
import torch
import yaml
from torch import nn

from leakpipe import tracking
from leakpipe.audio.opening import open_audio
from leakpipe.baselines.logger_stats import read_recordings
from leakpipe.baselines.recording_figures import recording_figures
from leakpipe.cli import main
from leakpipe.config import QualityConfig, RecordingStatsConfig, from_mapping, load_section
from leakpipe.decision.domain import UNKNOWN_CHECK, DomainCheck
from leakpipe.decision.verdict import DECIMALS, call_fields, with_verdict
from leakpipe.detectors.interface import (
    ExplainSetup,
    Exported,
    PredictJob,
    Rendered,
    RowScorer,
)
from leakpipe.detectors.registry import kind_named, register, registered, unregister
from leakpipe.errors import DataError
from leakpipe.evaluate.promotion import EXIT_REFUSED
from leakpipe.files import save_torch_atomic
from leakpipe.stats_detector import FILE_VERSION, FORMAT
from tests.conftest import PARAMS
from tests.helpers_detector import copied_store, one_torch_thread, restore_logging, write_plan
from tests.test_ship import RATE, SPEC, _recording, _splits

_keep_logging = pytest.fixture(autouse=True)(restore_logging)
_one_thread = pytest.fixture(autouse=True)(one_torch_thread)

NAME = "quiet_level"
STATISTIC = "level_p10"                  # the quietest short-time level, dB re full scale
NAME_REGISTERED = load_section(PARAMS, "evaluate").registered_model
QUALITY = load_section(PARAMS, "build").quality        # build's signal checks (dead: refused)


# -- the kind: everything below is what a new kind takes -----------------------------------

@dataclasses.dataclass(frozen=True)
class QuietLevelDetector:
    """LEAK when ``level_p10`` >= ``threshold`` (dB); ``leak_prob`` a logistic of the margin,
    so the operating point on that scale is 0.5."""

    threshold: float
    stats: RecordingStatsConfig
    quality: QualityConfig
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    kind: str = NAME

    @property
    def prob_threshold(self) -> float:
        return 0.5

    @property
    def set_reference(self) -> None:
        return None

    @property
    def columns(self) -> np.ndarray:
        from leakpipe.features.recording_stats import stat_names

        return np.asarray([stat_names(self.stats).index(STATISTIC)])

    def probability(self, stats: np.ndarray) -> np.ndarray:
        """(B, S_all) statistics -> (B,) raw scores: the level itself (the call's scale)."""
        return np.asarray(stats, dtype=np.float64)[:, self.columns[0]]

    def leak_prob(self, score: float) -> float:
        return 1.0 / (1.0 + math.exp(-(score - self.threshold)))

    def contributions(self, stats: np.ndarray) -> dict[str, float]:
        return {STATISTIC: float(stats[self.columns[0]] - self.threshold)}

    def domain(self, stats: np.ndarray) -> DomainCheck:
        return UNKNOWN_CHECK                    # a rule keeps no training recordings


def save(path: Path, detector: QuietLevelDetector) -> Path:
    save_torch_atomic({"format": FORMAT, "version": FILE_VERSION, "kind": NAME,
                       "threshold": float(detector.threshold),
                       "stats_config": detector.stats.to_dict(),
                       "quality": dataclasses.asdict(detector.quality),
                       "metrics": dict(detector.metrics)}, path)
    return path


class RuleGraph(nn.Module):
    """(batch, S_all) statistics -> (batch,) leak_prob."""

    def __init__(self, detector: QuietLevelDetector) -> None:
        super().__init__()
        self.column = int(detector.columns[0])
        self.threshold = float(detector.threshold)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x[:, self.column] - self.threshold)


class QuietLevelKind:
    name = NAME
    file_stage = "ship"

    def load(self, raw: dict[str, Any], path: Path) -> QuietLevelDetector:
        return QuietLevelDetector(
            threshold=float(raw["threshold"]),
            stats=from_mapping(RecordingStatsConfig, raw["stats_config"], "stats", str(path)),
            quality=from_mapping(QualityConfig, raw["quality"], "quality", str(path)),
            metrics={k: float(v) for k, v in raw["metrics"].items()})

    def predict(self, detector: QuietLevelDetector, job: PredictJob) -> None:
        from leakpipe.predict.stats import run_predict_stats, score_file, stamp_of

        run_predict_stats(job.paths, detector, job.out,
                          stamp=stamp_of(job.model, job.file, detector), resume=job.resume,
                          progress=job.progress,
                          score=functools.partial(score_file, detector=detector))

    def serve_scorer(self, detector: QuietLevelDetector) -> RowScorer:
        from leakpipe.serve.stats import StatsScorer

        return StatsScorer(detector)               # type: ignore[arg-type]

    def example_seconds(self, detector: QuietLevelDetector) -> float:
        return 2.0

    def explainer(self, detector: QuietLevelDetector,
                  setup: ExplainSetup) -> Callable[[Path], Rendered]:
        from matplotlib.figure import Figure

        from leakpipe.explain.figure import call_text
        from leakpipe.predict.inputs import Unusable
        from leakpipe.stats_detector import measure

        def explain(path: Path) -> Rendered:
            measured = measure(open_audio(path), detector)      # type: ignore[arg-type]
            if measured.stats is None:
                raise Unusable(f"{path}: {'; '.join(measured.problems)}")
            level = float(detector.probability(measured.stats[None, :])[0])
            call = with_verdict({**call_fields(level, detector.threshold,
                                               detector.leak_prob(level), 0.5),
                                 "domain": "unknown", "domain_reason": ""})
            figure = Figure(figsize=(4, 2))
            ax = figure.subplots()
            ax.barh([STATISTIC], [level])
            ax.axvline(detector.threshold, color="k")
            data = {"path": str(path), "kind": NAME, "statistic": STATISTIC, "value": level,
                    "raw_threshold": detector.threshold, **call}
            return Rendered(figure, data, f"{call_text(call)}; {STATISTIC} {level:.1f} dB "
                                          f"against {detector.threshold:.1f} dB")

        return explain

    def export(self, detector: QuietLevelDetector, source: str, path: Path) -> Exported:
        from leakpipe.export.graph import cpu_session
        from leakpipe.features.recording_stats import stat_names

        width = len(stat_names(detector.stats))          # the graph takes every statistic
        example = torch.zeros((2, width))
        buffer = io.BytesIO()
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore", DeprecationWarning)
            torch.onnx.export(RuleGraph(detector), (example,), buffer, dynamo=False,
                              input_names=["statistics"], output_names=["leak_prob"],
                              dynamic_axes={"statistics": {0: "batch"},
                                            "leak_prob": {0: "batch"}})
        rows = np.random.default_rng(0).normal(-60, 20, (16, width)).astype(np.float32)
        got = cpu_session(buffer.getvalue()).run(["leak_prob"], {"statistics": rows})[0]
        with torch.inference_mode():
            expected = RuleGraph(detector)(torch.from_numpy(rows)).numpy()
        diff = float(np.abs(got - expected).max())
        rules = {"kind": NAME, "statistic": STATISTIC, "threshold": detector.threshold,
                 "columns": width, "max_abs_diff_vs_torch": diff}
        return Exported(buffer.getvalue(), rules, "quiet_level rule", diff,
                        f"{NAME}: one statistic", f"threshold {detector.threshold:g} dB")

    def decide_split(self, detector: QuietLevelDetector, path: Path, setup: Any,
                     desc: str) -> Any:
        from leakpipe.evaluate.promotion_scoring import per_recording, stored_recordings

        stored = stored_recordings(path, detector.stats, NAME)
        return per_recording(stored.truth, detector.probability(stored.stats),
                             stored.recording_id, detector.threshold)

    def ship(self, job: Any) -> Any:
        from leakpipe.ship.figures import calls_from_rows
        from leakpipe.ship.stage import ShipOutcome

        quality = load_section(job.params, "build").quality
        probe = QuietLevelDetector(0.0, SPEC, quality)
        val = read_recordings(job.splits["val"])
        levels = probe.probability(val.stats)
        # the threshold: midway between the classes' val means (nothing else is learned)
        threshold = float((levels[val.truth].mean() + levels[~val.truth].mean()) / 2)
        detector = QuietLevelDetector(threshold, SPEC, quality)
        test = read_recordings(job.splits["test"])
        scores = detector.probability(test.stats)
        metrics = recording_figures("test", test.truth, scores >= threshold, scores, test.group,
                                    intervals=load_section(job.params, "evaluate"), counts=True)
        save(job.paths.shipped, dataclasses.replace(detector, metrics=metrics))
        rows = [{"split": split, "recording_id": rid, "group": g, "truth": int(t),
                 "leak_prob": round(detector.leak_prob(s), DECIMALS),
                 "decision": "LEAK" if s >= threshold else "NOLEAK",
                 "threshold": 0.5, "raw_score": s}
                for split, table in (("val", val), ("test", test))
                for rid, g, t, s in zip(table.recording_id, table.group, table.truth,
                                        detector.probability(table.stats), strict=True)]
        return ShipOutcome(metrics, rows, calls_from_rows(rows))

    def card(self, shipped: Any) -> str:
        from leakpipe.ship.registration import plain_card

        return plain_card(shipped, f"A fit-free rule: LEAK when the recording's {STATISTIC} "
                                   "reaches the level chosen on val.")

    def version_tags(self, detector: QuietLevelDetector) -> dict[str, str]:
        return {"leakpipe.rule_statistic": STATISTIC}

    def adapter(self, detector: QuietLevelDetector, context: Any) -> Any:
        raise DataError(f"{context.paths.detector}: a {NAME} rule fits nothing to adapt")


# -- the surfaces, none of which names the kind ----------------------------------------------

@pytest.fixture
def kind() -> Iterator[QuietLevelKind]:
    registered_kind = register(QuietLevelKind())
    yield registered_kind
    unregister(NAME)


def _wavs(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True)
    rng = np.random.default_rng(3)
    out = {}
    for name, signal in (("leak.wav", _recording(rng, True)),
                         ("quiet.wav", _recording(rng, False)),
                         ("dead.wav", np.zeros(6 * RATE, np.float32))):
        sf.write(folder / name, signal, RATE, subtype="FLOAT")
        out[name] = folder / name
    return out


def _rows(path: Path) -> dict[str, dict[str, str]]:
    with path.open(newline="") as handle:
        return {Path(r["path"]).name: r for r in csv.DictReader(handle)}


def test_the_registry_knows_the_kind_and_refuses_an_unknown_one(kind: QuietLevelKind,
                                                                tmp_path: Path) -> None:
    assert kind_named(NAME) is kind and NAME in registered()
    unregister(NAME)
    path = save(tmp_path / "rule.pt", QuietLevelDetector(-40.0, SPEC, QUALITY))
    assert main(["predict", str(tmp_path), "--model", str(path), "--out",
                 str(tmp_path / "p.csv"), "--no-progress"]) == 3
    assert not (tmp_path / "p.csv").exists()
    register(kind)


def test_predict_serve_explain_export_treat_the_fourth_kind_as_any(
        kind: QuietLevelKind, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import onnxruntime as ort
    import pandas as pd
    from mlflow.pyfunc import PythonModelContext

    from leakpipe.serve.model import ARTIFACT, DetectorModel
    from leakpipe.stats_detector import measure

    wavs = _wavs(tmp_path / "recs")
    levels = {n: float(measure(open_audio(p), QuietLevelDetector(0.0, SPEC, QUALITY)
                               ).stats[0]) for n, p in wavs.items() if n != "dead.wav"}
    threshold = (levels["leak.wav"] + levels["quiet.wav"]) / 2
    model = save(tmp_path / "rule.pt", QuietLevelDetector(threshold, SPEC, QUALITY))

    out = tmp_path / "pred.csv"
    assert main(["predict", str(tmp_path / "recs"), "--model", str(model), "--out", str(out),
                 "--no-progress", "--device", "cpu"]) == 0
    rows = _rows(out)
    assert {n: r["verdict"] for n, r in rows.items()} == {
        "leak.wav": "LEAK", "quiet.wav": "NOLEAK", "dead.wav": "UNUSABLE"}
    assert rows["leak.wav"]["kind"] == NAME
    assert float(rows["leak.wav"]["raw_score"]) == pytest.approx(levels["leak.wav"], abs=1e-5)
    assert "set domain check: none" in capsys.readouterr().out

    served = DetectorModel()
    served.load_context(PythonModelContext(artifacts={ARTIFACT: str(model)}, model_config={}))
    request = pd.DataFrame([{"waveform": sf.read(p, dtype="float32")[0].tolist(),
                             "sample_rate": RATE, "id": n} for n, p in wavs.items()])
    answers = {a["id"]: a for a in served.predict(None, request).to_dict("records")}
    for name, row in rows.items():
        assert answers[name]["verdict"] == row["verdict"]
        assert answers[name]["status"] == row["status"]
        if row["leak_prob"]:
            assert answers[name]["leak_prob"] == pytest.approx(float(row["leak_prob"]),
                                                               abs=1e-4)

    explained = tmp_path / "explained"
    assert main(["explain", str(wavs["leak.wav"]), str(wavs["dead.wav"]), "--model",
                 str(model), "--out", str(explained), "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert "dead.wav: UNUSABLE: " in printed
    data = json.loads((explained / "leak.json").read_text())
    assert data["verdict"] == rows["leak.wav"]["verdict"] and data["kind"] == NAME
    assert (explained / "leak.png").is_file() and not (explained / "dead.png").exists()

    exported = tmp_path / "onnx"
    assert main(["export", "--model", str(model), "--out", str(exported)]) == 0
    rules = json.loads((exported / "rules.json").read_text())
    session = ort.InferenceSession(str(exported / "model.onnx"),
                                   providers=["CPUExecutionProvider"])
    stats = measure(open_audio(wavs["leak.wav"]),
                    QuietLevelDetector(0.0, SPEC, QUALITY)).stats
    onnx_prob = session.run(None, {"statistics": stats[None, :rules["columns"]]
                                   .astype(np.float32)})[0][0]
    assert onnx_prob == pytest.approx(float(rows["leak.wav"]["leak_prob"]), abs=1e-4)
    assert rules["max_abs_diff_vs_torch"] < 1e-5


def test_ship_and_promote_take_the_fourth_kind(kind: QuietLevelKind, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", copied_store(tmp_path / "mlruns"))
    splits = _splits(tmp_path / "data")
    params = tmp_path / "params.yaml"
    raw = yaml.safe_load(PARAMS.read_text())
    raw["detector"]["method"] = NAME
    params.write_text(yaml.safe_dump(raw))
    out = tmp_path / "out"
    assert main(["ship", "--params", str(params), "--cv", str(tmp_path / "no_cv.json"),
                 "--data-dir", str(tmp_path / "data"), "--unvalidated",
                 "--shipped", str(out / "shipped.pt"), "--metrics", str(out / "ship.json"),
                 "--predictions", str(out / "predictions.csv"),
                 "--model-card", str(out / "card.md"), "--plots-dir", str(out / "plots")]) == 0
    report = json.loads((out / "ship.json").read_text())
    assert report["kind"] == NAME and report["test"]["recording_roc_auc"] > 0.8
    card = (out / "card.md").read_text()
    assert card.startswith(f"# Model card: {NAME} detector") and "fit-free rule" in card
    assert "params.yaml `detector.method` names it" in card
    candidate = tracking.alias_version(NAME_REGISTERED, tracking.ALIAS_CANDIDATE)
    assert candidate is not None and candidate.tags[tracking.TAG_DETECTOR_KIND] == NAME
    assert candidate.tags["leakpipe.rule_statistic"] == STATISTIC

    def promote() -> int:
        return main(["promote", "--params", str(params), "--no-progress", "--test",
                     str(splits["test"]), "--plan", str(write_plan(tmp_path / "plan.json")),
                     "--unvalidated"])

    assert promote() == 0                                  # the first champion
    champion = tracking.alias_version(NAME_REGISTERED, tracking.ALIAS_CHAMPION)
    assert champion is not None and champion.version == candidate.version
    deaf = save(tmp_path / "deaf.pt", QuietLevelDetector(1e3, SPEC, QUALITY))
    from leakpipe.serve.model import log_served_detector

    with tracking.start_run("ship") as run:                # a rule that never calls LEAK
        version = tracking.register_detector(
            log_served_detector(deaf), NAME_REGISTERED,
            {tracking.TAG_SHIP_RUN: str(run.run_id), tracking.TAG_DETECTOR_KIND: NAME})
    tracking.set_alias(NAME_REGISTERED, tracking.ALIAS_CANDIDATE, version)
    capsys.readouterr()
    assert promote() == EXIT_REFUSED                       # scored, and worse: refused
    assert f"{NAME_REGISTERED} v{version} stays candidate" in capsys.readouterr().err

"""``DetectorModel`` (the pyfunc), its schema and input example, and how evaluate logs it."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from mlflow.models import ModelSignature
from mlflow.pyfunc import PythonModel
from mlflow.types import ColSpec, DataType, Schema
from mlflow.types.schema import AnyType, Array

import leakpipe
from leakpipe import tracking
from leakpipe.audio.clips import AudioError
from leakpipe.audio.io import AudioSource, waveform_source
from leakpipe.audio.quality import DEAD_ONLY
from leakpipe.detector import Detector, load_detector
from leakpipe.errors import DataError
from leakpipe.predict import ScoringRules, batch_budget, score_recordings
from leakpipe.predict_rows import COLUMNS, TIMELINE, Failed, error_row
from leakpipe.runtime import make_runtime

ARTIFACT = "detector"          # the detector file's key among the model's artifacts
MODEL_CODE = Path(__file__).with_name("model_code.py")
PACKAGE_DIR = Path(leakpipe.__file__).resolve().parent   # shipped with the model
# Distributions the served model imports, pinned to the versions installed when it is logged
# (tests/test_serve.py checks them against what loading the model imports: h5py comes in
# through detector -> data -> reader).
REQUIREMENTS = ("torch", "numpy", "scipy", "soundfile", "h5py", "pandas", "pyyaml", "tqdm",
                "psutil", "mlflow")
EXAMPLE_RATES = (2000, 3000)   # Hz: two rows at two rates, neither the model's
OUTPUT_COLUMNS = ("id", *(c for c in COLUMNS if c != "path"))

# sample_rate is "any": declared long, MLflow's REST parser casts 4096.5 to 4096 before
# leakpipe sees it; as sent, ``_rate`` refuses a rate that is not a whole number
INPUT_SCHEMA = Schema([
    ColSpec(Array(DataType.double), "waveform"),
    ColSpec(AnyType(), "sample_rate"),
    ColSpec(DataType.string, "id", required=False),
])
_NUMBER_COLUMNS = ("leak_prob", "threshold", "vote_fraction", "frac_long_over", "duration_s",
                   "band_hz", "domain_distance")
_TEXT_COLUMNS = ("id", "status", "decision", "rule", "prob_mode", "domain", "domain_reason",
                 "notes")
OUTPUT_SCHEMA = Schema([
    ColSpec(Array(DataType.long) if name == "long_clips"
            else Array(DataType.double) if name in TIMELINE
            else DataType.double if name in _NUMBER_COLUMNS
            else DataType.boolean if name == "band_limited"
            else DataType.long if name == "n_long" else DataType.string, name)
    for name in OUTPUT_COLUMNS
])

log = logging.getLogger(__name__)


class DetectorModel(PythonModel):
    """A detector file answering requests of recordings (see ``leakpipe.serve``)."""

    def load_context(self, context: Any) -> None:
        self.detector = load_detector(Path(context.artifacts[ARTIFACT]))
        self.runtime = make_runtime("auto", "auto", device_key="serve device")
        self.network = self.detector.inference_model().to(self.runtime.device)
        self.rules = served_rules(self.detector)
        self.budget = batch_budget(self.detector, self.rules, self.runtime)

    def predict(self, context: Any, model_input: pd.DataFrame,
                params: dict[str, Any] | None = None) -> pd.DataFrame:
        rows = served_rows(model_input, self.detector, self.network, runtime=self.runtime,
                           budget=self.budget, rules=self.rules)
        # object columns: an error row's missing figures stay None (JSON null) and counts
        # stay integers, rather than pandas turning both into floats and NaN
        return pd.DataFrame(rows, columns=list(OUTPUT_COLUMNS), dtype=object)


def served_rules(detector: Detector) -> ScoringRules:
    """The detector's own scoring rules: a served model has no params.yaml to fall back on.

    A detector file older than its signal checks (version 7) is served with those that need
    no threshold (a dead recording is refused), with one WARNING.
    """
    if detector.batch_limits is None or detector.min_clip_fraction is None:
        raise DataError("the detector was written before detector files held their scoring "
                        "rules and cannot be served; re-run evaluate")
    quality = detector.quality
    if quality is None:
        log.warning("the detector was written before detector files held build.quality: "
                    "dead recordings are refused, none is flagged clipped or DC; re-run "
                    "evaluate")
        quality = DEAD_ONLY
    return ScoringRules(detector.batch_limits, detector.min_clip_fraction, quality)


def served_rows(frame: pd.DataFrame, detector: Detector, network: Any, *, runtime: Any,
                budget: int, rules: ScoringRules) -> list[dict[str, Any]]:
    """One output row per input row, in order (see ``leakpipe.serve`` for both layouts)."""
    ids = _ids(frame)
    sources: list[AudioSource | Failed] = []
    for i, name in enumerate(ids):
        try:
            sources.append(waveform_source(name, _samples(frame, i, name),
                                           _rate(frame, i, name)))
        except AudioError as exc:
            sources.append(Failed(Path(name), str(exc)))
    usable = [s for s in sources if isinstance(s, AudioSource)]
    scored = iter([row for batch in score_recordings(usable, detector, network,
                                                     runtime=runtime, budget=budget,
                                                     min_fraction=rules.min_clip_fraction,
                                                     quality=rules.quality)
                   for row in batch])
    return [_served(next(scored) if isinstance(s, AudioSource) else error_row(s, detector), name)
            for s, name in zip(sources, ids, strict=True)]


def _ids(frame: pd.DataFrame) -> list[str]:
    if "id" not in frame.columns:
        return [f"recording-{i}" for i in range(len(frame))]
    return [str(v) if isinstance(v, str) and v else f"recording-{i}"
            for i, v in enumerate(frame["id"])]


def _samples(frame: pd.DataFrame, i: int, name: str) -> np.ndarray:
    if "waveform" not in frame.columns:
        raise AudioError(f"{name}: no 'waveform' column in the request")
    value = frame["waveform"].iloc[i]
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise AudioError(f"{name}: waveform is not a list of numbers") from None


def _rate(frame: pd.DataFrame, i: int, name: str) -> int:
    if "sample_rate" not in frame.columns:
        raise AudioError(f"{name}: no 'sample_rate' column in the request")
    value = frame["sample_rate"].iloc[i]
    if isinstance(value, bool | np.bool_) or \
            not isinstance(value, int | np.integer | float | np.floating) or \
            not math.isfinite(value) or value != int(value) or value <= 0:
        raise AudioError(f"{name}: sample_rate must be a positive whole number of Hz, got "
                         f"{as_sent(value)}")
    return int(value)


def as_sent(value: Any) -> str:
    """A request's value as the client wrote it in JSON (``0``, ``8000.5``, ``"8k"``,
    ``null``), not as pandas holds it (``np.int64(0)``, ``nan``): the client knows only the
    former."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "null"
    return json.dumps(value, default=str)


def _served(row: dict[str, Any], name: str) -> dict[str, Any]:
    """predict's row for JSON: ``id`` for ``path``, the timeline lists as they are, None for
    blanks."""
    out: dict[str, Any] = {"id": name}
    for key in OUTPUT_COLUMNS[1:]:
        value = row.get(key, "")
        if key in TIMELINE:
            value = list(value)
        elif value == "" and key not in _TEXT_COLUMNS:
            value = None                 # an error row has no figures
        out[key] = value
    return out


def input_example(detector: Detector, seed: int = 0) -> pd.DataFrame:
    """Two recordings at two rates, one clip long each: rows of any count are accepted (the
    schema names columns, not a batch size)."""
    rng = np.random.default_rng(seed)
    clip_s = detector.features.clip_s
    return pd.DataFrame({
        "waveform": [np.round(rng.normal(0, 0.1, round(clip_s * rate)), 3).tolist()
                     for rate in EXAMPLE_RATES],
        "sample_rate": list(EXAMPLE_RATES),
        "id": [f"example-{rate}hz" for rate in EXAMPLE_RATES],
    })


def log_served_detector(path: Path, name: str = "detector") -> str:
    """Log the detector file ``path`` as this run's served MLflow model; its ``models:/`` URI."""
    detector = load_detector(path)
    return tracking.log_pyfunc(
        name, code=MODEL_CODE, artifacts={ARTIFACT: Path(path)},
        signature=ModelSignature(inputs=INPUT_SCHEMA, outputs=OUTPUT_SCHEMA),
        input_example=input_example(detector), requirements=REQUIREMENTS,
        code_paths=[PACKAGE_DIR])

"""``DetectorModel`` (the pyfunc), its schema and input example, and how a stage logs it.

One pyfunc for every detector kind: ``load_context`` loads the detector file of any kind
(``detectors.registry.load_any_detector``) and builds its kind's scorer
(``DetectorKind.serve_scorer``: ``serve.cnn``, ``serve.stats``, ``serve.fused`` for the
built-in kinds); the request's rows are read (``serve.request``) and the answer's columns are
the same for every kind.
"""

from __future__ import annotations

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
from leakpipe.detectors.registry import kind_of, load_any_detector
from leakpipe.predict.rows import TIMELINE
from leakpipe.serve.cnn import served_rules
from leakpipe.serve.request import (
    NUMBER_COLUMNS,
    OUTPUT_COLUMNS,
    as_sent,
    request_sources,
    served_row,
    with_request_set,
)

ARTIFACT = "detector"          # the detector file's key among the model's artifacts
MODEL_CODE = Path(__file__).with_name("model_code.py")
PACKAGE_DIR = Path(leakpipe.__file__).resolve().parent   # shipped with the model
# Distributions the served model imports, pinned to the versions installed when it is logged
# (tests/test_serve.py checks them against what loading the model imports: h5py comes in
# through detector -> data -> reader).
REQUIREMENTS = ("torch", "numpy", "scipy", "soundfile", "h5py", "pandas", "pyyaml", "tqdm",
                "psutil", "mlflow")
EXAMPLE_RATES = (2000, 3000)   # Hz: two rows at two rates, neither the model's
# sample_rate is "any": declared long, MLflow's REST parser casts 4096.5 to 4096 before
# leakpipe sees it; as sent, ``request._rate`` refuses a rate that is not a whole number
INPUT_SCHEMA = Schema([
    ColSpec(Array(DataType.double), "waveform"),
    ColSpec(AnyType(), "sample_rate"),
    ColSpec(DataType.string, "id", required=False),
])
OUTPUT_SCHEMA = Schema([
    ColSpec(Array(DataType.long) if name == "long_clips"
            else Array(DataType.double) if name in TIMELINE
            else DataType.double if name in NUMBER_COLUMNS
            else DataType.boolean if name == "band_limited"
            else DataType.long if name == "n_long" else DataType.string, name)
    for name in OUTPUT_COLUMNS
])


class DetectorModel(PythonModel):
    """A detector file of any kind answering requests of recordings (see ``leakpipe.serve``)."""

    def load_context(self, context: Any) -> None:
        self.detector = load_any_detector(Path(context.artifacts[ARTIFACT]))
        self.scorer = kind_of(self.detector).serve_scorer(self.detector)

    def predict(self, context: Any, model_input: pd.DataFrame,
                params: dict[str, Any] | None = None) -> pd.DataFrame:
        ids, sources = request_sources(model_input)
        scored = with_request_set(self.scorer.rows(sources), self.detector.set_reference)
        rows = [served_row({**row, "kind": self.detector.kind}, name)
                for row, name in zip(scored, ids, strict=True)]
        # object columns: an error row's missing figures stay None (JSON null) and counts
        # stay integers, rather than pandas turning both into floats and NaN
        return pd.DataFrame(rows, columns=list(OUTPUT_COLUMNS), dtype=object)


def input_example(detector: Any, seed: int = 0) -> pd.DataFrame:
    """Two recordings at two rates (one clip long for a cnn detector): rows of any count are
    accepted (the schema names columns, not a batch size)."""
    rng = np.random.default_rng(seed)
    seconds = kind_of(detector).example_seconds(detector)
    return pd.DataFrame({
        "waveform": [np.round(rng.normal(0, 0.1, round(seconds * rate)), 3).tolist()
                     for rate in EXAMPLE_RATES],
        "sample_rate": list(EXAMPLE_RATES),
        "id": [f"example-{rate}hz" for rate in EXAMPLE_RATES],
    })


def log_served_detector(path: Path, name: str = "detector") -> str:
    """Log the detector file ``path`` (any kind) as this run's served MLflow model; its
    ``models:/`` URI."""
    detector = load_any_detector(path)
    return tracking.log_pyfunc(
        name, code=MODEL_CODE, artifacts={ARTIFACT: Path(path)},
        signature=ModelSignature(inputs=INPUT_SCHEMA, outputs=OUTPUT_SCHEMA),
        input_example=input_example(detector), requirements=REQUIREMENTS,
        code_paths=[PACKAGE_DIR])


__all__ = ["ARTIFACT", "INPUT_SCHEMA", "OUTPUT_COLUMNS", "OUTPUT_SCHEMA", "DetectorModel",
           "as_sent", "input_example", "log_served_detector", "served_rules"]

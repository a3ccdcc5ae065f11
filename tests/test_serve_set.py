"""The served detector checks a request's recordings as a set, as predict checks a folder: a
request of recordings that are, taken together, farther from the training recordings than its
val recordings were gets every call UNCERTAIN (the set's note in each row's notes, decision and
leak_prob kept); a request too small for the rank test to reach its level is not set-checked.
The real MLflow pyfunc model class with MLflow's own context, on a CNN detector with a reference
of real recordings."""

from __future__ import annotations

import numpy as np
import pandas as pd
import soundfile as sf
from mlflow.pyfunc import PythonModelContext

from leakpipe.decision.domain_set import min_set_size
from leakpipe.decision.verdict import SET_NOTE_START
from leakpipe.serve.model import ARTIFACT, DetectorModel
from tests.test_domain import _noise, detectors  # noqa: F401 (the fixture)


def _served(model_path) -> DetectorModel:    # noqa: ANN001 (a Path)
    model = DetectorModel()
    model.load_context(PythonModelContext(artifacts={ARTIFACT: str(model_path)},
                                          model_config={}))
    return model


def _request(paths) -> pd.DataFrame:          # noqa: ANN001 (Paths)
    rows = []
    for path in paths:
        x, rate = sf.read(path, dtype="float32")
        rows.append({"waveform": x.tolist(), "sample_rate": rate, "id": path.name})
    return pd.DataFrame(rows)


def test_a_shifted_request_reads_uncertain_and_a_single_recording_is_not_set_checked(
        tmp_path, detectors) -> None:  # noqa: ANN001, F811
    model = _served(detectors[0])
    rng = np.random.default_rng(3)
    quiet = [_noise(tmp_path / f"q{i}.wav", rng, -9.0) for i in range(8)]   # as predict's test
    answers = model.predict(None, _request(quiet)).to_dict("records")
    assert len(answers) == 8
    for a in answers:
        assert a["verdict"] == "UNCERTAIN" and a["decision"] in ("LEAK", "NOLEAK")
        assert SET_NOTE_START in a["notes"] and a["leak_prob"] is not None
    assert min_set_size(12) == 4 and min_set_size(252) == 2        # "enough": see the docs
    few = model.predict(None, _request(quiet[:3])).to_dict("records")  # below 4 for 12 val
    assert not [a for a in few if SET_NOTE_START in a["notes"]]

"""The set domain check for a logger_stats detector: its reference is the held-out domain
distances of the recordings it was fitted on (each site's against the other sites' means and
scales), kept in the file; predict and serve check a set of recordings against it as they do
for a CNN. Real statistics of generated recordings, real detector files, the real command."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from leakpipe.baselines.logger_stats import held_out_distances, standardiser
from leakpipe.cli import main
from leakpipe.decision.stats_domain import stats_distances
from leakpipe.detectors.registry import load_any_detector
from leakpipe.stats_detector import save_stats_detector
from tests.test_fused_detector import _stats_detector
from tests.test_ship import RATE, _recording


def test_each_site_is_measured_against_the_other_sites() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(0.0, 1.0, (9, 3))
    x[6:] += 40.0                                   # the third site lies far from the others
    groups = np.repeat(["a", "b", "c"], 3)
    d = held_out_distances(x, groups)
    mean, scale = standardiser(x[:6])
    assert np.allclose(d[6:], stats_distances(mean, scale, x[6:]), rtol=1e-12)
    assert d[6:].min() > 1.0 > d[:6].max() * 0.5       # the far site, against the others
    # a net's own means would put the far site's recordings nearer than a new site's
    own_mean, own_scale = standardiser(x)
    assert stats_distances(own_mean, own_scale, x[6:]).max() < d[6:].min()
    assert np.isnan(held_out_distances(x[:3], groups[:3])).all()    # one site: no other


def test_the_reference_round_trips_and_an_older_file_has_none(tmp_path: Path) -> None:
    detector, _ = _stats_detector()
    assert detector.set_reference is None                   # no val_distances: none
    with_ref = dataclasses.replace(detector, val_distances=np.array([0.3, 0.1, 0.2]))
    save_stats_detector(tmp_path / "s.pt", with_ref)
    back = load_any_detector(tmp_path / "s.pt")
    assert np.array_equal(back.set_reference.val_distances, [0.1, 0.2, 0.3])


@pytest.mark.parametrize(("reference", "expected"), [(0.001, "shifted"), (50.0, "in")])
def test_predict_checks_a_set_against_the_held_out_distances(
        tmp_path: Path, reference: float, expected: str) -> None:
    """Against tiny reference distances every new recording is farther: the set is shifted,
    and every call reads UNCERTAIN; against huge ones it is in."""
    detector, _ = _stats_detector()
    model = tmp_path / "stats.pt"
    save_stats_detector(model, dataclasses.replace(
        detector, val_distances=np.full(60, reference) + np.linspace(0, 1e-4, 60)))
    recs = tmp_path / "recs"
    recs.mkdir()
    rng = np.random.default_rng(5)
    for i in range(6):
        sf.write(recs / f"r{i}.wav", _recording(rng, bool(i % 2)), RATE, subtype="FLOAT")
    out = tmp_path / "pred.csv"
    assert main(["predict", str(recs), "--model", str(model), "--out", str(out),
                 "--no-progress"]) == 0
    check = json.loads((tmp_path / "pred_domain.json").read_text())
    assert check["set"]["domain"] == expected and check["set"]["n"] == 6
    with out.open(newline="") as handle:
        verdicts = {r["verdict"] for r in csv.DictReader(handle)}
    assert (verdicts == {"UNCERTAIN"}) == (expected == "shifted")


def test_serve_checks_a_requests_recordings_as_a_set_for_logger_stats(tmp_path: Path) -> None:
    """The served model checks a request as predict checks a folder: a request of enough
    recordings farther than the reference reads UNCERTAIN; one below ``min_set_size`` is not
    set-checked."""
    import pandas as pd
    from mlflow.pyfunc import PythonModelContext

    from leakpipe.decision.domain_set import min_set_size
    from leakpipe.decision.verdict import SET_NOTE_START
    from leakpipe.serve.model import ARTIFACT, DetectorModel

    detector, _ = _stats_detector()
    model = tmp_path / "stats.pt"
    save_stats_detector(model, dataclasses.replace(
        detector, val_distances=np.full(12, 0.001) + np.linspace(0, 1e-4, 12)))
    served = DetectorModel()
    served.load_context(PythonModelContext(artifacts={ARTIFACT: str(model)}, model_config={}))
    rng = np.random.default_rng(5)
    waves = [_recording(rng, bool(i % 2)) for i in range(6)]

    def ask(n: int) -> list[dict]:
        request = pd.DataFrame([{"waveform": w.tolist(), "sample_rate": RATE, "id": f"r{i}"}
                                for i, w in enumerate(waves[:n])])
        return served.predict(None, request).to_dict("records")

    assert all(a["verdict"] == "UNCERTAIN" and SET_NOTE_START in a["notes"] for a in ask(6))
    few = min_set_size(12) - 1
    assert not [a for a in ask(few) if SET_NOTE_START in a["notes"]]

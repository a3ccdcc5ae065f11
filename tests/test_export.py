"""`leakpipe export`: the ONNX segment scorer and its rules reproduce PyTorch's scores and file
decisions on a split, when run the way an edge device would (from rules.json alone)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from leakpipe.cli import main
from leakpipe.config import ModelConfig
from leakpipe.constants import BINARY_CLASSES, EXIT_DATA, KNOWN_CLASSES
from leakpipe.data.reader import open_split
from leakpipe.decision.voting import VotingConfig, file_scores
from leakpipe.detector import Detector, load_detector, save_detector, save_network
from leakpipe.model import create_model
from leakpipe.runtime import make_runtime
from leakpipe.scoring.batching import array_batches
from leakpipe.scoring.score import score_batches
from tests.helpers_detector import SMALL_MODEL, one_torch_thread
from tests.helpers_h5 import SMALL_FEATURES, write_split

_one_thread = pytest.fixture(autouse=True)(one_torch_thread)
LEVEL_MODEL = ModelConfig(widths=(4, 4, 4), dropout=0.0, pool_h=2, hidden=8, level_input=True)


def detector_file(path: Path, model_cfg: ModelConfig = LEVEL_MODEL,
                  threshold: float = 0.5, input_norm: str = "clip_band",
                  classes: tuple[str, ...] = BINARY_CLASSES) -> Path:
    """A random-weight detector (level features on: batch norm in the graph), binary or, with
    ``classes`` the data's, of every data class as the default is."""
    torch.manual_seed(0)
    model = create_model(model_cfg, len(classes))
    with torch.no_grad():                       # running statistics that are not the identity
        if model.level is not None:
            model.level.norm.running_mean.uniform_(-20.0, 20.0)
            model.level.norm.running_var.uniform_(50.0, 400.0)
    save_detector(path, Detector(
        model=model.eval(), model_cfg=model_cfg, class_names=classes,
        data_class_names=KNOWN_CLASSES, binary=classes == BINARY_CLASSES,
        features=SMALL_FEATURES,
        voting=VotingConfig(prob_mode="blend", rule="long_vote", vote_fraction=0.5),
        threshold=threshold, metrics={"test/clip_f1": 0.5}, input_norm=input_norm))
    return path


def torch_seg_probs(detector_path: Path, mel: np.ndarray) -> np.ndarray:
    """(F, L, S) leak probabilities through leakpipe's scoring path (predict's batches)."""
    det = load_detector(detector_path)
    scores = score_batches(det.inference_model(), array_batches(mel, 512, det.input_norm),
                           segments=tuple(mel.shape[1:3]), leak_index=det.leak_index,
                           prob_mode=det.voting.prob_mode, runtime=make_runtime("cpu"))
    return scores.seg_probs


def edge_seg_probs(out: Path, mel: np.ndarray) -> np.ndarray:
    """What a device does with the export alone: normalise each clip as rules.json says, run
    model.onnx on every segment, take the leak column."""
    rules = json.loads((out / "rules.json").read_text())
    clips = mel.astype(np.float32)                                   # (F, L, S, M, T)
    if rules["input_norm"] == "clip_level":
        clips = clips - clips.mean(axis=(1, 2, 3, 4), keepdims=True, dtype=np.float64)
    elif rules["input_norm"] == "clip_band":
        clips = clips - clips.mean(axis=(1, 2, 4), keepdims=True, dtype=np.float64)
    session = ort.InferenceSession(str(out / rules["onnx"]["file"]),
                                   providers=["CPUExecutionProvider"])
    n_mels, n_frames = rules["onnx"]["input_shape"][2:]
    segments = clips.reshape(-1, 1, n_mels, n_frames).astype(np.float32)
    probs = session.run([rules["onnx"]["output"]], {rules["onnx"]["input"]: segments})[0]
    return probs[:, rules["onnx"]["leak_column"]].reshape(mel.shape[:3])


@pytest.mark.parametrize(("input_norm", "classes"), [
    ("none", BINARY_CLASSES), ("clip_band", BINARY_CLASSES),
    ("none", KNOWN_CLASSES),       # the default: every data class, level kept (input_norm none)
], ids=["binary-none", "binary-clip_band", "5-class-none"])
def test_exported_scorer_matches_pytorch_on_a_split(tmp_path: Path, input_norm: str,
                                                    classes: tuple[str, ...]) -> None:
    split = write_split(tmp_path / "test.h5", "test", dtype="float32")
    with open_split(split) as reader:
        mel = reader.read_files(slice(None))                         # (F, L, S, M, T)
    first = detector_file(tmp_path / "probe.pt", input_norm=input_norm, classes=classes)
    scores = np.sort(file_scores(torch_seg_probs(first, mel), "long_vote", 0.5))
    # a threshold in the widest gap between file scores of the middle half: both decisions
    # occur, and no score lies within the 1e-4 tolerance of it
    quarter = len(scores) // 4
    gaps = np.diff(scores)[quarter:-quarter]
    k = quarter + int(np.argmax(gaps))
    threshold = float(scores[k] + scores[k + 1]) / 2
    assert scores[k + 1] - scores[k] > 1e-3
    path = detector_file(tmp_path / "detector.pt", threshold=threshold, input_norm=input_norm,
                         classes=classes)
    out = tmp_path / "edge"

    assert main(["export", "--format", "onnx", "--model", str(path), "--out", str(out)]) == 0

    expected = torch_seg_probs(path, mel)
    got = edge_seg_probs(out, mel)
    assert np.abs(got - expected).max() <= 1e-4
    rules = json.loads((out / "rules.json").read_text())
    voting = rules["voting"]
    decide = [file_scores(p, voting["rule"], voting["vote_fraction"]) >= rules["threshold"]
              for p in (expected, got)]
    np.testing.assert_array_equal(decide[0], decide[1])
    assert 0 < decide[1].sum() < len(mel)
    assert rules["input_norm"] == input_norm and rules["threshold"] == threshold
    assert rules["class_names"] == list(classes)
    assert rules["onnx"]["output_columns"] == [*classes, "leak_prob"]
    assert rules["onnx"]["leak_column"] == len(classes)
    assert rules["features"]["n_mels"] == SMALL_FEATURES.n_mels
    assert rules["calibration"]["method"] == "identity"       # none fitted: the score itself
    assert rules["prob_threshold"] == threshold


def test_rules_carry_detector_keys_they_do_not_know(tmp_path: Path) -> None:
    """A key a later detector file adds (calibration, a monitor) reaches rules.json as JSON,
    and the model's metadata holds the same rules text."""
    path = detector_file(tmp_path / "detector.pt")
    raw = torch.load(path, weights_only=True)
    raw["future_key"] = {"table": torch.tensor([0.25, 0.75]), "method": "isotonic",
                         "points": (1, 2)}
    torch.save(raw, path)
    out = tmp_path / "edge"

    assert main(["export", "--model", str(path), "--out", str(out)]) == 0

    text = (out / "rules.json").read_text()
    assert json.loads(text)["future_key"] == {"table": [0.25, 0.75], "method": "isotonic",
                                              "points": [1, 2]}
    props = {p.key: p.value for p in onnx.load(out / "model.onnx").metadata_props}
    assert props["leakpipe_rules"] == text


@pytest.mark.parametrize("case", ["network", "tonal_median", "out_is_a_file"])
def test_export_refuses_with_one_line_and_writes_nothing(
        tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "model.pt"
    out = tmp_path / "edge"
    if case == "network":                     # train's models/model.pt: no operating point
        det = load_detector(detector_file(tmp_path / "d.pt"))
        save_network(path, det)
    elif case == "tonal_median":
        detector_file(path, ModelConfig(widths=(4, 4, 4), dropout=0.0, pool_h=2, hidden=8,
                                        tonal_median=3))
    else:
        detector_file(path, SMALL_MODEL)
        out.write_text("not a folder")

    assert main(["export", "--model", str(path), "--out", str(out)]) == EXIT_DATA

    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    assert str(path if case != "out_is_a_file" else out) in err[0]
    assert not out.is_dir()

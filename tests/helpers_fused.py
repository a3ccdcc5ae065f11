"""A fused detector's world: splits whose clips are the real features of synthetic recordings
(and whose statistics are theirs), a CNN that reads a band level, a real `ship` of the kind.

The recordings are test_ship's: a leak hisses all the time, a quiet site has bursts of
traffic. Each split row is one of a recording's 1 s clips as `build` and `predict` make them
(``clip_features``), so the CNN sees the same kind of input in `ship` and in `predict`.
``level_reader`` is a LeakCNN whose leak logit is ``SLOPE`` x (the loudest of mel bands 8-11 in
dB - ``AT_DB``): a leak's clips score about 0.9, a quiet clip about 0.1, a burst about 1, so
its recording probability ranks leaks first without saturating.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from leakpipe.cli import main
from leakpipe.config import ModelConfig
from leakpipe.constants import BINARY_CLASSES, KNOWN_CLASSES, LEAK_CLASS, SPLITS
from leakpipe.data.writer import SplitWriter, StatsColumns
from leakpipe.features.mel import clip_features
from leakpipe.features.recording_stats import recording_stats, stat_names
from leakpipe.model import create_model
from tests.conftest import PARAMS
from tests.helpers_detector import save_small_detector, set_known_weights
from tests.helpers_h5 import SMALL_FEATURES
from tests.test_ship import RATE, SPEC, _recording

SECONDS = 6                  # test_ship's recordings: six 1 s clips each
READER = ModelConfig(widths=(4, 4, 4), dropout=0.0, pool_h=4, hidden=4)
READ_ROW = 2                 # pooled row 2 of 4: mel bands 8-11
SHIFT_DB = 60.0              # conv1 bias: ReLU keeps (dB + 60) of these recordings
AT_DB = -35.0                # the band level of leak probability 0.5
SLOPE = 0.2                  # leak logit per dB


def level_reader(path: Path) -> Path:
    """A CNN detector file (blend, long_vote, its scoring rules) of the module docstring."""
    model = set_known_weights(create_model(READER, len(BINARY_CLASSES)), leak=1)
    with torch.no_grad():
        model.features[0][0].bias[0] = SHIFT_DB
        model.fc[0].weight.zero_()
        model.fc[0].weight[0, READ_ROW] = 1.0
        for head, row in ((model.head, 1), (model.leak_head, 0)):
            head.weight[row, 0] = SLOPE
            head.bias[row] = -SLOPE * (SHIFT_DB + AT_DB)
    return save_small_detector(path, model, "none", model_cfg=READER)


def clips_of(x: np.ndarray) -> np.ndarray:
    """A recording -> (SECONDS, L, S, M, T) float32: its 1 s clips' features."""
    return clip_features(x.reshape(SECONDS, RATE), SMALL_FEATURES).astype(np.float32)


def fused_splits(root: Path, *, invert_train: bool = False) -> dict[str, Path]:
    """train / val / test: 6 sites each (every other one leaks), 2 recordings per site; with
    ``invert_train`` train's labels say the opposite of its recordings (a wrong labelled set)."""
    root.mkdir(parents=True, exist_ok=True)
    columns = StatsColumns(stat_names(SPEC), SPEC.to_dict())
    rng = np.random.default_rng(0)
    leak = KNOWN_CLASSES.index(LEAK_CLASS)
    out = {}
    for split in SPLITS:
        out[split] = root / f"{split}.h5"
        with SplitWriter(out[split], split, SMALL_FEATURES, KNOWN_CLASSES, dtype="float32",
                         chunk_mb=0.01, stats=columns) as writer:
            for site in range(6):
                label = leak if site % 2 else KNOWN_CLASSES.index("NORMAL")
                stored = label
                if invert_train and split == "train":
                    stored = KNOWN_CLASSES.index("NORMAL") if site % 2 else leak
                for k in range(2):
                    x = _recording(rng, label == leak)
                    writer.append(clips_of(x), stored, f"{split}/s{site}/{k}", f"{split}-s{site}",
                                  stats=recording_stats(x, RATE, SPEC), rate=RATE)
    return out


def params_with(root: Path, method: str) -> Path:
    """The repo's params.yaml with ``detector.method`` set (comments kept)."""
    text = PARAMS.read_text()
    old = "\n  method: auto "
    assert old in text
    path = root / "params.yaml"
    path.write_text(text.replace(old, f"\n  method: {method} ", 1))
    return path


def cv_selecting(root: Path, selected: str) -> Path:
    """A metrics/cv.json whose ``selected`` (and nested picks) is ``selected``."""
    auc = {"mean": 0.93, "ci_low": 0.85, "ci_high": 0.98, "folds": [0.93]}
    path = root / "cv.json"
    path.write_text(json.dumps({
        "selected": selected, "selection_margin": 0.01, "sites": 18, "recordings": 36,
        "methods": {m: {"recording_roc_auc": auc} for m in ("logger_stats", "cnn", "fused")},
        "selected_nested": {"per_fold": [selected], "recording_roc_auc": auc}}))
    return path


def ship(root: Path, params: Path, cv: Path) -> int:
    """`leakpipe ship` of the fused world under ``root`` (splits and CNN written first)."""
    fused_splits(root / "data")
    cnn = level_reader(root / "detector.pt")
    return main(["ship", "--params", str(params), "--cv", str(cv), "--cnn-detector", str(cnn),
                 "--data-dir", str(root / "data"), "--unvalidated",
                 "--shipped", str(root / "shipped.pt"), "--metrics", str(root / "ship.json"),
                 "--predictions", str(root / "predictions.csv"),
                 "--model-card", str(root / "card.md"), "--plots-dir", str(root / "plots")])


def wavs(folder: Path) -> dict[str, Path]:
    """A leak, a quiet site with traffic and a dead (all-zero) logger, as 16-bit WAVs."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(11)
    signals = {"leak": _recording(rng, True), "traffic": _recording(rng, False),
               "dead": np.zeros(SECONDS * RATE, dtype=np.float32)}
    paths = {}
    for name, x in signals.items():
        paths[name] = folder / f"{name}.wav"
        sf.write(paths[name], x, RATE, subtype="PCM_16")
    return paths

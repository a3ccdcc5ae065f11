"""A detector with known outputs and split files holding chosen segment probabilities.

``known_detector`` sets LeakCNN's weights so that a segment whose log-mel values all equal v
gets the leak logit ``v - OFFSET`` from both heads (every conv passes channel 0 through its
centre tap, pools keep a constant, the hidden unit 0 averages channel 0) and every other class
logit 0. With two classes softmax[LEAK] = sigmoid(aux) = sigmoid(v - OFFSET), so every
``prob_mode`` gives the same probability. ``write_prob_split`` then writes, for a table of
wanted probabilities (F, L, S), the constant value ``OFFSET + logit(p)`` per short segment.
"""

from __future__ import annotations

import atexit
import functools
import json
import logging
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from leakpipe.config import FeatureConfig, ModelConfig
from leakpipe.constants import BINARY_CLASSES, KNOWN_CLASSES
from leakpipe.data.schema import leak_index, task_classes
from leakpipe.data.writer import SplitWriter
from leakpipe.decision.voting import VotingConfig
from leakpipe.detector import Detector, save_detector
from leakpipe.model import LeakCNN, create_model
from leakpipe.scoring.batching import BatchLimits
from tests.helpers_h5 import SMALL_FEATURES

OFFSET = 12.0            # log-mel value of a segment with probability 0.5 (ReLUs need v >= 0)
PROB_CLIP = 1e-4         # probabilities are kept inside (PROB_CLIP, 1 - PROB_CLIP)
TINY_MODEL = ModelConfig(widths=(4, 4, 4), dropout=0.0, pool_h=2, hidden=4)
SMALL_MODEL = ModelConfig(widths=(4, 4, 4), dropout=0.0, pool_h=2, hidden=8)


def set_known_weights(model: LeakCNN, leak: int) -> LeakCNN:
    """Leak logit = (segment value - OFFSET) on both heads; other class logits 0."""
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for layer in (model.features[0][0], model.features[1][0], model.features[3][0]):
            layer.weight[0, 0, 1, 1] = 1.0                  # centre tap: channel 0 -> 0
        pool_h = model.features[5].output_size[0]
        model.fc[0].weight[0, :pool_h] = 1.0 / pool_h       # hidden 0 = mean of channel 0
        model.head.weight[leak, 0] = 1.0
        model.head.bias[leak] = -OFFSET
        model.leak_head.weight[0, 0] = 1.0
        model.leak_head.bias[0] = -OFFSET
    return model.eval()


def known_detector(path: Path, *, binary: bool = True,
                   data_classes: tuple[str, ...] = KNOWN_CLASSES,
                   features: FeatureConfig = SMALL_FEATURES, threshold: float = 0.5,
                   voting: VotingConfig | None = None) -> Path:
    """Write a detector file with known outputs (see the module docstring)."""
    classes = task_classes(data_classes, binary)
    model = set_known_weights(create_model(TINY_MODEL, len(classes)), leak_index(classes))
    save_detector(path, Detector(model=model, model_cfg=TINY_MODEL, class_names=classes,
                                 data_class_names=data_classes, binary=binary,
                                 features=features,
                                 voting=voting or VotingConfig(prob_mode="blend"),
                                 threshold=threshold, metrics={}))
    return path


def prob_to_value(probs: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(probs, dtype=np.float64), PROB_CLIP, 1 - PROB_CLIP)
    return OFFSET + np.log(p / (1 - p))


def write_prob_split(path: Path, seg_probs: np.ndarray, labels: Sequence[int], *,
                     split: str = "test", classes: tuple[str, ...] = KNOWN_CLASSES,
                     recording_ids: Sequence[str] | None = None,
                     features: FeatureConfig = SMALL_FEATURES) -> Path:
    """One clip per row; row f's short segments get the probabilities ``seg_probs[f]`` (L, S)."""
    n_long, n_short, n_mels, n_frames = features.segment_shape
    probs = np.asarray(seg_probs, dtype=np.float64)
    assert probs.shape[1:] == (n_long, n_short), probs.shape
    values = prob_to_value(probs)[..., None, None]                       # (F, L, S, 1, 1)
    mel = np.broadcast_to(values, (*probs.shape, n_mels, n_frames)).astype(np.float32)
    ids = recording_ids or [f"{split}-rec{i}" for i in range(len(labels))]
    with SplitWriter(path, split, features, classes, dtype="float32", chunk_mb=0.01) as writer:
        for f, label in enumerate(labels):
            writer.append(mel[f:f + 1], int(label), recording_id=ids[f], group=f"{split}-g{f % 3}")
    return path


def leak_probs(rng: np.random.Generator, labels: np.ndarray, classes: tuple[str, ...],
               features: FeatureConfig = SMALL_FEATURES, spread: float = 0.25) -> np.ndarray:
    """(F, L, S) probabilities: leaks around 0.5 + spread, others around 0.5 - spread."""
    n_long, n_short = features.segment_shape[:2]
    centre = np.where(np.asarray(labels) == classes.index("LEAK"), 0.5 + spread, 0.5 - spread)
    noise = rng.normal(0.0, 0.2, (len(labels), n_long, n_short))
    return np.clip(centre[:, None, None] + noise, 0.01, 0.99)


def write_plan(path: Path, placement: str = "ram") -> Path:
    """The parts of reports/preload.json that evaluation reads."""
    plan = {"placement": placement, "dtype": "float32", "stream": {"buffer_chunks": 1},
            "params": {"safety": 0.8, "host_reserve_mb": 0, "device_reserve_mb": 0}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(plan))
    return path



LIMITS = BatchLimits(max_segments=16384, cpu_max_segments=1024, safety=0.5,
                     host_reserve_mb=512.0, device_reserve_mb=1024.0)


def save_small_detector(path: Path, model: torch.nn.Module, input_norm: str,
          limits: BatchLimits | None = LIMITS, min_clip_fraction: float | None = 0.5, *,
          model_cfg: ModelConfig = SMALL_MODEL) -> Path:
    """``model`` (SMALL_MODEL unless ``model_cfg`` says otherwise, binary, on SMALL_FEATURES)
    as a detector file: blend / long_vote at 0.5, with its own scoring rules unless None."""
    save_detector(path, Detector(
        model=model, model_cfg=model_cfg, class_names=BINARY_CLASSES,
        data_class_names=KNOWN_CLASSES, binary=True, features=SMALL_FEATURES,
        voting=VotingConfig(prob_mode="blend", rule="long_vote"), threshold=0.5, metrics={},
        input_norm=input_norm, batch_limits=limits, min_clip_fraction=min_clip_fraction))
    return path


@functools.cache
def _template_store() -> Path:
    """An empty, migrated MLflow SQLite store, made once per test process (migrations take
    seconds; copying the file takes none)."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    folder = Path(tempfile.mkdtemp(prefix="leakpipe-mlflow-template-"))
    atexit.register(shutil.rmtree, folder, True)
    SqlAlchemyStore(f"sqlite:///{folder / 'mlflow.db'}", (folder / "artifacts").as_uri())
    return folder / "mlflow.db"


def copied_store(folder: Path) -> str:
    """A private MLflow store in ``folder`` (a copy of the template); its tracking URI."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_template_store(), folder / "mlflow.db")
    return f"sqlite:///{folder / 'mlflow.db'}"


def one_torch_thread() -> Iterator[None]:
    """torch on one thread for the test (deterministic and fair on a shared 2-core machine),
    then back to what it was."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def restore_logging() -> Iterator[None]:
    """Put the root logger back after a test that ran ``leakpipe.cli.main`` (its
    ``setup_logging`` binds a handler to this test's captured stderr, closed afterwards)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)

"""What the train stage writes: the detector, the metrics file, the per-epoch plot data, and the
validation confusion matrices of the best epoch (JSON + figure).

Every file is written to a temporary sibling and renamed, so DVC never caches a partial output.
Metric names stay hierarchical: ``val/file_f1`` in MLflow is ``{"val": {"file_f1": ...}}`` in
metrics/train.json and the column ``val/file_f1`` in plots/train/history.csv.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from leakpipe.config import ModelConfig, TrainConfig
from leakpipe.data.input_norm import NORM_NONE, normalize_clips
from leakpipe.detector import save_detector
from leakpipe.evaluate.voting import VotingConfig
from leakpipe.train.fit import FitResult
from leakpipe.train.loop import ValData
from leakpipe.train.session import TrainingData

if TYPE_CHECKING:
    from matplotlib.figure import Figure

EPOCH_COLUMN = "epoch"
SEP = "/"
TIMING_PREFIX = "perf/"        # metric names of timing figures (vary run to run)
EXAMPLE_SEGMENTS = 4          # segments in the logged model's input example (>= 2)
FIGURE_SIZE = (11.0, 4.5)     # inches: segment matrix left, file matrix right


def write_text_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def nest(flat: Mapping[str, Any], sep: str = SEP) -> dict[str, Any]:
    """{'val/file_f1': 1.0} -> {'val': {'file_f1': 1.0}} (DVC shows it as val.file_f1)."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        *parents, leaf = key.split(sep)
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def metrics_summary(result: FitResult, placement: str) -> dict[str, Any]:
    """metrics/train.json: the best epoch's metrics, how training ended, and where data lived."""
    best = {k: _finite(v) for k, v in result.best_metrics.items() if k != EPOCH_COLUMN}
    return {**nest(best), "best_epoch": result.best_epoch, "epochs_run": len(result.history),
            "epochs_this_run": result.epochs_run, "stop_reason": result.stop_reason,
            "monitor": result.monitor, "threshold": _finite(result.threshold),
            "placement": placement}


def history_csv(history: Sequence[Mapping[str, float]]) -> str:
    """One row per epoch, ``epoch`` first, every metric any epoch has (empty when missing)."""
    keys = sorted({k for row in history for k in row} - {EPOCH_COLUMN})
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([EPOCH_COLUMN, *keys])
    for row in history:
        writer.writerow([int(row[EPOCH_COLUMN]), *(_cell(row.get(k)) for k in keys)])
    return buffer.getvalue()


def _cell(value: float | None) -> str:
    return "" if value is None or not math.isfinite(value) else repr(float(value))


def save_model(path: Path, result: FitResult, data: TrainingData, model_cfg: ModelConfig,
               train_cfg: TrainConfig) -> None:
    """models/model.pt: the best epoch's weights with the threshold chosen on val."""
    save_detector(path, model=result.model, model_cfg=model_cfg, class_names=data.class_names,
                  data_class_names=data.data_class_names, binary=train_cfg.binary,
                  features=data.features,
                  voting=VotingConfig(prob_mode=train_cfg.prob_mode,
                                      rule=train_cfg.decision_rule,
                                      vote_fraction=train_cfg.vote_fraction),
                  threshold=result.threshold,
                  metrics=model_metrics(result.best_metrics),
                  input_norm=train_cfg.input_norm)


def model_metrics(best: Mapping[str, float]) -> dict[str, float]:
    """The best epoch's quality figures for the model file: finite values only, and no timing
    figures (``perf/*``), which differ on every run, so identical weights give identical bytes
    (and the stages that read the file do not re-run for nothing)."""
    return {k: v for k, v in best.items() if math.isfinite(v) and not k.startswith(TIMING_PREFIX)}


def input_example(val_data: ValData, n: int = EXAMPLE_SEGMENTS,
                  input_norm: str = NORM_NONE) -> np.ndarray:
    """The first ``n`` segments of the val split, normalised as the model expects them:
    (n, 1, n_mels, n_frames) float32."""
    first = np.asarray(val_data.mel[0:1].cpu() if hasattr(val_data.mel, "cpu")
                       else val_data.mel[0:1])                      # (1, L, S, M, T)
    first = normalize_clips(torch.from_numpy(first), input_norm).numpy()
    segments = first.reshape(-1, 1, *first.shape[-2:])              # (L * S, 1, M, T)
    return np.ascontiguousarray(segments[:n], dtype=np.float32)


def confusion_figure(confusion: Mapping[str, Any]) -> Figure:
    """Two panels: segments by class (at argmax), files by leak (at the chosen threshold)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=FIGURE_SIZE)
    seg, files = fig.subplots(1, 2)
    _matrix(seg, np.asarray(confusion["segment"]), confusion["class_names"],
            "val segments (predicted class)")
    _matrix(files, np.asarray(confusion["file"]), confusion["file_labels"],
            f"val files (threshold {confusion['threshold']:.2f})")
    fig.tight_layout()
    return fig


def _matrix(ax: Any, counts: np.ndarray, labels: Sequence[str], title: str) -> None:
    ax.imshow(counts, cmap="Blues")
    ticks = range(len(labels))
    ax.set_xticks(ticks, labels, rotation=45, ha="right")
    ax.set_yticks(ticks, labels)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(title)
    dark = counts.max() / 2 if counts.size else 0
    for (i, j), value in np.ndenumerate(counts):
        ax.text(j, i, str(int(value)), ha="center", va="center",
                color="white" if value > dark else "black")

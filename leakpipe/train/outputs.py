"""What the train stage writes: the trained network, the metrics file, the per-epoch plot
data, and the validation confusion matrices of the best epoch (JSON + figure).

Every file is written to a temporary sibling and renamed, so DVC never caches a partial output.
Metric names stay hierarchical: ``val/clip_f1`` in MLflow is ``{"val": {"clip_f1": ...}}`` in
metrics/train.json and the column ``val/clip_f1`` in plots/train/history.csv.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from leakpipe.config import ModelConfig, TrainConfig
from leakpipe.detector import Network, save_network
from leakpipe.metric_names import nest
from leakpipe.train.fit import FitResult
from leakpipe.train.inputs import TrainingData
from leakpipe.train.validation import ValSplit

if TYPE_CHECKING:
    from matplotlib.figure import Figure

EPOCH_COLUMN = "epoch"
EXAMPLE_SEGMENTS = 4          # segments in the logged model's input example (>= 2)
FIGURE_SIZE = (11.0, 4.5)     # inches: segment matrix left, file matrix right


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
    """models/model.pt: the best epoch's weights and what their inputs must look like.

    No operating point (evaluate chooses it and writes the detector) and no timing figures,
    so identical weights give identical bytes and the stages reading the file do not re-run
    for nothing.
    """
    save_network(path, Network(model=result.model, model_cfg=model_cfg,
                               class_names=data.class_names,
                               data_class_names=data.data_class_names, binary=train_cfg.binary,
                               features=data.features, input_norm=train_cfg.input_norm))


def input_example(val: ValSplit, n: int = EXAMPLE_SEGMENTS) -> np.ndarray:
    """The first ``n`` segments of the val split as the model sees them (normalised by the
    val batches): (n, 1, n_mels, n_frames) float32."""
    x, _, _ = next(iter(val.batches))                               # (B, 1, M, T)
    return np.ascontiguousarray(x[:n].float().cpu().numpy(), dtype=np.float32)


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

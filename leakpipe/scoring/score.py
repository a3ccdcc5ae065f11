"""``score_batches``: run a network over batches of whole files, return every segment's outputs.

A batch is ``(x (B, 1, n_mels, T), y (B,) task labels per segment, file index (B,))`` holding
whole files in file order (``leakpipe.data.file_order.FileOrderBatches`` or ``array_batches``).
Outputs stay on the device until the last batch and then come back in one transfer per output,
so a split costs one host sync, not one per batch. With a ``loss_fn`` the mean loss over every
segment is also returned (validation); the caller decides what a non-finite loss means.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn
from tqdm import tqdm

from leakpipe.decision.voting import ProbMode, segment_leak_prob
from leakpipe.runtime import Runtime

Batch = tuple[Tensor, Tensor, Tensor]
LossFn = Callable[[Tensor, Tensor, Tensor], object]   # (logits, leak_logit, y) -> parts.total


@dataclass(frozen=True)
class Scores:
    """Network outputs for every file scored, in file order."""

    seg_probs: np.ndarray          # (F, L, S) float32 leak probability per short segment
    class_probs: np.ndarray        # (F, C) float64 mean class softmax per file
    seg_pred: np.ndarray           # (F * L * S,) int64 argmax class per short segment
    loss: float                    # mean loss per segment (nan without a loss function)
    seconds: float
    batch_files: int               # files in the largest forward pass

    @property
    def n_files(self) -> int:
        return int(self.seg_probs.shape[0])


def score_batches(model: nn.Module, batches: Iterable[Batch], *, segments: tuple[int, int],
                  leak_index: int, prob_mode: ProbMode, runtime: Runtime,
                  loss_fn: LossFn | None = None, progress: bool = False,
                  desc: str = "score", total: int | None = None) -> Scores:
    """Leak probability of every segment, file-mean class probabilities, segment argmax.

    ``segments`` is (long, short) segments per file; every batch holds whole files.
    ``model`` runs as given (pass the inference form where it is exact) in eval mode.
    """
    model.eval()
    spf, start = segments[0] * segments[1], time.perf_counter()
    probs, means, preds, loss_sum, most = [], [], [], None, 0
    with torch.inference_mode():
        for x, y, _ in tqdm(batches, desc=desc, unit="batch", total=total, leave=False,
                            disable=not progress):
            x = runtime.to_device(x)                                # (B, 1, M, T)
            with runtime.autocast():
                logits, leak_logit = model(x)                       # (B, C), (B,)
                if loss_fn is not None:
                    y = y.to(runtime.device, non_blocking=True)
                    total_loss = loss_fn(logits, leak_logit, y).total.double() * len(y)
                    loss_sum = total_loss if loss_sum is None else loss_sum + total_loss
            probs.append(segment_leak_prob(logits, leak_logit, leak_index, prob_mode))
            soft = torch.softmax(logits.float(), dim=-1)            # (B, C)
            means.append(soft.view(-1, spf, soft.shape[-1]).mean(dim=1))  # (B / spf, C)
            preds.append(logits.argmax(dim=-1).to(torch.int16))    # (B,)
            most = max(most, len(x) // spf)
    if not probs:
        raise ValueError("score_batches: no batches (an empty split?)")
    seg_probs = torch.cat(probs).float().cpu().numpy()              # (F * L * S,)
    n = len(seg_probs)
    loss = float(loss_sum.double().cpu()) / n if loss_sum is not None else float("nan")
    return Scores(seg_probs=seg_probs.reshape(-1, *segments),
                  class_probs=torch.cat(means).cpu().numpy().astype(np.float64),
                  seg_pred=torch.cat(preds).cpu().numpy().astype(np.int64), loss=loss,
                  seconds=time.perf_counter() - start, batch_files=most)

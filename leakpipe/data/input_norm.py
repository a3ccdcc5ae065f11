"""Per-clip normalisation of the log-mel input (``train.input_norm``): a property of the model.

A clip (one HDF5 row) is (L, S, M, T) log-mel values in dB. A sensor's gain adds one constant to
all of them, a stationary sensor / channel response adds one constant per mel band; both are
removed by subtracting the clip's own means:

* ``none``: the values as stored;
* ``clip_level``: minus the clip's mean over every segment, band and frame (removes gain);
* ``clip_band``: minus each band's mean over the clip's segments and frames (removes gain and
  any stationary per-band response).

The same functions serve training (a per-file offset table built once per split and subtracted
in the batch sources' finish step, ``leakpipe.data.augment``), validation, evaluation and
predict (per clip), so every path normalises alike. The detector file stores the mode.

Means are float64 sums: over float16 data (the stored splits) the sum is exact whatever the
order, so a file's offset is the same bits in the training table and in an evaluation batch.
"""

from __future__ import annotations

from pathlib import Path

import torch

from leakpipe.config import INPUT_NORMS
from leakpipe.data.reader import open_split

NORM_NONE, NORM_LEVEL, NORM_BAND = INPUT_NORMS
OFFSET_BLOCK_FILES = 1024     # files reduced at once when a resident split's offsets are computed


def check_norm(norm: str) -> str:
    if norm not in INPUT_NORMS:
        raise ValueError(f"input_norm {norm!r} is not one of {list(INPUT_NORMS)}")
    return norm


def clip_offsets(clips: torch.Tensor, norm: str) -> torch.Tensor:
    """(F, ..., M, T) clips -> (F, M) float32: what each clip's bands lose (``none``: zeros)."""
    check_norm(norm)
    n_files, n_mels = clips.shape[0], clips.shape[-2]
    if norm == NORM_NONE:
        return torch.zeros((n_files, n_mels), dtype=torch.float32, device=clips.device)
    x = clips.reshape(n_files, -1, n_mels, clips.shape[-1])         # (F, L * S, M, T)
    count = x.shape[1] * x.shape[3]
    band = x.sum(dim=(1, 3), dtype=torch.float64)                     # (F, M)
    if norm == NORM_LEVEL:
        band = band.sum(dim=1, keepdim=True).expand(n_files, n_mels) / n_mels
    return (band / count).float()


def normalize_clips(clips: torch.Tensor, norm: str) -> torch.Tensor:
    """(F, ..., M, T) clips, normalised per clip, float32 (``none``: returned unchanged)."""
    if check_norm(norm) == NORM_NONE:
        return clips
    offsets = clip_offsets(clips, norm)                               # (F, M)
    shape = (len(clips), *[1] * (clips.dim() - 3), clips.shape[-2], 1)
    return clips.float() - offsets.view(shape)


def normalize_segments(x: torch.Tensor, segments_per_file: int, norm: str) -> torch.Tensor:
    """(B, 1, M, T) segments of whole files in file order -> normalised per file, float32."""
    if check_norm(norm) == NORM_NONE:
        return x
    files = x.reshape(-1, segments_per_file, *x.shape[-2:])           # (B / spf, spf, M, T)
    return normalize_clips(files, norm).view(x.shape)


def resident_offsets(segments: torch.Tensor, segments_per_file: int,
                     norm: str) -> torch.Tensor:
    """Offsets of every file of a resident split (N, 1, M, T) -> (F, M) float32 on the CPU."""
    files = segments.view(-1, segments_per_file, *segments.shape[-2:])  # (F, spf, M, T)
    blocks = [clip_offsets(files[a:a + OFFSET_BLOCK_FILES], norm).cpu()
              for a in range(0, len(files), OFFSET_BLOCK_FILES)]
    return torch.cat(blocks) if blocks else torch.zeros((0, segments.shape[-2]))


def split_offsets(path: Path | str, norm: str) -> torch.Tensor:
    """Offsets of every file of an HDF5 split, one chunk-aligned read at a time -> (F, M)."""
    with open_split(path) as split:
        blocks = [clip_offsets(torch.from_numpy(block), norm)        # block (k, L, S, M, T)
                  for _, block in split.iter_chunks()]
        n_mels = split.mel.shape[-2]
    return torch.cat(blocks) if blocks else torch.zeros((0, n_mels))

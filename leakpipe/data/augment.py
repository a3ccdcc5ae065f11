"""The training-batch transform: input normalisation and augmentation, on the device, per batch.

A training source calls ``TrainTransform`` in its finish step, where the batch is already on
the target device (on CUDA one batch ahead on the side stream), so the resident / stream design
and the copy overlap stay as they are. Validation, evaluation and predict never augment; they
normalise per clip with ``leakpipe.data.input_norm``.

Every operation is exact and cheap in the log-mel (dB) domain:

* a gain adds one constant to a file's values, an EQ (spectral tilt in dB per octave plus a
  few smooth bumps over log frequency) adds one offset per band. Both are drawn per file and
  epoch and folded, with the normalisation offsets, into one (files, n_mels) table, so a
  batch pays one gather and one add. A clip normalisation removes exactly what it removes from
  a real recording: ``clip_level`` the gain and the mean of the EQ, ``clip_band`` all of both
  (they are then left out of the table, so they cancel bit for bit);
* mixing adds powers, 10 log10(10^(a/10) + 10^((b + g)/10)), with the segment b of a NON-LEAK
  file drawn from the same batch (no extra reads) and g set for a random segment-to-noise
  ratio (difference of the two segments' mean log-mel); it comes first, before the channel;
* SpecAugment frequency masks set random band ranges to the segment's mean (or min) after
  normalisation. There are no time masks or shifts: a default segment is one frame.

Random draws come from CPU generators keyed by (seed, epoch, rank, batch position), so CPU and
GPU runs draw the same numbers and a resumed epoch draws what the interrupted one would have.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import torch
import torch.nn.functional as F

from leakpipe.config import AugmentConfig, FeatureConfig
from leakpipe.data.feed import seeded_generator
from leakpipe.data.input_norm import (
    NORM_BAND,
    NORM_LEVEL,
    NORM_NONE,
    check_norm,
    resident_offsets,
    split_offsets,
)
from leakpipe.data.reader import open_split
from leakpipe.data.split_info import SplitInfo
from leakpipe.features.mel import band_centers_hz

log = logging.getLogger(__name__)

AUGMENT_KEY = 0x617567     # keeps the augmentation's random streams apart from the orders'
CHANNEL_KEY, BATCH_KEY = 0, 1
DB_TO_LN = math.log(10.0) / 10.0    # dB -> natural log of power
FIXED_DRAWS = 3            # per segment: mix or not, donor, SNR; then 2 per frequency mask
SERIAL_ELEMENTS = 32768    # ATen's grain size: CPU operations on fewer values use one thread


def band_octaves(features: FeatureConfig) -> torch.Tensor:
    """(n_mels,) float64: each band's centre in octaves from the middle band's centre."""
    centres = band_centers_hz(features.n_mels, features.fmin, features.fmax)
    return torch.from_numpy(np.log2(centres / centres[features.n_mels // 2]))


class TrainTransform:
    """Normalises (offsets per file) and, when enabled, augments each training batch.

    ``offsets`` (files, n_mels) come from ``leakpipe.data.input_norm`` (None for ``none``);
    ``augment`` None is no augmentation. ``begin(epoch, start)`` starts a pass at batch
    ``start``; each call then transforms the next batch of that pass.
    """

    def __init__(self, *, n_files: int, offsets: torch.Tensor | None, norm: str,
                 augment: AugmentConfig | None, octaves: torch.Tensor, leak_label: int,
                 seed: int, rank: int, device: torch.device) -> None:
        self.n_files, self.norm = n_files, check_norm(norm)
        self.offsets = offsets
        self.augment = augment if augment is not None and augment.enabled else None
        self.octaves, self.leak_label = octaves.float(), leak_label
        self.seed, self.rank, self.device = seed, rank, torch.device(device)
        self._table: torch.Tensor | None = None    # (files, n_mels) float32 on the device
        self._table_epoch: int | None = None
        self._epoch = self._batch = 0

    def describe(self) -> str:
        """One line: what this transform does to a training batch."""
        a = self.augment
        if a is None:
            return f"input_norm {self.norm}, no augmentation"
        channel = {NORM_NONE: "gain, tilt, bumps", NORM_LEVEL: "tilt, bumps (the norm removes "
                   "the gain)", NORM_BAND: "none left (the norm removes gain and EQ)"}[self.norm]
        return (f"input_norm {self.norm}; channel: {channel}; mix {a.mix_prob:g} at "
                f"{a.mix_snr_min_db:g}..{a.mix_snr_max_db:g} dB SNR; "
                f"{a.freq_masks} frequency masks")

    # -- per pass ------------------------------------------------------------------------------

    def begin(self, epoch: int, start: int) -> None:
        """A pass over ``epoch`` from batch ``start``: (re)build the epoch's per-file table."""
        self._epoch, self._batch = epoch, start
        if self._table_epoch == epoch or (self._table_epoch is not None and self.augment is None):
            return
        table = self.epoch_table(epoch)
        if self._table is not None and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)    # the side stream may still read the old one
        self._table = None if table is None else table.to(self.device)  # synchronous copy
        self._table_epoch = epoch

    def epoch_table(self, epoch: int) -> torch.Tensor | None:
        """(files, n_mels) float32 added to each file's values this epoch; None = nothing."""
        channel = self.channel(epoch)
        if channel is None and self.offsets is None:
            return None
        table = torch.zeros((self.n_files, len(self.octaves)))
        if channel is not None:
            table += channel
        if self.offsets is not None:
            table -= self.offsets
        return table

    def channel(self, epoch: int) -> torch.Tensor | None:
        """(files, n_mels) float32 gain + EQ of this epoch as the normalisation leaves it."""
        a = self.augment
        if a is None or self.norm == NORM_BAND:
            return None
        gen = seeded_generator(self.seed, epoch, AUGMENT_KEY, CHANNEL_KEY)
        u = torch.rand((self.n_files, 2 + 2 * a.eq_bumps), generator=gen)
        octaves = self.octaves                                            # (M,)
        eq = (2 * u[:, 1:2] - 1) * a.tilt_db_per_octave * octaves         # (F, M)
        low, high = float(octaves.min()), float(octaves.max())
        for k in range(a.eq_bumps):
            centre = low + (high - low) * u[:, 2 + 2 * k, None]           # (F, 1)
            peak = (2 * u[:, 3 + 2 * k, None] - 1) * a.eq_bump_db         # (F, 1)
            eq += peak * torch.exp(-0.5 * ((octaves - centre) / a.eq_bump_octaves) ** 2)
        if self.norm == NORM_LEVEL:   # the clip mean takes the gain and the EQ's mean along
            return eq - eq.mean(dim=1, keepdim=True)
        return eq + (2 * u[:, 0:1] - 1) * a.gain_db

    # -- per batch -----------------------------------------------------------------------------

    def __call__(self, x: torch.Tensor, y: torch.Tensor, file_idx: torch.Tensor) -> torch.Tensor:
        """(B, 1, M, T) batch on the device -> transformed, float32.

        On the CPU the rows go in pieces of fewer than ``SERIAL_ELEMENTS`` values: ATen runs
        smaller operations on one thread, and on 2 shared cores one descheduled OpenMP thread
        stalled every larger one (measured under load: 24 ms for 512 x 64 values at once,
        0.9 ms for 511 rows).
        """
        draws = self._draws(len(x)) if self.augment is not None else None
        self._batch += 1
        mixing = draws is not None and self.augment.mix_prob > 0
        donors = self._donors(y, draws) if mixing else None
        if x.device.type != "cpu":
            return self._rows(x, slice(None), file_idx, draws, donors)
        pieces = -(-x.numel() // (SERIAL_ELEMENTS - 1))
        step = -(-len(x) // pieces)
        out = torch.empty(x.shape, dtype=torch.float32)                   # (B, 1, M, T)
        for a in range(0, len(x), step):
            out[a:a + step] = self._rows(x, slice(a, a + step), file_idx, draws, donors)
        return out

    def _rows(self, x: torch.Tensor, rows: slice, file_idx: torch.Tensor,
              draws: torch.Tensor | None,
              donors: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        """Rows ``rows`` of the batch: mix, then the per-file table, then the masks."""
        out = x[rows].float()                                             # (b, 1, M, T)
        if donors is not None:
            noise = x.index_select(0, donors[0][rows]).float()            # (b, 1, M, T)
            out = self._mix(out, noise, draws[rows], donors[1])
        if self._table is not None:
            out = out + self._table.index_select(0, file_idx[rows])[:, None, :, None]
        if draws is not None and self.augment.freq_masks > 0:
            out = self._mask(out, draws[rows, FIXED_DRAWS:])
        return out

    def _draws(self, n: int) -> torch.Tensor:
        """(n, FIXED_DRAWS + 2 * freq_masks) uniforms of this batch, on the device."""
        gen = seeded_generator(self.seed, self._epoch, AUGMENT_KEY, BATCH_KEY,
                               self.rank, self._batch)
        u = torch.rand((n, FIXED_DRAWS + 2 * self.augment.freq_masks), generator=gen)
        return u.to(self.device, non_blocking=True)

    def _donors(self, y: torch.Tensor,
                draws: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's noise row: a random NON-LEAK row of the batch; and whether there is one.

        No host sync: the non-leak rows are sorted first and indexed by a uniform draw.
        """
        leak = y == self.leak_label                                       # (B,)
        order = torch.argsort(leak.to(torch.uint8), stable=True)         # non-leak first
        n_noise = (~leak).sum()                                           # on the device
        pick = torch.minimum((draws[:, 1] * n_noise).long(), (n_noise - 1).clamp(min=0))
        return order.index_select(0, pick), n_noise > 0

    def _mix(self, x: torch.Tensor, noise: torch.Tensor, draws: torch.Tensor,
             has_noise: torch.Tensor) -> torch.Tensor:
        """Power-add ``noise`` (b, 1, M, T) at the drawn SNR to the drawn share of rows."""
        a = self.augment
        snr = a.mix_snr_min_db + (a.mix_snr_max_db - a.mix_snr_min_db) * draws[:, 2]
        gain = x.mean(dim=(1, 2, 3)) - noise.mean(dim=(1, 2, 3)) - snr   # (b,) dB
        apply = (draws[:, 0] < a.mix_prob) & has_noise                    # (b,)
        gain = torch.where(apply, gain, -math.inf)    # unmixed rows add 10 log10(1 + 0) = 0
        # 10 log10(10^(x/10) + 10^((n + g)/10)) = x + 10 log10(1 + 10^((n + g - x)/10)):
        # one softplus with beta = ln(10) / 10
        relative = noise.sub_(x).add_(gain[:, None, None, None])         # (b, 1, M, T)
        return x + F.softplus(relative, beta=DB_TO_LN)

    def _mask(self, x: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
        """Set ``freq_masks`` random band ranges per segment to its mean / min over bands."""
        a, n_mels = self.augment, x.shape[2]
        widest = min(a.freq_mask_bands, n_mels)
        band = torch.arange(n_mels, device=x.device)                      # (M,)
        masked = torch.zeros((len(x), n_mels), dtype=torch.bool, device=x.device)
        for k in range(a.freq_masks):
            width = (draws[:, 2 * k] * (widest + 1)).long().clamp(max=widest)       # (B,)
            first = (draws[:, 2 * k + 1] * (n_mels - width + 1)).long()             # (B,)
            first = torch.minimum(first, n_mels - width)
            offset = band - first[:, None]                                          # (B, M)
            masked |= (offset >= 0) & (offset < width[:, None])
        fill = (x.mean(dim=2, keepdim=True) if a.freq_mask_value == "mean"
                else x.amin(dim=2, keepdim=True))                         # (B, 1, 1, T)
        return torch.where(masked[:, None, :, None], fill, x)


def make_transform(info: SplitInfo, *, norm: str, augment: AugmentConfig | None, seed: int,
                   rank: int = 0, device: torch.device | str = "cpu",
                   segments: torch.Tensor | None = None) -> TrainTransform | None:
    """The transform of a training source over ``info``'s split; None when it changes nothing.

    ``segments`` (N, 1, M, T) is the split when resident (its offsets are computed from it);
    otherwise the normalisation offsets take one chunk-aligned pass over the HDF5 file.
    """
    enabled = augment is not None and augment.enabled
    if check_norm(norm) == NORM_NONE and not enabled:
        return None
    offsets = None
    if norm != NORM_NONE:
        offsets = (split_offsets(info.path, norm) if segments is None
                   else resident_offsets(segments, info.segments_per_file, norm))
    with open_split(info.path) as split:
        features = split.features
    transform = TrainTransform(n_files=info.n_files, offsets=offsets, norm=norm,
                               augment=augment, octaves=band_octaves(features),
                               leak_label=info.leak_label, seed=seed, rank=rank,
                               device=torch.device(device))
    log.info("training batches: %s", transform.describe())
    return transform

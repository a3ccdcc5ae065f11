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
* mixing adds powers with a NON-LEAK segment of the same batch at a random segment-to-noise
  ratio (``leakpipe.data.mix_and_mask``); it comes first, before the channel;
* band limiting (``band_limit_prob``) makes a file look as if its logger had recorded at a
  lower rate: its lost bands become the resampler's image the build makes of such a recording,
  and its offsets are recomputed as a band-limited file's (``leakpipe.data.band_limiting``,
  which builds the epoch's tables). One gather, one add and one maximum per batch; with
  ``band_limit_prob`` 0 none of them runs and nothing is drawn for it;
* SpecAugment frequency masks set random band ranges to the segment's mean (or min) after
  normalisation (``leakpipe.data.mix_and_mask``). There are no time masks or shifts: a default
  segment is one frame.

Random draws come from CPU generators keyed by (seed, epoch, rank, batch position), so CPU and
GPU runs draw the same numbers and a resumed epoch draws what the interrupted one would have.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from leakpipe.config import AugmentConfig, FeatureConfig
from leakpipe.data.band_limiting import BandLimit, limited_tables, measure_band_limit, whole_tables
from leakpipe.data.feed import seeded_generator
from leakpipe.data.input_norm import (
    NORM_BAND,
    NORM_LEVEL,
    NORM_NONE,
    check_norm,
    resident_offsets,
    split_offsets,
)
from leakpipe.data.mix_and_mask import donors, mask, mix
from leakpipe.data.reader import open_split
from leakpipe.data.split_info import SplitInfo
from leakpipe.features.mel import band_centers_hz

log = logging.getLogger(__name__)

AUGMENT_KEY = 0x617567     # keeps the augmentation's random streams apart from the orders'
CHANNEL_KEY, BATCH_KEY, BAND_KEY = 0, 1, 2
FIXED_DRAWS = 3            # per segment: mix or not, donor, SNR; then 2 per frequency mask
SERIAL_ELEMENTS = 32768    # ATen's grain size: CPU operations on fewer values use one thread


def band_octaves(features: FeatureConfig) -> torch.Tensor:
    """(n_mels,) float64: each band's centre in octaves from the middle band's centre."""
    centres = band_centers_hz(features.n_mels, features.fmin, features.fmax)
    return torch.from_numpy(np.log2(centres / centres[features.n_mels // 2]))


class TrainTransform:
    """Normalises (offsets per file) and, when enabled, augments each training batch.

    ``offsets`` (files, n_mels) come from ``leakpipe.data.input_norm`` (None for ``none``);
    ``augment`` None is no augmentation; ``band_limit`` is needed when its ``band_limit_prob``
    is above 0 (``make_transform`` measures it). ``begin(epoch, start)`` starts a pass at batch
    ``start``; each call then transforms the next batch of that pass.
    """

    def __init__(self, *, n_files: int, offsets: torch.Tensor | None, norm: str,
                 augment: AugmentConfig | None, octaves: torch.Tensor, leak_label: int,
                 seed: int, rank: int, device: torch.device,
                 band_limit: BandLimit | None = None) -> None:
        self.n_files, self.norm = n_files, check_norm(norm)
        self.offsets = offsets
        self.augment = augment if augment is not None and augment.enabled else None
        self.octaves, self.leak_label = octaves.float(), leak_label
        self.seed, self.rank, self.device = seed, rank, torch.device(device)
        limiting = self.augment is not None and self.augment.band_limit_prob > 0
        if limiting and (band_limit is None or (band_limit.band_means is None
                                                and self.norm != NORM_NONE)):
            raise ValueError("band_limit_prob > 0 needs the measured empty bands and, unless "
                             "input_norm is none, the files' band means (make_transform)")
        self.band_limit = band_limit if limiting else None
        self._table: torch.Tensor | None = None    # (files, n_mels) float32 on the device
        self._bands: tuple[torch.Tensor, torch.Tensor] | None = None  # gather / floor tables
        self._table_epoch: int | None = None
        self._epoch = self._batch = 0

    def describe(self) -> str:
        """One line: what this transform does to a training batch."""
        a = self.augment
        if a is None:
            return f"input_norm {self.norm}, no augmentation"
        channel = {NORM_NONE: "gain, tilt, bumps", NORM_LEVEL: "tilt, bumps (the norm removes "
                   "the gain)", NORM_BAND: "none left (the norm removes gain and EQ)"}[self.norm]
        limit = (f"; band limit {a.band_limit_prob:g} of files at "
                 f"{'/'.join(f'{hz:g}' for hz in a.band_limit_hz)} Hz"
                 if self.band_limit is not None else "")
        return (f"input_norm {self.norm}; channel: {channel}; mix {a.mix_prob:g} at "
                f"{a.mix_snr_min_db:g}..{a.mix_snr_max_db:g} dB SNR{limit}; "
                f"{a.freq_masks} frequency masks")

    # -- per pass ------------------------------------------------------------------------------

    def begin(self, epoch: int, start: int) -> None:
        """A pass over ``epoch`` from batch ``start``: (re)build the epoch's per-file table."""
        self._epoch, self._batch = epoch, start
        if self._table_epoch == epoch or (self._table_epoch is not None and self.augment is None):
            return
        table = self.epoch_table(epoch)
        bands = None
        if self.band_limit is not None:
            table, bands = self.limit_bands(epoch, table)
        if self._table is not None and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)    # the side stream may still read the old one
        self._table = None if table is None else table.to(self.device)  # synchronous copy
        self._bands = None if bands is None else (bands[0].to(self.device),
                                                  bands[1].to(self.device))
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
        if self.augment is None or self.norm == NORM_BAND:
            return None
        eq, gain = self._channel_draws(epoch)
        if self.norm == NORM_LEVEL:   # the clip mean takes the gain and the EQ's mean along
            return eq - eq.mean(dim=1, keepdim=True)
        return eq + gain

    def _channel_draws(self, epoch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """This epoch's EQ (files, n_mels) and gain (files, 1), float32 dB, as drawn."""
        a = self.augment
        gen = seeded_generator(self.seed, epoch, AUGMENT_KEY, CHANNEL_KEY)
        u = torch.rand((self.n_files, 2 + 2 * a.eq_bumps), generator=gen)
        octaves = self.octaves                                            # (M,)
        eq = (2 * u[:, 1:2] - 1) * a.tilt_db_per_octave * octaves         # (F, M)
        low, high = float(octaves.min()), float(octaves.max())
        for k in range(a.eq_bumps):
            centre = low + (high - low) * u[:, 2 + 2 * k, None]           # (F, 1)
            peak = (2 * u[:, 3 + 2 * k, None] - 1) * a.eq_bump_db         # (F, 1)
            eq += peak * torch.exp(-0.5 * ((octaves - centre) / a.eq_bump_octaves) ** 2)
        return eq, (2 * u[:, 0:1] - 1) * a.gain_db

    def band_limited(self, epoch: int) -> torch.Tensor:
        """(files,) int64: the ``band_limit_hz`` index each file is limited to this epoch, -1
        for a file left whole (a share ``band_limit_prob`` of them limited, drawn per file)."""
        a = self.augment
        gen = seeded_generator(self.seed, epoch, AUGMENT_KEY, BAND_KEY)
        u = torch.rand((self.n_files, 2), generator=gen)
        which = (u[:, 1] * len(a.band_limit_hz)).long().clamp(max=len(a.band_limit_hz) - 1)
        return torch.where(u[:, 0] < a.band_limit_prob, which, -1)

    def limit_bands(self, epoch: int, table: torch.Tensor | None
                    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """The epoch's ``table`` with the band-limited files' rows, and the (files, n_mels)
        tables of the band each output band is gathered from (int64) and of its floor (float32,
        -inf where there is none): ``leakpipe.data.band_limiting.limited_tables`` of this
        epoch's draws (which files, and their channel)."""
        which = self.band_limited(epoch)                                  # (F,)
        if not bool((which >= 0).any()):
            return whole_tables(table, self.n_files, len(self.octaves))
        eq, gain = self._channel_draws(epoch)
        return limited_tables(table, which, eq + gain, self.band_limit, self.norm)

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
        noise_rows = donors(y, draws, self.leak_label) if mixing else None
        if x.device.type != "cpu":
            return self._rows(x, slice(None), file_idx, draws, noise_rows)
        pieces = -(-x.numel() // (SERIAL_ELEMENTS - 1))
        step = -(-len(x) // pieces)
        out = torch.empty(x.shape, dtype=torch.float32)                   # (B, 1, M, T)
        for a in range(0, len(x), step):
            out[a:a + step] = self._rows(x, slice(a, a + step), file_idx, draws, noise_rows)
        return out

    def _rows(self, x: torch.Tensor, rows: slice, file_idx: torch.Tensor,
              draws: torch.Tensor | None,
              noise_rows: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        """Rows ``rows`` of the batch: mix, band limit (gather), the per-file table, band
        limit (floor), then the masks."""
        out = x[rows].float()                                             # (b, 1, M, T)
        if noise_rows is not None:
            noise = x.index_select(0, noise_rows[0][rows]).float()        # (b, 1, M, T)
            out = mix(out, noise, draws[rows], noise_rows[1], self.augment)
        if self._bands is not None:
            pick = self._bands[0].index_select(0, file_idx[rows])         # (b, M)
            out = torch.gather(out, 2, pick[:, None, :, None].expand(out.shape))
        if self._table is not None:
            out = out + self._table.index_select(0, file_idx[rows])[:, None, :, None]
        if self._bands is not None:
            floor = self._bands[1].index_select(0, file_idx[rows])        # (b, M)
            out = torch.maximum(out, floor[:, None, :, None])
        if draws is not None and self.augment.freq_masks > 0:
            out = mask(out, draws[rows, FIXED_DRAWS:], self.augment)
        return out

    def _draws(self, n: int) -> torch.Tensor:
        """(n, FIXED_DRAWS + 2 * freq_masks) uniforms of this batch, on the device."""
        gen = seeded_generator(self.seed, self._epoch, AUGMENT_KEY, BATCH_KEY,
                               self.rank, self._batch)
        u = torch.rand((n, FIXED_DRAWS + 2 * self.augment.freq_masks), generator=gen)
        return u.to(self.device, non_blocking=True)


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
    band_limit = None
    if enabled and augment.band_limit_prob > 0:
        band_limit = measure_band_limit(info, features, augment, norm, offsets, segments)
    transform = TrainTransform(n_files=info.n_files, offsets=offsets, norm=norm,
                               augment=augment, octaves=band_octaves(features),
                               leak_label=info.leak_label, seed=seed, rank=rank,
                               device=torch.device(device), band_limit=band_limit)
    log.info("training batches: %s", transform.describe())
    return transform

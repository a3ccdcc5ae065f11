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
* band limiting (``band_limit_prob``) makes a file look as if its logger had recorded at a
  lower rate: its bands above the drawn Nyquist frequency become what the build makes of such
  a recording, measured through the build's own path (``leakpipe.data.empty_band``): not
  a constant floor but the resampler's attenuated mirror image of the band below, some 60 dB
  down, floored at the log floor. It acts on the raw values, as the logger and the resampler
  do: after the mixing (a logger band-limits whatever it records) and with the file's channel
  (the image carries the gain and EQ of the band it mirrors), and the file is then normalised
  as a band-limited file would be. The stored per-file offsets are those of the full-band file
  and would be wrong (under ``clip_level`` by some 15 dB for 2048 Hz at the default features:
  20 of 64 bands about 49 dB lower on average), so a band-limited file's offsets are
  recomputed from its band means with the replaced bands in: its row of the table holds its
  channel less those offsets, a second table names the band each output band is gathered
  from, and a third its floor (the log floor less the offset). One gather, one add and one
  maximum per batch; with ``band_limit_prob`` 0 none of them runs and nothing is drawn for it;
* SpecAugment frequency masks set random band ranges to the segment's mean (or min) after
  normalisation. There are no time masks or shifts: a default segment is one frame.

Random draws come from CPU generators keyed by (seed, epoch, rank, batch position), so CPU and
GPU runs draw the same numbers and a resumed epoch draws what the interrupted one would have.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from leakpipe.config import AugmentConfig, FeatureConfig
from leakpipe.data.empty_band import EmptyBands, empty_bands
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
CHANNEL_KEY, BATCH_KEY, BAND_KEY = 0, 1, 2
DB_TO_LN = math.log(10.0) / 10.0    # dB -> natural log of power
FIXED_DRAWS = 3            # per segment: mix or not, donor, SNR; then 2 per frequency mask
SERIAL_ELEMENTS = 32768    # ATen's grain size: CPU operations on fewer values use one thread


def band_octaves(features: FeatureConfig) -> torch.Tensor:
    """(n_mels,) float64: each band's centre in octaves from the middle band's centre."""
    centres = band_centers_hz(features.n_mels, features.fmin, features.fmax)
    return torch.from_numpy(np.log2(centres / centres[features.n_mels // 2]))


@dataclass(frozen=True)
class BandLimit:
    """What band-limiting training files takes: the empty bands of each ``band_limit_hz``
    (measured for the split's features) and, unless the norm is ``none``, each file's band
    means (F, M) float32 (the ``clip_band`` offsets), from which a band-limited file's own
    offsets follow."""

    bands: tuple[EmptyBands, ...]
    band_means: torch.Tensor | None


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
        -inf where there is none).

        A band-limited file's value in band m is its raw value there (stored, mixed, plus the
        channel) for a band it keeps, ``max(raw[source[m]] + atten_db[m], floor_db)`` for one it
        loses (``EmptyBands``), less its offset as a band-limited file: its band means with the
        lost bands' means replaced by ``max(mean[source[m]] + atten_db[m], floor_db)`` (the
        floor of the mean for the mean of the floor), averaged over the bands for
        ``clip_level``. Its kept bands then carry the gain under ``clip_level``: the empty
        bands do not follow it where the floor holds them, as in a quiet real recording.
        """
        n_files, n_mels = self.n_files, len(self.octaves)
        table = torch.zeros((n_files, n_mels)) if table is None else table.clone()
        source = torch.arange(n_mels).repeat(n_files, 1)                  # (F, M)
        floor = torch.full((n_files, n_mels), -math.inf)                  # (F, M)
        which = self.band_limited(epoch)                                  # (F,)
        if not bool((which >= 0).any()):
            return table, (source, floor)
        eq, gain = self._channel_draws(epoch)
        channel = eq + gain                                               # (F, M) raw dB
        for k, bands in enumerate(self.band_limit.bands):
            files = torch.nonzero(which == k).flatten()                   # (n,)
            if len(files) and bands.first < n_mels:
                rows = self._limited_rows(bands, files, channel[files])
                table[files], source[files], floor[files] = rows
        return table, (source, floor)

    def _limited_rows(self, bands: EmptyBands, files: torch.Tensor, channel: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Table, source and floor rows (n, M) of ``files`` limited to ``bands``."""
        src = torch.from_numpy(bands.source)                              # (M,)
        lost = torch.from_numpy(bands.replaced)                           # (M,) bool
        image = channel[:, src] + torch.from_numpy(bands.atten_db)        # (n, M)
        raw = torch.where(lost, image, channel)         # added to the gathered stored value
        if self.norm == NORM_NONE:
            offset = torch.zeros_like(raw)
        else:
            means = self.band_limit.band_means[files].float()             # (n, M)
            band = torch.where(lost, torch.clamp(means[:, src] + image, min=bands.floor_db),
                               means + channel)
            offset = band if self.norm == NORM_BAND else \
                band.mean(dim=1, keepdim=True).expand_as(band)
        rows = raw - offset
        if self.norm == NORM_BAND:      # a kept band: exactly the full-band file's (-its mean)
            rows = torch.where(lost, rows, -self.band_limit.band_means[files].float())
        floor = torch.where(lost, bands.floor_db - offset, -math.inf)
        return rows, src.expand_as(rows), floor

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
        """Rows ``rows`` of the batch: mix, band limit (gather), the per-file table, band
        limit (floor), then the masks."""
        out = x[rows].float()                                             # (b, 1, M, T)
        if donors is not None:
            noise = x.index_select(0, donors[0][rows]).float()            # (b, 1, M, T)
            out = self._mix(out, noise, draws[rows], donors[1])
        if self._bands is not None:
            pick = self._bands[0].index_select(0, file_idx[rows])         # (b, M)
            out = torch.gather(out, 2, pick[:, None, :, None].expand(out.shape))
        if self._table is not None:
            out = out + self._table.index_select(0, file_idx[rows])[:, None, :, None]
        if self._bands is not None:
            floor = self._bands[1].index_select(0, file_idx[rows])        # (b, M)
            out = torch.maximum(out, floor[:, None, :, None])
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
    band_limit = None
    if enabled and augment.band_limit_prob > 0:
        band_limit = _band_limit(info, features, augment, norm, offsets, segments)
    transform = TrainTransform(n_files=info.n_files, offsets=offsets, norm=norm,
                               augment=augment, octaves=band_octaves(features),
                               leak_label=info.leak_label, seed=seed, rank=rank,
                               device=torch.device(device), band_limit=band_limit)
    log.info("training batches: %s", transform.describe())
    return transform


def _band_limit(info: SplitInfo, features: FeatureConfig, augment: AugmentConfig, norm: str,
                offsets: torch.Tensor | None, segments: torch.Tensor | None) -> BandLimit:
    """The empty bands of each ``band_limit_hz`` for the split's features, and the files' band
    means unless the norm is ``none`` (under ``clip_band`` they are its offsets)."""
    bands = tuple(empty_bands(features, hz) for hz in augment.band_limit_hz)
    for b in bands:
        if b.first >= features.n_mels:
            log.warning("train.augment.band_limit_hz %g Hz leaves no band of the model's empty "
                        "(fmax %g Hz at %d Hz): files limited to it stay as they are",
                        b.nyquist_hz, features.fmax, features.sample_rate)
    means = offsets if norm == NORM_BAND else None
    if norm == NORM_LEVEL:
        means = (split_offsets(info.path, NORM_BAND) if segments is None
                 else resident_offsets(segments, info.segments_per_file, NORM_BAND))
    return BandLimit(bands, means)

"""Band limiting of training files (``train.augment.band_limit_prob``): the per-file tables that
make a file look as if its logger had recorded at a lower rate.

A band-limited file's bands above the drawn Nyquist frequency become what the build makes of
such a recording, measured through the build's own path (``leakpipe.data.empty_band``): not a
constant floor but the resampler's attenuated mirror image of the band below, some 60 dB down,
floored at the log floor. It acts on the raw values, as the logger and the resampler do: after
the mixing (a logger band-limits whatever it records) and with the file's channel (the image
carries the gain and EQ of the band it mirrors), and the file is then normalised as a
band-limited file would be. The stored per-file offsets are those of the full-band file and
would be wrong (under ``clip_level`` by some 15 dB for 2048 Hz at the default features: 20 of
64 bands about 49 dB lower on average), so a band-limited file's offsets are recomputed from
its band means with the replaced bands in: its row of the epoch's table holds its channel less
those offsets, a second table names the band each output band is gathered from, and a third
its floor (the log floor less the offset). ``leakpipe.data.augment`` draws which files are
limited and applies the tables: one gather, one add and one maximum per batch.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch

from leakpipe.config import AugmentConfig, FeatureConfig
from leakpipe.data.empty_band import EmptyBands, empty_bands
from leakpipe.data.input_norm import (
    NORM_BAND,
    NORM_LEVEL,
    NORM_NONE,
    resident_offsets,
    split_offsets,
)
from leakpipe.data.split_info import SplitInfo

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BandLimit:
    """What band-limiting training files takes: the empty bands of each ``band_limit_hz``
    (measured for the split's features) and, unless the norm is ``none``, each file's band
    means (F, M) float32 (the ``clip_band`` offsets), from which a band-limited file's own
    offsets follow."""

    bands: tuple[EmptyBands, ...]
    band_means: torch.Tensor | None


def whole_tables(table: torch.Tensor | None, n_files: int, n_mels: int
                 ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """The epoch's ``table`` (zeros for None, else a copy) with every file left whole: each
    band gathered from itself, no floor (-inf)."""
    table = torch.zeros((n_files, n_mels)) if table is None else table.clone()
    source = torch.arange(n_mels).repeat(n_files, 1)                  # (F, M)
    floor = torch.full((n_files, n_mels), -math.inf)                  # (F, M)
    return table, (source, floor)


def limited_tables(table: torch.Tensor | None, which: torch.Tensor, channel: torch.Tensor,
                   band_limit: BandLimit, norm: str
                   ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """The epoch's ``table`` with the band-limited files' rows, and the (files, n_mels) tables
    of the band each output band is gathered from (int64) and of its floor (float32, -inf where
    there is none).

    ``which`` (files,) is the ``band_limit.bands`` index each file is limited to (-1: whole),
    ``channel`` (files, n_mels) each file's gain + EQ as drawn (raw dB). A band-limited file's
    value in band m is its raw value there (stored, mixed, plus the channel) for a band it
    keeps, ``max(raw[source[m]] + atten_db[m], floor_db)`` for one it loses (``EmptyBands``),
    less its offset as a band-limited file: its band means with the lost bands' means replaced
    by ``max(mean[source[m]] + atten_db[m], floor_db)`` (the floor of the mean for the mean of
    the floor), averaged over the bands for ``clip_level``. Its kept bands then carry the gain
    under ``clip_level``: the empty bands do not follow it where the floor holds them, as in a
    quiet real recording.
    """
    n_mels = channel.shape[1]
    table, (source, floor) = whole_tables(table, len(which), n_mels)
    for k, bands in enumerate(band_limit.bands):
        files = torch.nonzero(which == k).flatten()                   # (n,)
        if len(files) and bands.first < n_mels:
            rows = limited_rows(bands, files, channel[files], band_limit, norm)
            table[files], source[files], floor[files] = rows
    return table, (source, floor)


def limited_rows(bands: EmptyBands, files: torch.Tensor, channel: torch.Tensor,
                 band_limit: BandLimit, norm: str
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Table, source and floor rows (n, M) of ``files`` limited to ``bands``."""
    src = torch.from_numpy(bands.source)                              # (M,)
    lost = torch.from_numpy(bands.replaced)                           # (M,) bool
    image = channel[:, src] + torch.from_numpy(bands.atten_db)        # (n, M)
    raw = torch.where(lost, image, channel)         # added to the gathered stored value
    if norm == NORM_NONE:
        offset = torch.zeros_like(raw)
    else:
        means = band_limit.band_means[files].float()                  # (n, M)
        band = torch.where(lost, torch.clamp(means[:, src] + image, min=bands.floor_db),
                           means + channel)
        offset = band if norm == NORM_BAND else \
            band.mean(dim=1, keepdim=True).expand_as(band)
    rows = raw - offset
    if norm == NORM_BAND:      # a kept band: exactly the full-band file's (-its mean)
        rows = torch.where(lost, rows, -band_limit.band_means[files].float())
    floor = torch.where(lost, bands.floor_db - offset, -math.inf)
    return rows, src.expand_as(rows), floor


def measure_band_limit(info: SplitInfo, features: FeatureConfig, augment: AugmentConfig,
                       norm: str, offsets: torch.Tensor | None,
                       segments: torch.Tensor | None) -> BandLimit:
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

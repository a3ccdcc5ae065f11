"""Domain check: is a recording like the ones the detector was trained on? Pure numpy.

A detector trained on one network answers every recording with the same confidence, also one
from a sensor, a logger or a site it never heard. This module describes the training
distribution compactly and measures how far one recording lies from it, so predict can mark
``domain: shifted`` next to its decision (the model's call is unchanged; the verdict a person
reads becomes UNCERTAIN, ``leakpipe.decision.verdict``). Many recordings taken together are
checked by ``leakpipe.decision.domain_set``.

**Profile.** A recording is summarised by its band profile ``p`` (M,): the mean log-mel (dB)
of each band over all its segments and frames (``band_profile``). Two parts of it are compared
with the training recordings' profiles, each physically readable:

- **level** ``o``: the median over bands of ``p - m``, where ``m`` (M,) is the training
  recordings' per-band median profile, i.e. how many dB louder or quieter the recording is than
  a typical training recording, robust to a few odd bands and to a missing upper band. Scored
  as a robust z (median and scaled MAD of the training recordings' ``o``). A network that does
  not see the absolute level (``input_norm`` other than ``none``) is not shifted by it:
  ``uses_level`` false leaves the level out of the distance.
- **shape** ``r = p - m - o`` (M,): the spectral shape relative to the typical training one.
  Its distance is a low-rank Mahalanobis (``leakpipe.decision.lowrank``): the ``AXES`` leading
  principal axes of the training shapes (tilt, low-band weight, ...) with their variances, and
  the per-band variance left off those axes. The axes capture the strong band-to-band
  correlation a per-band z ignores (a shape the training recordings never combine is far even
  when every band is within its own range), and a few times M floats keep the description
  compact enough for the detector file.

**Distance.** Both parts are put on one scale by the training recordings' own percentile
``SCALE_QUANTILE`` of each (``shape_scale``, ``level_scale``): ``D = max(d_shape / shape_scale,
|z_level| / level_scale)``, so D = 1 is the edge of that range of the training recordings in
the worse of the two. A recording is ``shifted`` when D exceeds the threshold, or when mel bands'
centres lie above its own Nyquist frequency (its native rate cannot fill the model's band,
whatever D says: a quiet recording's empty upper bands may sit near the training floor) that
the training recordings did reach at their own rates: ``train_band_hz``, the Nyquist frequency
``TRAIN_BAND_QUANTILE`` of them reached or exceeded. A band training lacked too is no shift: a
detector trained on 4096 Hz loggers at an 8192 Hz model rate calls its own loggers in domain,
in evaluate (which reads the split's native rates) and in predict alike. A reference stored
without ``train_band_hz`` counts every band above the recording's Nyquist frequency.
**Threshold**: on the val recordings (sites the reference never saw), the ``ceil(q n)``-th
smallest D with ``q = TARGET_QUANTILE``, so about a share ``1 - q`` of val recordings exceed it
(ties aside). With fewer than ``1 / (1 - q)`` val recordings that order statistic is the val
maximum: no val recording exceeds it, and the rate the rule aims at is not resolvable; the
threshold is then capped at that maximum (``fit_threshold`` says so).

**Reason** of a shifted recording, the main one, in this order:

- ``band``: the recording's band is narrower than the model's: mel bands whose centre lies
  above the recording's own Nyquist frequency (known from its native sample rate), or a run of
  top bands ``EMPTY_DB`` below the training shape at the level of the recording's lower half of
  bands (an upsampled recording whose rate no longer shows it). A logger recording at half the
  model's rate has nothing in the model's upper half of frequencies; its empty upper bands make
  the shape far.
- ``level``: the level part is the larger of the two scaled parts (absolute level outside the
  training range: another gain, another sensor sensitivity);
- ``shape``: otherwise (another pipe, sensor response, or noise the training never had).

Known blind spots (measured in docs/results/domain-check.md): a shift that stays within the
training recordings' own variety is not flagged by one recording's profile, such as a machine
switching a narrow band on and off near every sensor: its time-averaged bump lies within the
training sites' spectral variety (two further parts measured for it, the band switching and the
network's penultimate-layer embedding, were not adopted: ``benchmarks/studies/domain_probes.py``). A
sensor mount ringing in the leak band makes a no-leak recording look like a leak recording,
which training has: no single recording need be flagged, which is what the set check
(``domain_set``) is for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from leakpipe.decision.lowrank import LowRank, fit_lowrank, lowrank_distance

AXES = 4                  # principal axes of the training shapes kept in the reference
TARGET_QUANTILE = 0.99    # share of val recordings at or below the threshold (about 1 % over)
SCALE_QUANTILE = 99.0     # percentile of each part over training recordings that scales it to 1
EMPTY_DB = 30.0           # a top band this far below the training shape counts as missing
MAD_TO_SD = 1.4826        # median absolute deviation -> standard deviation of a normal
MIN_VARIANCE = 0.25       # dB^2 floor of a band's residual variance (about 0.5 dB)
MIN_LEVEL_SD = 0.5        # dB floor of the level's robust standard deviation
IN, SHIFTED, UNKNOWN = "in", "shifted", "unknown"
BAND, LEVEL, SHAPE = "band", "level", "shape"
# the training band: a Nyquist frequency at least this share of training recordings reached
# (a few recordings at a lower rate do not make their missing bands normal)
TRAIN_BAND_QUANTILE = 0.95
_ARRAYS = ("band_median", "shape_mean", "shape_axes", "axis_var", "resid_var")
_SCALARS = ("level_median", "level_sd", "level_low", "level_high", "shape_scale",
            "level_scale", "threshold", "quantile")


@dataclass(frozen=True)
class DomainReference:
    """The training distribution of band profiles and the threshold set on val."""

    band_median: np.ndarray   # (M,) dB, training recordings' per-band median profile m
    shape_mean: np.ndarray    # (M,) dB, mean training shape r
    shape_axes: np.ndarray    # (AXES, M) unit principal axes of the training shapes
    axis_var: np.ndarray      # (AXES,) dB^2, variance along each axis
    resid_var: np.ndarray     # (M,) dB^2, per-band variance off the axes
    level_median: float       # dB, median training level o
    level_sd: float           # dB, robust sd of the training level
    level_low: float          # dB, 0.5th percentile of the training level (reported range)
    level_high: float         # dB, 99.5th percentile
    shape_scale: float        # training 99th percentile of d_shape
    level_scale: float        # training 99th percentile of |z_level|
    uses_level: bool = True   # the network sees the absolute level (input_norm none)
    threshold: float = math.inf   # on D, set on val (inf: not set)
    quantile: float = TARGET_QUANTILE
    fitted_on: str = ""       # "<n> train recordings; threshold on <v> val recordings"
    val_distances: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (V,) sorted D
    #                           of the val recordings (``domain_set``); empty: not kept
    train_band_hz: float | None = None   # Hz: the band most training recordings reached at
    #                           their own rates (None: not known, every band counts)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: [float(v) for v in np.ravel(getattr(self, k))]
                               for k in _ARRAYS}
        out.update({k: float(getattr(self, k)) for k in _SCALARS})
        out.update(uses_level=bool(self.uses_level), fitted_on=str(self.fitted_on),
                   axes=int(self.shape_axes.shape[0]),
                   val_distances=[float(v) for v in self.val_distances])
        if self.train_band_hz is not None:
            out["train_band_hz"] = float(self.train_band_hz)
        return out

    @classmethod
    def from_dict(cls, raw: Any) -> DomainReference:
        """The stored form; ``ValueError`` naming what is wrong. ``val_distances`` may be
        absent (a reference stored before the set check: no set check then), and so may
        ``train_band_hz`` (stored before it: every band above a recording's Nyquist counts)."""
        optional = {"val_distances", "train_band_hz"}
        expected = {*_ARRAYS, *_SCALARS, "uses_level", "fitted_on", "axes", *optional}
        if not isinstance(raw, dict) or not set(raw) <= expected \
                or not (expected - optional) <= set(raw):
            raise ValueError(f"fields must be {sorted(expected)}")
        arrays = {k: np.asarray(raw[k], dtype=np.float64) for k in _ARRAYS}
        m = arrays["band_median"].size
        arrays["shape_axes"] = arrays["shape_axes"].reshape(int(raw["axes"]), m)
        if any(arrays[k].size != m for k in ("shape_mean", "resid_var")):
            raise ValueError(f"band arrays must all have {m} values")
        try:
            val = np.sort(np.asarray(raw.get("val_distances", []), dtype=np.float64))
        except (TypeError, ValueError):
            val = np.full(1, np.nan)
        if val.ndim != 1 or not np.all(np.isfinite(val)):
            raise ValueError("val_distances must be a list of finite numbers")
        band = raw.get("train_band_hz")
        if band is not None and not (isinstance(band, int | float) and band > 0):
            raise ValueError("train_band_hz must be a positive number of Hz")
        return cls(**arrays, **{k: float(raw[k]) for k in _SCALARS},
                   uses_level=bool(raw["uses_level"]), fitted_on=str(raw["fitted_on"]),
                   val_distances=val, train_band_hz=None if band is None else float(band))


@dataclass(frozen=True)
class DomainCheck:
    """One recording's answer: ``in`` / ``shifted`` / ``unknown``, D and the main reason."""

    domain: str
    distance: float           # D (NaN: unknown)
    reason: str               # "" when in; "band: ...", "level: ...", "shape: ..."


UNKNOWN_CHECK = DomainCheck(UNKNOWN, math.nan, "")


def band_profile(mel: np.ndarray) -> np.ndarray:
    """(..., M, T) log-mel dB -> (M,) float64: each band's mean over everything else."""
    x = np.asarray(mel, dtype=np.float64)
    return np.moveaxis(x, -2, -1).reshape(-1, x.shape[-2]).mean(axis=0)


def recording_profiles(clip_profiles: np.ndarray, recording_ids: np.ndarray,
                       ) -> tuple[np.ndarray, np.ndarray]:
    """(N, M) per-clip profiles and (N,) ids -> (R,) ids (sorted) and (R, M) per-recording
    profiles, the mean of the recording's clips (every clip has the same segments)."""
    ids, inverse = np.unique(np.asarray(recording_ids), return_inverse=True)
    sums = np.zeros((len(ids), clip_profiles.shape[1]))
    np.add.at(sums, inverse, clip_profiles)
    return ids, sums / np.bincount(inverse)[:, None]


def _level_and_shape(band_median: np.ndarray, profiles: np.ndarray,
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(R, M) profiles -> (R,) level o and (R, M) shape r."""
    level = np.median(profiles - band_median, axis=1)
    return level, profiles - band_median - level[:, None]


def _shape_distance(ref: DomainReference, shape: np.ndarray) -> np.ndarray:
    """(R, M) shapes -> (R,) low-rank Mahalanobis distance, RMS per band."""
    return lowrank_distance(LowRank(ref.shape_mean, ref.shape_axes, ref.axis_var,
                                    ref.resid_var), shape)


def fit_reference(profiles: np.ndarray, *, uses_level: bool = True, axes: int = AXES,
                  source: str = "train", band_hz: np.ndarray | None = None) -> DomainReference:
    """The reference of (R, M) ``source`` recording profiles (threshold not yet set);
    ``band_hz`` (R,): each recording's Nyquist frequency at its own rate, when known."""
    p = np.asarray(profiles, dtype=np.float64)
    if p.ndim != 2 or len(p) < axes + 2:
        raise ValueError(f"need at least {axes + 2} recordings of (R, M) profiles, "
                         f"got shape {p.shape}")
    band_median = np.median(p, axis=0)
    level, shape = _level_and_shape(band_median, p)
    model = fit_lowrank(shape, axes, MIN_VARIANCE)
    level_median = float(np.median(level))
    level_sd = max(MAD_TO_SD * float(np.median(np.abs(level - level_median))), MIN_LEVEL_SD)
    ref = DomainReference(
        band_median=band_median, shape_mean=model.mean, shape_axes=model.axes,
        axis_var=model.axis_var, resid_var=model.resid_var,
        level_median=level_median, level_sd=level_sd,
        level_low=float(np.percentile(level, 0.5)), level_high=float(np.percentile(level, 99.5)),
        shape_scale=1.0, level_scale=1.0, uses_level=uses_level,
        train_band_hz=_train_band(band_hz))
    shape_d, level_z = _parts(ref, p)
    return replace(ref, shape_scale=max(float(np.percentile(shape_d, SCALE_QUANTILE)), 1e-9),
                    level_scale=max(float(np.percentile(np.abs(level_z), SCALE_QUANTILE)),
                                    1e-9),
                    fitted_on=f"{len(p)} {source} recordings")


def _train_band(band_hz: np.ndarray | None) -> float | None:
    """The Nyquist frequency ``TRAIN_BAND_QUANTILE`` of the training recordings reached."""
    if band_hz is None or not np.size(band_hz):
        return None
    return float(np.quantile(np.asarray(band_hz, np.float64), 1.0 - TRAIN_BAND_QUANTILE,
                             method="lower"))


def beyond_band(ref: DomainReference, centers_hz: np.ndarray,
                nyquist_hz: float | None) -> np.ndarray:
    """(M,) bool: the mel bands a recording of Nyquist ``nyquist_hz`` cannot fill although the
    training recordings did (all above it when the training band is not known)."""
    centers = np.asarray(centers_hz, dtype=np.float64)
    if nyquist_hz is None:
        return np.zeros(centers.shape, dtype=bool)
    above = centers > nyquist_hz
    return above if ref.train_band_hz is None else above & (centers <= ref.train_band_hz)


def _parts(ref: DomainReference, profiles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(R, M) -> (R,) shape distance and (R,) signed level z."""
    level, shape = _level_and_shape(ref.band_median, np.atleast_2d(profiles))
    return _shape_distance(ref, shape), (level - ref.level_median) / ref.level_sd


def scaled_parts(ref: DomainReference, profiles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(R, M) profiles -> (R,) shape part and (R,) level part, each over its training 99th
    percentile (the two numbers D is the larger of; the level part whether used or not)."""
    shape_d, level_z = _parts(ref, profiles)
    return shape_d / ref.shape_scale, np.abs(level_z) / ref.level_scale


def distances(ref: DomainReference, profiles: np.ndarray) -> np.ndarray:
    """(R, M) profiles -> (R,) D, the larger scaled part (level left out if not used)."""
    shape_d, level_z = _parts(ref, profiles)
    level_part = np.abs(level_z) / ref.level_scale if ref.uses_level else 0.0 * level_z
    return np.maximum(shape_d / ref.shape_scale, level_part)


def threshold_rank(n: int, quantile: float = TARGET_QUANTILE) -> int:
    """The 1-based rank of the threshold among n sorted val distances: ceil(q n), at most n."""
    return min(n, max(1, math.ceil(quantile * n - 1e-9)))


def fit_threshold(ref: DomainReference, val_profiles: np.ndarray,
                  quantile: float = TARGET_QUANTILE) -> DomainReference:
    """``ref`` with its threshold: the ``threshold_rank``-th smallest val distance."""
    d = np.sort(distances(ref, val_profiles))
    if d.size == 0:
        raise ValueError("no val recordings to set the domain threshold on")
    rank = threshold_rank(d.size, quantile)
    capped = " (capped at the val maximum: under 100 recordings)" if rank == d.size else ""
    return replace(ref, threshold=float(d[rank - 1]), quantile=quantile, val_distances=d,
                    fitted_on=f"{ref.fitted_on}; threshold on {d.size} val recordings"
                              f"{capped}")


def missing_bands(ref: DomainReference, profile: np.ndarray, centers_hz: np.ndarray,
                  nyquist_hz: float | None = None) -> int:
    """How many top mel bands the recording lacks: centres above its own Nyquist frequency
    that training filled (``beyond_band``), or a run of top bands ``EMPTY_DB`` below the
    training shape."""
    offset = np.asarray(profile, dtype=np.float64) - ref.band_median       # (M,)
    base = np.median(offset[: offset.size // 2])    # level from the lower half: a cut band
    empty = (offset - base - ref.shape_mean) < -EMPTY_DB               # removes the top (M,)
    run = int(np.argmin(empty[::-1])) if not empty.all() else empty.size
    above = int(np.sum(beyond_band(ref, centers_hz, nyquist_hz)))
    return max(run, above)


def assess(ref: DomainReference | None, profile: np.ndarray, centers_hz: np.ndarray,
           nyquist_hz: float | None = None) -> DomainCheck:
    """One recording's (M,) profile against ``ref``; ``unknown`` without a reference."""
    if ref is None:
        return UNKNOWN_CHECK
    p = np.atleast_2d(np.asarray(profile, dtype=np.float64))
    distance = float(distances(ref, p)[0])
    beyond_rate = bool(np.any(beyond_band(ref, centers_hz, nyquist_hz)))
    if not (distance > ref.threshold or beyond_rate):
        return DomainCheck(IN, distance, "")
    return DomainCheck(SHIFTED, distance, _reason(ref, p, centers_hz, nyquist_hz))


def _reason(ref: DomainReference, p: np.ndarray, centers_hz: np.ndarray,
            nyquist_hz: float | None) -> str:
    missing = missing_bands(ref, p[0], centers_hz, nyquist_hz)
    if missing:
        return f"{BAND}: top {missing} of {p.shape[1]} mel bands empty"
    shape_d, level_z = (float(v[0]) for v in _parts(ref, p))
    if ref.uses_level and abs(level_z) / ref.level_scale > shape_d / ref.shape_scale:
        db = float(level_z * ref.level_sd + ref.level_median)
        return (f"{LEVEL}: {db:+.0f} dB vs training "
                f"{ref.level_low:+.0f}..{ref.level_high:+.0f}")
    return f"{SHAPE}: {shape_d / ref.shape_scale:.1f}x training spread"

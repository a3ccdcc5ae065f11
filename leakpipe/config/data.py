"""Data-side sections: synthetic recordings, the synthetic field set, features, splits, the
HDF5 build, validation and the training data's memory plan (`synth`, `field`, `build`,
`validate`, `preload`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal

from leakpipe.config.fields import num
from leakpipe.constants import KNOWN_CLASSES
from leakpipe.names import class_name

__all__ = ["FEATURE_ADDED_DEFAULTS", "BuildConfig", "FeatureConfig", "FieldConfig",
           "PreloadConfig", "QualityConfig", "RecordingStatsConfig", "SplitConfig",
           "SynthConfig", "ValidateConfig"]

# Feature keys added after HDF5 splits and model files were written: the value that a stored
# feature config without the key means (the features from before the key existed). ``to_dict``
# leaves such a key out while it holds that value, so those files' feature configs are the same
# as before; ``leakpipe.config.stored_features`` fills it back in.
FEATURE_ADDED_DEFAULTS: dict[str, Any] = {"highpass_hz": 0.0}


@dataclass(frozen=True, kw_only=True)
class SynthConfig:
    """`synth`: the embedded default recordings (a physically motivated generator).

    ``scenario`` picks what is rendered: the default benchmark, or a small utility-like
    network (``leakpipe.audio.network``) of ``network_sites`` sites; the network scenario reads
    only ``seed``, ``network_sites``, ``subtype`` and ``workers``. Both have defaults, so
    configs made in code before they existed still mean the benchmark.
    """

    seed: int = num(ge=0)
    scenario: Literal["benchmark", "small_network"] = "benchmark"
    network_sites: int = num(30, ge=3, le=999)
    classes: tuple[str, ...]
    n_sites: int = num(ge=3)
    recordings_per_class: int = num(ge=1)
    leak_share: float = num(gt=0, lt=1)
    scale: float = num(gt=0)
    sample_rates: tuple[int, ...]
    duration_s: float = num(gt=0)
    difficulty: float = num(ge=0, le=3)
    transient_rate_hz: float = num(ge=0)
    gain_db: float = num(ge=0, le=40)
    clip_share: float = num(ge=0, le=1)
    dc_share: float = num(ge=0, le=1)
    subtype: Literal["PCM_16", "PCM_24", "FLOAT"]
    workers: int = num(ge=0)

    def problems(self) -> list[tuple[str, str]]:
        out = []
        unknown = [c for c in self.classes if c not in KNOWN_CLASSES]
        if unknown:
            out.append(("classes", f"unknown class {unknown[0]!r}; known: {list(KNOWN_CLASSES)}"))
        if "LEAK" not in self.classes:
            out.append(("classes", "must contain LEAK"))
        if len(self.classes) < 2 or len(set(self.classes)) != len(self.classes):
            out.append(("classes", "needs at least two distinct classes"))
        if not self.sample_rates or min(self.sample_rates) < 1000:
            out.append(("sample_rates", "needs at least one rate, each >= 1000 Hz"))
        return out


@dataclass(frozen=True, kw_only=True)
class FieldConfig:
    """`field`: a synthetic field set with a domain shift, for `adapt` (docs/synth.md).

    New sites rendered like `synth`'s (its classes, rates, difficulty, logger and workers),
    every recording carrying an intermittent machine noise that no labelled site has.
    """

    seed: int = num(ge=0)
    n_sites: int = num(ge=1, le=1000)
    recordings_per_class: int = num(ge=1)
    check_share: float = num(gt=0, lt=1)
    duration_s: float = num(gt=0)
    interference_snr_db_min: float = num(ge=-30, le=60)
    interference_snr_db_max: float = num(ge=-30, le=60)
    interference_duty_min: float = num(gt=0, lt=1)
    interference_duty_max: float = num(gt=0, lt=1)

    def problems(self) -> list[tuple[str, str]]:
        out = []
        if self.interference_snr_db_min > self.interference_snr_db_max:
            out.append(("interference_snr_db_min", "must not exceed interference_snr_db_max"))
        if self.interference_duty_min > self.interference_duty_max:
            out.append(("interference_duty_min", "must not exceed interference_duty_max"))
        return out


@dataclass(frozen=True, kw_only=True)
class FeatureConfig:
    """The feature definition stored with every HDF5 split and every model.

    Not a params section of its own: it is the feature subset of `build` (see
    ``BuildConfig.features``), so that `dvc exp run -S build.n_mels=32` changes it.

    ``highpass_hz``: the recording's mean is removed and a Butterworth high-pass at this
    frequency applied before it is cut into clips (``leakpipe.audio.highpass``); 0 = off, and
    what a stored config without the key means (``FEATURE_ADDED_DEFAULTS``).
    """

    sample_rate: int = num(ge=1000)
    clip_s: float = num(gt=0)
    long_window_s: float = num(gt=0)
    long_hop_s: float = num(gt=0)
    short_window: int = num(ge=8)
    short_hop: int = num(ge=1)
    n_fft: int = num(ge=8)
    hop_length: int = num(ge=1)
    n_mels: int = num(ge=1)
    fmin: float = num(ge=0)
    fmax: float = num(gt=0)
    power: float = num(gt=0)
    log_floor: float = num(gt=0)
    highpass_hz: float = num(0.0, ge=0)

    @property
    def clip_samples(self) -> int:
        return int(round(self.clip_s * self.sample_rate))

    @property
    def long_window(self) -> int:
        return int(round(self.long_window_s * self.sample_rate))

    @property
    def long_hop(self) -> int:
        return int(round(self.long_hop_s * self.sample_rate))

    @property
    def n_long(self) -> int:
        return 1 + (self.clip_samples - self.long_window) // self.long_hop

    @property
    def n_short(self) -> int:
        return 1 + (self.long_window - self.short_window) // self.short_hop

    @property
    def n_frames(self) -> int:
        return 1 + (self.short_window - self.n_fft) // self.hop_length

    @property
    def segment_shape(self) -> tuple[int, int, int, int]:
        """Shape of one clip's features: (n_long, n_short, n_mels, n_frames)."""
        return (self.n_long, self.n_short, self.n_mels, self.n_frames)

    def problems(self) -> list[tuple[str, str]]:
        out = []
        if self.long_window > self.clip_samples:
            out.append(("long_window_s", "must not exceed clip_s"))
        if self.short_window > self.long_window:
            out.append(("short_window", "must not exceed long_window_s * sample_rate"))
        if self.n_fft > self.short_window:
            out.append(("n_fft", "must not exceed short_window"))
        if self.fmax > self.sample_rate / 2:
            out.append(("fmax", f"must not exceed the Nyquist frequency {self.sample_rate / 2}"))
        if self.fmin >= self.fmax:
            out.append(("fmin", "must be below fmax"))
        if self.long_hop < 1:
            out.append(("long_hop_s", "is shorter than one sample"))
        if not math.isfinite(self.highpass_hz) or self.highpass_hz >= self.sample_rate / 2:
            out.append(("highpass_hz", f"must be finite and below the Nyquist frequency "
                                       f"{self.sample_rate / 2} (0 = off)"))
        return out

    def to_dict(self) -> dict[str, Any]:
        """The stored form; keys of ``FEATURE_ADDED_DEFAULTS`` at that value are left out."""
        return {k: v for k, v in dataclasses.asdict(self).items()
                if k not in FEATURE_ADDED_DEFAULTS or v != FEATURE_ADDED_DEFAULTS[k]}


@dataclass(frozen=True, kw_only=True)
class SplitConfig:
    """Fractions of recordings per split; grouped by site, stratified by class."""

    train: float = num(gt=0, lt=1)
    val: float = num(gt=0, lt=1)
    test: float = num(gt=0, lt=1)
    seed: int = num(ge=0)

    def problems(self) -> list[tuple[str, str]]:
        total = self.train + self.val + self.test
        if abs(total - 1.0) > 1e-6:
            return [("train", f"train + val + test must be 1, got {total:g}")]
        return []


@dataclass(frozen=True, kw_only=True)
class QualityConfig:
    """`build.quality`: signal checks of every recording's channels (leakpipe/audio/quality.py)."""

    clip_fraction: float = num(ge=0, le=1)
    dc_offset_max: float = num(ge=0, le=1)
    reject: tuple[Literal["clipped", "dc_offset", "dead", "truncated"], ...]


@dataclass(frozen=True, kw_only=True)
class RecordingStatsConfig:
    """`build.stats`: whole-recording level statistics (leakpipe/features/recording_stats.py).

    Stored with every split (attribute ``recording_stats_config``) beside the statistics, so a
    detector trained on them can compute the same ones from a new recording.
    """

    frame_s: float = num(gt=0, le=10)
    percentiles: tuple[float, ...]
    band_centres_hz: tuple[float, ...]
    floor_db: float = num(ge=-300, le=0)

    def problems(self) -> list[tuple[str, str]]:
        out = []
        if not self.percentiles or any(not 0 <= q <= 100 for q in self.percentiles):
            out.append(("percentiles", "needs at least one percentile, each in [0, 100]"))
        elif list(self.percentiles) != sorted(set(self.percentiles)):
            out.append(("percentiles", "must be increasing, without repeats"))
        if any(c <= 0 for c in self.band_centres_hz):
            out.append(("band_centres_hz", "every centre must be above 0 Hz"))
        elif list(self.band_centres_hz) != sorted(set(self.band_centres_hz)):
            out.append(("band_centres_hz", "must be increasing, without repeats"))
        return out

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, kw_only=True)
class BuildConfig(FeatureConfig):
    """`build`: recordings -> two-stage-segmented log-mel HDF5, one file per split.

    The feature keys (sample_rate ... highpass_hz, inherited from ``FeatureConfig``) sit flat in
    this section, so `dvc exp run -S build.n_mels=32` changes them; ``features`` extracts them.
    """

    source: str
    on_error: Literal["fail", "skip"]
    workers: int = num(ge=0)
    classes: tuple[str, ...]
    group_by: Literal["stem", "file", "folder"]
    # a recording listed twice, or copied byte for byte, under one class and group: refuse
    # the source, or drop the repeats (under two classes or groups it is always refused)
    duplicates: Literal["refuse", "drop"] = "refuse"
    clips_per_recording: int | Literal["all"] = num(ge=1)
    min_clip_fraction: float = num(gt=0, le=1)
    dtype: Literal["float16", "float32"]
    store_waveform: bool
    chunk_mb: float = num(gt=0)
    quality: QualityConfig
    stats: RecordingStatsConfig
    split: SplitConfig

    @property
    def features(self) -> FeatureConfig:
        names = [f.name for f in dataclasses.fields(FeatureConfig)]
        return FeatureConfig(**{n: getattr(self, n) for n in names})

    def problems(self) -> list[tuple[str, str]]:
        out = super().problems()
        if "LEAK" not in map(class_name, self.classes) and self.classes:
            out.append(("classes", "must contain LEAK when given (any case)"))
        return out


@dataclass(frozen=True, kw_only=True)
class ValidateConfig:
    """`validate`: bounds of the checks run on the HDF5 splits before training."""

    value_min: float
    value_max: float
    constant_tol: float = num(ge=0)
    required_classes: tuple[str, ...]
    min_files_per_class: int = num(ge=1)
    min_recordings_per_class: int = num(ge=1)
    class_fraction_min: float = num(ge=0, le=1)
    class_fraction_max: float = num(gt=0, le=1)
    workers: int = num(ge=0)
    read_mb: float = num(gt=0)
    max_listed: int = num(ge=1)

    def problems(self) -> list[tuple[str, str]]:
        out = []
        if self.value_min >= self.value_max:
            out.append(("value_min", "must be below value_max"))
        if self.class_fraction_min > self.class_fraction_max:
            out.append(("class_fraction_min", "must not exceed class_fraction_max"))
        if len(set(self.required_classes)) != len(self.required_classes):
            out.append(("required_classes", "must not repeat a class"))
        return out


@dataclass(frozen=True, kw_only=True)
class PreloadConfig:
    """`preload`: the memory plan that decides where training keeps its data."""

    mode: Literal["auto", "device", "ram", "stream"]
    dtype: Literal["float16", "float32"]
    max_batch_size: int = num(ge=1)
    safety: float = num(gt=0, le=1)
    host_reserve_mb: float = num(ge=0)
    device_reserve_mb: float = num(ge=0)
    stream_buffer_mb: float = num(gt=0)

"""Tiny, valid HDF5 split files written with ``SplitWriter``, for tests of every stage.

``write_splits(root)`` writes ``train.h5``, ``val.h5`` and ``test.h5`` that pass `validate`:
every split holds every class, sites (groups) and recordings are disjoint across splits, values
are random log-mel-like dB in ``VALUE_RANGE_DB`` (so no file is constant or duplicated).
Tests corrupt copies of them with h5py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from leakpipe.config import FeatureConfig, RecordingStatsConfig
from leakpipe.constants import KNOWN_CLASSES, SPLITS
from leakpipe.data.writer import SplitWriter, StatsColumns
from leakpipe.features.recording_stats import band_present, stat_names

# 1 s clips at 4096 Hz, long 0.25 s / hop 0.125 s, short 256 / hop 128: rows are (7, 7, 16, 1).
SMALL_FEATURES = FeatureConfig(
    sample_rate=4096, clip_s=1.0, long_window_s=0.25, long_hop_s=0.125, short_window=256,
    short_hop=128, n_fft=256, hop_length=256, n_mels=16, fmin=0.0, fmax=2048.0, power=2.0,
    log_floor=1e-10)
VALUE_RANGE_DB = (-100.0, 40.0)
CLIPS_PER_RECORDING = 2
SITES_PER_SPLIT = 2
# recording statistics of 4096 Hz recordings: the 2 kHz band (to 2.8 kHz) is above Nyquist
SMALL_STATS = RecordingStatsConfig(frame_s=0.125, percentiles=(10.0, 50.0, 90.0),
                                   band_centres_hz=(250.0, 1000.0, 2000.0), floor_db=-160.0)
STATS_COLUMNS = StatsColumns(stat_names(SMALL_STATS), SMALL_STATS.to_dict())


def random_stats(rng: np.random.Generator, rate: int = 4096,
                 spec: RecordingStatsConfig = SMALL_STATS) -> np.ndarray:
    """Plausible statistics of one recording: levels in dB, spreads >= 0, NaN above Nyquist."""
    k = len(spec.percentiles)
    base = rng.uniform(-70.0, -20.0)

    def block(offset: float) -> list[float]:
        levels = sorted(base + offset + rng.uniform(-10.0, 10.0, k))
        return [*levels, rng.uniform(1.0, 20.0), rng.uniform(0.5, 8.0)]

    out = block(0.0)
    for c in spec.band_centres_hz:
        out += ([*block(-5.0), rng.uniform(-15.0, 0.0)] if band_present(c, rate)
                else [np.nan] * (k + 3))
    return np.asarray(out, dtype=np.float32)


def random_mel(rng: np.random.Generator, clips: int, features: FeatureConfig = SMALL_FEATURES,
               dtype: str = "float16") -> np.ndarray:
    """(clips, n_long, n_short, n_mels, n_frames) uniform in ``VALUE_RANGE_DB``."""
    low, high = VALUE_RANGE_DB
    return rng.uniform(low, high, (clips, *features.segment_shape)).astype(dtype)


def write_split(path: Path, split: str, *, recordings_per_class: int = 2,
                classes: tuple[str, ...] = KNOWN_CLASSES,
                features: FeatureConfig = SMALL_FEATURES, dtype: str = "float16",
                seed: int = 0, rate: int = 4096) -> Path:
    """One valid split: ``recordings_per_class`` recordings of each class per site, each
    recorded (``recording_rates``) at ``rate`` Hz."""
    rng = np.random.default_rng([seed, SPLITS.index(split) if split in SPLITS else 99])
    with SplitWriter(path, split, features, classes, dtype=dtype, chunk_mb=0.01,
                     stats=STATS_COLUMNS) as writer:
        for site in range(SITES_PER_SPLIT):
            group = f"{split}-site{site}"
            for label, name in enumerate(classes):
                for k in range(recordings_per_class):
                    writer.append(random_mel(rng, CLIPS_PER_RECORDING, features, dtype), label,
                                  recording_id=f"{group}/{name}/{k}", group=group,
                                  stats=random_stats(rng), rate=rate)
    return path


def write_splits(root: Path, *, recordings_per_class: int = 2,
                 classes: tuple[str, ...] = KNOWN_CLASSES,
                 features: FeatureConfig = SMALL_FEATURES, dtype: str = "float16",
                 seed: int = 0) -> dict[str, Path]:
    """``<root>/{train,val,test}.h5``, valid and mutually disjoint; returns split -> path."""
    root.mkdir(parents=True, exist_ok=True)
    return {split: write_split(root / f"{split}.h5", split,
                               recordings_per_class=recordings_per_class, classes=classes,
                               features=features, dtype=dtype, seed=seed)
            for split in SPLITS}


def write_bulk_split(path: Path, split: str, files: int, *,
                     features: FeatureConfig = SMALL_FEATURES, dtype: str = "float16",
                     classes: tuple[str, ...] = KNOWN_CLASSES, block: int = 512,
                     chunk_mb: float = 1.0, seed: int = 0) -> Path:
    """A large split written in blocks of ``block`` clips (memory and benchmark tests)."""
    rng = np.random.default_rng(seed)
    with SplitWriter(path, split, features, classes, dtype=dtype, chunk_mb=chunk_mb) as writer:
        for start in range(0, files, block):
            n = min(block, files - start)
            label = (start // block) % len(classes)
            writer.append(random_mel(rng, n, features, dtype), label,
                          recording_id=f"{split}-bulk-{start}", group=f"{split}-bulk")
    return path


def validate_into(data_dir: Path, out_dir: Path, params: Path,
                  splits: tuple[str, ...] = SPLITS) -> Path:
    """Run the real `leakpipe validate` on ``data_dir``; returns the stamp it wrote (asserted)."""
    from leakpipe.cli import main

    stamp = out_dir / "validated.json"
    code = main(["validate", "--params", str(params), "--data-dir", str(data_dir),
                 "--splits", *splits, "--report", str(out_dir / "validation.json"),
                 "--html", str(out_dir / "validation.html"), "--stamp", str(stamp),
                 "--no-progress"])
    assert code == 0 and stamp.is_file(), f"validate failed on {data_dir}"
    return stamp

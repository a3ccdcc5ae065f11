"""Invariants shared across leakpipe: HDF5 keys, class names, placements, file and metric names.

Tunables live in params.yaml; only names and formats that must never drift live here.
"""

from __future__ import annotations

# Classes of the original system, in its (alphabetical, folder-derived) order.
KNOWN_CLASSES: tuple[str, ...] = ("BACKGROUND", "CRACK", "LEAK", "NORMAL", "UNCLASSIFIED")
LEAK_CLASS = "LEAK"
NOLEAK_CLASS = "NOLEAK"
DECISION_NAMES = (NOLEAK_CLASS, LEAK_CLASS)  # a file decision is LEAK or not, in every mode
BINARY_CLASSES: tuple[str, ...] = (NOLEAK_CLASS, LEAK_CLASS)  # NOLEAK = 0, LEAK = 1

# HDF5 data contract (docs/data-format.md).
SCHEMA_VERSION = 1
SPLITS: tuple[str, ...] = ("train", "val", "test")
H5_MEL = "mel"
H5_LABELS = "labels"
H5_RECORDING_ID = "recording_id"
H5_GROUP = "group"
H5_CLIP_INDEX = "clip_index"
H5_WAVEFORM = "waveform"
H5_RECORDING_STATS = "recording_stats"   # (N, S) float32: the clip's recording's statistics
H5_RECORDING_RATE = "recording_rate"     # (N,) int32: the recording's own sample rate, Hz
ATTR_SCHEMA_VERSION = "schema_version"
ATTR_CLASS_NAMES = "class_names"
ATTR_LEAK_CLASS = "leak_class"
ATTR_FEATURES = "feature_config"
ATTR_VERSION = "leakpipe_version"
ATTR_SPLIT = "split"
ATTR_CHUNK_ROWS = "chunk_rows"
ATTR_STATS_NAMES = "recording_stats_names"     # JSON list: the columns of recording_stats
ATTR_STATS_CONFIG = "recording_stats_config"   # JSON: build.stats that computed them

# Where training and evaluation keep a split (chosen by the preload stage, docs/preload.md).
PLACEMENT_DEVICE = "device"   # the whole split in accelerator memory
PLACEMENT_RAM = "ram"         # the whole split in (pinned on CUDA) host memory
PLACEMENT_STREAM = "stream"   # read from HDF5 while training
PLACEMENTS: tuple[str, ...] = (PLACEMENT_DEVICE, PLACEMENT_RAM, PLACEMENT_STREAM)

# Manifest columns (data/raw/manifest.csv and any user manifest).
MANIFEST_COLUMNS: tuple[str, ...] = ("path", "class", "group")
MANIFEST_OPTIONAL: tuple[str, ...] = ("material", "sensor", "sample_rate", "duration_s", "seed")
MANIFEST_NAME = "manifest.csv"
AUDIO_SUFFIXES: tuple[str, ...] = (".wav", ".flac", ".ogg")
# Audio files leakpipe does not read (build and cv refuse them as unusable, so no detector learnt
# from them; leakpipe.audio.opening.unread_format):
# `leakpipe predict` gives each one a row saying so, rather than no row or a score.
UNREAD_AUDIO_SUFFIXES: tuple[str, ...] = (".mp3", ".m4a", ".aac", ".wma", ".opus", ".aif",
                                          ".aiff", ".amr")
ALL_CLIPS = "all"  # build.clips_per_recording: every non-overlapping clip of a recording

# Exit codes of stages and the CLI.
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_CONFIG = 2
EXIT_DATA = 3
EXIT_REFUSED = 4       # `leakpipe promote`: the rule kept the champion (not an error)

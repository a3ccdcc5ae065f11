"""Features: two-stage temporal segmentation of clips and log-mel spectrograms of the segments."""

from leakpipe.features.mel import clip_features, log_mel, mel_filterbank
from leakpipe.features.segment import frame, two_stage

__all__ = ["clip_features", "frame", "log_mel", "mel_filterbank", "two_stage"]

"""Signal checks per channel: clipping at each format's full scale, DC offset, dead channels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from leakpipe.audio.io import read_frames
from leakpipe.audio.quality import (
    CLIPPED,
    DC_OFFSET,
    DEAD,
    channel_stats,
    check_signal,
    clip_threshold,
)
from leakpipe.config import QualityConfig

SR = 8000
CFG = QualityConfig(clip_fraction=0.001, dc_offset_max=0.5, reject=(DEAD,))


def noise(n: int = SR, level: float = 0.1, seed: int = 0) -> np.ndarray:
    return (level * np.random.default_rng(seed).standard_normal(n)).astype(np.float32)


def with_peaks(x: np.ndarray, fraction: float, value: float) -> np.ndarray:
    """``x`` with ``fraction`` of its samples set to +-``value`` (alternating signs)."""
    y = x.copy()
    idx = np.linspace(0, len(y) - 1, int(round(fraction * len(y)))).astype(int)
    y[idx] = value * np.where(np.arange(len(idx)) % 2, -1.0, 1.0)
    return y


def write(path: Path, data: np.ndarray, subtype: str) -> Path:
    sf.write(path, data, SR, subtype=subtype, format="WAV")
    return path


@pytest.mark.parametrize("subtype, threshold", [
    ("PCM_16", 32766 / 32768),         # the largest code 32767 and the one below it
    ("PCM_24", 1 - 2 * 2.0**-23),
    ("PCM_32", 1 - 2.0**-24),          # float32 cannot see finer steps near 1
    ("FLOAT", 1 - 2.0**-24),
    ("PCM_U8", 1 - 2 * 2.0**-7),
    ("ULAW", 31100 / 32768),
    ("VORBIS", 1 - 2.0**-15),          # other encodings: +-1 with a 16-bit step
])
def test_full_scale_per_format(subtype: str, threshold: float) -> None:
    assert clip_threshold(subtype) == pytest.approx(threshold, abs=1e-12)


@pytest.mark.parametrize("subtype", ["PCM_16", "PCM_24", "PCM_32", "FLOAT", "PCM_U8"])
@pytest.mark.parametrize("fraction, clipped", [(0.0, False), (0.0005, False), (0.01, True)])
def test_clipping_is_found_in_every_sample_format(tmp_path: Path, subtype: str,
                                                  fraction: float, clipped: bool) -> None:
    # samples written at +-1.0: PCM stores them as its largest codes (32767 / -32768 for 16 bit)
    path = write(tmp_path / "x.wav", with_peaks(noise(), fraction, 1.0), subtype)
    audio = read_frames(path)
    assert audio.subtype == subtype
    checks = [i.check for i in check_signal(audio.data, audio.subtype, CFG)]
    assert checks == ([CLIPPED] if clipped else [])


def test_int16_field_file_at_full_scale_is_flagged(tmp_path: Path) -> None:
    pcm = (noise(level=0.2) * 32767).astype(np.int16)
    pcm[::50] = 32767   # 2 % of the samples stuck at the rails, as a saturated preamp leaves them
    pcm[1::50] = -32768
    path = tmp_path / "field.wav"
    sf.write(path, pcm, SR, subtype="PCM_16")
    audio = read_frames(path)
    assert audio.data.max() < 1.0  # nothing exceeds 1: only the format's full scale tells
    [issue] = check_signal(audio.data, audio.subtype, CFG)
    assert issue.check == CLIPPED and issue.value == pytest.approx(0.04, abs=1e-3)
    assert "4.00% of its samples at PCM_16 full scale" in issue.reason


def test_a_quiet_pcm16_file_is_not_clipped_one_code_lower(tmp_path: Path) -> None:
    pcm = (noise(level=0.2) * 32767).astype(np.int16)
    pcm[::50] = 32765  # two codes below full scale: loud, not clipped
    path = tmp_path / "loud.wav"
    sf.write(path, pcm, SR, subtype="PCM_16")
    audio = read_frames(path)
    assert check_signal(audio.data, audio.subtype, CFG) == []


@pytest.mark.parametrize("channels, expected", [
    # (one column per channel) -> [(check, channel), ...]
    ([noise()], []),
    ([noise() + 0.2], [(DC_OFFSET, 0)]),               # |mean| / RMS = 0.2 / 0.22 = 0.89
    ([noise() + 0.02], []),                            # 0.02 / 0.10 = 0.2
    ([np.zeros(SR, np.float32)], [(DEAD, 0)]),
    ([np.full(SR, 0.3, np.float32)], [(DEAD, 0)]),     # constant, not all zero: dead only
    ([noise(), np.zeros(SR, np.float32)], [(DEAD, 1)]),  # one dead channel of two
    ([noise(), with_peaks(noise(seed=1), 0.01, 1.0)], [(CLIPPED, 1)]),
    ([with_peaks(noise() + 0.3, 0.01, 1.0)], [(CLIPPED, 0), (DC_OFFSET, 0)]),
])
def test_checks_per_channel(channels: list[np.ndarray], expected: list[tuple[str, int]]) -> None:
    data = np.stack(channels, axis=1)  # (frames, channels)
    found = [(i.check, i.channel) for i in check_signal(data, "PCM_16", CFG)]
    assert found == expected


def test_stats_stream_in_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    import leakpipe.audio.quality as quality

    data = np.stack([with_peaks(noise() + 0.05, 0.02, 1.0), noise(seed=3)], axis=1)
    whole = channel_stats(data, "FLOAT")
    monkeypatch.setattr(quality, "BLOCK_FRAMES", 777)  # 8000 frames in 11 blocks
    for a, b in zip(channel_stats(data, "FLOAT"), whole, strict=True):
        assert (a.clipped_fraction, a.dead) == (b.clipped_fraction, b.dead)
        assert a.dc_ratio == pytest.approx(b.dc_ratio, rel=1e-9)
    assert whole[0].clipped_fraction == pytest.approx(0.02) and whole[0].dc_ratio > 0.1


def test_thresholds_come_from_the_params() -> None:
    data = with_peaks(noise(), 0.01, 1.0)[:, None]
    lenient = QualityConfig(clip_fraction=0.05, dc_offset_max=0.5, reject=())
    assert check_signal(data, "FLOAT", lenient) == []
    assert [i.check for i in check_signal(data, "FLOAT", CFG)] == [CLIPPED]

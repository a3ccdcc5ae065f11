"""Whole-recording level statistics (leakpipe/features/recording_stats.py) on signals whose
answers are known: a steady tone, a tone with gaps, bands above Nyquist, a continuous source
against an intermittent one, block-size independence and bounded memory on a 2 h stream."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

from leakpipe.config import RecordingStatsConfig
from leakpipe.features.recording_stats import (
    StatsAccumulator,
    band_present,
    is_gain_free,
    recording_stats,
    stat_names,
)

SPEC = RecordingStatsConfig(frame_s=0.125, percentiles=(5.0, 10.0, 50.0, 90.0, 95.0),
                            band_centres_hz=(63.0, 125.0, 250.0, 500.0, 1000.0, 2000.0, 4000.0),
                            floor_db=-160.0)
NAMES = stat_names(SPEC)
SR = 4096


def stats(x: np.ndarray, sr: int = SR, spec: RecordingStatsConfig = SPEC) -> dict[str, float]:
    return dict(zip(stat_names(spec), recording_stats(x, sr, spec).tolist(), strict=True))


def tone(seconds: float, freq: float = 500.0, sr: int = SR, amp: float = 0.5) -> np.ndarray:
    t = np.arange(int(seconds * sr)) / sr
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def test_names_follow_the_spec_and_mark_the_gain_free_ones() -> None:
    assert NAMES[:7] == ("level_p05", "level_p10", "level_p50", "level_p90", "level_p95",
                         "level_spread", "level_std")
    assert "band1000_p10" in NAMES and "band63_rel" in NAMES
    assert len(NAMES) == 7 + 7 * (5 + 3)
    assert is_gain_free("band500_rel") and is_gain_free("level_spread")
    assert not is_gain_free("level_p10") and not is_gain_free("band500_p50")


def test_a_steady_tone_has_no_spread_and_its_level_in_its_band() -> None:
    s = stats(tone(20.0, 500.0, amp=0.5))
    assert s["level_spread"] < 0.05 and s["level_std"] < 0.05
    # mean square of a sine of amplitude 0.5: 0.125 -> -9.03 dB, all of it in the 500 Hz band
    assert s["band500_p50"] == pytest.approx(10 * math.log10(0.125), abs=0.1)
    assert s["level_p50"] == pytest.approx(s["band500_p50"], abs=0.1)
    assert s["band500_rel"] == pytest.approx(0.0, abs=0.1)
    assert s["band63_p50"] < s["band500_p50"] - 40   # Hann leakage stays far below


def test_a_tone_with_gaps_the_low_percentile_follows_the_gaps() -> None:
    on = tone(1.0)
    gap = 1e-3 * np.random.default_rng(0).standard_normal(SR).astype(np.float32)  # -60 dB
    x = np.concatenate([on, gap] * 10)                   # 20 s, half of it quiet
    s = stats(x)
    assert s["level_p10"] < -55                         # the quiet half's level
    assert s["level_p90"] > -10                          # the tone's level
    assert s["level_spread"] > 45
    steady = stats(tone(20.0))
    assert steady["level_p10"] > s["level_p10"] + 40


@pytest.mark.parametrize(("sr", "missing"), [(4096, {2000.0, 4000.0}), (8192, {4000.0}),
                                             (48000, set())])
def test_a_band_above_nyquist_is_missing_not_a_floor(sr: int, missing: set[float]) -> None:
    x = np.random.default_rng(1).standard_normal(sr * 5).astype(np.float32) * 0.1
    s = stats(x, sr)
    for c in SPEC.band_centres_hz:
        band = [k for k in s if k.startswith(f"band{c:g}_")]
        assert len(band) == 8
        if c in missing:
            assert all(math.isnan(s[k]) for k in band), c
            assert not band_present(c, sr)
        else:
            assert all(math.isfinite(s[k]) for k in band), c
    assert all(math.isfinite(s[k]) for k in NAMES if k.startswith("level_"))


def test_white_noise_band_levels_grow_3_db_per_octave() -> None:
    x = np.random.default_rng(2).standard_normal(48000 * 10).astype(np.float32) * 0.1
    s = stats(x, 48000)
    steps = [s[f"band{b:g}_p50"] - s[f"band{a:g}_p50"]
             for a, b in zip(SPEC.band_centres_hz[:-1], SPEC.band_centres_hz[1:], strict=True)]
    assert all(abs(step - 3.01) < 0.6 for step in steps), steps


def test_a_continuous_source_ranks_above_an_intermittent_one_of_equal_energy() -> None:
    """A leak never goes quiet; water use / traffic come and go (same mean power here)."""
    rng = np.random.default_rng(3)
    n = SR * 30
    background = 0.003 * rng.standard_normal(n)
    leak = background + 0.05 * rng.standard_normal(n)
    bursts = np.zeros(n)
    for start in rng.integers(0, n - 3 * SR, 5):
        bursts[start:start + 3 * SR] = 1.0
    gate = bursts / math.sqrt(max(bursts.mean(), 1e-9))   # the same mean square as the leak
    traffic = background + 0.05 * rng.standard_normal(n) * gate
    s_leak, s_traffic = stats(leak.astype(np.float32)), stats(traffic.astype(np.float32))
    assert abs(10 * math.log10(np.mean(leak**2) / np.mean(traffic**2))) < 1.5
    assert s_leak["level_p10"] > s_traffic["level_p10"] + 10
    assert s_leak["level_spread"] < s_traffic["level_spread"] - 10


def test_the_statistics_do_not_depend_on_the_block_size() -> None:
    x = np.random.default_rng(4).standard_normal(SR * 7 + 123).astype(np.float32)
    whole = recording_stats(x, SR, SPEC, block=len(x))
    for block in (1000, 4096, 65536):
        np.testing.assert_allclose(recording_stats(x, SR, SPEC, block=block), whole,
                                   rtol=1e-6, atol=1e-6)


def test_a_stereo_block_is_mixed_down_and_dc_is_removed() -> None:
    x = tone(5.0)
    mono = recording_stats(x, SR, SPEC)
    acc = StatsAccumulator(SPEC, SR)
    acc.add(np.stack([x + 0.3, x - 0.3], axis=1))        # opposite DC offsets, same tone
    np.testing.assert_allclose(acc.values(), mono, atol=0.01)   # float32 rounding of the mix
    with_dc = recording_stats(x + 0.4, SR, SPEC)
    np.testing.assert_allclose(with_dc, mono, atol=0.05)


def test_a_recording_shorter_than_a_frame_is_measured_padded() -> None:
    values = recording_stats(tone(0.05), SR, SPEC)
    assert np.isfinite(values[:7]).all()
    with pytest.raises(ValueError, match="no samples"):
        StatsAccumulator(SPEC, SR).values()


def _two_hours_peak_mib(seconds: float) -> float:
    """Peak traced memory of measuring a ``seconds`` long 4096 Hz stream fed block by block
    (the blocks are made one at a time, as a decoder reads them)."""
    rng = np.random.default_rng(5)
    block = 1 << 20
    tracemalloc.start()
    acc = StatsAccumulator(SPEC, SR)
    left = int(seconds * SR)
    while left:
        n = min(block, left)
        acc.add(rng.standard_normal(n).astype(np.float32) * 0.1)
        left -= n
    acc.values()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20


def test_memory_is_bounded_on_a_two_hour_recording() -> None:
    two_hours = _two_hours_peak_mib(2 * 3600)
    ten_minutes = _two_hours_peak_mib(600)
    # a block (4 MiB float32 + its float64 work) dominates; the per-frame levels of 2 h are
    # 57,600 frames x 8 values (~3.5 MiB), so 12x the audio is far from 12x the memory
    assert two_hours < 96, two_hours
    assert two_hours < ten_minutes + 16, (two_hours, ten_minutes)

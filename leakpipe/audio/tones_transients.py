"""Tonal and impulsive sources of the synthetic recordings: valves, mains hum, pumps, machine
run-ups, Poisson-timed transients (knocks, footsteps, clicks, traffic, water draws), crack ticks.

The same contract as ``leakpipe.audio.sources``, whose spectra and levels (pipe transfer, jet
spectrum, in-band SNR gain) these use: pure functions that draw only from the generator they
are given, with the parameter ranges in ``leakpipe.audio.site``.

Level convention: the tonal sources return float64 samples at unit RMS, like every continuous
source. Impulsive sources (transients, crack ticks) return samples already in units of the
ambient background RMS, because their level is a property of each event rather than of the
recording.
"""

from __future__ import annotations

import numpy as np

from leakpipe.audio.site import (
    BLADE_DECAY,
    BLADE_HARMONICS,
    CLICK_DB,
    CLICK_TAU_S,
    CRACK_DB,
    CRACK_GAP_JITTER,
    CRACK_MODE_JITTER,
    CRACK_RATE_HZ,
    CRACK_TAU_S,
    DRAW_HOLD_S,
    DRAW_RAMP_S,
    DRAW_SNR_DB,
    HUM_DECAY,
    HUM_EVEN_WEIGHT,
    HUM_HARMONICS,
    KNOCK_SNR_DB,
    KNOCK_TAU_S,
    MAGNETIC_HUM,
    MAINS_DRIFT_HZ,
    NYQUIST_MARGIN,
    PRV_CORNER_HZ,
    PRV_HUNT_DEPTH,
    PRV_HUNT_HZ,
    PRV_WHISTLE_DB,
    PRV_WHISTLE_HZ,
    PRV_WHISTLES,
    PUMP_BROADBAND_DB,
    PUMP_JITTER,
    PUMP_WANDER_RATE_HZ,
    RUN_UP_HZ,
    SHAFT_DECAY,
    SHAFT_HARMONICS,
    STEP_COUNT,
    STEP_DB,
    STEP_INTERVAL_S,
    TAIL_TAUS,
    THUMP_DB,
    THUMP_HZ,
    THUMP_TAU_S,
    TONE_AMP_SPREAD,
    TRAFFIC_DB,
    TRAFFIC_FC_HZ,
    TRAFFIC_SPAN,
    TRAFFIC_WIDTH_S,
    TRANSIENT_KINDS,
    TRANSIENT_WEIGHTS,
    Site,
    uniform,
)
from leakpipe.audio.sources import (
    band_fraction,
    in_band_gain,
    jet_spectrum,
    leak_gain,
    pipe_transfer,
)
from leakpipe.audio.spectral import shaped_noise, smooth_curve, unit_rms

# --- tonal sources (unit RMS) ----------------------------------------------------------------


def prv_noise(rng: np.random.Generator, n: int, sr: int,
              site: Site) -> tuple[np.ndarray, np.ndarray]:
    """A pressure-reducing valve: throttling hiss, seat whistles, and the pilot's hunting."""
    freqs = np.fft.rfftfreq(n, 1.0 / sr)
    gain = jet_spectrum(freqs, uniform(rng, PRV_CORNER_HZ)) * pipe_transfer(
        freqs, site, uniform(rng, (1.0, 20.0)))
    hiss = shaped_noise(rng, n, gain)
    count = int(rng.integers(PRV_WHISTLES[0], PRV_WHISTLES[1] + 1))
    f0 = rng.uniform(*PRV_WHISTLE_HZ, size=count)
    wander = 1.0 + smooth_curve(rng, n, sr, 0.01, 1.0)
    whistle = _tones(rng, n, sr, f0, rng.uniform(0.5, 1.0, count), wander)
    band_share = max(band_fraction(freqs, gain, (f0.min() / 1.2, f0.max() * 1.2)), 1e-6)
    level = 10.0 ** (uniform(rng, PRV_WHISTLE_DB) / 20.0) * np.sqrt(band_share)
    t = np.arange(n) / sr
    hunt = 1.0 + uniform(rng, PRV_HUNT_DEPTH) * np.sin(
        2 * np.pi * uniform(rng, PRV_HUNT_HZ) * t + rng.uniform(0, 2 * np.pi))
    return unit_rms((hiss + level * whistle) * hunt), gain


def _tones(rng: np.random.Generator, n: int, sr: int, freqs_hz: np.ndarray, amps: np.ndarray,
           wander: np.ndarray | float = 1.0) -> np.ndarray:
    """Sum of sinusoids (random phases) whose frequencies follow the relative curve ``wander``."""
    keep = freqs_hz < NYQUIST_MARGIN * sr
    out = np.zeros(n)
    for f, a in zip(freqs_hz[keep], amps[keep], strict=True):
        phase = 2 * np.pi * np.cumsum(f * np.broadcast_to(wander, (n,))) / sr
        out += a * np.sin(phase + rng.uniform(0, 2 * np.pi))
    return unit_rms(out)


def mains_hum(rng: np.random.Generator, n: int, sr: int, site: Site) -> np.ndarray:
    """Electrical pickup at the mains frequency and its harmonics, odd ones stronger (unit RMS)."""
    k = np.arange(1, HUM_HARMONICS + 1)
    amps = HUM_DECAY ** (k - 1) * np.where(k % 2 == 1, 1.0, HUM_EVEN_WEIGHT)
    amps = amps * rng.uniform(*TONE_AMP_SPREAD, k.size)
    f0 = site.mains_hz + rng.normal(0.0, MAINS_DRIFT_HZ)
    return _tones(rng, n, sr, f0 * k, amps)


def pump_tones(rng: np.random.Generator, n: int, sr: int, site: Site) -> np.ndarray:
    """Pump and motor: shaft harmonics, blade-pass harmonics and twice-mains magnetic hum."""
    shaft = site.pump_shaft_hz * np.arange(1, SHAFT_HARMONICS + 1)
    blade = site.pump_shaft_hz * site.pump_blades * np.arange(1, BLADE_HARMONICS + 1)
    freqs = np.concatenate([shaft, blade, [2 * site.mains_hz]])
    amps = np.concatenate([SHAFT_DECAY ** np.arange(SHAFT_HARMONICS),
                           BLADE_DECAY ** np.arange(BLADE_HARMONICS), [MAGNETIC_HUM]])
    amps = amps * rng.uniform(*TONE_AMP_SPREAD, freqs.size)
    wander = 1.0 + smooth_curve(rng, n, sr, PUMP_JITTER, PUMP_WANDER_RATE_HZ)
    tones = _tones(rng, n, sr, freqs, amps, wander)
    spectrum = np.fft.rfftfreq(n, 1.0 / sr)
    hydraulic = shaped_noise(rng, n, jet_spectrum(spectrum, 4 * site.pump_shaft_hz
                                                   * site.pump_blades))
    return unit_rms(tones + _db(rng, PUMP_BROADBAND_DB) * hydraulic)


def run_up(rng: np.random.Generator, n: int, sr: int, site: Site) -> np.ndarray:
    """A machine speeding up or down: a harmonic tone sweeping between two speeds (unit RMS)."""
    f_start, f_end = rng.uniform(*RUN_UP_HZ, size=2)
    sweep = np.linspace(1.0, f_end / f_start, n)
    k = np.arange(1, SHAFT_HARMONICS + 1)
    return _tones(rng, n, sr, f_start * k, SHAFT_DECAY ** (k - 1), sweep)


# --- impulsive sources (units of ambient RMS) --------------------------------------------------


def damped_mode(sr: int, freq: float, tau_s: float) -> np.ndarray:
    """Impulse response of one ringing mode: a decaying sine of peak about 1."""
    t = np.arange(max(1, int(TAIL_TAUS * tau_s * sr))) / sr
    return np.exp(-t / tau_s) * np.sin(2 * np.pi * min(freq, NYQUIST_MARGIN * sr) * t + np.pi / 4)


def _add_at(buf: np.ndarray, event: np.ndarray, start: int) -> None:
    stop = min(buf.size, start + event.size)
    if start < stop:
        buf[start:stop] += event[: stop - start]


def _db(rng: np.random.Generator, bounds: tuple[float, float]) -> float:
    return 10.0 ** (uniform(rng, bounds) / 20.0)


def knock(rng: np.random.Generator, sr: int, site: Site) -> np.ndarray:
    """A knock on the pipe or nearby: a thump plus the pipe ringing in its leak band."""
    tau = uniform(rng, KNOCK_TAU_S)
    n = max(2, int(TAIL_TAUS * tau * sr))
    freqs = np.fft.rfftfreq(n, 1.0 / sr)
    ring = shaped_noise(rng, n, leak_gain(freqs, site)) * np.exp(-np.arange(n) / (tau * sr))
    ring *= in_band_gain(freqs, leak_gain(freqs, site), site, uniform(rng, KNOCK_SNR_DB))
    thump = damped_mode(sr, uniform(rng, THUMP_HZ), uniform(rng, THUMP_TAU_S))
    event = np.zeros(max(n, thump.size))
    event[:n] += ring
    event[: thump.size] += thump * _db(rng, THUMP_DB)
    return event


def footsteps(rng: np.random.Generator, sr: int, site: Site) -> np.ndarray:
    """A walk-by: a few low-frequency thuds at walking pace."""
    count = int(rng.integers(STEP_COUNT[0], STEP_COUNT[1] + 1))
    starts = np.cumsum(rng.uniform(*STEP_INTERVAL_S, size=count)) * sr
    thuds = [damped_mode(sr, uniform(rng, THUMP_HZ), uniform(rng, THUMP_TAU_S))
             * _db(rng, STEP_DB) for _ in range(count)]
    event = np.zeros(int(starts[-1]) + max(t.size for t in thuds))
    for start, thud in zip(starts.astype(int), thuds, strict=True):
        _add_at(event, thud, start)
    return event


def click(rng: np.random.Generator, sr: int, site: Site) -> np.ndarray:
    """An electrical or valve click: a very short broadband burst."""
    tau = uniform(rng, CLICK_TAU_S)
    t = np.arange(max(2, int(TAIL_TAUS * tau * sr))) / sr
    burst = rng.standard_normal(t.size) * np.exp(-t / tau)
    return burst / np.max(np.abs(burst)) * _db(rng, CLICK_DB)


def traffic(rng: np.random.Generator, sr: int, site: Site) -> np.ndarray:
    """A vehicle passing close by: low-passed tyre / engine rumble under a Gaussian swell."""
    width = uniform(rng, TRAFFIC_WIDTH_S)
    t = np.arange(-TRAFFIC_SPAN * width, TRAFFIC_SPAN * width, 1.0 / sr)
    freqs = np.fft.rfftfreq(t.size, 1.0 / sr)
    fc = uniform(rng, TRAFFIC_FC_HZ)
    rumble = shaped_noise(rng, t.size, 1.0 / np.sqrt(1.0 + (freqs / fc) ** 4))
    return rumble * np.exp(-0.5 * (t / width) ** 2) * _db(rng, TRAFFIC_DB)


def water_draw(rng: np.random.Generator, sr: int, site: Site) -> np.ndarray:
    """Water drawn nearby (a tap, a flush): leak-like hiss through the pipe, but for a moment."""
    ramp = int(DRAW_RAMP_S * sr)
    hold = int(uniform(rng, DRAW_HOLD_S) * sr)
    envelope = np.concatenate([np.linspace(0, 1, ramp), np.ones(hold), np.linspace(1, 0, ramp)])
    freqs = np.fft.rfftfreq(envelope.size, 1.0 / sr)
    hiss = shaped_noise(rng, envelope.size, leak_gain(freqs, site))
    gain = in_band_gain(freqs, leak_gain(freqs, site), site, uniform(rng, DRAW_SNR_DB))
    return hiss * envelope * gain


_EVENTS = {"knock": knock, "footsteps": footsteps, "click": click, "traffic": traffic,
           "draw": water_draw}


def transients(rng: np.random.Generator, n: int, sr: int, site: Site,
               rate_hz: float) -> np.ndarray:
    """Poisson-timed interference of every TRANSIENT_KINDS at ``rate_hz`` events per second."""
    out = np.zeros(n)
    for _ in range(int(rng.poisson(rate_hz * n / sr))):
        kind = str(rng.choice(TRANSIENT_KINDS, p=TRANSIENT_WEIGHTS))
        _add_at(out, _EVENTS[kind](rng, sr, site), int(rng.integers(0, n)))
    return out


def crack_ticks(rng: np.random.Generator, n: int, sr: int, site: Site) -> np.ndarray:
    """Structural ticking of a crack: short ringing bursts, no sustained hiss."""
    rate = uniform(rng, CRACK_RATE_HZ)
    gaps = rng.uniform(*CRACK_GAP_JITTER, size=int(2 * rate * n / sr) + 2) / rate
    starts = (np.cumsum(gaps) * sr).astype(int)
    out = np.zeros(n)
    for start in starts[starts < n]:
        freq = site.crack_hz * (1.0 + rng.uniform(-CRACK_MODE_JITTER, CRACK_MODE_JITTER))
        tick = damped_mode(sr, freq, uniform(rng, CRACK_TAU_S))
        _add_at(out, tick * _db(rng, CRACK_DB), int(start))
    return out

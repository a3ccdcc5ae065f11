"""Spectral helpers of the synthetic sources: filter shapes, shaped noise, envelopes, the sensor.

Sources are built in the frequency domain: a noise is Gaussian rfft bins times an amplitude
spectrum (``shaped_noise``), and the sensor multiplies a signal's rfft by its response. So every
filter here is a magnitude over ``freqs`` in Hz, not a time-domain filter: a source's spectrum
is the one written down, whatever the length and sample rate.
"""

from __future__ import annotations

import numpy as np

from leakpipe.audio.site import ACCEL_REF_HZ, ANTI_ALIAS, ANTI_ALIAS_ORDER, Site


def resonance(freqs: np.ndarray, fc: float, q: float) -> np.ndarray:
    """Magnitude of a second-order band-pass at ``fc`` Hz with quality factor ``q`` (peak 1)."""
    f = np.maximum(freqs, 1e-6)
    return 1.0 / np.sqrt(1.0 + q**2 * (f / fc - fc / f) ** 2)


def highpass(freqs: np.ndarray, fc: float) -> np.ndarray:
    """Magnitude of a second-order Butterworth high-pass at ``fc`` Hz."""
    return 1.0 / np.sqrt(1.0 + (fc / np.maximum(freqs, 1e-6)) ** 4)


def unit_rms(x: np.ndarray) -> np.ndarray:
    rms = float(np.sqrt(np.mean(x**2)))
    return x / rms if rms > 0 else x


def shaped_noise(rng: np.random.Generator, n: int, gain: np.ndarray) -> np.ndarray:
    """Unit-RMS Gaussian noise of ``n`` samples with amplitude spectrum ``gain`` (rfft bins)."""
    spec = rng.standard_normal(gain.size) + 1j * rng.standard_normal(gain.size)
    return unit_rms(np.fft.irfft(spec * gain, n))


def smooth_curve(rng: np.random.Generator, n: int, sr: int, sigma: float,
                 rate_hz: float) -> np.ndarray:
    """Zero-mean Gaussian control points every ``1 / rate_hz`` s, linearly interpolated."""
    n_points = max(2, int(np.ceil(n / sr * rate_hz)) + 1)
    points = rng.normal(0.0, sigma, n_points)
    return np.interp(np.arange(n), np.linspace(0, n - 1, n_points), points)


def slow_envelope(rng: np.random.Generator, n: int, sr: int, depth_db: float,
                  rate_hz: float) -> np.ndarray:
    """A smooth gain curve: log-normal level wander of ``depth_db`` (1 sigma) at ``rate_hz``."""
    return 10.0 ** (smooth_curve(rng, n, sr, depth_db, rate_hz) / 20.0)


def lowpass(freqs: np.ndarray, fc: float, order: int = 8) -> np.ndarray:
    """Magnitude of a Butterworth low-pass of ``order`` at ``fc`` Hz (a logger's band limit)."""
    return 1.0 / np.sqrt(1.0 + (np.maximum(freqs, 0.0) / fc) ** (2 * order))


def sensor_response(freqs: np.ndarray, site: Site) -> np.ndarray:
    """Magnitude response of the site's sensor and logger to the pipe's pressure field.

    A hydrophone is flat above its high-pass. An accelerometer sees wall acceleration, which
    rises as f**2 (+12 dB per octave, 0 dB at ACCEL_REF_HZ) up to its mounting resonance and
    stays flat above it. Both end at the logger's anti-alias band limit.
    """
    out = highpass(freqs, site.sensor_highpass_hz)
    if site.sensor == "accelerometer":
        f = np.maximum(freqs, 1e-6)
        tilt = (f / ACCEL_REF_HZ) ** 2 / np.sqrt(1.0 + (f / site.sensor_resonance_hz) ** 4)
        peak = site.sensor_resonance_gain * resonance(freqs, site.sensor_resonance_hz,
                                                      site.sensor_resonance_q)
        out = out * tilt * (1.0 + peak)
    return out * lowpass(freqs, ANTI_ALIAS * site.sample_rate, order=ANTI_ALIAS_ORDER)


def apply_sensor(x: np.ndarray, sr: int, site: Site) -> np.ndarray:
    """What the site's sensor makes of the mechanical signal ``x``."""
    freqs = np.fft.rfftfreq(x.size, 1.0 / sr)
    return np.fft.irfft(np.fft.rfft(x) * sensor_response(freqs, site), x.size)

"""Broadband noise sources of the synthetic recordings, and the spectra and levels they share.

Pure functions ``f(rng, n, sr, site)``: the ambient background, leak hiss, flow noise,
legitimate water use, traffic rumble and pass-bys, the sensor's white noise; and the pipe
transfer, jet spectrum and in-band SNR gain that the tonal and impulsive sources
(``leakpipe.audio.tones_transients``) use too.

Each source draws only from the generator it is given, so a recording's draws, and therefore
its bytes, depend on nothing but its seed. The site (``leakpipe.audio.site``) fixes what a
source sounds like at that pipe; the parameter ranges live there too.

Level convention: continuous sources return float64 samples at unit RMS and the caller sets
their level in dB relative to the ambient background.
"""

from __future__ import annotations

import numpy as np

from leakpipe.audio.site import (
    AMBIENT_FLOOR_HZ,
    FLOW_AM_DEPTH_DB,
    FLOW_AM_RATE_HZ,
    FLOW_Q,
    LEAK_AM_DEPTH_DB,
    LEAK_AM_RATE_HZ,
    LEAK_CORNER_HZ,
    LEAK_DB_PER_DECADE_PRESSURE,
    LEAK_DISTANCE_M,
    MACHINE_BAND_ORDER,
    MACHINE_BURST_S,
    MACHINE_PAUSE_MIN_S,
    MACHINE_RAMP_S,
    NYQUIST_MARGIN,
    PASS_BY_FC_HZ,
    PASS_BY_WIDTH_S,
    PIPE_RIPPLE_DB,
    PRESSURE_REF_BAR,
    RUMBLE_AM_DEPTH_DB,
    RUMBLE_AM_RATE_HZ,
    RUMBLE_FC_HZ,
    USE_AM_DEPTH_DB,
    USE_AM_RATE_HZ,
    USE_CORNER_HZ,
    USE_DISTANCE_M,
    USE_SERVICE_HZ,
    USE_SERVICE_Q,
    USE_SWITCH_PROB,
    Machine,
    Site,
    uniform,
)
from leakpipe.audio.spectral import (
    highpass,
    resonance,
    sensor_response,
    shaped_noise,
    slow_envelope,
    unit_rms,
)

# --- continuous sources ----------------------------------------------------------------------


def pipe_transfer(freqs: np.ndarray, site: Site, distance_m: float) -> np.ndarray:
    """Amplitude transfer of the fluid-borne wave over ``distance_m`` of the site's pipe.

    The wave decays as exp(-pi f eta d / c) (loss factor eta, wave speed c: the imaginary part
    of the wavenumber of Gao et al.'s model), so the attenuation in dB grows linearly with
    frequency and distance; section resonances between joints add a gentle ripple.
    """
    decay = np.exp(-np.pi * freqs * site.loss_factor * distance_m / site.wave_speed_ms)
    ripple = 10.0 ** (PIPE_RIPPLE_DB / 40.0 * np.cos(2 * np.pi * freqs / site.ripple_spacing_hz))
    return decay * ripple


def jet_spectrum(freqs: np.ndarray, corner_hz: float) -> np.ndarray:
    """Turbulent jet noise: flat up to ``corner_hz``, falling at 2nd order above, little below
    20 Hz."""
    return highpass(freqs, 20.0) / np.sqrt(1.0 + (freqs / corner_hz) ** 4)


def leak_corner(site: Site, draw: float) -> float:
    """The leak jet's corner at the site's pressure: Strouhal scaling, ~ sqrt(pressure)."""
    return draw * np.sqrt(site.pressure_bar / PRESSURE_REF_BAR)


def leak_gain(freqs: np.ndarray, site: Site, corner_hz: float | None = None,
              distance_m: float | None = None) -> np.ndarray:
    """Amplitude spectrum of leak noise where it reaches the sensor (before the sensor).

    Defaults (mid-range corner and distance) serve the leak-like transients (knock ringing,
    a short water draw) that are heard through the same pipe.
    """
    corner = leak_corner(site, float(np.mean(LEAK_CORNER_HZ))) if corner_hz is None else corner_hz
    dist = float(np.mean(LEAK_DISTANCE_M[site.material])) if distance_m is None else distance_m
    return jet_spectrum(freqs, corner) * pipe_transfer(freqs, site, dist)


def leak_noise(rng: np.random.Generator, n: int, sr: int,
               site: Site) -> tuple[np.ndarray, np.ndarray]:
    """Sustained turbulent hiss of a leak at a random distance (unit RMS) and its spectrum.

    The leak's own corner scales with the pressure; the pipe between leak and sensor takes the
    high frequencies away, the more so the farther and the softer the pipe.
    """
    freqs = np.fft.rfftfreq(n, 1.0 / sr)
    gain = leak_gain(freqs, site, leak_corner(site, uniform(rng, LEAK_CORNER_HZ)),
                     uniform(rng, LEAK_DISTANCE_M[site.material]))
    hiss = shaped_noise(rng, n, gain)
    return unit_rms(hiss * slow_envelope(rng, n, sr, LEAK_AM_DEPTH_DB, LEAK_AM_RATE_HZ)), gain


def pressure_db(site: Site) -> float:
    """How much louder the site's leaks are than at the reference pressure, dB."""
    return LEAK_DB_PER_DECADE_PRESSURE * float(np.log10(site.pressure_bar / PRESSURE_REF_BAR))


def leak_band(freqs: np.ndarray, power: np.ndarray) -> tuple[float, float]:
    """The octave around the median frequency of ``power``: where a hiss's SNR is measured."""
    cum = np.cumsum(power)
    median = float(freqs[min(int(np.searchsorted(cum, cum[-1] / 2)), freqs.size - 1)])
    median = max(median, float(freqs[1]) if freqs.size > 1 else 1.0)
    return median / np.sqrt(2.0), median * np.sqrt(2.0)


def band_fraction(freqs: np.ndarray, gain: np.ndarray, band: tuple[float, float]) -> float:
    """Fraction of the power of a noise with amplitude spectrum ``gain`` that lies in ``band``."""
    power = gain**2
    inside = (freqs >= band[0]) & (freqs < band[1])
    return float(power[inside].sum() / power.sum())


def ambient_gain(freqs: np.ndarray, site: Site) -> np.ndarray:
    """Amplitude spectrum of the ambient background: 1 / f**(exponent / 2) above a floor, plus
    a hydrophone's low-frequency pressure field."""
    base = np.maximum(freqs, AMBIENT_FLOOR_HZ) ** (-site.ambient_exponent / 2.0)
    base = base / np.sqrt(np.mean(base**2))
    if site.hydro_lf_db <= 0.0:
        return base
    lf = 1.0 / np.sqrt(1.0 + (freqs / site.hydro_lf_hz) ** 4)
    lf = lf / np.sqrt(np.mean(lf**2))
    return base + lf * 10.0 ** (site.hydro_lf_db / 20.0) * np.sqrt(
        np.mean((base * (freqs < 4 * site.hydro_lf_hz)) ** 2) + 1e-30)


def in_band_gain(freqs: np.ndarray, gain: np.ndarray, site: Site, snr_db: float) -> float:
    """Gain of unit-RMS noise with amplitude spectrum ``gain`` that puts it ``snr_db`` above
    the unit-RMS ambient in the octave around its median frequency, both as the sensor hears
    them."""
    heard = gain * sensor_response(freqs, site)
    ambient = ambient_gain(freqs, site) * sensor_response(freqs, site)
    band = leak_band(freqs, heard**2)
    own = band_fraction(freqs, heard, band) * np.mean(heard**2) / np.mean(gain**2)
    amb = band_fraction(freqs, ambient, band) * np.mean(ambient**2) / np.mean(
        ambient_gain(freqs, site) ** 2)
    if own <= 0.0 or amb <= 0.0:
        return float(10.0 ** (snr_db / 20.0))
    return float(np.sqrt(10.0 ** (snr_db / 10.0) * amb / own))


def ambient_noise(rng: np.random.Generator, n: int, sr: int, site: Site) -> np.ndarray:
    """Pink-to-brown environmental background, with a hydrophone's LF field (unit RMS)."""
    return shaped_noise(rng, n, ambient_gain(np.fft.rfftfreq(n, 1.0 / sr), site))


def flow_noise(rng: np.random.Generator, n: int, sr: int, site: Site) -> np.ndarray:
    """Normal flow noise: low-frequency, narrower than a leak, slowly fluctuating (unit RMS)."""
    freqs = np.fft.rfftfreq(n, 1.0 / sr)
    noise = shaped_noise(rng, n, resonance(freqs, site.flow_fc_hz, FLOW_Q))
    return unit_rms(noise * slow_envelope(rng, n, sr, FLOW_AM_DEPTH_DB, FLOW_AM_RATE_HZ))


def _switch(rng: np.random.Generator, n: int, sr: int) -> np.ndarray:
    """A tap opening or closing at a random moment: a 0.2 s ramp between 0 and 1."""
    t = np.arange(n) / sr
    at = rng.uniform(0.2, 0.8) * n / sr
    ramp = np.clip((t - at) / 0.2 + 0.5, 0.0, 1.0)
    return ramp if rng.random() < 0.5 else 1.0 - ramp


def water_use(rng: np.random.Generator, n: int, sr: int,
              site: Site) -> tuple[np.ndarray, np.ndarray]:
    """Legitimate water use (a tap, irrigation, a tank filling): leak-like hiss from a small
    orifice behind a service pipe, with demand wander, sometimes starting or stopping."""
    freqs = np.fft.rfftfreq(n, 1.0 / sr)
    service = resonance(freqs, uniform(rng, USE_SERVICE_HZ), uniform(rng, USE_SERVICE_Q))
    gain = jet_spectrum(freqs, uniform(rng, USE_CORNER_HZ)) * (0.3 + service)
    gain = gain * pipe_transfer(freqs, site, uniform(rng, USE_DISTANCE_M))
    hiss = shaped_noise(rng, n, gain)
    hiss = hiss * slow_envelope(rng, n, sr, uniform(rng, USE_AM_DEPTH_DB),
                                uniform(rng, USE_AM_RATE_HZ))
    if rng.random() < USE_SWITCH_PROB:
        hiss = hiss * _switch(rng, n, sr)
    return unit_rms(hiss), gain


def traffic_rumble(rng: np.random.Generator, n: int, sr: int, site: Site) -> np.ndarray:
    """Continuous ground-borne rumble of a busy road over the main (unit RMS)."""
    freqs = np.fft.rfftfreq(n, 1.0 / sr)
    fc = uniform(rng, RUMBLE_FC_HZ)
    noise = shaped_noise(rng, n, highpass(freqs, 8.0) / np.sqrt(1.0 + (freqs / fc) ** 4))
    return unit_rms(noise * slow_envelope(rng, n, sr, RUMBLE_AM_DEPTH_DB, RUMBLE_AM_RATE_HZ))


def pass_by(rng: np.random.Generator, n: int, sr: int, site: Site) -> np.ndarray:
    """Traffic on a nearby road: low-passed tyre / engine noise under a slow swell (unit RMS)."""
    freqs = np.fft.rfftfreq(n, 1.0 / sr)
    fc = uniform(rng, PASS_BY_FC_HZ)
    noise = shaped_noise(rng, n, 1.0 / np.sqrt(1.0 + (freqs / fc) ** 4))
    t = np.arange(n) / sr
    centre, width = rng.uniform(0, n / sr), uniform(rng, PASS_BY_WIDTH_S)
    return unit_rms(noise * np.exp(-0.5 * ((t - centre) / width) ** 2))


def white_noise(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.standard_normal(n)


# --- field interference (the `field` set only) -----------------------------------------------


def machine_band(freqs: np.ndarray, machine: Machine, sr: int) -> np.ndarray:
    """Amplitude spectrum of a machine's noise: a band of ``machine.bandwidth_oct`` octaves
    around its centre (moved down where the band would reach the logger's band limit)."""
    half = 2.0 ** (machine.bandwidth_oct / 2.0)
    centre = min(machine.centre_hz, NYQUIST_MARGIN * sr / half)
    f = np.maximum(freqs, 1e-6)
    order = 2 * MACHINE_BAND_ORDER
    return 1.0 / np.sqrt((1.0 + (f / (centre * half)) ** order)
                         * (1.0 + (centre / half / f) ** order))


def machine_gate(rng: np.random.Generator, n: int, sr: int, duty: float) -> np.ndarray:
    """When the machine runs (0..1): bursts of MACHINE_BURST_S with raised-cosine ramps, and
    pauses (at least MACHINE_PAUSE_MIN_S) sized so that it runs ``duty`` of the time on
    average. The pattern starts at a random phase; a recording holds at least one burst."""
    gate = np.zeros(n)
    ramp = max(1, int(uniform(rng, MACHINE_RAMP_S) * sr))
    pause_scale = (1.0 - duty) / duty
    start = -rng.uniform(0.0, 1.0 + pause_scale) * float(np.mean(MACHINE_BURST_S)) * sr
    bursts = []
    while start < n:
        length = uniform(rng, MACHINE_BURST_S) * sr
        bursts.append((int(start), int(start + length)))
        start += length + max(MACHINE_PAUSE_MIN_S, uniform(rng, MACHINE_BURST_S) * pause_scale) * sr
    if all(stop <= ramp or begin >= n - ramp for begin, stop in bursts):
        length = int(uniform(rng, MACHINE_BURST_S) * sr)
        begin = int(rng.integers(0, max(1, n - length)))
        bursts = [(begin, begin + length)]
    for begin, stop in bursts:
        lo, hi = max(begin, 0), min(stop, n)
        if lo >= hi:
            continue
        i = np.arange(lo, hi)
        rise = np.clip(np.minimum(i - begin, stop - i) / ramp, 0.0, 1.0)
        gate[lo:hi] = 0.5 - 0.5 * np.cos(np.pi * rise)
    return gate


def machine_noise(rng: np.random.Generator, n: int, sr: int, site: Site, machine: Machine,
                  duty: float) -> tuple[np.ndarray, np.ndarray, float]:
    """A machine working nearby: band-limited noise, amplitude-modulated at its engine rate,
    switched on and off in bursts (``machine_gate``).

    Returns the samples (unit RMS while it runs, so an in-band SNR applies to its running
    level), its amplitude spectrum, and the fraction of the recording it runs.
    """
    freqs = np.fft.rfftfreq(n, 1.0 / sr)
    gain = machine_band(freqs, machine, sr)
    t = np.arange(n) / sr
    engine = 1.0 + machine.am_depth * np.sin(2 * np.pi * machine.engine_hz * t
                                             + rng.uniform(0, 2 * np.pi))
    running = unit_rms(shaped_noise(rng, n, gain) * engine)
    gate = machine_gate(rng, n, sr, duty)
    return running * gate, gain, float(np.mean(gate))

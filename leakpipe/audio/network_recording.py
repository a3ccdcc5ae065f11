"""One recording of the `small_network` scenario: a night at a logger, rendered to samples.

A recording hears its site (``leakpipe.audio.network_site``) through the sensor and the fitting:
the ground's ambient and the pipe-borne floor, the site's pump, machines and mains, its valve
and its leak (on the nights it leaks), the night that comes and goes around them
(``leakpipe.audio.night``), and the logger's own noise and offset. What changes from night to
night is drawn here, from a generator seeded by (seed, site, index) and split into one child
per source, so a recording's bytes depend on nothing else and a leak changes nothing but the
leak.
"""

from __future__ import annotations

import numpy as np

from leakpipe.audio import sources as src
from leakpipe.audio import tones_transients
from leakpipe.audio.network_site import (
    AMBIENT_DBFS,
    FITTING_TILT_HZ,
    NETWORK_RECORDING_STREAM,
    SAMPLE_RATE,
    NetworkSite,
)
from leakpipe.audio.night import heard_rms, night_noise, pipe_floor
from leakpipe.audio.site import (
    LEAK_AM_DEPTH_DB,
    LEAK_AM_RATE_HZ,
    NYQUIST_MARGIN,
    SENSOR_NOISE_DB,
    uniform,
)
from leakpipe.audio.spectral import (
    resonance,
    sensor_response,
    shaped_noise,
    slow_envelope,
    smooth_curve,
    unit_rms,
)
from leakpipe.constants import LEAK_CLASS

# --- from night to night ---------------------------------------------------------------------
# The site's quiet floor (SITE_LEVEL_DB) and its valve's hiss wander by +-NIGHT_DB from night to
# night, the machines' load by +-TONE_NIGHT_DB, the leak by +-LEAK_NIGHT_DB (as steady as the
# pressure behind it); a logger's offset drifts by +-DC_DRIFT of itself between recordings,
# with temperature and battery.
NIGHT_DB = 1.0
TONE_NIGHT_DB = 2.0          # the machines' load from night to night, +- dB
LEAK_NIGHT_DB = 1.5
DC_DRIFT = 0.2
# Synchronous machines follow the grid: their speed wanders by ~0.1 %, so their lines stay
# narrow.
MACHINE_WANDER = 0.001
MACHINE_WANDER_RATE_HZ = 0.5
# Normal flow noise in some recordings: narrow, below 120 Hz.
FLOW_SHARE, FLOW_DB = 0.5, (-9.0, 3.0)
TRANSIENT_RATE_HZ = 0.1      # few knocks, steps or passing cars at night, events per s


def fitting_response(freqs: np.ndarray, ns: NetworkSite) -> np.ndarray:
    """Magnitude response of the fitting the logger sits on: its modes and its tilt."""
    low, ref = FITTING_TILT_HZ
    octaves = np.log2(np.clip(freqs, low, None) / ref)
    out = 10.0 ** (ns.tilt_db_per_octave * octaves / 20.0)
    for centre, q, gain_db in ns.fitting:
        out = out * (1.0 + (10.0 ** (gain_db / 20.0) - 1.0) * resonance(freqs, centre, q))
    return out


def machine_tones(rng: np.random.Generator, n: int, sr: int,
                  freqs_hz: tuple[float, ...]) -> np.ndarray:
    """Steady lines of machines near the site, narrow (grid-locked speed), random phases."""
    wander = 1.0 + smooth_curve(rng, n, sr, MACHINE_WANDER, MACHINE_WANDER_RATE_HZ)
    out = np.zeros(n)
    for f in freqs_hz:
        if f < NYQUIST_MARGIN * sr:
            out += np.sin(2 * np.pi * np.cumsum(f * wander) / sr + rng.uniform(0, 2 * np.pi))
    return unit_rms(out)


def recording_rng(seed: int, site: int, index: int) -> np.random.Generator:
    entropy = [seed, NETWORK_RECORDING_STREAM, site, index]
    return np.random.default_rng(np.random.SeedSequence(entropy))


def _db(level_db: float) -> float:
    return float(10.0 ** (level_db / 20.0))


def _leak(rng: np.random.Generator, n: int, ns: NetworkSite) -> np.ndarray:
    """The site's leak hiss (its own corner and distance), wandering slowly (any level)."""
    gain = src.leak_gain(np.fft.rfftfreq(n, 1.0 / SAMPLE_RATE), ns.site, ns.leak_corner_hz,
                         ns.leak_distance_m)
    envelope = slow_envelope(rng, n, SAMPLE_RATE, LEAK_AM_DEPTH_DB, LEAK_AM_RATE_HZ)
    return shaped_noise(rng, n, gain) * envelope


def render_network_recording(seed: int, ns: NetworkSite, index: int) -> np.ndarray:
    """Samples (float32, 4096 Hz) of recording ``index`` at network site ``ns``.

    Levels are set as the logger hears them (through sensor and fitting), re the site's
    ambient: what a logger reports. Every source draws from its own child generator, so a
    leak changes nothing else: a repaired site's recordings differ by the leak, not the draws.
    """
    rng = recording_rng(seed, ns.site.index, index)
    ambient_rng, tone_rng, night_rng, prv_rng, leak_rng, event_rng, elec_rng = rng.spawn(7)
    site, sr, n = ns.site, SAMPLE_RATE, ns.n_samples[index]
    freqs = np.fft.rfftfreq(n, 1.0 / sr)
    response = sensor_response(freqs, site) * fitting_response(freqs, ns)

    def heard(x: np.ndarray, level_db: float) -> np.ndarray:
        """``x`` as the logger hears it, at ``level_db`` re the ambient (broadband RMS)."""
        return unit_rms(np.fft.irfft(np.fft.rfft(x) * response, n)) * _db(level_db)

    mech = src.ambient_noise(ambient_rng, n, sr, site)
    if ambient_rng.random() < FLOW_SHARE:
        mech += _db(uniform(ambient_rng, FLOW_DB)) * src.flow_noise(ambient_rng, n, sr, site)
    mech += tones_transients.transients(event_rng, n, sr, site, TRANSIENT_RATE_HZ)
    ambient = heard_rms(src.ambient_gain(freqs, site), response)
    floor_rng, night_rng = night_rng.spawn(2)
    out = (np.fft.irfft(np.fft.rfft(mech) * response, n) / ambient
           * np.sqrt(1.0 - ns.night.pipe_floor_share)
           + pipe_floor(floor_rng, n, sr, site, ns.night, response))
    out *= _db(ambient_rng.uniform(-NIGHT_DB, NIGHT_DB))
    load = tone_rng.uniform(-TONE_NIGHT_DB, TONE_NIGHT_DB)
    out += heard(tones_transients.pump_tones(tone_rng, n, sr, site), ns.pump_db + load)
    out += _db(ns.machine_db + load) * machine_tones(tone_rng, n, sr, ns.machine_hz)
    out += night_noise(night_rng, n, sr, site, ns.night, response)
    if ns.prv_snr_db is not None:
        out += heard(tones_transients.prv_noise(prv_rng, n, sr, site)[0],
                     ns.prv_snr_db + prv_rng.uniform(-NIGHT_DB, NIGHT_DB))
    if ns.classes[index] == LEAK_CLASS:
        out += heard(_leak(leak_rng, n, ns),
                     ns.leak_snr_db + leak_rng.uniform(-LEAK_NIGHT_DB, LEAK_NIGHT_DB))
    out += _db(ns.hum_db) * tones_transients.mains_hum(elec_rng, n, sr, site)
    out += _db(SENSOR_NOISE_DB) * src.white_noise(elec_rng, n)
    offset = ns.dc_offset * (1.0 + elec_rng.uniform(-DC_DRIFT, DC_DRIFT))
    written = out * _db(AMBIENT_DBFS + ns.gain_db + ns.level_db) + offset
    return np.clip(written, -1.0, 1.0).astype(np.float32)  # an ADC saturates

"""Sound sources of the synthetic recordings: pure functions ``f(rng, n, sr, site)``.

Each source draws only from the generator it is given, so a recording's draws, and therefore
its bytes, depend on nothing but its seed. The site (``leakpipe.audio.site``) fixes what a
source sounds like at that pipe; the parameter ranges live there too.

Level convention: continuous sources return float64 samples at unit RMS and the caller sets
their level in dB relative to the ambient background. Impulsive sources (transients, crack
ticks) return samples already in units of the ambient background RMS, because their level is a
property of each event rather than of the recording.
"""

from __future__ import annotations

import numpy as np

from leakpipe.audio.site import (
    AMBIENT_FLOOR_HZ,
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
    FLOW_AM_DEPTH_DB,
    FLOW_AM_RATE_HZ,
    FLOW_Q,
    HUM_DECAY,
    HUM_EVEN_WEIGHT,
    HUM_HARMONICS,
    KNOCK_SNR_DB,
    KNOCK_TAU_S,
    LEAK_AM_DEPTH_DB,
    LEAK_AM_RATE_HZ,
    LEAK_CORNER_HZ,
    LEAK_DB_PER_DECADE_PRESSURE,
    LEAK_DISTANCE_M,
    MAGNETIC_HUM,
    MAINS_DRIFT_HZ,
    NYQUIST_MARGIN,
    PASS_BY_FC_HZ,
    PASS_BY_WIDTH_S,
    PIPE_RIPPLE_DB,
    PRESSURE_REF_BAR,
    PRV_CORNER_HZ,
    PRV_HUNT_DEPTH,
    PRV_HUNT_HZ,
    PRV_WHISTLE_DB,
    PRV_WHISTLE_HZ,
    PRV_WHISTLES,
    PUMP_BROADBAND_DB,
    PUMP_JITTER,
    PUMP_WANDER_RATE_HZ,
    RUMBLE_AM_DEPTH_DB,
    RUMBLE_AM_RATE_HZ,
    RUMBLE_FC_HZ,
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
    USE_AM_DEPTH_DB,
    USE_AM_RATE_HZ,
    USE_CORNER_HZ,
    USE_DISTANCE_M,
    USE_SERVICE_HZ,
    USE_SERVICE_Q,
    USE_SWITCH_PROB,
    Site,
    uniform,
)
from leakpipe.audio.spectral import (
    highpass,
    resonance,
    sensor_response,
    shaped_noise,
    slow_envelope,
    smooth_curve,
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


def traffic_rumble(rng: np.random.Generator, n: int, sr: int, site: Site) -> np.ndarray:
    """Continuous ground-borne rumble of a busy road over the main (unit RMS)."""
    freqs = np.fft.rfftfreq(n, 1.0 / sr)
    fc = uniform(rng, RUMBLE_FC_HZ)
    noise = shaped_noise(rng, n, highpass(freqs, 8.0) / np.sqrt(1.0 + (freqs / fc) ** 4))
    return unit_rms(noise * slow_envelope(rng, n, sr, RUMBLE_AM_DEPTH_DB, RUMBLE_AM_RATE_HZ))


def white_noise(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.standard_normal(n)


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


def pass_by(rng: np.random.Generator, n: int, sr: int, site: Site) -> np.ndarray:
    """Traffic on a nearby road: low-passed tyre / engine noise under a slow swell (unit RMS)."""
    freqs = np.fft.rfftfreq(n, 1.0 / sr)
    fc = uniform(rng, PASS_BY_FC_HZ)
    noise = shaped_noise(rng, n, 1.0 / np.sqrt(1.0 + (freqs / fc) ** 4))
    t = np.arange(n) / sr
    centre, width = rng.uniform(0, n / sr), uniform(rng, PASS_BY_WIDTH_S)
    return unit_rms(noise * np.exp(-0.5 * ((t - centre) / width) ** 2))


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

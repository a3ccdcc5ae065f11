"""Sound sources of the synthetic recordings: sites and pure functions ``f(rng, n, sr, site)``.

A *site* is one pipe + sensor + environment: its pipe material sets the resonant band that shapes
leak noise (higher for metal than for plastic), its sensor colours everything it hears, and its
environment fixes the mains frequency, the pump, the ambient noise colour and level.

Level convention: continuous sources return float64 samples at unit RMS and the caller sets
their level in dB relative to the ambient background. Impulsive sources (transients, crack
ticks) return samples already in units of the ambient background RMS, because their level is a
property of each event rather than of the recording.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

Material = Literal["metal", "plastic"]
MATERIALS: tuple[Material, ...] = ("metal", "plastic")  # sites alternate, so both always exist

# SeedSequence stream tags: keep site and recording streams independent for equal numbers.
SITE_STREAM = 1
RECORDING_STREAM = 2

# --- pipe (leak noise) -----------------------------------------------------------------------
# Centre of the resonant band through which the sensor hears leak noise, Hz. Plastic pipes
# damp high frequencies strongly, so their leak noise sits much lower than in metal pipes.
LEAK_FC_HZ: dict[Material, tuple[float, float]] = {"metal": (600.0, 1300.0),
                                                   "plastic": (200.0, 450.0)}
LEAK_Q: dict[Material, tuple[float, float]] = {"metal": (1.5, 3.0), "plastic": (1.0, 2.0)}
# Corner of the exponential high-frequency attenuation along the pipe, Hz.
PIPE_ATTENUATION_HZ: dict[Material, tuple[float, float]] = {"metal": (1500.0, 2500.0),
                                                            "plastic": (500.0, 900.0)}
LEAK_BROADBAND_FLOOR = 0.12    # jet-noise floor beside the resonance (amplitude re its peak)
LEAK_FC_JITTER = 0.08          # per-recording relative shift of the band (leak position)
LEAK_AM_DEPTH_DB = 1.5         # slow level fluctuation of turbulent leak noise, dB (1 sigma)
LEAK_AM_RATE_HZ = 2.0          # rate of that fluctuation's control points, Hz
# Ringing modes of the pipe wall excited by cracks, relative to the leak band centre.
CRACK_MODE_RATIO = (1.3, 2.5)

# --- sensor ----------------------------------------------------------------------------------
SENSOR_HIGHPASS_HZ = (8.0, 25.0)       # low cut-off of the accelerometer / hydrophone, Hz
SENSOR_RESONANCE_HZ = (2200.0, 3400.0)  # mounting resonance, Hz
SENSOR_RESONANCE_Q = (3.0, 8.0)
SENSOR_RESONANCE_GAIN = (0.3, 1.5)     # resonance peak added to a flat response (linear)
SENSOR_NOISE_DB = -45.0                # white self-noise of the electronics re ambient RMS, dB
SENSOR_SENSITIVITY_DB = (-6.0, 6.0)    # sensor + logger gain of a site re the nominal gain, dB

# --- environment -----------------------------------------------------------------------------
MAINS_HZ = (50.0, 60.0)                # grid frequency, Hz
MAINS_DRIFT_HZ = 0.05                  # grid frequency deviation, Hz (1 sigma)
HUM_HARMONICS = 8                      # highest harmonic of the mains hum
HUM_EVEN_WEIGHT = 0.4                  # even harmonics are weaker than odd ones (transformers)
HUM_DECAY = 0.7                        # amplitude ratio between successive hum harmonics
TONE_AMP_SPREAD = (0.3, 1.0)           # random factor on each tone's amplitude (hum, pump)
AMBIENT_EXPONENT = (1.0, 2.0)          # ambient power ~ 1 / f**exponent (1 = pink, 2 = brown)
AMBIENT_FLOOR_HZ = 10.0                # below this the ambient spectrum stays flat, Hz
BACKGROUND_DB = (-4.0, 4.0)            # site ambient level re a typical leak, dB
FLOW_FC_HZ = (30.0, 120.0)             # centre of the (low, narrow) normal flow noise band, Hz
FLOW_Q = 1.2
FLOW_AM_DEPTH_DB = 3.0                 # slow level fluctuation of flow noise, dB (1 sigma)
FLOW_AM_RATE_HZ = 1.0

# --- pumps and motors ------------------------------------------------------------------------
MOTOR_POLES = (2, 4)                   # induction motor poles; shaft = 2 * mains / poles
MOTOR_SLIP = (0.02, 0.05)              # induction motor slip (fraction of synchronous speed)
PUMP_BLADES = (3, 7)                   # impeller blades (inclusive range)
SHAFT_HARMONICS = 4
BLADE_HARMONICS = 3
SHAFT_DECAY = 0.6                      # amplitude ratio between successive shaft harmonics
BLADE_DECAY = 0.5                      # amplitude ratio between successive blade-pass harmonics
MAGNETIC_HUM = 0.5                     # motor's twice-mains magnetic tone re the shaft tone
PUMP_JITTER = 0.004                    # relative speed wander of the pump (1 sigma)
PUMP_WANDER_RATE_HZ = 2.0              # rate of that wander's control points, Hz
NYQUIST_MARGIN = 0.45                  # tones are kept below this fraction of the sample rate

# --- transients ------------------------------------------------------------------------------
TRANSIENT_KINDS = ("knock", "footsteps", "click", "traffic", "draw")
TRANSIENT_WEIGHTS = (0.2, 0.15, 0.15, 0.3, 0.2)
KNOCK_SNR_DB = (15.0, 30.0)            # in-band SNR of the pipe's ringing after a knock, dB
KNOCK_TAU_S = (0.02, 0.08)             # decay time constant of that ringing, s
THUMP_DB = (6.0, 20.0)                 # peak of a knock's low-frequency body re ambient RMS, dB
THUMP_HZ = (20.0, 90.0)                # low-frequency body of knocks and footsteps, Hz
THUMP_TAU_S = (0.02, 0.06)
STEP_DB = (6.0, 20.0)                  # footstep peak re ambient RMS, dB
STEP_INTERVAL_S = (0.45, 0.7)          # time between footsteps, s
STEP_COUNT = (2, 4)                    # footsteps per walk-by (inclusive range)
CLICK_DB = (12.0, 30.0)                # click peak re ambient RMS, dB
CLICK_TAU_S = (0.0005, 0.003)          # click decay time constant, s
TRAFFIC_DB = (8.0, 22.0)               # vehicle rumble RMS at its closest re ambient RMS, dB
TRAFFIC_FC_HZ = (60.0, 250.0)          # corner of the ground-borne rumble of a vehicle, Hz
TRAFFIC_WIDTH_S = (0.1, 0.3)           # standard deviation of the pass-by's Gaussian swell, s
TRAFFIC_SPAN = 2.5                     # a swell is cut at this many standard deviations
DRAW_SNR_DB = (15.0, 30.0)             # water drawn nearby: in-band SNR of its hiss, dB
DRAW_HOLD_S = (0.15, 0.6)              # how long the tap stays open, s
DRAW_RAMP_S = 0.05                     # opening / closing time of the tap, s
TAIL_TAUS = 6.0                        # an exponential decay is cut after this many taus

# --- crack ticks -----------------------------------------------------------------------------
CRACK_RATE_HZ = (1.5, 6.0)             # mean tick rate of a growing crack, ticks per second
CRACK_DB = (15.0, 30.0)                # tick peak re ambient RMS, dB
CRACK_TAU_S = (0.003, 0.012)           # ringing decay of one tick, s
CRACK_GAP_JITTER = (0.5, 1.5)          # tick-to-tick interval re the mean interval
CRACK_MODE_JITTER = 0.1                # relative spread of a tick's ringing frequency

# --- other interference ----------------------------------------------------------------------
PASS_BY_FC_HZ = (150.0, 600.0)         # corner of tyre / engine noise of a busy road, Hz
PASS_BY_WIDTH_S = (1.5, 4.0)           # standard deviation of its slow Gaussian swell, s
RUN_UP_HZ = (15.0, 60.0)               # start and end shaft speeds of a machine run-up, Hz


@dataclass(frozen=True)
class Site:
    """One pipe + sensor + environment; every recording of a site shares these properties."""

    index: int
    material: Material
    leak_fc_hz: float            # centre of the resonant leak band, Hz
    leak_q: float                # quality factor of that band
    attenuation_hz: float        # corner of the pipe's high-frequency attenuation, Hz
    crack_hz: float              # ringing frequency of crack ticks, Hz
    sensor_highpass_hz: float
    sensor_resonance_hz: float
    sensor_resonance_q: float
    sensor_resonance_gain: float
    sensitivity_db: float        # gain of the sensor and logger re the nominal gain, dB
    background_db: float         # ambient level re a typical leak, dB (higher = noisier site)
    ambient_exponent: float      # ambient colour: 1 = pink, 2 = brown
    mains_hz: float
    flow_fc_hz: float
    pump_shaft_hz: float         # pump shaft speed, Hz
    pump_blades: int

    @property
    def site_id(self) -> str:
        return f"site{self.index:03d}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _uniform(rng: np.random.Generator, bounds: tuple[float, float]) -> float:
    return float(rng.uniform(*bounds))


def draw_site(seed: int, index: int) -> Site:
    """The site ``index`` of a data set with ``seed`` (independent of every other site)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, SITE_STREAM, index]))
    material = MATERIALS[index % len(MATERIALS)]
    leak_fc = _uniform(rng, LEAK_FC_HZ[material])
    mains = float(rng.choice(MAINS_HZ))
    poles = int(rng.choice(MOTOR_POLES))
    return Site(
        index=index, material=material, leak_fc_hz=leak_fc,
        leak_q=_uniform(rng, LEAK_Q[material]),
        attenuation_hz=_uniform(rng, PIPE_ATTENUATION_HZ[material]),
        crack_hz=leak_fc * _uniform(rng, CRACK_MODE_RATIO),
        sensor_highpass_hz=_uniform(rng, SENSOR_HIGHPASS_HZ),
        sensor_resonance_hz=_uniform(rng, SENSOR_RESONANCE_HZ),
        sensor_resonance_q=_uniform(rng, SENSOR_RESONANCE_Q),
        sensor_resonance_gain=_uniform(rng, SENSOR_RESONANCE_GAIN),
        sensitivity_db=_uniform(rng, SENSOR_SENSITIVITY_DB),
        background_db=_uniform(rng, BACKGROUND_DB),
        ambient_exponent=_uniform(rng, AMBIENT_EXPONENT),
        mains_hz=mains,
        flow_fc_hz=_uniform(rng, FLOW_FC_HZ),
        pump_shaft_hz=2 * mains / poles * (1 - _uniform(rng, MOTOR_SLIP)),
        pump_blades=int(rng.integers(PUMP_BLADES[0], PUMP_BLADES[1] + 1)),
    )


# --- spectral helpers ------------------------------------------------------------------------


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


def sensor_response(freqs: np.ndarray, site: Site) -> np.ndarray:
    """Magnitude response of the site's sensor: high-pass plus a mounting resonance."""
    peak = site.sensor_resonance_gain * resonance(freqs, site.sensor_resonance_hz,
                                                  site.sensor_resonance_q)
    return highpass(freqs, site.sensor_highpass_hz) * (1.0 + peak)


def apply_sensor(x: np.ndarray, sr: int, site: Site) -> np.ndarray:
    """What the site's sensor makes of the mechanical signal ``x``."""
    freqs = np.fft.rfftfreq(x.size, 1.0 / sr)
    return np.fft.irfft(np.fft.rfft(x) * sensor_response(freqs, site), x.size)


# --- continuous sources ----------------------------------------------------------------------


def leak_gain(freqs: np.ndarray, site: Site, fc: float | None = None) -> np.ndarray:
    """Amplitude spectrum of leak noise at the sensor: turbulence through the pipe's band."""
    fc = site.leak_fc_hz if fc is None else fc
    band = resonance(freqs, fc, site.leak_q) + LEAK_BROADBAND_FLOOR
    return band * np.exp(-freqs / site.attenuation_hz) * highpass(freqs, fc / 4)


def leak_noise(rng: np.random.Generator, n: int, sr: int, site: Site) -> np.ndarray:
    """Sustained broadband turbulent hiss shaped by the pipe's resonant band (unit RMS)."""
    freqs = np.fft.rfftfreq(n, 1.0 / sr)
    fc = site.leak_fc_hz * (1.0 + rng.uniform(-LEAK_FC_JITTER, LEAK_FC_JITTER))
    hiss = shaped_noise(rng, n, leak_gain(freqs, site, fc))
    return unit_rms(hiss * slow_envelope(rng, n, sr, LEAK_AM_DEPTH_DB, LEAK_AM_RATE_HZ))


def leak_band(site: Site) -> tuple[float, float]:
    """The octave around the site's leak resonance, (low, high) Hz: where SNR is measured."""
    return site.leak_fc_hz / np.sqrt(2.0), site.leak_fc_hz * np.sqrt(2.0)


def band_fraction(freqs: np.ndarray, gain: np.ndarray, band: tuple[float, float]) -> float:
    """Fraction of the power of a noise with amplitude spectrum ``gain`` that lies in ``band``."""
    power = gain**2
    inside = (freqs >= band[0]) & (freqs < band[1])
    return float(power[inside].sum() / power.sum())


def ambient_gain(freqs: np.ndarray, site: Site) -> np.ndarray:
    """Amplitude spectrum of the ambient background: 1 / f**(exponent / 2) above a floor."""
    return np.maximum(freqs, AMBIENT_FLOOR_HZ) ** (-site.ambient_exponent / 2.0)


def in_band_gain(n: int, sr: int, site: Site, snr_db: float) -> float:
    """Gain of unit-RMS leak-shaped noise that puts it ``snr_db`` above unit-RMS ambient noise
    in the octave around the site's leak band."""
    freqs = np.fft.rfftfreq(n, 1.0 / sr)
    band = leak_band(site)
    ambient = band_fraction(freqs, ambient_gain(freqs, site), band)
    leak = band_fraction(freqs, leak_gain(freqs, site), band)
    if leak == 0.0:  # the band lies above the Nyquist frequency: use a broadband SNR
        return float(10.0 ** (snr_db / 20.0))
    return float(np.sqrt(10.0 ** (snr_db / 10.0) * ambient / leak))


def ambient_noise(rng: np.random.Generator, n: int, sr: int, site: Site) -> np.ndarray:
    """Pink-to-brown environmental background (unit RMS)."""
    return shaped_noise(rng, n, ambient_gain(np.fft.rfftfreq(n, 1.0 / sr), site))


def flow_noise(rng: np.random.Generator, n: int, sr: int, site: Site) -> np.ndarray:
    """Normal flow noise: low-frequency, narrower than a leak, slowly fluctuating (unit RMS)."""
    freqs = np.fft.rfftfreq(n, 1.0 / sr)
    noise = shaped_noise(rng, n, resonance(freqs, site.flow_fc_hz, FLOW_Q))
    return unit_rms(noise * slow_envelope(rng, n, sr, FLOW_AM_DEPTH_DB, FLOW_AM_RATE_HZ))


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
    return _tones(rng, n, sr, freqs, amps, wander)


def pass_by(rng: np.random.Generator, n: int, sr: int, site: Site) -> np.ndarray:
    """Traffic on a nearby road: low-passed tyre / engine noise under a slow swell (unit RMS)."""
    freqs = np.fft.rfftfreq(n, 1.0 / sr)
    fc = _uniform(rng, PASS_BY_FC_HZ)
    noise = shaped_noise(rng, n, 1.0 / np.sqrt(1.0 + (freqs / fc) ** 4))
    t = np.arange(n) / sr
    centre, width = rng.uniform(0, n / sr), _uniform(rng, PASS_BY_WIDTH_S)
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
    return 10.0 ** (_uniform(rng, bounds) / 20.0)


def knock(rng: np.random.Generator, sr: int, site: Site) -> np.ndarray:
    """A knock on the pipe or nearby: a thump plus the pipe ringing in its leak band."""
    tau = _uniform(rng, KNOCK_TAU_S)
    n = max(2, int(TAIL_TAUS * tau * sr))
    freqs = np.fft.rfftfreq(n, 1.0 / sr)
    ring = shaped_noise(rng, n, leak_gain(freqs, site)) * np.exp(-np.arange(n) / (tau * sr))
    ring *= in_band_gain(n, sr, site, _uniform(rng, KNOCK_SNR_DB))
    thump = damped_mode(sr, _uniform(rng, THUMP_HZ), _uniform(rng, THUMP_TAU_S))
    event = np.zeros(max(n, thump.size))
    event[:n] += ring
    event[: thump.size] += thump * _db(rng, THUMP_DB)
    return event


def footsteps(rng: np.random.Generator, sr: int, site: Site) -> np.ndarray:
    """A walk-by: a few low-frequency thuds at walking pace."""
    count = int(rng.integers(STEP_COUNT[0], STEP_COUNT[1] + 1))
    starts = np.cumsum(rng.uniform(*STEP_INTERVAL_S, size=count)) * sr
    thuds = [damped_mode(sr, _uniform(rng, THUMP_HZ), _uniform(rng, THUMP_TAU_S))
             * _db(rng, STEP_DB) for _ in range(count)]
    event = np.zeros(int(starts[-1]) + max(t.size for t in thuds))
    for start, thud in zip(starts.astype(int), thuds, strict=True):
        _add_at(event, thud, start)
    return event


def click(rng: np.random.Generator, sr: int, site: Site) -> np.ndarray:
    """An electrical or valve click: a very short broadband burst."""
    tau = _uniform(rng, CLICK_TAU_S)
    t = np.arange(max(2, int(TAIL_TAUS * tau * sr))) / sr
    burst = rng.standard_normal(t.size) * np.exp(-t / tau)
    return burst / np.max(np.abs(burst)) * _db(rng, CLICK_DB)


def traffic(rng: np.random.Generator, sr: int, site: Site) -> np.ndarray:
    """A vehicle passing close by: low-passed tyre / engine rumble under a Gaussian swell."""
    width = _uniform(rng, TRAFFIC_WIDTH_S)
    t = np.arange(-TRAFFIC_SPAN * width, TRAFFIC_SPAN * width, 1.0 / sr)
    freqs = np.fft.rfftfreq(t.size, 1.0 / sr)
    fc = _uniform(rng, TRAFFIC_FC_HZ)
    rumble = shaped_noise(rng, t.size, 1.0 / np.sqrt(1.0 + (freqs / fc) ** 4))
    return rumble * np.exp(-0.5 * (t / width) ** 2) * _db(rng, TRAFFIC_DB)


def water_draw(rng: np.random.Generator, sr: int, site: Site) -> np.ndarray:
    """Water drawn nearby (a tap, a flush): leak-like hiss through the pipe, but for a moment."""
    ramp = int(DRAW_RAMP_S * sr)
    hold = int(_uniform(rng, DRAW_HOLD_S) * sr)
    envelope = np.concatenate([np.linspace(0, 1, ramp), np.ones(hold), np.linspace(1, 0, ramp)])
    freqs = np.fft.rfftfreq(envelope.size, 1.0 / sr)
    hiss = shaped_noise(rng, envelope.size, leak_gain(freqs, site))
    return hiss * envelope * in_band_gain(envelope.size, sr, site, _uniform(rng, DRAW_SNR_DB))


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
    rate = _uniform(rng, CRACK_RATE_HZ)
    gaps = rng.uniform(*CRACK_GAP_JITTER, size=int(2 * rate * n / sr) + 2) / rate
    starts = (np.cumsum(gaps) * sr).astype(int)
    out = np.zeros(n)
    for start in starts[starts < n]:
        freq = site.crack_hz * (1.0 + rng.uniform(-CRACK_MODE_JITTER, CRACK_MODE_JITTER))
        tick = damped_mode(sr, freq, _uniform(rng, CRACK_TAU_S))
        _add_at(out, tick * _db(rng, CRACK_DB), int(start))
    return out

"""Sites of the synthetic recordings, and every physical parameter of the model with its unit.

A *site* is one pipe + sensor + environment: its pipe material sets the resonant band that shapes
leak noise (higher for metal than for plastic), its sensor colours everything it hears, and its
environment fixes the mains frequency, the pump, the ambient noise colour and level.

The ranges below are kept together, not beside the sources that use them, so that the whole
physical model (docs/synth.md) can be read and tuned in one place. A ``(low, high)`` pair is a
range that a site, a recording or an event draws from uniformly; a scalar is a fixed constant.
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


def uniform(rng: np.random.Generator, bounds: tuple[float, float]) -> float:
    """One value drawn uniformly from a ``(low, high)`` parameter range."""
    return float(rng.uniform(*bounds))


def draw_site(seed: int, index: int) -> Site:
    """The site ``index`` of a data set with ``seed`` (independent of every other site)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, SITE_STREAM, index]))
    material = MATERIALS[index % len(MATERIALS)]
    leak_fc = uniform(rng, LEAK_FC_HZ[material])
    mains = float(rng.choice(MAINS_HZ))
    poles = int(rng.choice(MOTOR_POLES))
    return Site(
        index=index, material=material, leak_fc_hz=leak_fc,
        leak_q=uniform(rng, LEAK_Q[material]),
        attenuation_hz=uniform(rng, PIPE_ATTENUATION_HZ[material]),
        crack_hz=leak_fc * uniform(rng, CRACK_MODE_RATIO),
        sensor_highpass_hz=uniform(rng, SENSOR_HIGHPASS_HZ),
        sensor_resonance_hz=uniform(rng, SENSOR_RESONANCE_HZ),
        sensor_resonance_q=uniform(rng, SENSOR_RESONANCE_Q),
        sensor_resonance_gain=uniform(rng, SENSOR_RESONANCE_GAIN),
        sensitivity_db=uniform(rng, SENSOR_SENSITIVITY_DB),
        background_db=uniform(rng, BACKGROUND_DB),
        ambient_exponent=uniform(rng, AMBIENT_EXPONENT),
        mains_hz=mains,
        flow_fc_hz=uniform(rng, FLOW_FC_HZ),
        pump_shaft_hz=2 * mains / poles * (1 - uniform(rng, MOTOR_SLIP)),
        pump_blades=int(rng.integers(PUMP_BLADES[0], PUMP_BLADES[1] + 1)),
    )

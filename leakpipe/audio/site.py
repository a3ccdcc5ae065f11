"""Sites of the synthetic recordings, and every physical parameter of the model with its unit.

A *site* is one pipe + sensor + environment. Its pipe (material, diameter, wave speed, loss
factor) sets how leak noise is attenuated on its way to the sensor; its sensor (a hydrophone in
the water or an accelerometer on the pipe wall, each with its own response, sample rate and band
limit) colours everything it hears; its environment fixes the ambient noise, mains frequency,
pump, pressure-reducing valve and customers' water use.

The ranges below are kept together, not beside the sources that use them, so that the whole
physical model (docs/synth.md, with the source of every number) can be read and tuned in one
place. A ``(low, high)`` pair is a range that a site, a recording or an event draws from
uniformly; a scalar is a fixed constant.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

Material = Literal["metal", "plastic"]
Sensor = Literal["hydrophone", "accelerometer"]
MATERIALS: tuple[Material, ...] = ("metal", "plastic")  # sites alternate, so both always exist

# SeedSequence stream tags: keep site and recording streams independent for equal numbers.
SITE_STREAM = 1
RECORDING_STREAM = 2
FIELD_STREAM = 3         # a field recording's interference (the `field` set only)
MACHINE_STREAM = 4       # a field site's machine
POOL_ORDER_STREAM = 5    # the order of a field site's unlabelled recordings

# --- pipe ------------------------------------------------------------------------------------
# Axisymmetric (fluid-borne) wave speed and loss factor. Plastic pipe walls are soft, so the
# fluid wave is slow and strongly damped (Gao et al. 2004/2005, J. Sound Vib.: MDPE ~ 350-480
# m/s, eta ~ 0.06); in metal pipes the wave travels near the speed of sound in water and is
# damped an order of magnitude less (Muggleton et al. 2002; cast / ductile iron, steel).
WAVE_SPEED_MS: dict[Material, tuple[float, float]] = {"metal": (1100.0, 1350.0),
                                                      "plastic": (330.0, 550.0)}
LOSS_FACTOR: dict[Material, tuple[float, float]] = {"metal": (0.005, 0.02),
                                                    "plastic": (0.03, 0.08)}
DIAMETER_MM: dict[Material, tuple[float, float]] = {"metal": (80.0, 300.0),
                                                    "plastic": (63.0, 250.0)}
# Leak-to-sensor distance along the pipe, m. Correlator and listening-stick surveys place
# sensors at hydrants / valves 50-200 m apart in metal mains, and much closer in plastic pipes
# because the noise dies out (Hunaidi & Chu 1999; Fuchs & Riehle 1991).
LEAK_DISTANCE_M: dict[Material, tuple[float, float]] = {"metal": (5.0, 150.0),
                                                        "plastic": (1.0, 40.0)}
PRESSURE_BAR = (2.0, 8.0)              # operating pressure of the main, bar
PRESSURE_REF_BAR = 4.0                 # pressure at which the leak SNR range applies
# Leak noise level grows with pressure: jet noise power ~ exit velocity^4..8, velocity ~
# sqrt(pressure), so ~20-40 dB per decade of pressure; the low end, 20 dB per decade, is used.
LEAK_DB_PER_DECADE_PRESSURE = 20.0
# Turbulent source spectrum of the leak jet: flat up to a corner that scales with the jet
# velocity (Strouhal scaling, f ~ v / d_orifice) and falls at 2nd order above it.
LEAK_CORNER_HZ = (300.0, 1500.0)       # corner at the reference pressure, Hz
LEAK_AM_DEPTH_DB = 1.0                 # slow level wander of a leak (it runs day and night), dB
LEAK_AM_RATE_HZ = 1.0                  # rate of that wander's control points, Hz
# Pipe-section resonances between joints / fittings: gentle ripple on the transfer function.
PIPE_RIPPLE_DB = 3.0                   # peak-to-peak ripple, dB
PIPE_RIPPLE_SPACING_HZ = (40.0, 160.0)  # spacing of ripple peaks, Hz

# --- sensor ----------------------------------------------------------------------------------
SENSORS: tuple[Sensor, ...] = ("hydrophone", "accelerometer")
# Share of hydrophone sites per material: hydrophones are the usual choice on plastic mains,
# where wall vibration dies out quickly, accelerometers on metal mains.
HYDROPHONE_SHARE: dict[Material, float] = {"metal": 0.3, "plastic": 0.7}
SENSOR_HIGHPASS_HZ: dict[Sensor, tuple[float, float]] = {"hydrophone": (2.0, 10.0),
                                                         "accelerometer": (10.0, 40.0)}
# Accelerometers measure wall acceleration: ~ omega^2 times the pressure-driven displacement
# below the ring frequency, i.e. +12 dB per octave relative to a hydrophone, up to the mounting
# resonance (magnet mount on a valve / hydrant: 2-6 kHz).
ACCEL_REF_HZ = 500.0                   # frequency at which an accelerometer's tilt is 0 dB
SENSOR_RESONANCE_HZ = (2000.0, 6000.0)
SENSOR_RESONANCE_Q = (3.0, 8.0)
SENSOR_RESONANCE_GAIN = (0.3, 1.5)     # resonance peak added to the response (linear)
# Hydrophones hear the water's low-frequency pressure field (pump pulsation, surge, flow
# turbulence) that wall sensors barely see; in field hydrophone recordings it holds most of
# the power, 20-40 dB above the level at a few hundred Hz (real-dev testbed: ~99 % below 50 Hz).
HYDRO_LF_DB = (20.0, 40.0)             # LF pressure field re the broadband ambient, dB
HYDRO_LF_CORNER_HZ = (15.0, 50.0)      # corner of that field's low-pass, Hz
# Logger sample rates and their share: 8 kHz loggers and 44.1 / 48 kHz sound cards are common.
SAMPLE_RATES_WEIGHTS = {8000: 0.35, 16000: 0.25, 44100: 0.2, 48000: 0.2}
ANTI_ALIAS = 0.45                      # band limit of a logger, fraction of its sample rate
ANTI_ALIAS_ORDER = 40                  # its steepness (Butterworth order): ADC decimation
#                                        filters fall by tens of dB between 0.45 and 0.5 fs
SENSOR_NOISE_DB = -45.0                # white self-noise of the electronics re ambient RMS, dB
SENSOR_SENSITIVITY_DB = (-6.0, 6.0)    # sensor sensitivity of a site re nominal, dB

# --- environment -----------------------------------------------------------------------------
MAINS_HZ = (50.0, 60.0)                # grid frequency, Hz
MAINS_DRIFT_HZ = 0.05                  # grid frequency deviation, Hz (1 sigma)
HUM_HARMONICS = 8                      # highest harmonic of the mains hum
HUM_EVEN_WEIGHT = 0.4                  # even harmonics are weaker than odd ones (transformers)
HUM_DECAY = 0.7                        # amplitude ratio between successive hum harmonics
TONE_AMP_SPREAD = (0.3, 1.0)           # random factor on each tone's amplitude (hum, pump)
AMBIENT_EXPONENT = (1.0, 2.0)          # ambient power ~ 1 / f**exponent (1 = pink, 2 = brown)
AMBIENT_FLOOR_HZ = 10.0                # below this the ambient spectrum stays flat, Hz
BACKGROUND_DB = (-4.0, 4.0)            # site ambient level re a typical site, dB
FLOW_FC_HZ = (30.0, 120.0)             # centre of the (low, narrow) normal flow noise band, Hz
FLOW_Q = 1.2
FLOW_AM_DEPTH_DB = 3.0                 # slow level fluctuation of flow noise, dB (1 sigma)
FLOW_AM_RATE_HZ = 1.0

# --- legitimate water use: the hard negatives ------------------------------------------------
# Water drawn by customers (open taps, irrigation, filling tanks, night flow) is turbulent flow
# through a small orifice, the same physics as a leak: broadband hiss. It differs in where it
# comes from (a service pipe and meter beside the main, a smaller orifice and so a higher
# corner) and in that demand varies: levels wander faster and by more than a leak's.
USE_CORNER_HZ = (1000.0, 4000.0)       # corner of a tap / valve jet's spectrum, Hz
USE_DISTANCE_M = (0.5, 5.0)            # service connection to sensor along the main, m
USE_SERVICE_HZ = (150.0, 600.0)        # service-pipe band (copper / PE service line), centre Hz
USE_SERVICE_Q = (0.7, 1.5)
USE_AM_DEPTH_DB = (2.0, 5.0)           # demand wander, dB (1 sigma)
USE_AM_RATE_HZ = (1.0, 4.0)
USE_SWITCH_PROB = 0.4                  # share of uses that start or stop within the recording
# Pressure-reducing valve: throttling hiss plus whistle tones from the valve seat and a slow
# hunting of the pilot (Bergant et al.; utilities' PRV noise complaints).
PRV_WHISTLE_HZ = (250.0, 2500.0)       # whistle fundamental, Hz
PRV_WHISTLES = (1, 3)                  # whistle tones (inclusive range)
PRV_WHISTLE_DB = (6.0, 18.0)           # whistle level re the valve hiss in its band, dB
PRV_HUNT_HZ = (0.3, 2.0)               # pilot hunting rate, Hz
PRV_HUNT_DEPTH = (0.1, 0.5)            # relative amplitude modulation of the hunting
PRV_CORNER_HZ = (400.0, 2000.0)        # corner of the valve hiss, Hz
# Continuous traffic rumble of a busy road over the main: ground-borne, 10-200 Hz.
RUMBLE_FC_HZ = (40.0, 200.0)
RUMBLE_AM_DEPTH_DB = 4.0
RUMBLE_AM_RATE_HZ = 0.5

# --- pumps and motors ------------------------------------------------------------------------
MOTOR_POLES = (2, 4)                   # induction motor poles; shaft = 2 * mains / poles
MOTOR_SLIP = (0.02, 0.05)              # induction motor slip (fraction of synchronous speed)
PUMP_BLADES = (3, 7)                   # impeller blades (inclusive range)
SHAFT_HARMONICS = 4
BLADE_HARMONICS = 3
SHAFT_DECAY = 0.6                      # amplitude ratio between successive shaft harmonics
BLADE_DECAY = 0.5                      # amplitude ratio between successive blade-pass harmonics
MAGNETIC_HUM = 0.5                     # motor's twice-mains magnetic tone re the shaft tone
PUMP_BROADBAND_DB = (-12.0, -3.0)      # pump's hydraulic broadband noise re its tones, dB
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
TRAFFIC_WIDTH_S = (0.2, 0.6)           # standard deviation of the pass-by's Gaussian swell, s
TRAFFIC_SPAN = 2.5                     # a swell is cut at this many standard deviations
DRAW_SNR_DB = (10.0, 25.0)             # water drawn nearby: in-band SNR of its hiss, dB
DRAW_HOLD_S = (0.2, 1.0)               # how long the tap stays open, s
DRAW_RAMP_S = 0.05                     # opening / closing time of the tap, s
TAIL_TAUS = 6.0                        # an exponential decay is cut after this many taus

# --- crack ticks -----------------------------------------------------------------------------
CRACK_RATE_HZ = (1.5, 6.0)             # mean tick rate of a growing crack, ticks per second
CRACK_DB = (15.0, 30.0)                # tick peak re ambient RMS, dB
CRACK_TAU_S = (0.003, 0.012)           # ringing decay of one tick, s
CRACK_GAP_JITTER = (0.5, 1.5)          # tick-to-tick interval re the mean interval
CRACK_MODE_JITTER = 0.1                # relative spread of a tick's ringing frequency
CRACK_MODE_HZ: dict[Material, tuple[float, float]] = {"metal": (800.0, 3000.0),
                                                      "plastic": (200.0, 800.0)}

# --- other interference ----------------------------------------------------------------------
PASS_BY_FC_HZ = (150.0, 600.0)         # corner of tyre / engine noise of a busy road, Hz
PASS_BY_WIDTH_S = (1.5, 4.0)           # standard deviation of its slow Gaussian swell, s
RUN_UP_HZ = (15.0, 60.0)               # start and end shaft speeds of a machine run-up, Hz

# --- field interference: the domain shift of the `field` set ---------------------------------
# A machine working near a field site (an air compressor, a road-works generator, a breaker's
# power pack): engine-driven broadband noise, structure-borne through the ground into the
# fitting the sensor sits on, so the pipe does not filter it. It runs in bursts. No labelled
# site carries it (leakpipe.audio.field, docs/synth.md).
MACHINE_CENTRE_HZ = (300.0, 2000.0)    # centre of the machine's noise band (per site), Hz
MACHINE_BANDWIDTH_OCT = (0.8, 1.2)     # width of that band (per site), octaves
MACHINE_BAND_ORDER = 4                 # steepness of the band edges (Butterworth order)
MACHINE_ENGINE_HZ = (15.0, 40.0)       # engine firing rate: the noise's amplitude modulation, Hz
MACHINE_AM_DEPTH = (0.3, 0.8)          # depth of that modulation (per site)
MACHINE_BURST_S = (0.5, 3.0)           # how long the machine runs at a time, s
MACHINE_PAUSE_MIN_S = 0.3              # shortest pause between two bursts, s
MACHINE_RAMP_S = (0.02, 0.05)          # its start and stop ramps (raised cosine), s


@dataclass(frozen=True)
class Site:
    """One pipe + sensor + environment; every recording of a site shares these properties."""

    index: int
    material: Material
    diameter_mm: float
    wave_speed_ms: float         # fluid-borne wave speed in the pipe, m/s
    loss_factor: float           # pipe-wall loss factor (attenuation ~ f * eta / c per metre)
    pressure_bar: float
    ripple_spacing_hz: float     # spacing of the pipe-section resonance ripple, Hz
    crack_hz: float              # ringing frequency of crack ticks, Hz
    sensor: Sensor
    sample_rate: int             # the logger's sample rate, Hz
    sensor_highpass_hz: float
    sensor_resonance_hz: float
    sensor_resonance_q: float
    sensor_resonance_gain: float
    sensitivity_db: float        # gain of the sensor re the nominal gain, dB
    hydro_lf_db: float           # hydrophone's LF pressure field re ambient, dB (0 on walls)
    hydro_lf_hz: float
    background_db: float         # ambient level re a typical site, dB (higher = noisier site)
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


def draw_sample_rate(rng: np.random.Generator, rates: tuple[int, ...]) -> int:
    """A logger rate from ``rates``, weighted by how common it is (unknown rates: equal)."""
    weights = np.array([SAMPLE_RATES_WEIGHTS.get(r, 0.25) for r in rates])
    return int(rates[int(rng.choice(len(rates), p=weights / weights.sum()))])


def draw_site(seed: int, index: int, sample_rates: tuple[int, ...] = (8000,)) -> Site:
    """The site ``index`` of a data set with ``seed`` (independent of every other site)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, SITE_STREAM, index]))
    material = MATERIALS[index % len(MATERIALS)]
    sensor: Sensor = "hydrophone" if rng.random() < HYDROPHONE_SHARE[material] else "accelerometer"
    mains = float(rng.choice(MAINS_HZ))
    poles = int(rng.choice(MOTOR_POLES))
    hydro = sensor == "hydrophone"
    return Site(
        index=index, material=material,
        diameter_mm=uniform(rng, DIAMETER_MM[material]),
        wave_speed_ms=uniform(rng, WAVE_SPEED_MS[material]),
        loss_factor=uniform(rng, LOSS_FACTOR[material]),
        pressure_bar=uniform(rng, PRESSURE_BAR),
        ripple_spacing_hz=uniform(rng, PIPE_RIPPLE_SPACING_HZ),
        crack_hz=uniform(rng, CRACK_MODE_HZ[material]),
        sensor=sensor,
        sample_rate=draw_sample_rate(rng, sample_rates),
        sensor_highpass_hz=uniform(rng, SENSOR_HIGHPASS_HZ[sensor]),
        sensor_resonance_hz=uniform(rng, SENSOR_RESONANCE_HZ),
        sensor_resonance_q=uniform(rng, SENSOR_RESONANCE_Q),
        sensor_resonance_gain=uniform(rng, SENSOR_RESONANCE_GAIN) * (not hydro),
        sensitivity_db=uniform(rng, SENSOR_SENSITIVITY_DB),
        hydro_lf_db=uniform(rng, HYDRO_LF_DB) if hydro else 0.0,
        hydro_lf_hz=uniform(rng, HYDRO_LF_CORNER_HZ),
        background_db=uniform(rng, BACKGROUND_DB),
        ambient_exponent=uniform(rng, AMBIENT_EXPONENT),
        mains_hz=mains,
        flow_fc_hz=uniform(rng, FLOW_FC_HZ),
        pump_shaft_hz=2 * mains / poles * (1 - uniform(rng, MOTOR_SLIP)),
        pump_blades=int(rng.integers(PUMP_BLADES[0], PUMP_BLADES[1] + 1)),
    )


@dataclass(frozen=True)
class Machine:
    """The machine working near a field site: the same at every recording of the site."""

    centre_hz: float             # centre of its noise band, Hz
    bandwidth_oct: float         # width of that band, octaves
    engine_hz: float             # engine firing rate (amplitude modulation), Hz
    am_depth: float              # depth of that modulation, 0..1


def draw_machine(seed: int, index: int) -> Machine:
    """The machine at site ``index`` of a field set with ``seed`` (independent of its pipe)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, MACHINE_STREAM, index]))
    return Machine(centre_hz=uniform(rng, MACHINE_CENTRE_HZ),
                   bandwidth_oct=uniform(rng, MACHINE_BANDWIDTH_OCT),
                   engine_hz=uniform(rng, MACHINE_ENGINE_HZ),
                   am_depth=uniform(rng, MACHINE_AM_DEPTH))

"""The night at a network site: what a noise logger hears besides the pipe, coming and going.

Noise loggers record at night (about 02:00-04:00) because customers' water use and road
traffic are then at their lowest: the least non-leak noise. Lowest is not zero: vehicles
still pass, customers still draw water (a flush, a tank refilling), machines and pumps still
cycle. Each of these comes and goes, with quiet gaps between, while a leak (a turbulent jet at
the orifice) runs as steadily as the pressure behind it. So a leaking pipe stays loud in its
quietest moments and its short-time level varies little, whereas a quiet pipe's level falls to
its site's floor in the gaps and rises with every event: the low percentiles of the night's
level and its spread are the evidence a logger weighs, not its loudest moments. A 3 s clip
sees neither: it may catch a draw-off (broadband hiss through the same pipe, leak-like) or a
passing lorry, or nothing at all.

This module draws a site's night (how busy its street, how many customers draw water near the
logger, whether a machine cycles nearby) and renders one recording's events, each at its own
level as the logger hears it, re the site's ambient floor. The ranges and their reasons are
below; docs/synth.md#the-small-network-scenario lists them too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from leakpipe.audio import sources as src
from leakpipe.audio.site import (
    LEAK_DISTANCE_M,
    NYQUIST_MARGIN,
    USE_SERVICE_HZ,
    USE_SERVICE_Q,
    Site,
    uniform,
)
from leakpipe.audio.spectral import highpass, resonance, shaped_noise, slow_envelope

Gain = Callable[[np.ndarray], np.ndarray]  # amplitude spectrum over frequencies in Hz

# --- traffic -----------------------------------------------------------------------------------
# Vehicles on the street over the main: tyre and suspension vibration coupled through the
# ground into the chamber or valve box the logger sits in, so broadband low-frequency rumble
# (no pipe in between). A vehicle is heard for a few seconds as it approaches and recedes (a
# Gaussian swell). A city main runs under streets: at night a vehicle every 6-30 s (an
# assumption: 120-600 an hour, residential to arterial), ACTIVITY from night to night. Against
# a quiet night floor a passing vehicle is loud: its peak depends on the road's distance and
# surface and the chamber (per site) and on the vehicle (car or lorry: per pass-by).
TRAFFIC_PER_MIN = (2.0, 10.0)          # vehicles per minute at night, per site (log-uniform)
TRAFFIC_DB = (8.0, 22.0)               # a typical vehicle's peak re the floor, per site, dB
TRAFFIC_VEHICLE_DB = 8.0               # each vehicle: +- this around the site's typical, dB
TRAFFIC_WIDTH_S = (0.5, 1.5)           # standard deviation of the swell, s (speed, distance)
TRAFFIC_CORNER_HZ = (40.0, 250.0)      # corner of the ground-borne rumble, per site, Hz
TRAFFIC_SPAN = 3.0                     # a swell is cut at this many standard deviations
SUBSONIC_HZ = 8.0                      # traffic and machines: nothing below this, Hz
# --- customers' water use ----------------------------------------------------------------------
# A draw-off is turbulent flow through a small orifice (a tap, a cistern valve, a meter) behind a
# service pipe: the leak's physics (a jet driven by the same main pressure through an orifice
# of a similar size) heard through the same main from anywhere within the logger's range, so
# broadband hiss with a leak's corner and a leak's distances, coloured by its service pipe:
# why a clip's spectrum confuses the two. It lasts seconds (a hand wash) to a minute or more (a
# cistern or a tank refilling); at the night minimum of demand the few to hundred properties
# within a logger's hearing range draw now and then: one every 1-20 min.
USE_CORNER_HZ = (300.0, 1500.0)        # corner of its jet at the reference pressure, Hz
USE_PER_MIN = (0.05, 1.0)              # draw-offs starting per minute near the logger, per site
USE_DURATION_S = (5.0, 90.0)           # how long one lasts (log-uniform), s
USE_DB = (0.0, 15.0)                   # its level as heard re the floor, per draw-off, dB
USE_RAMP_S = (0.3, 2.0)                # a tap or valve opening and closing, s
USE_WANDER_DB = 1.0                    # demand wander while it runs, dB (1 sigma)
USE_WANDER_RATE_HZ = 1.0
USE_SERVICE_BASE = 0.3                 # the service pipe's colour: its band over this base
# --- machinery in bursts -----------------------------------------------------------------------
# At most city sites some machine near the fitting runs in bursts at night (a booster pump
# short-cycling on its pressure switch, a compressor, a fan): a noise band with its engine's
# modulation, on for seconds, then off.
MACHINE_SITE_SHARE = 0.6
MACHINE_CENTRE_HZ = (80.0, 1200.0)     # centre of its noise band, per site, Hz
MACHINE_OCTAVES = (1.0, 2.0)           # width of that band, octaves
MACHINE_ENGINE_HZ = (10.0, 30.0)       # its amplitude modulation (firing / blade rate), Hz
MACHINE_AM_DEPTH = (0.2, 0.6)
MACHINE_ON_S = (2.0, 10.0)             # one run, s
MACHINE_OFF_S = (2.0, 15.0)            # the pause after it, s
MACHINE_DB = (3.0, 15.0)               # its level while running re the floor, per site, dB
MACHINE_RAMP_S = 0.3
# --- the network's own hum ----------------------------------------------------------------------
# A pipe carries noise from the whole network to the logger: flow turbulence, consumption and
# valves far along the main, all through the same pipe as a leak's noise (so with a jet's
# spectrum and the pipe's attenuation over a long way). It is steady: the pipe-borne part of
# the site's quiet floor, the rest being the ground's (environmental) vibration; which
# dominates differs from site to site, and so does the floor's colour.
PIPE_FLOOR_SHARE = (0.1, 0.9)          # its share of the floor's power as heard, per site
PIPE_FLOOR_CORNER_HZ = (300.0, 1500.0)  # corner of its jet spectrum, per site, Hz
PIPE_FLOOR_DISTANCE = (1.0, 3.0)       # its sources' distance re the site's longest leak path
PIPE_FLOOR_WANDER_DB = 1.0             # its slow wander (flows change), dB (1 sigma)
PIPE_FLOOR_WANDER_RATE_HZ = 1.0
# --- the night's activity ----------------------------------------------------------------------
# One night is busier than another (a weekend, a late bus, a shift change): every rate of a
# recording is the site's typical rate times a factor drawn per recording.
ACTIVITY = (0.5, 2.0)                  # rates of one night re the site's typical (log-uniform)


@dataclass(frozen=True)
class NightSite:
    """How busy a site's nights are: the same for every recording of the site."""

    traffic_per_s: float
    traffic_db: float
    traffic_corner_hz: float
    use_per_s: float
    machine_hz: float | None     # centre of its machine's band; None: no machine cycles here
    machine_octaves: float
    machine_engine_hz: float
    machine_am_depth: float
    machine_db: float
    pipe_floor_share: float      # the network's pipe-borne share of the quiet floor
    pipe_floor_corner_hz: float
    pipe_floor_distance: float   # re the site's longest leak path


def log_uniform(rng: np.random.Generator, bounds: tuple[float, float]) -> float:
    return float(np.exp(rng.uniform(np.log(bounds[0]), np.log(bounds[1]))))


def draw_night_site(rng: np.random.Generator) -> NightSite:
    """A site's night: its street, its customers, its machine, its pipe-borne floor (every
    draw always made, so that one site's machine does not shift another range's draws)."""
    traffic = log_uniform(rng, TRAFFIC_PER_MIN) / 60.0
    traffic_db, corner = uniform(rng, TRAFFIC_DB), uniform(rng, TRAFFIC_CORNER_HZ)
    use = log_uniform(rng, USE_PER_MIN) / 60.0
    has_machine = rng.random() < MACHINE_SITE_SHARE
    centre, octaves = log_uniform(rng, MACHINE_CENTRE_HZ), uniform(rng, MACHINE_OCTAVES)
    engine, depth = uniform(rng, MACHINE_ENGINE_HZ), uniform(rng, MACHINE_AM_DEPTH)
    return NightSite(traffic_per_s=traffic, traffic_db=traffic_db, traffic_corner_hz=corner,
                     use_per_s=use, machine_hz=centre if has_machine else None,
                     machine_octaves=octaves, machine_engine_hz=engine,
                     machine_am_depth=depth, machine_db=uniform(rng, MACHINE_DB),
                     pipe_floor_share=uniform(rng, PIPE_FLOOR_SHARE),
                     pipe_floor_corner_hz=uniform(rng, PIPE_FLOOR_CORNER_HZ),
                     pipe_floor_distance=uniform(rng, PIPE_FLOOR_DISTANCE))


def rumble_gain(f: np.ndarray, corner_hz: float) -> np.ndarray:
    """Ground-borne traffic rumble: flat up to ``corner_hz``, 2nd order above."""
    return highpass(f, SUBSONIC_HZ) / np.sqrt(1.0 + (f / corner_hz) ** 4)


def draw_off_gain(f: np.ndarray, site: Site, corner_hz: float, service_hz: float,
                  service_q: float, distance_m: float) -> np.ndarray:
    """A draw-off where it reaches the logger: a small jet, its service pipe, the main."""
    service = USE_SERVICE_BASE + resonance(f, service_hz, service_q)
    return src.jet_spectrum(f, corner_hz) * service * src.pipe_transfer(f, site, distance_m)


def band_gain(f: np.ndarray, centre_hz: float, q: float) -> np.ndarray:
    """A machine's noise band around ``centre_hz`` (quality factor ``q``), nothing at DC."""
    return resonance(f, centre_hz, q) * highpass(f, SUBSONIC_HZ)


def heard_rms(gain: np.ndarray, response: np.ndarray) -> float:
    """RMS, as heard through ``response``, of unit-RMS noise of amplitude spectrum ``gain``."""
    return float(np.sqrt(np.mean((gain * response) ** 2) / np.mean(gain**2)))


def _ramped(m: int, sr: int, ramp_s: float) -> np.ndarray:
    """1 for ``m`` samples with raised-cosine ramps of ``ramp_s`` at both ends."""
    ramp = max(1, min(int(ramp_s * sr), m // 2))
    rise = 0.5 - 0.5 * np.cos(np.pi * np.arange(ramp) / ramp)
    out = np.ones(m)
    out[:ramp], out[m - ramp:] = rise, rise[::-1]
    return out


def _add_event(out: np.ndarray, rng: np.random.Generator, sr: int, start: int,
               envelope: np.ndarray, gain: Gain, level_db: float, response: np.ndarray) -> None:
    """Add noise of spectrum ``gain`` under ``envelope`` from sample ``start`` (may be
    negative; cut at the recording's ends), ``level_db`` re the ambient as heard where the
    envelope is 1. Mechanical samples: the caller applies ``response`` once, to the sum."""
    lo, hi = max(start, 0), min(start + envelope.size, out.size)
    if lo >= hi:
        return
    m = hi - lo
    noise = shaped_noise(rng, m, gain(np.fft.rfftfreq(m, 1.0 / sr)))
    freqs = np.fft.rfftfreq(out.size, 1.0 / sr)
    scale = 10.0 ** (level_db / 20.0) / heard_rms(gain(freqs), response)
    out[lo:hi] += noise * envelope[lo - start:hi - start] * scale


def _starts(rng: np.random.Generator, n: int, sr: int, rate_hz: float,
            lead_s: float) -> np.ndarray:
    """Poisson start times (samples) from ``lead_s`` before the recording to its end, so that an
    event already running when the logger wakes is heard too."""
    span = n / sr + lead_s
    count = int(rng.poisson(rate_hz * span))
    return np.sort((rng.uniform(0.0, span, count) - lead_s) * sr).astype(int)


def traffic(rng: np.random.Generator, n: int, sr: int, night: NightSite, activity: float,
            response: np.ndarray) -> np.ndarray:
    """The vehicles passing during one recording (mechanical samples, re the ambient)."""
    gain = partial(rumble_gain, corner_hz=night.traffic_corner_hz)
    out = np.zeros(n)
    lead = TRAFFIC_SPAN * TRAFFIC_WIDTH_S[1]
    for start in _starts(rng, n, sr, night.traffic_per_s * activity, 2 * lead):
        width = uniform(rng, TRAFFIC_WIDTH_S)
        t = np.arange(-TRAFFIC_SPAN * width, TRAFFIC_SPAN * width, 1.0 / sr)
        level = night.traffic_db + rng.uniform(-TRAFFIC_VEHICLE_DB, TRAFFIC_VEHICLE_DB)
        swell = np.exp(-0.5 * (t / width) ** 2)
        _add_event(out, rng, sr, int(start), swell, gain, level, response)
    return out


def draw_offs(rng: np.random.Generator, n: int, sr: int, site: Site, night: NightSite,
              activity: float, response: np.ndarray) -> np.ndarray:
    """Customers' draw-offs during one recording, each from its own service connection."""
    out = np.zeros(n)
    for start in _starts(rng, n, sr, night.use_per_s * activity, USE_DURATION_S[1]):
        m = int(log_uniform(rng, USE_DURATION_S) * sr)
        gain = partial(draw_off_gain, site=site,
                       corner_hz=src.leak_corner(site, uniform(rng, USE_CORNER_HZ)),
                       service_hz=uniform(rng, USE_SERVICE_HZ),
                       service_q=uniform(rng, USE_SERVICE_Q),
                       distance_m=uniform(rng, LEAK_DISTANCE_M[site.material]))
        envelope = _ramped(m, sr, uniform(rng, USE_RAMP_S)) * slow_envelope(
            rng, m, sr, USE_WANDER_DB, USE_WANDER_RATE_HZ)
        _add_event(out, rng, sr, int(start), envelope, gain, uniform(rng, USE_DB), response)
    return out


def machine(rng: np.random.Generator, n: int, sr: int, night: NightSite,
            response: np.ndarray) -> np.ndarray:
    """The site's machine cycling on and off during one recording (zeros where none)."""
    out = np.zeros(n)
    if night.machine_hz is None:
        return out
    half = 2.0 ** (night.machine_octaves / 2.0)
    centre = min(night.machine_hz, NYQUIST_MARGIN * sr / half)
    # a band `machine_octaves` wide between its -3 dB points
    gain = partial(band_gain, centre_hz=centre, q=1.0 / (half - 1.0 / half))
    start = -rng.uniform(0.0, MACHINE_ON_S[1] + MACHINE_OFF_S[1]) * sr
    while start < n:
        m = int(uniform(rng, MACHINE_ON_S) * sr)
        t = np.arange(m) / sr
        engine = 1.0 + night.machine_am_depth * np.sin(
            2 * np.pi * night.machine_engine_hz * t + rng.uniform(0, 2 * np.pi))
        envelope = _ramped(m, sr, MACHINE_RAMP_S) * engine
        _add_event(out, rng, sr, int(start), envelope, gain, night.machine_db, response)
        start += m + uniform(rng, MACHINE_OFF_S) * sr
    return out


def pipe_floor(rng: np.random.Generator, n: int, sr: int, site: Site, night: NightSite,
               response: np.ndarray) -> np.ndarray:
    """The network's steady pipe-borne noise at the logger, as heard, at its share of the
    ambient's power (the caller scales the environmental floor to the rest)."""
    freqs = np.fft.rfftfreq(n, 1.0 / sr)
    distance = night.pipe_floor_distance * LEAK_DISTANCE_M[site.material][1]
    gain = (src.jet_spectrum(freqs, src.leak_corner(site, night.pipe_floor_corner_hz))
            * src.pipe_transfer(freqs, site, distance))
    noise = shaped_noise(rng, n, gain) * slow_envelope(rng, n, sr, PIPE_FLOOR_WANDER_DB,
                                                        PIPE_FLOOR_WANDER_RATE_HZ)
    heard = np.fft.irfft(np.fft.rfft(noise) * response, n)
    return heard / heard_rms(gain, response) * np.sqrt(night.pipe_floor_share)


def night_noise(rng: np.random.Generator, n: int, sr: int, site: Site, night: NightSite,
                response: np.ndarray) -> np.ndarray:
    """Everything intermittent in one recording, as the logger hears it, re the ambient RMS.

    Each kind draws from its own child generator, so a busier street changes no draw-off.
    """
    activity_rng, traffic_rng, use_rng, machine_rng = rng.spawn(4)
    activity = log_uniform(activity_rng, ACTIVITY)
    mech = (traffic(traffic_rng, n, sr, night, activity, response)
            + draw_offs(use_rng, n, sr, site, night, activity, response)
            + machine(machine_rng, n, sr, night, response))
    return np.fft.irfft(np.fft.rfft(mech) * response, n)

"""The sites of the `small_network` scenario: one logger at one fitting each, as drawn.

A site's pipe, pressure, pump and mains come from the benchmark's ``draw_site``; the logger (one
model everywhere), the fitting it sits on, its tones, its valve, its leak, its offset and its
night (``leakpipe.audio.night``) are drawn here, each from a generator seeded by (seed, stream,
site), so a site depends on nothing but its seed and index; which sites leak and which loggers
carry an offset are exact shares of ``network_sites``. What varies from night to night is
drawn per recording (``leakpipe.audio.network_recording``). The ranges and their reasons are
below.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal, TypeVar

import numpy as np

from leakpipe.audio import sources as src
from leakpipe.audio.night import NightSite, draw_night_site
from leakpipe.audio.site import (
    LEAK_CORNER_HZ,
    LEAK_DISTANCE_M,
    SENSOR_HIGHPASS_HZ,
    SENSOR_RESONANCE_GAIN,
    Site,
    draw_site,
    uniform,
)
from leakpipe.config import SynthConfig
from leakpipe.constants import LEAK_CLASS, NOLEAK_CLASS

T = TypeVar("T")

SiteKind = Literal["leak", "noleak", "repaired"]
# SeedSequence stream tags (leakpipe.audio.site uses 1-5 for the benchmark and the field set).
NETWORK_SITE_STREAM = 11     # a site's logger, fitting, machines and leak
NETWORK_KINDS_STREAM = 12    # which sites leak
NETWORK_RECORDING_STREAM = 13
NETWORK_OFFSET_STREAM = 14   # which loggers have an offset
NETWORK_GAIN_STREAM = 15     # the network's logger gain
NETWORK_NIGHT_STREAM = 16    # a logger's own gain, its site's night (leakpipe.audio.night)

# --- the logger ------------------------------------------------------------------------------
# Noise loggers sample a few kHz: leak noise lies below ~1.5 kHz on metal pipes and a few
# hundred Hz on plastic ones (Gao et al. 2005), and a low rate saves battery. They record short
# bursts at night, when demand and traffic are lowest (Hunaidi & Chu 1999).
SAMPLE_RATE = 4096
DURATION_S = (10.0, 20.0)
# One calibration: a nominal site's quiet floor, as heard, sits here at the nominal gain (16-bit
# quantisation noise 35-45 dB below it; the night's loudest moments, ~30 dB above it, below
# full scale). A network's loggers are one model set up alike: they share a gain, drawn per
# network in +-NETWORK_GAIN_DB; each logger's sensitivity and mounting add +-LOGGER_GAIN_DB.
# Absolute levels are therefore comparable across the sites of one network, not across
# networks.
AMBIENT_DBFS = -56.0
NETWORK_GAIN_DB = 6.0
LOGGER_GAIN_DB = 1.5
# An ADC / amplifier offset on most loggers (in a measured city network 46 of 55 recordings
# carry one, |mean| / RMS up to 0.78): DC_LOGGER_SHARE of the loggers (an exact count), sized
# re the site's quiet floor (log-uniform; the night's events, tones and leaks lower |mean| /
# RMS), drifting between recordings (DC_DRIFT, leakpipe.audio.network_recording).
DC_LOGGER_SHARE = 0.85
DC_RATIO = (0.4, 5.0)

# --- sites -----------------------------------------------------------------------------------
# Site kinds (exact counts, shuffled): in the measured network 20 of 29 sites leak; a repaired
# leak gives a site recordings of both classes, before and after.
REPAIRED_SHARE = 0.12
NOLEAK_SHARE = 1.0 / 3.0     # of the sites that are not repaired
# Recordings per site (1, 2, 3): a found leak is repaired after a night or two, quiet points are
# logged night after night (measured: 1.3 recordings per leak site, 3.2 per quiet one).
COUNT_WEIGHTS: dict[str, tuple[float, float, float]] = {"leak": (0.5, 0.35, 0.15),
                                                        "noleak": (0.1, 0.3, 0.6)}
# The quiet floor (the ambient between events) re nominal: depth, soil and the pipe make sites
# differ by a few dB; a busy street is the traffic of leakpipe.audio.night, not a louder floor.
# It wanders from night to night (NIGHT_DB, leakpipe.audio.network_recording).
SITE_LEVEL_DB = (-3.0, 3.0)
# The fitting (valve spindle, hydrant, chamber) the logger's magnet sits on: 1-3 structural
# modes in the leak band, and a tilt from how stiffly it couples to the pipe.
FITTING_MODES = (1, 3)
FITTING_HZ = (150.0, 1600.0)
FITTING_Q = (2.0, 8.0)
FITTING_GAIN_DB = (3.0, 12.0)
FITTING_TILT_DB_PER_OCTAVE = (-3.0, 3.0)
FITTING_TILT_HZ = (20.0, 500.0)  # the tilt is 0 dB at the upper and held below the lower, Hz
# Tones, re the ambient as heard: electrical pickup, the site's pump (shaft and blade-pass
# lines, hydraulic noise) and 1-2 machines nearby (fans, compressors, a booster).
HUM_DB = (-18.0, 0.0)
PUMP_DB = (-15.0, -3.0)
MACHINE_TONES = (1, 2)
MACHINE_HZ = (100.0, 1600.0)
MACHINE_DB = (-18.0, -6.0)
# The leak at the logger (broadband, as heard: the level a logger reports) re a nominal site's
# floor at the reference pressure, dB, from barely above the floor to clearly audible. The leak
# and the pipe set it, not the site's noise, which its SNR then subtracts: about 6 % of the
# leak sites are below their floor, most (~70 %) below their street's typical vehicle, so a
# weak leak shows only in the quiet gaps. It runs all night (a jet as steady as the pressure
# behind it), wandering from night to night (LEAK_NIGHT_DB, leakpipe.audio.network_recording).
LEAK_DB = (0.0, 17.0)
# Steady hard negatives, at the logger like the leak and as loud as a quiet one: a pressure-
# reducing valve hissing all night at some sites (a fixture, as steady as a leak). What comes
# and goes (traffic, customers' draw-offs, machines cycling) is leakpipe.audio.night.
PRV_SITE_SHARE = 0.2
PRV_SNR_DB = (-3.0, 9.0)


@dataclass(frozen=True)
class NetworkSite:
    """One logger at one fitting: what every recording of the site shares."""

    site: Site                                       # pipe, pressure, pump, mains, sensor
    kind: SiteKind
    classes: tuple[str, ...]                         # class of each recording, in order
    n_samples: tuple[int, ...]                       # length of each recording
    level_db: float                                  # ambient re nominal, dB
    fitting: tuple[tuple[float, float, float], ...]  # modes: (Hz, Q, gain dB)
    tilt_db_per_octave: float
    hum_db: float
    pump_db: float
    machine_hz: tuple[float, ...]
    machine_db: float
    prv_snr_db: float | None                         # None: no valve at this site
    leak_corner_hz: float
    leak_distance_m: float
    leak_snr_db: float                               # its leak (if any) at the logger, dB
    dc_offset: float                                 # the logger's offset, full scale
    gain_db: float                                   # the logger's gain re nominal, dB
    night: NightSite                                 # what comes and goes at this site


def _shuffled(seed: int, stream: int, values: list[T]) -> tuple[T, ...]:
    """``values`` in an order drawn from (seed, stream, how many): exact shares, any order."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, stream, len(values)]))
    return tuple(values[i] for i in rng.permutation(len(values)))


def network_gain_db(seed: int) -> float:
    """The gain every logger of the network of ``seed`` shares, dB re nominal."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, NETWORK_GAIN_STREAM]))
    return uniform(rng, (-NETWORK_GAIN_DB, NETWORK_GAIN_DB))


def site_kinds(seed: int, n_sites: int) -> tuple[SiteKind, ...]:
    """Kinds of ``n_sites`` sites: REPAIRED_SHARE repaired, NOLEAK_SHARE of the rest quiet."""
    repaired = round(REPAIRED_SHARE * n_sites)
    noleak = max(1, round((n_sites - repaired) * NOLEAK_SHARE))
    kinds: list[SiteKind] = (["repaired"] * repaired + ["noleak"] * noleak
                             + ["leak"] * (n_sites - repaired - noleak))
    return _shuffled(seed, NETWORK_KINDS_STREAM, kinds)


def offset_loggers(seed: int, n_sites: int) -> tuple[bool, ...]:
    """Which of ``n_sites`` loggers have an ADC offset: DC_LOGGER_SHARE of them."""
    with_offset = round(DC_LOGGER_SHARE * n_sites)
    return _shuffled(seed, NETWORK_OFFSET_STREAM,
                     [True] * with_offset + [False] * (n_sites - with_offset))


def _recording_classes(rng: np.random.Generator, kind: SiteKind) -> tuple[str, ...]:
    """1-3 recordings of one class, or (repaired) 1-2 leaking ones followed by quiet ones."""
    u, split = rng.random(), rng.random()
    if kind == "repaired":
        count = 2 if u < 0.5 else 3
        n_leak = 1 + int(split * (count - 1))
        return (LEAK_CLASS,) * n_leak + (NOLEAK_CLASS,) * (count - n_leak)
    count = 1 + int(np.searchsorted(np.cumsum(COUNT_WEIGHTS[kind]), u, side="right"))
    return ((LEAK_CLASS if kind == "leak" else NOLEAK_CLASS),) * min(count, 3)  # (rounding)


def draw_network_site(seed: int, index: int, kind: SiteKind, has_dc: bool) -> NetworkSite:
    """Site ``index`` of the network of ``seed``: its pipe, pressure, pump and mains from
    ``draw_site``; one logger model everywhere (a contact accelerometer, magnet-mounted on a
    valve or hydrant); the rest drawn here. Its draws depend on neither ``kind`` nor ``has_dc``.
    """
    base = draw_site(seed, index, (SAMPLE_RATE,))
    rng = np.random.default_rng(np.random.SeedSequence([seed, NETWORK_SITE_STREAM, index]))
    site = dataclasses.replace(
        base, sensor="accelerometer", hydro_lf_db=0.0,
        sensor_highpass_hz=uniform(rng, SENSOR_HIGHPASS_HZ["accelerometer"]),
        sensor_resonance_gain=uniform(rng, SENSOR_RESONANCE_GAIN))
    level_db = uniform(rng, SITE_LEVEL_DB)
    modes = int(rng.integers(FITTING_MODES[0], FITTING_MODES[1] + 1))
    fitting = tuple((uniform(rng, FITTING_HZ), uniform(rng, FITTING_Q),
                     uniform(rng, FITTING_GAIN_DB)) for _ in range(modes))
    tilt, hum_db, pump_db = (uniform(rng, FITTING_TILT_DB_PER_OCTAVE), uniform(rng, HUM_DB),
                             uniform(rng, PUMP_DB))
    n_machines = int(rng.integers(MACHINE_TONES[0], MACHINE_TONES[1] + 1))
    machine_hz = tuple(float(f) for f in rng.uniform(*MACHINE_HZ, size=n_machines))
    machine_db = uniform(rng, MACHINE_DB)
    has_prv, prv_snr_db = rng.random() < PRV_SITE_SHARE, uniform(rng, PRV_SNR_DB)
    corner = src.leak_corner(site, uniform(rng, LEAK_CORNER_HZ))
    distance = uniform(rng, LEAK_DISTANCE_M[site.material])
    leak_snr_db = uniform(rng, LEAK_DB) + src.pressure_db(site) - level_db
    ratio = float(np.exp(uniform(rng, (np.log(DC_RATIO[0]), np.log(DC_RATIO[1])))))
    dc = has_dc * ratio * rng.choice([-1.0, 1.0]) * 10.0 ** ((AMBIENT_DBFS + level_db) / 20.0)
    classes = _recording_classes(rng, kind)
    lengths = tuple(int(round(uniform(rng, DURATION_S) * SAMPLE_RATE)) for _ in classes)
    night_rng = np.random.default_rng(np.random.SeedSequence([seed, NETWORK_NIGHT_STREAM, index]))
    gain_db = network_gain_db(seed) + uniform(night_rng, (-LOGGER_GAIN_DB, LOGGER_GAIN_DB))
    return NetworkSite(site=site, kind=kind, classes=classes, n_samples=lengths,
                       level_db=level_db, fitting=fitting, tilt_db_per_octave=tilt,
                       hum_db=hum_db, pump_db=pump_db, machine_hz=machine_hz,
                       machine_db=machine_db, prv_snr_db=prv_snr_db if has_prv else None,
                       leak_corner_hz=corner, leak_distance_m=distance,
                       leak_snr_db=leak_snr_db, dc_offset=float(dc), gain_db=gain_db,
                       night=draw_night_site(night_rng))


def network_sites(cfg: SynthConfig) -> list[NetworkSite]:
    """The network's sites: which kind and offset each gets depends on ``network_sites``."""
    kinds = site_kinds(cfg.seed, cfg.network_sites)
    offsets = offset_loggers(cfg.seed, cfg.network_sites)
    return [draw_network_site(cfg.seed, i, kind, dc)
            for i, (kind, dc) in enumerate(zip(kinds, offsets, strict=True))]

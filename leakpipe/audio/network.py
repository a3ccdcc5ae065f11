"""The `small_network` scenario of `synth`: a small utility network shaped like real logger data.

Real utility data sets are small and grouped: a few dozen loggers of one model, each left at a
fitting for a night or two, so a site is heard once to a few times and is essentially
single-class (a logger sits at a leaking pipe or it does not). A model that tells sites apart
by their background can score well there without hearing leaks; this scenario lets grouped
cross-validation measure how far a recipe does that (docs/synth.md). Every site has its own
background, shared by all its recordings (ambient level, the fitting's colouring, mains hum,
pump and machine lines, the logger's offset); most sites are single-class. The night comes and
goes around it (``leakpipe.audio.night``: traffic, customers' draw-offs, machinery in bursts,
with quiet gaps between), while a leak runs steadily: a leak is louder than its site's quiet
floor and often quieter than its loud moments, so the evidence is in the recording's quiet
moments and its steadiness, not in a clip's mean spectrum. One network's loggers share a gain.
The ranges and their reasons are below.

Built from the benchmark's sources (``leakpipe.audio.sources``, ``tones_transients``) at sites
drawn by ``draw_site``. Each recording has its own generator seeded by (seed, site, index), so
its bytes depend on nothing else (not the worker count, not the rendering order).
"""

from __future__ import annotations

import csv
import dataclasses
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

import numpy as np
import soundfile as sf
from tqdm import tqdm

from leakpipe.audio import sources as src
from leakpipe.audio import synth, tones_transients
from leakpipe.audio.night import NightSite, draw_night_site, heard_rms, night_noise, pipe_floor
from leakpipe.audio.site import (
    LEAK_AM_DEPTH_DB,
    LEAK_AM_RATE_HZ,
    LEAK_CORNER_HZ,
    LEAK_DISTANCE_M,
    NYQUIST_MARGIN,
    SENSOR_HIGHPASS_HZ,
    SENSOR_NOISE_DB,
    SENSOR_RESONANCE_GAIN,
    Site,
    draw_site,
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
from leakpipe.config import SynthConfig
from leakpipe.constants import LEAK_CLASS, MANIFEST_NAME, NOLEAK_CLASS

log = logging.getLogger(__name__)
T = TypeVar("T")

SiteKind = Literal["leak", "noleak", "repaired"]
MANIFEST_FIELDS = (*synth.MANIFEST_FIELDS, "site_kind", "leak_snr_db")
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
# RMS), drifting by +-DC_DRIFT between recordings with temperature and battery.
DC_LOGGER_SHARE = 0.85
DC_RATIO = (0.4, 5.0)
DC_DRIFT = 0.2

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
# It wanders by +-NIGHT_DB from night to night.
SITE_LEVEL_DB = (-3.0, 3.0)
NIGHT_DB = 1.0
# The fitting (valve spindle, hydrant, chamber) the logger's magnet sits on: 1-3 structural
# modes in the leak band, and a tilt from how stiffly it couples to the pipe.
FITTING_MODES = (1, 3)
FITTING_HZ = (150.0, 1600.0)
FITTING_Q = (2.0, 8.0)
FITTING_GAIN_DB = (3.0, 12.0)
FITTING_TILT_DB_PER_OCTAVE = (-3.0, 3.0)
FITTING_TILT_HZ = (20.0, 500.0)  # the tilt is 0 dB at the upper and held below the lower, Hz
# Tones, re the ambient as heard: electrical pickup, the site's pump (shaft and blade-pass
# lines, hydraulic noise) and 1-2 machines nearby (fans, compressors, a booster). Synchronous
# machines follow the grid: their speed wanders by ~0.1 %, so their lines stay narrow.
HUM_DB = (-18.0, 0.0)
PUMP_DB = (-15.0, -3.0)
MACHINE_TONES = (1, 2)
MACHINE_HZ = (100.0, 1600.0)
MACHINE_DB = (-18.0, -6.0)
MACHINE_WANDER = 0.001
MACHINE_WANDER_RATE_HZ = 0.5
TONE_NIGHT_DB = 2.0          # the machines' load from night to night, +- dB
# The leak at the logger (broadband, as heard: the level a logger reports) re a nominal site's
# floor at the reference pressure, dB, from barely above the floor to clearly audible. The leak
# and the pipe set it, not the site's noise, which its SNR then subtracts: about 6 % of the
# leak sites are below their floor, most (~70 %) below their street's typical vehicle, so a
# weak leak shows only in the quiet gaps. It runs all night (a jet as steady as the pressure
# behind it), wandering +-LEAK_NIGHT_DB from night to night.
LEAK_DB = (0.0, 17.0)
LEAK_NIGHT_DB = 1.5
# Steady hard negatives, at the logger like the leak and as loud as a quiet one: a pressure-
# reducing valve hissing all night at some sites (a fixture, as steady as a leak). Normal
# flow noise: narrow, below 120 Hz. What comes and goes (traffic, customers' draw-offs,
# machines cycling) is leakpipe.audio.night.
PRV_SITE_SHARE = 0.2
PRV_SNR_DB = (-3.0, 9.0)
FLOW_SHARE, FLOW_DB = 0.5, (-9.0, 3.0)
TRANSIENT_RATE_HZ = 0.1      # few knocks, steps or passing cars at night, events per s


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


# --- one recording ---------------------------------------------------------------------------


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


# --- the data set ----------------------------------------------------------------------------


def recording_name(ns: NetworkSite, index: int) -> str:
    return f"{ns.site.site_id}_{ns.classes[index]}_{index:04d}.wav"


def _render_job(job: tuple[int, NetworkSite, int]) -> np.ndarray:
    return render_network_recording(*job)


def _write_all(cfg: SynthConfig, root: Path, progress: bool) -> dict[str, int]:
    """Render every recording into ``root`` and write the manifest; returns counts per class."""
    jobs = [(cfg.seed, ns, i) for ns in network_sites(cfg) for i in range(len(ns.classes))]
    workers = min(cfg.workers or os.cpu_count() or 1, len(jobs))
    counts = dict.fromkeys((LEAK_CLASS, NOLEAK_CLASS), 0)
    with open(root / MANIFEST_NAME, "w", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(MANIFEST_FIELDS)
        samples_of = synth.rendered(jobs, workers, _render_job)
        for (_, ns, i), samples in tqdm(zip(jobs, samples_of, strict=True), total=len(jobs),
                                        disable=not progress, desc="synth", unit="rec"):
            cls = ns.classes[i]
            rel = Path(cls) / recording_name(ns, i)
            (root / cls).mkdir(exist_ok=True)
            sf.write(root / rel, samples, SAMPLE_RATE, subtype=cfg.subtype, format="WAV")
            snr = f"{ns.leak_snr_db:.1f}" if cls == LEAK_CLASS else ""
            writer.writerow([rel.as_posix(), cls, ns.site.site_id, ns.site.material,
                             ns.site.sensor, SAMPLE_RATE, round(samples.size / SAMPLE_RATE, 4),
                             cfg.seed, ns.kind, snr])
            counts[cls] += 1
    return counts


def generate_network(cfg: SynthConfig, out_dir: Path, progress: bool = True) -> synth.SynthSummary:
    """Write ``out_dir/<LEAK|NOLEAK>/<site>_<class>_<index>.wav`` and ``manifest.csv``,
    through a hidden sibling folder that replaces ``out_dir`` only when complete."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    tmp = synth.sibling(out_dir, "tmp")
    try:
        counts = _write_all(cfg, tmp, progress)
        synth.swap_into_place(tmp, out_dir)
    except BaseException:  # any failure, Ctrl-C included: leave nothing half-written behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    summary = synth.SynthSummary(n_recordings=sum(counts.values()), class_counts=counts,
                                 n_sites=cfg.network_sites, seconds=time.perf_counter() - start,
                                 out_dir=out_dir)
    log.info("synth (small_network): %d recordings (%s) from %d sites in %.1f s -> %s",
             summary.n_recordings, ", ".join(f"{c}={k}" for c, k in counts.items()),
             cfg.network_sites, summary.seconds, out_dir)
    return summary

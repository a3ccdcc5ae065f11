"""One recording of the synthetic benchmark: the class recipes, the logger, ``render_recording``.

A recording is a mixture at one site (see ``leakpipe.audio.site``) of sound sources (see
``leakpipe.audio.sources`` and ``leakpipe.audio.tones_transients``): ambient noise, the class's
own character (a ``Recipe``) and transient interference on every class, heard through the
site's sensor and written at the site's logger gain, turned down only where a peak would clip.
Every recording draws from its own ``np.random.Generator`` seeded by (seed, site, class,
index), so it does not depend on the order of rendering. See docs/synth.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from leakpipe.audio import sources as src
from leakpipe.audio import tones_transients
from leakpipe.audio.site import RECORDING_STREAM, SENSOR_NOISE_DB, Site, uniform
from leakpipe.audio.spectral import apply_sensor
from leakpipe.config import SynthConfig
from leakpipe.constants import KNOWN_CLASSES

# Leak SNR in the octave around the leak's median frequency at the sensor (leak power re the
# ambient's there), dB: the range at difficulty 1, shifted down by LEAK_SNR_DB_PER_DIFFICULTY
# per unit of difficulty, and by the site's background level and pressure. Field surveys
# report leaks from clearly audible to below the background (Hunaidi & Chu 1999; Gao et al.
# 2005: detectability falls with distance and in plastic pipes), so the range reaches < 0 dB.
LEAK_SNR_DB = (3.0, 27.0)
LEAK_SNR_DB_PER_DIFFICULTY = 8.0
# The hard negatives of NORMAL recordings. Leak surveys record at night (2-4 am), when demand
# is at its minimum, so customers' water use is mostly small flows (cisterns refilling, night
# irrigation), weaker than a typical leak; a throttling PRV hisses as loud as a leak.
USE_SNR_DB = (-6.0, 9.0)
PRV_SNR_DB = (0.0, 24.0)
AMBIENT_DBFS = -50.0  # level of the ambient background in the written file at nominal gain
HEADROOM_DB = 1.0     # a recording not meant to clip keeps its peak this many dB below full scale
OVERDRIVE_DB = (1.0, 8.0)          # how far a clipped recording's peak is driven past full scale
DC_OFFSET = (0.002, 0.02)          # DC offset of a recording with one, fraction of full scale

Signature = Callable[[np.random.Generator, int, int, Site, float], np.ndarray]
Extra = Callable[[int, int], np.ndarray]  # (n, sr) -> more mechanical signal, ambient units
Mix = tuple[float, float, float]  # (probability, low dB, high dB)


@dataclass(frozen=True)
class Recipe:
    """The character of one class: which sources it carries and at what level.

    A source with probability p is present in a fraction p of the recordings; its level is drawn
    uniformly from its (low, high) range: dB re the ambient for low-frequency and tonal
    sources, in-band SNR for the broadband hiss of water use and valves. ``signature`` adds the
    class's own sound, if any.
    """

    flow: Mix                           # normal flow noise in the main
    pump: Mix                           # pump tones and hydraulic noise
    hum: Mix                            # mains hum (electrical, after the sensor)
    use: Mix                            # legitimate water use (in-band SNR)
    prv: Mix                            # pressure-reducing valve (in-band SNR)
    rumble: Mix                         # continuous traffic rumble
    transient_factor: float             # multiplies cfg.transient_rate_hz
    signature: Signature | None = None


def _leak(rng: np.random.Generator, n: int, sr: int, site: Site, difficulty: float) -> np.ndarray:
    """Leak hiss at an in-band SNR that falls with difficulty and the site's noise, and rises
    with its pressure."""
    snr_db = (uniform(rng, LEAK_SNR_DB) - LEAK_SNR_DB_PER_DIFFICULTY * (difficulty - 1.0)
              - site.background_db + src.pressure_db(site))
    hiss, gain = src.leak_noise(rng, n, sr, site)
    return hiss * src.in_band_gain(np.fft.rfftfreq(n, 1.0 / sr), gain, site, snr_db)


def _crack(rng: np.random.Generator, n: int, sr: int, site: Site, difficulty: float) -> np.ndarray:
    return tones_transients.crack_ticks(rng, n, sr, site)


# (probability, low dB, high dB) of the extra interference in UNCLASSIFIED recordings.
PASS_BY_MIX = (0.6, -3.0, 9.0)
RUN_UP_MIX = (0.4, -6.0, 6.0)


def _unclassified(rng: np.random.Generator, n: int, sr: int, site: Site,
                  difficulty: float) -> np.ndarray:
    """A mixture of interference: vehicles passing and machines running up or down."""
    out = np.zeros(n)
    for source, mix in ((src.pass_by, PASS_BY_MIX), (tones_transients.run_up, RUN_UP_MIX)):
        out += _maybe(rng, mix, lambda r, s=source: s(r, n, sr, site))
    return out


NONE: Mix = (0.0, 0.0, 0.0)
# NORMAL is normal operation, and holds the hard negatives: legitimate water use and valves
# that hiss like a leak, at leak-like levels. Leaks are masked by the same sources.
RECIPES: dict[str, Recipe] = {
    "BACKGROUND": Recipe(flow=(0.3, -12.0, -3.0), pump=(0.1, -15.0, -5.0),
                         hum=(1.0, -6.0, 6.0), use=(0.15, -6.0, 6.0), prv=NONE,
                         rumble=(0.3, -6.0, 6.0), transient_factor=1.0),
    "CRACK": Recipe(flow=(0.3, -12.0, -3.0), pump=(0.2, -15.0, -5.0),
                    hum=(0.5, -20.0, -6.0), use=(0.15, -6.0, 6.0), prv=NONE,
                    rumble=(0.2, -6.0, 6.0), transient_factor=1.0, signature=_crack),
    "LEAK": Recipe(flow=(0.5, -9.0, 3.0), pump=(0.3, -12.0, 0.0),
                   hum=(0.5, -20.0, -6.0), use=(0.25, -6.0, 6.0), prv=(0.15, -6.0, 6.0),
                   rumble=(0.3, -6.0, 6.0), transient_factor=1.0, signature=_leak),
    "NORMAL": Recipe(flow=(1.0, 0.0, 10.0), pump=(0.5, -6.0, 6.0),
                     hum=(0.5, -20.0, -6.0), use=(0.5, *USE_SNR_DB), prv=(0.35, *PRV_SNR_DB),
                     rumble=(0.3, -6.0, 6.0), transient_factor=1.0),
    "UNCLASSIFIED": Recipe(flow=(0.5, -9.0, 3.0), pump=(0.5, -9.0, 3.0),
                           hum=(0.5, -20.0, 0.0), use=(0.2, -6.0, 6.0), prv=(0.1, -6.0, 6.0),
                           rumble=(0.6, 0.0, 10.0), transient_factor=2.0,
                           signature=_unclassified),
}


def _maybe(rng: np.random.Generator, mix: Mix,
           make: Callable[[np.random.Generator], np.ndarray]) -> np.ndarray | float:
    """``make(child_rng)`` at a level in [low, high] dB with probability p, else 0.

    The coin, the level and the child generator are always drawn, so the draws that follow do
    not depend on whether the source was present.
    """
    p, low, high = mix
    present, level_db = rng.random() < p, rng.uniform(low, high) if high > low else low
    child = rng.spawn(1)[0]
    return make(child) * 10.0 ** (level_db / 20.0) if present else 0.0


def _hiss_at_snr(rng: np.random.Generator, mix: Mix, site: Site, n: int, sr: int,
                 make: Callable[..., tuple[np.ndarray, np.ndarray]]) -> np.ndarray | float:
    """A broadband hiss source at an in-band SNR drawn from ``mix`` (with its probability)."""
    p, low, high = mix
    present, snr_db = rng.random() < p, rng.uniform(low, high) if high > low else low
    child = rng.spawn(1)[0]
    if not present:
        return 0.0
    hiss, gain = make(child, n, sr, site)
    return hiss * src.in_band_gain(np.fft.rfftfreq(n, 1.0 / sr), gain, site, snr_db)


# --- one recording ---------------------------------------------------------------------------


def n_samples(cfg: SynthConfig, site: Site) -> int:
    return int(round(cfg.duration_s * site.sample_rate))


def recording_rng(seed: int, site: int, cls: str, index: int) -> np.random.Generator:
    """The independent generator of one recording (class coded by its place in KNOWN_CLASSES)."""
    entropy = [seed, RECORDING_STREAM, site, KNOWN_CLASSES.index(cls), index]
    return np.random.default_rng(np.random.SeedSequence(entropy))


def logger(rng: np.random.Generator, x: np.ndarray, site: Site, cfg: SynthConfig) -> np.ndarray:
    """The logger: a random gain per recording (so absolute level is no cue), a DC offset in
    some recordings, and in some a gain driven past full scale and hard-clipped, as an ADC does.

    A recording not meant to clip is turned down if a peak would come within HEADROOM_DB of
    full scale.
    """
    gain_db = AMBIENT_DBFS + site.sensitivity_db + rng.uniform(-cfg.gain_db, cfg.gain_db)
    clip, dc = rng.random() < cfg.clip_share, rng.random() < cfg.dc_share
    overdrive_db, offset = uniform(rng, OVERDRIVE_DB), uniform(rng, DC_OFFSET) * rng.choice([-1, 1])
    peak = max(float(np.max(np.abs(x))), 1e-30)
    if clip:
        return np.clip(x / peak * 10.0 ** (overdrive_db / 20.0) + dc * offset, -1.0, 1.0)
    y = x * 10.0 ** (gain_db / 20.0) + dc * offset
    limit = 10.0 ** (-HEADROOM_DB / 20.0)
    return y * min(1.0, limit / max(float(np.max(np.abs(y))), 1e-30))


def render_recording(cfg: SynthConfig, site: Site, cls: str, index: int,
                     extra: Extra | None = None) -> np.ndarray:
    """Samples at ``site.sample_rate`` (float32, within full scale) of recording ``index`` of
    ``cls`` at ``site``.

    ``extra(n, sr)``, if given, is added before the sensor: the field set's interference
    (``leakpipe.audio.field``). It must draw from its own generator, so that everything else
    in the recording stays as it is without it.
    """
    rng = recording_rng(cfg.seed, site.index, cls, index)
    recipe = RECIPES[cls]
    n, sr = n_samples(cfg, site), site.sample_rate
    mech = src.ambient_noise(rng, n, sr, site)
    mech = mech + _maybe(rng, recipe.flow, lambda r: src.flow_noise(r, n, sr, site))
    mech = mech + _maybe(rng, recipe.pump, lambda r: tones_transients.pump_tones(r, n, sr, site))
    mech = mech + _maybe(rng, recipe.rumble, lambda r: src.traffic_rumble(r, n, sr, site))
    mech = mech + _hiss_at_snr(rng, recipe.use, site, n, sr, src.water_use)
    mech = mech + _hiss_at_snr(rng, recipe.prv, site, n, sr, tones_transients.prv_noise)
    if recipe.signature is not None:
        mech = mech + recipe.signature(rng, n, sr, site, cfg.difficulty)
    rate = cfg.transient_rate_hz * recipe.transient_factor
    mech = mech + tones_transients.transients(rng, n, sr, site, rate)
    if extra is not None:
        mech = mech + extra(n, sr)
    heard = apply_sensor(mech, sr, site)
    heard = heard + _maybe(rng, recipe.hum, lambda r: tones_transients.mains_hum(r, n, sr, site))
    heard = heard + src.white_noise(rng, n) * 10.0 ** (SENSOR_NOISE_DB / 20.0)
    return logger(rng, heard, site, cfg).astype(np.float32)

"""The `field` stage's engine: a synthetic field set with a domain shift, for `leakpipe adapt`.

A detector trained on the labelled synthetic sites (`synth`) is adapted on a utility's own
unlabelled recordings. This module makes such a utility: ``field.n_sites`` new sites, drawn
like `synth`'s (the same classes, logger rates, difficulty, logger gain, clipping and DC offsets),
each with a machine working nearby (``leakpipe.audio.site.Machine``: band-limited noise,
amplitude-modulated at its engine rate, running in bursts) whose noise is in every field
recording of every class and in no labelled one. Per site and class the first recordings go to
a labelled check set, the rest to an unlabelled pool::

    out_dir/
      pool/<site>_rec<NNNN>.wav     unlabelled: nothing in the folder names the class
      pool_truth.csv                the pool's hidden truth (diagnostics only)
      check/manifest.csv            labelled: synth's data/raw layout
      check/<CLASS>/<site>_<CLASS>_<idx>.wav

A recording is rendered by ``benchmark_recording.render_recording`` at its site (its draws come
from (field.seed, site, class, index)), plus the machine from an independent generator seeded
by (field.seed, FIELD_STREAM, site, class, index): the output depends on nothing else, the
worker count included. See docs/synth.md.
"""

from __future__ import annotations

import csv
import dataclasses
import logging
import math
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
from tqdm import tqdm

from leakpipe import tracking
from leakpipe.audio import benchmark_recording, dataset_writing, synth
from leakpipe.audio import sources as src
from leakpipe.audio.site import (
    FIELD_STREAM,
    POOL_ORDER_STREAM,
    Machine,
    Site,
    draw_machine,
    draw_site,
    uniform,
)
from leakpipe.config import FieldConfig, SynthConfig, load_section
from leakpipe.constants import KNOWN_CLASSES, MANIFEST_NAME
from leakpipe.errors import ConfigError

log = logging.getLogger(__name__)

# Field sites are site FIELD_SITE_OFFSET, FIELD_SITE_OFFSET + 1, ...: never a labelled site's
# index (synth.n_sites must stay below it), so their ids and their draws differ from every
# labelled site's. Even, so that materials still alternate metal, plastic from the first.
FIELD_SITE_OFFSET = 9000
POOL_DIR = "pool"
CHECK_DIR = "check"
POOL_TRUTH = "pool_truth.csv"
TRUTH_FIELDS = (*synth.MANIFEST_FIELDS, "interference_snr_db", "interference_duty")

Job = tuple[SynthConfig, FieldConfig, Site, Machine, str, int]


def render_config(synth_cfg: SynthConfig, field_cfg: FieldConfig) -> SynthConfig:
    """`synth`'s settings with the field set's seed, length and counts."""
    return dataclasses.replace(synth_cfg, seed=field_cfg.seed, n_sites=field_cfg.n_sites,
                               duration_s=field_cfg.duration_s, scale=1.0,
                               recordings_per_class=field_cfg.recordings_per_class)


def field_site(synth_cfg: SynthConfig, field_cfg: FieldConfig, position: int) -> Site:
    """Field site number ``position`` (0, 1, ...): drawn from field.seed at an index past every
    labelled site's."""
    return draw_site(field_cfg.seed, FIELD_SITE_OFFSET + position, synth_cfg.sample_rates)


def interference_rng(seed: int, site: int, cls: str, index: int) -> np.random.Generator:
    """The machine's own generator at one field recording (independent of the recording's)."""
    entropy = [seed, FIELD_STREAM, site, KNOWN_CLASSES.index(cls), index]
    return np.random.default_rng(np.random.SeedSequence(entropy))


@dataclass(frozen=True)
class FieldRecording:
    samples: np.ndarray          # float32 at the site's rate, within full scale
    snr_db: float                # the machine's in-band SNR while it runs, re the ambient, dB
    duty: float                  # fraction of the recording it runs (0 without interference)


def render_field_recording(cfg: SynthConfig, field_cfg: FieldConfig, site: Site,
                           machine: Machine, cls: str, index: int,
                           interfere: bool = True) -> FieldRecording:
    """Recording ``index`` of ``cls`` at field site ``site`` (``cfg`` from ``render_config``);
    ``interfere=False`` renders the same recording without the machine."""
    rng = interference_rng(field_cfg.seed, site.index, cls, index)
    snr_db = uniform(rng, (field_cfg.interference_snr_db_min, field_cfg.interference_snr_db_max))
    duty = uniform(rng, (field_cfg.interference_duty_min, field_cfg.interference_duty_max))
    running = {"duty": 0.0}

    def machine_noise(n: int, sr: int) -> np.ndarray:
        noise, gain, running["duty"] = src.machine_noise(rng, n, sr, site, machine, duty)
        return noise * src.in_band_gain(np.fft.rfftfreq(n, 1.0 / sr), gain, site, snr_db)

    samples = benchmark_recording.render_recording(cfg, site, cls, index,
                                                   extra=machine_noise if interfere else None)
    return FieldRecording(samples, snr_db, running["duty"])


def _render_job(job: Job) -> FieldRecording:
    return render_field_recording(*job)


# --- the plan: which recording goes where ----------------------------------------------------


def check_count(n: int, share: float, position: int) -> int:
    """How many of a site's ``n`` recordings of a class go to the check set: ``share`` of them
    rounded up, but at least one and at most ``n - 1``, so the class is in both sets. A single
    recording goes to the check set at a ``share`` of the sites (spread evenly over them)."""
    if n >= 2:
        return min(n - 1, max(1, math.ceil(round(share * n, 9))))
    before, after = (math.floor(round(k * share, 9)) for k in (position, position + 1))
    return int(after > before)


@dataclass(frozen=True)
class Planned:
    site: Site
    machine: Machine
    cls: str
    index: int
    rel: str                     # path below out_dir
    pooled: bool                 # in the unlabelled pool (else in the check set)


def plan(synth_cfg: SynthConfig, field_cfg: FieldConfig) -> list[Planned]:
    """Every field recording and where it goes. Pool names are numbered in a shuffled order
    per site, so that a name's number does not reveal its class."""
    counts = synth.counts_per_site(render_config(synth_cfg, field_cfg))
    out = []
    for position in range(field_cfg.n_sites):
        site = field_site(synth_cfg, field_cfg, position)
        machine = draw_machine(field_cfg.seed, site.index)
        keys = [(cls, index) for cls in synth_cfg.classes for index in range(counts[cls])]
        checked = {(cls, index) for cls, index in keys
                   if index < check_count(counts[cls], field_cfg.check_share, position)}
        pooled = [key for key in keys if key not in checked]
        order_rng = np.random.default_rng(np.random.SeedSequence(
            [field_cfg.seed, POOL_ORDER_STREAM, site.index]))
        number = dict(zip(pooled, order_rng.permutation(len(pooled)).tolist(), strict=True))
        for cls, index in keys:
            if (cls, index) in checked:
                rel = f"{CHECK_DIR}/{cls}/{synth.recording_name(site, cls, index)}"
            else:
                rel = f"{POOL_DIR}/{site.site_id}_rec{number[(cls, index)]:04d}.wav"
            out.append(Planned(site, machine, cls, index, rel, (cls, index) not in checked))
    return out


# --- the data set ----------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldSummary:
    """What ``generate_field`` wrote."""

    pool_counts: Mapping[str, int]
    check_counts: Mapping[str, int]
    n_sites: int
    seconds: float
    out_dir: Path

    def to_dict(self) -> dict[str, Any]:
        return {"n_pool": sum(self.pool_counts.values()),
                "n_check": sum(self.check_counts.values()),
                "pool_counts": dict(self.pool_counts), "check_counts": dict(self.check_counts),
                "n_sites": self.n_sites, "seconds": self.seconds, "out_dir": str(self.out_dir)}


def _row(item: Planned, cfg: SynthConfig, rel: str) -> list[Any]:
    site = item.site
    return [rel, item.cls, site.site_id, site.material, site.sensor, site.sample_rate,
            cfg.duration_s, cfg.seed]


def _write_all(synth_cfg: SynthConfig, field_cfg: FieldConfig, root: Path,
               progress: bool) -> tuple[dict[str, int], dict[str, int]]:
    """Render every field recording into ``root``, write the check manifest and the pool's
    truth; returns the pool's and the check set's counts per class."""
    cfg = render_config(synth_cfg, field_cfg)
    items = plan(synth_cfg, field_cfg)
    jobs = [(cfg, field_cfg, it.site, it.machine, it.cls, it.index) for it in items]
    workers = min(cfg.workers or os.cpu_count() or 1, len(jobs))
    pool_counts, check_counts = dict.fromkeys(cfg.classes, 0), dict.fromkeys(cfg.classes, 0)
    (root / POOL_DIR).mkdir()
    (root / CHECK_DIR).mkdir()
    truth = []
    with open(root / CHECK_DIR / MANIFEST_NAME, "w", newline="") as fh:
        manifest = csv.writer(fh, lineterminator="\n")
        manifest.writerow(synth.MANIFEST_FIELDS)
        recordings = dataset_writing.rendered(jobs, workers, _render_job)
        for item, rec in tqdm(zip(items, recordings, strict=True), total=len(items),
                              disable=not progress, desc="field", unit="rec"):
            (root / item.rel).parent.mkdir(exist_ok=True)
            sf.write(root / item.rel, rec.samples, item.site.sample_rate, subtype=cfg.subtype,
                     format="WAV")
            if item.pooled:
                rel = item.rel.removeprefix(f"{POOL_DIR}/")
                truth.append([*_row(item, cfg, rel), f"{rec.snr_db:.2f}", f"{rec.duty:.3f}"])
                pool_counts[item.cls] += 1
            else:
                manifest.writerow(_row(item, cfg, item.rel.removeprefix(f"{CHECK_DIR}/")))
                check_counts[item.cls] += 1
    with open(root / POOL_TRUTH, "w", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(TRUTH_FIELDS)
        writer.writerows(sorted(truth))
    return pool_counts, check_counts


def generate_field(synth_cfg: SynthConfig, field_cfg: FieldConfig, out_dir: Path,
                   progress: bool = True) -> FieldSummary:
    """Write the field set (pool/, pool_truth.csv, check/) into ``out_dir``.

    Everything is written into a temporary sibling folder that replaces ``out_dir`` only when
    complete, so a failure never leaves a partial data set.
    """
    if synth_cfg.n_sites > FIELD_SITE_OFFSET:
        raise ConfigError(f"synth.n_sites: at most {FIELD_SITE_OFFSET} with a field set "
                          f"(field sites start at site{FIELD_SITE_OFFSET}), got "
                          f"{synth_cfg.n_sites}")
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    tmp = dataset_writing.sibling(out_dir, "tmp")
    try:
        pool_counts, check_counts = _write_all(synth_cfg, field_cfg, tmp, progress)
        dataset_writing.swap_into_place(tmp, out_dir)
    except BaseException:  # any failure, Ctrl-C included: leave nothing half-written behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    summary = FieldSummary(pool_counts=pool_counts, check_counts=check_counts,
                           n_sites=field_cfg.n_sites, seconds=time.perf_counter() - start,
                           out_dir=out_dir)
    log.info("field: %d pool recordings (%s), %d check recordings (%s) from %d sites in "
             "%.1f s -> %s", sum(pool_counts.values()),
             ", ".join(f"{c}={k}" for c, k in pool_counts.items()), sum(check_counts.values()),
             ", ".join(f"{c}={k}" for c, k in check_counts.items()), field_cfg.n_sites,
             summary.seconds, out_dir)
    return summary


def run_field(params: Path, out_dir: Path, *, progress: bool = True) -> int:
    """The `field` stage: ``generate_field`` inside one MLflow run; returns the exit code."""
    synth_cfg, field_cfg = load_section(params, "synth"), load_section(params, "field")
    with tracking.start_run("field") as run:
        run.log_params({"synth": dataclasses.asdict(synth_cfg),
                        "field": dataclasses.asdict(field_cfg)})
        info = generate_field(synth_cfg, field_cfg, out_dir, progress=progress).to_dict()
        run.log_metrics({"field/pool_recordings": info["n_pool"],
                         "field/check_recordings": info["n_check"],
                         "field/seconds": info["seconds"]})
        run.log_dict(info, "field_summary.json")
    return 0

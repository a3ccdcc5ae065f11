"""The `synth` stage: its params, its run, and the benchmark data set it renders by default.

The benchmark is ``classes`` x ``n_sites`` sites of recordings (``leakpipe.audio.site`` draws
the sites, ``leakpipe.audio.benchmark_recording`` renders each recording), written with a
manifest through ``leakpipe.audio.dataset_writing``; the `small_network` scenario is
``leakpipe.audio.network``. Every recording draws from its own generator, so the output does
not depend on the order of rendering or the worker count. See docs/synth.md.
"""

from __future__ import annotations

import csv
import dataclasses
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
from tqdm import tqdm

from leakpipe import tracking
from leakpipe.audio.benchmark_recording import render_recording
from leakpipe.audio.dataset_writing import SynthSummary, rendered, sibling, swap_into_place
from leakpipe.audio.site import Site, draw_site
from leakpipe.config import SynthConfig, from_mapping, load_section
from leakpipe.constants import LEAK_CLASS, MANIFEST_NAME

log = logging.getLogger(__name__)

MANIFEST_FIELDS = ("path", "class", "group", "material", "sensor", "sample_rate", "duration_s",
                   "seed")


def counts_per_site(cfg: SynthConfig) -> dict[str, int]:
    """Recordings of each class at every site: LEAK is sized to make up ``cfg.leak_share``."""
    per_class = max(1, round(cfg.recordings_per_class * cfg.scale))
    n_other = len(cfg.classes) - 1
    n_leak = max(1, round(cfg.leak_share / (1 - cfg.leak_share) * n_other * per_class))
    return {c: n_leak if c == LEAK_CLASS else per_class for c in cfg.classes}


def recording_name(site: Site, cls: str, index: int) -> str:
    return f"{site.site_id}_{cls}_{index:04d}.wav"


def _plan(cfg: SynthConfig) -> Iterator[tuple[Site, str, int]]:
    counts = counts_per_site(cfg)
    for site_index in range(cfg.n_sites):
        site = draw_site(cfg.seed, site_index, cfg.sample_rates)
        for cls in cfg.classes:
            for index in range(counts[cls]):
                yield site, cls, index


def _render_job(job: tuple[SynthConfig, Site, str, int]) -> np.ndarray:
    return render_recording(*job)


def _write_all(cfg: SynthConfig, root: Path, progress: bool) -> dict[str, int]:
    """Render every recording into ``root`` and write the manifest; returns counts per class."""
    jobs = [(cfg, site, cls, index) for site, cls, index in _plan(cfg)]
    workers = min(cfg.workers or os.cpu_count() or 1, len(jobs))
    counts = dict.fromkeys(cfg.classes, 0)
    with open(root / MANIFEST_NAME, "w", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(MANIFEST_FIELDS)
        samples_of = rendered(jobs, workers, _render_job)
        for (_, site, cls, index), samples in tqdm(zip(jobs, samples_of, strict=True),
                                                   total=len(jobs), disable=not progress,
                                                   desc="synth", unit="rec"):
            rel = Path(cls) / recording_name(site, cls, index)
            (root / cls).mkdir(exist_ok=True)
            sf.write(root / rel, samples, site.sample_rate, subtype=cfg.subtype, format="WAV")
            writer.writerow([rel.as_posix(), cls, site.site_id, site.material, site.sensor,
                             site.sample_rate, cfg.duration_s, cfg.seed])
            counts[cls] += 1
    return counts


def generate(cfg: SynthConfig, out_dir: Path, progress: bool = True) -> SynthSummary:
    """Write ``out_dir/<CLASS>/<site>_<class>_<index>.wav`` and ``out_dir/manifest.csv``.

    Everything is written into a temporary sibling folder that replaces ``out_dir`` only when
    complete, so a failure never leaves a partial data set. The benchmark only: the
    `small_network` scenario is ``leakpipe.audio.network.generate_network``.
    """
    if cfg.scenario != "benchmark":
        raise ValueError(f"generate renders the benchmark, not scenario {cfg.scenario!r}")
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    tmp = sibling(out_dir, "tmp")
    try:
        counts = _write_all(cfg, tmp, progress)
        swap_into_place(tmp, out_dir)
    except BaseException:  # any failure, Ctrl-C included: leave nothing half-written behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    summary = SynthSummary(n_recordings=sum(counts.values()), class_counts=counts,
                           n_sites=cfg.n_sites, seconds=time.perf_counter() - start,
                           out_dir=out_dir)
    log.info("synth: %d recordings (%s) from %d sites in %.1f s -> %s", summary.n_recordings,
             ", ".join(f"{c}={k}" for c, k in counts.items()), cfg.n_sites, summary.seconds,
             out_dir)
    return summary


def synth_config(params: Path, **overrides: Any) -> SynthConfig:
    """The `synth` section of ``params`` with the command line's overrides (None: not given),
    checked as strictly as the file."""
    cfg = load_section(params, "synth")
    given = {key: value for key, value in overrides.items() if value is not None}
    if not given:
        return cfg
    return from_mapping(SynthConfig, {**dataclasses.asdict(cfg), **given}, "synth",
                        f"{params} with command-line options")


Generate = Callable[[SynthConfig, Path, bool], SynthSummary]


def run_synth(cfg: SynthConfig, out_dir: Path, render: Generate = generate, *,
              progress: bool = True) -> int:
    """The `synth` stage: ``render`` (the scenario's generator) inside one MLflow run; returns
    the exit code."""
    with tracking.start_run("synth") as run:
        run.log_params({"synth": dataclasses.asdict(cfg)})
        info = render(cfg, out_dir, progress).to_dict()
        run.log_metrics({"synth/recordings": info["n_recordings"],
                         "synth/seconds": info["seconds"]})
        run.log_dict(info, "synth_summary.json")
    return 0

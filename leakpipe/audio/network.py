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

The sites are drawn by ``leakpipe.audio.network_site`` (from the benchmark's ``draw_site``) and
each recording is rendered by ``leakpipe.audio.network_recording`` (from the benchmark's
sources), the ranges and their reasons beside their constants there; this module writes the
data set. Each recording has its own generator seeded by (seed, site, index), so its bytes
depend on nothing else (not the worker count, not the rendering order).
"""

from __future__ import annotations

import csv
import logging
import os
import shutil
import time
from pathlib import Path

import numpy as np
import soundfile as sf
from tqdm import tqdm

from leakpipe.audio import synth
from leakpipe.audio.dataset_writing import SynthSummary, rendered, sibling, swap_into_place
from leakpipe.audio.network_recording import render_network_recording
from leakpipe.audio.network_site import SAMPLE_RATE, NetworkSite, network_sites
from leakpipe.config import SynthConfig
from leakpipe.constants import LEAK_CLASS, MANIFEST_NAME, NOLEAK_CLASS

log = logging.getLogger(__name__)

MANIFEST_FIELDS = (*synth.MANIFEST_FIELDS, "site_kind", "leak_snr_db")


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
        samples_of = rendered(jobs, workers, _render_job)
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


def generate_network(cfg: SynthConfig, out_dir: Path, progress: bool = True) -> SynthSummary:
    """Write ``out_dir/<LEAK|NOLEAK>/<site>_<class>_<index>.wav`` and ``manifest.csv``,
    through a hidden sibling folder that replaces ``out_dir`` only when complete."""
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
                           n_sites=cfg.network_sites, seconds=time.perf_counter() - start,
                           out_dir=out_dir)
    log.info("synth (small_network): %d recordings (%s) from %d sites in %.1f s -> %s",
             summary.n_recordings, ", ".join(f"{c}={k}" for c, k in counts.items()),
             cfg.network_sites, summary.seconds, out_dir)
    return summary

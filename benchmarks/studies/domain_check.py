"""Domain check on the workspace's detector: which recordings does it call ``shifted``?

The detector is the workspace's `models/detector.pt`. One older than version 6 holds no domain
reference, or one without val's distances; then one is built exactly as `evaluate` builds it
(``leakpipe.evaluate.domain_reference.build_reference``: train.h5's recordings, threshold on
val.h5) and a version 6 copy is written under --work (never into models/). Each set's
recordings are then checked as `leakpipe predict` checks them (``predict.prepare`` reads,
resamples and computes features; ``predict.rows.domain_fields`` gives the row's ``domain``
from the recording's band profile and its own Nyquist frequency), without scoring the network
(the decision does not enter the check):

- test_split: the default test split's recordings (data/raw files listed in test.h5), as
  predict reads them; test_split_h5: the same through evaluate's path (the HDF5 clips), the
  figure evaluate writes as ``domain/test_shifted_rate``;
- val_split_h5: val's recordings, the threshold's own split (about 1 % by construction);
- field_pool / field_check: the synthetic field set (a machine working near every sensor);
- band_limited_4096: the test recordings resampled to 4096 Hz (a logger at 4096 Hz) under
  --work;
- real_dev: the five real testbed recordings in ../shared/real-dev (read there, never copied;
  skipped with a message when absent).

Each set: n, shifted count and rate with a 95 % Wilson interval, the reasons' counts, the
median distance, the median / 95th percentile of each part (shape, level; each over its
training 99th percentile: where a set sits inside the reference) and the set check (``set``:
the set's distances against val's by a one-sided rank test, ``decision.domain_set.set_check``).
``site_sets``: how often the set check calls a set of whole test sites shifted (1, 3 and 10
sites drawn at random, 300 draws each): recordings of one site are not independent, which the
rank test assumes, so this is its false-alarm rate on sets shaped like a survey. ``probes``
(skip with --no-probes, about 2 min more): the two candidate third parts of ``domain_probes`` (the
network's penultimate-layer embedding, band switching), fitted on train.h5 with the threshold on
val.h5, alone and joined with D (threshold re-set on val), their rates on test, field and
real-dev. Writes benchmarks/results/domain.json.

    python benchmarks/studies/domain_check.py [--work /tmp/leakpipe_domain] \
        [--out benchmarks/results/domain.json] [--no-probes]

Figures: docs/evaluation.md, docs/results/domain-check.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import re
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

import domain_probes as probes  # the sibling module (run as a script)
import numpy as np
import soundfile as sf
import torch

from leakpipe.audio.io import read_audio
from leakpipe.audio.resampling import resample
from leakpipe.data.input_norm import normalize_clips
from leakpipe.data.reader import open_split
from leakpipe.decision.domain import (
    SHIFTED,
    DomainReference,
    band_profile,
    distances,
    scaled_parts,
)
from leakpipe.decision.domain_set import SET_ALPHA, set_check
from leakpipe.decision.metrics import wilson_interval
from leakpipe.detector import Detector, load_detector, save_detector
from leakpipe.evaluate.domain_reference import build_reference
from leakpipe.features.mel import band_centers_hz
from leakpipe.predict.inputs import find_recordings, prepare
from leakpipe.predict.rows import domain_fields

REPO = Path(__file__).resolve().parents[2]
REAL_DEV = REPO.parent / "shared" / "real-dev"
LOGGER_RATE = 4096        # Hz: the band-limited logger
MAX_CLIPS = 64            # clips per part while reading (as predict's batches)
log = logging.getLogger("domain_check")


def versioned_detector(path: Path, data: Path, work: Path) -> tuple[Detector, str]:
    """The detector with a domain reference that keeps val's distances, and where it came
    from."""
    detector = load_detector(path)
    if detector.domain is not None and detector.domain.val_distances.size:
        return detector, str(path)
    ref = build_reference(detector, {"train": data / "train.h5", "val": data / "val.h5"})
    out = work / "detector.pt"
    save_detector(out, dataclasses.replace(detector, domain=ref))
    return load_detector(out), f"{out} (evaluate's reference added to {path})"


def probe_features(detector: Detector, mel: np.ndarray, embed: bool) -> dict[str, np.ndarray]:
    """The raw per-recording values of the candidate parts (``domain_probes``)."""
    f = detector.features
    out = {"switching": probes.switching_features(
        mel, probes.contrast_windows(band_centers_hz(f.n_mels, f.fmin, f.fmax)))}
    if embed:
        x = normalize_clips(torch.from_numpy(np.asarray(mel, dtype=np.float32)),
                            detector.input_norm)
        out["embedding"] = probes.embedding_features(detector.model.eval(), x.numpy())
    return out


def parts_of(detector: Detector, profile: np.ndarray) -> dict[str, float]:
    assert detector.domain is not None
    shape, level = (float(v[0]) for v in scaled_parts(detector.domain, profile[None]))
    return {"shape_part": shape, "level_part": level}


def check_files(detector: Detector, paths: Iterable[Path], min_fraction: float,
                embed: bool | None) -> list[dict]:
    """predict's domain fields of each readable recording, its two parts and (unless
    ``embed`` is None) the candidate parts' raw values."""
    rows = []
    for path in paths:
        parts = list(prepare(path, detector, min_fraction, MAX_CLIPS))
        mel = np.concatenate([p.mel for p in parts])
        profile = band_profile(mel)
        rows.append({"path": str(path), **domain_fields(detector, profile, parts[-1].band_hz),
                     **parts_of(detector, profile),
                     **(probe_features(detector, mel, embed) if embed is not None else {})})
    return rows


def summary(rows: list[dict], ref: DomainReference) -> dict:
    shifted = [r for r in rows if r["domain"] == SHIFTED]
    k, n = len(shifted), len(rows)
    low, high = wilson_interval(k, n)
    out = {"n": n, "shifted": k, "shifted_rate": k / n if n else None,
           "ci95_low": low, "ci95_high": high,
           "reasons": dict(Counter(r["domain_reason"].split(":")[0] for r in shifted)),
           "median_distance": float(np.median([r["domain_distance"] for r in rows]))}
    for part in ("shape_part", "level_part"):
        values = [r[part] for r in rows]
        out[part] = {"median": round(float(np.median(values)), 3),
                     "p95": round(float(np.percentile(values, 95)), 3)}
    out["set"] = set_check(ref, np.array([r["domain_distance"] for r in rows])).to_dict()
    return out


def h5_recordings(path: Path) -> Iterator[tuple[str, np.ndarray]]:
    """(recording id, its (clips, L, S, M, T) log-mel) of a split, in id order."""
    with open_split(path) as split:
        ids = split.recording_ids
        mel = np.concatenate([np.asarray(block) for _, block in split.iter_chunks(256)])
    for rid in np.unique(ids):
        yield str(rid), mel[ids == rid]


def h5_rows(detector: Detector, path: Path, embed: bool | None) -> list[dict]:
    """evaluate's path: each recording's D from the HDF5 clips, its parts and probes."""
    ref = detector.domain
    assert ref is not None
    rows = []
    for rid, mel in h5_recordings(path):
        profile = band_profile(mel)
        d = float(distances(ref, profile[None])[0])
        rows.append({"path": rid, "domain": SHIFTED if d > ref.threshold else "in",
                     "domain_distance": d, "domain_reason": "", **parts_of(detector, profile),
                     **(probe_features(detector, mel, embed) if embed is not None else {})})
    return rows


def h5_summary(rows: list[dict], ref: DomainReference) -> dict:
    out = summary(rows, ref)
    out.pop("reasons")
    return out


def probe_report(sets: dict[str, list[dict]]) -> dict:
    """Each candidate part alone and joined with D (max of the two, threshold re-set on
    val), fitted on the train rows: its shifted rate per set."""
    out: dict = {}
    for name in ("embedding", "switching"):
        train = np.stack([r[name] for r in sets["train"]])
        part = (probes.lowrank_part(train) if name == "embedding"
                else probes.switching_part(train))
        raw = {k: part(np.stack([r[name] for r in rows])) for k, rows in sets.items()}
        alone = probes.fit_probe(name, raw["train"], raw["val"])
        joint = {k: np.maximum(v / alone.scale, [r["domain_distance"] for r in sets[k]])
                 for k, v in raw.items()}
        joint_thr = float(np.sort(joint["val"])[probes.threshold_rank(len(joint["val"])) - 1])
        out[name] = {"scale": alone.scale, "threshold_alone": alone.threshold,
                     "threshold_joint": joint_thr, "sets": {
                         k: {"alone": probes.rate(v / alone.scale > alone.threshold),
                             "joint": probes.rate(joint[k] > joint_thr),
                             "median_part": round(float(np.median(v / alone.scale)), 3)}
                         for k, v in raw.items() if k != "train"}}
    return out


SITE = re.compile(r"site\d+")
SITE_SET_SIZES = (1, 3, 10)
SITE_SET_DRAWS = 300


def site_sets(ref: DomainReference, rows: list[dict], seed: int = 0) -> dict:
    """The set check's false alarms on sets of whole test sites (the rows' ids name the site)."""
    d = np.array([r["domain_distance"] for r in rows])
    site = np.array([SITE.search(r["path"]).group(0) for r in rows])   # type: ignore[union-attr]
    sites = np.unique(site)
    rng = np.random.default_rng(seed)
    out = {}
    for size in SITE_SET_SIZES:
        p = np.array([set_check(ref, d[np.isin(site, rng.choice(sites, size, replace=False))])
                      .p_value for _ in range(SITE_SET_DRAWS)])
        out[f"{size}_sites"] = {"draws": SITE_SET_DRAWS, "share_p_below_0.01":
                                round(float(np.mean(p < 0.01)), 3),
                                f"share_p_below_{SET_ALPHA:g}":
                                round(float(np.mean(p < SET_ALPHA)), 3),
                                "median_p": round(float(np.median(p)), 3)}
    return out


def band_limited(sources: list[Path], raw: Path, work: Path) -> list[Path]:
    """Each source resampled to LOGGER_RATE under ``work`` (written once)."""
    out = []
    for src in sources:
        dst = work / "band_limited" / src.relative_to(raw)
        if not dst.is_file():
            x, rate = read_audio(src)
            dst.parent.mkdir(parents=True, exist_ok=True)
            sf.write(dst, resample(np.asarray(x, dtype=np.float64), rate, LOGGER_RATE)
                     .astype(np.float32), LOGGER_RATE, subtype="FLOAT")
        out.append(dst)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/leakpipe_domain"))
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/domain.json")
    parser.add_argument("--min-clip-fraction", type=float, default=0.5)
    parser.add_argument("--no-probes", action="store_true",
                        help="skip the candidate third parts (domain_probes)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    args.work.mkdir(parents=True, exist_ok=True)
    data, raw = REPO / "data/processed", REPO / "data/raw"
    detector, source = versioned_detector(REPO / "models/detector.pt", data, args.work)
    ref = detector.domain
    assert ref is not None
    start = time.perf_counter()
    torch.set_num_threads(1)              # a shared 2-core machine; the probes' forward pass
    embed = None if args.no_probes else True
    test_files = [raw / rid for rid in sorted(set(_ids(data / "test.h5")))]
    rows_of = {name: h5_rows(detector, data / f"{name}.h5", embed)
               for name in ("train", "val", "test")}
    sets: dict[str, dict] = {"val_split_h5": h5_summary(rows_of["val"], ref),
                             "test_split_h5": h5_summary(rows_of["test"], ref)}
    named = {
        "test_split": test_files,
        "field_pool": find_recordings([REPO / "data/field/pool"]),
        "field_check": find_recordings([REPO / "data/field/check"]),
        "band_limited_4096": band_limited(test_files, raw, args.work),
    }
    if REAL_DEV.is_dir():
        named["real_dev"] = find_recordings([REAL_DEV])
    else:
        log.info("%s absent: real_dev skipped", REAL_DEV)
    examples = {}
    for name, paths in named.items():
        rows = check_files(detector, paths, args.min_clip_fraction,
                           embed if name in ("field_pool", "field_check", "real_dev") else None)
        rows_of[name] = rows
        sets[name] = summary(rows, ref)
        if name == "real_dev":
            sets[name]["recordings"] = {Path(r["path"]).name: f"{r['domain']} "
                                        f"{r['domain_distance']}: {r['domain_reason']}"
                                        for r in rows}
        examples[name] = next((r["domain_reason"] for r in rows if r["domain_reason"]), "")
        log.info("%s: %s", name, {k: v for k, v in sets[name].items() if k != "recordings"})
    probed = {k: v for k, v in rows_of.items() if v and "switching" in v[0]}
    doc = {"detector": source, "reference": ref.fitted_on, "threshold": ref.threshold,
           "uses_level": ref.uses_level, "sets": sets, "example_reasons": examples,
           "site_sets": site_sets(ref, rows_of["test"]),
           "probes": probe_report(probed) if embed else "skipped (--no-probes)",
           "seconds": round(time.perf_counter() - start, 1),
           "note": "rates are shares of recordings called shifted; 95 % Wilson intervals"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"domain_check -> {args.out}")


def _ids(path: Path) -> list[str]:
    with open_split(path) as split:
        return split.recording_ids.tolist()


if __name__ == "__main__":
    main()

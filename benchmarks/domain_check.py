"""Domain check on the workspace's detector: which recordings does it call ``shifted``?

The detector is the workspace's `models/detector.pt`. One older than version 5 holds no domain
reference; then one is built exactly as `evaluate` builds it (``leakpipe.evaluate.
domain_reference.build_reference``: train.h5's recordings, threshold on val.h5) and a version 5
copy is written under --work (never into models/). Each set's recordings are then checked as
`leakpipe predict` checks them (``predict.prepare`` reads, resamples and computes features;
``predict_rows.domain_fields`` gives the row's ``domain`` from the recording's band profile and
its own Nyquist frequency), without scoring the network (the decision does not enter the check):

- test_split: the default test split's recordings (data/raw files listed in test.h5), as
  predict reads them; test_split_h5: the same through evaluate's path (the HDF5 clips), the
  figure evaluate writes as ``domain/test_shifted_rate``;
- val_split_h5: val's recordings, the threshold's own split (about 1 % by construction);
- field_pool / field_check: the synthetic field set (a machine working near every sensor);
- band_limited_4096: the test recordings resampled to 4096 Hz (a logger at 4096 Hz) under
  --work;
- real_dev: the five real testbed recordings in ../shared/real-dev (read there, never copied;
  skipped with a message when absent).

Each set: n, shifted count and rate with a 95 % Wilson interval, the reasons' counts and the
median distance. Writes benchmarks/results/domain.json.

    python benchmarks/domain_check.py [--work /tmp/leakpipe_domain] \
        [--out benchmarks/results/domain.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import soundfile as sf

from leakpipe.audio.io import read_audio
from leakpipe.audio.resampling import resample
from leakpipe.data.reader import open_split
from leakpipe.decision.domain import SHIFTED, band_profile, distances, wilson_interval
from leakpipe.detector import Detector, load_detector, save_detector
from leakpipe.evaluate.domain_reference import build_reference, split_profiles
from leakpipe.predict import find_recordings, prepare
from leakpipe.predict_rows import domain_fields

REPO = Path(__file__).resolve().parents[1]
REAL_DEV = REPO.parent / "shared" / "real-dev"
LOGGER_RATE = 4096        # Hz: the band-limited logger
MAX_CLIPS = 64            # clips per part while reading (as predict's batches)
log = logging.getLogger("domain_check")


def versioned_detector(path: Path, data: Path, work: Path) -> tuple[Detector, str]:
    """The detector with a domain reference, and where it came from."""
    detector = load_detector(path)
    if detector.domain is not None:
        return detector, str(path)
    ref = build_reference(detector, {"train": data / "train.h5", "val": data / "val.h5"})
    out = work / "detector.pt"
    save_detector(out, dataclasses.replace(detector, domain=ref))
    return load_detector(out), f"{out} (evaluate's reference added to {path})"


def check_files(detector: Detector, paths: Iterable[Path], min_fraction: float) -> list[dict]:
    """predict's domain fields of each readable recording."""
    rows = []
    for path in paths:
        parts = list(prepare(path, detector, min_fraction, MAX_CLIPS))
        mel = np.concatenate([p.mel for p in parts])
        rows.append({"path": str(path), **domain_fields(detector, band_profile(mel),
                                                        parts[-1].band_hz)})
    return rows


def summary(rows: list[dict]) -> dict:
    shifted = [r for r in rows if r["domain"] == SHIFTED]
    k, n = len(shifted), len(rows)
    low, high = wilson_interval(k, n)
    return {"n": n, "shifted": k, "shifted_rate": k / n if n else None,
            "ci95_low": low, "ci95_high": high,
            "reasons": dict(Counter(r["domain_reason"].split(":")[0] for r in shifted)),
            "median_distance": float(np.median([r["domain_distance"] for r in rows]))}


def h5_summary(detector: Detector, path: Path) -> dict:
    assert detector.domain is not None
    d = distances(detector.domain, split_profiles(path))
    rows = [{"domain": SHIFTED if x > detector.domain.threshold else "in", "domain_distance": x,
             "domain_reason": ""} for x in d]
    out = summary(rows)
    out.pop("reasons")
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
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    args.work.mkdir(parents=True, exist_ok=True)
    data, raw = REPO / "data/processed", REPO / "data/raw"
    detector, source = versioned_detector(REPO / "models/detector.pt", data, args.work)
    ref = detector.domain
    assert ref is not None
    start = time.perf_counter()
    test_files = [raw / rid for rid in sorted(set(_ids(data / "test.h5")))]
    sets: dict[str, dict] = {"val_split_h5": h5_summary(detector, data / "val.h5"),
                             "test_split_h5": h5_summary(detector, data / "test.h5")}
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
        rows = check_files(detector, paths, args.min_clip_fraction)
        sets[name] = summary(rows)
        if name == "real_dev":
            sets[name]["recordings"] = {Path(r["path"]).name: f"{r['domain']} "
                                        f"{r['domain_distance']}: {r['domain_reason']}"
                                        for r in rows}
        examples[name] = next((r["domain_reason"] for r in rows if r["domain_reason"]), "")
        log.info("%s: %s", name, {k: v for k, v in sets[name].items() if k != "recordings"})
    doc = {"detector": source, "reference": ref.fitted_on, "threshold": ref.threshold,
           "uses_level": ref.uses_level, "sets": sets, "example_reasons": examples,
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

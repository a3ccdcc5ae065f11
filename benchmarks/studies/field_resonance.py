"""A sensor mount that rings in the leak band: does the detector err, and does the domain check
see it?

A logger on another network sits on another fitting (a valve spindle or its extension rod, a
hydrant body, a magnet on a pipe fitting), and the mount has a resonance set by its mass and
stiffness. The synthetic sites only have accelerometer mounts ringing at 2-6 kHz, above most of
the leak band, and the real testbed recordings carry rig resonances the synthetic set lacks
(benchmarks/studies/synth_calibration.py). Here each field site gets one mount resonance in the leak
band, drawn per site from its own generator: centre log-uniform in 300-1500 Hz (an assumption
chosen to lie where metal-pipe leaks are loudest, not a measured range), quality factor 3-8,
peak gain 8-15 dB and, in a second set, 12-20 dB (the same mounts, louder). The resonance is a
linear filter on the recording (``1 + (g - 1) * band-pass``); applied to the field check set's
recordings as the `field` stage wrote them, it colours everything the sensor heard, leak,
ambient and the field machine alike (and, a simplification, the logger's hum and self-noise).

Each set (none / 8-15 dB / 12-20 dB) is scored with the workspace detector as `leakpipe adapt`
scores its check set (``leakpipe.adapt.field``: predict's features, the detector's own rule and
threshold): false-positive rate and sensitivity with 95 % Wilson intervals (recordings are the
unit, 10 field sites), ROC-AUC, and the domain check's answer: per recording (shifted count,
its interval, and the median / 95th percentile of the shape and level parts over their
training 99th percentile) and for the set as a whole (``set``: its distances against val's by
a one-sided rank test, ``leakpipe.decision.domain_set.set_check``; ``site_sets``: the same on each
site's 7 recordings alone). Run after `dvc repro` (it
reads models/detector.pt and data/field/check):

    .venv/bin/python benchmarks/studies/field_resonance.py
    # -> benchmarks/results/field_resonance.json

``--write-field DIR --peak mount_8_15_db`` instead writes a rung copy of the whole field set
(pool/, check/ with its manifest, pool_truth.csv) into DIR and stops, so that `leakpipe adapt`
can be run on it (point ``adapt.source`` / ``check`` / ``pool_truth`` of a params copy there).

Figures: docs/adaptation.md, docs/evaluation.md, docs/results/adaptation.md,
docs/results/domain-check.md.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
from adapt_field import rate  # the sibling module (run as a script): k of n with its interval

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from leakpipe.adapt.field import (  # noqa: E402
    FieldSet,
    check_recordings,
    domain_summary,
    load_field,
    score_detector,
)
from leakpipe.adapt.rounds import set_figures  # noqa: E402
from leakpipe.audio.spectral import resonance  # noqa: E402
from leakpipe.config import load_section  # noqa: E402
from leakpipe.constants import MANIFEST_NAME  # noqa: E402
from leakpipe.decision.domain import (  # noqa: E402
    SHIFTED,
    band_profile,
    distances,
    scaled_parts,
)
from leakpipe.decision.domain_set import set_check  # noqa: E402
from leakpipe.detector import Detector, load_detector  # noqa: E402
from leakpipe.predict.rules import ScoringRules, batch_budget  # noqa: E402
from leakpipe.runtime import make_runtime  # noqa: E402

MOUNT_STREAM = 4242                   # the mounts' generator: (field.seed, MOUNT_STREAM, site)
CENTRE_HZ = (300.0, 1500.0)           # resonance centre, log-uniform
Q_RANGE = (3.0, 8.0)                  # quality factor (-3 dB width: centre / Q)
PEAK_DB = {"none": None, "mount_8_15_db": (8.0, 15.0), "mount_12_20_db": (12.0, 20.0)}


@dataclass(frozen=True)
class Mount:
    centre_hz: float
    q: float
    peak_db: float


def draw_mount(seed: int, site: int, peak_db: tuple[float, float]) -> Mount:
    """Site ``site``'s mount: the same centre, Q and place in the peak range for every range."""
    u = np.random.default_rng(np.random.SeedSequence([seed, MOUNT_STREAM, site])).random(3)
    low, high = np.log(CENTRE_HZ)
    return Mount(centre_hz=float(np.exp(low + (high - low) * u[0])),
                 q=float(Q_RANGE[0] + (Q_RANGE[1] - Q_RANGE[0]) * u[1]),
                 peak_db=float(peak_db[0] + (peak_db[1] - peak_db[0]) * u[2]))


def mount_gain(freqs: np.ndarray, mount: Mount) -> np.ndarray:
    """Magnitude response: 1 off resonance, 10 ** (peak_db / 20) at its centre."""
    peak = 10.0 ** (mount.peak_db / 20.0)
    return 1.0 + (peak - 1.0) * resonance(freqs, mount.centre_hz, mount.q)


def ring(x: np.ndarray, sr: int, mount: Mount) -> np.ndarray:
    """(n,) or (n, channels) samples through the mount's response."""
    freqs = np.fft.rfftfreq(x.shape[0], 1.0 / sr)
    gain = mount_gain(freqs, mount)
    gain = gain if x.ndim == 1 else gain[:, None]
    return np.fft.irfft(np.fft.rfft(x, axis=0) * gain, x.shape[0], axis=0)


def site_of(check_dir: Path) -> dict[str, int]:
    """Check-set key (path below check/) -> its site's index, from the manifest's group."""
    with (check_dir / MANIFEST_NAME).open(newline="") as handle:
        return {row["path"]: int(row["group"].removeprefix("site"))
                for row in csv.DictReader(handle)}


def rung_copies(items: list[tuple[str, Path, int]], sites: dict[str, int], seed: int,
                peak_db: tuple[float, float], out: Path) -> tuple[list[tuple[str, Path, int]],
                                                                   dict[int, Mount]]:
    """Every check recording through its site's mount, written as float WAVs under ``out``; one
    whose peak the mount lifts above the recording's own peak is turned down to it."""
    mounts: dict[int, Mount] = {}
    copies = []
    for key, path, label in items:
        site = sites[key]
        mount = mounts.setdefault(site, draw_mount(seed, site, peak_db))
        x, sr = sf.read(path, dtype="float64", always_2d=False)
        y = ring(x, sr, mount)
        # the logger turns a recording down where a peak would pass full scale (as synth's does)
        y *= min(1.0, max(float(np.max(np.abs(x))), 1e-30) / max(float(np.max(np.abs(y))), 1e-30))
        dst = out / key
        dst.parent.mkdir(parents=True, exist_ok=True)
        sf.write(dst, y.astype(np.float32), sr, subtype="FLOAT", format="WAV")
        copies.append((key, dst, label))
    return copies, mounts


def write_field(field_dir: Path, out: Path, seed: int, peak_db: tuple[float, float]) -> int:
    """A rung copy of the field stage's whole output (every WAV through its site's mount, the
    CSVs as they are) in ``out``, which must not exist yet; returns the recordings written."""
    if out.exists():
        raise SystemExit(f"{out}: exists; name a new folder")
    wavs = sorted(field_dir.rglob("*.wav"))
    sites = {w: int(w.name.split("_")[0].removeprefix("site")) for w in wavs}
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    for rel in ("pool_truth.csv", f"check/{MANIFEST_NAME}"):
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(field_dir / rel, tmp / rel)
    by_site: dict[int, list[tuple[str, Path, int]]] = {}
    for wav in wavs:
        by_site.setdefault(sites[wav], []).append((str(wav.relative_to(field_dir)), wav, 0))
    for site, items in by_site.items():
        rung_copies(items, {key: site for key, _, _ in items}, seed, peak_db, tmp)
    tmp.rename(out)
    return len(wavs)


def parts(detector: Detector, field: FieldSet) -> dict[str, dict[str, float]]:
    """Median and 95th percentile of the domain check's shape and level parts (1 = the
    training recordings' 99th percentile of that part)."""
    assert detector.domain is not None
    profiles = np.stack([band_profile(mel) for mel in field.mel])
    shape, level = scaled_parts(detector.domain, profiles)
    return {name: {"median": round(float(np.median(v)), 3),
                   "p95": round(float(np.percentile(v, 95)), 3)}
            for name, v in (("shape_part", shape), ("level_part", level))}


def site_sets(detector: Detector, field: FieldSet, sites: dict[str, int]) -> dict[str, object]:
    """The set check on each site's recordings alone (a survey of one logger position)."""
    assert detector.domain is not None
    d = distances(detector.domain, np.stack([band_profile(mel) for mel in field.mel]))
    site = np.array([sites[key] for key in field.keys])
    checks = [set_check(detector.domain, d[site == s]) for s in np.unique(site)]
    return {"shifted": rate(sum(c.domain == SHIFTED for c in checks), len(checks)),
            "recordings_per_site": sorted({c.n for c in checks}),
            "p_values": [float(f"{c.p_value:.3g}") for c in checks]}


def figures(detector: Detector, field: FieldSet, budget: int,
            sites: dict[str, int]) -> dict[str, object]:
    """What the detector and its domain check make of one labelled set."""
    assert field.truth is not None
    scores = score_detector(detector, field, make_runtime("cpu", "off"), budget).scores
    called = scores >= detector.threshold
    neg, pos = field.truth == 0, field.truth == 1
    domain = domain_summary(detector, field)
    n = len(field.keys)
    return {"fpr": rate(int(called[neg].sum()), int(neg.sum())),
            "sensitivity": rate(int(called[pos].sum()), int(pos.sum())),
            "roc_auc": round(set_figures(field.truth, scores, detector.threshold)["roc_auc"], 3),
            "shifted": rate(int(domain["shifted"]), n), "set": domain["set"],
            "site_sets": site_sets(detector, field, sites), **parts(detector, field)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=Path, default=REPO / "params.yaml")
    parser.add_argument("--model", type=Path, default=REPO / "models" / "detector.pt",
                        help="detector file (default: the workspace's, written by evaluate)")
    parser.add_argument("--field", type=Path, default=REPO / "data" / "field",
                        help="the field stage's output (its check/ set is read)")
    parser.add_argument("--out", type=Path,
                        default=REPO / "benchmarks" / "results" / "field_resonance.json")
    parser.add_argument("--write-field", type=Path, metavar="DIR",
                        help="write a rung copy of the whole field set here and stop")
    parser.add_argument("--peak", choices=[k for k, v in PEAK_DB.items() if v],
                        default="mount_8_15_db", help="the mounts' peak range for --write-field")
    args = parser.parse_args()
    start = time.perf_counter()
    if args.write_field is not None:
        n = write_field(args.field, args.write_field, load_section(args.params, "field").seed,
                        PEAK_DB[args.peak])
        print(f"{n} recordings through their site's mount ({args.peak}) -> {args.write_field}")
        return 0
    detector = load_detector(args.model)
    if detector.domain is None:
        sys.exit(f"{args.model}: the detector holds no domain reference; re-run evaluate")
    seed = load_section(args.params, "field").seed
    min_fraction = load_section(args.params, "build").min_clip_fraction
    budget = batch_budget(detector, ScoringRules(detector.batch_limits, min_fraction),
                          make_runtime("cpu", "off"))
    check_dir = args.field / "check"
    items = check_recordings(check_dir)
    sites = site_of(check_dir)
    sets: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, peak_db in PEAK_DB.items():
            copies, mounts = ((items, {}) if peak_db is None else
                              rung_copies(items, sites, seed, peak_db, Path(tmp) / name))
            field = load_field([(k, p) for k, p, _ in copies], detector, min_fraction,
                               labels=[y for *_, y in copies], desc=name)
            sets[name] = {**figures(detector, field, budget, sites),
                          "mounts": {f"site{s}": {k: round(v, 2) for k, v in asdict(m).items()}
                                     for s, m in sorted(mounts.items())}}
            print(name, json.dumps({k: v for k, v in sets[name].items() if k != "mounts"}),
                  flush=True)
    doc = {"machine": "2-core CPU box (this repo's dev machine)", "detector": str(args.model),
           "threshold": detector.threshold, "domain_threshold": detector.domain.threshold,
           "field_check": str(check_dir), "sets": sets,
           "seconds": round(time.perf_counter() - start, 1),
           "note": "rates over the field check set's recordings (10 sites); 95 % Wilson "
                   "intervals; shape_part / level_part: 1 = the training recordings' 99th "
                   "percentile of that part"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Build throughput: recordings per second with 1 and 2 workers vs a naive per-file loop; and
the peak memory of one long recording in build's per-recording path and in predict.

Imports happen before timing; the 2-worker figure includes starting the helper process (it
imports numpy / scipy once while the build process already computes). The naive baseline is what
a first script does: per recording, load, resample, an STFT frame and its mel in Python per
segment. The naive loop and both builds process the same recordings in one invocation, so the
ratios are comparable on a noisy machine (the load average at start and end is kept). Before
them, a cProfile of `build` (1 and 2 workers, ``--profile-recordings``) lists where the time
goes, also for ``--baseline DIR``.

Long recordings (``--part long``): 48 kHz stereo int16 WAVs of ``--long-minutes`` minutes (2 h =
1.4 GB) are generated in a temporary folder; each is processed in a fresh subprocess, which
reports its peak RSS (VmHWM: the whole process, imports included) and its peak RSS after the
imports, for ``build`` (``process_recording``: read, signal checks, 2 clips, features),
``predict_prepare`` (``prepare``: every clip's features, part by part, as `leakpipe predict`
walks a file) and ``predict`` (the whole command path with a random-weight detector of the
params' model: prepare, scoring, the CSV row). ``--baseline DIR`` measures an older leakpipe the
same way (``git archive <commit> leakpipe | tar -x -C DIR``), for a before / after.

    python benchmarks/perf/bench_build.py --part throughput [--recordings 2000] [--baseline DIR]
    python benchmarks/perf/bench_build.py --part long [--long-minutes 10 60 120] [--baseline DIR]
    python benchmarks/perf/bench_build.py --part cluster [--chunks 1 4 8 32]   (build_cluster.py)

Figures: docs/results/performance.md, docs/scale-out.md.
"""

from __future__ import annotations

import argparse
import cProfile
import csv
import dataclasses
import inspect
import json
import os
import platform
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import yaml
from build_cluster import bench_cluster  # the sibling module (run as a script)
from scipy.signal import get_window, resample_poly

import leakpipe.audio.io  # noqa: F401  (imported up front: scipy.signal costs ~1.5 s once)
from leakpipe.audio.synth import generate
from leakpipe.build import build
from leakpipe.config import BuildConfig, FeatureConfig, load_section
from leakpipe.data.manifest import discover
from leakpipe.features.mel import mel_filterbank

REPO = Path(__file__).resolve().parents[2]


def naive_recording(path: Path, f: FeatureConfig, n_clips: int) -> np.ndarray:
    """Per-file, per-segment Python loops: the baseline the build stage replaces."""
    x, sr = sf.read(path, dtype="float64")
    if x.ndim > 1:
        x = x.mean(axis=1)
    if sr != f.sample_rate:
        x = resample_poly(x, f.sample_rate, sr)
    n = f.clip_samples
    starts = np.linspace(0, max(len(x) - n, 0), n_clips).astype(int)
    window = get_window("hann", f.n_fft, fftbins=True)
    fb = mel_filterbank(f.sample_rate, f.n_fft, f.n_mels, f.fmin, f.fmax)
    out = np.zeros((n_clips, *f.segment_shape), dtype=np.float32)
    for c, start in enumerate(starts):
        clip = x[start:start + n]
        for i in range(f.n_long):
            long_seg = clip[i * f.long_hop:i * f.long_hop + f.long_window]
            for j in range(f.n_short):
                short = long_seg[j * f.short_hop:j * f.short_hop + f.short_window]
                for t in range(f.n_frames):
                    frame = short[t * f.hop_length:t * f.hop_length + f.n_fft] * window
                    power = np.abs(np.fft.rfft(frame)) ** f.power
                    mel = fb @ power
                    out[c, i, j, :, t] = 10 * 2 / f.power * np.log10(np.maximum(mel,
                                                                               f.log_floor))
    return out


def time_naive(cfg: BuildConfig, source: Path) -> tuple[float, int]:
    recordings = discover(source)
    start = time.perf_counter()
    for rec in recordings:
        naive_recording(rec.path, cfg.features, cfg.clips_per_recording)
    return time.perf_counter() - start, len(recordings)


def write_long_wav(path: Path, minutes: float, rate: int = 48000, channels: int = 2) -> None:
    """Noise plus a tone per channel as int16 WAV, written a minute at a time."""
    rng = np.random.default_rng(0)
    t = np.arange(60 * rate) / rate
    tones = 0.1 * np.sin(2 * np.pi * np.array([440.0, 1000.0])[:channels] * t[:, None])
    with sf.SoundFile(path, "w", rate, channels, "PCM_16", format="WAV") as f:
        left = int(round(minutes * 60 * rate))
        while left > 0:
            block = tones + 0.1 * rng.standard_normal((len(t), channels))  # (frames, channels)
            f.write(block[:left].astype(np.float32))
            left -= len(block)


def _rss_mib() -> float:
    """This process's peak RSS so far: VmHWM (Linux). Not ru_maxrss, which a child started by
    fork + exec inherits from its parent (here: the one that wrote the recordings)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024  # kB
    raise RuntimeError("no VmHWM in /proc/self/status (Linux only)")


def _random_detector(features: object, params: Path, limits: dict[str, float]) -> object:
    """A detector with random weights of the params' model on ``features`` (scores are noise;
    the memory and the work are those of a trained one), with predict's batch ``limits``."""
    import torch

    from leakpipe.constants import BINARY_CLASSES, KNOWN_CLASSES
    from leakpipe.decision.voting import VotingConfig
    from leakpipe.detector import Detector
    from leakpipe.model import create_model
    from leakpipe.scoring.batching import BatchLimits

    torch.manual_seed(0)
    model_cfg = load_section(params, "model")
    return Detector(model=create_model(model_cfg, len(BINARY_CLASSES)).eval(),
                    model_cfg=model_cfg, class_names=BINARY_CLASSES,
                    data_class_names=KNOWN_CLASSES, binary=True, features=features,
                    voting=VotingConfig(prob_mode="blend", rule="long_vote"), threshold=0.5,
                    metrics={}, input_norm="none", batch_limits=BatchLimits(**limits),
                    min_clip_fraction=load_section(params, "build").min_clip_fraction)


def batch_limits(params: Path) -> dict[str, float]:
    """What ``predict.rules.scoring_rules`` takes from params for a detector without its rules
    (read here: a child running an older leakpipe need not parse today's sections)."""
    evaluate, preload = load_section(params, "evaluate"), load_section(params, "preload")
    return {"max_segments": evaluate.max_batch_segments,
            "cpu_max_segments": evaluate.cpu_max_batch_segments, "safety": preload.safety,
            "host_reserve_mb": preload.host_reserve_mb,
            "device_reserve_mb": preload.device_reserve_mb}


def child(kind: str, path: Path, params: Path, limits: dict[str, float]) -> dict[str, float]:
    """One measurement in this (fresh) process; prints nothing, returns the figures."""
    cfg = load_section(params, "build")
    if kind == "build":
        from leakpipe.build_recording import RecordingJob, process_recording

        job = RecordingJob(cfg.features, cfg.clips_per_recording, cfg.min_clip_fraction, False,
                   cfg.quality, cfg.stats)
        imports = _rss_mib()
        start = time.perf_counter()
        result = process_recording(job, 0, path)
        assert result.error is None, result.error
        clips = len(result.mel)
    else:
        from predict_api import predict_functions  # today's, or a --baseline's older ones

        from leakpipe.allocator import retain_freed_memory
        predict, scoring_rules, prepare = predict_functions()
        from leakpipe.runtime import make_runtime
        retain_freed_memory()  # as `leakpipe predict` does: freed buffers stay for reuse
        detector = _random_detector(cfg.features, params, limits)
        imports = _rss_mib()
        start = time.perf_counter()
        if kind == "predict_prepare":
            f = cfg.features
            max_clips = max(1, int(limits["cpu_max_segments"]) // (f.n_long * f.n_short))
            parts = (prepare(path, detector, cfg.min_clip_fraction, max_clips)
                     if "max_clips" in inspect.signature(prepare).parameters   # a baseline:
                     else [prepare(path, detector, cfg.min_clip_fraction)])    # all at once
            clips = sum(len(part.mel) for part in parts)
        else:
            out = path.with_suffix(".csv")
            predict([path], detector, out, runtime=make_runtime("cpu", "auto"),
                    rules=scoring_rules(detector, params), progress=False)
            csv.field_size_limit(sys.maxsize)  # the timeline is a field of 190 KB per hour
            with out.open(newline="") as handle:
                [row] = csv.DictReader(handle)
            assert row["status"] == "ok", row["notes"]
            clips = int(row["n_long"]) // cfg.features.n_long
    return {"import_rss_mib": round(imports, 1), "peak_rss_mib": round(_rss_mib(), 1),
            "above_imports_mib": round(_rss_mib() - imports, 1),
            "seconds": round(time.perf_counter() - start, 1), "clips": clips}


def measure(kind: str, path: Path, params: Path, code: Path) -> dict[str, float]:
    """``child`` in a fresh interpreter importing leakpipe from ``code``."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    limits = json.dumps(batch_limits(REPO / "params.yaml"))
    run = subprocess.run([sys.executable, __file__, "--child", kind, str(path), str(params),
                          limits], env=env, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise RuntimeError(f"{kind} on {path.name} failed:\n{run.stderr[-2000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def machine() -> dict[str, object]:
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
               platform.processor())
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"cpu": cpu, "logical_cores": os.cpu_count(), "memory_gib": round(memory, 1),
            "system": f"{platform.system()} {platform.release()}",
            "python": platform.python_version(), "numpy": np.__version__,
            "soundfile_libsndfile": sf.__libsndfile_version__}


def bench_long(minutes: list[float], kinds: list[str], baseline: Path | None, label: str,
               out: Path) -> None:
    """Peak RSS per length and path -> ``out``, and a table on stdout."""
    runs = {"after": REPO, **({"before": baseline} if baseline else {})}
    rows: dict[str, list[dict[str, object]]] = {name: [] for name in runs}
    with tempfile.TemporaryDirectory() as tmp:
        params = Path(tmp) / "params.yaml"  # only what the children read: a baseline knows it
        everything = yaml.safe_load((REPO / "params.yaml").read_text())
        params.write_text(yaml.safe_dump({k: everything[k] for k in PARAMS_READ}))
        for length in minutes:
            path = Path(tmp) / f"{length:g}min.wav"
            write_long_wav(path, length)
            size = path.stat().st_size / 2**20
            for name, code in runs.items():
                for kind in kinds:
                    row = {"path": kind, "minutes": length, "file_mib": round(size, 1),
                           **measure(kind, path, params, code)}
                    rows[name].append(row)
                    print(f"{name:<7}{kind:<17}{length:>6g} min{size:>8.0f} MiB file"
                          f"{row['peak_rss_mib']:>9.0f} MiB peak{row['above_imports_mib']:>8.0f} "
                          f"MiB above imports{row['seconds']:>8.1f} s", flush=True)
            path.unlink()
    summary = {"machine": machine(),
               "recording": "48 kHz stereo PCM_16 WAV (noise + tones), params.yaml build "
                            "features (8192 Hz, 3 s clips), clips_per_recording 2 for build",
               "measured": "peak RSS (VmHWM) of a fresh process per row, imports included; "
                           "import_rss_mib: the peak after the imports, before the work",
               **({"before_is": label} if baseline else {}), **rows}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2) + "\n")


def rates(cfg: BuildConfig, raw: Path, out: Path) -> dict[str, float]:
    """Recordings per second of `build` with 1 and 2 workers (the pool's start included)."""
    n, result = len(discover(raw)), {}
    for workers in (1, 2):
        start = time.perf_counter()
        build(dataclasses.replace(cfg, workers=workers), raw, out / f"w{workers}", progress=False)
        result[f"leakpipe_{workers}_workers"] = n / (time.perf_counter() - start)
    return result


# where build's time goes: (file name, function) of the profile entries of each part
PARTS = {"open (header, RIFF)": ("opening.py", "open_audio"), "decode": ("io.py", "__iter__"),
         "signal checks": ("quality.py", "add"), "high-pass": ("highpass.py", "_filter"),
         "resample": ("resampling.py", "resample"), "log-mel": ("mel.py", "clip_features"),
         "hdf5 write": ("writer.py", "append"), "sha256": ("files.py", "file_sha256"),
         "wait for workers": ("~", "<method 'acquire' of '_thread.lock' objects>")}


def profile(cfg: BuildConfig, source: Path, out: Path, workers: int) -> dict[str, object]:
    """cProfile of this process in `build`: cumulative seconds of each of ``PARTS``, and the
    functions with most time of their own (a helper's work shows as waiting for it)."""
    profiler = cProfile.Profile()
    profiler.runcall(build, dataclasses.replace(cfg, workers=workers), source, out,
                     progress=False)
    stats = pstats.Stats(profiler).stats  # (file, line, function) -> (cc, nc, tt, ct, callers)
    total = max(ct for _, _, _, ct, _ in stats.values())
    parts = {part: round(sum(ct for (file, _, fn), (_, _, _, ct, _) in stats.items()
                             if Path(file).name == name and fn == function), 2)
             for part, (name, function) in PARTS.items()}
    own = sorted(((tt, f"{Path(file).name}:{fn}") for (file, _, fn), (_, _, tt, _, _)
                  in stats.items()), reverse=True)[:8]
    return {"build_s": round(total, 2), "cumulative_s": parts,
            "top_own_time_s": {name: round(tt, 2) for tt, name in own}}


def child_build(kind: str, source: Path, out: Path) -> dict[str, object]:
    """``rates`` or the 1- and 2-worker ``profile`` of the leakpipe on PYTHONPATH."""
    cfg = load_section(REPO / "params.yaml", "build")
    if kind == "rates":
        return rates(cfg, source, out)
    return {"1_worker": profile(cfg, source, out / "1", 1),
            "2_workers_parent": profile(cfg, source, out / "2", 2)}


def in_child(kind: str, source: Path, out: Path, code: Path) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(code)}
    run = subprocess.run([sys.executable, __file__, "--child-build", kind, str(source),
                          str(out)], env=env, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise RuntimeError(f"{kind} with {code} failed:\n{run.stderr[-2000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def bench_throughput(recordings: int, profiled: int, baseline: Path | None, label: str,
                     out: Path) -> None:
    """Naive loop, 1 and 2 workers in one run, the profiles before (``baseline``) and after."""
    loads = [os.getloadavg()[0]]  # 1-min load average: invocation, timing start and end
    synth = load_section(REPO / "params.yaml", "synth")
    cfg = load_section(REPO / "params.yaml", "build")
    per_site = max(1, recordings // (synth.n_sites * len(synth.classes)))
    synth = dataclasses.replace(synth, recordings_per_class=per_site, scale=1.0)
    with tempfile.TemporaryDirectory() as tmp:
        raw, work = Path(tmp) / "raw", Path(tmp) / "out"
        generate(synth, raw, progress=False)
        n = len(discover(raw))
        part = raw / "profiled.csv"  # the first recordings of the manifest: whole sites
        part.write_text("\n".join((raw / "manifest.csv").read_text().splitlines()[:profiled + 1]))
        profiles = {"recordings": len(discover(part)),
                    "after": in_child("profile", part, work, REPO)}
        if baseline:
            profiles["before"] = in_child("profile", part, work, baseline)
        loads.append(os.getloadavg()[0])
        seconds, count = time_naive(cfg, raw)
        results = {"naive_loop": count / seconds, **rates(cfg, raw, work)}
        before = in_child("rates", raw, work, baseline) if baseline else None
        loads.append(os.getloadavg()[0])
    summary = throughput_summary(n, results, before, label, profiles, loads)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({k: summary[k] for k in ("recordings_per_s", "ratios", "note")}, indent=2))


def throughput_summary(n: int, results: dict[str, float], before: dict | None, label: str,
                       profiles: dict, loads: list[float]) -> dict[str, object]:
    """The JSON of ``bench_throughput``: rates, ratios, targets and an honest note."""
    base = results["naive_loop"]
    ratios = {**{f"{k}_vs_naive": round(v / base, 2) for k, v in results.items()
                 if k != "naive_loop"},
              "two_vs_one_worker": round(results["leakpipe_2_workers"] /
                                         results["leakpipe_1_workers"], 2)}
    missed = [f"{k} {ratios[k]} < {goal}" for k, goal in TARGETS.items() if ratios[k] < goal]
    note = ("targets met" if not missed else "target missed: " + "; ".join(missed) +
            f". 2 logical cores (1-min load average {loads[1]:.2f} at the start of the timing, "
            f"{loads[2]:.2f} at its end): the two workers are the build process itself and "
            "one helper, so the writes and the helper's start (imports, ~2 s) come out of the "
            "same two cores; other processes on the machine take their share too.")
    return {"machine": machine(), "recordings": n,
            "measured": "one run: naive loop, then leakpipe build with 1 and 2 workers "
                        "(params.yaml build section; 2 workers = this process + 1 helper)",
            "load_average_1min": dict(zip(("invocation", "timing_start", "timing_end"),
                                          (round(x, 2) for x in loads), strict=True)),
            "recordings_per_s": {k: round(v, 2) for k, v in results.items()},
            "ratios": ratios, "targets": TARGETS, "note": note,
            **({"before": {"code": label, "recordings_per_s": {k: round(v, 2) for k, v in
                                                             before.items()}}} if before else {}),
            "profile": profiles}


TARGETS = {"leakpipe_2_workers_vs_naive": 3.0, "two_vs_one_worker": 1.6}  # issue #25 item 1
LONG_KINDS = ["build", "predict_prepare", "predict"]
PARAMS_READ = ("build", "model")  # the sections the children load


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["all", "throughput", "long", "cluster"], default="all")
    parser.add_argument("--recordings", type=int, default=2000,
                        help="approximate number of synthetic recordings")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "build.json")
    parser.add_argument("--long-minutes", type=float, nargs="+", default=[10, 60, 120])
    parser.add_argument("--long-kinds", nargs="+", choices=LONG_KINDS, default=LONG_KINDS)
    parser.add_argument("--long-out", type=Path,
                        default=REPO / "benchmarks" / "results" / "long_recordings.json")
    parser.add_argument("--baseline", type=Path, help="an older leakpipe to measure as well")
    parser.add_argument("--baseline-label", help="what the baseline is (default: its path)")
    parser.add_argument("--profile-recordings", type=int, default=400,
                        help="approximate number of recordings profiled")
    parser.add_argument("--chunks", type=int, nargs="+", help="cluster: recordings per task")
    parser.add_argument("--child", nargs=4, metavar=("KIND", "PATH", "PARAMS", "LIMITS"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--child-build", nargs=3, metavar=("KIND", "SOURCE", "OUT"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, path, params, limits = args.child
        print(json.dumps(child(kind, Path(path), Path(params), json.loads(limits))))
        return
    if args.child_build:
        print(json.dumps(child_build(args.child_build[0], *map(Path, args.child_build[1:]))))
        return
    if args.part == "cluster":  # not in "all": it starts a Dask cluster of its own
        return bench_cluster(args.recordings, args.chunks, machine())
    if args.part in ("all", "throughput"):
        bench_throughput(args.recordings, args.profile_recordings, args.baseline,
                         args.baseline_label or str(args.baseline), args.out)
    if args.part in ("all", "long"):
        bench_long(args.long_minutes, args.long_kinds, args.baseline,
                   args.baseline_label or str(args.baseline), args.long_out)


if __name__ == "__main__":
    main()

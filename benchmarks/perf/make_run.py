"""How long README's first command takes: `make run` on a fresh clone, as a new user meets it.

Clones this repository's HEAD into a scratch folder, then times `make install` (a new venv from
requirements.lock; pip's own cache as this machine has it) and `make run` (every DVC stage on
the embedded synthetic default), and the stages one by one from DVC's "Running stage" lines.

Writes ``benchmarks/results/make_run.json``: the commit, the machine, the install and pipeline
seconds, per stage the seconds until the next stage started (or the run ended), the 1-minute
load average at the start and the end (anything else running slows it).

    python benchmarks/perf/make_run.py [--out benchmarks/results/make_run.json] [--keep DIR]

The clone has a DVC cache of its own: with this checkout's cache, DVC's run cache would restore
stages that ran here before instead of running them. ``--keep DIR`` clones into DIR and leaves
it (its outputs and MLflow store can be inspected, its cache copied here).

Figures: README.md, docs/results/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"
STAGE_LINE = re.compile(r"^Running stage '([\w@.-]+)'")


def machine() -> str:
    cpu = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return f"{cpu}, {os.cpu_count()} cores"


def stage_seconds(events: list[tuple[float, str]], end: float) -> dict[str, float]:
    """(start time, stage) in order -> seconds from each start to the next start (or ``end``)."""
    out: dict[str, float] = {}
    for (start, stage), nxt in zip(events, [t for t, _ in events[1:]] + [end], strict=False):
        out[stage] = round(nxt - start, 1)
    return out


def timed_make(target: str, clone: Path, log: Path) -> tuple[float, dict[str, float]]:
    """Run ``make target`` in the clone, its output to ``log``; its seconds and each stage's."""
    events: list[tuple[float, str]] = []
    start = time.perf_counter()
    with log.open("w") as sink, subprocess.Popen(
            ["make", target], cwd=clone, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, bufsize=1) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            sink.write(line)
            match = STAGE_LINE.match(line)
            if match:
                events.append((time.perf_counter(), match.group(1)))
        if proc.wait() != 0:
            raise SystemExit(f"make {target} failed in {clone} (exit {proc.returncode}): {log}")
    end = time.perf_counter()
    return end - start, stage_seconds(events, end)


def measure(clone: Path) -> dict[str, Any]:
    load_start = os.getloadavg()[0]
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, check=True,
                            capture_output=True, text=True).stdout.strip()
    install_s, _ = timed_make("install", clone, clone / "make_install.log")
    run_s, stages = timed_make("run", clone, clone / "make_run.log")
    return {"commit": commit, "machine": machine(), "install_seconds": round(install_s, 1),
            "run_seconds": round(run_s, 1), "total_seconds": round(install_s + run_s, 1),
            "stages": stages,
            "load_average_1min": {"start": round(load_start, 2),
                                  "end": round(os.getloadavg()[0], 2)}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=RESULTS / "make_run.json")
    parser.add_argument("--keep", type=Path, default=None,
                        help="clone into this new folder and leave it (default: a temp folder)")
    args = parser.parse_args(argv)
    if args.keep is not None:
        if args.keep.exists():
            parser.error(f"--keep {args.keep}: already exists")
        result = measure(args.keep)
    else:
        with tempfile.TemporaryDirectory(prefix="leakpipe-make-run-") as tmp:
            result = measure(Path(tmp) / "leakpipe")
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"make install {result['install_seconds']:.0f} s, make run {result['run_seconds']:.0f} s"
          f" -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

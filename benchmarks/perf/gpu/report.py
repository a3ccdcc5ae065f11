"""Running one check (any exception becomes one line in the JSON, the run goes on), the
machine's facts, and the one JSON, rewritten after each check.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from typing import Any

import torch

from benchmarks.perf.gpu.common import (
    Setup,
    one_line,
    sync,
)

log = logging.getLogger("gpu_check")

NO_CUDA = "no CUDA device"
NOT_RUN = "not run (the run stopped before it)"


def run_check(name: str, check: Callable[[Setup], dict[str, Any]],
              setup: Setup) -> dict[str, Any]:
    """Run one check; any exception becomes {ok: false, error} and the run goes on."""
    log.info("[ .. ] %s", name)
    start = time.perf_counter()
    try:
        details = check(setup)
        entry = {"ok": True, "seconds": round(time.perf_counter() - start, 3),
                 "details": details}
    except Exception as exc:  # noqa: BLE001  (one failing check never stops the others)
        log.debug("%s", traceback.format_exc())
        entry = {"ok": False, "seconds": round(time.perf_counter() - start, 3),
                 "error": one_line(exc)}
    finally:
        sync_quietly(setup.device)
    log.info("[%s] %s %.1f s%s", " ok " if entry["ok"] else "FAIL", name, entry["seconds"],
             "" if entry["ok"] else f": {entry['error']}")
    return entry


def sync_quietly(device: torch.device) -> None:
    """Finish queued work and return cached memory so the next check starts clean."""
    try:
        sync(device)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001  (a broken CUDA context shows in the next checks)
        log.warning("CUDA synchronize failed after a check: %s", sys.exc_info()[1])


def machine_facts(device: torch.device) -> dict[str, Any]:
    facts: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                             "cuda_runtime": torch.version.cuda, "cpus": os.cpu_count(),
                             "cuda_available": torch.cuda.is_available(),
                             "device": str(device)}
    if device.type != "cuda" or not torch.cuda.is_available():
        return facts
    props = torch.cuda.get_device_properties(device)
    facts.update(gpu=props.name, capability=f"{props.major}.{props.minor}",
                 gpu_memory_mib=props.total_memory // 2**20,
                 multiprocessors=props.multi_processor_count,
                 cudnn=torch.backends.cudnn.version(), bf16=torch.cuda.is_bf16_supported())
    try:
        facts["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception as exc:  # noqa: BLE001  (a fact, not a check)
        facts["nccl"] = f"unknown ({one_line(exc)})"
    facts["driver"] = driver_version()
    return facts


def driver_version() -> str:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception as exc:  # noqa: BLE001  (a fact, not a check)
        return f"unknown ({one_line(exc)})"


def skipped(reason: str) -> dict[str, Any]:
    return {"ok": False, "seconds": 0.0, "skipped": reason}


class Report:
    """The one JSON: machine, settings, every check; rewritten after each check, so a run that
    dies (a crash in a CUDA library, a killed process) still leaves what it found."""

    def __init__(self, args: argparse.Namespace, device: torch.device,
                 names: Iterable[str]) -> None:
        self.out, self.started = args.out, time.perf_counter()
        self.head = {"machine": machine_facts(device),
                     "settings": {"train_files": args.train_files, "val_files": args.val_files,
                                  "seconds": args.seconds, "device": args.device}}
        self.checks = {name: skipped(NOT_RUN) for name in names}

    def record(self, name: str, entry: dict[str, Any]) -> None:
        self.checks[name] = entry
        self.write()

    @property
    def summary(self) -> dict[str, Any]:
        entries = self.checks.values()
        return {"passed": sum(c["ok"] for c in entries),
                "failed": sum("error" in c for c in entries),
                "skipped": sum("skipped" in c for c in entries),
                "seconds": round(time.perf_counter() - self.started, 1)}

    def write(self) -> None:
        result = {**self.head, "checks": self.checks, "summary": self.summary}
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.write_text(json.dumps(result, indent=2, default=str) + "\n")

"""The profile artifact: ``TrainMonitor.profile()`` as profile.json plus a profile.png plot.

The plot has three panels against time: utilisation (CPU, each GPU), memory (process RSS, each
GPU) and step time / data wait with the spikes marked; its title says the device the run
trained on and the GPUs sampled (``profile_title``). matplotlib is imported on first use,
with the Agg backend, so the plot needs no display.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

PROFILE_JSON = "profile.json"
PROFILE_PNG = "profile.png"
FIGURE_SIZE = (10.0, 8.0)          # inches
FIGURE_DPI = 100


def write_profile(profile: dict[str, Any], directory: Path) -> tuple[Path, Path]:
    """profile.json and profile.png in ``directory``; returns both paths."""
    directory.mkdir(parents=True, exist_ok=True)
    json_path, png_path = directory / PROFILE_JSON, directory / PROFILE_PNG
    json_path.write_text(json.dumps(profile, indent=1) + "\n")
    plot_profile(profile, png_path)
    return json_path, png_path


def plot_profile(profile: dict[str, Any], path: Path) -> None:
    """Utilisation, memory, and step / data-wait time against time (three panels)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, (util, mem, steps) = plt.subplots(3, 1, sharex=True, figsize=FIGURE_SIZE)
    try:
        _plot_system(profile["samples"], util, mem)
        _plot_steps(profile, steps)
        steps.set_xlabel("seconds since start")
        fig.suptitle(profile_title(profile))
        fig.tight_layout()
        fig.savefig(path, dpi=FIGURE_DPI)
    finally:
        plt.close(fig)


def profile_title(profile: dict[str, Any]) -> str:
    """What ran where, in words: "CPU run (no GPU)" on a machine without one, rather than
    NVML's reason for finding none (which reads like an error); the GPUs sampled, or why none
    was, when the run had a device other than the CPU. ``device`` is the torch device type the
    run trained on (absent in profiles written before it was recorded)."""
    gpus = sorted({g["index"] for s in profile["samples"] for g in s["gpus"]})
    device = str(profile.get("device", ""))
    run = f"{device.upper()} run" if device else "device not recorded"
    if gpus:
        return f"train profile: {run}, GPU {', '.join(str(i) for i in gpus)} sampled"
    if device == "cpu":
        return "train profile: CPU run (no GPU)"
    return f"train profile: {run}, no GPU sampled ({profile['gpu']})"


def _plot_system(samples: list[dict[str, Any]], util: Any, mem: Any) -> None:
    t = [s["t"] for s in samples]
    util.plot(t, [s["cpu_percent"] for s in samples], label="CPU %")
    mem.plot(t, [s["rss_mb"] for s in samples], label="process RSS MiB")
    indices = sorted({g["index"] for s in samples for g in s["gpus"]})
    for index in indices:
        points = [(s["t"], g) for s in samples for g in s["gpus"] if g["index"] == index]
        util.plot([p[0] for p in points], [p[1]["util_percent"] for p in points],
                  label=f"GPU {index} util %")
        mem.plot([p[0] for p in points], [p[1]["mem_used_mb"] for p in points],
                 label=f"GPU {index} MiB")
    util.set_ylabel("utilisation %")
    mem.set_ylabel("memory MiB")
    for ax in (util, mem):
        ax.legend(loc="upper right", fontsize="small")


def _plot_steps(profile: dict[str, Any], ax: Any) -> None:
    steps = profile["steps"]
    t = np.asarray(steps["t"], dtype=float)
    ax.plot(t, 1e3 * np.asarray(steps["seconds"], dtype=float), ".", ms=2, label="step ms")
    ax.plot(t, 1e3 * np.asarray(steps["wait"], dtype=float), ".", ms=2, label="data wait ms")
    spikes = [s for e in profile["epochs"] for s in e["spikes"]]
    if spikes:
        ax.plot([s["t"] for s in spikes], [1e3 * s["seconds"] for s in spikes], "rx",
                label=f"spikes (> {profile['spike_factor']}x median)")
    ax.set_ylabel("ms")
    ax.legend(loc="upper right", fontsize="small")

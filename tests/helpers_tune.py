"""A tiny tuning workspace: random HDF5 splits, their measured preload plan, tiny-model params.

Trials on it take well under a second (LeakCNN widths 4 / 8 / 8, 1,960 segments per split), so
tests can run real studies with real storages, worker processes and MLflow.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import yaml

from leakpipe.config import PreloadConfig, from_mapping
from leakpipe.preload import plan_training, read_shapes
from leakpipe.tune.driver import TunePaths, load_setup
from leakpipe.tune.study import open_storage, open_study
from tests.conftest import PARAMS
from tests.helpers_h5 import write_splits

TINY_MODEL = {"widths": [4, 8, 8], "dropout": 0.1, "pool_h": 2, "hidden": 16,
              "level_input": False, "tonal_median": 0}
TRAIN = {"batch_size": 256, "learning_rate": 0.003, "warmup_epochs": 0.0,
         "eta_min": 1.0e-5, "keep_last_checkpoints": 1}
TUNE = {"n_trials": 3, "epochs": 1, "train_fraction": 1.0, "workers": 1,
        "threads_per_worker": 1, "sampler_startup_trials": 2, "pruner_startup_trials": 2,
        "pruner_warmup_steps": 0, "heartbeat_s": 1, "grace_s": 30}


def spec(kind: str, **fields: Any) -> dict[str, Any]:
    """A tune.space entry with every key the strict loader wants."""
    base = {"type": kind, "low": None, "high": None, "log": False, "step": None, "choices": []}
    return {**base, **fields}


SPACE = {"model": {"dropout": spec("float", low=0.0, high=0.5)},
         "train": {"learning_rate": spec("float", low=1.0e-3, high=1.0e-2, log=True),
                   "loss": spec("categorical", choices=["ce", "focal"]),
                   "focal_gamma": spec("float", low=1.0, high=3.0)}}


@dataclass(frozen=True)
class TuneWorkspace:
    root: Path
    params: Path
    paths: TunePaths

    def study(self) -> optuna.Study:
        """The workspace's study, opened the way the stage opens it (created if new)."""
        setup = load_setup(self.params, self.paths)
        return open_study(open_storage(setup.spec, setup.tune), setup.name, setup.tune)

    def stage_args(self) -> list[str]:
        p = self.paths
        return ["--params", str(self.params), "--train", str(p.train), "--val", str(p.val),
                "--plan", str(p.plan), "--journal", str(p.journal), "--best", str(p.best),
                "--metrics", str(p.metrics), "--unvalidated", "--no-progress"]


def make_workspace(root: Path, *, tune: dict[str, Any] | None = None,
                   space: dict[str, Any] | None = None,
                   train: dict[str, Any] | None = None) -> TuneWorkspace:
    """Splits, a plan measured on this machine and params.yaml (repo params + tiny overrides)."""
    data = write_splits(root / "data", recordings_per_class=2)
    params = yaml.safe_load(PARAMS.read_text())
    params["model"] = dict(TINY_MODEL)
    params["train"].update({**TRAIN, **(train or {})})
    params["runtime"]["device"] = "cpu"
    params["tune"].update({**TUNE, **(tune or {}), "space": space or SPACE})
    cfg = from_mapping(PreloadConfig, params["preload"], "preload")
    shapes = read_shapes({s: data[s] for s in ("train", "val")})
    plan, _ = plan_training(shapes, cfg)
    plan_path = root / "preload.json"
    plan_path.write_text(json.dumps(plan.to_dict(cfg, shapes)))
    params_path = root / "params.yaml"
    params_path.write_text(yaml.safe_dump(params, sort_keys=False))
    paths = TunePaths(train=data["train"], val=data["val"], plan=plan_path,
                      journal=root / "tuning" / "journal.log",
                      best=root / "tuning" / "best_params.yaml",
                      metrics=root / "metrics" / "tune.json", validated=None)
    return TuneWorkspace(root, params_path, paths)


def worker_command(ws: TuneWorkspace, index: int) -> list[str]:
    """`leakpipe tune --worker` on the workspace's study, as another machine would run it."""
    return [sys.executable, "-m", "leakpipe.cli", "tune", "--worker", "--worker-index",
            str(index), "--threads", "1", *ws.stage_args()]

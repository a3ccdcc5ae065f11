"""The train stage end to end on tiny, learnable splits: network file, metrics, plots, MLflow run.

Also holds the helpers the signal and DDP tests share: ``make_workspace`` writes easy splits
(class c raises mel bands 2c..2c+2), a real preload plan for them and a params file with a
tiny model; ``stage_args`` is the stage's command line for a workspace.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pytest
import torch
import yaml

from leakpipe import cli, tracking
from leakpipe.build import file_sha256
from leakpipe.config import PreloadConfig, from_mapping, load_section
from leakpipe.constants import KNOWN_CLASSES
from leakpipe.data.writer import SplitWriter
from leakpipe.detector import load_detector, load_network
from leakpipe.errors import DataError
from leakpipe.metric_names import TIMING_PREFIX
from leakpipe.monitor.artifact import profile_title
from leakpipe.preload import plan_training, read_shapes
from leakpipe.train import checkpoint as ck
from leakpipe.train import stage
from tests.conftest import PARAMS
from tests.helpers_h5 import SMALL_FEATURES

SPLITS = ("train", "val")
BAND_BOOST_DB = 12.0        # how much a class raises its own mel bands (easy to learn)
NOISE_DB = 5.0
TINY_MODEL = {"widths": [8, 8, 16], "dropout": 0.1, "pool_h": 4, "hidden": 16,
              "level_input": False, "tonal_median": 0}
# A threshold grid without 0.5: a saved 0.5 can never pass for the chosen threshold.
TRAIN = {"epochs": 3, "batch_size": 32, "learning_rate": 0.01, "eta_min": 1e-4,
         "warmup_epochs": 0.5, "early_stop_patience": 5, "keep_last_checkpoints": 2}
DECISION = {"threshold_min": 0.1, "threshold_max": 0.85, "threshold_step": 0.15}
MONITOR = {"interval_s": 0.05, "mlflow_interval_s": 0.5}
HISTORY_COLUMNS = ("epoch", "train/loss", "val/loss", "val/clip_f1", "train/lr")
# Floors a network that learned the easy splits clears on any CPU's float kernels: measured val
# F1 / ROC-AUC 1.0 at epochs 1-2 (`make test-kernels` too), 0.4-0.5 / 0.52-0.79 after epoch 0.
LEARNED_F1, LEARNED_ROC_AUC = 0.75, 0.9
_TEMPLATE: dict[str, Path] = {}


@dataclass(frozen=True)
class Workspace:
    root: Path
    params: Path
    data: dict[str, Path]
    plan: Path
    out: Path

    @property
    def model(self) -> Path:
        return self.out / "models" / "model.pt"

    @property
    def metrics(self) -> Path:
        return self.out / "metrics" / "train.json"

    @property
    def plots(self) -> Path:
        return self.out / "plots" / "history.csv"

    @property
    def checkpoints(self) -> Path:
        return self.out / "checkpoints"


def write_easy_split(path: Path, split: str, files_per_class: int, seed: int) -> Path:
    """Every class; class c's files raise mel bands 2c..2c+2, so the task is learnable."""
    rng = np.random.default_rng([seed, SPLITS.index(split)])
    with SplitWriter(path, split, SMALL_FEATURES, KNOWN_CLASSES, chunk_mb=0.01) as writer:
        for label, name in enumerate(KNOWN_CLASSES):
            for k in range(files_per_class):
                mel = rng.normal(-40.0, NOISE_DB, (1, *SMALL_FEATURES.segment_shape))
                mel[..., 2 * label:2 * label + 3, :] += BAND_BOOST_DB   # (1, L, S, M, T)
                writer.append(mel.astype(np.float16), label, recording_id=f"{split}/{name}/{k}",
                              group=f"{split}-site{k % 2}")
    return path


def make_workspace(root: Path, *, files_per_class: int = 8, seed: int = 0,
                   train: dict[str, Any] | None = None, mode: str = "auto",
                   monitor: dict[str, Any] | None = None) -> Workspace:
    """Easy splits, their preload plan (measured here) and a params file with a tiny model."""
    root.mkdir(parents=True, exist_ok=True)
    data = {s: write_easy_split(root / f"{s}.h5", s, files_per_class, seed) for s in SPLITS}
    params = yaml.safe_load(PARAMS.read_text())
    params["model"] = dict(TINY_MODEL)
    params["train"].update({**TRAIN, **(train or {})})
    params["decision"].update(DECISION)
    params["runtime"]["device"] = "cpu"
    params["monitor"].update({**MONITOR, **(monitor or {})})
    params["preload"]["mode"] = mode
    cfg = from_mapping(PreloadConfig, params["preload"], "preload")
    shapes = read_shapes(data)
    plan, _ = plan_training(shapes, cfg)
    plan_path = root / "preload.json"
    plan_path.write_text(json.dumps(plan.to_dict(cfg, shapes)))
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return Workspace(root, root / "params.yaml", data, plan_path, root / "out")


def fresh_mlflow_uri(folder: Path) -> str:
    """An empty, migrated MLflow SQLite store in ``folder``: a copy of one made per session
    (creating a store runs MLflow's schema migrations, seconds each time)."""
    if "db" not in _TEMPLATE:
        template = Path(tempfile.mkdtemp(prefix="leakpipe-mlflow-")) / "mlflow.db"
        mlflow.MlflowClient(tracking_uri=f"sqlite:///{template}").search_experiments()
        atexit.register(shutil.rmtree, template.parent, True)
        _TEMPLATE["db"] = template
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_TEMPLATE["db"], folder / "mlflow.db")
    return f"sqlite:///{folder / 'mlflow.db'}"


def stage_args(ws: Workspace) -> list[str]:
    return ["--params", str(ws.params), "--train", str(ws.data["train"]),
            "--val", str(ws.data["val"]), "--plan", str(ws.plan), "--model", str(ws.model),
            "--metrics", str(ws.metrics), "--plots", str(ws.plots),
            "--checkpoints", str(ws.checkpoints), "--unvalidated", "--no-progress"]


def read_metrics(ws: Workspace) -> dict[str, Any]:
    return json.loads(ws.metrics.read_text())


def comparable(metrics: dict[str, Any]) -> dict[str, Any]:
    """metrics/train.json without timings and per-invocation counts."""
    timing = TIMING_PREFIX.rstrip("/")
    return {k: v for k, v in metrics.items() if k not in (timing, "epochs_this_run")}


def mlflow_runs(uri: str) -> list[Any]:
    client = mlflow.MlflowClient(tracking_uri=uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(experiments, order_by=["attributes.start_time ASC"])


# ---------------------------------------------------------------------------------------------
# The stage end to end (one run shared by the module's tests)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Trained:
    ws: Workspace
    uri: str
    rc: int
    loading_at: float      # time.time() when the stage began loading its splits


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Trained]:
    root = tmp_path_factory.mktemp("train-stage")
    ws = make_workspace(root)
    uri = fresh_mlflow_uri(root)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)            # tiny tensors; immune to a busy machine
    loading: list[float] = []                 # when the stage began loading the splits
    real = stage.prepare_training

    def timed(*args: Any, **kwargs: Any) -> Any:
        loading.append(time.time())
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        mp.setattr(stage, "prepare_training", timed)
        rc = cli.main(["train", *stage_args(ws)])
        yield Trained(ws, uri, rc, loading[0])
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(False)


def test_stage_writes_the_network_and_the_threshold_chosen_on_val(trained: Trained) -> None:
    """model.pt is the network alone: evaluate, not train, chooses the operating point."""
    assert trained.rc == 0
    metrics = read_metrics(trained.ws)
    network = load_network(trained.ws.model)
    assert metrics["val"]["clip_f1"] >= LEARNED_F1, metrics["val"]        # easy data: learned
    assert metrics["val"]["clip_roc_auc"] >= LEARNED_ROC_AUC, metrics["val"]
    assert metrics["val"]["clip_threshold"] == metrics["threshold"] != 0.5
    raw = torch.load(trained.ws.model, weights_only=True)
    assert raw["format"] == "leakpipe.network"
    assert not {"threshold", "voting", "metrics"} & set(raw)      # no operating point, no timings
    with pytest.raises(DataError, match="without an operating point"):
        load_detector(trained.ws.model)
    assert network.class_names == KNOWN_CLASSES and network.features == SMALL_FEATURES
    ckpt = ck.load_checkpoint(trained.ws.checkpoints / ck.BEST_NAME)
    assert ckpt["epoch"] == metrics["best_epoch"] and ckpt["threshold"] == metrics["threshold"]
    for key, value in ckpt["model"].items():
        assert torch.equal(network.model.state_dict()[key], value), key


def test_metrics_file_and_plot_data(trained: Trained) -> None:
    metrics = read_metrics(trained.ws)
    cfg = load_section(trained.ws.params, "train")
    assert metrics["epochs_run"] == cfg.epochs == metrics["epochs_this_run"]
    assert metrics["stop_reason"] == "completed all epochs" and metrics["placement"] == "ram"
    assert metrics["monitor"] == "val/clip_f1"
    lines = trained.ws.plots.read_text().splitlines()
    header = lines[0].split(",")
    assert set(HISTORY_COLUMNS) <= set(header) and header[0] == "epoch"
    rows = [dict(zip(header, line.split(","), strict=True)) for line in lines[1:]]
    assert [int(r["epoch"]) for r in rows] == list(range(cfg.epochs))
    best = rows[metrics["best_epoch"]]
    assert float(best["val/clip_f1"]) == metrics["val"]["clip_f1"]
    assert float(best["train/loss"]) == metrics["train"]["loss"]
    assert (trained.ws.checkpoints / ck.FINISHED_NAME).is_file()


def test_mlflow_run_holds_params_epochs_artifacts_and_model(trained: Trained) -> None:
    (run,) = mlflow_runs(trained.uri)
    client = mlflow.MlflowClient(tracking_uri=trained.uri)
    assert run.info.status == "FINISHED"
    params = run.data.params
    assert params["train.seed"] == "42" and params["model.widths"] == "8,8,16"
    assert params["preload.placement"] == "ram" and params["monitor.spike_factor"] == "3.0"
    history = client.get_metric_history(run.info.run_id, "val/clip_f1")
    assert sorted(m.step for m in history) == [0, 1, 2]
    for name in ("vitals/step_p50_ms", "vitals/step_p99_ms", "vitals/data_wait_frac",
                 "vitals/step_spikes", "vitals/samples_per_s", "vitals/cpu_percent_mean"):
        assert len(client.get_metric_history(run.info.run_id, name)) == 3, name
    assert any(k.startswith("system/") for k in run.data.metrics)   # MLflow's own sampler
    # no chart of the epoch over itself, no always-zero skipped-steps chart (no step skipped)
    assert "epoch" not in run.data.metrics and "train/skipped_steps" not in run.data.metrics
    assert "train/loss" in run.data.metrics
    assert run.data.tags[tracking.TAG_MODEL_SHA256] == file_sha256(trained.ws.model)
    files = _artifacts(client, run.info.run_id)
    assert {"train/confusion.json", "train/confusion.png", "profile/profile.json",
            "profile/profile.png", "train/train.json", "train/history.csv"} <= files
    profile = json.loads(Path(client.download_artifacts(
        run.info.run_id, "profile/profile.json", str(trained.ws.root))).read_text())
    assert profile["device"] == "cpu"                    # the figure's title: "CPU run ..."
    assert profile_title(profile).startswith("train profile: CPU run")


def test_the_run_page_shows_curves_and_says_which_epoch_won(trained: Trained) -> None:
    """No one-point best/* charts: the best epoch is the description's paragraph and a table
    equal to metrics/train.json; the run began before the splits were loaded."""
    (run,) = mlflow_runs(trained.uri)
    client = mlflow.MlflowClient(tracking_uri=trained.uri)
    assert not [k for k in run.data.metrics if k.startswith("best/")]
    metrics = read_metrics(trained.ws)
    table = json.loads(Path(client.download_artifacts(
        run.info.run_id, stage.BEST_EPOCH_TABLE, str(trained.ws.root))).read_text())
    rows = dict(table["data"]) if table["columns"] == ["metric", "value"] else {}
    assert rows["epoch"] == metrics["best_epoch"]                 # MLflow's JSON: 10 digits
    assert [rows["val/clip_f1"], rows["train/loss"]] == pytest.approx(
        [metrics["val"]["clip_f1"], metrics["train"]["loss"]], rel=1e-9)
    note = run.data.tags["mlflow.note.content"].split("\n\n")[-1]
    assert note.startswith(f"Best epoch {metrics['best_epoch'] + 1} of 3 (step "
                           f"{metrics['best_epoch']} in the charts): val/clip_f1 ")
    assert run.info.start_time <= round(trained.loading_at * 1000) + 1


def test_confusion_artifact_is_the_best_epochs(trained: Trained) -> None:
    (run,) = mlflow_runs(trained.uri)
    client = mlflow.MlflowClient(tracking_uri=trained.uri)
    path = client.download_artifacts(run.info.run_id, "train/confusion.json",
                                     str(trained.ws.root))
    confusion = json.loads(Path(path).read_text())
    best = ck.load_checkpoint(trained.ws.checkpoints / ck.BEST_NAME)
    assert confusion == best["confusion"]
    files = np.asarray(confusion["file"])                           # [[tn, fp], [fn, tp]]
    val_files = 8 * len(KNOWN_CLASSES)
    assert files.sum() == val_files and files[1].sum() == 8          # 8 LEAK files in val
    (_, fp), (fn, tp) = files
    metrics = read_metrics(trained.ws)                              # the best epoch's figures
    assert confusion["threshold"] == metrics["threshold"]
    assert 2 * tp / (2 * tp + fp + fn) == pytest.approx(metrics["val"]["clip_f1"])
    assert np.asarray(confusion["segment"]).sum() == val_files * 49


def test_logged_model_has_a_signature_and_predicts(trained: Trained) -> None:
    (run,) = mlflow_runs(trained.uri)
    mlflow.set_tracking_uri(trained.uri)
    models = mlflow.search_logged_models(experiment_ids=[run.info.experiment_id],
                                         output_format="list")
    (model,) = [m for m in models if m.name == tracking.MODEL_NAME]
    assert model.source_run_id == run.info.run_id
    info = mlflow.models.get_model_info(model.model_uri)
    assert info.signature is not None and info.saved_input_example_info is not None
    shape = info.signature.inputs.to_dict()[0]["tensor-spec"]["shape"]
    assert list(shape) == [-1, 1, 16, 1]
    pyfunc = mlflow.pyfunc.load_model(model.model_uri)
    x = np.zeros((3, 1, 16, 1), dtype=np.float32)
    out = pyfunc.predict(x)                                         # (3, C + 1)
    assert out.shape == (3, len(KNOWN_CLASSES) + 1)
    assert np.allclose(out[:, :-1].sum(axis=1), 1.0, atol=1e-5)


def _artifacts(client: mlflow.MlflowClient, run_id: str, path: str = "") -> set[str]:
    out: set[str] = set()
    for item in client.list_artifacts(run_id, path):
        out |= _artifacts(client, run_id, item.path) if item.is_dir else {item.path}
    return out


def test_a_finished_run_is_not_resumed_by_the_next_experiment(
        trained: Trained, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """New params after a finished run: a fresh start, not 'checkpoint written with ...'."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", fresh_mlflow_uri(tmp_path))
    ws = dataclasses.replace(trained.ws, out=tmp_path / "out")
    for name in (ck.BEST_NAME, ck.FINISHED_NAME, "epoch-0002.pt"):
        target = ws.checkpoints / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((trained.ws.checkpoints / name).read_bytes())
    params = yaml.safe_load(ws.params.read_text())
    params["train"]["epochs"] = 1
    params["train"]["warmup_epochs"] = 0.0
    changed = tmp_path / "params.yaml"
    changed.write_text(yaml.safe_dump(params))
    args = stage_args(ws)
    args[args.index("--params") + 1] = str(changed)
    assert cli.main(["train", *args]) == 0
    metrics = read_metrics(ws)
    assert metrics["epochs_run"] == 1 and metrics["epochs_this_run"] == 1
    assert not (ws.checkpoints / "epoch-0002.pt").exists()


@pytest.mark.parametrize("split", SPLITS)
def test_an_empty_split_is_refused_when_loaded(
        split: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A split with 0 rows: exit 3 and one line naming the file, before any epoch runs (an
    empty val split used to train a whole epoch, then end in a traceback)."""
    # refused before a run starts: the store is never created (nothing lands in the repo's)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    ws = make_workspace(tmp_path, files_per_class=1)
    with SplitWriter(ws.data[split], split, SMALL_FEATURES, KNOWN_CLASSES):
        pass                                                      # no rows
    assert cli.main(["train", *stage_args(ws)]) == 3
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith(f"error: {ws.data[split]}: ") and "no rows" in lines[-1]
    assert not any("Traceback" in line for line in lines)
    assert not ws.checkpoints.exists() and not ws.model.exists()
    assert not (tmp_path / "mlflow.db").exists()

"""fit() and the loop on tiny in-memory data: learning, both label modes, resume, fail-fast."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from leakpipe.config import ConfigError, ModelConfig, TrainConfig, from_mapping, load_section
from leakpipe.constants import KNOWN_CLASSES
from leakpipe.data.file_order import FileOrderBatches
from leakpipe.data.input_norm import normalize_clips
from leakpipe.data.schema import leak_index, task_classes, task_labels
from leakpipe.data.split_info import ResidentData, SplitInfo
from leakpipe.decision.voting import VotingConfig, threshold_grid
from leakpipe.model import create_model
from leakpipe.runtime import cpu_runtime, make_runtime
from leakpipe.tracking import NullTracker
from leakpipe.train import checkpoint as ck
from leakpipe.train import loop
from leakpipe.train.fit import CompileError, configure_torch, fit
from leakpipe.train.loop import train_one_epoch
from leakpipe.train.losses import LossConfig, NonFiniteLossError, build_loss
from leakpipe.train.optim import create_optimization
from leakpipe.train.validation import ValSplit, validate
from tests.conftest import PARAMS

CPU = torch.device("cpu")
RUNTIME = cpu_runtime()
DECISION = load_section(PARAMS, "decision")
AUGMENT = dataclasses.asdict(load_section(PARAMS, "train").augment)
N_LONG, N_SHORT, N_MELS = 3, 2, 8
TINY_MODEL = ModelConfig(widths=(4, 8, 8), dropout=0.1, pool_h=2, hidden=16)


@pytest.fixture(autouse=True)
def _torch_globals() -> Iterator[None]:
    """One thread (tiny tensors; immune to a busy machine); undo configure_torch's switches."""
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(deterministic)


@pytest.fixture(scope="module")
def train_cfg() -> TrainConfig:
    return dataclasses.replace(
        load_section(PARAMS, "train"), epochs=3, batch_size=32,
        learning_rate=1e-2, eta_min=1e-4, warmup_epochs=0.5, early_stop_patience=5,
        keep_last_checkpoints=2, log_every_steps=0, compile=False, init_checkpoint="")


def _files(n_per_class: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Five classes; class c raises mel band c: (F, L, S, M, 1) float16 and (F,) labels."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(len(KNOWN_CLASSES)), n_per_class)
    mel = rng.normal(size=(len(labels), N_LONG, N_SHORT, N_MELS, 1))
    mel[np.arange(len(labels)), :, :, labels] += 3.0
    return mel.astype(np.float16), labels


class InMemorySource:
    """Shuffled segment batches; the permutation depends only on (seed, epoch)."""

    def __init__(self, mel: np.ndarray, labels: np.ndarray, batch_size: int, seed: int) -> None:
        per_file = N_LONG * N_SHORT
        self.x = torch.from_numpy(mel).reshape(-1, 1, N_MELS, 1)           # (N, 1, M, 1)
        self.y = torch.from_numpy(labels).repeat_interleave(per_file)      # (N,)
        self.file = torch.arange(len(labels)).repeat_interleave(per_file)  # (N,)
        self.batch_size, self.seed = batch_size, seed
        self.nan_epoch: int | None = None

    def __len__(self) -> int:
        return -(-len(self.y) // self.batch_size)

    def epoch(self, epoch: int) -> Iterator[loop.Batch]:
        order = torch.randperm(len(self.y), generator=torch.Generator().manual_seed(
            self.seed * 1000 + epoch))
        for start in range(0, len(order), self.batch_size):
            idx = order[start:start + self.batch_size]
            x = self.x[idx].clone()
            if epoch == self.nan_epoch:
                x[0] = float("nan")
            yield x, self.y[idx], self.file[idx]


def val_split(mel: np.ndarray, labels: np.ndarray, classes: tuple[str, ...],
              batch_segments: int = 12, input_norm: str = "none") -> ValSplit:
    """An in-memory (F, L, S, M, T) split as the file-order batches validation reads."""
    labels = np.asarray(labels, dtype=np.int64)
    shape = tuple(mel.shape[1:])
    info = SplitInfo(Path("memory"), labels, tuple(classes), leak_index(tuple(classes)), shape,
                     1, torch.float32)
    segments = torch.as_tensor(np.asarray(mel, np.float32)).reshape(-1, 1, *shape[2:])
    resident = ResidentData(info, segments, torch.from_numpy(labels), CPU)
    return ValSplit(FileOrderBatches(resident, batch_segments, input_norm=input_norm))


def _data(binary: bool, cfg: TrainConfig, seed: int = 0) -> tuple[InMemorySource, ValSplit,
                                                                   list[int]]:
    train_mel, train_raw = _files(8, seed)
    val_mel, val_raw = _files(4, seed + 1)
    labels = task_labels(train_raw, KNOWN_CLASSES, binary)
    source = InMemorySource(train_mel, labels, cfg.batch_size, cfg.seed)
    val = val_split(val_mel, task_labels(val_raw, KNOWN_CLASSES, binary),
                    task_classes(KNOWN_CLASSES, binary), cfg.batch_size)
    counts = np.bincount(labels, minlength=len(val.class_names)).tolist()
    return source, val, counts


def _fit(cfg: TrainConfig, directory: Path, binary: bool = False, **kw):
    source, val, counts = _data(binary, cfg)
    source.nan_epoch = kw.pop("nan_epoch", None)
    tracker = kw.pop("tracker", NullTracker())
    return fit(TINY_MODEL, dataclasses.replace(cfg, binary=binary), runtime=RUNTIME,
               decision=DECISION, train_source=source, val=val, class_counts=counts,
               tracker=tracker,
               checkpoint_dir=directory, features={"n_mels": N_MELS}, **kw)


# ---------------------------------------------------------------------------------------------
# fit
# ---------------------------------------------------------------------------------------------


class RecordingTracker(NullTracker):
    def __init__(self) -> None:
        self.logged: list[tuple[int | None, dict]] = []

    def log_metrics(self, metrics, step=None) -> None:
        self.logged.append((step, dict(metrics)))


EPOCH_METRICS = ("train/loss", "train/accuracy", "train/lr", "train/grad_norm_mean",
                 "train/grad_norm_max", "val/loss", "val/seg_precision", "val/seg_recall",
                 "val/seg_f1", "val/file_f1", "val/file_threshold", "perf/samples_per_s",
                 "val/pred_share/LEAK")


@pytest.mark.parametrize("binary", [False, True])
def test_fit_finds_every_leak_in_both_label_modes(train_cfg: TrainConfig, tmp_path: Path,
                                                  binary: bool) -> None:
    tracker, seen = RecordingTracker(), []
    result = _fit(train_cfg, tmp_path, binary, tracker=tracker,
                  on_epoch=lambda epoch, metrics: seen.append((epoch, metrics)))
    assert [step for step, _ in tracker.logged] == [0, 1, 2] == [e for e, _ in seen]
    for _, metrics in tracker.logged:
        assert set(EPOCH_METRICS) <= set(metrics)
    assert result.best_metrics["val/file_f1"] == 1.0
    assert result.best_metrics["val/file_recall"] == 1.0
    assert len(result.history) == 3 and result.epochs_run == 3
    grid = threshold_grid(DECISION.threshold_min, DECISION.threshold_max,
                          DECISION.threshold_step)
    assert result.threshold in grid.tolist()
    assert result.best_checkpoint == tmp_path / ck.BEST_NAME
    best = ck.load_checkpoint(result.best_checkpoint)
    assert best["epoch"] == result.best_epoch and best["threshold"] == result.threshold
    assert best["class_names"] == list(task_classes(KNOWN_CLASSES, binary))
    assert not result.model.training


def test_resume_ends_exactly_like_an_uninterrupted_run(train_cfg: TrainConfig,
                                                       tmp_path: Path) -> None:
    class Interrupt(Exception):
        pass

    def interrupt_after_second_epoch(epoch: int, metrics: dict) -> None:
        if epoch == 1:
            raise Interrupt

    whole = _fit(train_cfg, tmp_path / "whole")
    with pytest.raises(Interrupt):
        _fit(train_cfg, tmp_path / "split", on_epoch=interrupt_after_second_epoch)
    resumed = _fit(train_cfg, tmp_path / "split")
    assert resumed.resumed_from == tmp_path / "split" / "epoch-0001.pt"
    assert resumed.epochs_run == 1
    a, b = (ck.load_checkpoint(tmp_path / d / "epoch-0002.pt") for d in ("whole", "split"))
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    for index, state in a["optimizer"]["state"].items():
        for name, value in state.items():
            assert torch.equal(value, b["optimizer"]["state"][index][name]), (index, name)
    assert a["scheduler"] == b["scheduler"] and a["early_stopping"] == b["early_stopping"]
    assert _no_perf(whole.history) == _no_perf(resumed.history)
    assert whole.best_epoch == resumed.best_epoch


def _no_perf(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in h.items() if not k.startswith("perf/")} for h in history]


def test_nan_loss_fails_fast_with_the_components(train_cfg: TrainConfig,
                                                 tmp_path: Path) -> None:
    with pytest.raises(NonFiniteLossError,
                       match=r"in training epoch 1, first at step 1: total=nan class=nan aux=nan"):
        _fit(train_cfg, tmp_path, nan_epoch=1)
    assert [p.name for _, p in ck.epoch_checkpoints(tmp_path)] == ["epoch-0000.pt"]


def test_compile_failure_raises(train_cfg: TrainConfig, tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("inductor unavailable")

    monkeypatch.setattr(torch, "compile", broken)
    with pytest.raises(CompileError, match=r"train.compile: .*mode='default'.*inductor"):
        _fit(dataclasses.replace(train_cfg, compile=True), tmp_path)
    assert not any(tmp_path.iterdir())                      # no checkpoint, no trial result


def test_lazy_compile_failure_is_not_swallowed(train_cfg: TrainConfig, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    class FailsOnFirstCall(nn.Module):
        def __init__(self, inner: nn.Module) -> None:
            super().__init__()
            self._orig_mod = inner

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("backend compiler failed")

    monkeypatch.setattr(torch, "compile", lambda model, mode: FailsOnFirstCall(model))
    with pytest.raises(RuntimeError, match="backend compiler failed"):
        _fit(dataclasses.replace(train_cfg, compile=True), tmp_path)


def test_early_stopping_ends_a_flat_run(train_cfg: TrainConfig, tmp_path: Path) -> None:
    flat = dataclasses.replace(train_cfg, epochs=10, learning_rate=1e-12, eta_min=0.0,
                               early_stop_patience=2)
    result = _fit(flat, tmp_path)
    assert len(result.history) == 3
    assert "did not improve for 2 epochs" in result.stop_reason
    again = _fit(flat, tmp_path)                            # resuming a stopped run: no-op
    assert again.epochs_run == 0 and again.history == result.history


def test_monitor_falls_back_to_val_loss_without_leaks(train_cfg: TrainConfig,
                                                      tmp_path: Path) -> None:
    source, val, counts = _data(False, train_cfg)
    mel, raw = _files(4, 1)
    no_leak = raw != KNOWN_CLASSES.index("LEAK")
    val = val_split(mel[no_leak], raw[no_leak], KNOWN_CLASSES)
    result = fit(TINY_MODEL, dataclasses.replace(train_cfg, epochs=1), runtime=RUNTIME,
                 decision=DECISION, train_source=source, val=val, class_counts=counts,
                 tracker=NullTracker(),
                 checkpoint_dir=tmp_path)
    assert result.monitor == "val/loss"
    assert result.history[0]["val/file_f1"] == 0.0


def test_early_stopping_on_val_roc_auc_keeps_the_epoch_with_the_best_ranking(
        train_cfg: TrainConfig, tmp_path: Path) -> None:
    cfg = dataclasses.replace(train_cfg, monitor="val/file_roc_auc")
    result = _fit(cfg, tmp_path)
    assert result.monitor == "val/file_roc_auc"
    aucs = [h["val/file_roc_auc"] for h in result.history]
    assert all(0.0 <= a <= 1.0 for a in aucs)
    assert result.best_metrics["val/file_roc_auc"] == max(aucs)
    assert result.best_epoch == aucs.index(max(aucs))      # the first of equals


def test_resume_refuses_changed_params(train_cfg: TrainConfig, tmp_path: Path) -> None:
    _fit(dataclasses.replace(train_cfg, epochs=1), tmp_path)
    with pytest.raises(ck.CheckpointError, match=r"train.learning_rate = 0.01, params now say "
                                                 r"0.02; delete"):
        _fit(dataclasses.replace(train_cfg, epochs=1, learning_rate=0.02), tmp_path)


def test_continual_learning_from_init_checkpoint(train_cfg: TrainConfig, tmp_path: Path) -> None:
    first = _fit(dataclasses.replace(train_cfg, epochs=1), tmp_path / "a")
    still = dataclasses.replace(train_cfg, epochs=1, learning_rate=1e-12, eta_min=0.0,
                                init_checkpoint=str(first.best_checkpoint))
    kept = _fit(dataclasses.replace(still, reset_optimizer=False), tmp_path / "b")
    for key, value in ck.model_state(first.model).items():
        torch.testing.assert_close(ck.model_state(kept.model)[key], value)
    steps = len(_data(False, train_cfg)[0])
    moments = ck.load_checkpoint(tmp_path / "b" / "epoch-0000.pt")["optimizer"]["state"][0]
    assert moments["step"].item() == 2 * steps              # Adam moments carried over
    _fit(still, tmp_path / "c")
    fresh = ck.load_checkpoint(tmp_path / "c" / "epoch-0000.pt")["optimizer"]["state"][0]
    assert fresh["step"].item() == steps
    with pytest.raises(ck.CheckpointError, match="was trained on classes"):
        _fit(still, tmp_path / "d", binary=True)


def test_init_checkpoint_accepts_a_detector_file(train_cfg: TrainConfig, tmp_path: Path) -> None:
    from leakpipe.config import FeatureConfig
    from leakpipe.detector import Detector, save_detector

    first = _fit(dataclasses.replace(train_cfg, epochs=1), tmp_path / "a")
    detector = tmp_path / "model.pt"
    features = load_section(PARAMS, "build").features
    assert isinstance(features, FeatureConfig)
    save_detector(detector, Detector(
        model=first.model, model_cfg=TINY_MODEL, class_names=KNOWN_CLASSES,
        data_class_names=KNOWN_CLASSES, binary=False, features=features,
        voting=VotingConfig(rule="long_vote", vote_fraction=0.5), threshold=0.5, metrics={},
        input_norm=train_cfg.input_norm))
    still = dataclasses.replace(train_cfg, epochs=1, learning_rate=1e-12, eta_min=0.0,
                                init_checkpoint=str(detector))
    tuned = _fit(still, tmp_path / "b")
    for key, value in ck.model_state(first.model).items():
        torch.testing.assert_close(ck.model_state(tuned.model)[key], value)
    with pytest.raises(ck.CheckpointError, match="holds no optimizer state"):
        _fit(dataclasses.replace(still, reset_optimizer=False), tmp_path / "c")
    other = "clip_band" if train_cfg.input_norm != "clip_band" else "none"
    with pytest.raises(ck.CheckpointError, match="expects input_norm"):
        _fit(dataclasses.replace(still, input_norm=other), tmp_path / "d")


# ---------------------------------------------------------------------------------------------
# the loop
# ---------------------------------------------------------------------------------------------


class Oracle(nn.Module):
    """Perfect predictions: mel band 0 of the input carries the task label."""

    def __init__(self, n_classes: int, leak_index: int) -> None:
        super().__init__()
        self.n_classes, self.leak_index = n_classes, leak_index
        self.unused = nn.Parameter(torch.zeros(()))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        label = x[:, 0, 0, 0].round().long()                           # (B,)
        logits = 20.0 * nn.functional.one_hot(label, self.n_classes).float() - 10.0
        leak = torch.where(label == self.leak_index, 20.0, -20.0)
        return logits + 0 * self.unused, leak


COARSE = dataclasses.replace(DECISION, threshold_min=0.1, threshold_max=0.9,
                             threshold_step=0.1, prob_mode="blend", rule="long_vote")


@pytest.mark.parametrize(("binary", "leak_index"), [(False, 2), (True, 1)])
def test_perfect_predictions_give_f1_one_in_both_modes(binary: bool, leak_index: int) -> None:
    raw = np.array([0, 1, 3, 4, 0, 3, 2, 2, 2])                 # every leak at the end
    labels = task_labels(raw, KNOWN_CLASSES, binary)
    mel = np.zeros((len(raw), N_LONG, N_SHORT, N_MELS, 1), dtype=np.float32)
    mel[..., 0, 0] = labels[:, None, None]
    val = val_split(mel, labels, task_classes(KNOWN_CLASSES, binary))
    assert val.leak_index == leak_index
    model = Oracle(len(val.class_names), leak_index)
    loss_fn = build_loss(LossConfig.from_train(load_section(PARAMS, "train")),
                         np.bincount(labels).tolist(), leak_index)
    result = validate(model, val, loss_fn, COARSE, RUNTIME)
    assert result.seg_probs.shape == (9, N_LONG, N_SHORT)     # every segment of the split
    assert result.file["f1"] == 1.0 and result.segment["f1"] == 1.0
    assert result.accuracy == 1.0 and result.diagnosis is None
    assert result.pred_counts[leak_index] == 3 * N_LONG * N_SHORT


def test_collapse_is_diagnosed_in_the_metrics() -> None:
    class AlwaysLeak(Oracle):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return super().forward(torch.full_like(x, 2.0))

    labels = np.array([0, 1, 2, 3])
    val = val_split(np.zeros((4, N_LONG, N_SHORT, N_MELS, 1), np.float32), labels,
                    KNOWN_CLASSES)
    loss_fn = build_loss(LossConfig.from_train(load_section(PARAMS, "train")), [1] * 5, 2)
    result = validate(AlwaysLeak(5, 2), val, loss_fn, COARSE, RUNTIME)
    assert result.diagnosis == (
        "collapse: all 4 samples predicted LEAK (3 false positives; check leak_weight_boost, "
        "leak_oversample_factor and leak_aux_weight); collapse: 100.0 % of segments predicted "
        "LEAK (true share 25.0 %)")
    assert result.metrics()["val/pred_share/LEAK"] == 1.0


def _counting_sync(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = loop._sync

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "_sync", counted)
    return calls


@pytest.mark.parametrize(("log_every", "syncs"), [(0, 1), (1, 4), (2, 2)])
def test_train_epoch_accumulates_on_device_and_syncs_once(
        train_cfg: TrainConfig, monkeypatch: pytest.MonkeyPatch, log_every: int,
        syncs: int) -> None:
    source, val, counts = _data(False, train_cfg)               # 240 segments, 8 batches
    cfg = dataclasses.replace(train_cfg, grad_accum_steps=3)
    torch.manual_seed(0)
    model = create_model(TINY_MODEL, 5)
    optim = create_optimization(model, cfg, CPU, 3, scaler_enabled=False)
    loss_fn = build_loss(LossConfig.from_train(cfg), counts, val.leak_index)
    calls = _counting_sync(monkeypatch)
    result = train_one_epoch(model, source.epoch(0), loss_fn, optim, RUNTIME,
                             log_every=log_every)
    assert len(calls) == syncs
    assert (result.n_segments, result.optimizer_steps) == (240, 3)   # 8 batches / 3 -> 3 steps
    assert 0.0 <= result.accuracy <= 1.0 and np.isfinite(result.loss)
    assert 0 < result.grad_norm_mean <= result.grad_norm_max
    assert result.loss == pytest.approx(result.loss_class + cfg.leak_aux_weight * result.loss_aux)


def test_validation_normalises_each_file_as_the_model_expects(train_cfg: TrainConfig) -> None:
    mel, raw = _files(4, 1)
    classes = task_classes(KNOWN_CLASSES, False)
    loss_fn = build_loss(LossConfig.from_train(train_cfg), [1] * 5, leak_index(classes))
    torch.manual_seed(0)
    model = create_model(TINY_MODEL, 5)
    got = validate(model, val_split(mel, raw, classes, 6, "clip_band"), loss_fn, COARSE,
                   RUNTIME)
    normalised = normalize_clips(torch.from_numpy(mel), "clip_band").numpy()
    want = validate(model, val_split(normalised, raw, classes, 6), loss_fn, COARSE, RUNTIME)
    np.testing.assert_allclose(got.seg_probs, want.seg_probs, atol=1e-6)
    plain = validate(model, val_split(mel, raw, classes, 6), loss_fn, COARSE, RUNTIME)
    assert not np.allclose(plain.seg_probs, got.seg_probs)


def test_validation_runs_the_exact_inference_form(train_cfg: TrainConfig) -> None:
    """Per-epoch validation scores LeakCNN's inference form; the figures match the module's."""
    mel, raw = _files(4, 1)
    classes = task_classes(KNOWN_CLASSES, False)
    loss_fn = build_loss(LossConfig.from_train(train_cfg), [1] * 5, leak_index(classes))
    torch.manual_seed(0)
    model = create_model(TINY_MODEL, 5).eval()
    val = val_split(mel, raw, classes, 6)
    result = validate(model, val, loss_fn, COARSE, RUNTIME)
    x = torch.from_numpy(mel.astype(np.float32)).reshape(-1, 1, N_MELS, 1)
    with torch.inference_mode():
        logits, aux = model(x)
    want = 0.5 * torch.softmax(logits, -1)[:, 2] + 0.5 * torch.sigmoid(aux)
    np.testing.assert_allclose(result.seg_probs.reshape(-1), want.numpy(), atol=1e-5)


def test_bf16_autocast_trains_on_cpu(train_cfg: TrainConfig) -> None:
    source, val, counts = _data(False, train_cfg)
    model = create_model(TINY_MODEL, 5)
    optim = create_optimization(model, train_cfg, CPU, len(source), scaler_enabled=False)
    result = train_one_epoch(model, source.epoch(0), build_loss(
        LossConfig.from_train(train_cfg), counts, val.leak_index), optim,
        make_runtime("cpu", "bf16"))
    assert np.isfinite(result.loss) and result.skipped_steps == 0


@pytest.mark.parametrize(("amp", "device", "dtype", "enabled", "scaler"), [
    ("auto", "cpu", None, False, False),
    ("auto", "cuda", torch.float16, True, True),
    ("fp16", "cuda", torch.float16, True, True),
    ("bf16", "cuda", torch.bfloat16, True, False),
    ("bf16", "cpu", torch.bfloat16, True, False),
    ("off", "cuda", None, False, False),
])
def test_precision_resolution(amp: str, device: str, dtype, enabled: bool,
                              scaler: bool) -> None:
    runtime = make_runtime(torch.device(device), amp, channels_last=True)
    assert (runtime.amp, runtime.scaler) == (enabled, scaler)
    assert dtype is None or runtime.amp_dtype == dtype
    assert runtime.channels_last == (device == "cuda")          # applied on CUDA only


def test_configure_torch_is_deterministic_on_cpu(train_cfg: TrainConfig) -> None:
    configure_torch(train_cfg, RUNTIME)
    assert torch.are_deterministic_algorithms_enabled()
    first = torch.rand(3)
    configure_torch(train_cfg, RUNTIME)
    assert torch.equal(first, torch.rand(3))                   # seeded


@pytest.mark.parametrize(("change", "message"), [
    ({"eta_min": 0.1, "learning_rate": 0.01}, "train.eta_min: must not exceed learning_rate"),
    ({"warmup_epochs": 5.0, "epochs": 2}, "train.warmup_epochs: must not exceed epochs"),
    ({"batch_size": 0}, "train.batch_size: must be >= 1"),
    ({"input_norm": "pcen"}, "train.input_norm: expected one of"),
    ({"augment": {**AUGMENT, "mix_snr_min_db": 30.0}},
     "train.augment.mix_snr_min_db: must not exceed mix_snr_max_db"),
    ({"augment": {**AUGMENT, "gain_db": -1.0}}, "train.augment.gain_db: must be >= 0"),
])
def test_train_params_are_checked(train_cfg: TrainConfig, change: dict, message: str) -> None:
    raw = {**dataclasses.asdict(train_cfg), **change}
    with pytest.raises(ConfigError, match=message):
        from_mapping(TrainConfig, raw, "train", "params.yaml")


def test_resume_refuses_a_different_loss_scaling(train_cfg: TrainConfig, tmp_path: Path) -> None:
    """A checkpoint without GradScaler state (CPU / bf16) is not resumed under fp16 scaling:
    one line naming the file instead of a bare error from GradScaler.load_state_dict."""
    _fit(dataclasses.replace(train_cfg, epochs=1), tmp_path)
    source, val, counts = _data(False, train_cfg)
    scaled = dataclasses.replace(RUNTIME, scaler=True)
    with pytest.raises(ck.CheckpointError, match="runtime.grad_scaler = False"):
        fit(TINY_MODEL, dataclasses.replace(train_cfg, epochs=1), runtime=scaled,
            decision=DECISION, train_source=source, val=val, class_counts=counts,
            tracker=NullTracker(), checkpoint_dir=tmp_path, features={"n_mels": N_MELS})

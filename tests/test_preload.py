"""Stage `preload`: the estimate (checked against real loading), the budget, the decision."""

from __future__ import annotations

import json
import shutil
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import h5py
import pytest
import torch

from leakpipe.cli import main
from leakpipe.config import FeatureConfig, PreloadConfig, load_section
from leakpipe.constants import EXIT_CONFIG, EXIT_DATA, H5_MEL
from leakpipe.errors import ConfigError
from leakpipe.preload import budget as budget_mod
from leakpipe.preload import choose_placement, estimate, read_shapes
from leakpipe.preload.budget import Budget, GpuMemory, cgroup_memory, gpu_memory
from leakpipe.preload.estimate import HOST, ROLE_EVAL, ROLE_TRAIN, SplitShape
from tests.helpers_h5 import SMALL_FEATURES, validate_into, write_bulk_split, write_splits

# the measurement is benchmark code beside bench_preload.py, not the package's
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "perf"))
from resident import Growth, hold_training_split, measure_growth  # noqa: E402

PARAMS = Path(__file__).resolve().parents[1] / "params.yaml"
GIB = 2**30
MIB = 2**20
TOLERANCE = 0.10  # the bound on the estimate error
# 64 mels: a segment is 128 bytes in float16, so index arrays weigh as in real data
MEL64 = FeatureConfig(**{**SMALL_FEATURES.to_dict(), "n_mels": 64})
SHAPE = SplitShape(files=1000, segment_shape=(23, 7, 64, 1), chunk_rows=50)


@pytest.fixture(scope="module")
def cfg() -> PreloadConfig:
    return load_section(PARAMS, "preload")


@pytest.fixture(scope="module")
def mlflow_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    uri = f"sqlite:///{tmp_path_factory.getbasetemp() / 'mlflow-validate-preload.db'}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        yield uri


def budget(host_gib: float = 64, gpu_gib: float | None = None) -> Budget:
    gpus = () if gpu_gib is None else (GpuMemory(0, "test-gpu", int(80 * GIB),
                                                 int(gpu_gib * GIB)),)
    return Budget(host_available=int(host_gib * GIB), cgroup_limit=None, cgroup_usage=None,
                  gpus=gpus, cuda=bool(gpus), gpu_note="" if gpus else "no GPU")


# -- the estimate ----------------------------------------------------------------------------


def test_resident_segments_are_one_tensor_in_the_planned_dtype() -> None:
    half = estimate(SHAPE, "float16", 1024, "ram")
    full = estimate(SHAPE, "float32", 1024, "ram")
    segments = {p.name: p.nbytes for p in half.parts}["segments"]

    assert segments == 1000 * 161 * 64 * 2
    assert {p.name: p.nbytes for p in full.parts}["segments"] == 2 * segments
    assert SHAPE.resident_shape() == (161_000, 1, 64, 1)


@pytest.mark.parametrize(("role", "has_pool"), [(ROLE_TRAIN, True), (ROLE_EVAL, False)])
def test_only_the_training_split_holds_an_index_pool(role: str, has_pool: bool) -> None:
    names = {p.name for p in estimate(SHAPE, "float16", 1024, "ram", role=role).parts}

    assert ("index_pool" in names) is has_pool and ("epoch_order" in names) is has_pool


def test_device_placement_puts_segments_on_the_gpu() -> None:
    fp = estimate(SHAPE, "float16", 1024, "device", cuda=True)

    assert fp.device_bytes > 1000 * 161 * 64 * 2 > fp.host_bytes


def test_device_placement_needs_cuda() -> None:
    with pytest.raises(ValueError, match="CUDA"):
        estimate(SHAPE, "float16", 1024, "device", cuda=False)


def test_stream_memory_depends_on_the_window_not_the_split() -> None:
    big = SplitShape(files=10**6, segment_shape=SHAPE.segment_shape, chunk_rows=50)

    small_fp = estimate(SHAPE, "float16", 1024, "stream", buffer_chunks=4)
    big_fp = estimate(big, "float16", 1024, "stream", buffer_chunks=4)
    labels = (big.files - SHAPE.files) * 8  # per-file labels do grow

    assert big_fp.host_bytes - small_fp.host_bytes == labels


def test_transient_parts_count_towards_the_peak_only() -> None:
    fp = estimate(SHAPE, "float16", 1024, "ram")

    assert fp.total(HOST, peak=False) < fp.host_bytes


# -- estimate vs reality ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def big_split(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """~75 MiB of float16 segments: fixed overheads stay far below the 10 % bound."""
    root = tmp_path_factory.mktemp("resident")
    write_bulk_split(root / "warmup.h5", "train", 100, features=MEL64)
    return write_bulk_split(root / "train.h5", "train", 12_000, features=MEL64, block=2000)


@pytest.mark.parametrize("batch_size", [256, 8192])
def test_ram_estimate_matches_measured_growth(big_split: Path, batch_size: int) -> None:
    hold_training_split(big_split.with_name("warmup.h5"), "ram", batch_size)  # lazy inits
    shape = read_shapes({"train": big_split})["train"]
    planned = estimate(shape, "float16", batch_size, "ram", role=ROLE_TRAIN)

    held, growth = measure_growth(lambda: hold_training_split(big_split, "ram", batch_size))

    steady = planned.total(HOST, peak=False)
    assert len(held.batches) == 2
    assert Growth.relative_error(growth.host, steady) < TOLERANCE, (growth.host, steady)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_device_estimate_matches_measured_growth(big_split: Path) -> None:
    shape = read_shapes({"train": big_split})["train"]
    planned = estimate(shape, "float16", 1024, "device", cuda=True)

    _, growth = measure_growth(lambda: hold_training_split(big_split, "device", 1024,
                                                           device="cuda"), device="cuda")

    steady = planned.total("device", peak=False)
    assert Growth.relative_error(growth.device, steady) < TOLERANCE, (growth.device, steady)


# -- the decision ------------------------------------------------------------------------------


@pytest.mark.parametrize(("host_gib", "gpu_gib", "placement"), [
    (64, 40, "device"),     # everything fits on the GPU
    (64, 5.5, "ram"),       # 5.5 GiB x 0.8 - 4 GiB reserve: too small for the segments
    (64, None, "ram"),      # no GPU
    (2.6, None, "stream"),  # 2.6 GiB x 0.8 - 2 GiB reserve: only a smaller window fits
])
def test_auto_takes_the_first_placement_that_fits(cfg: PreloadConfig, host_gib: float,
                                                  gpu_gib: float | None, placement: str) -> None:
    shapes = {"train": SplitShape(files=20_000, segment_shape=(23, 7, 64, 1), chunk_rows=50),
              "val": SplitShape(files=5_000, segment_shape=(23, 7, 64, 1), chunk_rows=50)}

    plan = choose_placement(shapes, budget(host_gib, gpu_gib), cfg)

    assert plan.placement == placement
    assert plan.pin_memory == (gpu_gib is not None and placement != "device")
    assert 1 <= plan.batch_size_max <= cfg.max_batch_size
    if placement == "stream":  # the window shrank to fit
        assert plan.buffer_chunks < shapes["train"].files // 50


def test_forcing_a_placement_that_cannot_fit_names_the_key(cfg: PreloadConfig) -> None:
    forced = PreloadConfig(**{**cfg.__dict__, "mode": "device"})

    with pytest.raises(ConfigError, match=r"params\.yaml: preload\.mode: 'device' does not fit"):
        choose_placement({"train": SHAPE}, budget(gpu_gib=None), forced, "params.yaml")


def test_nothing_fits_is_a_clear_error(cfg: PreloadConfig) -> None:
    with pytest.raises(ConfigError, match="no placement fits"):
        choose_placement({"train": SHAPE}, budget(host_gib=1.0), cfg)


def test_batch_bound_comes_from_memory_when_it_binds(cfg: PreloadConfig) -> None:
    shapes = {"train": SplitShape(files=20_000, segment_shape=(23, 7, 64, 1), chunk_rows=50)}
    roomy = choose_placement(shapes, budget(64, 40), cfg)
    fp_one = estimate(shapes["train"], cfg.dtype, 1, "device", cuda=True).device_bytes
    usable = fp_one + 100 * 64 * 2 * 2  # room for two batches of about 100 segments
    tight_gib = (usable + cfg.device_reserve_mb * MIB) / cfg.safety / GIB

    tight = choose_placement(shapes, budget(64, tight_gib), PreloadConfig(
        **{**cfg.__dict__, "mode": "device"}))

    assert roomy.batch_size_max == cfg.max_batch_size
    assert 50 < tight.batch_size_max < 100


# -- the budget ------------------------------------------------------------------------------


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_v2_takes_the_tightest_limit_minus_reclaimable_cache(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    _write(root / "cgroup.controllers", "memory\n")
    _write(root / "memory.max", "max\n")
    _write(root / "job" / "memory.max", f"{8 * GIB}\n")
    _write(root / "job" / "memory.current", f"{3 * GIB}\n")
    _write(root / "job" / "memory.stat", f"anon 1\ninactive_file {GIB}\n")
    _write(root / "job" / "task" / "memory.max", "max\n")
    _write(tmp_path / "self_cgroup", "0::/job/task\n")

    limit, usage = cgroup_memory(root, tmp_path / "self_cgroup")

    assert (limit, usage) == (8 * GIB, 2 * GIB)


def test_cgroup_v1_unlimited_is_no_limit(tmp_path: Path) -> None:
    _write(tmp_path / "memory" / "memory.limit_in_bytes", f"{2**63 - 4096}\n")

    assert cgroup_memory(tmp_path, tmp_path / "none") == (None, None)


def test_the_cgroup_limit_lowers_the_host_budget() -> None:
    limited = Budget(host_available=64 * GIB, cgroup_limit=8 * GIB, cgroup_usage=2 * GIB,
                     gpus=(), cuda=False, gpu_note="")

    assert limited.host_free == 6 * GIB
    assert limited.host_usable(0.5, 1024) == 2 * GIB


def test_no_nvml_library_means_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    class NVMLError(Exception):
        pass

    def fail() -> None:
        raise NVMLError("NVML Shared Library Not Found")

    fake = types.SimpleNamespace(NVMLError=NVMLError, nvmlInit=fail)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    gpus, note = gpu_memory()

    assert gpus == () and "no GPU" in note


def test_visible_devices_filter_the_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = tuple(GpuMemory(i, "g", 10, 10 - i) for i in range(3))

    assert budget_mod._visible(gpus, "2,0") == (gpus[2], gpus[0])
    assert budget_mod._visible(gpus, "GPU-1234") == gpus


# -- the command ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("preload-data")
    write_splits(root)
    return root


def _preload(data_dir: Path, out: Path, params: Path = PARAMS,
             stamp: Path | None = None) -> int:
    args = ["preload", "--params", str(params), "--data-dir", str(data_dir),
            "--report", str(out / "preload.json")]
    return main(args + (["--validated", str(stamp)] if stamp else []))


def test_command_writes_the_plan(data_dir: Path, tmp_path: Path, mlflow_uri: str,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    stamp = validate_into(data_dir, tmp_path, PARAMS)
    capsys.readouterr()                                    # validate's own summary line
    code = _preload(data_dir, tmp_path, stamp=stamp)

    assert code == 0
    plan = json.loads((tmp_path / "preload.json").read_text())
    assert plan["placement"] in ("device", "ram")
    assert plan["training_splits"] == ["train", "val"]
    assert plan["allocations"]["train"]["segments"]["shape"] == [40 * 49, 1, 16, 1]
    assert set(plan["estimates"]) == {"train", "val", "test"}
    measured = json.loads((tmp_path / "preload.measured.json").read_text())
    assert measured["budget"]["host_usable"] > 0 and measured["reason"].startswith(
        plan["placement"])
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith(f"preload: {plan['placement']}")

    first = (tmp_path / "preload.json").read_bytes()
    (tmp_path / "ballast").write_bytes(b"\0" * 2**20)          # memory moves between runs
    assert _preload(data_dir, tmp_path, stamp=stamp) == 0
    assert (tmp_path / "preload.json").read_bytes() == first    # train stays up to date
    assert "budget" not in plan and "reason" not in plan


@pytest.mark.skipif(torch.cuda.is_available(), reason="forcing device fits on a GPU machine")
def test_forcing_device_without_a_gpu_fails_cleanly(data_dir: Path, tmp_path: Path,
                                                    mlflow_uri: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    params = tmp_path / "params.yaml"
    params.write_text(PARAMS.read_text().replace("  mode: auto ", "  mode: device "))

    code = _preload(data_dir, tmp_path, params=params)

    assert code == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "preload.mode: 'device' does not fit" in err and "Traceback" not in err


@pytest.mark.parametrize(("change", "message"), [
    ("no stamp", "no validation stamp"),
    ("split changed", "val.h5: not the file `validate` passed")])
def test_unvalidated_splits_are_refused(data_dir: Path, tmp_path: Path, mlflow_uri: str,
                                        capsys: pytest.CaptureFixture[str], change: str,
                                        message: str) -> None:
    stamp = tmp_path / "validated.json"
    data = tmp_path / "data"
    shutil.copytree(data_dir, data)
    if change == "split changed":
        validate_into(data, tmp_path, PARAMS)
        with h5py.File(data / "val.h5", "r+") as f:       # one value edited after validation
            f[H5_MEL][0, 0, 0, 0, 0] += 1.0

    code = _preload(data, tmp_path, stamp=stamp)

    assert code == EXIT_DATA and message in capsys.readouterr().err
    assert not (tmp_path / "preload.json").exists()

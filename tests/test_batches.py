"""Batch sources: coverage, labels, seeded order, exact resume, oversampling, DDP shards, threads.

The tiny split stores each segment's identity in its data (mel bin 0 = file row, bin 1 = the
segment's index inside the file), so every test can check which segment a batch row holds.
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from leakpipe.constants import KNOWN_CLASSES
from leakpipe.data import background, file_order, open_split
from leakpipe.data.batches import make_eval_batches, make_train_source
from leakpipe.data.file_order import FileOrderBatches
from leakpipe.data.resident_source import ResidentSource
from leakpipe.data.schema import task_labels
from leakpipe.data.split_info import load_resident, read_split_info
from leakpipe.data.stream_source import StreamSource
from tests.helpers_augment import write_split

N_FILES = 20
CHUNK_MB = 0.005      # 3 files per chunk with the tiny features -> 7 chunks
BUFFER_CHUNKS = 2     # a window of 6 files, far smaller than the split
BATCH = 64
SEED = 11
KINDS = ("ram", "stream")


@pytest.fixture
def split(tmp_path: Path, tiny_features) -> Path:
    """20 files, labels cycling through KNOWN_CLASSES (4 LEAK files), ids written in the data."""
    return write_split(tmp_path / "train.h5", tiny_features)


def make(kind: str, path: Path, binary: bool = True, **kw) -> ResidentSource | StreamSource:
    if kind == "ram":
        return ResidentSource(load_resident(path, "ram", "cpu", binary), BATCH, seed=SEED, **kw)
    return StreamSource(path, BATCH, seed=SEED, binary=binary, buffer_chunks=BUFFER_CHUNKS, **kw)


def segment_ids(x: torch.Tensor, spf: int) -> torch.Tensor:
    """Decode the flat segment index written into the data: (B, 1, M, T) -> (B,)."""
    return x[:, 0, 0, 0].long() * spf + x[:, 0, 1, 0].long()


def run(source, epoch: int | None = None) -> list[tuple[torch.Tensor, ...]]:
    if epoch is not None:
        source.set_epoch(epoch)
    return [tuple(t.clone() for t in batch) for batch in source]


def ids_of(batches_: list[tuple[torch.Tensor, ...]], spf: int) -> torch.Tensor:
    return torch.cat([segment_ids(x, spf) for x, _, _ in batches_])


def reference(path: Path, binary: bool) -> tuple[np.ndarray, np.ndarray, int]:
    """All segments (N, M, T) and per-file task labels, read straight from the file."""
    with open_split(path) as split:
        mel = split.mel[:]
        labels = task_labels(split.labels, split.class_names, binary)
    spf = mel.shape[1] * mel.shape[2]
    return mel.reshape(-1, *mel.shape[-2:]), labels, spf


@pytest.mark.parametrize("binary", [True, False])
@pytest.mark.parametrize("kind", KINDS)
def test_epoch_delivers_every_segment_once_with_its_data_and_labels(split: Path, kind: str,
                                                                     binary: bool) -> None:
    segments, labels, spf = reference(split, binary)
    source = make(kind, split, binary=binary)
    if kind == "stream":  # the split is larger than the shuffle buffer
        assert BUFFER_CHUNKS * source.info.chunk_rows < N_FILES
    out = run(source, epoch=0)
    ids = ids_of(out, spf)
    assert sorted(ids.tolist()) == list(range(N_FILES * spf))
    x = torch.cat([b[0] for b in out])
    y = torch.cat([b[1] for b in out])
    files = torch.cat([b[2] for b in out])
    np.testing.assert_array_equal(x[:, 0].numpy(), segments[ids.numpy()])
    np.testing.assert_array_equal(files.numpy(), ids.numpy() // spf)
    np.testing.assert_array_equal(y.numpy(), labels[ids.numpy() // spf])
    assert x.shape[1:] == (1, *segments.shape[1:]) and x.dtype == torch.float16
    assert y.dtype == files.dtype == torch.int64
    assert [len(b[0]) for b in out[:-1]] == [BATCH] * (len(out) - 1) and len(out) == len(source)
    assert len(source.wait_times) == len(out) and min(source.wait_times) >= 0


def test_binary_labels_follow_class_names(split: Path) -> None:
    _, y, files = next(iter(make("ram", split, binary=True)))
    leak_row = KNOWN_CLASSES.index("LEAK")
    np.testing.assert_array_equal(y.numpy(), (files.numpy() % len(KNOWN_CLASSES)) == leak_row)


@pytest.mark.parametrize("kind", KINDS)
def test_order_is_seeded_per_epoch(split: Path, kind: str) -> None:
    spf = read_split_info(split, True).segments_per_file
    first = ids_of(run(make(kind, split), epoch=3), spf)
    again = ids_of(run(make(kind, split), epoch=3), spf)
    other_epoch = ids_of(run(make(kind, split), epoch=4), spf)
    via_epoch = torch.cat([segment_ids(x, spf) for x, _, _ in make(kind, split).epoch(3)])
    torch.testing.assert_close(first, again)
    torch.testing.assert_close(first, via_epoch)
    assert not torch.equal(first, other_epoch)
    assert sorted(first.tolist()) == sorted(other_epoch.tolist())


@pytest.mark.parametrize("oversample", [1, 2])
@pytest.mark.parametrize("stop_after", [3, 7])
@pytest.mark.parametrize("kind", KINDS)
def test_resume_mid_epoch_yields_exactly_the_remaining_batches(split: Path, kind: str,
                                                               stop_after: int,
                                                               oversample: int) -> None:
    full = run(make(kind, split, leak_oversample=oversample), epoch=2)
    source = make(kind, split, leak_oversample=oversample)
    source.set_epoch(2)
    for i, _ in enumerate(source):
        if i + 1 == stop_after:
            break
    state = source.state_dict()
    assert state == {"epoch": 2, "position": stop_after}
    resumed = make(kind, split, leak_oversample=oversample)
    resumed.load_state_dict(state)
    resumed.set_epoch(2)  # what a training loop does right after loading: keeps the position
    rest = run(resumed)
    assert len(rest) == len(full) - stop_after
    for got, want in zip(rest, full[stop_after:], strict=True):
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b)
    assert resumed.state_dict() == {"epoch": 2, "position": len(full)}
    assert len(run(resumed)) == len(full)  # the pass after a resumed one is a whole epoch


@pytest.mark.parametrize("kind", KINDS)
def test_leak_oversampling_repeats_leak_segments(split: Path, kind: str) -> None:
    factor = 3
    _, labels, spf = reference(split, binary=True)
    out = run(make(kind, split, leak_oversample=factor), epoch=1)
    counts = Counter(ids_of(out, spf).tolist())
    expected = {s: factor if labels[s // spf] == 1 else 1 for s in range(N_FILES * spf)}
    assert counts == expected
    y = torch.cat([b[1] for b in out])
    assert int(y.sum()) == factor * int(labels.sum()) * spf


@pytest.mark.parametrize("kind", KINDS)
def test_ddp_shards_are_disjoint_equal_and_cover_the_epoch(split: Path, kind: str) -> None:
    world = 3
    spf = read_split_info(split, True).segments_per_file
    shards = [ids_of(run(make(kind, split, rank=r, world_size=world), epoch=5), spf)
              for r in range(world)]
    sizes = {len(s) for s in shards}
    assert len(sizes) == 1
    union = set().union(*(set(s.tolist()) for s in shards))
    assert len(union) == world * sizes.pop()              # disjoint
    missing = N_FILES * spf - len(union)
    if kind == "ram":
        assert missing < world                            # only the uneven remainder
    else:                                                 # whole chunks dealt, then truncated
        assert missing < world * read_split_info(split, True).chunk_rows * spf
    lengths = {len(make(kind, split, rank=r, world_size=world)) for r in range(world)}
    assert len(lengths) == 1                              # equal batch counts: no DDP hang


def reader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("leakpipe")]


@pytest.mark.parametrize("kind", ["train", "eval"])
def test_stream_thread_stops_on_early_break(split: Path, kind: str) -> None:
    baseline = threading.active_count()
    source = (make("stream", split) if kind == "train"
              else make_eval_batches(split, "stream", BATCH, binary=True))
    for i, _ in enumerate(source):
        assert reader_threads()
        if i == 1:
            break
    assert threading.active_count() == baseline and not reader_threads()


def test_stream_close_stops_a_pass_in_progress(split: Path) -> None:
    baseline = threading.active_count()
    source = make("stream", split)
    batches_ = iter(source)
    next(batches_)
    source.close()
    assert threading.active_count() == baseline
    with pytest.raises(StopIteration):
        next(batches_)


@pytest.mark.parametrize("kind", ["train", "eval"])
def test_reader_error_reaches_the_consumer_and_the_thread_stops(
        split: Path, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = background.read_rows

    def failing(mel, start, stop, out) -> None:
        calls.append(start)
        if len(calls) == 3:
            raise OSError("disk gone")
        real(mel, start, stop, out)

    monkeypatch.setattr(background, "read_rows", failing)
    monkeypatch.setattr(file_order, "EVAL_READ_BYTES", 1)  # one read per batch: several reads
    baseline = threading.active_count()
    source = (make("stream", split) if kind == "train"
              else make_eval_batches(split, "stream", 2 * BATCH, binary=True))
    with pytest.raises(OSError, match="disk gone"):
        list(source)
    assert threading.active_count() == baseline and not reader_threads()


def test_stream_eval_reads_whole_batches_in_few_reads(
        split: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = make_eval_batches(split, "stream", 1, binary=True)          # one file per batch
    resident = make_eval_batches(split, "ram", 1, binary=True)
    monkeypatch.setattr(file_order, "EVAL_READ_BYTES", 3 * source.info.file_bytes)
    reads = source.read_ranges()
    assert len(reads) == -(-source.info.n_files // 3) < len(source.ranges())
    assert {b for _, b in reads} <= {b for _, b in source.ranges()}       # batch boundaries
    got, want = list(source), list(resident)
    assert len(got) == len(want) == len(source.ranges())
    for (x, y, f), (rx, ry, rf) in zip(got, want, strict=True):
        assert torch.equal(x, rx) and torch.equal(y, ry) and torch.equal(f, rf)


@pytest.mark.parametrize("budget", [100, 30])
@pytest.mark.parametrize("placement", ["ram", "stream"])
def test_eval_batches_are_whole_files_in_file_order(split: Path, placement: str,
                                                    budget: int) -> None:
    segments, labels, spf = reference(split, binary=False)
    source = make_eval_batches(split, placement, budget, binary=False)
    out = run(source)
    for _, _, files in out:
        counts = Counter(files.tolist())
        assert set(counts.values()) == {spf}              # whole files only
        assert len(files) <= max(budget, spf)             # one file per batch if over budget
    ids = ids_of(out, spf)
    np.testing.assert_array_equal(ids.numpy(), np.arange(N_FILES * spf))
    np.testing.assert_array_equal(torch.cat([b[0] for b in out])[:, 0].numpy(), segments)
    np.testing.assert_array_equal(torch.cat([b[1] for b in out]).numpy(),
                                  np.repeat(labels, spf))
    assert len(out) == len(source) == len(source.wait_times)


@pytest.mark.parametrize("kind", KINDS)
def test_dtype_and_drop_last(split: Path, kind: str) -> None:
    segments, _, spf = reference(split, binary=True)
    out = run(make(kind, split, dtype=torch.float32, drop_last=True))
    assert len(out) == N_FILES * spf // BATCH == len(make(kind, split, drop_last=True))
    assert {len(b[0]) for b in out} == {BATCH} and out[0][0].dtype == torch.float32
    ids = ids_of(out, spf)
    assert len(set(ids.tolist())) == len(ids)
    np.testing.assert_array_equal(torch.cat([b[0] for b in out])[:, 0].numpy(),
                                  segments[ids.numpy()].astype(np.float32))


def test_eval_dtype(split: Path) -> None:
    data = load_resident(split, "ram", "cpu", binary=True)
    x = next(iter(FileOrderBatches(data, BATCH, dtype=torch.float32)))[0]
    assert x.dtype == torch.float32 and x.shape[1] == 1


def test_factory_dispatch_and_bad_arguments(split: Path) -> None:
    assert isinstance(make_train_source(split, "stream", BATCH, seed=0, binary=True),
                      StreamSource)
    assert isinstance(make_train_source(split, "ram", BATCH, seed=0, binary=True),
                      ResidentSource)
    with pytest.raises(ValueError, match="placement 'disk'"):
        make_train_source(split, "disk", BATCH, seed=0, binary=True)
    with pytest.raises(ValueError, match="leak_oversample"):
        make("ram", split, leak_oversample=0)
    with pytest.raises(ValueError, match="rank 3"):
        make("stream", split, rank=3, world_size=3)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("placement", ["device", "ram", "stream"])
def test_cuda_batches_equal_cpu_batches(split: Path, placement: str) -> None:
    """Pinned memory, side-stream copies and device indexing deliver the CPU batches."""
    on_cpu = run(make_train_source(split, "ram", BATCH, seed=SEED, binary=True)
                 if placement != "stream" else make("stream", split))
    gpu = (make_train_source(split, placement, BATCH, seed=SEED, binary=True, device="cuda")
           if placement != "stream" else make("stream", split, device="cuda"))
    on_gpu = run(gpu)
    assert all(t.is_cuda for t in on_gpu[0])
    for got, want in zip(on_gpu, on_cpu, strict=True):
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a.cpu(), b)
    evaluated = run(make_eval_batches(split, placement, BATCH, binary=True, device="cuda"))
    reference_eval = run(make_eval_batches(split, "ram", BATCH, binary=True))
    for got, want in zip(evaluated, reference_eval, strict=True):
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a.cpu(), b)

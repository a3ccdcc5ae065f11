"""File-order batches for validation and evaluation: every segment once, whole files a batch.

Evaluation votes per file, so a batch never splits a file. From a resident split a batch is a
view of the resident tensor; from a ``SplitInfo`` (placement ``stream``) one background reader
reads a few whole batches per HDF5 call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import h5py
import torch

from leakpipe.data.background import BackgroundReader, read_file_block
from leakpipe.data.feed import Batch, DeviceFeed, HostBatch, cast_dtype, chunk_ranges, timed
from leakpipe.data.input_norm import NORM_NONE, check_norm, normalize_segments
from leakpipe.data.split_info import ResidentData, SplitInfo

EVAL_READ_AHEAD = 2           # file-order reads queued ahead by the stream eval reader
EVAL_READ_BYTES = 8 * 2**20   # bytes per stream eval read (whole batches): few, large reads


class FileOrderBatches:
    """Every segment exactly once, in file order; each batch holds whole files.

    A batch holds ``max(1, max_segments // segments_per_file)`` files (a file larger than the
    budget is still one batch: files are never split, so votes stay per file). Built from
    ``ResidentData`` it slices the resident tensor; from a ``SplitInfo`` it streams the file
    with one background reader. ``input_norm`` normalises each file of a batch on the device
    (``leakpipe.data.input_norm``; float32 then).
    """

    def __init__(self, source: ResidentData | SplitInfo, max_segments: int, *,
                 device: torch.device | str = "cpu", dtype: torch.dtype | None = None,
                 input_norm: str = NORM_NONE) -> None:
        if max_segments < 1:
            raise ValueError(f"max_segments must be >= 1, got {max_segments}")
        self.resident = source if isinstance(source, ResidentData) else None
        self.info = source.info if isinstance(source, ResidentData) else source
        self.device = source.device if isinstance(source, ResidentData) else torch.device(device)
        self.dtype = dtype
        self.input_norm = check_norm(input_norm)
        self.files_per_batch = max(1, max_segments // self.info.segments_per_file)
        self._labels = torch.from_numpy(self.info.file_labels).to(self.device)
        self._pin = (self.resident.overlap_copies if self.resident is not None
                     else self.device.type == "cuda")
        self._feed = DeviceFeed(self.device, self._pin)
        self.wait_times: list[float] = []

    def ranges(self) -> list[tuple[int, int]]:
        """(first file, end file) of each batch, in file order."""
        return chunk_ranges(self.info.n_files, self.files_per_batch)

    def __len__(self) -> int:
        return len(self.ranges())

    def __iter__(self) -> Iterator[Batch]:
        self.wait_times = []
        if self.resident is not None:
            yield from timed(self._feed(self._resident_batches(), self._finish), self.wait_times)
            return
        with BackgroundReader(self.info.path, "leakpipe-eval-reader") as reader:
            jobs = (self._block_job(r) for r in self.read_ranges())
            host = self._split(reader.map(jobs, depth=EVAL_READ_AHEAD))
            yield from timed(self._feed(host, self._finish), self.wait_times)

    def read_ranges(self) -> list[tuple[int, int]]:
        """File ranges read at once when streaming: whole batches, about EVAL_READ_BYTES.

        Small forward passes (CPU) would otherwise mean many small HDF5 reads, each paying the
        per-call cost on the cores the forward pass needs.
        """
        batch_bytes = self.files_per_batch * self.info.file_bytes
        per_read = self.files_per_batch * max(1, EVAL_READ_BYTES // max(1, batch_bytes))
        return chunk_ranges(self.info.n_files, per_read)

    def _split(self, blocks: Iterable[HostBatch]) -> Iterator[HostBatch]:
        """Cut read blocks into the batches of ``ranges()`` (views, no copies)."""
        step = self.files_per_batch * self.info.segments_per_file
        for x, files in blocks:
            for a in range(0, len(x), step):
                yield x[a:a + step], files[a:a + step]

    def _block_job(self, rows: tuple[int, int]) -> Callable[[h5py.Dataset], HostBatch]:
        return lambda mel: read_file_block(mel, [rows], self.info, self._pin)

    def _resident_batches(self) -> Iterator[HostBatch]:
        segments, spf = self.resident.segments, self.info.segments_per_file
        for a, b in self.ranges():
            where = "cpu" if self._pin else segments.device
            files = torch.arange(a, b, device=where).repeat_interleave(spf)   # (n,)
            files = files.pin_memory() if self._pin else files
            yield segments[a * spf:b * spf], files                      # a view, (n, 1, M, T)

    def _finish(self, x: torch.Tensor, file_idx: torch.Tensor) -> Batch:
        x = normalize_segments(cast_dtype(x, self.dtype), self.info.segments_per_file,
                               self.input_norm)                         # whole files
        return x, self._labels.index_select(0, file_idx), file_idx

"""Rows of an uncompressed HDF5 dataset as zero-copy views of the memory-mapped file.

A plain h5py read copies every byte from the page cache into a NumPy buffer; validation then
reads that buffer again to reduce it. When ``mel`` is stored without filters (leakpipe's writer
never compresses it), its chunks are plain arrays at known file offsets, so validation reduces
them in place from a read-only-in-practice mapping (``ACCESS_COPY``: private and writable, so
the views are ordinary arrays to NumPy and numba; nothing is ever written back). Chunks that
lie back to back in the file are merged, so blocks are as large as asked whatever the chunk
size.

Anything unusual (filters, byte order other than native, chunks not yet written, extents beyond
the end of the file) makes ``find_layout`` return None and the caller reads with h5py. The
layout is found once per split (the chunk index walk costs milliseconds) and handed to every
worker task, which only maps the file.
"""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Extent:
    """Rows ``[first, stop)`` stored contiguously at byte ``offset`` of the file."""

    first: int
    stop: int
    offset: int


def _extents(ds: h5py.Dataset, file_size: int) -> list[Extent] | None:
    """Where each run of rows lives in the file; None when the rows are not plain bytes there."""
    plist = ds.id.get_create_plist()
    if plist.get_nfilters() or not ds.dtype.isnative or ds.shape[0] == 0:
        return None
    row_bytes = int(np.prod(ds.shape[1:])) * ds.dtype.itemsize
    if ds.chunks is None:
        offset = ds.id.get_offset()
        if offset is None or offset + ds.shape[0] * row_bytes > file_size:
            return None
        return [Extent(0, ds.shape[0], offset)]
    if any(c != s for c, s in zip(ds.chunks[1:], ds.shape[1:], strict=True)):
        return None                                 # chunks split a row: not a row-major run
    found: list[Extent] = []
    n_rows, chunk_rows = ds.shape[0], ds.chunks[0]              # h5py properties: read once
    ds.id.chunk_iter(lambda info: found.append(
        Extent(info.chunk_offset[0], min(n_rows, info.chunk_offset[0] + chunk_rows),
               info.byte_offset)))
    found.sort(key=lambda e: e.first)
    rows_seen = 0
    for extent in found:
        if extent.first != rows_seen or extent.offset + (extent.stop - extent.first) * \
                row_bytes > file_size:
            return None                             # a chunk never written, or out of the file
        rows_seen = extent.stop
    return _merged(found, row_bytes) if rows_seen == n_rows else None


def _merged(extents: list[Extent], row_bytes: int) -> list[Extent]:
    out = [extents[0]]
    for e in extents[1:]:
        last = out[-1]
        if e.offset == last.offset + (last.stop - last.first) * row_bytes:
            out[-1] = Extent(last.first, e.stop, last.offset)
        else:
            out.append(e)
    return out


@dataclass(frozen=True)
class Layout:
    """Where a dataset's rows lie in its file: found once per split, sent to every worker."""

    extents: tuple[Extent, ...]
    row_shape: tuple[int, ...]
    dtype: str

    @property
    def row_bytes(self) -> int:
        return int(np.prod(self.row_shape)) * np.dtype(self.dtype).itemsize


def find_layout(path: Path, ds: h5py.Dataset) -> Layout | None:
    """The layout of ``ds`` (a dataset of the file ``path``), or None when it cannot be mapped."""
    try:
        extents = _extents(ds, os.stat(path).st_size)
    except (OSError, ValueError, RuntimeError, AttributeError) as exc:  # old HDF5: no iter
        log.debug("%s: not mappable (%s); reading with h5py", path, exc)
        return None
    if extents is None:
        return None
    return Layout(tuple(extents), tuple(int(n) for n in ds.shape[1:]), ds.dtype.str)


class MappedRows:
    """Zero-copy row blocks of a file laid out as ``layout``; a context manager (closes the
    mapping). A file that shrank below the layout since is refused with ``OSError``."""

    def __init__(self, path: Path, layout: Layout) -> None:
        self.layout = layout
        with open(path, "rb") as handle:
            self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
        end = max(e.offset + (e.stop - e.first) * layout.row_bytes for e in layout.extents)
        if end > len(self._map):
            self._map.close()
            raise OSError(f"{path}: the file is shorter than its chunk index says")

    def __enter__(self) -> MappedRows:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._map.close()
        except BufferError:                         # a view still alive (an error unwinding):
            pass                                    # the mapping closes when it is collected

    def blocks(self, start: int, stop: int, max_rows: int) -> Iterator[tuple[int, np.ndarray]]:
        """(first row, view (rows, *row_shape)) covering ``[start, stop)``, in row order."""
        dtype, row_bytes = np.dtype(self.layout.dtype), self.layout.row_bytes
        for e in self.layout.extents:
            a, b = max(start, e.first), min(stop, e.stop)
            for first in range(a, b, max_rows):
                rows = min(b, first + max_rows) - first
                offset = e.offset + (first - e.first) * row_bytes
                view = np.frombuffer(self._map, dtype, count=rows * row_bytes // dtype.itemsize,
                                     offset=offset)
                yield first, view.reshape(rows, *self.layout.row_shape)

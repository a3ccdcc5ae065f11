"""The HDF5 data contract: schema, writer, reader and splits (docs/data-format.md)."""

from leakpipe.data.reader import SplitReader, open_split
from leakpipe.data.schema import DataFormatError, binary_labels, leak_index

__all__ = ["DataFormatError", "SplitReader", "binary_labels", "leak_index", "open_split"]

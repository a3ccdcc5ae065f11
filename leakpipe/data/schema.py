"""Schema of one HDF5 split file and the label mapping every consumer shares.

The leak index is always derived from ``class_names``; nothing else in leakpipe may hard-code
it (the original system compared binary labels with the 5-class LEAK index and read F1 = 0).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from leakpipe.constants import BINARY_CLASSES, LEAK_CLASS
from leakpipe.errors import DataError


class DataFormatError(DataError):
    """A split file that breaks the data contract; the message names the file and the key."""


def leak_index(class_names: Sequence[str], leak_class: str = LEAK_CLASS) -> int:
    """Index of the leak class in ``class_names``."""
    names = list(class_names)
    if leak_class not in names:
        raise DataFormatError(f"class_names {names} do not contain the leak class {leak_class!r}")
    return names.index(leak_class)


def binary_labels(labels: np.ndarray, class_names: Sequence[str],
                  leak_class: str = LEAK_CLASS) -> np.ndarray:
    """Map class indices to NOLEAK = 0 / LEAK = 1 (the one place this mapping lives)."""
    return (np.asarray(labels) == leak_index(class_names, leak_class)).astype(np.int64)


def task_classes(class_names: Sequence[str], binary: bool) -> tuple[str, ...]:
    """The class names a model sees: ``BINARY_CLASSES`` in binary mode, else ``class_names``."""
    return BINARY_CLASSES if binary else tuple(class_names)


def task_labels(labels: np.ndarray, class_names: Sequence[str], binary: bool) -> np.ndarray:
    """Labels in the task's class space (binary mapping or unchanged indices)."""
    if binary:
        return binary_labels(labels, class_names)
    return np.asarray(labels).astype(np.int64)


def encode_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def decode_json(text: Any, what: str) -> Any:
    if isinstance(text, bytes):
        text = text.decode()
    try:
        return json.loads(text)
    except (TypeError, json.JSONDecodeError):
        raise DataFormatError(f"attribute {what!r} is not valid JSON") from None

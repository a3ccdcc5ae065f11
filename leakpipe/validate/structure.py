"""Structural checks of one split file that great-expectations cannot express (h5py only).

``inspect_split`` opens a split, checks attributes and datasets and returns what later checks
need (``SplitMeta``) with one ``CheckResult`` per structural check. Every problem is collected;
only a file that cannot be opened at all ends the inspection (a fatal ``readable`` failure).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from leakpipe.config import FeatureConfig, stored_features
from leakpipe.constants import (
    ATTR_CLASS_NAMES,
    ATTR_FEATURES,
    ATTR_LEAK_CLASS,
    ATTR_SCHEMA_VERSION,
    H5_GROUP,
    H5_LABELS,
    H5_MEL,
    H5_RECORDING_ID,
    LEAK_CLASS,
    SCHEMA_VERSION,
)
from leakpipe.errors import ConfigError
from leakpipe.validate.results import KIND_STRUCTURE, CheckResult, failed, passed
from leakpipe.validate.stats_checks import stats_checks

REQUIRED_ATTRS = (ATTR_SCHEMA_VERSION, ATTR_CLASS_NAMES, ATTR_FEATURES)
REQUIRED_DATASETS = (H5_MEL, H5_LABELS, H5_RECORDING_ID, H5_GROUP)
COLUMN_DATASETS = (H5_LABELS, H5_RECORDING_ID, H5_GROUP)
MEL_RANK = 5
MEL_DTYPES = ("float16", "float32")
H5_ERRORS = (OSError, KeyError, RuntimeError, ValueError)  # what h5py raises on a corrupt file


@dataclass
class SplitMeta:
    """What the structural pass learnt about one split (None where it could not tell)."""

    split: str
    path: Path
    class_names: tuple[str, ...] | None = None
    leak_class: str = LEAK_CLASS
    features: FeatureConfig | None = None
    feature_dict: dict[str, Any] | None = None
    mel_dtype: str | None = None
    mel_shape: tuple[int, ...] | None = None
    summarisable: bool = False  # the per-file summary can be streamed
    readable: bool = True
    checks: list[CheckResult] = field(default_factory=list)

    @property
    def n_files(self) -> int:
        return int(self.mel_shape[0]) if self.mel_shape else 0

    @property
    def row_shape(self) -> tuple[int, ...]:
        return tuple(self.mel_shape[1:]) if self.mel_shape else ()

    @property
    def nbytes(self) -> int:
        if not self.mel_shape or not self.mel_dtype:
            return 0
        return int(np.prod(self.mel_shape)) * np.dtype(self.mel_dtype).itemsize


def inspect_split(split: str, path: Path) -> SplitMeta:
    """Run every structural check on ``path``; results are in ``meta.checks``."""
    meta = SplitMeta(split=split, path=path)
    if not path.is_file():
        return _unreadable(meta, f"{path}: no such file")
    try:
        with h5py.File(path, "r") as h5:
            _inspect_open(meta, h5)
    except H5_ERRORS as exc:
        meta.checks = [c for c in meta.checks if c.check != "readable"]
        return _unreadable(meta, f"{path}: not a readable HDF5 file "
                                 f"({exc.__class__.__name__}: {_first_line(exc)})")
    return meta


def _unreadable(meta: SplitMeta, message: str) -> SplitMeta:
    meta.readable = False
    meta.summarisable = False
    meta.checks.append(failed("readable", meta.split, KIND_STRUCTURE, message, fatal=True))
    return meta


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else ""


def _inspect_open(meta: SplitMeta, h5: h5py.File) -> None:
    add = meta.checks.append
    add(passed("readable", meta.split, KIND_STRUCTURE, observed=str(meta.path)))
    missing = [key for key in REQUIRED_ATTRS if key not in h5.attrs]
    add(_result("attributes_present", meta.split, not missing, f"missing {missing}",
                observed=sorted(h5.attrs)))
    if ATTR_SCHEMA_VERSION in h5.attrs:
        add(_schema_version(meta.split, h5.attrs[ATTR_SCHEMA_VERSION]))
    leak = h5.attrs.get(ATTR_LEAK_CLASS, LEAK_CLASS)
    meta.leak_class = leak.decode() if isinstance(leak, bytes) else str(leak)
    if ATTR_CLASS_NAMES in h5.attrs:
        add(_class_names(meta, h5.attrs[ATTR_CLASS_NAMES]))
    if ATTR_FEATURES in h5.attrs:
        add(_feature_config(meta, h5.attrs[ATTR_FEATURES]))
    _inspect_datasets(meta, h5)


def _result(check: str, split: str, ok: bool, problem: str, observed: Any = None) -> CheckResult:
    if ok:
        return passed(check, split, KIND_STRUCTURE, observed=observed)
    return failed(check, split, KIND_STRUCTURE, problem, observed=observed)


def _schema_version(split: str, raw: Any) -> CheckResult:
    try:
        version = int(raw)
    except (TypeError, ValueError):
        version = None
    return _result("schema_version", split, version == SCHEMA_VERSION,
                   f"unknown schema_version {raw!r} (this leakpipe reads {SCHEMA_VERSION})",
                   observed=version if version is not None else str(raw))


def _decode_json(raw: Any) -> Any:
    text = raw.decode() if isinstance(raw, bytes) else raw
    try:
        return json.loads(text)
    except (TypeError, json.JSONDecodeError):
        return None


def _class_names(meta: SplitMeta, raw: Any) -> CheckResult:
    names = _decode_json(raw)
    ok_list = isinstance(names, list) and names and all(isinstance(n, str) for n in names)
    if not ok_list:
        return failed("class_names_valid", meta.split, KIND_STRUCTURE,
                      "class_names is not a JSON list of strings", observed=str(raw)[:200])
    if len(set(names)) != len(names):
        return failed("class_names_valid", meta.split, KIND_STRUCTURE,
                      f"class_names {names} repeat a name", observed=names)
    meta.class_names = tuple(names)
    if meta.leak_class not in names:
        return failed("class_names_valid", meta.split, KIND_STRUCTURE,
                      f"class_names {names} do not hold the leak class {meta.leak_class!r}",
                      observed=names)
    return passed("class_names_valid", meta.split, KIND_STRUCTURE, observed=names)


def _feature_config(meta: SplitMeta, raw: Any) -> CheckResult:
    value = _decode_json(raw)
    if not isinstance(value, dict):
        return failed("feature_config_valid", meta.split, KIND_STRUCTURE,
                      "feature_config is not a JSON object", observed=str(raw)[:200])
    meta.feature_dict = value
    try:
        meta.features = stored_features(value, ATTR_FEATURES, str(meta.path))
    except ConfigError as exc:
        return failed("feature_config_valid", meta.split, KIND_STRUCTURE, str(exc),
                      observed=value)
    return passed("feature_config_valid", meta.split, KIND_STRUCTURE, observed=value)


def _inspect_datasets(meta: SplitMeta, h5: h5py.File) -> None:
    add, split = meta.checks.append, meta.split
    missing = [key for key in REQUIRED_DATASETS if key not in h5]
    not_datasets = [key for key in REQUIRED_DATASETS
                    if key in h5 and not isinstance(h5[key], h5py.Dataset)]
    add(_result("datasets_present", split, not missing and not not_datasets,
                f"missing datasets {missing + not_datasets}",
                observed=sorted(k for k in h5 if isinstance(h5[k], h5py.Dataset))))
    if H5_MEL not in missing + not_datasets:
        _inspect_mel(meta, h5[H5_MEL])
    checks_ok = [_columns(meta, h5, missing + not_datasets), _labels_dtype(meta, h5)]
    if meta.mel_shape is not None and H5_RECORDING_ID not in missing + not_datasets:
        meta.checks.extend(stats_checks(split, h5, meta.n_files))
    mel_ok = all(c.passed for c in meta.checks if c.check in ("mel_rank", "mel_dtype"))
    meta.summarisable = (meta.mel_shape is not None and mel_ok and not missing
                         and not not_datasets and all(checks_ok))


def _inspect_mel(meta: SplitMeta, mel: h5py.Dataset) -> None:
    add, split = meta.checks.append, meta.split
    meta.mel_shape = tuple(int(n) for n in mel.shape)
    meta.mel_dtype = str(mel.dtype)
    add(_result("mel_rank", split, mel.ndim == MEL_RANK,
                f"mel has rank {mel.ndim} {meta.mel_shape}, expected {MEL_RANK} "
                "(files, n_long, n_short, n_mels, n_frames)", observed=list(meta.mel_shape)))
    add(_result("mel_dtype", split, meta.mel_dtype in MEL_DTYPES,
                f"mel has dtype {meta.mel_dtype}, expected one of {list(MEL_DTYPES)}",
                observed=meta.mel_dtype))
    if meta.features is not None and mel.ndim == MEL_RANK:
        expected = meta.features.segment_shape
        add(_result("mel_shape", split, meta.row_shape == expected,
                    f"mel rows have shape {meta.row_shape}, the feature config says {expected}",
                    observed=list(meta.row_shape)))
    add(_result("not_empty", split, meta.n_files > 0, "the split holds no files",
                observed=meta.n_files))


def _columns(meta: SplitMeta, h5: h5py.File, missing: list[str]) -> bool:
    if meta.mel_shape is None:
        return False
    expected = (meta.n_files,)
    wrong = {key: list(h5[key].shape) for key in COLUMN_DATASETS
             if key not in missing and tuple(h5[key].shape) != expected}
    meta.checks.append(_result(
        "lengths_match", meta.split, not wrong,
        f"{_describe_lengths(wrong)} but mel holds {meta.n_files} files",
        observed={key: list(h5[key].shape) for key in COLUMN_DATASETS if key not in missing}))
    return not wrong


def _describe_lengths(wrong: dict[str, list[int]]) -> str:
    return ", ".join(f"{key} has shape {tuple(shape)}" for key, shape in wrong.items())


def _labels_dtype(meta: SplitMeta, h5: h5py.File) -> bool:
    if H5_LABELS not in h5 or not isinstance(h5[H5_LABELS], h5py.Dataset):
        return False
    kind = h5[H5_LABELS].dtype
    ok = np.issubdtype(kind, np.integer)
    meta.checks.append(_result("labels_dtype", meta.split, ok,
                               f"labels have dtype {kind}, expected an integer type",
                               observed=str(kind)))
    return ok


def read_columns(path: Path) -> dict[str, np.ndarray]:
    """labels, recording_id and group of a summarisable split (one read each)."""
    with h5py.File(path, "r") as h5:
        return {
            H5_LABELS: h5[H5_LABELS][:].astype(np.int64),
            H5_RECORDING_ID: _strings(h5[H5_RECORDING_ID]),
            H5_GROUP: _strings(h5[H5_GROUP]),
        }


def _strings(ds: h5py.Dataset) -> np.ndarray:
    if h5py.check_string_dtype(ds.dtype) is not None:
        return ds.asstr()[:].astype(object)
    return ds[:].astype(str).astype(object)

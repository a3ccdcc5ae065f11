"""The great-expectations suite: per-file and per-class expectations built from `validate`.

great-expectations is imported here and only here (it takes seconds); its analytics and
progress bars are off and nothing is written to disk (an ephemeral context, in-memory stores).
All splits are validated at once, as two pandas tables: the per-file summaries (one row per
file; a ``split`` and a ``row`` column say where it is) and the class table (one row per split
and class). What differs between splits (the number of classes, the expected row shape) is a
column, so every expectation applies to every row and the GX cost does not grow with the
number of splits. Results are split back into one ``CheckResult`` per check and split.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from leakpipe.config import ValidateConfig
from leakpipe.names import class_name
from leakpipe.validate.results import KIND_EXPECTATION, CheckResult, failed, passed
from leakpipe.validate.structure import SplitMeta
from leakpipe.validate.summary import SplitSummary

GX_LOGGER = "great_expectations"
FILES_TABLE = "files"
CLASSES_TABLE = "classes"
MISSING_INDEX = -1  # class-table index of a required class absent from class_names
CLASS_COLUMNS = ["split", "class_name", "index", "count", "fraction", "min_count", "recordings",
                 "groups", "min_recordings"]


@dataclass(frozen=True)
class Expectation:
    """A check id, the table it runs on, the GX expectation, the column that explains it."""

    check: str
    table: str
    gx: Any
    column: str | None = None


def gx_module() -> Any:
    """Import great-expectations quietly (no analytics, no banner)."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    logging.getLogger(GX_LOGGER).setLevel(logging.WARNING)
    import great_expectations as gx

    return gx


def ephemeral_context(gx: Any) -> Any:
    """An in-memory GX context with analytics and progress bars off."""
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    config = DataContextConfig(store_backend_defaults=InMemoryStoreBackendDefaults(),
                               analytics_enabled=False,
                               progress_bars=ProgressBarsConfig(globally=False))
    return gx.get_context(mode="ephemeral", project_config=config)


# -- the tables --------------------------------------------------------------------------------


def required_classes(meta: SplitMeta, cfg: ValidateConfig) -> list[str]:
    """Classes the split must hold: ``required_classes`` (or all), and the leak class always."""
    wanted = [class_name(c) for c in cfg.required_classes] or list(meta.class_names or ())
    if meta.leak_class not in wanted:
        wanted.append(meta.leak_class)
    return wanted


def class_table(meta: SplitMeta, frame: pd.DataFrame, cfg: ValidateConfig) -> pd.DataFrame:
    """One row per class of one split (plus required classes missing from class_names).

    ``count`` is files (clips); ``recordings`` and ``groups`` are the distinct recording ids
    and groups among them.
    """
    names = list(meta.class_names or ())
    required = required_classes(meta, cfg)
    extra = [c for c in required if c not in names]
    counts = frame["label"].value_counts()
    distinct = frame.groupby("label")[["recording_id", "group"]].nunique()
    total = max(1, len(frame))
    rows = []
    for index, name in [*enumerate(names), *((MISSING_INDEX, c) for c in extra)]:
        count = int(counts.get(index, 0)) if index != MISSING_INDEX else 0
        found = distinct.loc[index] if index in distinct.index else None
        rows.append({"split": meta.split, "class_name": name, "index": index, "count": count,
                     "fraction": count / total,
                     "min_count": cfg.min_files_per_class if name in required else 0,
                     "recordings": int(found["recording_id"]) if found is not None else 0,
                     "groups": int(found["group"]) if found is not None else 0,
                     "min_recordings": cfg.min_recordings_per_class if name in required else 0})
    return pd.DataFrame(rows, columns=CLASS_COLUMNS)


def files_table(summaries: Mapping[str, SplitSummary],
                metas: Mapping[str, SplitMeta]) -> pd.DataFrame:
    """Every split's per-file summary, with the split context the expectations compare to."""
    frames = []
    for split, summary in summaries.items():
        meta = metas[split]
        features = meta.features
        expected = ("x".join(str(n) for n in features.segment_shape) if features is not None
                    else summary.frame["shape"].iloc[0] if len(summary.frame) else "")
        frames.append(summary.frame.assign(n_classes=len(meta.class_names or ()),
                                           expected_shape=expected))
    return pd.concat(frames, ignore_index=True)


# -- the suite ---------------------------------------------------------------------------------


def build_expectations(gx: Any, cfg: ValidateConfig) -> list[Expectation]:
    """The expectations, from `validate` params; split context lives in table columns."""
    ex = gx.expectations

    def files(check: str, expectation: Any, column: str) -> Expectation:
        return Expectation(check, FILES_TABLE, expectation, column)

    def classes(check: str, expectation: Any, column: str) -> Expectation:
        return Expectation(check, CLASSES_TABLE, expectation, column)

    out = [
        files("finite_values", ex.ExpectColumnValuesToBeBetween(
            column="finite_fraction", min_value=1.0, max_value=1.0), "finite_fraction"),
        files("value_min", ex.ExpectColumnValuesToBeBetween(
            column="min", min_value=cfg.value_min, max_value=cfg.value_max), "min"),
        files("value_max", ex.ExpectColumnValuesToBeBetween(
            column="max", min_value=cfg.value_min, max_value=cfg.value_max), "max"),
        files("labels_known", ex.ExpectColumnValuesToBeBetween(
            column="label", min_value=0), "label"),
        files("labels_known", ex.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A="n_classes", column_B="label"), "label"),
        files("not_constant", ex.ExpectColumnValuesToBeInSet(
            column="constant", value_set=[False]), "constant"),
        files("not_all_zero", ex.ExpectColumnValuesToBeInSet(
            column="all_zero", value_set=[False]), "all_zero"),
        files("shape_consistent", ex.ExpectColumnPairValuesToBeEqual(
            column_A="shape", column_B="expected_shape"), "shape"),
        classes("classes_present", ex.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A="count", column_B="min_count", or_equal=True), "count"),
        classes("recordings_present", ex.ExpectColumnPairValuesAToBeGreaterThanB(  # absent:
            column_A="recordings", column_B="min_recordings", or_equal=True,  # classes_present
            row_condition=_present()), "recordings"),
        classes("class_balance", ex.ExpectColumnValuesToBeBetween(
            column="fraction", min_value=cfg.class_fraction_min,
            max_value=cfg.class_fraction_max, row_condition=_present()), "fraction"),
    ]
    for key, item in enumerate(out):
        item.gx.meta = {"check": item.check, "key": key}
    return out


def _present() -> Any:
    from great_expectations.expectations.row_conditions import Column

    return Column("count") > 0


def run_suites(summaries: Mapping[str, SplitSummary], metas: Mapping[str, SplitMeta],
               cfg: ValidateConfig) -> list[CheckResult]:
    """Validate all summarised splits at once; one ``CheckResult`` per check and split."""
    if not summaries:
        return []
    gx = gx_module()
    context = ephemeral_context(gx)
    source = context.data_sources.add_pandas("leakpipe")
    tables = {FILES_TABLE: files_table(summaries, metas),
              CLASSES_TABLE: pd.concat([class_table(metas[s], summary.frame, cfg)
                                        for s, summary in summaries.items()],
                                       ignore_index=True)}
    expectations = build_expectations(gx, cfg)
    outcomes: list[tuple[Expectation, Any]] = []
    for table, frame in tables.items():
        chosen = [e for e in expectations if e.table == table]
        batch = source.add_dataframe_asset(table).add_batch_definition_whole_dataframe("all")
        suite = context.suites.add(gx.ExpectationSuite(name=table,
                                                       expectations=[e.gx for e in chosen]))
        definition = context.validation_definitions.add(
            gx.ValidationDefinition(name=table, data=batch, suite=suite))
        result = definition.run(batch_parameters={"dataframe": frame},
                                result_format={"result_format": "COMPLETE"})
        by_key = {r.expectation_config.meta["key"]: r for r in result.results}
        outcomes += [(e, by_key[e.gx.meta["key"]]) for e in chosen]
    return [_check_for_split(check, split, outcomes, tables, cfg)
            for check in dict.fromkeys(e.check for e, _ in outcomes) for split in summaries]


# -- results -------------------------------------------------------------------------------


def _offending(result: Any, frame: pd.DataFrame, split: str) -> list[int]:
    """Indices into the combined table of ``split``'s offending rows."""
    indices = (result.result or {}).get("unexpected_index_list") or []
    mine = frame["split"].to_numpy()[np.asarray(indices, dtype=np.int64)] == split \
        if indices else np.zeros(0, bool)
    return [int(i) for i, ok in zip(indices, mine, strict=True) if ok]


def _check_for_split(check: str, split: str, outcomes: list[tuple[Expectation, Any]],
                     tables: Mapping[str, pd.DataFrame], cfg: ValidateConfig) -> CheckResult:
    """Merge the outcomes of ``check``'s expectations, restricted to ``split``'s rows."""
    mine = [(e, r) for e, r in outcomes if e.check == check]
    item = mine[0][0]
    frame = tables[item.table]
    kinds = ",".join(dict.fromkeys(r.expectation_config.type for _, r in mine))
    errors = [(r.exception_info or {}).get("exception_message") for _, r in mine]
    errors = [e for e in errors if e]
    if errors:
        return _with_type(failed(check, split, KIND_EXPECTATION,
                                 f"expectation error: {errors[0]}"), kinds)
    indices = sorted({i for _, r in mine for i in _offending(r, frame, split)})
    rows_in_split = int((frame["split"] == split).sum())
    if not indices:
        return _with_type(passed(check, split, KIND_EXPECTATION,
                                 observed={"unexpected_count": 0, "element_count": rows_in_split}),
                          kinds)
    offending = frame.loc[indices]
    if item.table == CLASSES_TABLE:
        return _with_type(_class_failure(check, split, offending, cfg), kinds)
    values = [_plain(v) for v in offending[item.column].head(cfg.max_listed)]
    observed = {"unexpected_count": len(indices), "element_count": rows_in_split,
                "unexpected_values": values}
    rows = offending["row"].astype(int).tolist()
    examples = [{"row": int(r.row), "recording_id": str(r.recording_id),
                 item.column: _plain(getattr(r, item.column))}
                for r in offending.head(cfg.max_listed).itertuples()]
    return _with_type(failed(check, split, KIND_EXPECTATION,
                             _file_message(check, len(indices), rows_in_split, values, cfg),
                             observed=observed, rows=rows, examples=examples,
                             limit=cfg.max_listed), kinds)


def _with_type(check: CheckResult, kind: str) -> CheckResult:
    return dataclasses.replace(check, expectation=kind)


def _plain(value: Any) -> Any:
    """numpy scalars and tuples -> JSON-ready Python values."""
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _file_message(check: str, count: int, total: int, values: list[Any],
                  cfg: ValidateConfig) -> str:
    shown = values[:3]
    explain = {
        "finite_values": "hold NaN or inf values",
        "value_min": f"have values below {cfg.value_min:g} dB (min {shown})",
        "value_max": f"have values above {cfg.value_max:g} dB (max {shown})",
        "labels_known": f"have labels outside class_names {shown}",
        "not_constant": f"are constant (spread <= {cfg.constant_tol:g} dB)",
        "not_all_zero": "are all zeros",
        "shape_consistent": f"have shape {shown}, not the feature config's",
    }
    return f"{count} of {total} files {explain.get(check, 'fail')}"


def _class_failure(check: str, split: str, offending: pd.DataFrame,
                   cfg: ValidateConfig) -> CheckResult:
    examples = [{"class": str(c.class_name), "count": int(c.count),
                 "fraction": round(float(c.fraction), 4), "recordings": int(c.recordings),
                 "groups": int(c.groups)} for c in offending.itertuples()]
    if check == "classes_present":
        parts = [f"class {e['class']} has {e['count']} file(s)" for e in examples]
        message = f"{'; '.join(parts)}; needs >= {cfg.min_files_per_class}"
    elif check == "recordings_present":
        parts = [f"class {e['class']} has {e['recordings']} recording(s) ({e['count']} file(s), "
                 f"{e['groups']} group(s))" for e in examples]
        message = f"{'; '.join(parts)}; needs >= {cfg.min_recordings_per_class} recordings"
    else:
        parts = [f"class {e['class']} is {e['fraction']:.1%} of the files" for e in examples]
        message = (f"{'; '.join(parts)}; bounds [{cfg.class_fraction_min:.1%}, "
                   f"{cfg.class_fraction_max:.1%}]")
    return failed(check, split, KIND_EXPECTATION, message,
                  observed={"classes": [e["class"] for e in examples]},
                  n_offending=len(examples), examples=examples, limit=cfg.max_listed)

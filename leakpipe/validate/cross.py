"""Checks between splits: same contract everywhere, and nothing shared that leaks labels.

Splits are compared in order (train, val, test): each later split is checked against every
earlier one, and offending rows are reported in the later split (the one to fix or rebuild).
Duplicate content is found by the per-row fingerprint of the summary and then confirmed
byte for byte, so a fingerprint collision can never fail a run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import h5py
import numpy as np

from leakpipe.constants import H5_MEL
from leakpipe.validate.results import KIND_CROSS, CheckResult, failed, passed
from leakpipe.validate.structure import SplitMeta
from leakpipe.validate.summary import SplitSummary

VERIFY_ROWS_PER_READ = 256


def cross_split_checks(metas: Mapping[str, SplitMeta], summaries: Mapping[str, SplitSummary],
                       limit: int) -> list[CheckResult]:
    """Every cross-split check for every split after the first."""
    order = list(metas)
    out: list[CheckResult] = []
    for i, split in enumerate(order[1:], start=1):
        earlier = order[:i]
        out += _same_attribute(metas, split, earlier, "class_names_match", "class_names",
                               lambda m: list(m.class_names) if m.class_names else None)
        out += _same_attribute(metas, split, earlier, "feature_config_match", "feature config",
                               lambda m: m.feature_dict)
        out += _same_attribute(metas, split, earlier, "mel_dtype_match", "mel dtype",
                               lambda m: m.mel_dtype)
        done = [s for s in earlier if s in summaries]
        if split in summaries and done:
            out.append(_disjoint(summaries, split, done, "recording_id", "recordings_disjoint",
                                 "recording", limit))
            out.append(_disjoint(summaries, split, done, "group", "groups_disjoint", "group",
                                 limit))
            out.append(_duplicates(metas, summaries, split, done, limit))
    return out


def _same_attribute(metas: Mapping[str, SplitMeta], split: str, earlier: list[str], check: str,
                    what: str, get: Callable[[SplitMeta], Any]) -> list[CheckResult]:
    mine = get(metas[split])
    if mine is None:
        return []  # already failed its structural check
    for other in earlier:
        theirs = get(metas[other])
        if theirs is not None and theirs != mine:
            return [failed(check, split, KIND_CROSS,
                           f"{what} differs from {other}'s: {_difference(theirs, mine)}",
                           observed={split: mine, other: theirs})]
    return [passed(check, split, KIND_CROSS, observed=mine)]


def _difference(theirs: Any, mine: Any) -> str:
    if isinstance(theirs, dict) and isinstance(mine, dict):
        keys = sorted(set(theirs) | set(mine), key=str)
        diffs = [f"{k} {mine.get(k)!r} vs {theirs.get(k)!r}" for k in keys
                 if theirs.get(k) != mine.get(k)]
        return ", ".join(diffs)
    return f"{mine!r} vs {theirs!r}"


def _disjoint(summaries: Mapping[str, SplitSummary], split: str, earlier: list[str],
              column: str, check: str, what: str, limit: int) -> CheckResult:
    values = summaries[split].frame[column].to_numpy(dtype=object)
    shared_with: dict[str, set] = {}
    hit = np.zeros(len(values), dtype=bool)
    for other in earlier:
        # a hash set: np.isin on object (string) arrays would compare every pair
        seen = set(summaries[other].frame[column].to_numpy(dtype=object))
        common = np.fromiter(map(seen.__contains__, values), dtype=bool, count=len(values))
        if common.any():
            shared_with[other] = set(values[common])
            hit |= common
    if not hit.any():
        return passed(check, split, KIND_CROSS, observed=0)
    rows = np.flatnonzero(hit)
    names = sorted(set().union(*shared_with.values()))
    where = ", ".join(sorted(shared_with))
    return failed(check, split, KIND_CROSS,
                  f"{len(names)} {what}(s) also in {where}, e.g. {names[:3]}",
                  observed=len(names), rows=rows, limit=limit,
                  examples=[{"row": int(r), column: str(values[r])} for r in rows[:limit]])


def _duplicates(metas: Mapping[str, SplitMeta], summaries: Mapping[str, SplitSummary],
                split: str, earlier: list[str], limit: int) -> CheckResult:
    mine = summaries[split].fingerprints
    rows: list[int] = []
    examples: list[dict[str, Any]] = []
    for other in earlier:
        theirs = summaries[other].fingerprints
        candidates = np.flatnonzero(np.isin(mine, theirs))
        if not candidates.size:
            continue
        first = _first_index(theirs)
        pairs = [(int(r), first[int(mine[r])]) for r in candidates]
        for row, other_row in _confirmed(metas[split], metas[other], pairs):
            rows.append(row)
            examples.append({"row": row, "same_as": f"{other}[{other_row}]"})
    if not rows:
        return passed("no_duplicate_content", split, KIND_CROSS, observed=0)
    others = sorted({e["same_as"].split("[")[0] for e in examples})
    return failed("no_duplicate_content", split, KIND_CROSS,
                  f"{len(rows)} file(s) identical to files in {', '.join(others)}, "
                  f"e.g. {examples[0]['same_as']}", observed=len(rows), rows=sorted(rows),
                  examples=sorted(examples, key=lambda e: e["row"]), limit=limit)


def content_in_one_group(metas: Mapping[str, SplitMeta], summaries: Mapping[str, SplitSummary],
                         limit: int) -> CheckResult:
    """No content under two groups anywhere in the splits, one split included: cross-validation
    pools the splits and cuts folds by group, so one audio filed under two sites (a WAV and its
    FLAC copy) could be trained on in one fold and tested in another. Not one of `validate`'s
    checks (a split may hold such rows without a leak between splits)."""
    first: dict[int, tuple[str, int, str]] = {}       # fingerprint -> (split, row, group)
    pairs: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for split, summary in summaries.items():
        groups = summary.frame["group"].to_numpy(dtype=object)
        for row, value in enumerate(summary.fingerprints.tolist()):
            other = first.setdefault(value, (split, row, groups[row]))
            if other[2] != groups[row]:
                pairs.setdefault((split, other[0]), []).append((row, other[1]))
    found = [(split, row, other, other_row) for (split, other), candidates in pairs.items()
             for row, other_row in _confirmed(metas[split], metas[other], candidates)]
    check, where = "content_in_one_group", next(iter(summaries), "")
    if not found:
        return passed(check, where, KIND_CROSS, observed=0)
    split, row, other, other_row = found[0]
    mine = [(r, f"{o}[{o_row}]") for s, r, o, o_row in found if s == split]
    return failed(check, split, KIND_CROSS,
                  f"{len(found)} file(s) identical to a file of another group, e.g. "
                  f"{split}[{row}] (group {_group(summaries, split, row)!r}) = "
                  f"{other}[{other_row}] (group {_group(summaries, other, other_row)!r})",
                  observed=len(found), rows=[r for r, _ in mine], limit=limit,
                  examples=[{"row": r, "same_as": same} for r, same in mine])


def _group(summaries: Mapping[str, SplitSummary], split: str, row: int) -> str:
    return str(summaries[split].frame["group"].iloc[row])


def _first_index(fingerprints: np.ndarray) -> dict[int, int]:
    """fingerprint -> first row holding it."""
    out: dict[int, int] = {}
    for row, value in enumerate(fingerprints.tolist()):
        out.setdefault(value, row)
    return out


def _confirmed(mine: SplitMeta, theirs: SplitMeta,
               pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The (row, other_row) pairs whose bytes are really identical."""
    out = []
    with h5py.File(mine.path, "r") as a, h5py.File(theirs.path, "r") as b:
        for start in range(0, len(pairs), VERIFY_ROWS_PER_READ):
            batch = pairs[start:start + VERIFY_ROWS_PER_READ]
            left = _read_rows(a[H5_MEL], [p[0] for p in batch])
            right = _read_rows(b[H5_MEL], [p[1] for p in batch])
            for (row, other_row), x, y in zip(batch, left, right, strict=True):
                if x.tobytes() == y.tobytes():
                    out.append((row, other_row))
    return out


def _read_rows(mel: h5py.Dataset, rows: list[int]) -> list[np.ndarray]:
    """Rows in the order given (h5py needs increasing, distinct indices)."""
    unique = sorted(set(rows))
    block = mel[unique]
    where = {row: i for i, row in enumerate(unique)}
    return [block[where[row]] for row in rows]

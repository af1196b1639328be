"""Group-bys over numpy columns: the few the cross-rank analysis needs, without pandas.

Groups are numbered ``0..n-1`` by where they first appear (as pandas' ``factorize`` and
``groupby(sort=False).ngroup()`` number them), so results come out in the same order as
the pandas code they replace. Keys are integer (or string, for :func:`factorize`) columns
without missing values.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np


def factorize(values: Iterable[Any]) -> np.ndarray:
    """Codes in the order of first appearance (as ``pandas.factorize`` numbers them)."""
    seen: dict[Any, int] = {}
    vals = values.tolist() if isinstance(values, np.ndarray) else list(values)
    return np.array([seen.setdefault(v, len(seen)) for v in vals], dtype=np.int64)


def groups(*keys: np.ndarray) -> tuple[np.ndarray, int]:
    """Per row, the id of its group of equal ``keys`` (numbered by first appearance), and
    the number of groups."""
    n = len(keys[0]) if keys else 0
    if n == 0:
        return np.empty(0, dtype=np.int64), 0
    if len(keys) == 1 and keys[0].dtype.kind in "iub":
        uniq, first, inverse = np.unique(keys[0], return_index=True, return_inverse=True)
        rank = np.empty(uniq.size, dtype=np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(uniq.size)
        return rank[inverse.reshape(-1)], int(uniq.size)
    order = np.lexsort(keys[::-1])  # stable: the first of each run is its earliest row
    new = np.zeros(n, dtype=bool)
    new[0] = True
    for k in keys:
        s = k[order]
        new[1:] |= s[1:] != s[:-1]
    sorted_id = np.cumsum(new) - 1
    first = order[new]
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    out = np.empty(n, dtype=np.int64)
    out[order] = rank[sorted_id]
    return out, int(first.size)


def runs(sorted_keys: Iterable[np.ndarray], n: int) -> np.ndarray:
    """For rows already sorted by ``sorted_keys``, True where a new run of equal keys starts."""
    new = np.zeros(n, dtype=bool)
    if n:
        new[0] = True
    for k in sorted_keys:
        new[1:] |= k[1:] != k[:-1]
    return new


def cumcount(new_run: np.ndarray) -> np.ndarray:
    """Position of each row within its run (``new_run`` marks where runs start)."""
    idx = np.arange(new_run.size, dtype=np.int64)
    return idx - np.maximum.accumulate(np.where(new_run, idx, 0))


def size(ids: np.ndarray, n: int) -> np.ndarray:
    """Rows per group."""
    return np.bincount(ids, minlength=n).astype(np.int64)


def total(ids: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Sum of ``values`` per group (0 for a group without rows), correctly rounded
    (``math.fsum``: pandas' group sums are compensated, a plain running sum is not)."""
    out = np.zeros(n)
    if ids.size == 0:
        return out
    order = np.argsort(ids, kind="stable")
    v = np.asarray(values, dtype=np.float64)[order]
    cut = np.flatnonzero(np.diff(ids[order])) + 1
    starts = np.concatenate(([0], cut))
    for g, chunk in zip(ids[order][starts].tolist(), np.split(v, cut)):
        out[g] = math.fsum(chunk.tolist())
    return out


def maximum(ids: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Largest value per group (-inf for a group without rows)."""
    out = np.full(n, -np.inf)
    np.maximum.at(out, ids, values)
    return out


def median(ids: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Median of ``values`` per group (NaN for a group without rows): the middle value, or
    the mean of the two middle ones."""
    out = np.full(n, np.nan)
    if ids.size == 0:
        return out
    order = np.lexsort((values, ids))
    v = np.asarray(values, dtype=np.float64)[order]
    count = np.bincount(ids, minlength=n)
    start = np.concatenate(([0], np.cumsum(count)[:-1]))
    has = count > 0
    lo = (start + (count - 1) // 2)[has]
    hi = (start + count // 2)[has]
    out[has] = (v[lo] + v[hi]) / 2.0
    return out


def nunique(ids: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Distinct ``values`` (integers) per group."""
    if ids.size == 0:
        return np.zeros(n, dtype=np.int64)
    pairs = np.unique(np.stack((ids, np.asarray(values, dtype=np.int64))), axis=1)
    return np.bincount(pairs[0], minlength=n).astype(np.int64)


def is_in(values: np.ndarray, choices: np.ndarray) -> np.ndarray:
    """``np.isin(values, choices)``; for a few choices (a rank's launching threads) one
    comparison each, several times faster over a large host table."""
    if choices.size > 8:
        return np.isin(values, choices)
    out = np.zeros(values.shape, dtype=bool)
    for c in choices.tolist():
        out |= values == c
    return out


def by_start(start: np.ndarray, then: np.ndarray) -> np.ndarray:
    """``np.lexsort((then, start))``: rows by start, equal starts by ``then``, ties in row
    order. The rank's tables are sorted by start already, so only the runs of equal starts
    are sorted (a full two-key sort of a 200 MB rank's host rows takes ~15 ms); any other
    order is sorted in full."""
    n = start.size
    if n < 2:
        return np.arange(n, dtype=np.intp)
    step = np.diff(start)
    if not bool((step >= 0).all()):  # unsorted (or NaN): the general sort
        return np.lexsort((then, start))
    order = np.arange(n, dtype=np.intp)
    tie = step == 0
    if not tie.any():
        return order
    in_run = np.zeros(n, dtype=bool)
    in_run[:-1] |= tie
    in_run[1:] |= tie
    rows = np.flatnonzero(in_run)
    run = np.cumsum(np.concatenate(([True], ~tie)))[rows]
    order[rows] = rows[np.lexsort((then[rows], run))]
    return order

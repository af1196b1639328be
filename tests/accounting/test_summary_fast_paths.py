"""The per-rank summary's faster paths give exactly what the plain numpy calls gave
(issue 22): ordering rows already sorted by start, membership in a few values, a start
inside each range, each thread's first row."""

from __future__ import annotations

import numpy as np

from gpuprof.accounting.enclosing import _ByThread
from gpuprof.accounting.graph_host import _holds_a_start
from gpuprof.model import grouping


def test_by_start_orders_rows_as_lexsort_does() -> None:
    """Sorted starts with runs of ties (the tables' own order), unsorted ones and NaN: the
    same order as the full two-key sort, ties in row order."""
    rng = np.random.default_rng(4)
    for trial in range(300):
        n = int(rng.integers(0, 60))
        start = np.sort(rng.integers(0, max(n // 3, 1) + 1, n).astype(np.float64))
        then = rng.integers(-3, 3, n).astype(np.float64)
        if trial % 4 == 1:
            start = rng.permutation(start)
        if trial % 7 == 2 and n:
            start[int(rng.integers(n))] = np.nan
        if trial % 5 == 3 and n:
            then[int(rng.integers(n))] = np.nan
        assert grouping.by_start(start, then).tolist() == np.lexsort((then, start)).tolist(), trial


def test_is_in_is_isin() -> None:
    rng = np.random.default_rng(5)
    for k in (0, 1, 2, 5, 8, 9, 30):
        values = rng.integers(0, 40, 500)
        choices = rng.choice(40, size=k, replace=False)
        assert np.array_equal(grouping.is_in(values, choices), np.isin(values, choices)), k


def test_a_start_inside_each_range_as_two_searches_count_it() -> None:
    rng = np.random.default_rng(6)
    for trial in range(200):
        starts = np.sort(rng.integers(0, 50, int(rng.integers(0, 20))).astype(np.float64))
        lo = rng.integers(0, 55, 40).astype(np.float64)
        hi = lo + rng.integers(-3, 10, 40)  # some empty or inverted ranges
        want = (np.searchsorted(starts, hi, "left") - np.searchsorted(starts, lo, "left")) > 0
        assert _holds_a_start(starts, lo, hi).tolist() == want.tolist(), trial


def test_rows_by_thread_find_each_thread_as_unique_does() -> None:
    rng = np.random.default_rng(7)
    for trial in range(100):
        n = int(rng.integers(0, 80))
        hs = np.sort(rng.integers(0, 30, n).astype(np.float64))
        htid = rng.choice([3, 7, 7, 11, 2**40], size=n)
        rows = np.flatnonzero(rng.random(n) < 0.7)
        by = _ByThread(rows, hs, htid)
        tids, first = np.unique(htid[by.rows], return_index=True)
        assert by.tids.tolist() == tids.tolist() and by.first.tolist() == first.tolist(), trial
        assert by.last.tolist() == np.concatenate((first[1:], [by.rows.size])).tolist(), trial

"""Interval arithmetic: hand-checked cases and a brute-force comparison on an integer grid."""

from __future__ import annotations

import numpy as np
import pytest

from gpuprof.analysis import intervals as iv


def _set(iv_: iv.Intervals) -> list[tuple[float, float]]:
    return list(zip(iv_[0].tolist(), iv_[1].tolist()))


def test_union_merges_overlapping_and_touching_and_drops_empty() -> None:
    got = iv.union([5, 0, 2, 10, 20], [6, 3, 4, 12, 20])
    assert _set(got) == [(0.0, 4.0), (5.0, 6.0), (10.0, 12.0)]


def test_complement_within_bounds() -> None:
    got = iv.complement(iv.make([1, 5], [2, 20]), 0, 10)
    assert _set(got) == [(0.0, 1.0), (2.0, 5.0)]
    assert _set(iv.complement(iv.empty(), 3, 4)) == [(3.0, 4.0)]


def test_intersect_and_subtract() -> None:
    a = iv.make([0, 10], [5, 20])
    b = iv.make([3, 12, 18], [11, 14, 30])
    assert _set(iv.intersect(a, b)) == [(3.0, 5.0), (10.0, 11.0), (12.0, 14.0), (18.0, 20.0)]
    assert _set(iv.subtract(a, b)) == [(0.0, 3.0), (11.0, 12.0), (14.0, 18.0)]
    assert _set(iv.subtract(a, iv.empty())) == _set(a)
    assert _set(iv.intersect(a, iv.empty())) == []


def test_overlap_with_each_keeps_query_order() -> None:
    got = iv.overlap_with_each(iv.make([10, 0, 4], [20, 5, 6]), iv.make([2, 15], [5, 30]))
    assert got.tolist() == [5.0, 3.0, 1.0]


@pytest.mark.parametrize("seed", range(5))
def test_against_brute_force_grid(seed: int) -> None:
    rng = np.random.default_rng(seed)

    def rand(n: int) -> iv.Intervals:
        s = rng.integers(0, 100, n)
        return iv.make(s, s + rng.integers(0, 15, n))

    def grid(x: iv.Intervals) -> np.ndarray:
        m = np.zeros(130, dtype=bool)
        for s, e in zip(*x):
            m[int(s) : int(e)] = True
        return m

    a, b = rand(20), rand(15)
    ga, gb = grid(a), grid(b)
    assert iv.total(iv.union(*a)) == ga.sum()
    assert iv.total(iv.intersect(a, b)) == (ga & gb).sum()
    assert iv.total(iv.subtract(a, b)) == (ga & ~gb).sum()
    assert iv.total(iv.complement(a, 10, 90)) == (~ga[10:90]).sum()
    np.testing.assert_array_equal(
        iv.overlap_with_each(a, b), [(gb[int(s) : int(e)]).sum() for s, e in zip(*a)]
    )

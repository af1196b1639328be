"""Interval arithmetic: hand-checked cases and a brute-force comparison on an integer grid."""

from __future__ import annotations

import numpy as np
import pytest

from gpuprof.model import intervals as iv


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


def _union_ref(starts: np.ndarray, ends: np.ndarray) -> iv.Intervals:
    """The sort-and-sweep union without the shortcut for sets already normalized."""
    s, e = iv.make(starts, ends)
    if s.size <= 1:
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    new = np.concatenate(([True], s[1:] > run_end[:-1]))
    idx = np.flatnonzero(new)
    last = np.concatenate((idx[1:] - 1, [s.size - 1]))
    return s[idx], run_end[last]


def test_shortcuts_give_the_sets_of_the_general_path_to_the_bit() -> None:
    # union skips the sweep for a set already normalized, subtract intersects with the gaps
    # of the subtracted set directly: both must give exactly what the general path gives.
    rng = np.random.default_rng(11)
    for _ in range(400):
        n, m = int(rng.integers(0, 12)), int(rng.integers(0, 12))
        grid = rng.choice([0.5, 1.0, 3.0])
        a_s = np.round(rng.uniform(0, 40, n) / grid) * grid
        a_e = a_s + np.round(rng.uniform(-1, 8, n) / grid) * grid
        b_s = np.round(rng.uniform(0, 40, m) / grid) * grid
        b_e = b_s + np.round(rng.uniform(-1, 8, m) / grid) * grid
        for s, e in ((a_s, a_e), (b_s, b_e)):
            got, ref = iv.union(s, e), _union_ref(s, e)
            assert np.array_equal(got[0], ref[0]) and np.array_equal(got[1], ref[1])
            again = iv.union(*ref)  # normalized input: the shortcut
            assert np.array_equal(again[0], ref[0]) and np.array_equal(again[1], ref[1])
        a, b = _union_ref(a_s, a_e), _union_ref(b_s, b_e)
        got = iv.subtract((a_s, a_e), (b_s, b_e))
        if a[0].size == 0:
            ref = iv.empty()
        elif b[0].size == 0:
            ref = a
        else:
            lo, hi = float(min(a[0][0], b[0][0])), float(max(a[1][-1], b[1][-1]))
            ref = iv.intersect(a, iv.complement(b, lo, hi))
        assert np.array_equal(got[0], ref[0]) and np.array_equal(got[1], ref[1])

"""Vectorized interval arithmetic on half-open intervals ``[start, end)`` in microseconds.

An interval set is a pair of float64 numpy arrays ``(starts, ends)``. Functions that say
they return a *normalized* set return sorted, non-overlapping, non-empty intervals; every
function accepts unnormalized input unless it says otherwise. Nothing here mutates its
arguments.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
Intervals = Tuple[FloatArray, FloatArray]


def empty() -> Intervals:
    return np.empty(0, dtype=np.float64), np.empty(0, dtype=np.float64)


def make(starts: npt.ArrayLike, ends: npt.ArrayLike) -> Intervals:
    """Intervals from array-likes, dropping empty or inverted ones (not normalized)."""
    s = np.asarray(starts, dtype=np.float64)
    e = np.asarray(ends, dtype=np.float64)
    keep = e > s
    return s[keep], e[keep]


def union(starts: npt.ArrayLike, ends: npt.ArrayLike) -> Intervals:
    """Merge overlapping or touching intervals; returns a normalized set. O(n log n)."""
    s, e = make(starts, ends)
    if s.size <= 1:
        return s, e
    if (s[1:] > e[:-1]).all():  # sorted, disjoint and apart already (most calls): as below
        return s, e
    if not (s[1:] >= s[:-1]).all():  # most callers pass rows already sorted by start
        order = np.argsort(s, kind="stable")
        s = s[order]
        e = e[order]
    run_end = np.maximum.accumulate(e)
    # A new merged interval starts where the start is beyond everything seen so far.
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    np.greater(s[1:], run_end[:-1], out=new[1:])
    idx = np.flatnonzero(new)
    if idx.size == s.size:  # nothing to merge (run_end == e)
        return s, e
    out_s = s[idx]
    last = np.empty(idx.size, dtype=np.intp)
    last[:-1] = idx[1:] - 1
    last[-1] = s.size - 1
    return out_s, run_end[last]


def normalize(iv: Intervals) -> Intervals:
    return union(iv[0], iv[1])


def total(iv: Intervals) -> float:
    """Summed length of a normalized set (for an unnormalized one, overlaps count twice)."""
    return float(np.sum(iv[1] - iv[0])) if iv[0].size else 0.0


def clip(iv: Intervals, lo: float, hi: float) -> Intervals:
    """Restrict to ``[lo, hi)``."""
    s = np.maximum(iv[0], lo)
    e = np.minimum(iv[1], hi)
    return make(s, e)


def complement(iv: Intervals, lo: float, hi: float) -> Intervals:
    """The parts of ``[lo, hi)`` not covered by ``iv``; returns a normalized set."""
    s, e = normalize(clip(iv, lo, hi))
    if s.size == 0:
        return make([lo], [hi])
    gap_s = np.concatenate(([lo], e))
    gap_e = np.concatenate((s, [hi]))
    return make(gap_s, gap_e)


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """Intersection of two sets; returns a normalized set. O((n + m) log(n + m))."""
    (a_s, a_e), (b_s, b_e) = _normalized_operands(a, b)
    if a_s.size == 0 or b_s.size == 0:
        return empty()
    return _intersect_normalized(a_s, a_e, b_s, b_e)


def _normalized_operands(a: Intervals, b: Intervals) -> tuple[Intervals, Intervals]:
    """``a`` and ``b`` normalized, for :func:`intersect` and :func:`subtract`; ``b`` is left
    unread (empty) when ``a`` is empty, since neither then needs it."""
    a_n = normalize(a)
    return a_n, (normalize(b) if a_n[0].size else empty())


def _intersect_normalized(
    a_s: FloatArray, a_e: FloatArray, b_s: FloatArray, b_e: FloatArray
) -> Intervals:
    """:func:`intersect` of two normalized, non-empty sets."""
    # Both normalized (sorted, disjoint, apart): interval i of a overlaps the intervals of b
    # from the first that ends after it starts to the last that starts before it ends. Each
    # overlapping pair gives one piece; in that order the pieces are sorted and apart.
    first = np.searchsorted(b_e, a_s, side="right")
    stop = np.searchsorted(b_s, a_e, side="left")
    count = np.maximum(stop - first, 0)
    total_pairs = int(count.sum())
    if total_pairs == 0:
        return empty()
    ia = np.repeat(np.arange(a_s.size), count)
    # j runs from first[i] to stop[i] - 1 within each i.
    offsets = np.cumsum(count) - count
    jb = np.arange(total_pairs) - np.repeat(offsets, count) + np.repeat(first, count)
    out_s = np.maximum(a_s[ia], b_s[jb])
    out_e = np.minimum(a_e[ia], b_e[jb])
    keep = out_e > out_s
    if not keep.all():
        out_s, out_e = out_s[keep], out_e[keep]
    return out_s, out_e


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """The parts of ``a`` not covered by ``b``; returns a normalized set."""
    (a_s, a_e), (b_s, b_e) = _normalized_operands(a, b)
    if a_s.size == 0:
        return empty()
    if b_s.size == 0:
        return a_s, a_e
    lo = float(min(a_s[0], b_s[0]))
    hi = float(max(a_e[-1], b_e[-1]))
    # complement((b_s, b_e), lo, hi) of a normalized set inside [lo, hi]: its gaps, already
    # normalized, so neither needs normalizing again.
    gap_s, gap_e = make(np.concatenate(([lo], b_e)), np.concatenate((b_s, [hi])))
    if gap_s.size == 0:
        return empty()
    return _intersect_normalized(a_s, a_e, gap_s, gap_e)


def overlap_with_each(query: Intervals, cover: Intervals) -> FloatArray:
    """For each interval of ``query`` (any order), how much of it ``cover`` covers.

    ``cover`` is normalized internally. O((n + m) log m).
    """
    q_s = np.asarray(query[0], dtype=np.float64)
    q_e = np.asarray(query[1], dtype=np.float64)
    c_s, c_e = normalize(cover)
    if q_s.size == 0:
        return np.empty(0, dtype=np.float64)
    if c_s.size == 0:
        return np.zeros(q_s.size, dtype=np.float64)
    # Prefix sums of covered length let us measure coverage of [0, x) for any x.
    cum = np.concatenate(([0.0], np.cumsum(c_e - c_s)))

    def covered_before(x: FloatArray) -> FloatArray:
        i = np.searchsorted(c_s, x, side="right")  # intervals starting at or before x
        full = cum[np.maximum(i - 1, 0)]
        last_s = c_s[np.maximum(i - 1, 0)]
        last_e = c_e[np.maximum(i - 1, 0)]
        partial = np.clip(np.minimum(x, last_e) - last_s, 0.0, None)
        return np.where(i > 0, full + partial, 0.0)

    return np.clip(covered_before(q_e) - covered_before(q_s), 0.0, None)

"""Change points in a history of runs: where the step time moved and stayed.

Pure: the runs' median steps in, :class:`ChangePoint`\\ s out. The unit is the run (its
median step, on a log scale), because run-to-run noise, which steps of one run cannot
show, is what a history has to see past.

Binary segmentation with a permutation test, in the spirit of E-divisive (Matteson and
James) as Hunter/Otava use it, on the mean of the log medians:

1. in a segment of at least ``2 * min_runs`` runs, every split leaving ``min_runs`` runs
   on each side gets the standardized difference of the two sides' means
   ``|mean_left - mean_right| * sqrt(n_left * n_right / n)`` (the CUSUM statistic); the
   split with the largest is the candidate, provided the runs on either side of it sit
   nearer their own side's level than the other's;
2. the candidate is a split when that largest statistic is rarely reached by the same
   runs in random order (``n_perm`` permutations from a fixed seed, so the answer is the
   same every time: p <= 1 - confidence; with three runs after a change, that takes about
   a dozen before it at 99 %: a permutation test cannot be surer than its arrangements);
3. the two sides are searched again, until no segment splits;
4. a split is a change point when the step changed by at least the floor
   ``min_effect_pct`` between its neighbouring segments (the ratio of their geometric
   means); the smallest change under the floor is dropped first and its neighbours, now
   one segment, are measured again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

MIN_RUNS = 3  # runs on each side of a change point
N_PERM = 499


@dataclass(frozen=True)
class ChangePoint:
    """The step changed at run ``index`` (0-based, the first run of the new level):
    ``before_ms`` / ``after_ms`` are the geometric means of the neighbouring segments'
    median steps, ``change_pct`` the change (positive: slower), ``p_value`` the
    permutation test's."""

    index: int
    before_ms: float
    after_ms: float
    change_pct: float
    p_value: float


def _best_split(seg: npt.NDArray[np.float64], min_runs: int) -> tuple[int, float] | None:
    """The split (index within ``seg``) with the largest statistic, and that statistic;
    ``None`` when the runs at the split sit nearer the other side's level (the split is
    where it is only because a side needs ``min_runs`` runs: two slow runs after a steady
    series are not three)."""
    stats = _split_stats(seg[None, :], min_runs)[0]
    k = int(np.argmax(stats)) + min_runs
    left, right = float(seg[:k].mean()), float(seg[k:].mean())
    if abs(seg[k] - right) > abs(seg[k] - left) or abs(seg[k - 1] - left) > abs(seg[k - 1] - right):
        return None
    return k, float(stats[k - min_runs])


def _split_stats(rows: npt.NDArray[np.float64], min_runs: int) -> npt.NDArray[np.float64]:
    """For each row, the statistic of every split t = min_runs .. n - min_runs."""
    n = rows.shape[1]
    csum = np.cumsum(rows, axis=1)
    total = csum[:, -1:]
    t = np.arange(min_runs, n - min_runs + 1)
    left = csum[:, t - 1] / t
    right = (total - csum[:, t - 1]) / (n - t)
    return np.abs(left - right) * np.sqrt(t * (n - t) / n)


def change_points(
    median_ms: Sequence[float],
    *,
    confidence: float = 0.99,
    min_effect_pct: float = 5.0,
    min_runs: int = MIN_RUNS,
    n_perm: int = N_PERM,
    seed: int = 0,
) -> list[ChangePoint]:
    """The change points of a series of runs' median steps (ms, > 0), in run order
    (module docstring)."""
    logs = np.log(np.asarray(median_ms, dtype=np.float64))
    found: dict[int, float] = {}
    todo = [(0, logs.size)]
    while todo:
        a, b = todo.pop()
        seg = logs[a:b]
        if seg.size < 2 * min_runs:
            continue
        best = _best_split(seg, min_runs)
        if best is None or best[1] <= 0.0:
            continue
        k, observed = best
        rng = np.random.default_rng(seed + a)
        perms = np.array([rng.permutation(seg) for _ in range(n_perm)])
        reached = int(np.count_nonzero(_split_stats(perms, min_runs).max(axis=1) >= observed - 1e-12))
        p = (1 + reached) / (n_perm + 1)
        if p > 1.0 - confidence:
            continue
        found[a + k] = p
        todo += [(a, a + k), (a + k, b)]
    # The floor, once the splits are known (a level that rises and falls back is found by
    # its two splits even when neither half alone moves the mean past the floor): the
    # smallest change under the floor goes first, and its neighbours are measured again.
    while True:
        points = _measured(logs, sorted(found), found)
        small = [c for c in points if abs(c.change_pct) < min_effect_pct]
        if not small:
            return points
        del found[min(small, key=lambda c: abs(c.change_pct)).index]


def _measured(logs: npt.NDArray[np.float64], at: list[int], p_values: dict[int, float]) -> list[ChangePoint]:
    bounds = [0, *at, logs.size]
    out = []
    for j, i in enumerate(at):
        before = float(np.exp(logs[bounds[j] : i].mean()))
        after = float(np.exp(logs[i : bounds[j + 2]].mean()))
        out.append(ChangePoint(i, before, after, 100.0 * (after / before - 1.0), p_values[i]))
    return out


def segments(n_runs: int, points: Sequence[ChangePoint]) -> list[tuple[int, int]]:
    """The stable segments ``[start, end)`` between change points, in order."""
    bounds = [0, *(c.index for c in points), n_runs]
    return [(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1) if bounds[i + 1] > bounds[i]]

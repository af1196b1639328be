"""Analysis cost does not grow with the square of the streams (issue 33, item 9).

One kernel per stream, 10k/20k/40k kernels took 1.5/4.6/17.3 s, 200k did not finish in 300 s:
``_latest_other_end`` passed over every event once per stream, and the critical path
scanned every event for each stream's first one. Both are now one sort and binary searches;
the figures are in benchmarks/README.md (``benchmarks/bench_streams.py``), never timed here.
These tests hold the new code to the old answers, and to a number of passes that does not
depend on the streams.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpuprof.accounting.graph import _latest_other_end
from gpuprof.job.critical import _ByEnd


def _per_stream(start: np.ndarray, end: np.ndarray, bounds: np.ndarray, tolerance_us: float,
                strict: bool) -> tuple[np.ndarray, np.ndarray]:
    """The definition, one stream at a time (the code before issue 33)."""
    n = start.size
    best = np.full(n, -np.inf)
    idx = np.full(n, -1, dtype=np.int64)
    query = start + tolerance_us
    for k in range(bounds.size - 1):
        a, b = int(bounds[k]), int(bounds[k + 1])
        if b <= a:
            continue
        ends = end[a:b]
        order = np.argsort(ends, kind="stable")
        sorted_ends = ends[order]
        j = np.searchsorted(sorted_ends, query, side="right") - 1
        if strict:
            j = np.minimum(j, np.searchsorted(start[a:b], start, side="left") - 1)
        ok = j >= 0
        cand = np.where(ok, np.maximum.accumulate(sorted_ends)[np.maximum(j, 0)], -np.inf)
        cand_idx = np.where(ok, a + order[np.maximum(j, 0)], -1)
        own = np.zeros(n, dtype=bool)
        own[a:b] = True
        better = ok & ~own & (cand > best)
        best = np.where(better, cand, best)
        idx = np.where(better, cand_idx, idx)
    return best, idx


def _streams(rng: np.random.Generator, n_streams: int, per_stream: int, width: int) -> tuple[np.ndarray, ...]:
    starts: list[float] = []
    ends: list[float] = []
    bounds = [0]
    for _ in range(n_streams):
        m = int(rng.integers(0, per_stream + 1))
        t = float(rng.integers(0, width))
        for _ in range(m):  # a stream's events do not overlap; integer times make ties
            d = float(rng.integers(0, 3))
            starts.append(t)
            ends.append(t + d)
            t += d + float(rng.integers(0, 3))
        bounds.append(bounds[-1] + m)
    return np.array(starts), np.array(ends), np.array(bounds)


@pytest.mark.parametrize("strict", [False, True])
def test_the_latest_end_on_another_stream_is_the_per_stream_definitions(strict: bool) -> None:
    rng = np.random.default_rng(33)
    for case in range(600):
        start, end, bounds = _streams(rng, int(rng.integers(1, 30)), 5, 4 if case % 2 else 30)
        tol = float(rng.choice([0.0, 1.0, 2.5, 40.0]))
        want = _per_stream(start, end, bounds, tol, strict)
        got = _latest_other_end(start, end, bounds, tol, strict)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("strict", [False, True])
def test_the_latest_end_on_another_stream_takes_passes_independent_of_the_streams(
        strict: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}
    real = np.searchsorted

    def counting(*args: object, **kwargs: object) -> object:
        calls["n"] += 1
        return real(*args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(np, "searchsorted", counting)
    n = 3000  # one event per stream
    start = np.arange(n, dtype=np.float64) * 10.0
    _latest_other_end(start, start + 4.0, np.arange(n + 1), 1.0, strict)
    assert calls["n"] <= 10  # was one pass (and one or two searches) per stream: 3000+


def test_what_ended_last_by_a_time_is_the_scan_of_every_event() -> None:
    rng = np.random.default_rng(7)
    for _ in range(300):
        end = rng.integers(0, 20, size=int(rng.integers(1, 40))).astype(np.float64)
        by_end = _ByEnd(end)
        for t in (-1.0, 0.0, 5.0, 9.5, 30.0):
            exclude = int(rng.integers(0, end.size))
            before = np.flatnonzero(end <= t)
            before = before[before != exclude]
            want = int(before[np.argmax(end[before])]) if before.size else None
            assert by_end.latest(t, exclude) == want

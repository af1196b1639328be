"""The vectorized helpers of :mod:`gpuprof.accounting.enclosing` give exactly what a plain loop
over the calls gives: on random nested host ranges (with tied starts and ends, several
threads, same-name ranges nested in each other), against straightforward reference loops."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest

from gpuprof.accounting.enclosing import (
    _WRAPPER,
    INNER_MIN_CALL_US,
    INNER_MIN_SHARE,
    _FewCalls,
    _measure_before,
    _outer,
    _outer_segments,
)
from gpuprof.model import intervals as iv
from gpuprof.model.timeline import Category, Kind

NAMES = ("Optimizer.step", "forward", "aten::add_", "aten::mul_", "aten::copy_", "cudaLaunchKernel")


def _host(seed: int, n: int = 400) -> pd.DataFrame:
    """Random host rows on three threads: integer times (ties), long and short ranges."""
    rng = np.random.default_rng(seed)
    start = rng.integers(0, 20_000, n).astype(float)
    length = np.where(rng.random(n) < 0.2, rng.integers(1000, 6000, n), rng.integers(0, 300, n))
    name = rng.choice(len(NAMES), n)
    return pd.DataFrame(
        {
            "start_us": start,
            "end_us": start + length,
            "tid": rng.integers(1, 4, n),
            "name": pd.Categorical.from_codes(name, categories=pd.Index(list(NAMES))),
            "kind": np.where(
                name == 5, int(Kind.RUNTIME), np.where(name == 0, int(Kind.ANNOTATION), int(Kind.OP))
            ),
            "category": np.where(name == 5, int(Category.LAUNCH), int(Category.OTHER)),
        }
    )


def _few(host: pd.DataFrame, lo: float, hi: float) -> _FewCalls:
    ctx: Any = SimpleNamespace(trace=SimpleNamespace(host=host), lo_us=lo, hi_us=hi)
    ix: Any = SimpleNamespace(
        hs=host["start_us"].to_numpy(),
        he=host["end_us"].to_numpy(),
        htid=host["tid"].to_numpy(),
        codes=host["name"].cat.codes.to_numpy(),
        cats=host["name"].cat.categories.astype(str),
    )
    return _FewCalls(ctx, ix)


def _parents(host: pd.DataFrame, name: str, lo: float, hi: float) -> npt.NDArray[np.int64]:
    hs, he = host["start_us"].to_numpy(), host["end_us"].to_numpy()
    return np.flatnonzero((host["name"] == name).to_numpy() & (he > lo) & (hs < hi))


def _launches_ref(host: pd.DataFrame, parents: npt.NDArray[np.int64]) -> float | None:
    hs, he, htid = host["start_us"].to_numpy(), host["end_us"].to_numpy(), host["tid"].to_numpy()
    launch = np.flatnonzero(host["category"].to_numpy() == int(Category.LAUNCH))
    n = 0
    for k in parents:
        n += int(np.sum((hs[launch] >= hs[k]) & (hs[launch] <= he[k]) & (htid[launch] == htid[k])))
    return n / parents.size if parents.size else None


def _inner_ref(
    host: pd.DataFrame, lost: iv.Intervals, parents: npt.NDArray[np.int64], lost_us: float
) -> dict[str, Any]:
    hs, he, htid = host["start_us"].to_numpy(), host["end_us"].to_numpy(), host["tid"].to_numpy()
    ops = np.flatnonzero(host["kind"].to_numpy() == int(Kind.OP))
    ops = ops[np.argsort(hs[ops], kind="stable")]
    picked = []
    for k in parents:
        cand = ops[(hs[ops] >= hs[k]) & (hs[ops] <= he[k])]
        rows = cand[(htid[cand] == htid[k]) & (he[cand] <= he[k]) & (cand != k)]
        if rows.size:
            picked.append(rows[_outer(hs[rows], he[rows])])
    if not picked:
        return {}
    rows = np.concatenate(picked)
    got = _measure_before(lost, he[rows]) - _measure_before(lost, hs[rows])
    best: dict[str, list[float]] = {}
    for r, g in zip(rows[got > 0].tolist(), got[got > 0].tolist()):
        acc = best.setdefault(str(host["name"].iat[r]), [0.0, 0.0])
        acc[0] += g
        acc[1] = max(acc[1], float(he[r] - hs[r]))
    named = {k: v for k, v in best.items() if not _WRAPPER.match(k) and v[1] >= INNER_MIN_CALL_US}
    if not named:
        return {}
    op, (us, longest) = max(named.items(), key=lambda kv: kv[1][0])
    if us < INNER_MIN_SHARE * lost_us:
        return {}
    return {"inner_op": op, "inner_lost_us": min(us, lost_us), "inner_longest_us": longest}


@pytest.mark.parametrize("seed", range(5))
def test_outer_segments_is_outer_per_segment(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 500
    seg = np.sort(rng.integers(0, 40, n))
    s = rng.integers(0, 100, n).astype(float)
    e = s + rng.integers(0, 30, n).astype(float)
    want = np.zeros(n, dtype=bool)
    for k in np.unique(seg):
        rows = np.flatnonzero(seg == k)
        want[rows] = _outer(s[rows], e[rows])
    assert np.array_equal(_outer_segments(s, e, seg), want)
    assert 0 < want.sum() < n  # the data has both nested and outer ranges


@pytest.mark.parametrize("seed", range(4))
def test_few_calls_match_a_loop_over_the_calls(seed: int) -> None:
    host = _host(seed)
    lo, hi = 1000.0, 19_000.0
    lost = iv.union(np.arange(0.0, 20_000.0, 700.0), np.arange(0.0, 20_000.0, 700.0) + 450.0)
    few = _few(host, lo, hi)
    inner_found = 0
    for name in NAMES:
        parents = few.parents(name)
        assert np.array_equal(parents, _parents(host, name, lo, hi))
        assert few.launches_per_call(parents) == _launches_ref(host, parents)
        lost_us = iv.total(
            iv.intersect(
                lost, iv.union(host["start_us"].to_numpy()[parents], host["end_us"].to_numpy()[parents])
            )
        )
        got = few.inner(lost, parents, lost_us)
        assert got == _inner_ref(host, lost, parents, lost_us)
        inner_found += bool(got)
    assert inner_found  # some name has an inner op: the comparison is not only of empty dicts

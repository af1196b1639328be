"""Property tests (hypothesis): interval arithmetic against a set model, and the report's
partition (compute + sum(lost) == window, nothing negative) on random traces.

Interval endpoints are integers (exact in float64), so a set of intervals is exactly the
set of unit cells ``[k, k + 1)`` it covers: the model is Python's ``set``.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ev, kineto_trace

pytest.importorskip("hypothesis", reason="hypothesis is in the dev extra: pip install -e '.[dev]'")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuprof.model import intervals as iv

# --- interval arithmetic ------------------------------------------------------------------

HI = 60
pairs = st.lists(st.tuples(st.integers(-5, HI), st.integers(-5, HI)), max_size=12)


def as_iv(ps: list[tuple[int, int]]) -> iv.Intervals:
    return np.array([a for a, _ in ps], dtype=np.float64), np.array([b for _, b in ps], dtype=np.float64)


def cells(x: iv.Intervals) -> set[int]:
    """The unit cells an interval set covers (empty and inverted intervals cover none)."""
    out: set[int] = set()
    for s, e in zip(x[0].tolist(), x[1].tolist()):
        assert float(s).is_integer() and float(e).is_integer(), (s, e)
        out.update(range(int(s), int(e)))
    return out


def model(ps: list[tuple[int, int]]) -> set[int]:
    return {k for a, b in ps for k in range(a, b)}


def normalized(x: iv.Intervals) -> bool:
    s, e = x
    return bool(np.all(e > s) and np.all(s[1:] > e[:-1]))  # non-empty, sorted, apart


@given(pairs)
def test_union_is_normalized_and_covers_exactly_the_input(ps: list[tuple[int, int]]) -> None:
    u = iv.union(*as_iv(ps))
    assert normalized(u)
    assert cells(u) == model(ps)
    assert iv.total(u) == len(model(ps))


@given(pairs, pairs)
def test_intersect_and_subtract_match_the_set_model(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> None:
    inter = iv.intersect(as_iv(a), as_iv(b))
    diff = iv.subtract(as_iv(a), as_iv(b))
    assert normalized(inter) and normalized(diff)
    assert cells(inter) == model(a) & model(b)
    assert cells(diff) == model(a) - model(b)
    # Measure: |A| = |A n B| + |A - B|.
    assert iv.total(iv.union(*as_iv(a))) == iv.total(inter) + iv.total(diff)


@given(pairs, st.integers(-5, HI), st.integers(-5, HI))
def test_complement_and_clip_partition_the_range(ps: list[tuple[int, int]], lo: int, hi: int) -> None:
    comp = iv.complement(as_iv(ps), lo, hi)
    clipped = iv.normalize(iv.clip(as_iv(ps), lo, hi))
    window = set(range(lo, hi))
    assert normalized(comp)
    assert cells(clipped) == model(ps) & window
    assert cells(comp) == window - model(ps)
    assert iv.total(comp) + iv.total(clipped) == len(window)


@given(pairs, pairs)
def test_overlap_with_each_is_the_intersection_per_query(q: list[tuple[int, int]], c: list[tuple[int, int]]) -> None:
    got = iv.overlap_with_each(as_iv(q), as_iv(c))
    assert got.shape == (len(q),)
    for (a, b), value in zip(q, got.tolist()):
        assert value == len(model([(a, b)]) & model(c))


@given(st.lists(st.tuples(st.floats(allow_nan=True, allow_infinity=False, width=32), st.floats(allow_nan=True, allow_infinity=False, width=32)), max_size=10))
def test_any_floats_including_nan_give_a_normalized_set_never_an_error(ps: list[tuple[float, float]]) -> None:
    s = np.array([a for a, _ in ps], dtype=np.float64)
    e = np.array([b for _, b in ps], dtype=np.float64)
    u = iv.union(s, e)
    assert normalized(u) and not np.isnan(u[0]).any() and not np.isnan(u[1]).any()
    assert iv.total(u) <= float(np.nansum(np.clip(e - s, 0, None))) * (1 + 1e-9) + 1e-9


# --- the partition on random traces --------------------------------------------------------

CPU, GPU = 100, 0
KERNELS = ["sm90_xmma_gemm_bf16", "elementwise_kernel", "ncclDevKernel_AllReduce_Sum_bf16", "ncclKernel_SendRecv"]
HOST_OPS = [
    "aten::mm",
    "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaMalloc",
    "cudaFree",
    "aten::item",
    "nccl:all_reduce",
    "Optimizer.step#AdamW.step",
]


@st.composite
def kineto_rank(draw: st.DrawFn, rank: int) -> dict[str, Any]:
    """A random but well-formed Kineto trace: steps, launches and kernels on a few streams,
    copies, host ops of every kind that a rule looks at."""
    steps = draw(st.integers(0, 3))
    step_us = draw(st.integers(200, 5000))
    events: list[dict[str, Any]] = []
    for k in range(steps):
        events.append(ev("user_annotation", f"ProfilerStep#{k + 1}", k * step_us, step_us, pid=CPU, tid=CPU))
    horizon = max(steps, 1) * step_us
    corr = 1
    for _ in range(draw(st.integers(1, 25))):
        ts = draw(st.integers(0, horizon))
        dur = draw(st.integers(0, step_us))
        kind = draw(st.integers(0, 3))
        if kind <= 1:  # a launch and its kernel
            launch = draw(st.integers(max(0, ts - 300), ts))
            events.append(ev("cuda_runtime", "cudaLaunchKernel", launch, 5, pid=CPU, tid=CPU, correlation=corr))
            name = draw(st.sampled_from(KERNELS))
            stream = draw(st.sampled_from([7, 13, 21]))
            events.append(ev("kernel", name, ts, dur, pid=GPU, tid=stream, stream=stream, correlation=corr))
            corr += 1
        elif kind == 2:
            name = draw(st.sampled_from(["Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pinned)", "Memset (Device)"]))
            cat = "gpu_memset" if name.startswith("Memset") else "gpu_memcpy"
            events.append(ev(cat, name, ts, dur, pid=GPU, tid=7, stream=7, correlation=corr, bytes=4096))
            corr += 1
        else:
            name = draw(st.sampled_from(HOST_OPS))
            cat = "cuda_runtime" if name.startswith("cuda") else "cpu_op"
            events.append(ev(cat, name, ts, dur, pid=CPU, tid=CPU))
    return kineto_trace(events, rank=rank, world_size=None)


def _check_report(doc: dict[str, Any]) -> None:
    assert doc["schema"] == "gpuprof.report/1"
    for r in doc["ranks"]:
        lost = r["lost_us"]
        values = [r["window_us"], r["compute_us"], *lost.values()]
        assert all(isinstance(v, (int, float)) and math.isfinite(v) and v >= 0 for v in values), r
        total = r["compute_us"] + sum(lost.values())
        assert math.isclose(total, r["window_us"], rel_tol=1e-3, abs_tol=1e-3), r
    savings = [rec["estimated_savings_pct"] for rec in doc["recommendations"]]
    assert all(0 <= s <= 100 for s in savings)
    # Ranked by estimate, except (gpuprof.advice.rank_recommendations) faults saving at
    # least FAULT_FIRST_PCT lead, and a fix moved up for what it adds to the ones above it
    # says so: every other recommendation keeps its place by estimate.
    from gpuprof.advice import FAULT_FIRST_PCT, FAULTS

    def _fault(rec: dict[str, Any]) -> bool:
        kind = (rec.get("facts") or {}).get("kind")
        return rec["id"] in FAULTS or (rec["id"] == "straggler-rank" and kind == "hardware")

    recs = list(doc["recommendations"])
    while recs and _fault(recs[0]) and recs[0]["estimated_savings_pct"] >= FAULT_FIRST_PCT:
        recs.pop(0)
    kept = [r["estimated_savings_pct"] for r in recs if not any("it adds" in e for e in r["evidence"])]
    assert kept == sorted(kept, reverse=True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(kineto_rank(0), min_size=1, max_size=1) | st.tuples(kineto_rank(0), kineto_rank(1)).map(list))
def test_every_rank_of_a_random_trace_is_partitioned_exactly(ranks: list[dict[str, Any]]) -> None:
    from gpuprof.errors import GpuprofError
    from gpuprof.model.report import report_to_dict
    from gpuprof.pipeline import analyze_paths

    with tempfile.TemporaryDirectory() as tmp:
        for i, doc in enumerate(ranks):
            (Path(tmp) / f"rank{i}.json").write_text(json.dumps(doc))
        try:
            report = analyze_paths([tmp])
        except GpuprofError:
            return  # a refusal with a reason is allowed (e.g. no device activity at all)
        _check_report(report_to_dict(report))

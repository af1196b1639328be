"""Local advisors: each fires on a constructed trace with a known share, and stays quiet
below the threshold; real traces get the advice their job calls for."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from rankbuilder import RankBuilder, advice_context

from gpuprof.advice import AdviceContext, advise, local
from gpuprof.model.report import Cause, Recommendation
from gpuprof.model.timeline import Kind, MemorySample, RankTrace
from gpuprof.pipeline import analyze_paths

DL = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _ctx(*traces: RankTrace) -> AdviceContext:
    ctx: AdviceContext = advice_context(*traces)
    return ctx


def _one(fn: Callable[[AdviceContext], list[Recommendation]], ctx: AdviceContext) -> Recommendation:
    recs = fn(ctx)
    assert len(recs) == 1
    return recs[0]


def _steps(
    b: RankBuilder,
    n: int,
    step_us: float,
    stall_us: float,
    stall: Callable[[float, float], None],
    rank_shift: float = 0,
) -> None:
    """``n`` steps of ``step_us``: the host stalls ``stall_us`` at the top of each step (the
    device idles), then one compute kernel fills the rest."""
    for i in range(n):
        h0 = rank_shift + i * step_us
        b.step(i + 1, h0, h0 + step_us)
        stall(h0, h0 + stall_us)
        b.kernel(h0 + stall_us, h0 + step_us, launch_at=h0 + stall_us - 10)


def test_dataloader_starvation_with_measured_numbers() -> None:
    b = RankBuilder()
    _steps(b, 3, 1000, 300, lambda s, e: b.host(s, e - 10, DL))
    rec = _one(local.dataloader_starvation, _ctx(b.build()))
    assert rec.id == "dataloader-starvation" and rec.category is Cause.DATALOADER
    assert rec.ranks == (0,)
    # 290 of 1000 us per step waits: 29% with a free core per worker (and the in-process
    # loader's launches gone with it: a little more), nothing if the workers share the
    # training process's core (its host work grows by the 290 us they take over); the
    # estimate is the middle of the two.
    assert rec.savings_low_pct == pytest.approx(0.0)
    assert rec.savings_high_pct is not None and 29.0 <= rec.savings_high_pct <= 30.0
    assert rec.estimated_savings_pct == pytest.approx(rec.savings_high_pct / 2)
    assert "290 µs per step (29.0% of the step)" in rec.evidence[0]
    assert any("free core for every worker" in e for e in rec.evidence)
    assert any("num_workers" in a for a in rec.actions)
    assert any("_SingleProcessDataLoaderIter" in e for e in rec.evidence)
    assert "each DataLoader.__next__ call took 290 µs on the host (3 calls in the window)" in rec.evidence[1]


def test_small_shares_are_not_recommended() -> None:
    b = RankBuilder()
    _steps(b, 3, 1000, 20, lambda s, e: b.host(s, e - 10, DL))  # 1% of each step
    assert local.dataloader_starvation(_ctx(b.build())) == []


def test_savings_follow_the_critical_rank() -> None:
    # Rank 0 loses 300 us per 1000 us step to the DataLoader; rank 1 steps take 1200 us of
    # pure compute. Fixing rank 0 cannot make the job faster than rank 1.
    b0 = RankBuilder()
    _steps(b0, 2, 1000, 300, lambda s, e: b0.host(s, e - 10, DL))
    b1 = RankBuilder()
    for i in range(2):
        b1.step(i + 1, i * 1200, (i + 1) * 1200)
        b1.kernel(i * 1200, (i + 1) * 1200, launch_at=i * 1200 - 5)
    rec = _one(local.dataloader_starvation, _ctx(b0.build(rank=0), b1.build(rank=1)))
    assert rec.ranks == (0,)
    assert rec.estimated_savings_pct == 0.0


def test_host_sync_in_loop_names_the_calls() -> None:
    b = RankBuilder()

    def item(s: float, e: float) -> None:
        b.host(s - 60, e - 15, "train.py:log_loss", kind=Kind.ANNOTATION)
        b.host(s - 50, e - 20, "aten::item")
        b.host(s - 40, e - 25, "cudaStreamSynchronize", kind=Kind.RUNTIME)

    _steps(b, 4, 1000, 200, item)
    rec = _one(local.sync_host_blocking, _ctx(b.build()))
    assert rec.id == "sync-host-blocking" and rec.category is Cause.SYNC
    assert any("aten::item 1.0/step" in e for e in rec.evidence)
    # Where the wait sits: the enclosing annotation, not the sync call inside it.
    assert any("sits under: train.py:log_loss" in e for e in rec.evidence)
    assert any(".item()" in a for a in rec.actions)


def _tiny_kernels(b: RankBuilder, kernel_us: float, launch_gap_us: float, n: int) -> None:
    b.step(1, 0, n * launch_gap_us + 10)
    for i in range(n):
        t = i * launch_gap_us
        b.kernel(t + 6, t + 6 + kernel_us, launch_at=t)


def test_tiny_kernels_are_launch_bound() -> None:
    b = RankBuilder(launch_us=8)
    _tiny_kernels(b, kernel_us=2, launch_gap_us=10, n=200)
    ctx = _ctx(b.build())
    rec = _one(local.host_launch, ctx)
    assert rec.id == "host-launch-bound" and rec.category is Cause.HOST
    assert any("CUDA graph" in a for a in rec.actions)
    assert any("100% of 200 kernels ran shorter than their own launch call" in e for e in rec.evidence)
    # The device idles from one kernel's end (t+8) to the next one's start (t+16); the next
    # launch call (t+10..t+18) fills 6 of those 8 µs: that is what decides it.
    assert ctx.summaries[0].facts.host_wait_in_launch_share == pytest.approx(0.75, abs=0.02)


def test_tiny_kernels_with_framework_work_between_them_are_host_overhead() -> None:
    # Same tiny kernels and launches, but 40 µs of operator work around each launch: the
    # launch calls are a small share of the host's time, so fusing launches is not the fix.
    b = RankBuilder(launch_us=8)
    n = 200
    b.step(1, 0, n * 50.0 + 10)
    for i in range(n):
        t = i * 50.0
        b.host(t, t + 45, "aten::add_")
        b.kernel(t + 44, t + 46, launch_at=t + 35)
    ctx = _ctx(b.build())
    rec = _one(local.host_launch, ctx)
    assert ctx.summaries[0].facts.kernels_shorter_than_launch_share == 1.0
    assert ctx.summaries[0].facts.host_wait_in_launch_share < local.LAUNCH_BOUND_CALL_SHARE
    assert rec.id == "host-overhead"
    assert any("aten::add_" in e and "sits under" in e for e in rec.evidence)


def test_slow_host_with_long_kernels_is_host_overhead() -> None:
    b = RankBuilder()
    _steps(b, 3, 1000, 300, lambda s, e: b.host(s, e - 10, "aten::nonzero_numpy_preprocess"))
    rec = _one(local.host_launch, _ctx(b.build()))
    assert rec.id == "host-overhead"


def test_pageable_and_pinned_copies_get_different_advice() -> None:
    b = RankBuilder()
    _steps(
        b,
        2,
        1000,
        100,
        lambda s, e: b.copy(s, e, "Memcpy HtoD (Pageable -> Device)", launch_at=s - 5, nbytes=1 << 24),
    )
    recs = local.memory_pageable_copies(_ctx(b.build()))
    assert [r.id for r in recs] == ["memory-pageable-copies"]
    assert any("pin_memory=True" in a for a in recs[0].actions)
    assert local.memory_exposed_copies(_ctx(b.build())) == []
    p = RankBuilder()
    _steps(p, 2, 1000, 100, lambda s, e: p.copy(s, e, "Memcpy DtoH (Device -> Pinned)", launch_at=s - 5))
    assert local.memory_pageable_copies(_ctx(p.build())) == []
    rec = _one(local.memory_exposed_copies, _ctx(p.build()))
    assert any("DtoH" in e for e in rec.evidence)


def test_allocator_near_capacity_suggests_lowering_peak_memory() -> None:
    b = RankBuilder()
    _steps(b, 2, 1000, 150, lambda s, e: b.host(s, e - 10, "cudaMalloc", kind=Kind.RUNTIME))
    t = b.build(memory=(MemorySample(0, 70 << 30, 78 << 30),), device_memory_bytes=80 << 30)
    rec = _one(local.memory_allocator, _ctx(t))
    assert rec.category is Cause.MEMORY
    assert any("expandable_segments:True" in a for a in rec.actions)
    assert any("activation checkpointing" in a for a in rec.actions)
    assert any("78.0 GiB of 80.0 GiB" in e for e in rec.evidence)
    # The same stalls in an inference server: no training advice.
    b.host(0, 5, "vllm::unified_attention_with_output")
    t = b.build(memory=(MemorySample(0, 70 << 30, 78 << 30),), device_memory_bytes=80 << 30)
    rec = _one(local.memory_allocator, _ctx(t))
    assert any("gpu_memory_utilization" in a for a in rec.actions)
    assert not any("activation checkpointing" in a for a in rec.actions)


def test_advisors_are_registered() -> None:
    b = RankBuilder()
    _steps(b, 3, 1000, 300, lambda s, e: b.host(s, e - 10, DL))
    ids = [r.id for r in advise(_ctx(b.build()))]
    assert "dataloader-starvation" in ids


def test_real_resnet_advice_matches_num_workers(shared_traces: Path) -> None:
    nw0 = {r.id: r for r in analyze_paths([shared_traces / "resnet50-nw0"]).recommendations}
    nw4 = {r.id: r for r in analyze_paths([shared_traces / "resnet50-nw4"]).recommendations}
    assert "dataloader-starvation" in nw0 and "dataloader-starvation" not in nw4
    assert nw0["dataloader-starvation"].estimated_savings_pct > 10
    assert any("num_workers" in a for a in nw0["dataloader-starvation"].actions)
    # nw4 copies its batches from pageable memory (pin_memory=False).
    assert "memory-pageable-copies" in nw4


def test_few_short_kernels_are_overhead_not_launch_bound() -> None:
    # Tiny kernels, but only one per 2 ms: the host is slow, not the launch path.
    b = RankBuilder(launch_us=8)
    _tiny_kernels(b, kernel_us=2, launch_gap_us=2000, n=10)
    assert _one(local.host_launch, _ctx(b.build())).id == "host-overhead"

"""Attribution precedence, the exact partition of each window, and what real traces say."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from analyzed import analysis_of
from conftest import SHARED_TRACES

from gpuprof.accounting.attribution import PRECEDENCE, attribute, merge_claims
from gpuprof.model import intervals as iv
from gpuprof.model.report import CAUSES, Cause
from gpuprof.pipeline import Analysis


def test_first_cause_in_precedence_wins_and_rest_is_other() -> None:
    lost = iv.make([0, 100], [50, 200])
    claims = {
        Cause.HOST: iv.make([0], [200]),
        Cause.SYNC: iv.make([10], [30]),
        Cause.MEMORY: iv.make([20], [40]),
        Cause.STRAGGLER: iv.make([120], [150]),
        Cause.COMMUNICATION: iv.make([100], [160]),
    }
    att = attribute(lost, claims)
    assert att.lost_us[Cause.MEMORY] == 20  # 20..40
    assert att.lost_us[Cause.SYNC] == 10  # 10..20 (memory took 20..30)
    assert att.lost_us[Cause.STRAGGLER] == 30
    assert att.lost_us[Cause.COMMUNICATION] == 30  # 100..120 and 150..160
    assert att.lost_us[Cause.HOST] == 150 - 20 - 10 - 30 - 30
    assert att.lost_us[Cause.OTHER] == 0
    assert sum(att.lost_us.values()) == 150


def test_claims_outside_lost_time_are_ignored_and_unclaimed_is_other() -> None:
    att = attribute(iv.make([0], [100]), {Cause.DATALOADER: iv.make([50], [500])})
    assert att.lost_us[Cause.DATALOADER] == 50
    assert att.lost_us[Cause.OTHER] == 50


def test_merge_claims_unions_per_cause() -> None:
    merged = merge_claims({Cause.HOST: iv.make([0], [10])}, {Cause.HOST: iv.make([5], [20])})
    assert iv.total(merged[Cause.HOST]) == 20
    assert PRECEDENCE[0] is Cause.PIPELINE_BUBBLE and PRECEDENCE[-1] is Cause.OTHER


def _folders() -> list[str]:
    if not SHARED_TRACES.is_dir():
        return []
    return sorted(p.name for p in SHARED_TRACES.iterdir() if p.is_dir() and p.name != "LICENSES")


def _analysis(name: str) -> Analysis:
    return analysis_of(SHARED_TRACES / name)  # once per session, shared with other files


@pytest.mark.parametrize("name", _folders() or ["<no shared traces>"])
def test_partition_is_exact_on_every_real_trace(name: str, shared_traces: Path) -> None:
    a = _analysis(name)
    assert a.report.ranks
    aligned = {s.rank: s.facts.device_aligned_steps if s.facts is not None else True for s in a.summaries}
    for r in a.report.ranks:
        assert set(r.lost_us) == set(CAUSES)
        assert all(v >= 0 for v in r.lost_us.values())
        total = r.compute_us + sum(r.lost_us.values())
        assert total == pytest.approx(r.window_us, rel=1e-3, abs=1e-6)
        timeline = any(s.rank == r.rank and s.fmt == "timeline" for s in a.summaries)
        if r.steps and (aligned.get(r.rank, True) or timeline):
            # Device-aligned steps tile the window; a timeline's window is its steps (time
            # its reader left between them is out of the window).
            assert sum(r.step_times_us) == pytest.approx(r.window_us, rel=1e-6)
        elif r.steps:
            # Consecutive ProfilerStep host ranges keep the time between them in the window.
            assert sum(r.step_times_us) <= r.window_us * (1 + 1e-6)


def _share(a: Analysis, cause: Cause, rank: int = 0) -> float:
    r = next(x for x in a.report.ranks if x.rank == rank)
    return r.lost_us[cause] / r.window_us


def test_dataloader_workers_remove_the_input_stall(shared_traces: Path) -> None:
    # The same ResNet-50 job with num_workers=0 and num_workers=4.
    nw0, nw4 = _analysis("resnet50-nw0"), _analysis("resnet50-nw4")
    assert _share(nw0, Cause.DATALOADER) > 0.10
    assert _share(nw4, Cause.DATALOADER) < 0.02
    step0 = nw0.report.ranks[0].window_us / nw0.report.ranks[0].steps
    step4 = nw4.report.ranks[0].window_us / nw4.report.ranks[0].steps
    assert step0 > 1.4 * step4
    # The DataLoader wait per step on the host is about what the device lost to it.
    f0 = nw0.summaries[0].facts
    assert nw0.report.ranks[0].lost_us[Cause.DATALOADER] / 6 <= f0.dataloader_wait_per_step_us
    assert f0.dataloader_single_process is True
    assert nw4.summaries[0].facts.dataloader_single_process is False


def test_complete_kineto_traces_leave_little_unexplained(shared_traces: Path) -> None:
    for name in ("resnet50-nw0", "resnet50-nw4", "a100-2rank-nccl", "mi300-resnet-ckpt-rank0"):
        assert _share(_analysis(name), Cause.OTHER) < 0.05, name


def test_exposed_collectives_show_as_communication(shared_traces: Path) -> None:
    a = _analysis("mi300-resnet-ckpt-rank0")
    r = a.report.ranks[0]
    assert max(r.lost_us, key=lambda c: r.lost_us[c]) is Cause.COMMUNICATION
    dlrm = _analysis("dlrm-8rank")
    assert len(dlrm.report.ranks) == 8
    assert all(x.lost_us[Cause.COMMUNICATION] + x.lost_us[Cause.STRAGGLER] > 0 for x in dlrm.report.ranks)


def test_cpu_only_trace_has_an_empty_window(shared_traces: Path) -> None:
    a = _analysis("edge-cpu-only-gloo")
    assert a.summaries[0].empty_reason is not None
    assert a.report.ranks[0].window_us == 0


def test_stitched_timeline_leaves_the_time_between_steps_out_of_every_cause(shared_traces: Path) -> None:
    # megatron-pp4-timeline: 32 recorded steps per worker put side by side with made-up
    # gaps of about 0.22-0.27 s. Those gaps used to be in the window as lost "other" time
    # (7 s of a 78 s window per rank); now they are in no cause.
    a = _analysis("megatron-pp4-timeline")
    assert len(a.summaries) == 8
    for s in a.summaries:
        r = next(x for x in a.report.ranks if x.rank == s.rank)
        outer_us = s.window[1] - s.window[0]
        assert r.steps == 32
        assert r.window_us == pytest.approx(sum(r.step_times_us), rel=1e-9)
        assert s.gaps_us == pytest.approx(outer_us - r.window_us)
        assert 0.05 * outer_us < s.gaps_us < 0.2 * outer_us
        assert r.compute_us + sum(r.lost_us.values()) == pytest.approx(r.window_us, rel=1e-3)
        # What the old whole-span window lost to the gaps: exactly the left-out time.
        old_lost = iv.complement(s.compute, s.window[0], s.window[1])
        assert iv.total(old_lost) - iv.total(s.lost) == pytest.approx(s.gaps_us, rel=1e-9)
        gaps = iv.subtract(iv.make([s.window[0]], [s.window[1]]), s.window_intervals)
        for cause, ivs in a.attributions[s.rank].intervals.items():
            assert iv.total(iv.intersect(ivs, gaps)) == pytest.approx(0.0, abs=1e-6), cause
        # Left for "other" is what happens inside the steps (under 3 %, was 9-11 %).
        assert r.lost_us[Cause.OTHER] < 0.03 * r.window_us


def test_cut_off_trace_without_gpu_events_is_not_called_cpu_only(
    write_trace: Callable[..., Path], event: Callable[..., dict[str, Any]]
) -> None:
    from gpuprof.accounting.summarize import summarize
    from gpuprof.readers import load_file

    # Older Kineto writes host events first and GPU events last: a file cut before them
    # has host events only, which does not make the job CPU-only.
    host = [event("cpu_op", f"aten::op{i}", 10 * i, 5, pid=1, tid=2) for i in range(6)]
    gpu = [event("kernel", "k0", 80, 4, pid=0, tid=7, correlation=1)]
    text = '{"schemaVersion": 1, "traceEvents": [\n' + ",\n".join(json.dumps(e) for e in host + gpu) + "\n]}"
    cut = text[: text.index('"kernel"') - 10]  # stops inside the list, before the GPU event
    (t,) = load_file(write_trace("cut.json", cut))
    assert t.truncated and len(t.device) == 0 and len(t.host) == 6
    s = summarize(t)
    assert s.empty_reason is not None
    assert "cut off" in s.empty_reason and "not known to be CPU-only" in s.empty_reason
    assert "CPU-only?" not in s.empty_reason
    # The same events written whole: no device activity really means CPU-only.
    (whole,) = load_file(write_trace("whole.json", {"traceEvents": host}))
    assert not whole.truncated
    assert summarize(whole).empty_reason == "no GPU activity in this trace (CPU-only?)"


def test_summarize_never_mutates_the_trace() -> None:
    from rankbuilder import RankBuilder

    from gpuprof.accounting.summarize import summarize
    from gpuprof.model.timeline import Kind

    b = RankBuilder()
    b.step(1, 0, 1000)
    b.kernel(10, 400, launch_at=5)
    b.host(400, 600, "cudaStreamSynchronize", kind=Kind.RUNTIME)
    b.copy(600, 700, "Memcpy HtoD (Pageable -> Device)", launch_at=590)
    b.kernel(710, 990, launch_at=700)
    t = b.build()
    dev, host = t.device.copy(deep=True), t.host.copy(deep=True)
    summarize(t)
    assert t.device.equals(dev) and t.host.equals(host)


@pytest.mark.parametrize("seed", range(6))
def test_random_traces_keep_the_partition_and_split_gaps_cleanly(seed: int) -> None:
    import numpy as np
    from rankbuilder import RankBuilder

    from gpuprof.accounting.launches import match_launches
    from gpuprof.accounting.rules import build_context
    from gpuprof.accounting.summarize import summarize
    from gpuprof.model.timeline import Kind

    rng = np.random.default_rng(seed)
    b = RankBuilder()
    host_calls = [
        ("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", Kind.OP),
        ("cudaStreamSynchronize", Kind.RUNTIME),
        ("cudaMalloc", Kind.RUNTIME),
        ("cudaFree", Kind.RUNTIME),
        ("aten::add", Kind.OP),
    ]
    for n in range(3):
        b.step(n + 1, n * 10_000.0, (n + 1) * 10_000.0)
    for _ in range(120):
        start = float(rng.uniform(0, 30_000))
        dur = float(rng.exponential(150))
        launch = start - float(rng.uniform(-100, 2_000)) if rng.random() < 0.9 else None
        r = rng.random()
        if r < 0.7:
            b.kernel(start, start + dur, launch_at=launch, stream=int(rng.integers(7, 10)))
        elif r < 0.85:
            b.copy(start, start + dur, "Memcpy HtoD (Pageable -> Device)", launch_at=launch)
        else:
            b.kernel(
                start,
                start + dur,
                launch_at=launch,
                name="ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                stream=20,
            )
    for _ in range(40):
        name, kind = host_calls[int(rng.integers(len(host_calls)))]
        s = float(rng.uniform(0, 30_000))
        b.host(s, s + float(rng.exponential(300)), name, kind=kind, tid=int(rng.integers(1, 3)))
    t = b.build()
    summ = summarize(t)
    att = attribute(summ.lost, summ.claims)
    compute = iv.total(summ.compute)
    assert compute + sum(att.lost_us.values()) == pytest.approx(summ.window_us, rel=1e-9)
    assert all(v >= 0 for v in att.lost_us.values())
    ctx = build_context(t, *summ.window, summ.compute, summ.lost, match_launches(t))
    # host-wait, queued and unknown-launch parts never overlap and stay inside lost time.
    parts = [ctx.host_wait, ctx.queued, ctx.unknown_launch]
    for i, a in enumerate(parts):
        assert iv.total(iv.subtract(a, summ.lost)) == pytest.approx(0, abs=1e-6)
        for b_ in parts[i + 1 :]:
            assert iv.total(iv.intersect(a, b_)) == pytest.approx(0, abs=1e-6)
    assert att.lost_us[Cause.HOST] <= iv.total(ctx.host_wait) + 1e-6

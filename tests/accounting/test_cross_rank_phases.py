"""Per-step phase times (forward / backward / optimizer / data) used to explain slow ranks."""

from __future__ import annotations

from pathlib import Path

import pytest
from rankbuilder import RankBuilder

from gpuprof.accounting.phases import phase_ratios, phase_times
from gpuprof.accounting.window import select_window
from gpuprof.model import intervals as iv
from gpuprof.model.timeline import Kind

DATA = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _step(b: RankBuilder, n: int, t0: float, forward_marked: bool = True) -> None:
    b.step(n, t0, t0 + 10_000.0)
    if forward_marked:
        b.host(t0, t0 + 1_000.0, "## forward ##", kind=Kind.ANNOTATION)
    b.kernel(t0 + 100, t0 + 600, launch_at=t0 + 50)  # forward: 500
    b.host(t0 + 1_000.0, t0 + 3_000.0, "## backward ##", kind=Kind.ANNOTATION)
    b.kernel(t0 + 1_100, t0 + 2_100, launch_at=t0 + 1_010)  # backward: 1000
    b.host(t0 + 1_200.0, t0 + 1_300.0, "autograd::engine::evaluate_function: MmBackward0")
    b.kernel(t0 + 2_100, t0 + 2_300, launch_at=t0 + 1_210)  # backward: 200
    b.host(t0 + 3_000.0, t0 + 3_500.0, "Optimizer.step#SGD.step", kind=Kind.ANNOTATION)
    b.kernel(t0 + 3_600, t0 + 3_900, launch_at=t0 + 3_010)  # optimizer: 300 (runs after the span)
    b.host(t0 + 5_000.0, t0 + 5_800.0, DATA)  # data: 800 of host time


def test_kineto_phases_are_device_time_by_launch_and_per_step() -> None:
    b = RankBuilder()
    _step(b, 1, 0.0)
    _step(b, 2, 10_000.0)
    t = b.build()
    ph = phase_times(t, select_window(t))
    assert ph["forward"] == pytest.approx(500.0)
    assert ph["backward"] == pytest.approx(1_200.0)
    assert ph["optimizer"] == pytest.approx(300.0)
    assert ph["data"] == pytest.approx(800.0)
    assert ph["forward_calls"] == 1.0 and ph["backward_calls"] == 1.0
    # A (start, end) pair is one step: totals.
    whole = phase_times(t, (0.0, 20_000.0))
    assert whole["backward"] == pytest.approx(2_400.0)


def test_unmarked_compute_counts_as_forward_only_when_forward_is_not_marked() -> None:
    b = RankBuilder()
    _step(b, 1, 0.0, forward_marked=False)
    t = b.build()
    ph = phase_times(t, select_window(t))
    assert ph["forward"] == pytest.approx(500.0)
    assert "forward_calls" not in ph


def test_unknown_phases_are_left_out_not_zero() -> None:
    b = RankBuilder()
    b.kernel(0.0, 100.0, launch_at=-10.0)
    t = b.build()
    assert phase_times(t, select_window(t)) == {}


def test_timeline_phases_count_microbatch_passes() -> None:
    from test_pipeline_parallel import pipeline_job

    traces = pipeline_job(4, 8, [10_000.0] * 4, [20_000.0] * 4, steps=2)
    for t in traces:
        ph = phase_times(t, select_window(t))
        assert ph["forward"] == pytest.approx(8 * 10_000.0)
        assert ph["backward"] == pytest.approx(8 * 20_000.0)
        assert ph["optimizer"] == pytest.approx(3_000.0)
        assert ph["forward_calls"] == ph["backward_calls"] == 8.0


def test_phase_ratios() -> None:
    assert phase_ratios(
        {"forward": 30.0, "backward": 10.0, "data": 5.0}, {"forward": 10.0, "backward": 0.0}
    ) == {"forward": 3.0}


def test_real_traces_phase_times_fit_inside_compute(shared_traces: Path) -> None:
    from gpuprof.readers import load_all

    for trace in load_all([shared_traces / "dlrm-8rank"]):
        w = select_window(trace)
        ph = phase_times(trace, w)
        assert {"forward", "backward", "optimizer"} <= set(ph)
        dev = trace.device
        comp = dev["category"] == 0
        busy = iv.total(iv.clip(iv.union(dev["start_us"][comp], dev["end_us"][comp]), w.start_us, w.end_us))
        # Phase sums count overlapping kernels twice; a dlrm step runs one stream of compute.
        assert ph["forward"] + ph["backward"] + ph["optimizer"] <= 1.05 * busy * len(w.steps)
        assert ph["backward"] > ph["forward"]  # backward does about twice the forward's work


def test_megatron_last_stage_forward_is_much_longer(shared_traces: Path) -> None:
    from gpuprof.readers import load_all

    traces = load_all([shared_traces / "megatron-pp4-timeline"])
    fwd = {t.parallel["pp_rank"]: phase_times(t, select_window(t))["forward"] for t in traces}
    assert fwd[3] > 1.5 * max(fwd[k] for k in (0, 1, 2))


def test_pipelining_actions_give_passes_stage_and_chunks() -> None:
    # torch.distributed.pipelining's interleaved schedules: rank runs stages 1 and 5.
    b = RankBuilder()
    b.step(1, 0.0, 10_000.0)
    t0 = 0.0
    for stage in (1, 5):
        for mb in range(2):
            b.host(t0, t0 + 100.0, f"PP:{stage}F{mb}", kind=Kind.ANNOTATION)
            b.kernel(t0 + 10, t0 + 60, launch_at=t0 + 5)
            b.host(t0 + 100.0, t0 + 300.0, f"PP:{stage}B{mb}", kind=Kind.ANNOTATION)
            b.kernel(t0 + 110, t0 + 210, launch_at=t0 + 105)
            t0 += 400.0
    b.host(t0, t0 + 50.0, "PP:5SEND_B1", kind=Kind.ANNOTATION)
    t = b.build()
    ph = phase_times(t, select_window(t))
    assert ph["forward"] == pytest.approx(4 * 50.0)
    assert ph["backward"] == pytest.approx(4 * 100.0)
    assert ph["forward_calls"] == 4.0 and ph["backward_calls"] == 4.0
    assert ph["pp_stage"] == 1.0 and ph["pp_chunks"] == 2.0

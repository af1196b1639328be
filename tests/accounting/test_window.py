"""Analysis window and device-aligned step bounds (gpuprof.accounting.window)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from rankbuilder import RankBuilder

from gpuprof.accounting.window import StepSelection, select_window
from gpuprof.errors import GpuprofError
from gpuprof.model.timeline import Kind
from gpuprof.readers import discover


def _bounds(window: object) -> list[tuple[int, float, float]]:
    return [(s.number, s.start_us, s.end_us) for s in window.steps]  # type: ignore[attr-defined]


def test_host_bound_steps_follow_the_host() -> None:
    b = RankBuilder()
    for n, h0 in ((1, 0.0), (2, 1000.0), (3, 2000.0)):
        b.step(n, h0, h0 + 1000)
        b.kernel(h0 + 510, h0 + 700, launch_at=h0 + 500)
    w = select_window(b.build())
    assert w is not None and w.device_aligned
    assert _bounds(w) == [(1, 0, 1000), (2, 1000, 2000), (3, 2000, 3000)]
    assert (w.start_us, w.end_us) == (0, 3000)


def test_device_bound_steps_follow_the_device() -> None:
    # The host launches each step's 400 us kernel early; the device runs them back to back.
    b = RankBuilder()
    for n, h0, k0 in ((1, 0.0, 50.0), (2, 100.0, 450.0), (3, 200.0, 850.0)):
        b.step(n, h0, h0 + 100)
        b.kernel(k0, k0 + 400, launch_at=h0 + 10)
    w = select_window(b.build())
    assert w is not None
    assert _bounds(w) == [(1, 0, 450), (2, 450, 850), (3, 850, 1250)]
    assert sum(s.duration_us for s in w.steps) == w.end_us - w.start_us


def test_work_launched_before_recording_is_not_in_the_first_step() -> None:
    b = RankBuilder()
    b.kernel(-100, 300)  # launched before the trace began: no launch call recorded
    b.step(1, 0, 1000)
    b.kernel(300, 600, launch_at=10)
    b.step(2, 1000, 2000)
    b.kernel(1010, 1600, launch_at=1005)
    w = select_window(b.build())
    assert w is not None
    assert _bounds(w) == [(1, 300, 1000), (2, 1000, 2000)]


def test_trailing_step_without_device_work_is_left_out() -> None:
    b = RankBuilder()
    b.step(1, 0, 1000)
    b.kernel(20, 900, launch_at=10)
    b.step(2, 1000, 1050)  # Kineto's last marker around profiler.stop()
    w = select_window(b.build())
    assert w is not None
    assert [s.number for s in w.steps] == [1]
    assert w.note is not None and "step 2" in w.note


def test_first_step_whose_device_work_was_not_recorded_is_left_out() -> None:
    b = RankBuilder()
    b.step(1, 0, 1000)
    for i in range(10):  # launches whose kernels the device recording missed
        b.host(10 + i * 10, 15 + i * 10, "cudaLaunchKernel", kind=Kind.RUNTIME, correlation=50 + i)
    b.kernel(900, 990, launch_at=800)
    b.step(2, 1000, 2000)
    b.kernel(1020, 1900, launch_at=1010)
    w = select_window(b.build())
    assert w is not None
    assert [s.number for s in w.steps] == [2]
    assert w.note is not None and "10 of its 11 launches" in w.note


def test_steps_selection_and_errors() -> None:
    b = RankBuilder()
    for n, h0 in ((4, 0.0), (5, 1000.0), (6, 2000.0)):
        b.step(n, h0, h0 + 1000)
        b.kernel(h0 + 10, h0 + 900, launch_at=h0 + 5)
    t = b.build()
    w = select_window(t, StepSelection.parse("5"))
    assert w is not None and _bounds(w) == [(5, 1000, 2000)]
    w = select_window(t, StepSelection.parse("5:"))
    assert w is not None and (w.start_us, w.end_us) == (1000, 3000)
    with pytest.raises(GpuprofError, match="4, 5, 6"):
        select_window(t, StepSelection.parse("7:9"))
    with pytest.raises(GpuprofError):
        StepSelection.parse("x")
    with pytest.raises(GpuprofError):
        StepSelection.parse("5:3")
    assert StepSelection.parse(":5") == StepSelection(None, 5)


def test_without_correlation_host_ranges_are_used() -> None:
    b = RankBuilder()
    b.step(1, 0, 1000)
    b.kernel(100, 1200)  # launch unknown
    b.step(2, 1000, 2000)
    b.kernel(1200, 1900)
    b.step(3, 2000, 2100)  # starts after the last device activity
    w = select_window(b.build())
    assert w is not None and not w.device_aligned
    assert _bounds(w) == [(1, 0, 1000), (2, 1000, 2000)]


def test_no_step_markers_first_to_last_device_activity() -> None:
    b = RankBuilder()
    b.kernel(100, 200, launch_at=90)
    b.copy(250, 400, launch_at=95)
    t = b.build()
    w = select_window(t)
    assert w is not None and (w.start_us, w.end_us) == (100, 400) and w.steps == ()


def test_no_device_activity_has_no_window() -> None:
    b = RankBuilder()
    b.step(1, 0, 1000)
    b.host(10, 20, "aten::add")
    assert select_window(b.build()) is None


def _load(folder: Path) -> list:
    return [t for src in discover([folder]) for t in src.load()]


def test_real_device_lagging_host_uses_device_step_times(shared_traces: Path) -> None:
    # On MI300 the host runs well ahead of the device: the device-aligned steps must be the
    # device's pace (longer than the host annotation), tile the window, and leave out the
    # work launched before profiling began (kernels with no recorded launch).
    (t,) = _load(shared_traces / "mi300-resnet-ckpt-rank0")
    w = select_window(t)
    assert w is not None and w.device_aligned
    host = sorted(t.steps, key=lambda s: s.start_us)
    assert [s.number for s in w.steps] == [s.number for s in host]
    assert all(d.duration_us > h.duration_us for d, h in zip(w.steps, host))
    assert w.start_us > host[0].start_us and w.end_us > host[-1].end_us
    assert sum(s.duration_us for s in w.steps) == pytest.approx(w.end_us - w.start_us)


def test_real_trailing_stop_step_is_left_out(shared_traces: Path) -> None:
    (t,) = _load(shared_traces / "edge-mi250-minitoy")
    w = select_window(t)
    assert w is not None
    assert len(w.steps) == len(t.steps) - 1
    assert w.steps[-1].number == max(s.number for s in t.steps) - 1


def test_steps_option_on_a_trace_without_step_markers_is_an_error() -> None:
    b = RankBuilder()
    b.kernel(100, 200, launch_at=90)
    with pytest.raises(GpuprofError, match="no step markers"):
        select_window(b.build(), StepSelection.parse("3"))


# --- steps that are not contiguous -------------------------------------------------------


def _timer_op(name: str, tid: int, ts: float, dur: float, step: int) -> dict[str, object]:
    return {
        "name": name,
        "cat": name,
        "pid": 0,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "ph": "X",
        "args": {"step": step},
    }


def _stitched_timeline() -> list[dict[str, object]]:
    """One worker, steps 5, 6 and 100 starting at 0, 1000 and 2000 us: 93 steps cannot fit
    in the 300 us after step 6, so the clock is stitched and each step ends at its last op
    (700 us each). Per step: 350 us of compute ops, a 20 us send beside them."""
    events: list[dict[str, object]] = [
        {
            "name": "thread_name",
            "pid": 0,
            "tid": 0,
            "ph": "M",
            "args": {"name": "PP rank 0, TP rank 0, compute"},
        },
        {
            "name": "thread_name",
            "pid": 0,
            "tid": 1,
            "ph": "M",
            "args": {"name": "PP rank 0, TP rank 0, pp-comm"},
        },
    ]
    for step, base in ((5, 0.0), (6, 1000.0), (100, 2000.0)):
        events += [
            _timer_op("forward-compute", 0, base, 100, step),
            _timer_op("forward-send", 1, base + 100, 20, step),
            _timer_op("backward-compute", 0, base + 400, 200, step),
            _timer_op("optimizer", 0, base + 650, 50, step),
        ]
    return events


def test_time_between_timeline_steps_is_left_out_of_the_window(write_trace: Callable[..., Path]) -> None:
    from gpuprof.accounting.attribution import attribute
    from gpuprof.accounting.summarize import summarize
    from gpuprof.model import intervals as iv
    from gpuprof.readers import load_file

    (t,) = load_file(write_trace("timeline.json", {"traceEvents": _stitched_timeline()}))
    assert [(s.start_us, s.end_us) for s in t.steps] == [(0, 700), (1000, 1700), (2000, 2700)]
    w = select_window(t)
    assert w is not None and not w.device_aligned
    assert (w.start_us, w.end_us) == (0, 2700)
    assert w.spans is not None and list(zip(*w.spans)) == [(0, 700), (1000, 1700), (2000, 2700)]
    assert w.duration_us == 2100

    s = summarize(t)
    gaps = iv.make([700.0, 1700.0], [1000.0, 2000.0])
    assert s.window == (0, 2700) and s.window_us == 2100 and s.gaps_us == 600
    assert s.window_us == sum(st.duration_us for st in s.steps)
    assert s.facts.window_gaps_us == 600
    compute, lost = iv.total(s.compute), iv.total(s.lost)
    assert compute == 3 * 350  # forward 100 + backward 200 + optimizer 50 per step
    assert compute + lost == s.window_us
    assert iv.total(iv.intersect(s.lost, gaps)) == 0 and iv.total(iv.intersect(s.compute, gaps)) == 0
    att = attribute(s.lost, s.claims)
    assert sum(att.lost_us.values()) == pytest.approx(lost)
    for cause, ivs in att.intervals.items():
        assert iv.total(iv.intersect(ivs, gaps)) == 0, cause
    # The steps' op time is left in the analysis: each step's 350 us without compute.
    assert lost == 3 * 350


def test_time_between_consecutive_profiler_step_ranges_stays_in_the_window() -> None:
    # Without correlation ids the host ranges are the steps; the 40 us between
    # ProfilerStep#1 and #2 is the job's own time (profiler.step()), as before.
    b = RankBuilder()
    b.step(1, 0, 960)
    b.kernel(100, 900)
    b.step(2, 1000, 2000)
    b.kernel(1100, 1900)
    w = select_window(b.build())
    assert w is not None and not w.device_aligned
    assert w.spans is None and w.duration_us == 2000


def test_time_between_non_consecutive_steps_is_left_out() -> None:
    b = RankBuilder()
    b.step(1, 0, 1000)
    b.kernel(100, 900)
    b.step(2, 1000, 1900)
    b.kernel(1100, 1800)
    b.step(5, 5000, 6000)  # steps 3 and 4 were not recorded
    b.kernel(5100, 5900)
    w = select_window(b.build())
    assert w is not None and not w.device_aligned
    # 1900-2000 would stay between consecutive steps; here 2 ends at its own end (1900).
    assert w.spans is not None and list(zip(*w.spans)) == [(0, 1900), (5000, 6000)]
    assert w.duration_us == 2900


def test_step_spans_fill_only_the_gaps_that_stay() -> None:
    from gpuprof.accounting.window import step_spans
    from gpuprof.model.timeline import Step

    steps = (Step(1, 0, 90), Step(2, 100, 190), Step(4, 300, 400))
    spans = step_spans(steps, reader_ends_steps=False)
    assert spans is not None and list(zip(*spans)) == [(0, 190), (300, 400)]
    spans = step_spans(steps, reader_ends_steps=True)
    assert spans is not None and list(zip(*spans)) == [(0, 90), (100, 190), (300, 400)]
    assert step_spans(steps[:2], reader_ends_steps=False) is None  # contiguous after filling
    assert step_spans((Step(1, 0, 100), Step(2, 100, 200)), reader_ends_steps=True) is None
    assert step_spans(steps[:1], reader_ends_steps=True) is None

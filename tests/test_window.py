"""Analysis window and device-aligned step bounds (gpuprof.analysis.window)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rankbuilder import RankBuilder

from gpuprof.analysis.window import StepSelection, select_window
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

"""The job-level what-if replay (``gpuprof.accounting.graph``, ``replay``, ``whatifs``).

Every answer here is known independently of the replay: each test builds a job with a tiny
simulator written in the test (plain formulas, one rank at a time), once as measured and
once *with the fix applied*, and checks that replaying the measured job with the what-if
gives the step time measured on the fixed job. The unchanged replay must reproduce the
measurement (model error 0) on every sample and shared trace.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from analyzed import analysis_of
from conftest import SHARED_TRACES
from rankbuilder import RankBuilder

from gpuprof.accounting.summarize import summarize
from gpuprof.accounting.summary import RankSummary
from gpuprof.job.cross_rank import analyze_job
from gpuprof.job.replay_rank import scan
from gpuprof.job.whatifs import schedule_span_us
from gpuprof.model.timeline import RankTrace

ROOT = Path(__file__).resolve().parents[2]
SHARED = SHARED_TRACES
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def _measured_step_us(summaries: Sequence[RankSummary]) -> float:
    return max(s.window_us / max(len(s.steps), 1) for s in summaries)


def _job(traces: Sequence[RankTrace]) -> tuple[list[RankSummary], object]:
    summaries = [summarize(t) for t in traces]
    return summaries, analyze_job(summaries)


def dp_job(slow: Sequence[float], steps: int = 5, transfer_us: float = 100.0) -> list[RankTrace]:
    """A data-parallel job: per step each rank computes (1000 µs x its slowness), all-reduces
    (the NCCL kernel waits for the compute on another stream; it ends ``transfer_us`` after
    the last rank arrives), waits for it, runs its optimizer (200 µs x slowness) and waits
    for that before the next step. Simulated here by hand."""
    n = len(slow)
    t = [0.0] * n
    builders = [RankBuilder() for _ in range(n)]
    for step in range(1, steps + 1):
        arrival = [t[r] + 10.0 + 1000.0 * slow[r] for r in range(n)]
        ar_end = max(arrival) + transfer_us
        for r, b in enumerate(builders):
            c, o = 1000.0 * slow[r], 200.0 * slow[r]
            b.kernel(t[r] + 10.0, t[r] + 10.0 + c, launch_at=t[r])
            b.kernel(arrival[r], ar_end, launch_at=t[r] + 6.0, name=NCCL, stream=20)
            b.host(t[r] + 12.0, ar_end + 5.0, "cudaStreamSynchronize")
            s = ar_end + 10.0
            b.kernel(s + 10.0, s + 10.0 + o, launch_at=s, name="multi_tensor_apply_kernel")
            b.host(s + 6.0, s + 10.0 + o + 5.0, "cudaStreamSynchronize")
            end = s + 10.0 + o + 10.0
            b.step(step, t[r], end)
            t[r] = end
    return [b.build(rank=r, world_size=n) for r, b in enumerate(builders)]


def test_scan_matches_the_serial_recurrence() -> None:
    rng = np.random.default_rng(7)
    for _ in range(20):
        n = int(rng.integers(1, 60))
        r = np.sort(rng.uniform(0, 500, n)) + rng.normal(0, 30, n)
        d = rng.uniform(0, 20, n)
        g = np.where(rng.random(n) < 0.3, rng.uniform(0, 15, n), 0.0)
        carry = float(rng.uniform(-50, 100))
        want, prev = [], carry
        for i in range(n):
            prev = max(r[i] + d[i], prev + g[i] + d[i])
            want.append(prev)
        assert np.allclose(scan(r, d, g, carry), want)


def test_unchanged_replay_reproduces_a_coupled_job() -> None:
    summaries, cross = _job(dp_job([1.0, 1.0, 2.0]))
    w = cross.whatifs
    assert w is not None and len(w.model.groups) >= 3
    assert w.baseline.unreached == 0
    assert abs(w.model_error_pct) < 0.01
    assert w.model.measured_step_us == pytest.approx(_measured_step_us(summaries))


def test_slow_rank_fixed_gives_the_step_of_the_job_without_it() -> None:
    """One rank computes 2x slower than its two peers; at the peers' median it is the job
    with three equal ranks, whose step we measure on its own traces."""
    slow_s, slow = _job(dp_job([1.0, 1.0, 2.0]))
    fixed_s, _ = _job(dp_job([1.0, 1.0, 1.0]))
    assert slow.whatifs is not None
    truth = 100.0 * (1.0 - _measured_step_us(fixed_s) / _measured_step_us(slow_s))
    got = slow.whatifs.savings_pct("peer_median_compute")
    assert truth > 30.0
    assert got == pytest.approx(truth, rel=0.02)
    # The replayed step of every rank, not only the slow one, drops: they no longer wait.
    replayed = slow.whatifs.results["peer_median_compute"].ranks
    assert max(r.step_us for r in replayed.values()) == pytest.approx(_measured_step_us(fixed_s), rel=0.02)


def test_faster_transfers_shorten_every_rank() -> None:
    slow_s, slow = _job(dp_job([1.0, 1.0, 1.0], transfer_us=400.0))
    fast_s, _ = _job(dp_job([1.0, 1.0, 1.0], transfer_us=200.0))
    none_s, _ = _job(dp_job([1.0, 1.0, 1.0], transfer_us=0.0))
    assert slow.whatifs is not None
    m = _measured_step_us(slow_s)
    assert slow.whatifs.savings_pct("double_bandwidth") == pytest.approx(
        100.0 * (1 - _measured_step_us(fast_s) / m), rel=0.02
    )
    assert slow.whatifs.savings_pct("overlap_collectives") == pytest.approx(
        100.0 * (1 - _measured_step_us(none_s) / m), rel=0.02
    )


def sync_then_python(sync: bool, steps: int = 5, layers: int = 4) -> RankTrace:
    """Per layer the host launches a 3 ms kernel, optionally blocks on it (``.item()``), then
    runs 2 ms of Python before the next launch. Without the sync the Python overlaps the
    kernel and the kernels run back to back."""
    b = RankBuilder()
    t = 0.0
    dev_free = 0.0
    for step in range(1, steps + 1):
        start = t
        for _ in range(layers):
            k0 = max(t + 10.0, dev_free)
            b.kernel(k0, k0 + 3000.0, launch_at=t)
            dev_free = k0 + 3000.0
            t += 6.0
            if sync:
                b.host(t, dev_free + 5.0, "aten::item")
                t = dev_free + 5.0
            b.host(t, t + 2000.0, "python_work")
            t += 2000.0
        b.step(step, start, t)
    return b.build()


def test_sync_followed_by_host_work_no_sync_matches_the_job_without_syncs() -> None:
    with_sync = summarize(sync_then_python(True))
    without = summarize(sync_then_python(False))
    cross = analyze_job([with_sync])
    assert cross.whatifs is not None
    truth = 100.0 * (1.0 - _measured_step_us([without]) / _measured_step_us([with_sync]))
    assert truth > 20.0
    assert cross.whatifs.savings_pct("no_sync") == pytest.approx(truth, rel=0.05)


def test_schedule_model_bubble_matches_the_closed_form() -> None:
    """Balanced stages: the schedule model's idle share is (p-1)/(m+p-1) for GPipe and 1F1B."""
    for schedule in ("gpipe", "1f1b"):
        for p, m in ((2, 4), (4, 4), (4, 8)):
            span = schedule_span_us([1.0] * p, [2.0] * p, m, schedule)
            work = 3.0 * m
            assert 1.0 - work / span == pytest.approx((p - 1) / (m + p - 1), rel=1e-9)


def _dirs(root: Path) -> list[Path]:
    return sorted(d for d in root.iterdir() if d.is_dir() and d.name != "LICENSES") if root.is_dir() else []


@pytest.mark.parametrize("folder", _dirs(ROOT / "sample_traces") + _dirs(SHARED), ids=lambda p: p.name)
def test_unchanged_replay_reproduces_every_trace(folder: Path) -> None:
    a = analysis_of(folder)  # run_analysis([folder]), once per session
    w = a.cross.whatifs
    if w is None:
        assert all(s.graph is None for s in a.summaries)
        return
    # A cut edge case (a kernel that starts before its step's first launch) may leave a
    # fraction of a percent; everything else replays exactly.
    assert abs(w.model_error_pct) < 1.0, folder.name
    assert w.baseline.unreached <= max(1, len(w.model.groups) // 100)


@pytest.mark.parametrize(
    "folder",
    [ROOT / "sample_traces" / n for n in ("sync-then-host", "pipeline-dp2", "megatron-timeline", "straggler")],
    ids=lambda p: p.name,
)
def test_short_runs_in_python_give_the_numpy_scan_to_the_last_bit(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Short runs of events are replayed element by element in Python, long ones by
    ``scan``: the same operations in the same order, so every what-if's replayed step
    times are the same to the last bit either way."""
    from gpuprof.job import replay_compile
    from gpuprof.job.whatifs import JobModel

    w = analysis_of(folder).cross.whatifs  # fresh models below: the shared one is only read
    assert w is not None
    names = [n for n in w.model.applicable() if n != "double_microbatches"]

    def replays(model: JobModel) -> list[object]:
        fresh = JobModel(**{f: getattr(model, f) for f in model.__dataclass_fields__ if f != "_plan"})
        return [fresh.replay((n,)).ranks for n in names] + [fresh.replay(()).ranks]

    python_runs = replays(w.model)
    monkeypatch.setattr(replay_compile, "_SHORT_RUN", 0)
    numpy_runs = replays(w.model)
    monkeypatch.setattr(replay_compile, "_SHORT_RUN", 10**9)
    all_python = replays(w.model)
    assert python_runs == numpy_runs == all_python

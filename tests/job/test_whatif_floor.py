"""No what-if saves more than the idle time it acts on (issue 29, item 4; gpuprof.job.floor).

"free host 93.6 %" was reported on an inference trace whose GPU computed 99.7 % of the
window, and "overlap collectives 100.0 %" on a trace whose only device work is one
collective: a fix that keeps the compute cannot make the step shorter than a rank's
compute, a fix of something else leaves the transfers their time, and collectives cannot
be hidden behind compute that is not there.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from analyzed import analysis_of  # run_analysis([folder]), once per session

from gpuprof.job.floor import CHANGES_COMPUTE
from gpuprof.job.replay_types import JobReplay, RankReplay
from gpuprof.render import figures as fg

ROOT = Path(__file__).resolve().parents[2]


def _room_pct(report) -> float:  # type: ignore[no-untyped-def]
    step = fg.job_step_time_us(report)
    busy = max(r.compute_us / max(r.steps, 1) for r in report.ranks if fg.has_data(r))
    return 100.0 * (step - busy) / step


@pytest.mark.parametrize("sample", ["healthy", "dp-overlapped", "launch-bound"])
def test_a_replay_that_runs_away_is_held_to_the_idle_time(sample: str) -> None:
    """However short a replay makes the step (the model's own error), the saving of a fix
    that keeps the compute stops at the idle time of the rank that sets the step."""
    a = analysis_of(ROOT / "sample_traces" / sample)
    w = a.cross.whatifs
    assert w is not None and w.results
    room = _room_pct(a.report)
    tiny = JobReplay({r: RankReplay(1.0, (1.0,)) for r in w.baseline.ranks})
    broken = replace(w, results={name: tiny for name in w.results})
    for name in w.results:
        got = broken.savings_pct(name)
        assert got is not None
        if name in CHANGES_COMPUTE:
            continue
        assert got <= room + 1e-6, (name, got, room)
    keeps = [n for n in w.results if n not in CHANGES_COMPUTE]
    assert (broken.combined_pct(keeps) or 0.0) <= room + 1e-6
    # The step the report gives for each what-if follows the saving.
    steps = broken.to_dict()["step_us"]
    for name in keeps:
        assert steps[name] >= w.baseline.step_us - w.model.measured_step_us * room / 100 - 1e-3


def test_healthy_sample_cannot_save_more_than_its_idle_time() -> None:
    """The sample computes 98.9 % of its window: no fix that keeps the compute saves 2 %."""
    a = analysis_of(ROOT / "sample_traces" / "healthy")
    assert _room_pct(a.report) < 2.0
    savings = a.report.extra["job"]["whatif"]["savings_pct"]
    assert savings and max(savings.values()) < 2.0


def test_nothing_to_hide_collectives_behind(shared_traces: Path) -> None:
    """The large-integer edge trace's only device work is one collective: there is no
    compute to hide it behind, so overlapping is no what-if of this trace (it said 100.0 %);
    a link twice as fast halves it."""
    a = analysis_of(shared_traces / "edge-large-integer")
    savings = a.report.extra["job"]["whatif"]["savings_pct"]
    assert "overlap_collectives" not in savings, savings
    assert savings["double_bandwidth"] == pytest.approx(50.0, abs=0.5)
    assert "overlap collectives" not in str(a.report)


def test_transfers_bound_the_fixes_of_other_causes(shared_traces: Path) -> None:
    """One rank of an 8-rank MI300X job, collectives 62 % of its window beside 34 %
    compute: a fix of something else leaves the transfers on their stream, so its step is
    no shorter than them; twice the bandwidth halves them; overlapping them (transfers
    costing nothing) is bounded by the compute alone."""
    a = analysis_of(shared_traces / "mi300-resnet-ckpt-rank0")
    w = a.cross.whatifs
    assert w is not None
    m = w.model.measured_step_us
    other = w.model.step_floor_us(["hidden_copies"])
    assert other > 0.34 * m * 1.1  # the transfers, not the compute, bind
    assert w.model.step_floor_us(["double_bandwidth"]) == pytest.approx(max(other / 2, w.model.step_floor_us(["overlap_collectives"])), rel=1e-6)
    assert w.model.step_floor_us(["overlap_collectives"]) == pytest.approx(
        a.report.ranks[0].compute_us / a.report.ranks[0].steps, rel=0.02
    )
    for name in w.results:
        if name not in CHANGES_COMPUTE:
            got = w.savings_pct(name)
            assert got is not None and got <= 100.0 * (m - w.model.step_floor_us([name])) / m + 1e-6, name

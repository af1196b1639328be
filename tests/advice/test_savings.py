"""The savings model: the critical (slowest) rank bounds the job's step time."""

from __future__ import annotations

import pytest

from gpuprof.advice.savings import cause_savings_pct, job_step_time_us, savings_pct
from gpuprof.model.report import Cause, RankReport, zero_lost


def _rank(rank: int, window_us: float, steps: int = 1, **lost: float) -> RankReport:
    lost_us = zero_lost()
    for k, v in lost.items():
        lost_us[Cause(k)] = v
    compute = window_us - sum(lost.values())
    return RankReport(rank=rank, device=None, steps=steps, window_us=window_us, compute_us=compute, lost_us=lost_us)


def test_removing_a_cause_on_the_only_rank_saves_its_share() -> None:
    reports = [_rank(0, 1000.0, dataloader=250.0)]
    assert cause_savings_pct(reports, Cause.DATALOADER) == pytest.approx(25.0)


def test_critical_rank_bounds_the_step() -> None:
    # Rank 1 is slower and has no dataloader time: fixing rank 0's input saves nothing.
    reports = [_rank(0, 1000.0, dataloader=300.0), _rank(1, 1100.0)]
    assert job_step_time_us(reports) == 1100.0
    assert cause_savings_pct(reports, Cause.DATALOADER) == 0.0
    # Fixing it everywhere where it occurs and on the critical rank does help.
    reports = [_rank(0, 1000.0, dataloader=300.0), _rank(1, 1100.0, dataloader=400.0)]
    assert cause_savings_pct(reports, Cause.DATALOADER) == pytest.approx(100 * (1100 - 700) / 1100)


def test_step_time_is_per_step() -> None:
    reports = [_rank(0, 2000.0, steps=4, host=400.0), _rank(1, 1000.0, steps=1)]
    # rank 0: 500 us/step, rank 1: 1000 us/step -> rank 1 is critical.
    assert job_step_time_us(reports) == 1000.0
    assert savings_pct(reports, {1: 100.0}) == pytest.approx(10.0)

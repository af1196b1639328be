"""The savings model behind ``estimated_savings_pct``.

A synchronous training job moves at the pace of its slowest rank: the job's step time is
the largest per-rank step time (window / steps). Removing a cause on some ranks shortens
those ranks' windows by the time attributed to that cause; the new job step time is again
the largest per-rank step time. The estimate is the relative drop of the job step time:

    savings_pct = 100 * (T_now - T_after) / T_now,   T = max over ranks of window_us / steps

So a cause that only occurs on ranks that are not critical saves nothing until the critical
rank improves too -- which is the honest answer for a synchronous job.

No saving is estimated (0) when every rank's window is shorter than :data:`MIN_WINDOW_US`:
a few kernels say nothing about a job (the summary warns about such a window).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from gpuprof.model.report import Cause, RankReport

# Shorter windows than this (on every rank) give no savings estimate.
MIN_WINDOW_US = 1000.0


def step_time_us(r: RankReport) -> float:
    """Per-step time of one rank; the whole window when it has no step markers."""
    return r.window_us / r.steps if r.steps > 0 else r.window_us


def job_step_time_us(reports: Sequence[RankReport]) -> float:
    return max((step_time_us(r) for r in reports), default=0.0)


def savings_pct(
    reports: Sequence[RankReport],
    removed_us: Mapping[int, float],
) -> float:
    """Savings when ``removed_us[rank]`` microseconds of window vanish on each listed rank."""
    now = job_step_time_us(reports)
    if now <= 0 or all(r.window_us < MIN_WINDOW_US for r in reports):
        return 0.0
    after = 0.0
    for r in reports:
        cut = removed_us.get(r.rank, 0.0)
        window = max(r.window_us - cut, 0.0)
        after = max(after, window / r.steps if r.steps > 0 else window)
    return max(0.0, 100.0 * (now - after) / now)


def cause_savings_pct(
    reports: Sequence[RankReport],
    cause: Cause,
    ranks: Collection[int] | None = None,
    fraction: float = 1.0,
) -> float:
    """Savings when ``fraction`` of ``cause``'s lost time vanishes on ``ranks`` (all if None)."""
    removed = {
        r.rank: fraction * float(r.lost_us.get(cause, 0.0))
        for r in reports
        if ranks is None or r.rank in ranks
    }
    return savings_pct(reports, removed)

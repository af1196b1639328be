"""The step clock over the whole run: every optimizer step's time, per rank and for the job.

The torch hooks log the end of every optimizer step of every process (``step`` records of
``hooks/*.jsonl``, the session's ``hook_events``); a step's time is the interval from the
previous step's end in the same process. Pure: the hook records in, a :class:`StepClock` out.

* **Per rank**: a process's steps, keyed by its rank (its pid when it has none).
* **The job's step time** of step N: the median over the processes that logged N (in
  synchronous training every rank takes the same time per step; the median ignores one
  process whose clock hiccupped).
* **Changes** over the run: the job's series through the same change-point test the live run
  uses (:func:`gpuprof.record.changepoint.detect_changes`), leaving out the steps profiled
  windows slowed.
* **The slowest rank**: :func:`gpuprof.record.rankclock.slowest_rank` over every step the
  ranks share (the time from a step's end to the next backward, ``backward_unix_s``).
* **Series for a plot**: every step while there are at most :data:`MAX_POINTS`; beyond,
  consecutive steps in bins with their median, lowest and highest step, so that no step is
  left out of the picture.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from gpuprof.record.changepoint import Change, ChangeTest, detect_changes
from gpuprof.record.rankclock import SlowRank, slowest_rank
from gpuprof.util.jsontypes import JsonObject

if TYPE_CHECKING:
    import pandas as pd

MAX_POINTS = 2000


@dataclass(frozen=True)
class RankSteps:
    """One process's steps: numbers, end times (Unix seconds) and times (microseconds; the
    first step has none: NaN), and the time from the previous step's end to the step's first
    backward (NaN where unknown)."""

    key: int  # the rank, or the pid of a process without one
    ranked: bool
    steps: np.ndarray
    end_unix_s: np.ndarray
    step_us: np.ndarray
    to_backward_us: np.ndarray


@dataclass(frozen=True)
class StepClock:
    ranks: tuple[RankSteps, ...]
    steps: np.ndarray  # the job's steps with a time, ascending
    step_us: np.ndarray  # the job's step time of each (median over processes)
    end_unix_s: np.ndarray  # when each ended (the earliest process to end it)

    @property
    def median_us(self) -> float | None:
        return float(np.median(self.step_us)) if len(self.step_us) else None


def step_clock(hook_events: pd.DataFrame | None) -> StepClock | None:
    """The step clock of a session's hook records; ``None`` when no step has a time."""
    h = hook_events
    if h is None or "kind" not in h or "step" not in h or "pid" not in h or "time_unix_s" not in h:
        return None
    steps = h[(h["kind"] == "step") & h["step"].notna()]
    if not len(steps):
        return None
    ranks: list[RankSteps] = []
    for pid, g in steps.groupby("pid", sort=True):
        g = g.drop_duplicates("step", keep="first").sort_values("step", kind="stable")
        n = g["step"].to_numpy(dtype=np.int64)
        t = g["time_unix_s"].to_numpy(dtype=np.float64)
        dt = np.full(len(n), np.nan)
        follows = np.diff(n) == 1  # only consecutive steps give a step time
        dt[1:][follows] = (np.diff(t) * 1e6)[follows]
        back = np.full(len(n), np.nan)
        if "backward_unix_s" in g:
            b = g["backward_unix_s"].to_numpy(dtype=np.float64)
            ok = np.zeros(len(n), dtype=bool)
            ok[1:] = follows & (b[1:] >= t[:-1])
            back[ok] = (b[ok] - np.concatenate(([np.nan], t[:-1]))[ok]) * 1e6
        rank = g["rank"].dropna() if "rank" in g else g["step"].iloc[:0]
        ranked = len(rank) > 0
        key = int(rank.iloc[0]) if ranked else int(pid)
        ranks.append(RankSteps(key, ranked, n, t, dt, back))
    all_steps = np.unique(np.concatenate([r.steps[~np.isnan(r.step_us)] for r in ranks]))
    if not len(all_steps):
        return None
    per_step = np.full((len(ranks), len(all_steps)), np.nan)
    ends = np.full((len(ranks), len(all_steps)), np.nan)
    for i, r in enumerate(ranks):
        idx = np.searchsorted(all_steps, r.steps)
        inside = (idx < len(all_steps)) & (all_steps[np.minimum(idx, len(all_steps) - 1)] == r.steps)
        per_step[i, idx[inside]] = r.step_us[inside]
        ends[i, idx[inside]] = r.end_unix_s[inside]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a step only some processes timed
        job = np.nanmedian(per_step, axis=0)
        end = np.nanmin(ends, axis=0)
    keep = ~np.isnan(job)
    return StepClock(ranks=tuple(ranks), steps=all_steps[keep], step_us=job[keep], end_unix_s=end[keep])


def changes(clock: StepClock, skip: Iterable[tuple[int, int]] = (), test: ChangeTest | None = None) -> list[Change]:
    """Every change of the job's step time, as the live run would have declared it."""
    return detect_changes(clock.steps.tolist(), (clock.step_us / 1e6).tolist(), skip, test or ChangeTest())


def slowest(clock: StepClock, first_step: int | None = None) -> SlowRank | None:
    """The consistently slowest rank over every step the ranks share (from ``first_step``)."""
    per: dict[int, dict[int, float]] = {}
    for r in clock.ranks:
        if not r.ranked:
            continue
        ok = ~np.isnan(r.to_backward_us)
        if first_step is not None:
            ok &= r.steps >= first_step
        per[r.key] = dict(zip(r.steps[ok].tolist(), (r.to_backward_us[ok] / 1e6).tolist()))
    step_s = dict(zip(clock.steps.tolist(), (clock.step_us / 1e6).tolist()))
    return slowest_rank(per, step_s, window_steps=max(1, len(clock.steps)))


def series(clock: StepClock, max_points: int = MAX_POINTS) -> JsonObject:
    """The job's step time for a plot: every step, or bins of consecutive steps (see the
    module docstring). Keys: ``binned``, ``step`` (first step of each point), ``last_step``,
    ``median_us``, ``min_us``, ``max_us``."""
    n = len(clock.steps)
    if n <= max_points:
        us = np.round(clock.step_us, 3).tolist()
        s = clock.steps.tolist()
        return {"binned": False, "step": s, "last_step": s, "median_us": us, "min_us": us, "max_us": us}
    edges = np.linspace(0, n, max_points + 1).astype(np.int64)
    first, last, med, lo, hi = [], [], [], [], []
    for a, b in itertools.pairwise(edges):
        if b <= a:
            continue
        chunk = clock.step_us[a:b]
        first.append(int(clock.steps[a]))
        last.append(int(clock.steps[b - 1]))
        med.append(round(float(np.median(chunk)), 3))
        lo.append(round(float(chunk.min()), 3))
        hi.append(round(float(chunk.max()), 3))
    return {"binned": True, "step": first, "last_step": last, "median_us": med, "min_us": lo, "max_us": hi}


def level_us(clock: StepClock, first: int, last: int, skip: Iterable[tuple[int, int]] = ()) -> float | None:
    """The job's median step time over steps ``first..last``, leaving out ``skip`` ranges."""
    mask = (clock.steps >= first) & (clock.steps <= last)
    for a, b in skip:
        mask &= ~((clock.steps >= a) & (clock.steps <= b))
    vals = clock.step_us[mask]
    return float(np.median(vals)) if len(vals) else None


__all__ = ["MAX_POINTS", "RankSteps", "StepClock", "changes", "level_us", "series", "slowest", "step_clock"]

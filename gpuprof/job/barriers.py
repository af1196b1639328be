"""Barriers of op-level timelines: found, their waits measured and claimed, and described.

Framework timers are often started behind a barrier (Megatron's ``barrier_with_L1_time``):
the op then starts at the same instant on every worker, and the wait for the last worker
is an idle gap *before* the op that no timer covers. A start shared by every worker of
the job (to within :data:`~gpuprof.job.untimed.SYNC_TOL_US`) marks such a barrier. A
worker arrives at it when its last activity before it (compute or its own communication)
ends; the time from its arrival to the last worker's arrival is waiting for a slower rank,
claimed as ``straggler`` (:func:`barrier_waits`). :func:`barrier_findings` turns the waits
into the job finding ``barrier_waits`` (see :mod:`gpuprof.job.cross_rank`): who waits, who
is waited for, and what the waited-for ranks communicate between their last compute and
the barriers (:func:`comm_before_barriers`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gpuprof.accounting.summary import RankSummary
from gpuprof.job.findings import BarrierFindings, LateComm
from gpuprof.job.untimed import SYNC_TOL_US
from gpuprof.model import intervals as iv
from gpuprof.model.table import Table


@dataclass(frozen=True)
class BarrierWaits:
    """``claims[rank]``: waits at barriers (own clock); ``points``: barriers found;
    ``wait_us[rank]``: total wait; ``last[rank]``: barriers it arrived last at;
    ``last_activity[name]``: what the last arriver was doing just before (op name or
    ``compute``), counted over barriers; ``points_us``: the barriers' times on the aligned
    clock."""

    claims: Mapping[int, iv.Intervals]
    points: int
    wait_us: Mapping[int, float]
    last: Mapping[int, int]
    last_activity: Mapping[str, int]
    points_us: tuple[float, ...] = ()


def _names(c: Table) -> np.ndarray:
    """The ``name`` column of a comms table as strings (an object array)."""
    out = np.empty(len(c), dtype=object)
    if len(c):
        out[:] = [str(v) for v in c["name"].tolist()]
    return out


def comm_before_barriers(
    s: RankSummary, points_us: Sequence[float], offset_us: float
) -> list[tuple[int, str, float]]:
    """The communication ``s`` ran between its last compute and each barrier.

    ``points_us`` are barrier times on the aligned clock (``offset_us`` is the rank's clock
    offset). Returns ``(barrier index, op name, duration_us)`` for every communication op
    that starts at or after the rank's last compute before the barrier and ends by it:
    what kept the rank from reaching the barrier once its compute was done.
    """
    out: list[tuple[int, str, float]] = []
    c = s.comms_table
    if len(c) == 0 or not len(points_us):
        return out
    cs = np.asarray(c["start_us"], dtype=np.float64)
    ce = np.asarray(c["end_us"], dtype=np.float64)
    names = _names(c)
    comp_end = np.sort(s.compute[1])
    for j, p in enumerate(points_us):
        q = float(p) + offset_us
        k = int(np.searchsorted(comp_end, q + SYNC_TOL_US, side="right")) - 1
        after = comp_end[k] if k >= 0 else -np.inf
        # A compute interval ending at the barrier itself is the op after it: look before.
        if k >= 0 and abs(after - q) <= SYNC_TOL_US:
            after = comp_end[k - 1] if k >= 1 else -np.inf
        sel = np.flatnonzero((cs >= after - SYNC_TOL_US) & (ce <= q + SYNC_TOL_US) & (ce > after))
        out.extend((j, str(names[i]), float(ce[i] - cs[i])) for i in sel)
    return out


def _activity(s: RankSummary, offset: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Aligned starts (sorted) and ends (sorted) of a rank's activity, plus the names of
    its communication ops by aligned end (``compute`` for compute intervals)."""
    c = s.comms_table
    cs = np.asarray(c["start_us"], dtype=np.float64) if len(c) else np.empty(0)
    ce = np.asarray(c["end_us"], dtype=np.float64) if len(c) else np.empty(0)
    names = _names(c)
    starts = np.unique(np.concatenate((s.compute[0], cs))) - offset
    ends = np.concatenate((s.compute[1], ce)) - offset
    labels = np.concatenate((np.full(s.compute[1].size, "compute", dtype=object), names))
    order = np.argsort(ends, kind="stable")
    return starts, ends[order], labels[order], np.asarray([st.start_us for st in s.steps]) - offset


def barrier_waits(summaries: Sequence[RankSummary], offsets: Mapping[int, float]) -> BarrierWaits | None:
    """Waits at barriers of an op-level timeline job (``None`` for other jobs or < 3 ranks)."""
    if len(summaries) < 3 or not all(s.holds.untimed_waits and s.steps for s in summaries):
        return None
    acts = {s.rank: _activity(s, offsets.get(s.rank, 0.0)) for s in summaries}
    ref_rank = min(acts, key=lambda r: acts[r][0].size)
    cand = acts[ref_rank][0]
    keep = np.ones(cand.size, dtype=bool)
    for starts, _, _, _ in acts.values():
        if starts.size == 0:
            return None
        i = np.minimum(np.searchsorted(starts, cand), starts.size - 1)  # a worker may have one activity
        near = np.minimum(np.abs(starts[i] - cand), np.abs(starts[np.maximum(i - 1, 0)] - cand))
        keep &= near <= SYNC_TOL_US
    points = cand[keep]
    if points.size == 0:
        return None
    ranks = sorted(acts)
    arrival = np.empty((len(ranks), points.size))
    label = np.empty((len(ranks), points.size), dtype=object)
    for j, r in enumerate(ranks):
        _, ends, labels, step_starts = acts[r]
        k = np.searchsorted(ends, points + SYNC_TOL_US, side="right") - 1
        # Nothing before the barrier in this step: the worker was there from the step start.
        first = step_starts[np.clip(np.searchsorted(step_starts, points, side="right") - 1, 0, None)]
        got = np.where(k >= 0, ends[np.clip(k, 0, None)], -np.inf)
        arrival[j] = np.clip(np.maximum(got, first), None, points)
        label[j] = np.where((k >= 0) & (got >= first), labels[np.clip(k, 0, None)], "compute")
    last_arrival = arrival.max(axis=0)
    wait = last_arrival[None, :] - arrival
    # A shared start that nobody waited for (every worker begins the step together) says
    # nothing: keep the barriers where some worker did wait.
    held = wait.max(axis=0) > SYNC_TOL_US
    if not held.any():
        return None
    points, arrival, label, last_arrival, wait = (
        points[held],
        arrival[:, held],
        label[:, held],
        last_arrival[held],
        wait[:, held],
    )
    claims: dict[int, iv.Intervals] = {}
    last_count: dict[int, int] = {}
    activity: dict[str, int] = {}
    for j, r in enumerate(ranks):
        off = offsets.get(r, 0.0)
        w = wait[j] > 0
        if w.any():
            claims[r] = iv.union(arrival[j][w] + off, last_arrival[w] + off)
        last_count[r] = int((wait[j] <= 0).sum())
    lasts = np.argmax(arrival, axis=0)
    for p, j in enumerate(lasts):
        name = str(label[j, p])
        activity[name] = activity.get(name, 0) + 1
    return BarrierWaits(
        claims=claims,
        points=int(points.size),
        wait_us={r: float(wait[j].sum()) for j, r in enumerate(ranks)},
        last=last_count,
        last_activity=activity,
        points_us=tuple(float(p) for p in points),
    )


# A call is an outlier when it takes this many times the median of its name.
OUTLIER_FACTOR = 5.0


def _late_comm(
    b: BarrierWaits,
    summaries: Sequence[RankSummary],
    offsets: Mapping[int, float],
    late: Sequence[int],
) -> list[LateComm]:
    """What the ranks everyone waits for communicate between their last compute and the
    barriers, per op name, against the same ops on the waiting ranks."""
    by_rank = {s.rank: s for s in summaries}
    mine: dict[str, list[tuple[int, float]]] = {}
    theirs: dict[str, list[float]] = {}
    for r, s in by_rank.items():
        for j, name, dur in comm_before_barriers(s, b.points_us, offsets.get(r, 0.0)):
            if r in late:
                mine.setdefault(name, []).append((j, dur))
            else:
                theirs.setdefault(name, []).append(dur)
    out: list[LateComm] = []
    for name, rows in mine.items():
        durs = np.array([d for _, d in rows])
        med = float(np.median(durs))
        odd = durs > OUTLIER_FACTOR * max(med, 1.0)
        other = theirs.get(name)
        out.append(
            LateComm(
                name=name,
                calls=int(durs.size),
                median_us=round(med, 3),
                outliers=int(odd.sum()),
                outlier_us=(round(float(durs[odd].min()), 3), round(float(durs[odd].max()), 3)) if odd.any() else None,
                outlier_barriers=tuple(sorted({rows[i][0] for i in np.flatnonzero(odd)})),
                total_us=round(float(durs.sum()), 3),
                only_late_ranks=other is None,
                waiting_median_us=None if other is None else round(float(np.median(other)), 3),
            )
        )
    out.sort(key=lambda x: -float(x.total_us))
    return out


def barrier_findings(
    b: BarrierWaits, summaries: Sequence[RankSummary], offsets: Mapping[int, float] | None = None
) -> BarrierFindings:
    """The barrier finding of the barrier waits ``b``; ``offsets``: the ranks' clock
    offsets, to place the barriers on each rank."""
    steps = {s.rank: s.step_count for s in summaries}
    per_step = {r: w / steps.get(r, 1) for r, w in b.wait_us.items()}
    top = max(per_step.values(), default=0.0)
    # The ranks the others wait for: they themselves (almost) never wait.
    waited_for = sorted(r for r, w in per_step.items() if w <= 0.1 * top) if top > 0 else []
    return BarrierFindings(
        barriers=b.points,
        wait_us_per_step={r: round(w, 3) for r, w in sorted(per_step.items())},
        last_arrivals=dict(sorted(b.last.items())),
        waited_for_ranks=tuple(waited_for),
        last_activity=dict(sorted(b.last_activity.items(), key=lambda kv: -kv[1])),
        late_comm=tuple(_late_comm(b, summaries, offsets or {}, waited_for)) if waited_for and b.points_us else None,
    )


__all__ = [
    "OUTLIER_FACTOR",
    "BarrierWaits",
    "barrier_findings",
    "barrier_waits",
    "comm_before_barriers",
]

"""Untimed waits of op-level timelines: when a worker arrived at a collective, and how much
of its wait was for its own pipeline.

Exporters of framework timers often record a collective's transfer only (the op's
start moved to its end minus the transfer time), so every member's op starts at the
same instant and the wait for the last member is an idle gap *before* the op that no
timer covers. A worker arrives at a collective when its last activity before the op
ends (any op on any of its threads, not before its step's start): ``ready_us``. The
wait runs from that arrival to the last member's, through the untimed gap and, when
the timer did include the wait, into the op. Where the layout names pipeline
replicas, the part of a wait until the last member of the worker's *own* replica
(another stage of its pipeline) arrives is waiting on its own pipeline, the
``pipeline_bubble`` cause (the drain into the step-end collectives); only the rest,
waiting for another replica, is ``straggler``. A worker that arrives last does not
wait: its own gap before the op stays with the other rules.

:func:`ready_times` gives each call's arrival (``ready_us`` of
:class:`gpuprof.job.collectives.MatchedCollectives`) and what the worker did last;
:func:`own_replica_waits` the part of each wait spent on the worker's own pipeline
replica (``own_wait_us``). Barriers before timer ops, the other untimed wait, are in
:mod:`gpuprof.job.barriers`.
"""

from __future__ import annotations

import numpy as np

from gpuprof.accounting.summary import RankSummary
from gpuprof.model.timeline import Category

# Ops of a worker within this long of each other start together (a barrier, a shared
# instant); a worker's last activity may overlap the op it arrives at by as much.
SYNC_TOL_US = 20.0

# What a worker did last before it arrived at a collective (``ready_kind``).
READY_PIPELINE = 0  # compute or point-to-point: its pipeline's work (or the step start)
READY_COLLECTIVE = 1  # another collective


def ready_times(s: RankSummary, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """When a worker of an op-level timeline arrived at each op starting at ``starts``,
    and what it did last (:data:`READY_PIPELINE` / :data:`READY_COLLECTIVE`): the end of
    its last activity (compute, or any of its communication ops) that began before the op
    and ended by its start (a few microseconds of overlap allowed), not before the start
    of the op's step; never after the op's start."""
    c = s.comms_table
    cs = np.asarray(c["start_us"], dtype=np.float64) if len(c) else np.empty(0)
    ce = np.asarray(c["end_us"], dtype=np.float64) if len(c) else np.empty(0)
    coll = (np.asarray(c["category"]) == int(Category.COLLECTIVE)) if len(c) else np.zeros(0, dtype=bool)
    a_start = np.concatenate((s.compute[0], cs))
    a_end = np.concatenate((s.compute[1], ce))
    a_coll = np.concatenate((np.zeros(s.compute[0].size, dtype=bool), coll))
    # Activity that began before each op, latest end first: the op's arrival is the latest
    # end among them that is not after the op's start (plus a little overlap).
    by_end = np.argsort(a_end, kind="stable")
    e_sorted, s_sorted, c_sorted = a_end[by_end], a_start[by_end], a_coll[by_end]
    ready = np.full(starts.size, -np.inf)
    kind = np.full(starts.size, READY_PIPELINE, dtype=np.int8)
    hi = np.searchsorted(e_sorted, starts + SYNC_TOL_US, side="right")
    for n, (t, j) in enumerate(zip(starts.tolist(), hi.tolist())):
        i = j - 1
        while i >= 0 and s_sorted[i] >= t:  # began with or after the op: not before it
            i -= 1
        if i >= 0:
            ready[n] = e_sorted[i]
            kind[n] = READY_COLLECTIVE if c_sorted[i] else READY_PIPELINE
    step_starts = np.sort(np.asarray([st.start_us for st in s.steps], dtype=np.float64))
    if step_starts.size:
        i = np.searchsorted(step_starts, starts, side="right") - 1
        first = np.where(i >= 0, step_starts[np.maximum(i, 0)], -np.inf)
        kind = np.where(first > ready, np.int8(READY_PIPELINE), kind)
        ready = np.maximum(ready, first)
    return np.where(np.isfinite(ready), np.minimum(ready, starts), starts), kind


def own_replica_waits(
    key: np.ndarray, replica: np.ndarray, arrival: np.ndarray, ready_kind: np.ndarray, wait_us: np.ndarray
) -> np.ndarray:
    """Per call, the part of its wait until the last *other* member of the rank's own
    pipeline replica arrived, when that member came straight from its pipeline work (its
    drain); 0 where the layout names no replica or the member came from a collective of
    its own (extra communication is a slower rank's, not the pipeline's)."""
    out = np.zeros(key.size)
    sel = np.flatnonzero(replica >= 0)
    if sel.size == 0:
        return out
    key = key[sel]
    rep = replica[sel]
    arr = arrival[sel]
    kind = ready_kind[sel]
    wait = wait_us[sel]
    # Sorted by (key, replica, arrival): the last of each block, and the one before it.
    order = np.lexsort((arr, rep, key))
    k, r, a, kd = key[order], rep[order], arr[order], kind[order]
    block = np.concatenate(([True], (k[1:] != k[:-1]) | (r[1:] != r[:-1])))
    bid = np.cumsum(block) - 1
    last = np.flatnonzero(np.concatenate((block[1:], [True])))  # last index of each block
    size = np.diff(np.concatenate((np.flatnonzero(block), [order.size])))
    li = last[bid]
    pi = np.where(size[bid] > 1, li - 1, li)
    awaited = np.where(np.arange(order.size) == li, pi, li)
    got = np.where(
        (awaited != np.arange(order.size)) & (kd[awaited] == READY_PIPELINE),
        np.clip(a[awaited] - a, 0.0, None),
        0.0,
    )
    res = np.empty(order.size)
    res[order] = got
    out[sel] = np.minimum(res, wait)
    return out


__all__ = [
    "READY_COLLECTIVE",
    "READY_PIPELINE",
    "SYNC_TOL_US",
    "own_replica_waits",
    "ready_times",
]

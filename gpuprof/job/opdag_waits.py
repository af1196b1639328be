"""Untimed waits before any op of an op-level timeline: who an op waited for.

Timers do not wrap every synchronization: the last pipeline stage may average its loss over
its data-parallel group before ``layernorm-grads-all-reduce``, a framework may wait for
overlapped reductions before the next timer starts. The wait shows only as an idle gap
before the op, and a replay that keeps the gap as a fixed delay makes the op wait as long
whatever the job does. The signature of such a wait: the op starts right after another
worker *arrives at the same op* (the same name, the same occurrence in the same step),
much sooner after that arrival than after its own.

For each op with a gap (its start minus the end of what it depends on in program order,
its *arrival*) of at least :data:`MIN_WAIT_SHARE` of a step, the latest arrival of another
worker at the same op that falls inside the gap is its *releaser* candidate; it is one
when the time left from that arrival to the start is at most :data:`RELEASE_SHARE` of the
gap. Over the steps, the workers that released an op are lifted to the smallest group of
the layout that holds them (the op's stage on every replica, the op's replica on every
stage, the job) and whose every member the op never started before (a barrier can only be
released after all its members arrived); without a layout, or when no such group holds,
the releasers themselves. The op then waits, in every step, for the arrival of that group
at the same op, plus what measurably remained of its gap after the last of them (its
latency, kept), so the replay reproduces the measurement and the wait moves when the
group's arrivals do.

A collective whose group started long after its last member arrived is searched the same
way, for its last member.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from gpuprof.accounting.summary import RankSummary

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# Gaps shorter than this share of the median step are not searched (they cannot move a
# what-if measurably).
MIN_WAIT_SHARE = 0.001
# A releaser's arrival must leave at most this share of the gap before the op started.
RELEASE_SHARE = 0.5
# Arrivals and starts this close are the same instant (timers read on different threads
# differ by up to ~130 us in the published Megatron exports).
SAME_US = 200.0

# An untimed wait of one node: the nodes whose arrivals release it, and the latency after
# the last of them (measured).
Wait = tuple[tuple[int, ...], float]


def own_ready(
    start: FloatArray, end: FloatArray, step: IntArray, deps: Sequence[Sequence[int]], first: npt.NDArray[np.bool_]
) -> FloatArray:
    """Each node's measured arrival: the latest end of its dependencies; for an anchored
    node (the first of a run of steps), the earliest start of any node of its step."""
    n = start.size
    ready = np.empty(n)
    for v in range(n):
        d = deps[v]
        ready[v] = max(end[j] for j in d) if d else np.nan
    if first.any():
        steps, inv = np.unique(step, return_inverse=True)
        lo = np.full(steps.size, np.inf)
        np.minimum.at(lo, inv.reshape(-1), start)
        ready = np.where(first, lo[inv.reshape(-1)], ready)
    ready = np.where(np.isnan(ready), start, ready)
    return np.minimum(ready, start)


def _occurrence(worker: IntArray, step: IntArray, name: IntArray, start: FloatArray) -> IntArray:
    """The occurrence of each node's op name on its worker in its step (0, 1, ...)."""
    order = np.lexsort((start, name, step, worker))
    w, s, nm = worker[order], step[order], name[order]
    new = np.ones(order.size, dtype=bool)
    new[1:] = (w[1:] != w[:-1]) | (s[1:] != s[:-1]) | (nm[1:] != nm[:-1])
    idx = np.arange(order.size)
    first = np.maximum.accumulate(np.where(new, idx, 0))
    out = np.empty(order.size, dtype=np.int64)
    out[order] = idx - first
    return out


def _layout_groups(summaries: Sequence[RankSummary]) -> list[dict[int, frozenset[int]]]:
    """Candidate groups per worker position (index into ``summaries``), smallest first:
    its stage's replicas, its replica's stages, every worker."""
    pos = {s.rank: p for p, s in enumerate(summaries)}
    out: list[dict[int, frozenset[int]]] = []
    if all("pp_rank" in s.parallel for s in summaries):
        for key in ("pp_rank", "dp_rank"):
            by: dict[int, set[int]] = {}
            for s in summaries:
                by.setdefault(int(s.parallel.get(key, -1)), set()).add(pos[s.rank])
            out.append({pos[s.rank]: frozenset(by[int(s.parallel.get(key, -1))]) for s in summaries})
    everyone = frozenset(range(len(summaries)))
    out.append({p: everyone for p in range(len(summaries))})
    return out


def untimed_waits(
    summaries: Sequence[RankSummary],
    worker: IntArray,
    start: FloatArray,
    ready: FloatArray,
    step: IntArray,
    name: IntArray,
    group: IntArray,
    members: Sequence[tuple[int, ...]],
    step_us: float,
) -> dict[int, Wait]:
    """The untimed waits found (see the module docstring): node -> (sources, latency).
    ``worker``: each node's position in ``summaries``; ``ready``: its arrival
    (:func:`own_ready`); ``step``: its step number; ``name``: its op name code."""
    n = start.size
    if n == 0 or len(summaries) < 2:
        return {}
    min_wait = MIN_WAIT_SHARE * step_us
    occ = _occurrence(worker, step, name, start)
    # The instant a node's op (or its group's transfer) began, and what it arrived at.
    began = start.copy()
    arrived = ready.copy()
    searched = np.ones(n, dtype=bool)
    for ms in members:
        idx = np.asarray(ms, dtype=np.int64)
        last = int(idx[np.argmax(ready[idx])])
        t0 = float(np.max(start[idx]))
        began[idx] = t0
        searched[idx] = False
        searched[last] = True  # the group is searched once, for its last member
        arrived[idx] = ready[idx]
    gap = began - arrived
    cand = np.flatnonzero(searched & (gap >= min_wait))
    if cand.size == 0:
        return {}
    # Nodes of the same op (name, step, occurrence), sorted by arrival.
    key = np.stack((name, step, occ), axis=1)
    _, key_id = np.unique(key, axis=0, return_inverse=True)
    key_id = key_id.reshape(-1)
    by_key = np.lexsort((ready, key_id))
    k_sorted = key_id[by_key]
    r_sorted = ready[by_key]
    k_lo = np.searchsorted(k_sorted, key_id, side="left")
    releasers: dict[tuple[int, int, int], set[int]] = {}  # (worker, name, occurrence) -> workers
    for v in cand.tolist():
        lo = int(k_lo[v])
        hi = int(np.searchsorted(k_sorted, key_id[v], side="right"))
        # The latest arrival of another worker inside the gap.
        j = lo + int(np.searchsorted(r_sorted[lo:hi], began[v] + SAME_US, side="right")) - 1
        while j >= lo and worker[by_key[j]] == worker[v]:
            j -= 1
        if j < lo:
            continue
        u = int(by_key[j])
        if ready[u] <= arrived[v] + min_wait:
            continue
        left = max(0.0, began[v] - ready[u])
        if left > RELEASE_SHARE * gap[v]:
            continue
        releasers.setdefault((int(worker[v]), int(name[v]), int(occ[v])), set()).add(int(worker[u]))
    if not releasers:
        return {}
    # Every step's node of each (worker, name, occurrence), and of each (step, name, occurrence).
    same_op: dict[tuple[int, int, int], list[int]] = {}
    for v in range(n):
        same_op.setdefault((int(name[v]), int(step[v]), int(occ[v])), []).append(v)
    mine: dict[tuple[int, int, int], list[int]] = {}
    for v in range(n):
        mine.setdefault((int(worker[v]), int(name[v]), int(occ[v])), []).append(v)
    layouts = _layout_groups(summaries)
    out: dict[int, Wait] = {}
    for (w, nm, k), found in releasers.items():
        nodes = mine[(w, nm, k)]
        peers_of = {v: same_op[(nm, int(step[v]), k)] for v in nodes}
        chosen: frozenset[int] | None = None
        for layout in layouts:
            grp = layout[w]
            # A barrier over the group: the op never began before all its members arrived,
            # and their arrivals explain the waits (they came after the op's own arrival).
            if not all(_released_after(v, grp, peers_of[v], worker, ready, began) for v in nodes):
                continue
            held = [_latest(v, grp, peers_of[v], worker, ready) > arrived[v] + min_wait for v in nodes]
            if sum(held) * 2 >= len(held) or any(held) and found <= grp:
                chosen = grp
                break
        if chosen is None:
            # No group of the layout: the releasers themselves, where they came before.
            chosen = frozenset(
                u for u in found if all(_released_after(v, frozenset({u}), peers_of[v], worker, ready, began) for v in nodes)
            )
        if not chosen:
            continue
        for v in nodes:
            src = tuple(u for u in peers_of[v] if int(worker[u]) in chosen and int(worker[u]) != w)
            if not src:
                continue
            rel = float(np.max(ready[list(src)]))
            if rel > began[v] + SAME_US:
                continue  # in this step the op began before them: not a wait on them
            out[v] = (src, max(0.0, began[v] - max(rel, arrived[v])))
    return out


def _latest(v: int, grp: frozenset[int], peers: Sequence[int], worker: IntArray, ready: FloatArray) -> float:
    """The latest arrival of another member of ``grp`` at node ``v``'s op in its step."""
    w = int(worker[v])
    got = [ready[u] for u in peers if int(worker[u]) in grp and int(worker[u]) != w]
    return max(got) if got else -np.inf


def _released_after(
    v: int, grp: frozenset[int], peers: Sequence[int], worker: IntArray, ready: FloatArray, began: FloatArray
) -> bool:
    """Whether node ``v``'s op began no earlier than every other member of ``grp`` arrived
    at the same op (``peers``: that op's nodes in ``v``'s step)."""
    w = int(worker[v])
    return all(ready[u] <= began[v] + SAME_US for u in peers if int(worker[u]) in grp and int(worker[u]) != w)


__all__ = ["MIN_WAIT_SHARE", "RELEASE_SHARE", "Wait", "own_ready", "untimed_waits"]

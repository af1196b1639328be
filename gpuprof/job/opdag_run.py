"""Replaying an op-level timeline's dependency model (:mod:`gpuprof.job.opdag`) for one what-if.

Items are computed in the compiled order. A node *arrives* at the latest end of its
dependencies (a node that begins a run of steps at its anchor) plus its kept launch delay;
a node with an untimed wait starts once it has arrived and the nodes that release it have
(the latest of their arrivals), plus its measured latency; any other node starts when it
arrives. A compute op lasts its measured duration times the what-if's factor. A coupling
group's transfer starts once its last member is ready, after the group's latency; each
member ends its own measured transfer later, times the factor and the what-if's scale on
that kind of communication. Every step is a max-plus expression of durations and delays
that are never negative, so a what-if that only shortens work can only move ends earlier.

Step times are worked out as they are measured (:mod:`gpuprof.readers.timersteps`): from a
rank's first op of a step to its first op of the next when the two were recorded together,
else to its last op's end.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from gpuprof.accounting.graph import EV_COLLECTIVE, EV_P2P
from gpuprof.job.opdag_compile import OpDag
from gpuprof.job.opdag_levels import compile_levels, run_levels, wide
from gpuprof.job.replay_types import JobReplay, RankReplay, WhatIf

FloatArray = npt.NDArray[np.float64]


class _Lists:
    """The model as Python lists, for the per-item loop (built once per model)."""

    def __init__(self, dag: OpDag) -> None:
        n = dag.n
        ptr = dag.dep_ptr.tolist()
        idx = dag.dep_idx.tolist()
        self.deps = [idx[ptr[v] : ptr[v + 1]] for v in range(n)]
        wp = dag.wait_ptr.tolist()
        ws = dag.wait_src.tolist()
        self.src = [ws[wp[v] : wp[v + 1]] for v in range(n)]
        self.delay = dag.delay.tolist()
        self.anchor = [None if math.isnan(a) else a for a in dag.anchor.tolist()]
        self.wait_lat = dag.wait_lat.tolist()
        self.members = [list(m) for m in dag.group_members]
        self.group_lat = dag.group_lat.tolist()
        self.transfer = dag.transfer.tolist()
        self.order = list(dag.order)
        self.shift = (dag.start - dag.end).tolist()  # measured start - end
        self.end = dag.end.tolist()
        self.lead = dag.lead.tolist()
        self.levels = compile_levels(dag) if dag.n >= 2000 else None


_CACHE: dict[int, _Lists] = {}


def _lists(dag: OpDag) -> _Lists:
    got = _CACHE.get(id(dag))
    if got is None or len(got.delay) != dag.n:
        _CACHE.clear()  # one job at a time
        got = _CACHE[id(dag)] = _Lists(dag)
    return got


def node_factors(dag: OpDag, whatif: WhatIf) -> tuple[FloatArray, FloatArray]:
    """Per node, the what-if's factor on its duration (compute) or transfer, and its
    communication scale (1 for compute)."""
    f = np.ones(dag.n)
    for p, r in enumerate(dag.ranks):
        sc = whatif.scale.get(r)
        lo, hi = int(dag.node_lo[p]), int(dag.node_lo[p + 1])
        if sc is not None and sc.size == hi - lo:
            f[lo:hi] = sc
    cs = np.ones(dag.n)
    cs[dag.kind == EV_COLLECTIVE] = whatif.transfer_scale
    cs[dag.kind == EV_P2P] = whatif.p2p_scale
    return f, cs


def run_opdag(dag: OpDag, whatif: WhatIf) -> JobReplay:
    """Replay ``dag`` with ``whatif`` (its duration factors, communication scales and
    ``no_delays``; an op-level timeline has no host time to remove)."""
    L = _lists(dag)
    f, cs = node_factors(dag, whatif)
    if wide(dag, L.levels):
        assert L.levels is not None
        z = np.zeros(dag.n)
        st_a, en_a = run_levels(
            dag,
            L.levels,
            (dag.end - dag.start) * f * cs,
            dag.transfer * f * cs,
            z if whatif.no_delays else dag.delay,
            z if whatif.no_delays else dag.wait_lat,
            np.zeros(len(dag.group_members)) if whatif.no_delays else dag.group_lat,
        )
        return _rank_steps(dag, st_a, en_a)
    dur = ((dag.end - dag.start) * f * cs).tolist()
    trans = (dag.transfer * f * cs).tolist()
    if whatif.no_delays:
        zero = [0.0] * dag.n
        delay, wlat, glat = zero, zero, [0.0] * len(L.group_lat)
    else:
        delay, wlat, glat = L.delay, L.wait_lat, L.group_lat
    n = dag.n
    arr = [0.0] * n
    st = [0.0] * n
    en = list(L.end)  # measured ends stand in for anything placed out of order
    deps, src, anchor = L.deps, L.src, L.anchor

    def deps_end(v: int) -> float:
        d = deps[v]
        if d:
            t = en[d[0]]
            for u in d[1:]:
                e = en[u]
                t = max(t, e)
            return t
        a = anchor[v]
        return a if a is not None else L.end[v] + L.shift[v]

    def ready(v: int) -> float:
        # Arrival: what it depends on, then its launch delay. An untimed wait releases it
        # once the nodes it waits for have arrived at the same op (the end of what they
        # depend on: the measured latency after them includes their own delay), plus that
        # latency.
        a = deps_end(v) + delay[v]
        arr[v] = a
        s = src[v]
        if s:
            rel = max(deps_end(u) for u in s)
            return (max(rel, a)) + wlat[v]
        return a

    for it in L.order:
        if it >= 0:
            t = ready(it)
            st[it] = t
            en[it] = t + dur[it]
            continue
        g = -it - 1
        ms = L.members[g]
        pre = [ready(m) for m in ms]
        t0 = max(pre) + glat[g]
        for m, p in zip(ms, pre):
            # A transfer-only timer starts with the transfer; one that also timed its wait
            # started that much earlier, not before the member was ready.
            lead = L.lead[m]
            st[m] = t0 if lead <= 0.0 else max(p, t0 - lead)
            en[m] = t0 + trans[m]
    return _rank_steps(dag, np.asarray(st), np.asarray(en))


def _rank_steps(dag: OpDag, start: FloatArray, end: FloatArray) -> JobReplay:
    """Each rank's step times from replayed op times (see the module docstring)."""
    if dag.n == 0:
        return JobReplay(ranks={})
    o = dag.seg_order
    lo = dag.seg_bounds[:-1]
    first = np.minimum.reduceat(start[o], lo)
    last = np.maximum.reduceat(end[o], lo)
    out: dict[int, RankReplay] = {}
    seg_rank = dag.seg_rank
    for p, r in enumerate(dag.ranks):
        segs = np.flatnonzero(seg_rank == p)
        if segs.size == 0:
            continue
        f, e = first[segs], last[segs]
        nxt = np.append(f[1:], np.nan)
        chained = dag.seg_chained[segs]
        steps = np.where(chained & ~np.isnan(nxt), nxt - f, e - f)
        out[r] = RankReplay(window_us=float(np.sum(steps)), step_times_us=tuple(float(x) for x in steps))
    return JobReplay(ranks=out, unreached=dag.unreached)


__all__ = ["node_factors", "run_opdag"]

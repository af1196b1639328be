"""The groups that couple the ranks' graphs into one job model, for the replay.

Each rank's graph (:mod:`gpuprof.accounting.graph`) knows only its own rank; what ties the
ranks together in :mod:`gpuprof.job.replay` is a list of :class:`~gpuprof.job.replay_types.Group`:

* :func:`collective_groups`: the calls of one matched collective
  (:mod:`gpuprof.job.collectives`), the last member's arrival starting the transfer -- or,
  in an op-level timeline whose members start together, a barrier;
* :func:`p2p_groups`: a send with its receive -- timer ops of adjacent pipeline stages that
  start together, Kineto kernels that end together, and receives that did not wait one way
  behind their buffered sends;
* :func:`barrier_groups`: ops that start at a barrier of an op-level timeline (the untimed
  waits of :mod:`gpuprof.job.barriers`), one per rank and barrier.

Times are compared on the common clock (each rank's clock offset subtracted). Pure: the
summaries are only read.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gpuprof.accounting.graph import EV_P2P, RankGraph
from gpuprof.accounting.summary import RankSummary
from gpuprof.job.replay_types import Group
from gpuprof.model.table import Table

# Start instants of op-level timer ops within this long of each other are one barrier.
SYNC_TOL_US = 20.0
# Point-to-point calls of two ranks ending within this long of each other are one transfer.
P2P_END_TOL_US = 20.0


def _graph_index(g: RankGraph) -> dict[int, int]:
    """``comms`` row -> event index of the graph."""
    rows = np.flatnonzero(g.comm_row >= 0)
    return {int(g.comm_row[i]): int(i) for i in rows}


def _as_str(table: Table, column: str) -> np.ndarray:
    """A column of a comms table as strings (an object array; empty for an empty table)."""
    if len(table) == 0:
        return np.empty(0, dtype=object)
    out = np.empty(len(table), dtype=object)
    out[:] = [str(v) for v in table[column].tolist()]
    return out


def collective_groups(summaries: Sequence[RankSummary], matched: Any, offsets: Mapping[int, float]) -> list[Group]:
    if matched is None:
        return []
    table = getattr(matched, "calls_table", None)  # numpy columns, without pandas
    calls = table if table is not None else matched.calls
    if calls is None or len(calls) == 0 or "row" not in calls:
        return []
    index = {s.rank: _graph_index(s.graph) for s in summaries if s.graph is not None}
    graphs = {s.rank: s.graph for s in summaries if s.graph is not None}
    out: list[Group] = []
    ranks = np.asarray(calls["rank"])
    rows = np.asarray(calls["row"])
    keys = np.asarray(calls["key"])
    order = np.argsort(keys, kind="stable")
    cut = np.flatnonzero(np.diff(keys[order])) + 1
    for idx in np.split(order, cut):
        members = []
        starts = []
        for i in idx.tolist():
            r = int(ranks[i])
            ev = index.get(r, {}).get(int(rows[i]))
            if ev is None:
                continue
            g = graphs[r]
            members.append((r, ev))
            starts.append(float(g.start[ev]) + g.lo_us - offsets.get(r, 0.0))
        if len(members) < 2:
            continue
        timeline = all(graphs[r].timeline for r, _ in members)
        together = max(starts) - min(starts) <= SYNC_TOL_US
        out.append(Group(tuple(members), "barrier" if timeline and together else "collective"))
    return out


def _direction(name: str) -> tuple[str, str]:
    """(``send``/``recv``/``""``, ``forward``/``backward``/``""``) from a p2p op's name."""
    low = name.lower()
    way = "send" if "send" in low else "recv" if "recv" in low else ""
    phase = "forward" if "forward" in low else "backward" if "backward" in low else ""
    return way, phase


def p2p_groups(summaries: Sequence[RankSummary], offsets: Mapping[int, float], stage_of: Mapping[int, int]) -> list[Group]:
    """Point-to-point transfers across ranks.

    Op-level timers (a ``forward-recv`` waiting for a ``forward-send``): each receive is
    paired with a send of an adjacent stage (the same data-parallel replica where the layout
    says, the same direction where the names say) that starts while the receive's timer
    runs, within :data:`SYNC_TOL_US`; the pair is replayed as a barrier, each op keeping its
    measured offset from the other (a receive timed behind a barrier starts with the send; a
    receive posted just before the data arrives keeps that lead). Kineto kernels: a send and
    a receive on different ranks whose ends (on the common clock) fall within
    :data:`P2P_END_TOL_US` of each other."""
    Row = tuple[float, float, int, int, int, str, str]  # start, end, rank, event, dp, way, phase
    timeline: list[Row] = []
    kineto: list[Row] = []
    pgs: dict[tuple[int, int], str] = {}
    # The rank at the other end of a call, where the trace names it (nccl:send a->b).
    peer_of: dict[tuple[int, int], int] = {}
    for s in summaries:
        g = s.graph
        if g is None:
            continue
        off = offsets.get(s.rank, 0.0)
        comms = s.comms_table
        peers = np.asarray(comms["peer"]) if len(comms) else np.empty(0, dtype=np.int64)
        names = _as_str(comms, "name")
        colls = _as_str(comms, "coll_name")
        groups = _as_str(comms, "pg")
        for i in np.flatnonzero(g.kind == EV_P2P).tolist():
            row = int(g.comm_row[i])
            way, phase = _direction(str(names[row])) if 0 <= row < names.size else ("", "")
            if 0 <= row < colls.size and str(colls[row]) in ("send", "recv"):
                way = str(colls[row])
            pgs[(s.rank, i)] = str(groups[row]) if 0 <= row < groups.size else ""
            if 0 <= row < peers.size and peers[row] >= 0:
                peer_of[(s.rank, i)] = int(peers[row])
            item: Row = (
                float(g.start[i]) + g.lo_us - off,
                float(g.start[i] + g.dur[i]) + g.lo_us - off,
                s.rank,
                i,
                int(s.parallel.get("dp_rank", -1)),
                way,
                phase,
            )
            (timeline if g.timeline else kineto).append(item)

    def neighbours(a: Row, b: Row) -> bool:
        if a[2] == b[2] or (a[4] >= 0 and b[4] >= 0 and a[4] != b[4]):
            return False
        if a[2] in stage_of and b[2] in stage_of:
            # Adjacent stages (or the last and the first: an interleaved schedule wraps).
            d = abs(stage_of[a[2]] - stage_of[b[2]])
            return d == 1 or (d > 1 and d == max(stage_of.values()) - min(stage_of.values()))
        return True

    out: list[Group] = []
    sends = sorted((r for r in timeline if r[5] != "recv"), key=lambda r: r[0])
    send_starts = [r[0] for r in sends]
    used: set[tuple[int, int]] = set()
    for rv in sorted((r for r in timeline if r[5] == "recv"), key=lambda r: r[0]):
        lo_i = bisect_left(send_starts, rv[0] - SYNC_TOL_US)
        hi_i = bisect_right(send_starts, rv[1] + SYNC_TOL_US)
        best: Row | None = None
        for sd in sends[lo_i:hi_i]:
            if (sd[2], sd[3]) in used or not neighbours(rv, sd):
                continue
            if rv[6] and sd[6] and rv[6] != sd[6]:
                continue
            if best is None or abs(sd[0] - rv[0]) < abs(best[0] - rv[0]):
                best = sd
        if best is not None:
            used.add((best[2], best[3]))
            out.append(Group(((rv[2], rv[3]), (best[2], best[3])), "p2p"))
    out.extend(_kineto_p2p_pairs(kineto, neighbours, pgs, peer_of))
    return out


def _kineto_p2p_pairs(
    rows: Sequence[tuple[float, float, int, int, int, str, str]],
    neighbours: Any,
    pgs: Mapping[tuple[int, int], str],
    peer_of: Mapping[tuple[int, int], int] | None = None,
) -> list[Group]:
    """Sends paired with receives on neighbouring ranks of the same process group.

    First the transfers both sides waited through: a send and a receive whose ends (on the
    common clock) fall within :data:`P2P_END_TOL_US`, nearest first. Then every receive
    left (it started after its data had arrived, a buffered send) takes the latest unpaired
    send of a neighbour that ended by its end, one way (an ``after`` group of the replay):
    in a what-if where that send comes later, the receive waits for it; the send never
    waits for the receive. Directions come from the profiler's collective name (``send`` /
    ``recv``) where it has one; without it any two calls may pair."""
    out: list[Group] = []
    used: set[tuple[int, int]] = set()
    peers = peer_of or {}

    def compatible(a: tuple[float, float, int, int, int, str, str], b: tuple[float, float, int, int, int, str, str]) -> bool:
        if not neighbours(a, b) or pgs.get((a[2], a[3]), "") != pgs.get((b[2], b[3]), ""):
            return False
        # Where the trace names the other end of a call, only that rank's call can pair.
        if peers.get((a[2], a[3]), b[2]) != b[2] or peers.get((b[2], b[3]), a[2]) != a[2]:
            return False
        return not (a[5] and b[5] and a[5] == b[5])

    by_end = sorted(rows, key=lambda r: r[1])
    ends = [r[1] for r in by_end]
    cands: list[tuple[float, int, int]] = []
    for i, a in enumerate(by_end):
        j = bisect_left(ends, a[1] - P2P_END_TOL_US)
        for k in range(j, len(by_end)):
            b = by_end[k]
            if b[1] > a[1] + P2P_END_TOL_US:
                break
            if k > i and compatible(a, b):
                cands.append((abs(b[1] - a[1]), i, k))
    for _, i, k in sorted(cands):
        a, b = by_end[i], by_end[k]
        if (a[2], a[3]) in used or (b[2], b[3]) in used:
            continue
        used.update({(a[2], a[3]), (b[2], b[3])})
        out.append(Group(((a[2], a[3]), (b[2], b[3])), "collective"))
    # The receives that did not wait, one way behind their buffered sends.
    sends = [r for r in by_end if r[5] != "recv" and (r[2], r[3]) not in used]
    for rv in (r for r in by_end if r[5] == "recv" and (r[2], r[3]) not in used):
        best = None
        for sd in sends:
            if sd[1] > rv[1] + P2P_END_TOL_US:
                break
            if (sd[2], sd[3]) not in used and compatible(rv, sd):
                best = sd
        if best is not None:
            used.update({(rv[2], rv[3]), (best[2], best[3])})
            out.append(Group(((rv[2], rv[3]), (best[2], best[3])), "after"))
    return out


def barrier_groups(summaries: Sequence[RankSummary], points_us: Sequence[float], offsets: Mapping[int, float], taken: set[tuple[int, int]]) -> list[Group]:
    """Ops that start at a barrier of an op-level timeline, one per rank and barrier: the
    same op on every rank (a barrier before a timer starts the same op everywhere; ops of
    different names starting together are a coincidence of the schedule)."""
    out: list[Group] = []
    graphs = [s.graph for s in summaries if s.graph is not None and s.graph.timeline]
    for p in points_us:
        members = []
        names = set()
        for g in graphs:
            t = p + offsets.get(g.rank, 0.0) - g.lo_us
            near = np.flatnonzero(np.abs(g.start - t) <= SYNC_TOL_US)
            for i in near.tolist():
                if (g.rank, i) not in taken:
                    members.append((g.rank, i))
                    if g.name_idx is not None:
                        names.add(g.names[int(g.name_idx[i])])
                    break
        if len({r for r, _ in members}) >= 2 and len(names) <= 1:
            out.append(Group(tuple(members), "barrier"))
            taken.update(members)
    return out


__all__ = ["P2P_END_TOL_US", "SYNC_TOL_US", "barrier_groups", "collective_groups", "p2p_groups"]

"""Compiling an op-level timeline's dependency model (:mod:`gpuprof.job.opdag`) once per job:
the measured delays and latencies, and an order in which every item can be computed.

An *item* is a node, or a coupling group whose members are computed together. An item
comes after the items holding its members' dependencies and, for an untimed wait, the
dependencies of the nodes whose arrivals release it. The order is Kahn's, earliest
measured start first among the items ready; every edge points forward in measured time,
so no cycle is expected -- an item caught in one (clock skew the alignment left) is
computed last from the measured times of what it waits for and counted as unreached.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpuprof.job.opdag_waits import Wait

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class OpDag:
    """The compiled model. Per node (index ``n``): ``rank_pos[n]`` (position in ``ranks``),
    ``local[n]`` (event index in that rank's graph), measured ``start``/``end`` (common
    clock), ``kind``, ``step`` (index into the rank's steps), its measured arrival
    ``ready`` (the end of what it depends on), the dependencies
    ``dep_idx[dep_ptr[n]:dep_ptr[n+1]]``, the kept ``delay``, ``anchor`` (the arrival of a
    node without dependencies; NaN otherwise), the coupling ``group`` (-1 none), each
    member's ``transfer`` and ``lead`` (how long before the group's transfer its timer
    started: 0 for a transfer-only timer); untimed waits ``wait_src[wait_ptr[n]:wait_ptr[n+1]]`` (nodes
    whose arrivals release it) with ``wait_lat[n]`` after the last of them. ``order``:
    items in a topological order (``i >= 0`` a node, ``i < 0`` group ``-i - 1``).
    Per rank: ``node_lo[p]:node_lo[p+1]`` are its nodes; ``seg_*`` the nodes of each step
    sorted by (rank, step) for the step times, ``chained`` whether a step runs on into the
    next one (steps recorded together)."""

    ranks: tuple[int, ...]
    node_lo: IntArray
    rank_pos: IntArray
    local: IntArray
    start: FloatArray
    end: FloatArray
    kind: npt.NDArray[np.int8]
    step: IntArray
    ready: FloatArray
    dep_ptr: IntArray
    dep_idx: IntArray
    delay: FloatArray
    anchor: FloatArray
    group: IntArray
    group_members: tuple[tuple[int, ...], ...]
    group_lat: FloatArray
    transfer: FloatArray
    lead: FloatArray
    wait_ptr: IntArray
    wait_src: IntArray
    wait_lat: FloatArray
    order: tuple[int, ...]
    seg_order: IntArray
    seg_bounds: IntArray
    seg_rank: IntArray
    seg_chained: npt.NDArray[np.bool_]
    unreached: int = 0
    waits_found: int = 0
    # Each node's communication family (-1 none; see gpuprof.job.opdag._families) and the
    # families' keys.
    family: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    family_keys: tuple[tuple[str, ...], ...] = ()

    @property
    def n(self) -> int:
        return int(self.start.size)


def compile_dag(
    *,
    family: IntArray,
    family_keys: tuple[tuple[str, ...], ...],
    ranks: tuple[int, ...],
    node_lo: IntArray,
    rank_pos: IntArray,
    start: FloatArray,
    end: FloatArray,
    kind: npt.NDArray[np.int8],
    step: IntArray,
    deps: Sequence[Sequence[int]],
    first: npt.NDArray[np.bool_],
    ready: FloatArray,
    group: IntArray,
    members: Sequence[tuple[int, ...]],
    waits: Mapping[int, Wait],
    chained: Sequence[Sequence[bool]],
) -> OpDag:
    n = start.size
    # Launch delays: what is left of a node's gap after its arrival; none for a node that
    # waits (its latency carries it) or a group member (the group's latency does).
    waiting = np.zeros(n, dtype=bool)
    if waits:
        waiting[np.fromiter(waits, dtype=np.int64, count=len(waits))] = True
    delay = np.where((group < 0) & ~waiting, np.clip(start - ready, 0.0, None), 0.0)
    anchor = np.where(first, ready, np.nan)
    wait_lat = np.zeros(n)
    ptr = np.zeros(n + 1, dtype=np.int64)
    src_rows: list[tuple[int, ...]] = [()] * n
    for v, (src, lat) in waits.items():
        src_rows[v] = src
        wait_lat[v] = lat
    ptr[1:] = np.cumsum([len(r) for r in src_rows])
    wait_src = np.fromiter((u for r in src_rows for u in r), dtype=np.int64, count=int(ptr[-1]))
    # Each member's own start before the group's transfer (measured), the group's latency
    # after the last of them, and each member's transfer.
    pre = ready.copy()
    for v, (src, lat) in waits.items():
        pre[v] = max(ready[v], float(np.max(ready[list(src)]))) + lat
    group_lat = np.zeros(len(members))
    transfer = np.zeros(n)
    lead = np.zeros(n)
    if members:
        flat = np.fromiter((m for ms in members for m in ms), dtype=np.int64)
        sizes = np.fromiter((len(ms) for ms in members), dtype=np.int64, count=len(members))
        cuts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        t0 = np.maximum.reduceat(start[flat], cuts)
        group_lat = np.clip(t0 - np.maximum.reduceat(pre[flat], cuts), 0.0, None)
        t0_each = np.repeat(t0, sizes)
        transfer[flat] = np.clip(end[flat] - t0_each, 0.0, None)
        lead[flat] = t0_each - start[flat]
    dep_ptr = np.zeros(n + 1, dtype=np.int64)
    dep_ptr[1:] = np.cumsum([len(d) for d in deps])
    dep_idx = np.fromiter((u for d in deps for u in d), dtype=np.int64, count=int(dep_ptr[-1]))
    order, unreached = _order(start, deps, group, members, src_rows)
    seg_order = np.lexsort((start, step, rank_pos))
    key_r, key_s = rank_pos[seg_order], step[seg_order]
    new = np.ones(n, dtype=bool)
    new[1:] = (key_r[1:] != key_r[:-1]) | (key_s[1:] != key_s[:-1])
    seg_bounds = np.append(np.flatnonzero(new), n).astype(np.int64)
    seg_rank = key_r[new] if n else np.zeros(0, dtype=np.int64)
    seg_step = key_s[new] if n else np.zeros(0, dtype=np.int64)
    seg_chained = np.array(
        [
            bool(0 <= t < len(chained[r]) and chained[r][t])
            for r, t in zip(seg_rank.tolist(), seg_step.tolist())
        ],
        dtype=bool,
    )
    return OpDag(
        ranks=ranks,
        node_lo=node_lo,
        rank_pos=rank_pos,
        local=np.arange(n, dtype=np.int64) - node_lo[rank_pos] if n else np.zeros(0, dtype=np.int64),
        start=start,
        end=end,
        kind=kind,
        step=step,
        ready=ready,
        dep_ptr=dep_ptr,
        dep_idx=dep_idx,
        delay=delay,
        anchor=anchor,
        group=group,
        group_members=tuple(members),
        group_lat=group_lat,
        transfer=transfer,
        lead=lead,
        wait_ptr=ptr,
        wait_src=wait_src,
        wait_lat=wait_lat,
        order=tuple(order),
        seg_order=seg_order.astype(np.int64),
        seg_bounds=seg_bounds,
        seg_rank=seg_rank.astype(np.int64),
        seg_chained=seg_chained,
        unreached=unreached,
        waits_found=len(waits),
        family=family,
        family_keys=family_keys,
    )


def _order(
    start: FloatArray,
    deps: Sequence[Sequence[int]],
    group: IntArray,
    members: Sequence[tuple[int, ...]],
    src_rows: Sequence[tuple[int, ...]],
) -> tuple[list[int], int]:
    """Items in a topological order (node ``v`` as ``v``, group ``g`` as ``-g - 1``) and how
    many had to be placed out of order. Every edge points forward in measured time, so the
    items by measured start (a group at its earliest member) are nearly always in order:
    that is checked on every edge at once, and Kahn's algorithm runs only when it fails."""
    n = start.size
    n_items = n + len(members)
    # Item index: node v -> v (nodes in groups are not items), group g -> n + g.
    item = np.where(group >= 0, n + group, np.arange(n))
    t_item = np.full(n_items, np.inf)
    np.minimum.at(t_item, item, start)
    is_item = np.isfinite(t_item)
    dcount = np.fromiter((len(d) for d in deps), dtype=np.int64, count=n)
    dflat = np.fromiter((u for d in deps for u in d), dtype=np.int64, count=int(dcount.sum()))
    dptr = np.concatenate(([0], np.cumsum(dcount)))
    srcs = [(v, w) for v in range(n) for w in src_rows[v]]
    e_src = [dflat]
    e_dst = [np.repeat(np.arange(n, dtype=np.int64), dcount)]
    if srcs:
        sv = np.asarray(srcs, dtype=np.int64)
        cnt = dcount[sv[:, 1]]
        starts = np.repeat(dptr[sv[:, 1]], cnt) + (np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt))
        e_src.append(dflat[starts])
        e_dst.append(np.repeat(sv[:, 0], cnt))
    a, b = item[np.concatenate(e_src)], item[np.concatenate(e_dst)]
    keep = a != b
    a, b = a[keep], b[keep]
    ranked = np.flatnonzero(is_item)
    ranked = ranked[np.lexsort((ranked, t_item[ranked]))]
    pos = np.empty(n_items, dtype=np.int64)
    pos[ranked] = np.arange(ranked.size)

    def label(it: int) -> int:
        return it if it < n else -(it - n) - 1

    if not a.size or bool(np.all(pos[a] < pos[b])):
        return [label(int(it)) for it in ranked.tolist()], 0
    # Kahn's algorithm, earliest measured start first among the items ready.
    users: dict[int, list[int]] = {}
    indeg = np.zeros(n_items, dtype=np.int64)
    pairs = np.unique(np.stack((a, b), axis=1), axis=0)
    for x, y in pairs.tolist():
        users.setdefault(x, []).append(y)
        indeg[y] += 1
    heap = [(float(t_item[it]), int(it)) for it in ranked.tolist() if indeg[it] == 0]
    heapq.heapify(heap)
    out: list[int] = []
    placed = np.zeros(n_items, dtype=bool)
    unreached = 0
    while len(out) < ranked.size:
        if not heap:
            # A cycle: place the earliest remaining item and go on.
            rest = ranked[~placed[ranked]]
            heap.append((float(t_item[rest[0]]), int(rest[0])))
            unreached += 1
        _, it = heapq.heappop(heap)
        if placed[it]:
            continue
        placed[it] = True
        out.append(label(it))
        for u in users.get(it, ()):
            indeg[u] -= 1
            if indeg[u] == 0 and not placed[u]:
                heapq.heappush(heap, (float(t_item[u]), u))
    return out, unreached


__all__ = ["OpDag", "compile_dag"]

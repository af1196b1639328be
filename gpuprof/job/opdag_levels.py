"""Replaying a wide op-level dependency model level by level, with numpy.

The replay of :mod:`gpuprof.job.opdag_run` computes one item at a time. A job of many
workers whose steps were recorded apart is wide: tens of thousands of ops, but only a few
hundred in a chain. There, every op of one *level* (one more than the deepest item it
waits for) is computed at once: the latest end of its dependencies by a segmented maximum,
its arrival, its untimed wait, and each group's transfer by a segmented maximum over its
members. Same arithmetic as the item loop (the order of maxima and sums per op is the
same), so the results agree to rounding.

:class:`Levels` is compiled once per model; :func:`run_levels` runs it for one what-if.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpuprof.job.opdag_compile import OpDag

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# Use the levels when a level holds this many ops on average (else the item loop is faster).
MIN_WIDTH = 40.0


@dataclass(frozen=True)
class Levels:
    """Nodes in ``perm`` order (by level, the members of a group together); ``bounds``:
    each level's slice of ``perm``; ``dep_flat[dep_ptr[i]:dep_ptr[i+1]]`` the dependencies
    of the i-th node of ``perm`` (``n``, a sentinel that never ended, for none); ``base``:
    its arrival when it has no dependency (anchor), else -inf; the same for the nodes an
    untimed wait waits on (``wdep_*``, ``wbase``; ``has_wait``); ``gstart``: per level, the
    offsets (within the level) where a group's members begin, ``gid`` those groups, and
    ``member`` which nodes are members."""

    n_levels: int
    perm: IntArray
    bounds: IntArray
    dep_flat: IntArray
    dep_ptr: IntArray
    base: FloatArray
    wdep_flat: IntArray
    wdep_ptr: IntArray
    wbase: FloatArray
    has_wait: npt.NDArray[np.bool_]
    member: npt.NDArray[np.bool_]
    gseg: tuple[tuple[IntArray, IntArray], ...]  # per level: (offsets in level, group ids)


def compile_levels(dag: OpDag) -> Levels:
    n = dag.n
    dp = dag.dep_ptr.tolist()
    di = dag.dep_idx.tolist()
    wp = dag.wait_ptr.tolist()
    ws = dag.wait_src.tolist()
    deps = [di[dp[v] : dp[v + 1]] for v in range(n)]
    level = [0] * n
    for it in dag.order:
        nodes = (it,) if it >= 0 else dag.group_members[-it - 1]
        lv = 0
        for m in nodes:
            for u in deps[m]:
                lv = max(lv, level[u] + 1)
            for src in ws[wp[m] : wp[m + 1]]:
                for u in deps[src]:
                    lv = max(lv, level[u] + 1)
        for m in nodes:
            level[m] = lv
    lv_arr = np.asarray(level, dtype=np.int64)
    gkey = np.where(dag.group >= 0, dag.group, -1 - np.arange(n))
    perm = np.lexsort((np.arange(n), gkey, lv_arr)).astype(np.int64)
    n_levels = int(lv_arr.max()) + 1 if n else 0
    bounds = np.searchsorted(lv_arr[perm], np.arange(n_levels + 1)).astype(np.int64)
    anchor = dag.anchor
    measured_start = dag.start

    def own_base(v: int) -> float:
        if deps[v]:
            return -np.inf
        a = float(anchor[v])
        return float(measured_start[v]) if math.isnan(a) else a  # no anchor: its measured start

    dep_rows: list[list[int]] = []
    base = np.empty(n)
    wrows: list[list[int]] = []
    wbase = np.full(n, -np.inf)
    has_wait = np.zeros(n, dtype=bool)
    for i, v in enumerate(perm.tolist()):
        dep_rows.append(deps[v] or [n])
        base[i] = own_base(v)
        srcs = ws[wp[v] : wp[v + 1]]
        if srcs:
            has_wait[i] = True
            row: list[int] = []
            for u in srcs:
                if deps[u]:
                    row.extend(deps[u])
                else:
                    wbase[i] = max(wbase[i], own_base(u))
            wrows.append(row or [n])
        else:
            wrows.append([n])
    dep_ptr = np.zeros(n + 1, dtype=np.int64)
    dep_ptr[1:] = np.cumsum([len(r) for r in dep_rows])
    wdep_ptr = np.zeros(n + 1, dtype=np.int64)
    wdep_ptr[1:] = np.cumsum([len(r) for r in wrows])
    member = dag.group[perm] >= 0
    gseg: list[tuple[IntArray, IntArray]] = []
    gp = dag.group[perm]
    for lv in range(n_levels):
        a, b = int(bounds[lv]), int(bounds[lv + 1])
        g = gp[a:b]
        idx = np.flatnonzero(g >= 0)
        if idx.size == 0:
            gseg.append((np.zeros(0, np.int64), np.zeros(0, np.int64)))
            continue
        new = np.ones(idx.size, dtype=bool)
        new[1:] = g[idx[1:]] != g[idx[:-1]]
        gseg.append((idx[new].astype(np.int64), g[idx[new]].astype(np.int64)))
    return Levels(
        n_levels=n_levels,
        perm=perm,
        bounds=bounds,
        dep_flat=np.fromiter((u for r in dep_rows for u in r), dtype=np.int64, count=int(dep_ptr[-1])),
        dep_ptr=dep_ptr,
        base=base,
        wdep_flat=np.fromiter((u for r in wrows for u in r), dtype=np.int64, count=int(wdep_ptr[-1])),
        wdep_ptr=wdep_ptr,
        wbase=wbase,
        has_wait=has_wait,
        member=member,
        gseg=tuple(gseg),
    )


def wide(dag: OpDag, levels: Levels | None) -> bool:
    """Whether the level-by-level replay suits ``dag``."""
    return levels is not None and levels.n_levels > 0 and dag.n / levels.n_levels >= MIN_WIDTH


def run_levels(
    dag: OpDag,
    lv: Levels,
    dur: FloatArray,
    trans: FloatArray,
    delay: FloatArray,
    wlat: FloatArray,
    glat: FloatArray,
) -> tuple[FloatArray, FloatArray]:
    """Replayed starts and ends of every node (see :mod:`gpuprof.job.opdag_run` for what
    each term means); the arrays are per node, ``glat`` per group."""
    n = dag.n
    en = np.full(n + 1, -np.inf)  # the last cell: the sentinel "no dependency"
    st = np.zeros(n)
    perm = lv.perm
    p_delay = delay[perm]
    p_wlat = wlat[perm]
    p_dur = dur[perm]
    p_trans = trans[perm]
    p_lead = dag.lead[perm]
    for k in range(lv.n_levels):
        a, b = int(lv.bounds[k]), int(lv.bounds[k + 1])
        da, db = int(lv.dep_ptr[a]), int(lv.dep_ptr[b])
        got = np.maximum.reduceat(en[lv.dep_flat[da:db]], lv.dep_ptr[a:b] - da)
        arrive = np.maximum(got, lv.base[a:b]) + p_delay[a:b]
        w = lv.has_wait[a:b]
        pre = arrive
        if w.any():
            wa, wb = int(lv.wdep_ptr[a]), int(lv.wdep_ptr[b])
            rel = np.maximum(np.maximum.reduceat(en[lv.wdep_flat[wa:wb]], lv.wdep_ptr[a:b] - wa), lv.wbase[a:b])
            pre = np.where(w, np.maximum(arrive, rel) + p_wlat[a:b], arrive)
        nodes = perm[a:b]
        end = pre + p_dur[a:b]
        start = pre
        offs, gids = lv.gseg[k]
        if offs.size:
            m = lv.member[a:b]
            mem = np.flatnonzero(m)
            t0g = np.maximum.reduceat(pre[mem], np.searchsorted(mem, offs)) + glat[gids]
            t0 = np.repeat(t0g, np.diff(np.append(np.searchsorted(mem, offs), mem.size)))
            lead = p_lead[a:b][mem]
            start = start.copy()
            start[mem] = np.where(lead <= 0.0, t0, np.maximum(pre[mem], t0 - lead))
            end[mem] = t0 + p_trans[a:b][mem]
        st[nodes] = start
        en[nodes] = end
    return st, en[:n]


__all__ = ["MIN_WIDTH", "Levels", "compile_levels", "run_levels", "wide"]

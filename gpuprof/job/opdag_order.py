"""Program order of one worker of an op-level timeline (:mod:`gpuprof.job.opdag`): what
each op waited for on its own worker.

:func:`program_deps`: ops in start order, batches of ops issued together, each op after
the batch before it, the latest-ending earlier op and the previous op of its lane.
:func:`pipeline_deps`: the pipeline's own ops (forward/backward compute, sends, receives)
wait for what they need, as the published what-if simulator models them, not for
whatever point-to-point timer happened to end before them. Tolerances are the module
constants of :mod:`gpuprof.job.opdag`'s docstring.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from gpuprof.accounting.graph import EV_COMPUTE, EV_P2P

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# Ops of a worker starting within this long of each other were issued together.
BATCH_US = 20.0
# An op of an earlier batch that ended this little after another op started still
# preceded it: timers read on different threads overlap their neighbours by up to ~130 us
# in the published Megatron exports. So does one that ended within :data:`OVERLAP_SHARE`
# of its own duration after the start (a long op's timer stopped late); an op still running
# well after the next one started is asynchronous (a reduction on a side stream), not
# waited for there.
OVERLAP_US = 200.0
OVERLAP_SHARE = 0.25


def program_deps(
    start: FloatArray, end: FloatArray, lane: IntArray, step: IntArray, chained: Sequence[bool]
) -> tuple[list[list[int]], npt.NDArray[np.bool_], IntArray]:
    """One worker's dependencies in program order (local indices), which ops begin a run
    of steps (anchored: nothing before them in the model) and each op's run. ``chained[t]``:
    step ``t`` runs on into step ``t + 1``."""
    n = start.size
    deps: list[list[int]] = [[] for _ in range(n)]
    first = np.zeros(n, dtype=bool)
    run = np.zeros(n, dtype=np.int64)
    if n == 0:
        return deps, first, run
    order = np.lexsort((end, start)).tolist()
    st = start.tolist()
    en = end.tolist()
    stp = step.tolist()
    ln = lane.tolist()
    n_steps = len(chained)
    prev_batch: list[int] = []
    batch: list[int] = []
    done: list[tuple[float, int]] = []  # (end, op) of the run's earlier batches, by end
    last_in_lane: dict[int, int] = {}
    run_first = True  # in the first batch of a run
    prev: int | None = None
    run_no = 0
    for i in order:
        if prev is not None:
            s0, s1 = stp[prev], stp[i]
            new_run = s1 != s0 and not (s1 == s0 + 1 and 0 <= s0 < n_steps and chained[s0])
            b0 = batch[0]
            # Issued together: started within BATCH_US of the batch's first op, while that
            # op had run less than half its length (a receive that ended before the compute
            # it fed began is not issued with it, however short it was).
            together = st[i] - st[b0] <= BATCH_US and st[i] < st[b0] + 0.5 * (en[b0] - st[b0])
            if new_run or not together:
                for j in batch:
                    bisect.insort(done, (en[j], j))
                    last_in_lane[ln[j]] = j
                prev_batch, batch = batch, []
                run_first = False
            if new_run:
                prev_batch, done, last_in_lane, run_first = [], [], {}, True
                run_no += 1
        batch.append(i)
        run[i] = run_no
        prev = i
        if run_first:
            first[i] = True
            continue
        limit = st[i] + OVERLAP_US
        got = [j for j in prev_batch if en[j] <= st[i] + max(OVERLAP_US, OVERLAP_SHARE * (en[j] - st[j]))]
        k = bisect.bisect_right(done, (limit, n)) - 1
        if k >= 0 and done[k][1] not in got:
            got.append(done[k][1])
        lj = last_in_lane.get(ln[i])
        if lj is not None and en[lj] <= st[i] + max(OVERLAP_US, OVERLAP_SHARE * (en[lj] - st[lj])) and lj not in got:
            got.append(lj)
        deps[i] = got
    return deps, first, run


# Roles of pipeline ops, from their names (``-1``: any other op).
FWD_SEND, FWD_RECV, BWD_SEND, BWD_RECV, FWD, BWD = range(6)


def roles(names: Sequence[str], kind_of_name: Sequence[int]) -> IntArray:
    """Per op name, its pipeline role: a forward/backward send or receive (point-to-point
    ops whose name says one direction and one phase), forward/backward compute, or -1."""
    out = np.full(len(names), -1, dtype=np.int64)
    for i, (x, k) in enumerate(zip(names, kind_of_name)):
        low = x.lower()
        fwd, bwd = "forward" in low, "backward" in low
        if fwd == bwd:
            continue
        if k == EV_P2P:
            send, recv = "send" in low, "recv" in low
            if send != recv:
                out[i] = (FWD_SEND if fwd else BWD_SEND) + (1 if recv else 0)
        elif k == EV_COMPUTE:
            out[i] = FWD if fwd else BWD
    return out


def _precedes(start: Sequence[float], end: Sequence[float], u: int, v: int) -> bool:
    """Op ``u`` ended by op ``v``'s start (within the timers' jitter)."""
    return end[u] <= start[v] + max(OVERLAP_US, OVERLAP_SHARE * (end[u] - start[u]))


def pipeline_deps(
    start: FloatArray, end: FloatArray, role: IntArray, step: IntArray, run: IntArray, deps: list[list[int]]
) -> None:
    """Replace the program-order dependencies of a worker's pipeline ops (forward/backward
    compute, sends, receives) by what they need, in place. Timers of point-to-point ops may
    run beside compute (a receive posted early), so a receive that happened to end just
    before an op is not what that op waited for. As the published what-if simulator does:
    compute runs in order on its stream and waits for the receive that brings its input
    (the k-th forward compute of a step takes the k-th forward receive, where the counts
    match; else the latest unused receive that ended before it); a send waits for the
    compute that produced what it carries; sends and receives of one kind keep their
    order; a receive is posted after the compute before it. Other ops keep program order."""
    n = start.size
    if n == 0 or not (role >= 0).any():
        return
    st, en = start.tolist(), end.tolist()
    rl = role.tolist()
    for v in range(n):
        if rl[v] >= 0 and deps[v]:
            deps[v] = [u for u in deps[v] if rl[u] < 0]

    def add(u: int, v: int) -> None:
        if u != v and u not in deps[v] and _precedes(st, en, u, v):
            deps[v].append(u)

    order = np.lexsort((start, run)).tolist()
    last_of_role: dict[tuple[int, int], int] = {}
    last_compute: dict[int, int] = {}  # run -> latest compute so far (by start)
    by_end_compute: dict[int, list[tuple[float, int]]] = {}
    runs = run.tolist()
    for v in order:
        r, k = runs[v], rl[v]
        if k < 0:
            continue
        prev = last_of_role.get((r, k))
        if prev is not None:
            add(prev, v)
        if k in (FWD, BWD):
            pc = last_compute.get(r)
            if pc is not None:
                add(pc, v)
            last_compute[r] = v
            bisect.insort(by_end_compute.setdefault(r, []), (en[v], v))
        elif k in (FWD_RECV, BWD_RECV):
            # Posted after the latest compute that had ended.
            ends = by_end_compute.get(r, [])
            j = bisect.bisect_right(ends, (st[v] + OVERLAP_US, n)) - 1
            if j >= 0:
                add(ends[j][1], v)
        last_of_role[(r, k)] = v
    # Per step: which receive each compute takes, which compute each send carries.
    steps = step.tolist()
    per: dict[tuple[int, int], list[int]] = {}
    for v in order:
        if rl[v] >= 0:
            per.setdefault((steps[v], rl[v]), []).append(v)
    for t in {x for x, _ in per}:
        for comp, recv, send in ((FWD, FWD_RECV, FWD_SEND), (BWD, BWD_RECV, BWD_SEND)):
            cs = per.get((t, comp), [])
            rs = per.get((t, recv), [])
            ss = per.get((t, send), [])
            if rs and cs:
                if len(rs) == len(cs):
                    pairs = list(zip(rs, cs))
                elif len(rs) == len(cs) - 1:
                    pairs = list(zip(rs, cs[1:]))
                else:
                    pairs = _by_time(rs, cs, st, en)
                for a, b in pairs:
                    add(a, b)
            if ss and cs:
                if len(ss) == len(cs) or len(ss) == len(cs) - 1:
                    pairs = list(zip(cs, ss))
                else:
                    pairs = [(b, a) for a, b in _by_time(cs, ss, st, en)]
                for a, b in pairs:
                    add(a, b)


def _by_time(first: Sequence[int], then: Sequence[int], st: Sequence[float], en: Sequence[float]) -> list[tuple[int, int]]:
    """Each op of ``then`` with the latest op of ``first`` that ended before it and is not
    taken yet."""
    out: list[tuple[int, int]] = []
    taken: set[int] = set()
    for v in then:
        best = None
        for u in first:
            if u not in taken and _precedes(st, en, u, v) and (best is None or en[u] > en[best]):
                best = u
        if best is not None:
            taken.add(best)
            out.append((best, v))
    return out


__all__ = [
    "BATCH_US",
    "BWD",
    "BWD_RECV",
    "BWD_SEND",
    "FWD",
    "FWD_RECV",
    "FWD_SEND",
    "OVERLAP_SHARE",
    "OVERLAP_US",
    "pipeline_deps",
    "program_deps",
    "roles",
]

"""The dependency model of op-level timelines: what each framework timer op waited for.

Op-level timelines (Megatron-style timers, one worker per (data-parallel, pipeline) position,
see :mod:`gpuprof.readers.optimeline`) record *ops*, not kernels: ``forward-compute``,
``backward-send``, ``grads-reduce-scatter``, ... Real exporters time a communication op's
transfer only, so every wait is an untimed gap before the op, and waits also sit before
ops that are not communication (a synchronization the timers do not wrap). A replay that
keeps those gaps as fixed delays cannot move when the work that caused them changes; this
model derives them instead. It follows the method of the published what-if simulator for
such timelines (Lin et al., "Understanding Stragglers in Large Model Training Using
What-if Analysis", OSDI 2025): ops of a worker in program order, send/receive pairs and
collectives coupling workers, the rest a launch delay; and adds the untimed waits before
any op (:mod:`gpuprof.job.opdag_waits`).

Nodes are the timer ops (the events of each rank's :class:`~gpuprof.accounting.graph.RankGraph`,
in the same order, so a what-if's per-event factors apply as they are). Times are on the
common clock (each rank's clock offset subtracted).

*Program order.* A worker's timers run on one Python thread: an op is issued after the
ops before it. Ops that start together (within :data:`BATCH_US`, while the first of them
has run less than half its length) were issued together (a batched send/receive); an op depends on the ops of the batch before it that ended by its
start (within :data:`OVERLAP_US` or :data:`OVERLAP_SHARE` of their duration), on the latest-ending earlier op (an asynchronous op
waited for later) and on the previous op of its lane. Steps recorded apart (a stitched
clock, or step numbers that are not consecutive) are not chained: their first ops are
anchored at the step's start.

*Coupling.* A send and its receive (the k-th ``forward-send`` of stage s with the k-th
``forward-recv`` of stage s+1 of the same replica in the same step; backward the other way;
a send that was over before its receive began is a buffered one: the receive depends on
it, the send on nothing), and each matched collective (:mod:`gpuprof.job.collectives`) are a *group*: its transfer
starts once every member has arrived and the group's latency has passed, and each member
ends its own transfer later (``end - `` the measured group start; the whole op for a
transfer-only timer).

*Launch delay.* What is left of an op's gap after what it depends on (its arrival minus
the end of its latest dependency) is kept as measured: Python between timers, work no
timer covers.

*Untimed waits* (:mod:`gpuprof.job.opdag_waits`): an op whose start follows another
worker's arrival at the same op, by far less than its own gap, waited for that worker; the
wait is kept as a dependency on the arrivals of the smallest group of the layout that
holds every worker it waited for (its stage's replicas, its replica's stages, the job).

With nothing changed, the replay (:mod:`gpuprof.job.opdag_run`) reproduces the measured
op times; every edge goes forward in measured time, so the order is a topological one.
Pure: the summaries are only read.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from gpuprof.accounting.graph import EV_COLLECTIVE, EV_COMPUTE, EV_P2P, RankGraph
from gpuprof.accounting.summary import RankSummary
from gpuprof.job import opdag_waits
from gpuprof.job.opdag_compile import OpDag, compile_dag
from gpuprof.job.replay_types import Group
from gpuprof.model import intervals as iv
from gpuprof.model.intervals import Intervals
from gpuprof.model.report import Cause

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


def applies(summaries: Sequence[RankSummary]) -> bool:
    """The model is for jobs whose every active rank is an op-level timeline with op names."""
    active = [s for s in summaries if s.graph is not None]
    return bool(active) and all(
        s.fmt == "timeline" and s.graph is not None and s.graph.timeline and s.graph.name_idx is not None
        for s in active
    )


def _runs(s: RankSummary, g: RankGraph) -> list[bool]:
    """Per step of the rank, whether it runs on into the next one (steps recorded together:
    consecutive numbers on one clock)."""
    nums = [st.number for st in s.steps]
    if g.stitched is not None:
        return [False] * len(nums)
    return [b == a + 1 for a, b in itertools.pairwise(nums)] + [False]


def _program_deps(
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


def _pipeline_deps(
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


def _step_of(g: RankGraph, s: RankSummary) -> IntArray:
    """Each event's step index (0-based into ``s.steps``)."""
    if g.stitched is not None:
        return np.maximum(np.searchsorted(g.stitched[0], g.start, side="right") - 1, 0).astype(np.int64)
    n_steps = max(len(s.steps), 1)
    return np.minimum(np.searchsorted(g.edges[1], g.start, side="right"), n_steps - 1).astype(np.int64)


def _p2p_pairs(
    summaries: Sequence[RankSummary],
    node_lo: Mapping[int, int],
    step: IntArray,
    start: FloatArray,
    names: Sequence[str],
    name_of: IntArray,
    kind: npt.NDArray[np.int8],
) -> list[tuple[int, int]]:
    """Send/receive pairs by position: the k-th forward send of (replica d, stage s) in a
    step with the k-th forward receive of (d, s+1), backward the other way; an interleaved
    schedule wraps from the last stage to the first. A link whose counts differ in a step
    is left to :func:`gpuprof.job.coupling.p2p_groups` (paired by time)."""
    pos: dict[tuple[int, int], int] = {}
    pp = 0
    for s in summaries:
        if s.graph is None or "pp_rank" not in s.parallel:
            return []
        pos[(int(s.parallel.get("dp_rank", 0)), int(s.parallel["pp_rank"]))] = s.rank
        pp = max(pp, int(s.parallel.get("pp_size", 0)), int(s.parallel["pp_rank"]) + 1)
    if pp < 2:
        return []
    low = [x.lower() for x in names]
    role = np.full(len(names), -1, dtype=np.int64)  # 0 fwd send, 1 fwd recv, 2 bwd send, 3 bwd recv
    for i, x in enumerate(low):
        fwd, bwd = "forward" in x, "backward" in x
        send, recv = "send" in x, "recv" in x
        if fwd == bwd or send == recv:
            continue  # a batched name (send-forward-recv-backward) or no direction
        role[i] = (0 if fwd else 2) + (1 if recv else 0)
    lists: dict[tuple[int, int, int, int], list[int]] = {}
    for (d, sidx), r in pos.items():
        lo, hi = node_lo[r], node_lo[r] + _count(summaries, r)
        idx = np.arange(lo, hi)
        sel = idx[(kind[lo:hi] == EV_P2P) & (role[name_of[lo:hi]] >= 0)]
        sel = sel[np.lexsort((start[sel], step[sel]))]
        for n in sel.tolist():
            lists.setdefault((d, sidx, int(step[n]), int(role[name_of[n]])), []).append(n)
    out: list[tuple[int, int]] = []
    for (d, sidx, t, rl), sends in lists.items():
        if rl not in (0, 2):
            continue
        peer = (sidx + 1) % pp if rl == 0 else (sidx - 1) % pp
        recvs = lists.get((d, peer, t, rl + 1))
        if not recvs or len(recvs) != len(sends):
            continue
        out.extend(zip(sends, recvs))
    return out


def _count(summaries: Sequence[RankSummary], rank: int) -> int:
    for s in summaries:
        if s.rank == rank and s.graph is not None:
            return s.graph.n_events
    return 0


def build_opdag(
    summaries: Sequence[RankSummary],
    offsets_us: Mapping[int, float],
    collective: Sequence[Group],
    p2p_by_time: Sequence[Group],
) -> OpDag:
    """The model of ``summaries`` (every one an op-level timeline, see :func:`applies`).
    ``collective``: the matched collectives' groups (:func:`gpuprof.job.coupling.collective_groups`);
    ``p2p_by_time``: send/receive pairs found by time, used where pairing by position fails."""
    active = [s for s in summaries if s.graph is not None]
    ranks = tuple(s.rank for s in active)
    counts = [s.graph.n_events for s in active if s.graph is not None]
    lo_arr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    node_lo = {r: int(lo_arr[p]) for p, r in enumerate(ranks)}
    name_code: dict[str, int] = {}
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("start", "end", "kind", "step", "step_no", "name", "lane", "pos")}
    deps: list[list[int]] = []
    first_parts: list[npt.NDArray[np.bool_]] = []
    chained: list[list[bool]] = []
    for p, s in enumerate(active):
        g = s.graph
        assert g is not None and g.name_idx is not None
        off = g.lo_us - offsets_us.get(s.rank, 0.0)
        step = _step_of(g, s)
        runs = _runs(s, g)
        chained.append(runs)
        lane = np.repeat(np.arange(g.n_streams), np.diff(g.bounds)).astype(np.int64)
        d, first, run = _program_deps(g.start + off, g.start + g.dur + off, lane, step, runs)
        kinds_of_name = [int(np.max(g.kind[g.name_idx == k])) if (g.name_idx == k).any() else -1 for k in range(len(g.names))]
        role = roles(g.names, kinds_of_name)[g.name_idx] if g.names else np.full(g.n_events, -1, dtype=np.int64)
        _pipeline_deps(g.start + off, g.start + g.dur + off, role, step, run, d)
        base = int(lo_arr[p])
        deps.extend([[base + j for j in row] for row in d])
        first_parts.append(first)
        codes = np.array([name_code.setdefault(x, len(name_code)) for x in g.names], dtype=np.int64)
        parts["start"].append(g.start + off)
        parts["end"].append(g.start + g.dur + off)
        parts["kind"].append(g.kind)
        parts["step"].append(step)
        numbers = np.array([st.number for st in s.steps] or [0], dtype=np.int64)
        parts["step_no"].append(numbers[np.clip(step, 0, numbers.size - 1)])
        parts["name"].append(codes[g.name_idx] if codes.size else np.zeros(g.n_events, dtype=np.int64))
        parts["lane"].append(lane)
        parts["pos"].append(np.full(g.n_events, p, dtype=np.int64))
    start = np.concatenate(parts["start"]) if parts["start"] else np.zeros(0)
    end = np.concatenate(parts["end"]) if parts["end"] else np.zeros(0)
    kind = np.concatenate(parts["kind"]).astype(np.int8) if parts["kind"] else np.zeros(0, np.int8)
    step = np.concatenate(parts["step"]) if parts["step"] else np.zeros(0, np.int64)
    step_no = np.concatenate(parts["step_no"]) if parts["step_no"] else np.zeros(0, np.int64)
    name_of = np.concatenate(parts["name"]) if parts["name"] else np.zeros(0, np.int64)
    rank_pos = np.concatenate(parts["pos"]) if parts["pos"] else np.zeros(0, np.int64)
    first = np.concatenate(first_parts) if first_parts else np.zeros(0, dtype=bool)
    n = start.size
    names = sorted(name_code, key=name_code.__getitem__)

    # Coupling groups: pairs by position, then by time, then the matched collectives.
    group = np.full(n, -1, dtype=np.int64)
    members: list[tuple[int, ...]] = []

    def add(ms: Sequence[int]) -> None:
        ms = [m for m in ms if group[m] < 0]
        if len(ms) >= 2:
            for m in ms:
                group[m] = len(members)
            members.append(tuple(ms))

    for a, b in _p2p_pairs(active, node_lo, step_no, start, names, name_of, kind):
        if start[b] - start[a] > BATCH_US and end[a] <= start[b] + OVERLAP_US:
            # The send was over before the receive began (a buffered send): it waited for
            # nothing, and the receive cannot end before the data was sent.
            deps[b].append(a)
        else:
            add((a, b))
    for grp in list(p2p_by_time) + list(collective):
        add([node_lo[r] + i for r, i in grp.members if r in node_lo])
    # A member waits for its group, never for another member of it.
    for v in np.flatnonzero(group >= 0).tolist():
        if deps[v]:
            deps[v] = [u for u in deps[v] if group[u] != group[v]]

    ready = opdag_waits.own_ready(start, end, step_no, deps, first)
    step_us = float(np.median([s.window_us / s.step_count for s in active])) if active else 0.0
    waits = opdag_waits.untimed_waits(active, rank_pos, start, ready, step_no, name_of, group, members, step_us)
    return compile_dag(
        ranks=ranks,
        node_lo=lo_arr,
        rank_pos=rank_pos,
        start=start,
        end=end,
        kind=kind,
        step=step,
        deps=deps,
        first=first,
        ready=ready,
        group=group,
        members=members,
        waits=waits,
        chained=chained,
    )


def is_comm(kind: npt.NDArray[np.int8]) -> npt.NDArray[np.bool_]:
    return np.asarray((kind == EV_COLLECTIVE) | (kind == EV_P2P))


def wait_claims(
    dag: OpDag, summaries: Sequence[RankSummary], offsets_us: Mapping[int, float]
) -> dict[int, dict[Cause, Intervals]]:
    """The untimed waits the model found, as claims on each rank's own clock: before an
    op with an untimed wait, and before a collective's transfer, from the worker's arrival
    until the last worker it waited for arrived (the latency after that is the barrier's
    own, as for the worker that arrived last). Waiting for another stage of the worker's
    own pipeline replica that came straight from its pipeline work (its last dependency a
    compute op or a send/receive) is the pipeline's drain, ``pipeline_bubble``; any other
    wait is for a slower worker, ``straggler``. Send/receive pairs are left to the
    pipeline's own rule (:mod:`gpuprof.job.pipeline_parallel`)."""
    replica = {s.rank: s.parallel.get("dp_rank") for s in summaries}
    parts: dict[tuple[int, Cause], tuple[list[float], list[float]]] = {}
    ready = dag.ready

    def from_pipeline(u: int) -> bool:
        d = dag.dep_idx[dag.dep_ptr[u] : dag.dep_ptr[u + 1]]
        if d.size == 0:
            return True
        last = int(d[np.argmax(dag.end[d])])
        return int(dag.kind[last]) in (EV_COMPUTE, EV_P2P)

    def claim(v: int, u: int) -> None:
        until = min(float(dag.start[v]), float(ready[u]))
        if until <= ready[v]:
            return
        r, ru = dag.ranks[int(dag.rank_pos[v])], dag.ranks[int(dag.rank_pos[u])]
        same = r != ru and replica.get(r) is not None and replica.get(r) == replica.get(ru)
        cause = Cause.PIPELINE_BUBBLE if same and from_pipeline(u) else Cause.STRAGGLER
        off = offsets_us.get(r, 0.0)
        lo, hi = parts.setdefault((r, cause), ([], []))
        lo.append(float(ready[v]) + off)
        hi.append(until + off)

    for v in np.flatnonzero((np.diff(dag.wait_ptr) > 0) & (dag.group < 0)).tolist():
        src = dag.wait_src[dag.wait_ptr[v] : dag.wait_ptr[v + 1]]
        claim(v, int(src[np.argmax(ready[src])]))
    for ms in dag.group_members:
        idx = np.asarray(ms, dtype=np.int64)
        if len(ms) < 2 or bool(np.all(dag.kind[idx] == EV_P2P)):
            continue
        order = idx[np.argsort(ready[idx], kind="stable")]
        last, second = int(order[-1]), int(order[-2])
        for v in ms:
            claim(v, second if v == last else last)
    out: dict[int, dict[Cause, Intervals]] = {}
    for (r, cause), (lo, hi) in parts.items():
        out.setdefault(r, {})[cause] = iv.union(np.asarray(lo), np.asarray(hi))
    return out


__all__ = ["BATCH_US", "OVERLAP_SHARE", "OVERLAP_US", "OpDag", "applies", "build_opdag", "is_comm", "wait_claims"]

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

import itertools
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from gpuprof.accounting.graph import EV_COLLECTIVE, EV_COMPUTE, EV_P2P, RankGraph
from gpuprof.accounting.summary import RankSummary
from gpuprof.job import opdag_waits
from gpuprof.job.opdag_compile import OpDag, compile_dag
from gpuprof.job.opdag_order import (
    BATCH_US,
    BWD_RECV,
    BWD_SEND,
    FWD_RECV,
    FWD_SEND,
    OVERLAP_SHARE,
    OVERLAP_US,
    pipeline_deps,
    program_deps,
    roles,
)
from gpuprof.job.replay_types import Group
from gpuprof.model import intervals as iv
from gpuprof.model.intervals import Intervals
from gpuprof.model.report import Cause

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]



def applies(summaries: Sequence[RankSummary]) -> bool:
    """The model is for jobs whose every active rank is an op-level timeline with op names."""
    active = [s for s in summaries if s.graph is not None]
    return bool(active) and all(
        s.holds.op_spans and s.graph is not None and s.graph.timeline and s.graph.name_idx is not None
        for s in active
    )


def _runs(s: RankSummary, g: RankGraph) -> list[bool]:
    """Per step of the rank, whether it runs on into the next one (steps recorded together:
    consecutive numbers on one clock)."""
    nums = [st.number for st in s.steps]
    if g.stitched is not None:
        return [False] * len(nums)
    return [b == a + 1 for a, b in itertools.pairwise(nums)] + [False]


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


def _families(s: RankSummary, g: RankGraph, role: IntArray, code: dict[tuple[str, ...], int]) -> IntArray:
    """Each event's communication *family* (-1 none), the unit compared with its peers:
    a pipeline link, ``("link", replica, lower stage, upper stage, phase)`` for a send or a
    receive between two stages (known from the worker's place in the layout and the op's
    direction), or a collective's process group, ``("collective", op name, group)``."""
    out = np.full(g.n_events, -1, dtype=np.int64)
    pp = int(s.parallel.get("pp_size", 0))
    if "pp_rank" in s.parallel and pp >= 2:
        d, st = int(s.parallel.get("dp_rank", 0)), int(s.parallel["pp_rank"])
        for r, (phase, lower) in {
            FWD_SEND: ("forward", st),
            FWD_RECV: ("forward", st - 1),
            BWD_SEND: ("backward", st - 1),
            BWD_RECV: ("backward", st),
        }.items():
            sel = role == r
            if sel.any():
                a, b = lower % pp, (lower + 1) % pp
                out[sel] = code.setdefault(("link", str(d), str(a), str(b), phase), len(code))
    comms = s.comms_table
    coll = np.flatnonzero((g.kind == EV_COLLECTIVE) & (g.comm_row >= 0))
    if coll.size and len(comms):
        pgs = comms["pg"]
        for i in coll.tolist():
            name = g.names[int(g.name_idx[i])] if g.name_idx is not None else ""
            out[i] = code.setdefault(("collective", name, str(pgs[int(g.comm_row[i])])), len(code))
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
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("start", "end", "kind", "step", "step_no", "name", "lane", "pos", "family")}
    family_code: dict[tuple[str, ...], int] = {}
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
        d, first, run = program_deps(g.start + off, g.start + g.dur + off, lane, step, runs)
        kinds_of_name = [int(np.max(g.kind[g.name_idx == k])) if (g.name_idx == k).any() else -1 for k in range(len(g.names))]
        role = roles(g.names, kinds_of_name)[g.name_idx] if g.names else np.full(g.n_events, -1, dtype=np.int64)
        pipeline_deps(g.start + off, g.start + g.dur + off, role, step, run, d)
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
        parts["family"].append(_families(s, g, role, family_code))
    start = np.concatenate(parts["start"]) if parts["start"] else np.zeros(0)
    end = np.concatenate(parts["end"]) if parts["end"] else np.zeros(0)
    kind = np.concatenate(parts["kind"]).astype(np.int8) if parts["kind"] else np.zeros(0, np.int8)
    step = np.concatenate(parts["step"]) if parts["step"] else np.zeros(0, np.int64)
    step_no = np.concatenate(parts["step_no"]) if parts["step_no"] else np.zeros(0, np.int64)
    name_of = np.concatenate(parts["name"]) if parts["name"] else np.zeros(0, np.int64)
    rank_pos = np.concatenate(parts["pos"]) if parts["pos"] else np.zeros(0, np.int64)
    first = np.concatenate(first_parts) if first_parts else np.zeros(0, dtype=bool)
    family = np.concatenate(parts["family"]) if parts["family"] else np.zeros(0, np.int64)
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
        family=family,
        family_keys=tuple(sorted(family_code, key=family_code.__getitem__)),
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

    def claim(v: int, u: int, since: float | None = None) -> None:
        """Node ``v`` waited, from its arrival (or ``since``), until node ``u`` arrived."""
        begin = float(ready[v]) if since is None else max(float(ready[v]), since)
        until = min(float(dag.start[v]), float(ready[u]))
        if until <= begin:
            return
        r, ru = dag.ranks[int(dag.rank_pos[v])], dag.ranks[int(dag.rank_pos[u])]
        same = r != ru and replica.get(r) is not None and replica.get(r) == replica.get(ru)
        cause = Cause.PIPELINE_BUBBLE if same and from_pipeline(u) else Cause.STRAGGLER
        off = offsets_us.get(r, 0.0)
        lo, hi = parts.setdefault((r, cause), ([], []))
        lo.append(begin + off)
        hi.append(until + off)

    def releaser(v: int) -> int | None:
        """The last to arrive of the nodes ``v`` waits for untimed, if any."""
        src = dag.wait_src[dag.wait_ptr[v] : dag.wait_ptr[v + 1]]
        return int(src[np.argmax(ready[src])]) if src.size else None

    for v in np.flatnonzero((np.diff(dag.wait_ptr) > 0) & (dag.group < 0)).tolist():
        u = releaser(v)
        if u is not None:
            claim(v, u)
    for ms in dag.group_members:
        idx = np.asarray(ms, dtype=np.int64)
        if len(ms) < 2 or bool(np.all(dag.kind[idx] == EV_P2P)):
            continue
        order = idx[np.argsort(ready[idx], kind="stable")]
        last, second = int(order[-1]), int(order[-2])
        # The group waited beyond its last member for what that member waited for untimed
        # (the last stage's loss averaged over its replicas before an embedding
        # all-reduce): every member waited for it too.
        outside = releaser(last)
        for v in ms:
            claim(v, second if v == last else last)
            if outside is not None:
                claim(v, outside, since=float(ready[last]))
    out: dict[int, dict[Cause, Intervals]] = {}
    for (r, cause), (lo, hi) in parts.items():
        out.setdefault(r, {})[cause] = iv.union(np.asarray(lo), np.asarray(hi))
    return out


__all__ = ["BATCH_US", "OVERLAP_SHARE", "OVERLAP_US", "OpDag", "applies", "build_opdag", "is_comm", "wait_claims"]

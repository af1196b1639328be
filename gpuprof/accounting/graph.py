"""The dependency graph of one rank: what each piece of device work waited for.

Every recommendation's saving comes from replaying a job's graph with one cause removed
(:mod:`gpuprof.job.replay`). The graph of a rank is built where the rank's trace is
read (one worker per rank) and kept compact -- arrays, no Python object per event -- so
that only it, not the trace, travels to the job-level replay.

Nodes and edges
---------------
*Device work*, per stream in stream order. Every activity that starts inside the window
(kernels, copies, memsets; for an op-level timeline, the worker's timer ops, each thread
being a "stream") is one node: its start ``s``, duration ``d`` and stream. In the replay
an event starts at the latest of

* its *release* by the host: the end of the runtime call that launched it (matched by
  correlation id, :mod:`gpuprof.accounting.launches`) plus the latency it had from that call
  to its start -- only for events the host launched just in time (a start within
  :data:`HOST_BOUND_SLACK_US` of the launch), otherwise a fixed queue latency;
* the end of its predecessor on the stream plus a fixed *gap* (the idle time before it
  that nothing in the graph explains: kept as measured);
* the end of a *dependency* on another stream: an event that was held back after its
  launch and after its predecessor, and that starts right after (within
  :data:`DEP_WINDOW_US`, or :data:`TIMER_DEP_WINDOW_US` between the threads of an op-level
  timeline) another stream's event ended, waited for that event (a CUDA stream-wait-event,
  a collective feeding the optimizer, a receive feeding the next compute).

An event whose launch is unknown (Kineto without a correlated runtime call) keeps its
measured start as a lower bound: the graph cannot say it could have started earlier. The
first timer op of a thread keeps it too.

*Host*, per rank, on the threads that launch device work: the host is one timeline
whose time can be removed (a what-if deletes DataLoader waits, sync calls, allocator
calls or operators) and whose *blocking calls* (``cudaStreamSynchronize``, ``.item()``,
blocking copies, synchronizing frees) return no earlier than the device work they wait
for. Each blocking call carries a tag saying which what-if removes it. The host side is
found in :mod:`gpuprof.accounting.graph_host`.

*Coupling across ranks* (collectives, point-to-point pairs, barriers) is added at the job
level by :mod:`gpuprof.job.replay`, from the ``comm_row`` of each communication event
(its row in the rank's ``comms`` table, which the cross-rank matching keys).

With nothing changed, replaying the graph reproduces the measured times: every edge
weight is taken from the measurement, and the binding edge of each event is the one that
explains its start. What the graph does not capture (a dependency it did not find, work
outside the trace) stays as a fixed gap and makes a what-if's saving a lower bound.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpuprof.accounting.graph_host import BLOCK_ALLOC, BLOCK_COPY, BLOCK_SYNC, REMOVABLE, host_side
from gpuprof.accounting.rules.context import LAUNCH_QUEUE_US, LAUNCH_SLACK_US, RuleContext
from gpuprof.model import intervals as iv
from gpuprof.model.intervals import Intervals
from gpuprof.model.table import one_of
from gpuprof.model.timeline import Category, Step

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# An event that starts within this long after its launch returned was waiting for it.
HOST_BOUND_SLACK_US = LAUNCH_SLACK_US
# Latency from a launch call's return to the device start, for events that were held back.
QUEUE_LATENCY_US = LAUNCH_QUEUE_US
# A held-back event that starts within this long after another stream's event ended waited
# for it (a cross-stream event wait takes microseconds on the device).
DEP_WINDOW_US = LAUNCH_SLACK_US
# Op-level timelines: the framework's timers run on several threads of one process, and the
# next op follows the one it needs after some Python; timer ops may also overlap by a few
# microseconds (a receive's timer ends just after the compute that needed it started).
TIMER_DEP_WINDOW_US = float("inf")
TIMER_OVERLAP_US = 50.0
# Below this share of device work with a known launch, launches are not used (Kineto).
MIN_MATCHED_SHARE = 0.5

# Event kinds of the graph.
EV_COMPUTE = 0
EV_COLLECTIVE = 1
EV_P2P = 2
EV_COPY = 3
EV_OTHER = 4


@dataclass(frozen=True)
class RankGraph:
    """One rank's graph; times are microseconds relative to ``lo_us`` (the window start on
    the rank's own clock). Device arrays are in stream-major order: stream ``k`` is rows
    ``bounds[k]:bounds[k+1]``, by start within a stream.

    ``release_known``: the host launch is known and releases the event; ``base``/``floor``:
    launch call end/start (0 when unknown); ``lat``: latency kept from the launch call's end
    to the start; ``gap``: fixed idle time after the stream predecessor; ``dep``: index of
    the event on another stream it waits for (-1 none) and ``dep_lag`` the time from that
    event's end to this start; ``anchor``: the measured start is a lower bound;
    ``issued``: per stream, the running maximum of the time the host issued the events (the
    launch, else the start), so that "issued before t" is a prefix of each stream;
    ``comm_row``: row of a communication event in the rank's ``comms`` table (-1 other).

    ``blocking``: blocking host calls (start, end) sorted by end, ``blocking_tag`` their
    :data:`BLOCK_SYNC`-style tags; ``removable[name]``: host intervals a what-if deletes
    (keys :data:`REMOVABLE`); ``host_end``: where the host's part of the window ends;
    ``edges``: ``(2, k)``, per inner step boundary its host start and device-aligned start.
    """

    rank: int
    lo_us: float
    hi_us: float
    start: FloatArray
    dur: FloatArray
    kind: npt.NDArray[np.int8]
    bounds: IntArray
    carry: FloatArray
    release_known: npt.NDArray[np.bool_]
    base: FloatArray
    floor: FloatArray
    lat: FloatArray
    gap: FloatArray
    dep: IntArray
    dep_lag: FloatArray
    anchor: npt.NDArray[np.bool_]
    issued: FloatArray
    comm_row: IntArray
    host_end: float
    edges: FloatArray
    blocking: Intervals = field(default_factory=iv.empty)
    blocking_tag: npt.NDArray[np.int8] = field(default_factory=lambda: np.zeros(0, dtype=np.int8))
    removable: dict[str, Intervals] = field(default_factory=dict)
    timeline: bool = False
    # Copies from or to pageable host memory (the others are pinned or device-to-device).
    pageable: npt.NDArray[np.bool_] | None = None
    # Direction of each copy (:class:`gpuprof.model.timeline.CopyKind`; 0 for the others).
    copy_kind: npt.NDArray[np.int8] | None = None
    # Op-level timelines only: each event's op name, as an index into ``names``.
    name_idx: IntArray | None = None
    names: tuple[str, ...] = ()
    # Steps recorded apart (time between them left out of the window): each step's
    # (start, end); its replayed time runs from its first replayed start to its last end.
    stitched: Intervals | None = None

    @property
    def n_events(self) -> int:
        return int(self.start.size)

    @property
    def n_streams(self) -> int:
        return int(self.bounds.size - 1)

    @property
    def orig_end(self) -> FloatArray:
        return np.asarray(self.start + self.dur, dtype=np.float64)

    @property
    def nbytes(self) -> int:
        """Memory held by the graph's arrays (what travels from a worker)."""
        arrays = [v for v in vars(self).values() if isinstance(v, np.ndarray)]
        arrays += [a for pair in self.removable.values() for a in pair] + list(self.blocking)
        return int(sum(a.nbytes for a in arrays))


def _event_kind(category: npt.NDArray[np.int64]) -> npt.NDArray[np.int8]:
    out = np.full(category.size, EV_OTHER, dtype=np.int8)
    out[category == int(Category.COMPUTE)] = EV_COMPUTE
    out[category == int(Category.COLLECTIVE)] = EV_COLLECTIVE
    out[category == int(Category.P2P)] = EV_P2P
    out[one_of(category, (int(Category.COPY), int(Category.MEMSET)))] = EV_COPY
    return out


def _latest_other_end(
    start: FloatArray, end: FloatArray, bounds: IntArray, tolerance_us: float, strict: bool = False
) -> tuple[FloatArray, IntArray]:
    """Per event, the latest end among the events of *other* streams that ended by
    ``start + tolerance_us``, and that event's index (-inf / -1 when none). ``strict``:
    only events that started before it count (an op that starts at the same instant, a
    zero-length timer op beside it, is not what it waited for).

    Events are grouped by stream (``bounds``), sorted by start within one. Of events with
    equal ends, the one of the first stream wins, and within a stream the last. All events
    are sorted once by end: the latest end by a time is one ``searchsorted``, and the latest
    of *another* stream is the last event before the run of the own stream's ends there.
    Cost O(n log n) whatever the number of streams (one pass per stream was O(n) each: a
    trace with a kernel per stream took minutes).
    """
    n = start.size
    best = np.full(n, -np.inf)
    idx = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return best, idx
    stream_no = np.repeat(np.arange(bounds.size - 1, dtype=np.int64), np.diff(bounds))
    order = np.lexsort((np.arange(n), -stream_no, end))  # by end; ties: last the first stream, its last event
    s_end, s_stream = end[order], stream_no[order]
    pos = np.arange(n)
    run_start = np.maximum.accumulate(np.where(np.r_[True, s_stream[1:] != s_stream[:-1]], pos, 0))
    before_run = run_start - 1  # the last position before it of another stream (-1: none)

    def other(j: IntArray) -> IntArray:
        """Position ``j`` (the latest end by some time), or when that is the event's own
        stream the latest before it of another one; -1 when none."""
        jj = np.maximum(j, 0)
        return np.where((j >= 0) & (s_stream[jj] == stream_no), before_run[jj], j)

    query = start + tolerance_us
    if not strict:
        j = other(np.searchsorted(s_end, query, side="right") - 1)
    else:
        # Ended before the event started (so started before it too), or ended within the
        # tolerance after it started *and* started before it: the latter end later, so one
        # of them wins when there is one; found by stepping back over the few ends there.
        j = other(np.searchsorted(s_end, start, side="left") - 1)
        lo = np.searchsorted(s_end, start, side="left")
        cur = np.searchsorted(s_end, query, side="right") - 1
        found = np.full(n, -1, dtype=np.int64)
        active = np.flatnonzero(cur >= lo)
        s_start = start[order]
        for step in range(64):
            if not active.size:
                break
            if step == 8:  # many ends share the tolerance: skip the ones that started too late in jumps
                cur[active] = _last_started_before(s_start, lo[active], cur[active], start[active])
                active = active[cur[active] >= lo[active]]
                if not active.size:
                    break
            p = cur[active]
            good = (s_stream[p] != stream_no[active]) & (s_start[p] < start[active])
            found[active[good]] = p[good]
            cur[active] -= 1
            active = active[~good & (cur[active] >= lo[active])]
        for e in active.tolist():  # past 64 steps: the own stream's events, one at a time
            for q in range(int(cur[e]), int(lo[e]) - 1, -1):
                if s_stream[q] != stream_no[e] and s_start[q] < start[e]:
                    found[e] = q
                    break
        j = np.where(found >= 0, found, j)
    ok = j >= 0
    jj = np.maximum(j, 0)
    best = np.where(ok, s_end[jj], -np.inf)
    idx = np.where(ok, order[jj], -1)
    return best, idx


def _last_started_before(values: FloatArray, lo: IntArray, cur: IntArray, limit: FloatArray) -> IntArray:
    """Per query, the last position ``p`` in ``[lo, cur]`` with ``values[p] < limit`` (``lo - 1``
    when none), by jumps over blocks whose minimum is too large: a table of block minima of
    sizes 1, 2, 4, ... up to the longest range asked, O(log) steps per query."""
    out = cur.copy()
    longest = int((cur - lo).max()) + 1 if cur.size else 1
    mins = [values]
    while (1 << len(mins)) <= longest:
        half = 1 << (len(mins) - 1)
        prev = mins[-1]
        mins.append(np.minimum(prev, np.concatenate((np.full(half, np.inf), prev[:-half]))))
    for k in range(len(mins) - 1, -1, -1):
        size = 1 << k
        can = (out - size + 1 >= lo) & (mins[k][np.maximum(out, 0)] >= limit)
        out = np.where(can, out - size, out)
    miss = (out < lo) | (values[np.maximum(out, 0)] >= limit)
    return np.where(miss, lo - 1, out)


def _step_edges(ctx: RuleContext, steps: tuple[Step, ...]) -> tuple[FloatArray, float]:
    """Per inner step boundary its host and device-aligned start, and the host's end of the
    window (relative to lo); the host ranges are the trace's step markers of the same number."""
    lo, hi = ctx.lo_us, ctx.hi_us
    host_steps = {st.number: st for st in ctx.trace.steps}
    dev0 = np.array([st.start_us - lo for st in steps[1:]], dtype=np.float64)
    host0 = np.array(
        [host_steps[st.number].start_us - lo if st.number in host_steps else st.start_us - lo for st in steps[1:]],
        dtype=np.float64,
    )
    last = host_steps.get(steps[-1].number) if steps else None
    host_end = min(hi, last.end_us) - lo if last is not None else hi - lo
    return np.vstack([np.minimum(host0, dev0), dev0]), float(host_end)


def _lanes(start: FloatArray, end: FloatArray, stream: IntArray) -> IntArray:
    """Split each thread of an op-level timeline into lanes of ops that do not overlap
    (beyond :data:`TIMER_OVERLAP_US`), as a trace viewer stacks them: a receive posted while
    a compute op runs on the same thread is not that thread's next op in sequence. Each op
    goes to the first lane free at its start."""
    out = np.empty(start.size, dtype=np.int64)
    order = np.lexsort((start, stream))
    lanes: dict[int, list[float]] = {}
    for i in order.tolist():
        ends = lanes.setdefault(int(stream[i]), [])
        for lane, free in enumerate(ends):
            if free <= start[i] + TIMER_OVERLAP_US:
                ends[lane] = max(free, float(end[i]))
                break
        else:
            lane = len(ends)
            ends.append(float(end[i]))
        out[i] = int(stream[i]) * 1024 + lane
    return out


def _comm_rows(
    start_abs: FloatArray,
    end_abs: FloatArray,
    kind: npt.NDArray[np.int8],
    comms: object,
    names: list[str] | None = None,
) -> IntArray:
    """Row of each communication event in the rank's ``comms`` table (same start and end;
    with ``names``, the event's op name, the same name). Each row goes to one event: two
    calls timed with the same span (a batched send and receive) get a row each."""
    out = np.full(start_abs.size, -1, dtype=np.int64)
    if comms is None or not hasattr(comms, "__len__") or len(comms) == 0:  # type: ignore[arg-type]
        return out
    cs = np.asarray(comms["start_us"], dtype=np.float64)  # type: ignore[index]
    ce = np.asarray(comms["end_us"], dtype=np.float64)  # type: ignore[index]
    row_names = comms["name"] if names is not None else None  # type: ignore[index]
    is_comm = np.flatnonzero((kind == EV_COLLECTIVE) | (kind == EV_P2P))
    if is_comm.size == 0:
        return out
    taken = np.zeros(cs.size, dtype=bool)
    pos = np.searchsorted(cs, start_abs[is_comm], side="left")
    for i, p in zip(is_comm.tolist(), pos.tolist()):
        fallback = -1
        while p < cs.size and cs[p] == start_abs[i]:
            if ce[p] == end_abs[i] and not taken[p]:
                if row_names is None or str(row_names[p]) == names[i]:  # type: ignore[index]
                    fallback = p
                    break
                if fallback < 0:
                    fallback = p
            p += 1
        if fallback >= 0:
            out[i] = fallback
            taken[fallback] = True
    return out


def build_rank_graph(
    ctx: RuleContext, steps: tuple[Step, ...], comms: object = None, stitched: bool = False
) -> RankGraph | None:
    """The graph of one rank's window (see the module docstring); ``None`` when the window
    holds no device work. ``comms`` is the rank's ``RankSummary.comms`` table;
    ``stitched``: the window leaves the time between its steps out."""
    dev = ctx.trace.device_cols
    lo, hi = ctx.lo_us, ctx.hi_us
    act = ctx.act
    ds_all, de_all = ctx.cols.dev_start_us, ctx.cols.dev_end_us
    stream_all = dev["stream"]
    sel = act & (ds_all >= lo) & (ds_all < hi)
    if not sel.any():
        return None
    timeline = ctx.trace.holds.op_spans
    share = ctx.launches.matched_share
    use_launch = ctx.trace.holds.launch_calls and share is not None and share >= MIN_MATCHED_SHARE
    ds, de, stream = ds_all[sel] - lo, de_all[sel] - lo, stream_all[sel]
    cat = ctx.cols.dev_category[sel]
    pageable = dev["pageable"][sel]
    copy_kind = dev["copy_kind"][sel]
    codes = dev.codes("name")[sel] if timeline else None
    la = ctx.launches.end_us[sel] - lo
    ls = ctx.launches.start_us[sel] - lo
    if not use_launch:
        la = np.full(ds.size, np.nan)
        ls = np.full(ds.size, np.nan)
    if timeline:
        stream = _lanes(ds, de, stream)
    order = np.lexsort((ds, stream))
    ds, de, stream, la, ls, cat = ds[order], de[order], stream[order], la[order], ls[order], cat[order]
    pageable = np.asarray(pageable[order], dtype=bool)
    copy_kind = np.asarray(copy_kind[order], dtype=np.int8)
    names: tuple[str, ...] = ()
    name_idx = None
    if codes is not None:
        used, name_idx = np.unique(codes[order], return_inverse=True)
        cats = dev.labels("name")
        names = tuple(str(cats[c]) if c >= 0 else "" for c in used.tolist())
        name_idx = name_idx.astype(np.int64)
    dur = np.maximum(de - ds, 0.0)
    end = ds + dur
    cut = np.flatnonzero(np.diff(stream)) + 1
    bounds = np.concatenate(([0], cut, [ds.size])).astype(np.int64)
    firsts = stream[bounds[:-1]]
    # Predecessor end on the same stream; the first of each stream looks before the window.
    prev_end = np.concatenate(([-np.inf], end[:-1]))
    pre = act & (ds_all < lo)
    carry = np.full(firsts.size, -np.inf)
    if pre.any():
        slot = np.searchsorted(firsts, stream_all[pre])
        ok = (slot < firsts.size) & (firsts[np.minimum(slot, firsts.size - 1)] == stream_all[pre])
        np.maximum.at(carry, slot[ok], de_all[pre][ok] - lo)
    prev_end[bounds[:-1]] = carry
    known = ~np.isnan(la)
    has_prev = np.isfinite(prev_end)
    # The latest end on another stream before each start: a candidate dependency. It
    # started before the event (timer ops overlapping by microseconds may end just after it
    # began, but never start after it) and binds more tightly than the stream predecessor.
    window = TIMER_DEP_WINDOW_US if timeline else DEP_WINDOW_US
    tolerance = TIMER_OVERLAP_US if timeline else 1.0
    other_end, other_idx = _latest_other_end(ds, end, bounds, tolerance, strict=timeline)
    started_before = ds[np.maximum(other_idx, 0)] <= ds
    dep_cand = (
        (other_idx >= 0)
        & started_before
        & (ds - other_end <= window)
        & (~has_prev | (other_end > prev_end))
    )
    # An event that started while its launch call was still running was released by the
    # call, not by its end: a pageable copy the driver stages for a while before the DMA
    # starts (host-bound, from the call's start) -- unless it waited for its stream (the
    # stream was busy when the call began and it started right after its predecessor) or
    # for another stream (a dependency), inside a call that waits for it.
    during = known & (ds < la) & ~np.isnan(ls)
    queued = (
        during
        & has_prev
        & (prev_end > np.where(during, ls, np.inf))
        & (ds - prev_end <= HOST_BOUND_SLACK_US)
    ) | (during & dep_cand)
    la = np.where(during, ls, la)
    lat_obs = ds - la
    host_bound = known & ((lat_obs <= HOST_BOUND_SLACK_US) | during) & ~queued
    lat = np.where(host_bound, lat_obs, QUEUE_LATENCY_US)
    lat = np.where(known, lat, 0.0)
    # Dependencies on other streams for events the host did not release just in time.
    dep_ok = ~host_bound & dep_cand
    dep = np.where(dep_ok, other_idx, -1).astype(np.int64)
    dep_lag = np.where(dep_ok, ds - other_end, 0.0)
    gap = np.where(has_prev, np.maximum(ds - prev_end, 0.0), 0.0)
    gap = np.where(host_bound | dep_ok, 0.0, gap)
    if timeline:
        # Ops overlap by microseconds: a predecessor may end just after the next op began.
        gap = np.where(has_prev & (ds < prev_end), ds - prev_end, gap)
    # Without launches (an op-level timeline, or a trace without its host side) an event
    # follows its stream predecessor and its dependency, gaps kept as measured; only the
    # first of a stream keeps its measured start. With launches, an event whose own launch
    # is unknown keeps its measured start as a lower bound.
    anchor = np.asarray(
        (~known & ~dep_ok & use_launch) | ((not use_launch) & ~has_prev & ~dep_ok), dtype=bool
    )
    issued = np.where(known, la, ds)
    for k in range(bounds.size - 1):
        issued[bounds[k] : bounds[k + 1]] = np.maximum.accumulate(issued[bounds[k] : bounds[k + 1]])
    base = np.where(known, la, 0.0)
    floor = np.where(known & ~np.isnan(ls), ls, base)
    kind = _event_kind(cat)
    event_names = [names[int(k)] for k in name_idx.tolist()] if name_idx is not None else None
    comm_row = _comm_rows(ds + lo, end + lo, kind, comms, event_names)
    edges, host_end = _step_edges(ctx, steps)
    blocking, tags, removable = host_side(ctx, sel) if use_launch else (iv.empty(), np.zeros(0, np.int8), {})
    return RankGraph(
        rank=ctx.trace.rank,
        lo_us=lo,
        hi_us=hi,
        start=ds,
        dur=dur,
        kind=kind,
        bounds=bounds,
        carry=carry,
        release_known=known,
        base=base,
        floor=floor,
        lat=lat,
        gap=gap,
        dep=dep,
        dep_lag=dep_lag,
        anchor=anchor,
        issued=issued,
        comm_row=comm_row,
        host_end=host_end,
        edges=edges,
        blocking=blocking,
        blocking_tag=tags,
        removable=removable,
        timeline=timeline,
        pageable=pageable & (kind == EV_COPY),
        copy_kind=np.where(kind == EV_COPY, copy_kind, np.int8(0)).astype(np.int8),
        name_idx=name_idx,
        names=names,
        stitched=(
            (np.array([st.start_us - lo for st in steps]), np.array([st.end_us - lo for st in steps]))
            if stitched and steps
            else None
        ),
    )


__all__ = [
    "BLOCK_ALLOC",
    "BLOCK_COPY",
    "BLOCK_SYNC",
    "EV_COLLECTIVE",
    "EV_COMPUTE",
    "EV_COPY",
    "EV_OTHER",
    "EV_P2P",
    "REMOVABLE",
    "RankGraph",
    "build_rank_graph",
]

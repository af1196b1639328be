"""Replaying a job's dependency graph, as measured or with one cause removed.

The graph of each rank comes from :mod:`gpuprof.accounting.graph`; what couples ranks is a
list of *groups*: a collective's calls on its members, a point-to-point send with its
receive. A :class:`WhatIf` says what changes: host time deleted per rank, blocking calls
that stop blocking, device durations scaled (compute of a slow rank, collective transfers).
The replay then recomputes every event's start and end, in the order of the measured
times (every edge of the graph points forward in measured time, so that order is a
topological one), and returns each rank's replayed window and steps.

One rank, one pass
------------------
*Host time compresses.* Deleting host intervals ``X`` moves a launch at host time ``t`` to
``t - |X ∩ [0, t)|``; a kept blocking call that returns at ``s1`` returns in the replay at
``max(its shifted start, the replayed end of the device work it waited for)`` plus the part
of the call that was not waiting, and moves every later host time with it (a *shift*,
looked up by the original host time at which work was issued).

*Device work replays in stream order.* Between events that need something from outside
their stream, a stream is a scan, ``end_i = max(r_i + d_i, end_{i-1} + g_i + d_i)``, done
with a cumulative maximum (``r``: the release by the host, ``g``: the fixed gap). An event
with a dependency on another stream, or a member of a group, is computed on its own once
what it needs is known.

Groups across ranks
-------------------
A member *arrives* when its stream lets it start. A collective's transfer starts once the
last member has arrived: each member that was measured ending after the last arrival ends,
in the replay, at the replayed last arrival (on the common clock, see the clock offsets of
:mod:`gpuprof.job.collectives`) plus its measured transfer (its end minus the last
arrival), scaled by the what-if's ``transfer_scale``. A member that ended before the last
arrival did not wait for the others (a buffered send): it ends at its own arrival plus its
duration. Groups are resolved in order of their last measured arrival, kept blocking calls
in order of their measured end: each is resolved after every member rank has replayed all
the work issued before it.

With nothing changed the replay reproduces the measurement; where it does not (clock
skew the alignment leaves, a member that cannot be reached in order), the difference is
the model's error, reported beside every estimate.

Compiled once, run per what-if
------------------------------
Which events are computed together, in which order, and which member or blocking call
waits for which event depends only on the measured times -- the what-if changes durations
and host time, never the order (every decision compares measured times: what was issued
before a blocking call's measured end, which group comes first, which member was reached).
So the order is worked out once per job and per set of kept blocking calls, as a
*program* of steps (:class:`_Program`: a scan of a run of events, one event, a blocking
call, a group), and each what-if runs the program with its own durations and host time.
Running a program does the same arithmetic, in the same order, as deciding and computing
together did: the results are the same to the last bit.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from math import isinf
from typing import Any

import numpy as np
import numpy.typing as npt

from gpuprof.accounting.graph import EV_COLLECTIVE, EV_P2P, RankGraph
from gpuprof.model import intervals as iv
from gpuprof.model.intervals import Intervals

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# A member whose measured end is this close to the last arrival (or later) waited for it.
COUPLED_TOLERANCE_US = 1.0
# An op-level timer op that started this much after it was ready waited for its group.
SYNC_WAIT_US = 20.0
# How often a group whose members are not reachable yet goes back behind the others.
MAX_DEFERRALS = 8


@dataclass(frozen=True)
class Group:
    """One collective call (or a send with its receive) across ranks: the members'
    ``(rank, event index in that rank's graph)``."""

    members: tuple[tuple[int, int], ...]
    # ``collective``: members arrive when their stream lets them start, and the transfer
    # follows the last arrival. ``barrier``: op-level timers started behind a barrier, so
    # the members' ops start together once the last member is ready (its stream's previous
    # work done; the idle time before the op is the wait) and each then lasts as measured.
    # ``after``: the first member (a receive that did not wait: its data had arrived) starts
    # no earlier than the second (its buffered send) ends; the send waits for nothing.
    # ``p2p``: op-level timers of a receive (first member) and its send (second) that start
    # together: as a barrier, and the receive never starts before its send (its data cannot
    # arrive earlier), while the send waits for the receive only if it measurably did.
    kind: str = "collective"


@dataclass(frozen=True)
class WhatIf:
    """A change to replay. ``removed[rank]``: host intervals deleted (relative to the
    rank's window start); ``unblock``: tags of blocking calls that no longer block (see
    :data:`gpuprof.accounting.graph.BLOCK_SYNC`), which are deleted from host time too when
    listed in ``removed``; ``scale[rank]``: per-event duration factors of that rank's
    graph; ``transfer_scale`` / ``p2p_scale``: factors on the transfer part of collectives
    and of point-to-point transfers."""

    name: str = "baseline"
    removed: Mapping[int, Intervals] = field(default_factory=dict)
    unblock: frozenset[int] = frozenset()
    scale: Mapping[int, FloatArray] = field(default_factory=dict)
    transfer_scale: float = 1.0
    p2p_scale: float = 1.0

    def comm_scale(self, kind: int) -> float:
        """The factor on the transfer of a communication event of graph kind ``kind``."""
        if kind == EV_COLLECTIVE:
            return self.transfer_scale
        if kind == EV_P2P:
            return self.p2p_scale
        return 1.0


@dataclass(frozen=True)
class RankReplay:
    """One rank replayed: its window length and step times, microseconds."""

    window_us: float
    step_times_us: tuple[float, ...]

    @property
    def step_us(self) -> float:
        """Mean step time (the whole window without steps)."""
        return float(np.mean(self.step_times_us)) if self.step_times_us else self.window_us


@dataclass(frozen=True)
class JobReplay:
    """Every rank replayed; ``step_us`` is the job's step time (the slowest rank's mean
    step); ``unreached`` counts group members the replay could not reach in order (kept at
    their measured times)."""

    ranks: Mapping[int, RankReplay]
    unreached: int = 0

    @property
    def step_us(self) -> float:
        return max((r.step_us for r in self.ranks.values()), default=0.0)


class _HostMap:
    """Host time ``t`` of one rank after the change: ``t - removed_before(t) + shift(t)``,
    where ``shift`` steps at every processed blocking call (at its measured end)."""

    def __init__(self, removed: Intervals, bps: FloatArray | None = None, shifts: FloatArray | None = None) -> None:
        self.rs, self.re = removed
        self.cum = np.concatenate(([0.0], np.cumsum(self.re - self.rs)))
        # Breakpoints (the first is -inf) and the shift from each on.
        self.bps = np.concatenate(([-np.inf], bps)) if bps is not None else np.array([-np.inf])
        self.shifts = np.concatenate(([0.0], shifts)) if shifts is not None else np.zeros(1)

    def removed_before(self, t: FloatArray) -> FloatArray:
        if self.rs.size == 0:
            return np.zeros_like(t)
        i = np.maximum(np.searchsorted(self.rs, t, side="right") - 1, 0)
        inside = np.clip(t - self.rs[i], 0.0, self.re[i] - self.rs[i])
        return np.asarray(self.cum[i] + inside, dtype=np.float64)

    def shift_of(self, t: FloatArray) -> FloatArray:
        k = np.searchsorted(self.bps, t, side="right") - 1
        return np.asarray(self.shifts[np.maximum(k, 0)], dtype=np.float64)

    def __call__(self, t: FloatArray) -> FloatArray:
        return np.asarray(t - self.removed_before(t) + self.shift_of(t), dtype=np.float64)


def _scan(r: FloatArray, d: FloatArray, g: FloatArray, carry: float) -> FloatArray:
    """Ends of a serialized stream: ``end_i = max(r_i + d_i, end_{i-1} + g_i + d_i)``."""
    e = np.cumsum(g + d)
    x = np.maximum.accumulate(r + d - e)
    return np.asarray(e + np.maximum(x, carry), dtype=np.float64)


# Runs of at most this many events are scanned in plain Python (the same operations as
# :func:`_scan`, element by element): numpy's fixed cost per call is larger.
_SHORT_RUN = 12


class _Kept:
    """The blocking calls a change keeps on one rank (sorted by end), and per event how
    many of them end at or before its launch call's end (``ib``) and start (``i_f``)."""

    def __init__(self, g: RankGraph, tags: frozenset[int]) -> None:
        keep = ~np.isin(g.blocking_tag, list(tags)) if tags else np.ones(g.blocking[0].size, bool)
        self.bs, self.be = g.blocking[0][keep], g.blocking[1][keep]
        self.bs_list: list[float] = self.bs.tolist()
        self.be_list: list[float] = self.be.tolist()
        known = g.release_known & ~g.anchor
        self.ib = np.where(known, np.searchsorted(self.be, g.base, side="right"), 0)
        self.i_f = np.where(known, np.searchsorted(self.be, g.floor, side="right"), 0)

    @property
    def n(self) -> int:
        return int(self.bs.size)


class _Static:
    """What every replay of one rank's graph shares, derived once per job: the stream of
    each event, the events a plain scan cannot compute (group members and dependents of
    other streams), the lists the control flow searches, and the release terms that do not
    depend on the change.

    The host's release of an event is ``max(H(base) + lat, H(floor))`` with ``H`` the
    host-time map of :class:`_HostMap`; ``H(t) = (t - removed_before(t)) + shift(t)``. The
    first term depends only on the host time the change removes, so it is computed once per
    replay (once per job when nothing is removed on the rank); the shift is looked up by
    the number of kept blocking calls that end at or before ``t`` -- a fixed index per
    event -- capped at the number of calls processed so far (the calls are processed in
    order of their end, so the processed ones are always the first ones)."""

    def __init__(self, g: RankGraph, member: npt.NDArray[np.bool_]) -> None:
        self.g = g
        self.n = g.n_events
        self.bounds: list[int] = g.bounds.tolist()
        self.n_streams = len(self.bounds) - 1
        self.stream_of = np.repeat(np.arange(g.n_streams), np.diff(g.bounds))
        self.member = member
        self.special: list[int] = np.flatnonzero(member | (g.dep >= 0)).tolist()
        self.issued: list[float] = g.issued.tolist()
        self.orig_end = g.orig_end
        self.orig_end_list: list[float] = self.orig_end.tolist()
        self.carry: list[float] = g.carry.tolist()
        known = g.release_known
        self.lat = np.where(known & ~g.anchor, g.lat, 0.0)
        self.any_known = bool(known.any())
        self._kept: dict[frozenset[int], _Kept] = {}
        self._release0: tuple[FloatArray, FloatArray] | None = None
        self._fixed0: FloatArray | None = None
        self._order: tuple[npt.NDArray[np.intp], FloatArray] | None = None

    def kept(self, unblock: frozenset[int]) -> _Kept:
        g = self.g
        key = frozenset(int(t) for t in np.unique(g.blocking_tag).tolist() if int(t) in unblock)
        got = self._kept.get(key)
        if got is None:
            got = self._kept[key] = _Kept(g, key)
        return got

    def release(self, removed: Intervals) -> tuple[FloatArray, FloatArray, _HostMap]:
        """``(R1, R2, H)``: per event ``base - removed_before(base)`` (the measured start for
        an anchored event, -inf without a known launch), ``floor - removed_before(floor)``
        (-inf where it does not apply), and the host map without its shifts."""
        hmap = _HostMap(removed)
        if hmap.rs.size == 0 and self._release0 is not None:
            return self._release0[0], self._release0[1], hmap
        g = self.g
        known = g.release_known & ~g.anchor
        tb = g.base - hmap.removed_before(g.base)
        tf = g.floor - hmap.removed_before(g.floor)
        r1 = np.where(g.anchor, g.start, np.where(known, tb, -np.inf))
        r2 = np.where(known, tf, -np.inf)
        if hmap.rs.size == 0:
            self._release0 = (r1, r2)
        return r1, r2, hmap

    def fixed_ready(self, r1: FloatArray, r2: FloatArray, removed_any: bool) -> FloatArray:
        """Every release when no blocking call shifts the host."""
        if not removed_any and self._fixed0 is not None:
            return self._fixed0
        out = np.maximum(r1 + self.lat, r2)
        if not removed_any:
            self._fixed0 = out
        return out

    def start_order(self) -> tuple[npt.NDArray[np.intp], FloatArray]:
        """The events by measured start, and those starts."""
        if self._order is None:
            order = np.argsort(self.g.start, kind="stable")
            self._order = (order, self.g.start[order])
        return self._order


# Steps of a program (the first item of each tuple); ``p`` is the rank's position in the plan.
# The measured values a step needs are copied into it when it is compiled.
_CHUNK = 0  # (op, p, first, stop, previous event or -1, carry, calls processed, short run)
_EVENT = 1  # (op, p, event, *_Link): one dependent of another stream
_BLOCK = 2  # (op, p, call, awaited event or -1, its measured end, shift index at the start)
_COLLECTIVE = 3  # (op, members, last measured arrival)
_BARRIER = 4  # (op, members, shared measured instant)
_MEASURED = 5  # (op, p, event): keeps its measured times
_AFTER = 6  # (op, p, event, own-to-common offset, *_Link, sender's p, event, offset)
_P2P = 7  # (op, members (receive, send), shared measured instant)


@dataclass(frozen=True)
class _Program:
    """The replay's order for one set of kept blocking calls (see the module docstring)."""

    ops: tuple[tuple[Any, ...], ...]
    kept: tuple[_Kept, ...]
    unreached: int


class _Flow:
    """What the order of one rank's replay depends on: how far each stream is replayed,
    which group members are resolved, how many blocking calls are processed."""

    def __init__(self, st: _Static, pos: int, kept: _Kept, ops: list[tuple[Any, ...]]) -> None:
        self.st = st
        self.pos = pos
        self.kept = kept
        self.done: list[int] = st.bounds[:-1]
        self.resolved = np.zeros(st.n, dtype=bool)
        self.nset = 0
        self.ops = ops

    def replayed(self, j: int) -> bool:
        return bool(self.resolved[j]) or j < self.done[self.st.stream_of.item(j)]

    def dep_done(self, i: int) -> bool:
        j = self.st.g.dep.item(i)
        return j < 0 or self.replayed(j)

    def reached(self, i: int) -> bool:
        """Event ``i`` is next on its stream with its dependency replayed."""
        return self.done[self.st.stream_of.item(i)] == i and self.dep_done(i)

    def prev(self, i: int) -> tuple[int, float]:
        """The event before ``i`` on its stream (-1 when first) and the stream's carry."""
        k = self.st.stream_of.item(i)
        return (i - 1, 0.0) if i > self.st.bounds[k] else (-1, self.st.carry[k])

    def release(self, i: int) -> tuple[int, int, float]:
        """What the host's release of event ``i`` needs now (see :class:`_Static`): the shift
        indices of its launch call's end and start, capped at the calls processed, and its
        latency."""
        if self.kept.n == 0:
            return 0, 0, 0.0
        return (
            min(self.kept.ib.item(i), self.nset),
            min(self.kept.i_f.item(i), self.nset),
            self.st.lat.item(i),
        )

    def link(self, i: int) -> tuple[Any, ...]:
        """``(previous, carry, gap, dependency, lag, *release)`` of event ``i``."""
        g = self.st.g
        return (*self.prev(i), g.gap.item(i), g.dep.item(i), g.dep_lag.item(i), *self.release(i))

    def advance(self, limit: float) -> None:
        """Every event issued by ``limit`` (host time, original clock) that does not wait for
        an unresolved group: runs of plain events scanned together, dependents of other
        streams one at a time once their dependency is replayed."""
        st = self.st
        issued, bounds, special = st.issued, st.bounds, st.special
        n_special = len(special)
        done, ops, pos = self.done, self.ops, self.pos
        member, resolved, dep = st.member, self.resolved, st.g.dep
        progress = True
        while progress:
            progress = False
            for k in range(st.n_streams):
                b = bounds[k + 1]
                while True:
                    a = done[k]
                    if a >= b or issued[a] > limit:
                        break
                    stop = bisect_right(issued, limit, a, b)
                    p = bisect_left(special, a)
                    if p < n_special and special[p] < stop:
                        stop = special[p]
                    if stop > a:
                        short = None
                        if stop - a <= _SHORT_RUN:
                            short = tuple((i, st.g.gap.item(i), *self.release(i)) for i in range(a, stop))
                        ops.append((_CHUNK, pos, a, stop, *self.prev(a), self.nset, short))
                        done[k] = stop
                        progress = True
                        continue
                    # ``a`` is special.
                    if member.item(a):
                        if not resolved.item(a):
                            break  # waits for its group
                        done[k] = a + 1  # set by its group
                        progress = True
                        continue
                    j = dep.item(a)
                    if j >= 0 and not self.replayed(j):
                        break  # its dependency on another stream is not replayed yet
                    ops.append((_EVENT, pos, a, *self.link(a)))
                    done[k] = a + 1
                    progress = True

    def block(self, j: int) -> None:
        """A kept blocking call returns once the device work it waited for is done: the
        latest measured end at or before its end among the events replayed by then."""
        s0, s1 = self.kept.bs_list[j], self.kept.be_list[j]
        self.advance(s1)
        best_orig, best = -np.inf, -1
        orig_end, bounds = self.st.orig_end_list, self.st.bounds
        for k in range(len(self.done)):
            a, b = bounds[k], self.done[k]
            if b <= a:
                continue
            i = bisect_right(orig_end, s1, a, b) - 1
            if i >= a and orig_end[i] > best_orig:
                best_orig, best = orig_end[i], i
        kb = min(bisect_right(self.kept.be_list, s0), self.nset)
        self.ops.append((_BLOCK, self.pos, j, best, best_orig, kb))
        self.nset += 1

    def measured(self, i: int) -> None:
        self.resolved[i] = True
        self.ops.append((_MEASURED, self.pos, i))


def _compile(plan: ReplayPlan, unblock: frozenset[int]) -> _Program:
    """The order of every replay that keeps the blocking calls not tagged in ``unblock``."""
    offsets = plan.offsets
    usable = plan.groups
    ops: list[tuple[Any, ...]] = []
    flows = {r: _Flow(st, p, st.kept(unblock), ops) for p, (r, st) in enumerate(plan.statics.items())}

    # The agenda: kept blocking calls and groups, by measured time on the common clock.
    # A heap, so that a group whose members are not reachable yet (a dependency resolved
    # by another group at the same instant) can wait its turn behind the others. Groups
    # come after blocking calls at the same instant, then in the order listed.
    heap: list[tuple[float, int, int, int, int, int]] = []
    n = 0
    for r, fl in flows.items():
        base = fl.st.g.lo_us - offsets.get(r, 0.0)
        for j, e in enumerate(fl.kept.be_list):
            heap.append((e + base, 0, n, r, j, 0))
            n += 1
    for gi, key in enumerate(plan.group_keys):
        heap.append((key, 1, n + gi, gi, 0, 0))
    heapq.heapify(heap)
    seq = len(heap)
    unreached = 0
    while heap:
        key, what, _, who, j, tries = heapq.heappop(heap)
        if what == 0:
            flows[who].block(j)
            continue
        grp = usable[who]
        for r, _ in grp.members:
            fl = flows[r]
            fl.advance(key + offsets.get(r, 0.0) - fl.st.g.lo_us)
        if grp.kind == "after":
            (rr, ri), (sr, si) = grp.members[0], grp.members[1]
            ready = flows[rr].reached(ri) and flows[sr].replayed(si)
            if not ready and tries < MAX_DEFERRALS and heap:
                seq += 1
                heapq.heappush(heap, (key, what, seq, who, j, tries + 1))
                continue
            unreached += _compile_after(grp, flows, offsets, ops, ready)
            continue
        if tries < MAX_DEFERRALS and heap and not all(flows[r].reached(i) for r, i in grp.members):
            seq += 1
            heapq.heappush(heap, (key, what, seq, who, j, tries + 1))
            continue
        unreached += _compile_group(grp, flows, offsets, ops)

    for fl in flows.values():
        fl.advance(np.inf)
    # Members never reached in order (a dependency the ordering could not honour): keep
    # their measured times and let their streams go on.
    stuck = True
    while stuck:
        stuck = False
        for fl in flows.values():
            for k in range(len(fl.done)):
                a = fl.done[k]
                if a < fl.st.bounds[k + 1] and fl.st.member[a] and not fl.resolved[a]:
                    fl.measured(a)
                    unreached += 1
                    stuck = True
            if stuck:
                fl.advance(np.inf)
    return _Program(ops=tuple(ops), kept=tuple(fl.kept for fl in flows.values()), unreached=unreached)


def _compile_after(
    grp: Group, flows: Mapping[int, _Flow], offsets: Mapping[int, float], ops: list[tuple[Any, ...]], ready: bool
) -> int:
    """The step that resolves a receive held only by its buffered send (an ``after``
    group); a receive that cannot be reached after its send keeps its measured times."""
    (rr, ri), (sr, si) = grp.members[0], grp.members[1]
    fl, fs = flows[rr], flows[sr]
    if not ready:
        if not fl.resolved[ri]:
            fl.measured(ri)
            if fl.done[fl.st.stream_of.item(ri)] == ri:
                fl.done[fl.st.stream_of.item(ri)] = ri + 1
        return 1
    fl.resolved[ri] = True
    fl.done[fl.st.stream_of.item(ri)] = ri + 1
    off_r = offsets.get(rr, 0.0) - fl.st.g.lo_us
    off_s = offsets.get(sr, 0.0) - fs.st.g.lo_us
    ops.append((_AFTER, fl.pos, ri, off_r, *fl.link(ri), fs.pos, si, off_s))
    return 0


def _compile_group(grp: Group, flows: Mapping[int, _Flow], offsets: Mapping[int, float], ops: list[tuple[Any, ...]]) -> int:
    """The step that resolves one group; returns how many members could not be reached
    (they keep their measured times)."""
    rows = []
    missing = 0
    for r, i in grp.members:
        fl = flows[r]
        st = fl.st
        off = offsets.get(r, 0.0) - st.g.lo_us  # common = own relative time - off
        reached = fl.reached(i)
        missing += 0 if reached else 1
        rows.append((fl, r, i, off, reached, st.g.start.item(i) - off))
    for fl, r, i, off, reached, _ in rows:
        fl.resolved[i] = True
        if reached:
            fl.done[fl.st.stream_of.item(i)] = i + 1
    members: list[tuple[Any, ...]] = []
    if grp.kind in ("barrier", "p2p"):
        t_orig = max(x[5] for x in rows)
        ready0 = [_orig_ready_for_barrier(fl.st, i) - off for fl, r, i, off, _, _ in rows]
        # The member ready last (least idle before its start) did not wait for the others;
        # its own idle time before the op (launch latency, Python, an untimed delay of its
        # own) is its own. The others waited for it beyond that.
        slack = [x[5] - rd for x, rd in zip(rows, ready0)]
        least = min(slack)
        waited = [sl - least > SYNC_WAIT_US for sl in slack]
        for (fl, r, i, off, reached, start0), rd, wt in zip(rows, ready0, waited):
            g = fl.st.g
            anchored = g.start.item(i) if g.anchor.item(i) else None
            members.append(
                (fl.pos, i, off, reached, start0, rd, wt, g.kind.item(i), *fl.prev(i), g.gap.item(i), g.dep.item(i), anchored)
            )
        ops.append((_P2P if grp.kind == "p2p" else _BARRIER, tuple(members), t_orig))
    else:
        last_orig = max(x[5] for x in rows)
        for fl, r, i, off, reached, start0 in rows:
            orig_end = fl.st.orig_end_list[i] - off
            coupled = orig_end >= last_orig - COUPLED_TOLERANCE_US
            members.append(
                (fl.pos, i, off, reached, start0, orig_end - last_orig, coupled, fl.st.g.kind.item(i), *fl.link(i))
            )
        ops.append((_COLLECTIVE, tuple(members), last_orig))
    return missing


def _orig_ready_for_barrier(st: _Static, i: int) -> float:
    """When event ``i`` could have started, on the measured times, but for the barrier
    before it: its stream's previous work and its dependency done."""
    g = st.g
    k = st.stream_of.item(i)
    prev = st.orig_end_list[i - 1] if i > st.bounds[k] else st.carry[k]
    r = g.start.item(i) if g.anchor.item(i) and isinf(prev) else -np.inf
    j = g.dep.item(i)
    if j >= 0:
        r = max(r, st.orig_end_list[j])
    return min(max(r, prev + min(g.gap.item(i), 0.0)), g.start.item(i))


class _Run:
    """One rank's values while a program runs for one what-if."""

    def __init__(self, st: _Static, kept: _Kept, w: WhatIf) -> None:
        g = st.g
        self.st = st
        self.g = g
        self.kept = kept
        factor = w.scale.get(g.rank)
        dur = g.dur * factor if factor is not None else g.dur
        if w.transfer_scale != 1.0 or w.p2p_scale != 1.0:
            # Communication outside any group (its peers are not in the input) only transfers.
            coll = (g.kind == EV_COLLECTIVE) & ~st.member
            p2p = (g.kind == EV_P2P) & ~st.member
            dur = np.where(coll, dur * w.transfer_scale, np.where(p2p, dur * w.p2p_scale, dur))
        self.dur = dur
        self.gd = g.gap + dur
        removed = w.removed.get(g.rank, iv.empty())
        self.r1, self.r2, self.hmap = st.release(removed)
        removed_any = self.hmap.rs.size > 0
        self.fixed = st.fixed_ready(self.r1, self.r2, removed_any) if kept.n == 0 else None
        self.rd = self.fixed + dur if self.fixed is not None else None
        self.shifts: list[float] = [0.0]
        self.shifts_np = np.zeros(kept.n + 1)
        self.rb0: list[float] = []
        self.rb1: list[float] = []
        if kept.n:
            # Host time removed before each kept call's start and end.
            self.rb0 = self.hmap.removed_before(kept.bs).tolist()
            self.rb1 = self.hmap.removed_before(kept.be).tolist()
        self.new_end = np.full(st.n, np.nan)
        self.new_start = np.full(st.n, np.nan)

    def scan(self, a: int, stop: int, prev: int, carry: float, nset: int, short: Any) -> None:
        """Replay a run of plain events (:func:`_scan`)."""
        new_end = self.new_end
        if prev >= 0:
            carry = new_end.item(prev)
        if short is not None:
            # What _scan does, one element at a time (the same operations, the same results).
            dur, new_start, fixed = self.dur, self.new_start, self.fixed
            r1, r2, s = self.r1, self.r2, self.shifts
            acc = 0.0
            xm = -np.inf
            for i, gap, kb, kf, lat in short:
                d = dur.item(i)
                if fixed is not None:
                    r = fixed.item(i)
                else:
                    r = r1.item(i) + s[kb] + lat
                    rr = r2.item(i) + s[kf]
                    if rr > r:
                        r = rr
                acc = acc + (gap + d)
                x = (r + d) - acc
                if x > xm:
                    xm = x
                end = acc + (xm if xm >= carry else carry)
                new_end[i] = end
                new_start[i] = end - d
            return
        if self.rd is not None:
            rd = self.rd[a:stop]
        else:
            sh = self.shifts_np
            rd = (
                np.maximum(
                    self.r1[a:stop] + sh[np.minimum(self.kept.ib[a:stop], nset)] + self.st.lat[a:stop],
                    self.r2[a:stop] + sh[np.minimum(self.kept.i_f[a:stop], nset)],
                )
                + self.dur[a:stop]
            )
        e = np.cumsum(self.gd[a:stop])
        x = np.maximum.accumulate(rd - e)
        ends = e + np.maximum(x, carry)
        new_end[a:stop] = ends
        self.new_start[a:stop] = ends - self.dur[a:stop]

    def arrival(self, i: int, prev: int, carry: float, gap: float, j: int, lag: float, kb: int, kf: int, lat: float) -> float:
        """When event ``i`` can start: released by the host, its dependency done, and its
        stream free (its predecessor's end plus the gap)."""
        ne = self.new_end
        if self.fixed is not None:
            r = self.fixed.item(i)
        else:
            s = self.shifts
            r = self.r1.item(i) + s[kb] + lat
            rr = self.r2.item(i) + s[kf]
            if rr > r:
                r = rr
        if j >= 0:
            r = max(r, ne.item(j) + lag)
        last = ne.item(prev) if prev >= 0 else carry
        return max(r, last + gap)

    def block(self, j: int, best: int, best_orig: float, kb: int) -> None:
        """A kept blocking call returns once the work it waited for (``best``) is done; the
        host after it moves by as much as its return did."""
        s0, s1 = self.kept.bs_list[j], self.kept.be_list[j]
        best_new = self.new_end.item(best) if best >= 0 else -np.inf
        s_new = s0 - self.rb0[j] + self.shifts[kb]
        tail = s1 - max(best_orig, s0)
        e_new = max(s_new, best_new) + tail
        shift = e_new - (s1 - self.rb1[j])
        self.shifts.append(shift)
        self.shifts_np[len(self.shifts) - 1] = shift

    def finish(self) -> RankReplay:
        g = self.g
        new_end = self.new_end
        if np.isnan(new_end).any():  # unreachable events keep their measured times
            miss = np.isnan(new_end)
            new_end = np.where(miss, self.st.orig_end, new_end)
        if g.stitched is not None:
            return self._stitched(new_end)
        hmap = _HostMap((self.hmap.rs, self.hmap.re), self.kept.be, np.asarray(self.shifts[1:]))
        dev_end = float(np.max(new_end)) if new_end.size else 0.0
        if not self.st.any_known:
            # No host (an op-level timeline, a trace without its host side): the window
            # ends as long after the last op as it did.
            end = dev_end + max(float(g.host_end) - float(np.max(self.st.orig_end)), 0.0) if new_end.size else g.host_end
        else:
            end = max(dev_end, float(hmap(np.array([float(g.host_end)]))[0]))
        bounds = self._step_bounds(new_end, hmap)
        edges = np.concatenate(([0.0], np.minimum(bounds, end), [end]))
        edges = np.maximum.accumulate(edges)
        return RankReplay(window_us=end, step_times_us=tuple(np.diff(edges).tolist()))

    def _stitched(self, new_end: FloatArray) -> RankReplay:
        """Steps recorded apart: each step's replayed time is its measured time changed by
        how much its first start and last end moved against each other."""
        g = self.g
        assert g.stitched is not None
        s0, s1 = g.stitched
        new_start = new_end - self.dur
        which = np.searchsorted(s0, g.start, side="right") - 1
        ok = (which >= 0) & (g.start < s1[np.maximum(which, 0)])
        n = s0.size
        first_new = np.full(n, np.inf)
        last_new = np.full(n, -np.inf)
        first_old = np.full(n, np.inf)
        last_old = np.full(n, -np.inf)
        np.minimum.at(first_new, which[ok], new_start[ok])
        np.maximum.at(last_new, which[ok], new_end[ok])
        np.minimum.at(first_old, which[ok], g.start[ok])
        np.maximum.at(last_old, which[ok], self.st.orig_end[ok])
        has = np.isfinite(first_new)
        change = np.where(has, (last_new - first_new) - (last_old - first_old), 0.0)
        times = np.maximum((s1 - s0) + change, 0.0)
        return RankReplay(window_us=float(times.sum()), step_times_us=tuple(times.tolist()))

    def _step_bounds(self, new_end: FloatArray, hmap: _HostMap) -> FloatArray:
        g = self.g
        host0, dev0 = g.edges[0], g.edges[1]
        if dev0.size == 0:
            return dev0
        order, s_sorted = self.st.start_order()
        end_sorted = new_end[order]
        start_sorted = end_sorted - self.dur[order]
        prev_max = np.maximum.accumulate(end_sorted)
        next_min = np.minimum.accumulate(start_sorted[::-1])[::-1]
        i = np.searchsorted(s_sorted, dev0, side="left")
        before = np.where(i > 0, prev_max[np.maximum(i - 1, 0)], -np.inf)
        after = np.where(i < s_sorted.size, next_min[np.minimum(i, s_sorted.size - 1)], np.inf)
        if not self.st.any_known:
            # No host: a step begins as long before its first op as it did.
            orig_next = np.minimum.accumulate(s_sorted[::-1])[::-1]
            lead = np.where(i < s_sorted.size, orig_next[np.minimum(i, s_sorted.size - 1)] - dev0, 0.0)
            return np.asarray(np.maximum(after - lead, before), dtype=np.float64)
        return np.asarray(np.minimum(np.maximum(hmap(host0), before), after), dtype=np.float64)


def _run(plan: ReplayPlan, program: _Program, w: WhatIf) -> JobReplay:
    """Run ``program`` with the durations and host time of ``w``."""
    runs = [_Run(st, kept, w) for st, kept in zip(plan.statics.values(), program.kept)]
    t_scale, p_scale = w.transfer_scale, w.p2p_scale
    for op in program.ops:
        kind = op[0]
        if kind == _CHUNK:
            runs[op[1]].scan(*op[2:])
        elif kind == _EVENT:
            rn = runs[op[1]]
            i = op[2]
            start = rn.arrival(i, *op[3:])
            rn.new_start[i] = start
            rn.new_end[i] = start + rn.dur.item(i)
        elif kind == _BLOCK:
            runs[op[1]].block(*op[2:])
        elif kind == _COLLECTIVE:
            # The transfer starts once the last member has arrived: a member measured
            # ending after the last arrival ends at the replayed last arrival plus its
            # measured transfer (scaled); one that ended before it (a buffered send) lasts
            # its own duration.
            members = op[1]
            arrivals = [
                runs[m[0]].arrival(m[1], *m[8:]) - m[2] if m[3] else m[4] for m in members
            ]
            last_new = max(arrivals)
            for m, new_arr in zip(members, arrivals):
                rn = runs[m[0]]
                i = m[1]
                if not m[3]:
                    rn.new_start[i] = rn.g.start[i]
                    rn.new_end[i] = rn.st.orig_end[i]
                    continue
                scale = t_scale if m[7] == EV_COLLECTIVE else p_scale if m[7] == EV_P2P else 1.0
                if m[6]:
                    end = last_new + m[5] * scale
                else:
                    end = new_arr + rn.dur.item(i) * scale
                if new_arr > end:
                    end = new_arr
                rn.new_start[i] = new_arr + m[2]
                rn.new_end[i] = end + m[2]
        elif kind == _BARRIER:
            _run_barrier(op[1], op[2], runs, t_scale, p_scale)
        elif kind == _P2P:
            _run_barrier(op[1], op[2], runs, t_scale, p_scale)
            # The receive's data cannot arrive before its send started.
            rv, sd = op[1]
            if rv[3] and sd[3]:
                rr, rs = runs[rv[0]], runs[sd[0]]
                earliest = (rs.new_start.item(sd[1]) - sd[2]) + (rv[4] - sd[4]) + rv[2]
                if earliest > rr.new_start.item(rv[1]):
                    d = rr.new_end.item(rv[1]) - rr.new_start.item(rv[1])
                    rr.new_start[rv[1]] = earliest
                    rr.new_end[rv[1]] = earliest + d
        elif kind == _AFTER:
            # The receive starts when its stream lets it and its send has ended (on the
            # common clock), then lasts its own (scaled) duration.
            rn = runs[op[1]]
            i = op[2]
            sent = runs[op[-3]].new_end.item(op[-2]) - op[-1] + op[3]
            start = max(rn.arrival(i, *op[4:-3]), sent)
            rn.new_start[i] = start
            rn.new_end[i] = start + rn.dur.item(i) * p_scale
        else:
            rn = runs[op[1]]
            i = op[2]
            rn.new_start[i] = rn.g.start[i]
            rn.new_end[i] = rn.st.orig_end[i]
    return JobReplay(
        ranks={r: rn.finish() for r, rn in zip(plan.statics, runs)}, unreached=program.unreached
    )


def _run_barrier(members: Sequence[tuple[Any, ...]], t_orig: float, runs: Sequence[_Run], t_scale: float, p_scale: float) -> None:
    """Op-level timers started together (behind a barrier, or a receive posted as its send
    goes out). A member that was ready at its measured start did not wait: it starts when
    it is ready again. The others waited for it: they start at the shared instant, each at
    its measured offset from it (a receive timed just before its send keeps that lead), but
    not before they are ready themselves. Each lasts its own (scaled) duration."""
    ready = []
    t_new = -np.inf
    first = True
    for p, i, off, reached, start0, ready0, wt, _, prev, carry, gap, j, anchored in members:
        if reached:
            # Ready but for the barrier: the stream's previous work and the dependency done
            # (the idle time before the op, waiting, is not kept; a negative gap -- timer
            # ops overlapping by microseconds -- is).
            ne = runs[p].new_end
            last = ne.item(prev) if prev >= 0 else carry
            r = anchored if anchored is not None and isinf(last) else -np.inf
            if j >= 0:
                r = max(r, ne.item(j))
            new_ready = max(r, last + min(gap, 0.0)) - off
        else:
            new_ready = ready0
        ready.append(new_ready)
        if not wt:
            t = (new_ready + (start0 - ready0)) - (start0 - t_orig)
            if first or t > t_new:
                t_new, first = t, False
    for m, new_ready in zip(members, ready):
        p, i, off, reached, start0, ready0, wt, kind = m[:8]
        rn = runs[p]
        if not reached:
            rn.new_start[i] = rn.g.start[i]
            rn.new_end[i] = rn.st.orig_end[i]
            continue
        start = max(new_ready, t_new + (start0 - t_orig)) if wt else new_ready + (start0 - ready0)
        scale = t_scale if kind == EV_COLLECTIVE else p_scale if kind == EV_P2P else 1.0
        dur = rn.dur.item(i) * scale
        rn.new_start[i] = start + off
        rn.new_end[i] = start + off + dur


class ReplayPlan:
    """What every replay of one job shares: the groups that can couple their members
    (one member per rank and stream), each rank's :class:`_Static` part, the groups' places
    on the agenda, and the compiled programs by set of freed blocking calls. Build it once
    per job and pass it to every :func:`replay_job`."""

    def __init__(
        self, graphs: Sequence[RankGraph], groups: Sequence[Group] = (), offsets_us: Mapping[int, float] | None = None
    ) -> None:
        self.offsets: dict[int, float] = dict(offsets_us or {})
        offsets = self.offsets
        by_rank = {g.rank: g for g in graphs}
        member_masks = {g.rank: np.zeros(g.n_events, dtype=bool) for g in graphs}
        usable: list[Group] = []
        stream_of = {g.rank: np.repeat(np.arange(g.n_streams), np.diff(g.bounds)) for g in graphs}
        for grp in groups:
            ms = []
            seen: set[tuple[int, int]] = set()
            # One member per (rank, stream): a second op of the group on the same stream (a
            # send and a receive timed together) simply follows the first in stream order.
            for r, i in sorted(grp.members):
                if r not in by_rank or not 0 <= i < by_rank[r].n_events:
                    continue
                lane = (r, int(stream_of[r][i]))
                if lane in seen or member_masks[r][i]:
                    continue
                seen.add(lane)
                ms.append((r, i))
            if grp.kind == "p2p":
                # In order (receive, send), each on its own stream.
                ms = [(r, i) for r, i in grp.members if r in by_rank and 0 <= i < by_rank[r].n_events]
                if len(ms) == 2 and ms[0][0] != ms[1][0] and not any(member_masks[r][i] for r, i in ms):
                    for r, i in ms:
                        member_masks[r][i] = True
                    usable.append(Group(tuple(ms), "p2p"))
                continue
            if grp.kind == "after":
                # In order (receive, send); only the receive waits: the send stays plain.
                (rr, ri), (sr, si) = grp.members[0], grp.members[1]
                ok = rr != sr and rr in by_rank and sr in by_rank
                ok = ok and 0 <= ri < by_rank[rr].n_events and 0 <= si < by_rank[sr].n_events
                if ok and not member_masks[rr][ri]:
                    member_masks[rr][ri] = True
                    usable.append(Group(((rr, ri), (sr, si)), "after"))
                continue
            if len({r for r, _ in ms}) < 2:
                continue
            for r, i in ms:
                member_masks[r][i] = True
            usable.append(Group(tuple(ms), grp.kind))
        self.groups = usable
        self.statics = {g.rank: _Static(g, member_masks[g.rank]) for g in graphs}
        self.group_keys: list[float] = []
        for grp in usable:
            arr = [float(by_rank[r].start[i]) + by_rank[r].lo_us - offsets.get(r, 0.0) for r, i in grp.members]
            self.group_keys.append(max(arr))
        self._programs: dict[frozenset[int], _Program] = {}
        present: set[int] = set()
        for g in graphs:
            present.update(np.unique(g.blocking_tag).tolist())
        self._present = frozenset(int(t) for t in present)

    def program(self, unblock: frozenset[int]) -> _Program:
        key = unblock & self._present
        got = self._programs.get(key)
        if got is None:
            got = self._programs[key] = _compile(self, key)
        return got


def replay_job(
    graphs: Sequence[RankGraph],
    groups: Sequence[Group] = (),
    offsets_us: Mapping[int, float] | None = None,
    whatif: WhatIf = WhatIf(),
    plan: ReplayPlan | None = None,
) -> JobReplay:
    """Replay every rank's graph, coupled by ``groups`` (see the module docstring).

    ``offsets_us[rank]`` is subtracted from a rank's own clock to get the common clock.
    ``plan``: the :class:`ReplayPlan` of these graphs, groups and offsets, when the caller
    replays the same job several times.
    """
    if plan is None:
        plan = ReplayPlan(graphs, groups, offsets_us)
    return _run(plan, plan.program(whatif.unblock), whatif)


__all__ = ["Group", "JobReplay", "RankReplay", "ReplayPlan", "WhatIf", "replay_job"]

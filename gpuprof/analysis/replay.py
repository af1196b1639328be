"""Replaying a job's dependency graph, as measured or with one cause removed.

The graph of each rank comes from :mod:`gpuprof.analysis.graph`; what couples ranks is a
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
:mod:`gpuprof.analysis.collectives`) plus its measured transfer (its end minus the last
arrival), scaled by the what-if's ``transfer_scale``. A member that ended before the last
arrival did not wait for the others (a buffered send): it ends at its own arrival plus its
duration. Groups are resolved in order of their last measured arrival, kept blocking calls
in order of their measured end: each is resolved after every member rank has replayed all
the work issued before it.

With nothing changed the replay reproduces the measurement; where it does not (clock
skew the alignment leaves, a member that cannot be reached in order), the difference is
the model's error, reported beside every estimate.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from math import isinf, isnan

import numpy as np
import numpy.typing as npt

from gpuprof.analysis import intervals as iv
from gpuprof.analysis.graph import EV_COLLECTIVE, EV_P2P, RankGraph
from gpuprof.analysis.intervals import Intervals

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
    kind: str = "collective"


@dataclass(frozen=True)
class WhatIf:
    """A change to replay. ``removed[rank]``: host intervals deleted (relative to the
    rank's window start); ``unblock``: tags of blocking calls that no longer block (see
    :data:`gpuprof.analysis.graph.BLOCK_SYNC`), which are deleted from host time too when
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

    def __init__(self, removed: Intervals, capacity: int) -> None:
        self.rs, self.re = removed
        self.cum = np.concatenate(([0.0], np.cumsum(self.re - self.rs)))
        self._rs: list[float] = self.rs.tolist()
        self._re: list[float] = self.re.tolist()
        self._cum: list[float] = self.cum.tolist()
        self.bps = np.full(capacity + 1, np.inf)
        self.shifts = np.zeros(capacity + 1)
        self.bps[0] = -np.inf
        self._bps: list[float] = [-np.inf]
        self._shifts: list[float] = [0.0]
        self.n = 1

    def removed_before(self, t: FloatArray) -> FloatArray:
        if self.rs.size == 0:
            return np.zeros_like(t)
        i = np.maximum(np.searchsorted(self.rs, t, side="right") - 1, 0)
        inside = np.clip(t - self.rs[i], 0.0, self.re[i] - self.rs[i])
        return np.asarray(self.cum[i] + inside, dtype=np.float64)

    def removed_before_one(self, t: float) -> float:
        if not self._rs:
            return 0.0
        i = max(bisect_right(self._rs, t) - 1, 0)
        r0 = self._rs[i]
        return self._cum[i] + min(max(t - r0, 0.0), self._re[i] - r0)

    def shift_of(self, t: FloatArray) -> FloatArray:
        k = np.searchsorted(self.bps[: self.n], t, side="right") - 1
        return np.asarray(self.shifts[np.maximum(k, 0)], dtype=np.float64)

    def shift_one(self, t: float) -> float:
        k = bisect_right(self._bps, t) - 1
        return self._shifts[max(k, 0)]

    def __call__(self, t: FloatArray) -> FloatArray:
        return np.asarray(t - self.removed_before(t) + self.shift_of(t), dtype=np.float64)

    def one(self, t: float) -> float:
        return t - self.removed_before_one(t) + self.shift_one(t)

    def step_at(self, t: float, shift: float) -> None:
        """From host time ``t`` on (original clock), the shift is ``shift``."""
        self.bps[self.n] = t
        self.shifts[self.n] = shift
        self._bps.append(t)
        self._shifts.append(shift)
        self.n += 1


def _scan(r: FloatArray, d: FloatArray, g: FloatArray, carry: float) -> FloatArray:
    """Ends of a serialized stream: ``end_i = max(r_i + d_i, end_{i-1} + g_i + d_i)``."""
    e = np.cumsum(g + d)
    x = np.maximum.accumulate(r + d - e)
    return np.asarray(e + np.maximum(x, carry), dtype=np.float64)


class _Static:
    """What every replay of one rank's graph shares, derived once per job: the stream of
    each event, the events a plain scan cannot compute, the lists the per-event paths
    search, and the release terms that do not depend on the change.

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
        # Events a plain scan cannot compute: group members and dependents of other streams.
        self.special: list[int] = np.flatnonzero(member | (g.dep >= 0)).tolist()
        self.issued: list[float] = g.issued.tolist()
        self.orig_end = g.orig_end
        self.orig_end_list: list[float] = self.orig_end.tolist()
        known = g.release_known
        self.lat = np.where(known & ~g.anchor, g.lat, 0.0)
        self.any_known = bool(known.any())
        self._kept: dict[frozenset[int], tuple[FloatArray, FloatArray, npt.NDArray[np.intp], npt.NDArray[np.intp]]] = {}
        self._release0: tuple[FloatArray, FloatArray] | None = None
        self._order: tuple[npt.NDArray[np.intp], FloatArray] | None = None

    def kept_blocking(
        self, unblock: frozenset[int]
    ) -> tuple[FloatArray, FloatArray, npt.NDArray[np.intp], npt.NDArray[np.intp]]:
        """The blocking calls kept by a change that frees ``unblock``, and per event how
        many of them end at or before its launch call's end and start (see the class)."""
        g = self.g
        key = frozenset(int(t) for t in np.unique(g.blocking_tag) if int(t) in unblock)
        got = self._kept.get(key)
        if got is None:
            keep = ~np.isin(g.blocking_tag, list(key)) if key else np.ones(g.blocking[0].size, bool)
            bs, be = g.blocking[0][keep], g.blocking[1][keep]
            known = g.release_known & ~g.anchor
            ib = np.where(known, np.searchsorted(be, g.base, side="right"), 0)
            i_f = np.where(known, np.searchsorted(be, g.floor, side="right"), 0)
            got = (bs, be, ib, i_f)
            self._kept[key] = got
        return got

    def release(self, hmap: _HostMap) -> tuple[FloatArray, FloatArray]:
        """``(R1, R2)``: per event ``base - removed_before(base)`` (the measured start for
        an anchored event, -inf without a known launch) and ``floor - removed_before(floor)``
        (-inf where it does not apply)."""
        if hmap.rs.size == 0 and self._release0 is not None:
            return self._release0
        g = self.g
        known = g.release_known & ~g.anchor
        tb = g.base - hmap.removed_before(g.base)
        tf = g.floor - hmap.removed_before(g.floor)
        r1 = np.where(g.anchor, g.start, np.where(known, tb, -np.inf))
        r2 = np.where(known, tf, -np.inf)
        if hmap.rs.size == 0:
            self._release0 = (r1, r2)
        return r1, r2

    def start_order(self) -> tuple[npt.NDArray[np.intp], FloatArray]:
        """The events by measured start, and those starts."""
        if self._order is None:
            order = np.argsort(self.g.start, kind="stable")
            self._order = (order, self.g.start[order])
        return self._order


class _Rank:
    """Replay state of one rank."""

    def __init__(self, st: _Static, w: WhatIf) -> None:
        g = st.g
        self.st = st
        self.g = g
        factor = w.scale.get(g.rank)
        self.dur = g.dur * factor if factor is not None else g.dur
        if w.transfer_scale != 1.0 or w.p2p_scale != 1.0:
            # Communication outside any group (its peers are not in the input) only transfers.
            coll = (g.kind == EV_COLLECTIVE) & ~st.member
            p2p = (g.kind == EV_P2P) & ~st.member
            self.dur = np.where(coll, self.dur * w.transfer_scale, np.where(p2p, self.dur * w.p2p_scale, self.dur))
        removed = w.removed.get(g.rank, iv.empty())
        self.block_s, self.block_e, self.ib, self.i_f = st.kept_blocking(w.unblock)
        self.hmap = _HostMap(removed, int(self.block_s.size))
        self.r1, self.r2 = st.release(self.hmap)
        # Without kept blocking calls the host never shifts: every release is known now.
        self.fixed_ready = (
            np.maximum(self.r1 + st.lat, self.r2) if self.block_s.size == 0 else None
        )
        n = st.n
        self.new_end = np.full(n, np.nan)
        self.new_start = np.full(n, np.nan)
        self.done: list[int] = st.bounds[:-1]
        self.last_end: list[float] = g.carry.tolist()
        self.member = st.member
        self.resolved = np.zeros(n, dtype=bool)  # group members whose end is set
        self.stream_of = st.stream_of
        self.orig_end = st.orig_end

    # -- events -----------------------------------------------------------------------
    def _ready(self, a: int, b: int) -> FloatArray:
        if self.fixed_ready is not None:
            return self.fixed_ready[a:b]
        nset = self.hmap.n - 1
        s = self.hmap.shifts
        return np.maximum(
            self.r1[a:b] + s[np.minimum(self.ib[a:b], nset)] + self.st.lat[a:b],
            self.r2[a:b] + s[np.minimum(self.i_f[a:b], nset)],
        )

    def _ready_one(self, i: int) -> float:
        if self.fixed_ready is not None:
            r = self.fixed_ready.item(i)
        else:
            nset = self.hmap.n - 1
            s = self.hmap._shifts
            r = self.r1.item(i) + s[min(self.ib.item(i), nset)] + self.st.lat.item(i)
            r2 = self.r2.item(i) + s[min(self.i_f.item(i), nset)]
            if r2 > r:
                r = r2
        j = self.g.dep.item(i)
        if j >= 0:
            r = max(r, self.new_end.item(j) + self.g.dep_lag.item(i))
        return r

    def arrival(self, i: int, k: int) -> float:
        """When event ``i`` (next on stream ``k``) can start."""
        return max(self._ready_one(i), self.last_end[k] + self.g.gap.item(i))

    def dep_done(self, i: int) -> bool:
        """Event ``i`` has no dependency on another stream, or it is replayed."""
        j = self.g.dep.item(i)
        return j < 0 or not isnan(self.new_end.item(j))

    def ready_for_barrier(self, i: int, k: int) -> float:
        """When event ``i`` could start but for the barrier before it: its stream's previous
        work and its dependency done (the idle time before it, waiting, is not kept)."""
        g = self.g
        r = g.start.item(i) if g.anchor.item(i) and isinf(self.last_end[k]) else -np.inf
        j = g.dep.item(i)
        if j >= 0:
            r = max(r, self.new_end.item(j))
        # Timer ops may overlap their predecessor by microseconds (a negative gap): kept.
        return max(r, self.last_end[k] + min(g.gap.item(i), 0.0))

    def orig_ready_for_barrier(self, i: int, k: int) -> float:
        """:meth:`ready_for_barrier` on the measured times."""
        g = self.g
        a = self.st.bounds[k]
        prev = self.st.orig_end_list[i - 1] if i > a else g.carry.item(k)
        r = g.start.item(i) if g.anchor.item(i) and isinf(prev) else -np.inf
        j = g.dep.item(i)
        if j >= 0:
            r = max(r, self.st.orig_end_list[j])
        return min(max(r, prev + min(g.gap.item(i), 0.0)), g.start.item(i))

    def set_event(self, i: int, k: int, start: float, end: float) -> None:
        self.new_start[i] = start
        self.new_end[i] = end
        self.last_end[k] = end
        self.done[k] = i + 1

    def advance(self, limit: float) -> bool:
        """Replay every event issued by ``limit`` (host time, original clock) that does not
        wait for an unresolved group; returns whether anything moved."""
        st = self.st
        issued, bounds, special = st.issued, st.bounds, st.special
        n_special = len(special)
        done, last_end = self.done, self.last_end
        new_end = self.new_end
        dep = self.g.dep
        moved_any = False
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
                        ends = _scan(self._ready(a, stop), self.dur[a:stop], self.g.gap[a:stop], last_end[k])
                        new_end[a:stop] = ends
                        self.new_start[a:stop] = ends - self.dur[a:stop]
                        last_end[k] = ends.item(-1)
                        done[k] = stop
                        progress = moved_any = True
                        continue
                    # ``a`` is special.
                    if self.member.item(a):
                        if not self.resolved.item(a):
                            break  # waits for its group
                        # resolved: already set by the group (done advanced there)
                        done[k] = a + 1
                        last_end[k] = new_end.item(a)
                        progress = True
                        continue
                    j = dep.item(a)
                    if j >= 0 and isnan(new_end.item(j)):
                        break  # its dependency on another stream is not replayed yet
                    start = self.arrival(a, k)
                    self.set_event(a, k, start, start + self.dur.item(a))
                    progress = moved_any = True
        return moved_any

    def awaited_end(self, s1: float) -> tuple[float, float]:
        """The device work a blocking call returning at ``s1`` waited for: the latest
        measured end at or before ``s1`` among the replayed events, (measured, replayed)."""
        best_orig, best_new = -np.inf, -np.inf
        orig_end = self.st.orig_end_list
        bounds = self.st.bounds
        for k in range(len(self.done)):
            a, b = bounds[k], self.done[k]
            if b <= a:
                continue
            j = bisect_right(orig_end, s1, a, b) - 1
            if j >= a and orig_end[j] > best_orig:
                best_orig, best_new = orig_end[j], self.new_end.item(j)
        return best_orig, best_new

    def block(self, s0: float, s1: float) -> None:
        """A kept blocking call ``[s0, s1)`` returns once the work it waited for is done."""
        best_orig, best_new = self.awaited_end(s1)
        s_new = self.hmap.one(s0)
        tail = s1 - max(best_orig, s0)
        e_new = max(s_new, best_new) + tail
        self.hmap.step_at(s1, e_new - (s1 - self.hmap.removed_before_one(s1)))

    def finish(self) -> RankReplay:
        g = self.g
        new_end = self.new_end
        if np.isnan(new_end).any():  # unreachable events keep their measured times
            miss = np.isnan(new_end)
            new_end = np.where(miss, self.orig_end, new_end)
        if g.stitched is not None:
            return self._stitched(new_end)
        dev_end = float(np.max(new_end)) if new_end.size else 0.0
        if not self.st.any_known:
            # No host (an op-level timeline, a trace without its host side): the window
            # ends as long after the last op as it did.
            end = dev_end + max(float(g.host_end) - float(np.max(self.orig_end)), 0.0) if new_end.size else g.host_end
        else:
            end = max(dev_end, self.hmap.one(g.host_end))
        bounds = self._step_bounds(new_end)
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
        np.maximum.at(last_old, which[ok], self.orig_end[ok])
        has = np.isfinite(first_new)
        change = np.where(has, (last_new - first_new) - (last_old - first_old), 0.0)
        times = np.maximum((s1 - s0) + change, 0.0)
        return RankReplay(window_us=float(times.sum()), step_times_us=tuple(times.tolist()))

    def _step_bounds(self, new_end: FloatArray) -> FloatArray:
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
        return np.asarray(np.minimum(np.maximum(self.hmap(host0), before), after), dtype=np.float64)


# Heap entries of the agenda sort groups after blocking calls at the same instant (``what``)
# and then in the order they were listed; deferred groups get numbers past every other.
_GROUP_SEQ0 = 1 << 40


class ReplayPlan:
    """What every replay of one job shares: the groups that can couple their members
    (one member per rank and stream), each rank's :class:`_Static` part, and the groups'
    places on the agenda. Build it once per job and pass it to every :func:`replay_job`."""

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
    offsets = plan.offsets
    usable = plan.groups
    ranks = {r: _Rank(st, whatif) for r, st in plan.statics.items()}

    # The agenda: kept blocking calls and groups, by measured time on the common clock.
    # A heap, so that a group whose members are not reachable yet (a dependency resolved
    # by another group at the same instant) can wait its turn behind the others.
    heap: list[tuple[float, int, int, int, int, int]] = []
    n = 0
    for r, st in ranks.items():
        base = st.g.lo_us - offsets.get(r, 0.0)
        for j, e in enumerate(st.block_e.tolist()):
            heap.append((e + base, 0, n, r, j, 0))
            n += 1
    for gi, key in enumerate(plan.group_keys):
        heap.append((key, 1, _GROUP_SEQ0 + gi, gi, 0, 0))
    heapq.heapify(heap)
    seq = _GROUP_SEQ0 + len(plan.group_keys)
    unreached = 0
    while heap:
        key, what, _, who, j, tries = heapq.heappop(heap)
        if what == 0:
            rk = ranks[who]
            s0, s1 = rk.block_s.item(j), rk.block_e.item(j)
            rk.advance(s1)
            rk.block(s0, s1)
            continue
        grp = usable[who]
        for r, _ in grp.members:
            rk = ranks[r]
            rk.advance(key + offsets.get(r, 0.0) - rk.g.lo_us)
        if tries < MAX_DEFERRALS and heap and not _reachable(grp, ranks):
            seq += 1
            heapq.heappush(heap, (key, what, seq, who, j, tries + 1))
            continue
        unreached += _resolve(grp, ranks, offsets, whatif)

    for rk in ranks.values():
        rk.advance(np.inf)
    # Members never reached in order (a dependency the ordering could not honour): keep
    # their measured times and let their streams go on.
    stuck = True
    while stuck:
        stuck = False
        for rk in ranks.values():
            for k in range(len(rk.done)):
                a = rk.done[k]
                if a < rk.st.bounds[k + 1] and rk.member[a] and not rk.resolved[a]:
                    rk.resolved[a] = True
                    rk.new_start[a] = rk.g.start[a]
                    rk.new_end[a] = rk.orig_end[a]
                    unreached += 1
                    stuck = True
            if stuck:
                rk.advance(np.inf)
    return JobReplay(ranks={r: rk.finish() for r, rk in ranks.items()}, unreached=unreached)


def _reachable(grp: Group, ranks: Mapping[int, _Rank]) -> bool:
    """Every member is next on its stream with its dependency replayed."""
    for r, i in grp.members:
        rk = ranks[r]
        if rk.done[rk.stream_of.item(i)] != i or not rk.dep_done(i):
            return False
    return True


def _resolve(grp: Group, ranks: Mapping[int, _Rank], offsets: Mapping[int, float], w: WhatIf) -> int:
    """Set the replayed start and end of every member of one group; returns how many
    members could not be reached (they keep their measured times)."""
    if grp.kind == "barrier":
        return _resolve_barrier(grp, ranks, offsets, w)
    info = []
    missing = 0
    for r, i in grp.members:
        rk = ranks[r]
        k = rk.stream_of.item(i)
        off = offsets.get(r, 0.0) - rk.g.lo_us  # common = own relative time - off
        reached = rk.done[k] == i and rk.dep_done(i)
        orig_arr = rk.g.start.item(i) - off
        new_arr = rk.arrival(i, k) - off if reached else orig_arr
        if not reached:
            missing += 1
        info.append((rk, i, k, off, orig_arr, new_arr, reached))
    last_orig = max(x[4] for x in info)
    last_new = max(x[5] for x in info)
    for rk, i, k, off, orig_arr, new_arr, reached in info:
        orig_end = rk.st.orig_end_list[i] - off
        if not reached:
            rk.resolved[i] = True
            rk.new_start[i] = rk.g.start[i]
            rk.new_end[i] = rk.orig_end[i]
            continue
        scale = w.comm_scale(rk.g.kind.item(i))
        if orig_end >= last_orig - COUPLED_TOLERANCE_US:
            end = last_new + (orig_end - last_orig) * scale
        else:
            end = new_arr + rk.dur.item(i) * scale
        end = max(end, new_arr)
        rk.resolved[i] = True
        rk.set_event(i, k, new_arr + off, end + off)
    return missing


def _resolve_barrier(grp: Group, ranks: Mapping[int, _Rank], offsets: Mapping[int, float], w: WhatIf) -> int:
    """Op-level timers started together (behind a barrier, or a receive posted as its send
    goes out). A member that was ready at its measured start did not wait: it starts when
    it is ready again. The others waited for it: they start at the shared instant, each at
    its measured offset from it (a receive timed just before its send keeps that lead), but
    not before they are ready themselves. Each lasts its own (scaled) duration."""
    info = []
    missing = 0
    for r, i in grp.members:
        rk = ranks[r]
        k = rk.stream_of.item(i)
        off = offsets.get(r, 0.0) - rk.g.lo_us
        reached = rk.done[k] == i and rk.dep_done(i)
        orig_ready = rk.orig_ready_for_barrier(i, k) - off
        new_ready = rk.ready_for_barrier(i, k) - off if reached else orig_ready
        missing += 0 if reached else 1
        info.append((rk, i, k, off, rk.g.start.item(i) - off, orig_ready, new_ready, reached))
    t_orig = max(x[4] for x in info)
    waited = [x[4] - x[5] > SYNC_WAIT_US for x in info]
    if all(waited):  # nobody was ready at its start: the group waited for something else
        waited = [False] * len(info)
    free = [
        (x[6] + (x[4] - x[5]), x[4] - t_orig) for x, wt in zip(info, waited) if not wt
    ]  # (new start, offset from the shared instant)
    t_new = max(start - o for start, o in free)
    for (rk, i, k, off, start0, ready0, new_ready, reached), wt in zip(info, waited):
        rk.resolved[i] = True
        if not reached:
            rk.new_start[i] = rk.g.start[i]
            rk.new_end[i] = rk.orig_end[i]
            continue
        start = max(new_ready, t_new + (start0 - t_orig)) if wt else new_ready + (start0 - ready0)
        dur = rk.dur.item(i) * w.comm_scale(rk.g.kind.item(i))
        rk.set_event(i, k, start + off, start + off + dur)
    return missing


__all__ = ["Group", "JobReplay", "RankReplay", "ReplayPlan", "WhatIf", "replay_job"]

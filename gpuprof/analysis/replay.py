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
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

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
        k = int(np.searchsorted(self.bps[: self.n], t, side="right")) - 1
        return float(self.shifts[max(k, 0)])

    def __call__(self, t: FloatArray) -> FloatArray:
        return np.asarray(t - self.removed_before(t) + self.shift_of(t), dtype=np.float64)

    def one(self, t: float) -> float:
        return t - self.removed_before_one(t) + self.shift_one(t)

    def step_at(self, t: float, shift: float) -> None:
        """From host time ``t`` on (original clock), the shift is ``shift``."""
        self.bps[self.n] = t
        self.shifts[self.n] = shift
        self.n += 1


def _scan(r: FloatArray, d: FloatArray, g: FloatArray, carry: float) -> FloatArray:
    """Ends of a serialized stream: ``end_i = max(r_i + d_i, end_{i-1} + g_i + d_i)``."""
    e = np.cumsum(g + d)
    x = np.maximum.accumulate(r + d - e)
    return np.asarray(e + np.maximum(x, carry), dtype=np.float64)


class _Rank:
    """Replay state of one rank."""

    def __init__(self, g: RankGraph, w: WhatIf, members: npt.NDArray[np.bool_]) -> None:
        self.g = g
        n = g.n_events
        factor = w.scale.get(g.rank)
        self.dur = g.dur * factor if factor is not None else g.dur
        if w.transfer_scale != 1.0 or w.p2p_scale != 1.0:
            # Communication outside any group (its peers are not in the input) only transfers.
            coll = (g.kind == EV_COLLECTIVE) & ~members
            p2p = (g.kind == EV_P2P) & ~members
            self.dur = np.where(coll, self.dur * w.transfer_scale, np.where(p2p, self.dur * w.p2p_scale, self.dur))
        removed = w.removed.get(g.rank, iv.empty())
        keep = ~np.isin(g.blocking_tag, list(w.unblock)) if w.unblock else np.ones(g.blocking[0].size, bool)
        self.block_s = g.blocking[0][keep]
        self.block_e = g.blocking[1][keep]
        self.hmap = _HostMap(removed, int(self.block_s.size))
        self.new_end = np.full(n, np.nan)
        self.new_start = np.full(n, np.nan)
        self.bounds: list[int] = g.bounds.tolist()
        self.done: list[int] = self.bounds[:-1]
        self.last_end: list[float] = g.carry.tolist()
        self.member = members
        # Events a plain scan cannot compute: group members and dependents of other streams.
        special = members | (g.dep >= 0)
        self.special_idx = np.flatnonzero(special)
        self.issued_list: list[float] = g.issued.tolist()
        self.orig_end = g.orig_end
        self.orig_end_list: list[float] = self.orig_end.tolist()
        self.resolved = np.zeros(n, dtype=bool)  # group members whose end is set
        self.stream_of = np.repeat(np.arange(g.n_streams), np.diff(g.bounds))

    # -- events -----------------------------------------------------------------------
    def _ready(self, sl: slice) -> FloatArray:
        g = self.g
        rel = np.maximum(self.hmap(g.base[sl]) + g.lat[sl], self.hmap(g.floor[sl]))
        rel = np.where(g.release_known[sl], rel, -np.inf)
        return np.where(g.anchor[sl], g.start[sl], rel)

    def _ready_one(self, i: int) -> float:
        g = self.g
        if g.anchor[i]:
            r = float(g.start[i])
        elif g.release_known[i]:
            r = max(self.hmap.one(float(g.base[i])) + float(g.lat[i]), self.hmap.one(float(g.floor[i])))
        else:
            r = -np.inf
        j = int(g.dep[i])
        if j >= 0:
            r = max(r, float(self.new_end[j]) + float(g.dep_lag[i]))
        return r

    def arrival(self, i: int, k: int) -> float:
        """When event ``i`` (next on stream ``k``) can start."""
        return max(self._ready_one(i), self.last_end[k] + float(self.g.gap[i]))

    def ready_for_barrier(self, i: int, k: int) -> float:
        """When event ``i`` could start but for the barrier before it: its stream's previous
        work and its dependency done (the idle time before it, waiting, is not kept)."""
        g = self.g
        r = float(g.start[i]) if g.anchor[i] and np.isinf(self.last_end[k]) else -np.inf
        j = int(g.dep[i])
        if j >= 0:
            r = max(r, float(self.new_end[j]))
        # Timer ops may overlap their predecessor by microseconds (a negative gap): kept.
        return max(r, self.last_end[k] + min(float(g.gap[i]), 0.0))

    def orig_ready_for_barrier(self, i: int, k: int) -> float:
        """:meth:`ready_for_barrier` on the measured times."""
        g = self.g
        a = int(g.bounds[k])
        prev = float(self.orig_end[i - 1]) if i > a else float(g.carry[k])
        r = float(g.start[i]) if g.anchor[i] and np.isinf(prev) else -np.inf
        j = int(g.dep[i])
        if j >= 0:
            r = max(r, float(self.orig_end[j]))
        return min(max(r, prev + min(float(g.gap[i]), 0.0)), float(g.start[i]))

    def set_event(self, i: int, k: int, start: float, end: float) -> None:
        self.new_start[i] = start
        self.new_end[i] = end
        self.last_end[k] = end
        self.done[k] = i + 1

    def advance(self, limit: float) -> bool:
        """Replay every event issued by ``limit`` (host time, original clock) that does not
        wait for an unresolved group; returns whether anything moved."""
        moved_any = False
        progress = True
        while progress:
            progress = False
            for k in range(len(self.done)):
                while True:
                    a, b = self.done[k], self.bounds[k + 1]
                    if a >= b or self.issued_list[a] > limit:
                        break
                    stop = bisect_right(self.issued_list, limit, a, b)
                    nxt = int(np.searchsorted(self.special_idx, a, side="left"))
                    if nxt < self.special_idx.size and self.special_idx[nxt] < stop:
                        stop = int(self.special_idx[nxt])
                    if stop > a:
                        sl = slice(a, stop)
                        ends = _scan(self._ready(sl), self.dur[sl], self.g.gap[sl], self.last_end[k])
                        self.new_end[sl] = ends
                        self.new_start[sl] = ends - self.dur[sl]
                        self.last_end[k] = float(ends[-1])
                        self.done[k] = stop
                        progress = moved_any = True
                        continue
                    # ``a`` is special.
                    if self.member[a]:
                        if not self.resolved[a]:
                            break  # waits for its group
                        # resolved: already set by the group (done advanced there)
                        self.done[k] = a + 1
                        self.last_end[k] = float(self.new_end[a])
                        progress = True
                        continue
                    j = int(self.g.dep[a])
                    if j >= 0 and np.isnan(self.new_end[j]):
                        break  # its dependency on another stream is not replayed yet
                    start = self.arrival(a, k)
                    self.set_event(a, k, start, start + float(self.dur[a]))
                    progress = moved_any = True
        return moved_any

    def awaited_end(self, s1: float) -> tuple[float, float]:
        """The device work a blocking call returning at ``s1`` waited for: the latest
        measured end at or before ``s1`` among the replayed events, (measured, replayed)."""
        best_orig, best_new = -np.inf, -np.inf
        for k in range(len(self.done)):
            a, b = self.bounds[k], self.done[k]
            if b <= a:
                continue
            j = bisect_right(self.orig_end_list, s1, a, b) - 1
            if j >= a and self.orig_end_list[j] > best_orig:
                best_orig, best_new = self.orig_end_list[j], float(self.new_end[j])
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
        if not g.release_known.any():
            # No host (an op-level timeline, a trace without its host side): the window
            # ends as long after the last op as it did.
            end = dev_end + max(float(g.host_end) - float(np.max(self.orig_end)), 0.0) if new_end.size else g.host_end
        else:
            end = max(dev_end, self.hmap.one(g.host_end))
        bounds = self._step_bounds(new_end)
        edges = np.concatenate(([0.0], np.minimum(bounds, end), [end]))
        edges = np.maximum.accumulate(edges)
        return RankReplay(window_us=end, step_times_us=tuple(float(x) for x in np.diff(edges)))

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
        return RankReplay(window_us=float(times.sum()), step_times_us=tuple(float(x) for x in times))

    def _step_bounds(self, new_end: FloatArray) -> FloatArray:
        g = self.g
        host0, dev0 = g.edges[0], g.edges[1]
        if dev0.size == 0:
            return dev0
        order = np.argsort(g.start, kind="stable")
        s_sorted = g.start[order]
        end_sorted = new_end[order]
        start_sorted = end_sorted - self.dur[order]
        prev_max = np.maximum.accumulate(end_sorted)
        next_min = np.minimum.accumulate(start_sorted[::-1])[::-1]
        i = np.searchsorted(s_sorted, dev0, side="left")
        before = np.where(i > 0, prev_max[np.maximum(i - 1, 0)], -np.inf)
        after = np.where(i < s_sorted.size, next_min[np.minimum(i, s_sorted.size - 1)], np.inf)
        if not g.release_known.any():
            # No host: a step begins as long before its first op as it did.
            orig_next = np.minimum.accumulate(s_sorted[::-1])[::-1]
            lead = np.where(i < s_sorted.size, orig_next[np.minimum(i, s_sorted.size - 1)] - dev0, 0.0)
            return np.asarray(np.maximum(after - lead, before), dtype=np.float64)
        return np.asarray(np.minimum(np.maximum(self.hmap(host0), before), after), dtype=np.float64)


def replay_job(
    graphs: Sequence[RankGraph],
    groups: Sequence[Group] = (),
    offsets_us: Mapping[int, float] | None = None,
    whatif: WhatIf = WhatIf(),
) -> JobReplay:
    """Replay every rank's graph, coupled by ``groups`` (see the module docstring).

    ``offsets_us[rank]`` is subtracted from a rank's own clock to get the common clock.
    """
    offsets = offsets_us or {}
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
    ranks = {g.rank: _Rank(g, whatif, member_masks[g.rank]) for g in graphs}

    # The agenda: kept blocking calls and groups, by measured time on the common clock.
    agenda: list[tuple[float, int, int, int]] = []  # (key, kind 0 block / 1 group, rank or group, index)
    for r, st in ranks.items():
        base = st.g.lo_us - offsets.get(r, 0.0)
        for j, e in enumerate(st.block_e.tolist()):
            agenda.append((e + base, 0, r, j))
    arrivals: list[float] = []
    for n, grp in enumerate(usable):
        arr = [float(by_rank[r].start[i]) + by_rank[r].lo_us - offsets.get(r, 0.0) for r, i in grp.members]
        arrivals.append(max(arr))
        agenda.append((max(arr), 1, n, 0))
    # A heap, so that a group whose members are not reachable yet (a dependency resolved
    # by another group at the same instant) can wait its turn behind the others.
    heap = [(key, what, n, who, j, 0) for n, (key, what, who, j) in enumerate(agenda)]
    heapq.heapify(heap)
    seq = len(heap)
    unreached = 0
    while heap:
        key, what, _, who, j, tries = heapq.heappop(heap)
        if what == 0:
            st = ranks[who]
            s0, s1 = float(st.block_s[j]), float(st.block_e[j])
            st.advance(s1)
            st.block(s0, s1)
            continue
        grp = usable[who]
        for r, _ in grp.members:
            ranks[r].advance(key + offsets.get(r, 0.0) - ranks[r].g.lo_us)
        if tries < MAX_DEFERRALS and heap and not _reachable(grp, ranks):
            seq += 1
            heapq.heappush(heap, (key, what, seq, who, j, tries + 1))
            continue
        unreached += _resolve(grp, ranks, offsets, whatif)

    for st in ranks.values():
        st.advance(np.inf)
    # Members never reached in order (a dependency the ordering could not honour): keep
    # their measured times and let their streams go on.
    stuck = True
    while stuck:
        stuck = False
        for st in ranks.values():
            for k in range(len(st.done)):
                a = st.done[k]
                if a < st.bounds[k + 1] and st.member[a] and not st.resolved[a]:
                    st.resolved[a] = True
                    st.new_start[a] = st.g.start[a]
                    st.new_end[a] = st.orig_end[a]
                    unreached += 1
                    stuck = True
            if stuck:
                st.advance(np.inf)
    return JobReplay(ranks={r: st.finish() for r, st in ranks.items()}, unreached=unreached)


def _reachable(grp: Group, ranks: Mapping[int, _Rank]) -> bool:
    """Every member is next on its stream with its dependency replayed."""
    for r, i in grp.members:
        st = ranks[r]
        k = int(st.stream_of[i])
        if st.done[k] != i or (st.g.dep[i] >= 0 and np.isnan(st.new_end[st.g.dep[i]])):
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
        st = ranks[r]
        k = int(st.stream_of[i])
        off = offsets.get(r, 0.0) - st.g.lo_us  # common = own relative time - off
        reached = st.done[k] == i and (st.g.dep[i] < 0 or not np.isnan(st.new_end[st.g.dep[i]]))
        orig_arr = float(st.g.start[i]) - off
        new_arr = st.arrival(i, k) - off if reached else orig_arr
        if not reached:
            missing += 1
        info.append((st, i, k, off, orig_arr, new_arr, reached))
    last_orig = max(x[4] for x in info)
    last_new = max(x[5] for x in info)
    for st, i, k, off, orig_arr, new_arr, reached in info:
        orig_end = float(st.orig_end[i]) - off
        if not reached:
            st.resolved[i] = True
            st.new_start[i] = st.g.start[i]
            st.new_end[i] = st.orig_end[i]
            continue
        scale = w.comm_scale(int(st.g.kind[i]))
        if orig_end >= last_orig - COUPLED_TOLERANCE_US:
            end = last_new + (orig_end - last_orig) * scale
        else:
            end = new_arr + float(st.dur[i]) * scale
        end = max(end, new_arr)
        st.resolved[i] = True
        st.set_event(i, k, new_arr + off, end + off)
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
        st = ranks[r]
        k = int(st.stream_of[i])
        off = offsets.get(r, 0.0) - st.g.lo_us
        reached = st.done[k] == i and (st.g.dep[i] < 0 or not np.isnan(st.new_end[st.g.dep[i]]))
        orig_ready = st.orig_ready_for_barrier(i, k) - off
        new_ready = st.ready_for_barrier(i, k) - off if reached else orig_ready
        missing += 0 if reached else 1
        info.append((st, i, k, off, float(st.g.start[i]) - off, orig_ready, new_ready, reached))
    t_orig = max(x[4] for x in info)
    waited = [x[4] - x[5] > SYNC_WAIT_US for x in info]
    if all(waited):  # nobody was ready at its start: the group waited for something else
        waited = [False] * len(info)
    free = [
        (x[6] + (x[4] - x[5]), x[4] - t_orig) for x, wt in zip(info, waited) if not wt
    ]  # (new start, offset from the shared instant)
    t_new = max(start - o for start, o in free)
    for (st, i, k, off, start0, ready0, new_ready, reached), wt in zip(info, waited):
        st.resolved[i] = True
        if not reached:
            st.new_start[i] = st.g.start[i]
            st.new_end[i] = st.orig_end[i]
            continue
        start = max(new_ready, t_new + (start0 - t_orig)) if wt else new_ready + (start0 - ready0)
        dur = float(st.dur[i]) * w.comm_scale(int(st.g.kind[i]))
        st.set_event(i, k, start + off, start + off + dur)
    return missing


__all__ = ["Group", "JobReplay", "RankReplay", "WhatIf", "replay_job"]

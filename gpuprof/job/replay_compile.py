"""The order of a job's replay, worked out once per set of kept blocking calls (see
:mod:`gpuprof.job.replay`, "Compiled once, run per what-if").

:class:`ReplayPlan` holds what every replay of one job shares: the groups that can couple
their members, each rank's :class:`~gpuprof.job.replay_rank.RankStatic` part and the
compiled programs. :func:`compile_program` walks the measured times -- kept blocking calls
and groups in order on the common clock, each rank's streams advanced up to them -- and
writes down the steps of a :class:`Program` (:data:`CHUNK` ... :data:`P2P`), which
:mod:`gpuprof.job.replay_run` runs with each what-if's durations and host time.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import isinf
from typing import Any

import numpy as np

from gpuprof.accounting.graph import RankGraph
from gpuprof.job.replay_rank import Kept, RankStatic
from gpuprof.job.replay_types import Group

# A member whose measured end is this close to the last arrival (or later) waited for it.
COUPLED_TOLERANCE_US = 1.0
# An op-level timer op that started this much after it was ready waited for its group.
SYNC_WAIT_US = 20.0
# How often a group whose members are not reachable yet goes back behind the others.
MAX_DEFERRALS = 8

# Runs of at most this many events are scanned in plain Python (the same operations as
# :func:`~gpuprof.job.replay_rank.scan`, element by element): numpy's fixed cost per call is larger.
_SHORT_RUN = 12


# Steps of a program (the first item of each tuple); ``p`` is the rank's position in the plan.
# The measured values a step needs are copied into it when it is compiled.
CHUNK = 0  # (op, p, first, stop, previous event or -1, carry, calls processed, short run)
EVENT = 1  # (op, p, event, *_Link): one dependent of another stream
BLOCK = 2  # (op, p, call, awaited event or -1, its measured end, shift index at the start)
COLLECTIVE = 3  # (op, members, last measured arrival)
BARRIER = 4  # (op, members, shared measured instant)
MEASURED = 5  # (op, p, event): keeps its measured times
AFTER = 6  # (op, p, event, own-to-common offset, *_Link, sender's p, event, offset)
P2P = 7  # (op, members (receive, send), shared measured instant)


@dataclass(frozen=True)
class Program:
    """The replay's order for one set of kept blocking calls (see the module docstring)."""

    ops: tuple[tuple[Any, ...], ...]
    kept: tuple[Kept, ...]
    unreached: int


class _Flow:
    """What the order of one rank's replay depends on: how far each stream is replayed,
    which group members are resolved, how many blocking calls are processed."""

    def __init__(self, st: RankStatic, pos: int, kept: Kept, ops: list[tuple[Any, ...]]) -> None:
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
        """What the host's release of event ``i`` needs now (see :class:`RankStatic`): the shift
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
                        ops.append((CHUNK, pos, a, stop, *self.prev(a), self.nset, short))
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
                    ops.append((EVENT, pos, a, *self.link(a)))
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
        self.ops.append((BLOCK, self.pos, j, best, best_orig, kb))
        self.nset += 1

    def measured(self, i: int) -> None:
        self.resolved[i] = True
        self.ops.append((MEASURED, self.pos, i))


def compile_program(plan: ReplayPlan, unblock: frozenset[int]) -> Program:
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
    return Program(ops=tuple(ops), kept=tuple(fl.kept for fl in flows.values()), unreached=unreached)


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
    ops.append((AFTER, fl.pos, ri, off_r, *fl.link(ri), fs.pos, si, off_s))
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
        ops.append((P2P if grp.kind == "p2p" else BARRIER, tuple(members), t_orig))
    else:
        last_orig = max(x[5] for x in rows)
        for fl, r, i, off, reached, start0 in rows:
            orig_end = fl.st.orig_end_list[i] - off
            coupled = orig_end >= last_orig - COUPLED_TOLERANCE_US
            members.append(
                (fl.pos, i, off, reached, start0, orig_end - last_orig, coupled, fl.st.g.kind.item(i), *fl.link(i))
            )
        ops.append((COLLECTIVE, tuple(members), last_orig))
    return missing


def _orig_ready_for_barrier(st: RankStatic, i: int) -> float:
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



class ReplayPlan:
    """What every replay of one job shares: the groups that can couple their members
    (one member per rank and stream), each rank's :class:`RankStatic` part, the groups' places
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
        self.statics = {g.rank: RankStatic(g, member_masks[g.rank]) for g in graphs}
        self.group_keys: list[float] = []
        for grp in usable:
            arr = [float(by_rank[r].start[i]) + by_rank[r].lo_us - offsets.get(r, 0.0) for r, i in grp.members]
            self.group_keys.append(max(arr))
        self._programs: dict[frozenset[int], Program] = {}
        present: set[int] = set()
        for g in graphs:
            present.update(np.unique(g.blocking_tag).tolist())
        self._present = frozenset(int(t) for t in present)

    def program(self, unblock: frozenset[int]) -> Program:
        key = unblock & self._present
        got = self._programs.get(key)
        if got is None:
            got = self._programs[key] = compile_program(self, key)
        return got


__all__ = [
    "AFTER",
    "BARRIER",
    "BLOCK",
    "CHUNK",
    "COLLECTIVE",
    "EVENT",
    "MEASURED",
    "P2P",
    "Program",
    "ReplayPlan",
    "compile_program",
]

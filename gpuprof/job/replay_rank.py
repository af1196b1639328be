"""One rank's part of the replay, shared by every what-if (see :mod:`gpuprof.job.replay`,
"One rank, one pass").

:class:`HostMap` maps a rank's host time to its time after a change (host time deleted,
blocking calls that return later or sooner); :class:`Kept` holds the blocking calls a
change keeps; :class:`RankStatic` is what every replay of one rank's graph shares, worked
out once per job; :func:`scan` is the cumulative-maximum recurrence of a serialized stream.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpuprof.accounting.graph import RankGraph
from gpuprof.model.intervals import Intervals

FloatArray = npt.NDArray[np.float64]


class HostMap:
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


def scan(r: FloatArray, d: FloatArray, g: FloatArray, carry: float) -> FloatArray:
    """Ends of a serialized stream: ``end_i = max(r_i + d_i, end_{i-1} + g_i + d_i)``."""
    e = np.cumsum(g + d)
    x = np.maximum.accumulate(r + d - e)
    return np.asarray(e + np.maximum(x, carry), dtype=np.float64)




class Kept:
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


class RankStatic:
    """What every replay of one rank's graph shares, derived once per job: the stream of
    each event, the events a plain scan cannot compute (group members and dependents of
    other streams), the lists the control flow searches, and the release terms that do not
    depend on the change.

    The host's release of an event is ``max(H(base) + lat, H(floor))`` with ``H`` the
    host-time map of :class:`HostMap`; ``H(t) = (t - removed_before(t)) + shift(t)``. The
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
        self._kept: dict[frozenset[int], Kept] = {}
        self._release0: tuple[FloatArray, FloatArray] | None = None
        self._fixed0: FloatArray | None = None
        self._order: tuple[npt.NDArray[np.intp], FloatArray] | None = None

    def kept(self, unblock: frozenset[int]) -> Kept:
        g = self.g
        key = frozenset(int(t) for t in np.unique(g.blocking_tag).tolist() if int(t) in unblock)
        got = self._kept.get(key)
        if got is None:
            got = self._kept[key] = Kept(g, key)
        return got

    def release(self, removed: Intervals) -> tuple[FloatArray, FloatArray, HostMap]:
        """``(R1, R2, H)``: per event ``base - removed_before(base)`` (the measured start for
        an anchored event, -inf without a known launch), ``floor - removed_before(floor)``
        (-inf where it does not apply), and the host map without its shifts."""
        hmap = HostMap(removed)
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


__all__ = ["HostMap", "Kept", "RankStatic", "scan"]

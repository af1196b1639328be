"""Running a compiled replay (:class:`~gpuprof.job.replay_compile.Program`) with one
what-if's durations and host time: every event's replayed start and end, then each rank's
replayed window and step times (see :mod:`gpuprof.job.replay`).
"""

from __future__ import annotations

from collections.abc import Sequence
from math import isinf
from typing import Any

import numpy as np
import numpy.typing as npt

from gpuprof.accounting.graph import EV_COLLECTIVE, EV_P2P
from gpuprof.job.replay_compile import (
    AFTER,
    BARRIER,
    BLOCK,
    CHUNK,
    COLLECTIVE,
    EVENT,
    P2P,
    Program,
    ReplayPlan,
)
from gpuprof.job.replay_rank import HostMap, Kept, RankStatic
from gpuprof.job.replay_types import JobReplay, RankReplay, WhatIf
from gpuprof.model import intervals as iv

FloatArray = npt.NDArray[np.float64]


class _Run:
    """One rank's values while a program runs for one what-if."""

    def __init__(self, st: RankStatic, kept: Kept, w: WhatIf) -> None:
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
        """Replay a run of plain events (:func:`scan`)."""
        new_end = self.new_end
        if prev >= 0:
            carry = new_end.item(prev)
        if short is not None:
            # What scan does, one element at a time (the same operations, the same results).
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
                    r = max(r, rr)
                acc = acc + (gap + d)
                x = (r + d) - acc
                xm = max(xm, x)
                end = acc + (max(xm, carry))
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
            r = max(r, rr)
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
        hmap = HostMap((self.hmap.rs, self.hmap.re), self.kept.be, np.asarray(self.shifts[1:]))
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

    def _step_bounds(self, new_end: FloatArray, hmap: HostMap) -> FloatArray:
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


def run_program(plan: ReplayPlan, program: Program, w: WhatIf) -> JobReplay:
    """Run ``program`` with the durations and host time of ``w``."""
    runs = [_Run(st, kept, w) for st, kept in zip(plan.statics.values(), program.kept)]
    t_scale, p_scale = w.transfer_scale, w.p2p_scale
    for op in program.ops:
        kind = op[0]
        if kind == CHUNK:
            runs[op[1]].scan(*op[2:])
        elif kind == EVENT:
            rn = runs[op[1]]
            i = op[2]
            start = rn.arrival(i, *op[3:])
            rn.new_start[i] = start
            rn.new_end[i] = start + rn.dur.item(i)
        elif kind == BLOCK:
            runs[op[1]].block(*op[2:])
        elif kind == COLLECTIVE:
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
                end = max(end, new_arr)
                rn.new_start[i] = new_arr + m[2]
                rn.new_end[i] = end + m[2]
        elif kind == BARRIER:
            _run_barrier(op[1], op[2], runs, t_scale, p_scale)
        elif kind == P2P:
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
        elif kind == AFTER:
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


__all__ = ["run_program"]

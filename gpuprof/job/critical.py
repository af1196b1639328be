"""The critical path of a step: the chain of work, across ranks, that set its length.

Walked backwards on the job model (:mod:`gpuprof.job.whatifs`) from the last work to
end in the step, on the measured times (the unchanged replay reproduces them). Every
constraint of the model is tight on measured times (gaps and lags are measured), so the
walk asks which one mattered: of an event's stream predecessor and the event of another
stream it depends on, the one that ended last held it (the other had slack); an event
released by the host keeps the path on its rank. A collective or point-to-point member is
held by another member of its group when that member arrived after this rank's own work
was done (the rank waited for it), and the path follows that member's chain. Each event
on the path covers the time from the end of the one before it on the path to its own end;
idle time between them is nobody's work and is left out.

Pure; times are microseconds on the common clock (each rank's own clock less its offset).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from gpuprof.accounting.graph import EV_COLLECTIVE, EV_P2P, RankGraph
from gpuprof.job.whatifs import JobModel

# Two times this close count as the same instant when telling which edge held an event.
TOL_US = 2.0
# A path longer than this many events is cut (a guard; real steps stay far below).
MAX_NODES = 200_000


def critical_path(model: JobModel, t0_us: float, t1_us: float) -> list[dict[str, float | int]]:
    """Segments ``{rank, start_us, end_us}`` of the critical path through ``[t0_us, t1_us]``
    (common clock), latest first reversed to time order; empty when nothing ran in it."""
    graphs: Mapping[int, RankGraph] = {g.rank: g for g in model.graphs}
    shift = {r: g.lo_us - model.offsets_us.get(r, 0.0) for r, g in graphs.items()}
    start = {r: g.start + shift[r] for r, g in graphs.items()}
    end = {r: g.start + g.dur + shift[r] for r, g in graphs.items()}
    stream_first = {r: np.repeat(g.bounds[:-1], np.diff(g.bounds)) for r, g in graphs.items()}
    by_end = {r: _ByEnd(end[r]) for r in graphs}
    member: dict[tuple[int, int], int] = {}
    for n, grp in enumerate(model.groups):
        for m in grp.members:
            member[m] = n

    # The last work to end in the step, on any rank.
    best: tuple[int, int] | None = None
    best_end = -np.inf
    for r, g in graphs.items():
        ok = np.flatnonzero((end[r] <= t1_us + TOL_US) & (end[r] > t0_us))
        if ok.size:
            i = int(ok[np.argmax(end[r][ok])])
            if end[r][i] > best_end:
                best, best_end = (r, i), float(end[r][i])
    if best is None:
        return []

    path: list[tuple[int, int]] = []
    by_host: set[tuple[int, int]] = set()  # released by the host after its holder ended
    seen: set[tuple[int, int]] = set()
    cur: tuple[int, int] | None = best
    via_group = False
    while cur is not None and len(path) < MAX_NODES and cur not in seen:
        r, i = cur
        seen.add(cur)
        path.append(cur)
        if float(start[r][i]) <= t0_us:
            break
        g = graphs[r]
        local = _held_by(g, r, i, start, end, stream_first[r], by_end[r])
        grp_no = member.get(cur)
        if grp_no is not None and not via_group and int(g.kind[i]) in (EV_COLLECTIVE, EV_P2P):
            # A member that reached the group after this rank's own work was done held it:
            # the rank waited for that member, whose chain the path follows.
            grp = model.groups[grp_no]
            # A buffered send (second member of an ``after`` group) waits for nobody.
            if grp.kind == "after":
                others = [grp.members[1]] if cur == grp.members[0] and grp.members[1][0] in graphs else []
            else:
                others = [m for m in grp.members if m != cur and m[0] in graphs]
            if others:
                last = max(others, key=lambda m: float(start[m[0]][m[1]]))
                local_end = float(end[r][local[1]]) if local is not None else -np.inf
                if float(start[last[0]][last[1]]) > local_end + TOL_US:
                    cur, via_group = last, True
                    continue
        via_group = False
        if local is not None and bool(g.release_known[i]) and float(end[r][local[1]]) + TOL_US < float(start[r][i]):
            by_host.add(cur)
        cur = local
    return _segments(path, by_host, start, end, t0_us, t1_us)


def _held_by(
    g: RankGraph,
    r: int,
    i: int,
    start: Mapping[int, np.ndarray],
    end: Mapping[int, np.ndarray],
    first: np.ndarray,
    by_end: _ByEnd | None = None,
) -> tuple[int, int] | None:
    """The event of rank ``r`` that held event ``i``'s start: of its stream predecessor and
    the event of another stream it depends on, the one that ended last (the other had
    slack); for the first event of a stream without a dependency, what ended last on the
    rank before it started. ``None`` when nothing ran before it."""
    cands = []
    if i > int(first[i]):
        cands.append(i - 1)
    if int(g.dep[i]) >= 0:
        cands.append(int(g.dep[i]))
    if cands:
        return (r, max(cands, key=lambda j: float(end[r][j])))
    s = float(start[r][i])
    latest = (by_end or _ByEnd(end[r])).latest(s + TOL_US, i)
    return None if latest is None else (r, latest)


class _ByEnd:
    """A rank's events sorted by end once, so that "what ended last by time T" is one
    binary search (a scan of every event per question was quadratic in the streams: each
    stream's first event asks it)."""

    def __init__(self, end: np.ndarray) -> None:
        # By end; of equal ends the lowest index last, as ``argmax`` over them would pick it.
        self.order = np.lexsort((-np.arange(end.size), end))
        self.sorted_end = end[self.order]

    def latest(self, t: float, exclude: int) -> int | None:
        """The event that ended last by ``t`` (the lowest index of equals), other than ``exclude``."""
        j = int(np.searchsorted(self.sorted_end, t, side="right")) - 1
        if j >= 0 and int(self.order[j]) == exclude:
            j -= 1
        return int(self.order[j]) if j >= 0 else None


def _segments(
    path: list[tuple[int, int]],
    by_host: set[tuple[int, int]],
    start: Mapping[int, np.ndarray],
    end: Mapping[int, np.ndarray],
    t0_us: float,
    t1_us: float,
) -> list[dict[str, float | int]]:
    """Time-ordered segments: each event on the path covers the time from the end of the
    one before it on the path to its end -- from its own start when it started later and
    was not held by its rank's host (the idle time in between is nobody's work; the host's
    time is its rank's); consecutive pieces of one rank closer than a
    thousandth of the span are merged."""
    merge_us = max((t1_us - t0_us) / 1000.0, TOL_US)
    out: list[dict[str, float | int]] = []
    prev_end = -np.inf
    prev_rank = None
    for r, i in reversed(path):
        own = float(start[r][i]) if ((r, i) not in by_host or prev_rank != r) else -np.inf
        prev_rank = r
        s = max(own, prev_end, t0_us)
        e = min(float(end[r][i]), t1_us)
        prev_end = max(prev_end, float(end[r][i]))
        if e <= s:
            continue
        if out and out[-1]["rank"] == r and s - float(out[-1]["end_us"]) <= merge_us:
            out[-1]["end_us"] = max(float(out[-1]["end_us"]), e)
        else:
            out.append({"rank": r, "start_us": s, "end_us": e})
    return out


__all__ = ["critical_path"]

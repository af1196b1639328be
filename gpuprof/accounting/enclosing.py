"""Where one rank's lost time sits on the host: the op or annotation that encloses it.

For the lost time of a cause (``host``, ``sync``, ``other``), the host range that the
thread waited on sat in: the *outermost meaningful* op or annotation of that thread
covering each lost microsecond. Wrappers that only say
which phase it is (``## forward ##``, ``DistributedDataParallel.forward``, a bare
``forward``) are looked through to the range inside them; where nothing else covers the
time they are named themselves, as is a range lasting half a step or more (a phase, not
an op); what no range covers is ``(no op: Python)``. The thread is the one that
launched the kernel ending the gap (the busiest launching thread when that is unknown),
then, for what that one leaves, the busiest launching thread (a backward thread's gaps
while the main thread sits in the optimizer).

:func:`lost_by_op` gives the top enclosing ops of a cause's lost time, with, for ops of
few calls, the launch calls inside one call and the op inside it that holds most of the
lost time; :class:`OpIndex` indexes the host ranges once for the three causes
(``host``, ``sync``, ``other``) that :mod:`gpuprof.accounting.facts` asks about. Times in
microseconds on the trace's clock. Pure: the trace is only read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from gpuprof.accounting.rules.context import RuleContext
from gpuprof.model import intervals as iv
from gpuprof.model.grouping import by_start
from gpuprof.model.intervals import Intervals
from gpuprof.model.table import one_of
from gpuprof.model.timeline import Category, Columns, Kind

# Names that only say which phase the time is in: looked through to the op inside.
_WRAPPER = re.compile(
    r"^(## .* ##|DistributedDataParallel\.forward|FullyShardedDataParallel\.forward|forward|backward)$"
)
_PHASE = re.compile(r"^## .* ##$")
NO_OP = "(no op: Python)"
TOP_OPS = 5
# An enclosing range's op inside it is named when it holds this share of the range's lost
# time (looked for only in ranges with at most this many calls: optimizer steps, not aten
# ops called per layer).
INNER_MIN_SHARE = 0.25
# ... and when one of its calls is a long host op (not a per-layer op doing its usual work).
INNER_MIN_CALL_US = 1000.0
_INNER_MAX_CALLS = 50


def _host_cols(trace: Any) -> Columns:
    """The host table's columns of a :class:`RankTrace` (or of anything with a ``host``
    DataFrame)."""
    cols = getattr(trace, "host_cols", None)
    return cols if cols is not None else Columns.from_pandas(trace.host)


def _name_flag(host: Columns, pattern: re.Pattern[str]) -> npt.NDArray[np.bool_]:
    """Per host row: its name matches ``pattern`` (decided once per distinct name)."""
    cats = host.labels("name")
    if cats.size == 0:
        return np.zeros(len(host), dtype=bool)
    flag = np.array([bool(pattern.match(n)) for n in cats], dtype=bool)
    codes = host.codes("name")
    return (codes >= 0) & flag[np.maximum(codes, 0)]


def _measure_before(ivs: Intervals, t: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Length of ``ivs`` (normalized) inside ``(-inf, t)``."""
    s, e = ivs
    if s.size == 0:
        return np.zeros_like(t)
    cum = np.concatenate(([0.0], np.cumsum(e - s)))
    i = np.searchsorted(s, t, side="right") - 1
    ok = i >= 0
    j = np.maximum(i, 0)
    inside = np.clip(t - s[j], 0.0, e[j] - s[j])
    return np.where(ok, cum[j] + inside, 0.0)


def _measure_between(
    ivs: Intervals, a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """``_measure_before(ivs, b) - _measure_before(ivs, a)``: the length of ``ivs`` inside
    each ``[a, b)``, with the prefix sums made once for both ends (the same arithmetic)."""
    s, e = ivs
    if s.size == 0:
        return np.zeros_like(b) - np.zeros_like(a)
    cum = np.concatenate(([0.0], np.cumsum(e - s)))
    length = e - s

    def before(t: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        i = np.searchsorted(s, t, side="right") - 1
        j = np.maximum(i, 0)
        inside = np.clip(t - s[j], 0.0, length[j])
        return np.where(i >= 0, cum[j] + inside, 0.0)

    return before(b) - before(a)


def _outer(s: npt.NDArray[np.float64], e: npt.NDArray[np.float64]) -> npt.NDArray[np.bool_]:
    """Mask of the ranges not nested in another (earlier start, or same start and longer)."""
    order = by_start(s, -e)  # np.lexsort((-e, s)), the rows being sorted by start already
    prev_end = np.maximum.accumulate(np.concatenate(([-np.inf], e[order][:-1])))
    out = np.zeros(s.size, dtype=bool)
    out[order] = s[order] >= prev_end
    return out


def _outer_segments(
    s: npt.NDArray[np.float64], e: npt.NDArray[np.float64], seg: npt.NDArray[np.int64]
) -> npt.NDArray[np.bool_]:
    """:func:`_outer` within each segment (``seg``: a segment number per range), in one
    pass. The running maximum of the ends restarts per segment by ranking the ends and
    offsetting each segment's ranks above the ones before, which keeps the ends exact."""
    out = np.zeros(s.size, dtype=bool)
    if s.size == 0:
        return out
    order = np.lexsort((-e, s, seg))
    so, eo, go = s[order], e[order], seg[order].astype(np.int64)
    ends, rank = np.unique(eo, return_inverse=True)
    m = ends.size
    base = go * m
    run = np.maximum.accumulate(base + rank.reshape(-1))
    prev = np.concatenate(([-1], run[:-1]))
    same = prev >= base  # an earlier range of the same segment exists
    prev_end = np.where(same, ends[np.clip(prev - base, 0, m - 1)], -np.inf)
    out[order] = so >= prev_end
    return out


class _ByThread:
    """Host rows (a subset) sorted by thread, then start (ties in row order), for finding
    each thread's rows that start inside given ranges."""

    def __init__(
        self, rows: npt.NDArray[np.int64], hs: npt.NDArray[np.float64], htid: npt.NDArray[Any]
    ) -> None:
        order = np.lexsort((hs[rows], htid[rows]))
        self.rows = rows[order]
        self.start_us = hs[self.rows]
        tids = htid[self.rows]
        # Sorted by thread: each thread's rows are one run.
        self.first = np.flatnonzero(np.concatenate(([True], tids[1:] != tids[:-1]))) if tids.size else np.empty(0, np.intp)
        self.tids = tids[self.first]
        self.last = np.concatenate((self.first[1:], [tids.size])).astype(np.int64)

    def spans(
        self, tid: npt.NDArray[Any], lo_us: npt.NDArray[np.float64], hi_us: npt.NDArray[np.float64]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Per query, positions ``[a, b)`` into :attr:`rows` of the rows of thread ``tid``
        starting in ``[lo_us, hi_us]`` (``b < a`` when ``hi_us < lo_us``)."""
        a = np.zeros(tid.size, dtype=np.int64)
        b = np.zeros(tid.size, dtype=np.int64)
        # Mostly one thread: no need to find the distinct ones.
        threads = tid[:1] if tid.size and bool((tid == tid[0]).all()) else np.unique(tid)
        for t in threads:
            q = np.flatnonzero(tid == t)
            g = int(np.searchsorted(self.tids, t))
            if g >= self.tids.size or self.tids[g] != t:
                continue
            lo, hi = int(self.first[g]), int(self.last[g])
            starts = self.start_us[lo:hi]
            a[q] = lo + np.searchsorted(starts, lo_us[q], "left")
            b[q] = lo + np.searchsorted(starts, hi_us[q], "right")
        return a, b


def _main_tid(ctx: RuleContext) -> int:
    tids = ctx.launches.tid[ctx.act & (ctx.launches.tid >= 0)]
    if tids.size == 0:
        return -1
    vals, counts = np.unique(tids, return_counts=True)
    return int(vals[np.argmax(counts)])


class OpIndex:
    """One rank's host ranges, indexed once for :func:`lost_by_op` (called once per cause):
    per thread and layer, the outermost ranges and their union do not depend on the lost
    time, so they are found once, not once per cause and gap thread."""

    def __init__(self, ctx: RuleContext) -> None:
        host = ctx.trace.host_cols
        self.hs, self.he = host["start_us"], host["end_us"]
        self.htid = host["tid"]
        self.ranges = (
            one_of(host["kind"], (int(Kind.OP), int(Kind.ANNOTATION)))
            & ~one_of(host["category"], (int(Category.STEP), int(Category.LAUNCH)))
            & (self.he > ctx.lo_us)
            & (self.hs < ctx.hi_us)
        )
        self.codes = host.codes("name")
        self.cats = host.labels("name")
        self.is_phase = _name_flag(host, _PHASE)
        self.is_wrap = _name_flag(host, _WRAPPER)
        self.main = _main_tid(ctx)
        self.few = _FewCalls(ctx, self)
        self._layers: dict[tuple[int, float], list[_Layer]] = {}

    def layers(self, tid: int, phase_us: float) -> list[_Layer]:
        """The non-empty layers of thread ``tid``'s ranges, most specific first (ranges, then
        wrappers and phase-long ranges, then phase annotations): each one's outermost
        ranges, their name codes (unnamed: the last code) and their union."""
        key = (tid, phase_us)
        got = self._layers.get(key)
        if got is not None:
            return got
        hs, he = self.hs, self.he
        out: list[_Layer] = []
        rows = np.flatnonzero(self.ranges & (self.htid == tid))
        if rows.size:
            phase = self.is_phase[rows]
            wrap = phase | self.is_wrap[rows] | (he[rows] - hs[rows] >= phase_us)
            for layer in (~wrap, wrap & ~phase, phase):
                sel = rows[layer]
                if sel.size == 0:
                    continue
                sel = sel[_outer(hs[sel], he[sel])]
                c = np.where(self.codes[sel] >= 0, self.codes[sel], self.cats.size)
                out.append(_Layer(hs[sel], he[sel], c, iv.union(hs[sel], he[sel])))
        self._layers[key] = out
        return out


class _Layer(NamedTuple):
    start_us: npt.NDArray[np.float64]
    end_us: npt.NDArray[np.float64]
    code: npt.NDArray[np.int64]
    cover: Intervals


@dataclass(frozen=True)
class OpLoss:
    """One enclosing op of a cause's lost time (:func:`lost_by_op`): its name (or
    :data:`NO_OP`), the lost time under it, µs, and per step (``None`` without steps), and
    how many of its ranges hold some. For ops of few calls, the launch calls inside one call
    (mean; ``None``: not looked at) and the op directly inside it holding most of that lost
    time, that op's lost time and its longest call, µs (``None``: none stands out)."""

    op: str
    lost_us: float
    lost_us_per_step: float | None
    calls: int
    launches_per_call: float | None = None
    inner_op: str | None = None
    inner_lost_us: float | None = None
    inner_longest_us: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """As a plain dict; the few-call keys only where known."""
        out: dict[str, Any] = {
            "op": self.op,
            "lost_us": self.lost_us,
            "lost_us_per_step": self.lost_us_per_step,
            "calls": self.calls,
        }
        if self.launches_per_call is not None:
            out["launches_per_call"] = self.launches_per_call
        if self.inner_op is not None:
            out["inner_op"] = self.inner_op
            out["inner_lost_us"] = self.inner_lost_us
            out["inner_longest_us"] = self.inner_longest_us
        return out


def lost_by_op(
    ctx: RuleContext, lost: Intervals, per_step: int | None, index: OpIndex | None = None
) -> list[OpLoss]:
    """The top :data:`TOP_OPS` enclosing ops of ``lost`` (normalized), as :class:`OpLoss`:
    for ops with few calls also ``launches_per_call`` and the ``inner_*`` fields of
    :meth:`_FewCalls.inner`. ``index``: an :class:`OpIndex` of ``ctx`` to share between
    calls."""
    total = iv.total(lost)
    if total <= 0:
        return []
    ix = index if index is not None else OpIndex(ctx)
    cats = ix.cats
    g = ctx.gaps
    main = ix.main
    gtid = np.where(g.tid >= 0, g.tid, main)
    lost_by_code = np.zeros(cats.size + 1)
    calls_by_code = np.zeros(cats.size + 1)
    # A range as long as half a step (or window) only says which phase it is, like a wrapper.
    steps = per_step or 1
    phase_us = 0.5 * (ctx.hi_us - ctx.lo_us) / steps
    covered = 0.0
    for tid in np.unique(gtid):
        own = gtid == tid
        mine = iv.intersect(lost, iv.normalize((g.start_us[own], g.end_us[own])))
        # What the last layer covered is taken off only when looked at again.
        pending: Intervals | None = None
        # The gap's own thread first; what it leaves, the busiest launching thread.
        for t in dict.fromkeys((int(tid), main)):
            # Layers, most specific first; each names only what the ones before left.
            for layer in ix.layers(t, phase_us):
                if pending is not None:
                    mine = iv.subtract(mine, pending)
                    pending = None
                if mine[0].size == 0:
                    break
                got = _measure_between(mine, layer.start_us, layer.end_us)
                np.add.at(lost_by_code, layer.code, got)
                np.add.at(calls_by_code, layer.code, (got > 0).astype(float))
                covered += float(got.sum())
                pending = layer.cover
    by_name: dict[str, list[float]] = {
        (str(cats[int(k)]) if k < cats.size else "?"): [float(lost_by_code[k]), float(calls_by_code[k])]
        for k in np.flatnonzero(lost_by_code > 0)
    }
    if total - covered > 0.5:
        by_name[NO_OP] = [total - covered, 0.0]
    top = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:TOP_OPS]
    out = []
    few = ix.few
    for n, (us, n_calls) in top:
        per = us / per_step if per_step else None
        if n != NO_OP and n_calls <= _INNER_MAX_CALLS:
            # What does not depend on the lost time is found once per name (the same op
            # often tops the host, sync and other time alike).
            launches, children = few.of_name(n)
            inner = few.inner_of(lost, children, us)
            out.append(
                OpLoss(
                    op=n,
                    lost_us=us,
                    lost_us_per_step=per,
                    calls=int(n_calls),
                    launches_per_call=launches,
                    inner_op=inner.get("inner_op"),
                    inner_lost_us=inner.get("inner_lost_us"),
                    inner_longest_us=inner.get("inner_longest_us"),
                )
            )
        else:
            out.append(OpLoss(op=n, lost_us=us, lost_us_per_step=per, calls=int(n_calls)))
    return out


class _FewCalls:
    """The window's ranges of one name and what lies inside them, for the few-call ops of
    :func:`lost_by_op`. The host's launch calls and ops are grouped by thread once, so each
    name costs a few vectorized passes, not a loop over its calls."""

    def __init__(self, ctx: RuleContext, ix: OpIndex) -> None:
        host = _host_cols(ctx.trace)
        self.hs, self.he, self.htid = ix.hs, ix.he, ix.htid
        self.codes = ix.codes
        self.cats = np.asarray(ix.cats, dtype=object)
        self.win = (self.he > ctx.lo_us) & (self.hs < ctx.hi_us)
        self.kind = host["kind"]
        self.category = host["category"]
        self._launch: _ByThread | None = None
        self._ops: _ByThread | None = None
        self._by_name: dict[str, tuple[float | None, npt.NDArray[np.int64]]] = {}

    def of_name(self, name: str) -> tuple[float | None, npt.NDArray[np.int64]]:
        """:meth:`launches_per_call` and :meth:`children` of the window's rows ``name``."""
        got = self._by_name.get(name)
        if got is None:
            parents = self.parents(name)
            got = self._by_name[name] = (self.launches_per_call(parents), self.children(parents))
        return got

    def parents(self, name: str) -> npt.NDArray[np.int64]:
        """The window's rows called ``name``, in row order."""
        idx = np.flatnonzero(self.cats == name)
        same = (self.codes == idx[0]) if idx.size == 1 else np.isin(self.codes, idx)
        return np.flatnonzero(same & self.win)

    def launches_per_call(self, parents: npt.NDArray[np.int64]) -> float | None:
        """Mean launch calls (kernels, copies, memsets) of the parent's thread starting
        inside one of ``parents``; ``None`` when there is none."""
        if parents.size == 0:
            return None
        if self._launch is None:
            self._launch = _ByThread(
                np.flatnonzero(self.category == int(Category.LAUNCH)), self.hs, self.htid
            )
        a, b = self._launch.spans(self.htid[parents], self.hs[parents], self.he[parents])
        n = int(np.maximum(b - a, 0).sum())
        return n / parents.size

    def inner(self, lost: Intervals, parents: npt.NDArray[np.int64], lost_us: float) -> dict[str, Any]:
        """The op directly inside ``parents`` that holds most of their lost time, when it
        holds at least :data:`INNER_MIN_SHARE` of it and has a call of at least
        :data:`INNER_MIN_CALL_US` (wrappers skipped): ``inner_op``, ``inner_lost_us`` and
        ``inner_longest_us`` (its longest single call on the host)."""
        return self.inner_of(lost, self.children(parents), lost_us)

    def children(self, parents: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The ops directly inside ``parents`` (on the parent's thread; wrappers included):
        what :meth:`inner` looks at, which does not depend on the lost time."""
        if parents.size == 0:
            return parents
        hs, he = self.hs, self.he
        if self._ops is None:
            self._ops = _ByThread(np.flatnonzero(self.kind == int(Kind.OP)), hs, self.htid)
        a, b = self._ops.spans(self.htid[parents], hs[parents], he[parents])
        # Per parent (in row order) the ops of its thread starting inside it, as one array.
        lens = np.maximum(b - a, 0)
        total = int(lens.sum())
        if total == 0:
            return np.zeros(0, dtype=np.int64)
        seg = np.repeat(np.arange(parents.size, dtype=np.int64), lens)
        pos = np.repeat(a - np.concatenate(([0], np.cumsum(lens)[:-1])), lens) + np.arange(total)
        cand = self._ops.rows[pos]
        par = parents[seg]
        keep = (he[cand] <= he[par]) & (cand != par)
        cand, seg = cand[keep], seg[keep]
        return cand[_outer_segments(hs[cand], he[cand], seg)]  # type: ignore[no-any-return]

    def inner_of(self, lost: Intervals, rows: npt.NDArray[np.int64], lost_us: float) -> dict[str, Any]:
        """:meth:`inner` given the :meth:`children` of the parents."""
        if rows.size == 0:
            return {}
        hs, he = self.hs, self.he
        got = _measure_between(lost, hs[rows], he[rows])
        pos_rows = got > 0
        r, g = rows[pos_rows], got[pos_rows]
        if r.size == 0:
            return {}
        # Per name, in order of first appearance (ties go to the first, as before), summed
        # in row order so that the floats match a plain loop.
        code = self.codes[r]
        uniq, first, slot = np.unique(code, return_index=True, return_inverse=True)
        rank = np.empty(uniq.size, dtype=np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(uniq.size)
        slot = rank[slot.reshape(-1)]
        uniq = uniq[np.argsort(first, kind="stable")]
        lost_sum = np.zeros(uniq.size)
        np.add.at(lost_sum, slot, g)
        longest = np.zeros(uniq.size)
        np.maximum.at(longest, slot, he[r] - hs[r])
        cat_values = self.cats
        best = [
            (str(cat_values[int(c)]) if c >= 0 else str(np.nan), float(us), float(lg))
            for c, us, lg in zip(uniq.tolist(), lost_sum.tolist(), longest.tolist())
        ]
        named = [x for x in best if not _WRAPPER.match(x[0]) and x[2] >= INNER_MIN_CALL_US]
        if not named:
            return {}
        op, us, longest_us = max(named, key=lambda x: x[1])
        if us < INNER_MIN_SHARE * lost_us:
            return {}
        return {"inner_op": op, "inner_lost_us": min(us, lost_us), "inner_longest_us": longest_us}


__all__ = ["NO_OP", "OpIndex", "OpLoss", "lost_by_op"]

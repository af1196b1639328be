"""What every local rule gets: the window, its compute/lost partition and the gap analysis.

The gap analysis is what lets the host-side rules tell *why* the device idled. A *gap* is a
maximal lost interval ``[g0, g1)`` (no compute kernel running). The compute kernel that ends
it was launched by a host call; matched by correlation id (:mod:`gpuprof.accounting.launches`):

* launched too late to start by the gap's beginning (its launch call returned after
  ``g0 - LAUNCH_QUEUE_US``): the device was **waiting for the host** from ``g0`` until the
  launch call returned (plus :data:`LAUNCH_SLACK_US` for the launch to
  reach the device). That part is the gap's *host-wait* part; what the launching thread was
  doing in it (DataLoader, a sync, an allocator call, or plain Python) decides the cause;
* launched earlier: the kernel was already queued, so the device waited for
  something else (an event on another stream, a copy, a collective, the device's own
  scheduling). That is :attr:`RuleContext.queued`, never claimed as host;
* no compute follows in the trace: the host issued no more compute, so it is host-wait
  (on any thread);
* in every case, if the first other activity in the gap (a collective, a copy) was itself
  launched after the gap began, the device waited for the host at least until that launch:
  a queued kernel waiting on a late-launched collective is still waiting on the host;
* launch unknown (no correlation ids, or the call is not in the trace): the gap is in
  :attr:`RuleContext.unknown_launch`; host-activity rules may still claim it (looking at
  every thread), ``host`` does not.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpuprof.accounting.launches import Launches, activity_mask
from gpuprof.model import intervals as iv
from gpuprof.model.intervals import Intervals
from gpuprof.model.table import one_of
from gpuprof.model.timeline import Category, RankTrace

# A kernel starts on the device a few microseconds after its launch call returns; the gap
# up to that point still counts as waiting for the host. Beyond this, the kernel was held
# back by something else after it was launched.
LAUNCH_SLACK_US = 50.0
# A launched kernel reaches the device at the earliest this long after its launch call
# returns: a gap that begins before that was waiting for the launch, even though the call
# had started before the gap.
LAUNCH_QUEUE_US = 5.0


@dataclass(frozen=True)
class Gaps:
    """Per gap (sorted, one entry per maximal lost interval), in microseconds.

    ``host_wait_end_us``: end of the gap's host-wait part, NaN when it has none (the next
    kernel was queued, or its launch is unknown); the part is ``[start_us, host_wait_end_us)``.
    ``unknown``: the launch of the kernel ending the gap is unknown. ``tid``: host thread of
    that launch, -1 when unknown or when no kernel follows (then every thread counts).
    """

    start_us: npt.NDArray[np.float64]
    end_us: npt.NDArray[np.float64]
    host_wait_end_us: npt.NDArray[np.float64]
    unknown: npt.NDArray[np.bool_]
    tid: npt.NDArray[np.int64]


@dataclass(frozen=True)
class TraceColumns:
    """The trace columns the rules read over and over, as numpy arrays read once per rank.

    Reading a DataFrame column costs tens of microseconds; the rules ask for the same few
    hundreds of times per rank. Times in microseconds; categories as ``Category`` ints.
    The arrays are shared: never modify them in place.
    """

    host_start_us: npt.NDArray[np.float64]
    host_end_us: npt.NDArray[np.float64]
    host_category: npt.NDArray[np.int64]
    dev_start_us: npt.NDArray[np.float64]
    dev_end_us: npt.NDArray[np.float64]
    dev_category: npt.NDArray[np.int64]

    @classmethod
    def of(cls, trace: RankTrace) -> TraceColumns:
        host, dev = trace.host_cols, trace.device_cols
        return cls(
            host_start_us=host["start_us"],
            host_end_us=host["end_us"],
            host_category=host["category"],
            dev_start_us=dev["start_us"],
            dev_end_us=dev["end_us"],
            dev_category=dev["category"],
        )


@dataclass(frozen=True)
class RuleContext:
    """Inputs of every local rule (read-only). Times in microseconds on the trace's clock.

    ``act`` marks the rows of ``trace.device`` that are device work; ``lost`` is normalized
    and ``gaps`` describes each of its intervals; ``host_wait``, ``queued`` and
    ``unknown_launch`` split the lost time as in the module docstring (no two overlap).
    ``[lo_us, hi_us)`` are the window's outer bounds; ``window_iv``, when set, is the
    window itself (its steps, with the time between them left out), ``None`` meaning all
    of ``[lo_us, hi_us)``. Clip to the window with :meth:`clip`.
    """

    trace: RankTrace
    lo_us: float
    hi_us: float
    compute: Intervals
    lost: Intervals
    launches: Launches
    act: npt.NDArray[np.bool_]
    gaps: Gaps
    host_wait: Intervals
    queued: Intervals
    unknown_launch: Intervals
    cols: TraceColumns
    window_iv: Intervals | None = None

    @property
    def window_us(self) -> float:
        """Time inside the window, microseconds."""
        return iv.total(self.window_iv) if self.window_iv is not None else self.hi_us - self.lo_us

    @property
    def window_starts_us(self) -> npt.NDArray[np.float64]:
        """Where each part of the window begins (only ``lo_us`` when contiguous)."""
        return self.window_iv[0] if self.window_iv is not None else np.array([self.lo_us])

    def clip(self, ivs: Intervals) -> Intervals:
        """``ivs`` restricted to the window (normalized only when the window has gaps)."""
        out = iv.clip(ivs, self.lo_us, self.hi_us)
        return iv.intersect(out, self.window_iv) if self.window_iv is not None else out

    def device_rows(self, *categories: Category) -> Intervals:
        """Device work intervals of the given categories (unclipped, not normalized)."""
        cols = self.cols
        sel = self.act & one_of(cols.dev_category, [int(c) for c in categories])
        return cols.dev_start_us[sel], cols.dev_end_us[sel]

    def host_mask(self, *categories: Category) -> npt.NDArray[np.bool_]:
        """Host rows of the given categories overlapping the window (any thread)."""
        cols = self.cols
        s = cols.host_start_us
        e = cols.host_end_us
        return (
            one_of(cols.host_category, [int(c) for c in categories])
            & (e > self.lo_us)
            & (s < self.hi_us)
        )

    def host_rows(self, *categories: Category) -> Intervals:
        """Host call intervals of the given categories overlapping the window (any thread)."""
        sel = self.host_mask(*categories)
        return self.cols.host_start_us[sel], self.cols.host_end_us[sel]


def _split(
    g0: npt.NDArray[np.float64],
    g1: npt.NDArray[np.float64],
    hw_end: npt.NDArray[np.float64],
    unknown: npt.NDArray[np.bool_],
) -> tuple[Intervals, Intervals, Intervals]:
    has_hw = ~np.isnan(hw_end) & (hw_end > g0)
    host_wait = iv.make(g0[has_hw], hw_end[has_hw])
    q_start = np.where(has_hw, np.nan_to_num(hw_end, nan=0.0), g0)
    queued = iv.make(q_start[~unknown], g1[~unknown])
    return host_wait, queued, iv.make(g0[unknown], g1[unknown])


def _first_activity_wait(
    dev_start_us: npt.NDArray[np.float64],
    rows: npt.NDArray[np.bool_],
    launches: Launches,
    g0: npt.NDArray[np.float64],
    g1: npt.NDArray[np.float64],
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """Per gap, for the first non-compute activity starting in it: the end of the wait for
    its late launch (NaN: none, or launched before the gap), its launch thread, and whether
    its launch is known."""
    n = g0.size
    end = np.full(n, np.nan)
    tid = np.full(n, -1, dtype=np.int64)
    known = np.zeros(n, dtype=bool)
    s = dev_start_us[rows]
    if s.size == 0 or n == 0:
        return end, tid, known
    ls, le, lt = launches.start_us[rows], launches.end_us[rows], launches.tid[rows]
    order = np.argsort(s, kind="stable")
    s, ls, le, lt = s[order], ls[order], le[order], lt[order]
    i = np.searchsorted(s, g0, side="left")
    inside = i < s.size
    j = np.minimum(i, s.size - 1)
    inside &= s[j] < g1
    known = inside & ~np.isnan(ls[j])
    late = known & (np.maximum(le[j], ls[j]) + LAUNCH_QUEUE_US > g0)
    end[late] = np.minimum(s[j][late], np.maximum(le[j][late], ls[j][late]) + LAUNCH_SLACK_US)
    tid[late] = lt[j][late]
    return end, tid, known


def build_context(
    trace: RankTrace,
    lo_us: float,
    hi_us: float,
    compute: Intervals,
    lost: Intervals,
    launches: Launches,
    window_iv: Intervals | None = None,
) -> RuleContext:
    """The rules' context; ``window_iv`` is the window when it leaves time between steps out
    (``compute`` and ``lost`` must then partition it)."""
    cols = TraceColumns.of(trace)
    act = activity_mask(trace.device_cols)
    g0, g1 = iv.normalize(lost)
    is_comp = act & (cols.dev_category == int(Category.COMPUTE))
    cs = cols.dev_start_us[is_comp]
    ls = launches.start_us[is_comp]
    le = launches.end_us[is_comp]
    lt = launches.tid[is_comp]
    correlated = launches.matched_share is not None and launches.matched_share >= 0.5
    hw_end = np.full(g0.size, np.nan)
    tid = np.full(g0.size, -1, dtype=np.int64)
    unknown = np.zeros(g0.size, dtype=bool)
    if not correlated:
        unknown[:] = True
    elif g0.size:
        # Kernels by start, and among equal starts the earliest launch first.
        order = np.lexsort((np.where(np.isnan(ls), np.inf, ls), cs))
        cs_o, ls_o, le_o, lt_o = cs[order], ls[order], le[order], lt[order]
        nxt = np.searchsorted(cs_o, g1, side="left")
        has_next = nxt < cs_o.size
        j = np.minimum(nxt, max(cs_o.size - 1, 0))
        if cs_o.size:
            lstart = np.where(has_next, ls_o[j], np.nan)
            lend = np.where(has_next, le_o[j], np.nan)
            tid = np.where(has_next, lt_o[j], -1)
        else:
            lstart = lend = np.full(g0.size, np.nan)
        unknown = has_next & np.isnan(lstart)
        # Late: the kernel could not have reached the device before the gap began.
        late = has_next & ~unknown & (np.maximum(lend, lstart) + LAUNCH_QUEUE_US > g0)
        hw_end[late] = np.minimum(g1[late], np.maximum(lend[late], lstart[late]) + LAUNCH_SLACK_US)
        hw_end[~has_next] = g1[~has_next]
        # The device may also have waited for a late launch of other work inside the gap
        # (a collective or copy the queued kernel depends on): the gap's first activity.
        first_end, first_tid, first_known = _first_activity_wait(cols.dev_start_us, act & ~is_comp, launches, g0, g1)
        better = ~np.isnan(first_end) & ~(first_end <= hw_end)  # hw_end NaN compares False
        hw_end = np.where(better, first_end, hw_end)
        tid = np.where(better, first_tid, tid)  # the thread whose late launch the device waited on
        unknown &= ~first_known
    gaps = Gaps(g0, g1, hw_end, unknown, tid)
    host_wait, queued, unknown_launch = _split(g0, g1, hw_end, unknown)
    return RuleContext(
        trace=trace,
        lo_us=lo_us,
        hi_us=hi_us,
        compute=compute,
        lost=(g0, g1),
        launches=launches,
        act=act,
        gaps=gaps,
        host_wait=host_wait,
        queued=queued,
        unknown_launch=unknown_launch,
        cols=cols,
        window_iv=window_iv,
    )

"""Rules that explain a gap by what the host was doing while the device waited for it.

They only claim a gap's host-wait part (the device was waiting for a late launch) or a gap
whose launch is unknown, so a kernel that was already queued -- the device waiting on
another stream's event, say -- is never blamed on the host. They look at the thread that
launched the kernel ending the gap (every thread when that is unknown): a background
thread's ``cudaEventSynchronize`` does not explain why the main thread launched late.

Two ways a host call explains device idle time:

* *during*: the thread was inside the call (DataLoader ``__next__``, ``cudaMalloc``) while
  the device waited for its next kernel;
* *drain*: the device ran out of work *while* the thread was blocked in a call that waits
  for the device (``cudaStreamSynchronize``, ``aten::item``, ``cudaFree``). The sync
  emptied the queue, so the device idles until the call returns and the host has issued
  compute again. Without the call the host would have gone on as soon as it made it, so
  its next launch would come earlier by the call's length: that much of the gap (plus
  :data:`DRAIN_RELAUNCH_US` for the loop to reach its launch) is the sync's doing -- the
  same time the ``no_sync`` what-if recovers (:mod:`gpuprof.job.whatifs`). Host work
  after the sync that is longer than the device work the sync waited for (scoring rewards
  in Python, logging) would starve the device with or without the sync: that remainder
  stays with what the host was doing (``host``, ``dataloader``, ...).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpuprof.accounting.rules.context import RuleContext
from gpuprof.model import intervals as iv
from gpuprof.model.intervals import Intervals
from gpuprof.model.table import one_of
from gpuprof.model.timeline import Category, Kind

# After a draining call returns, this much of the device's further wait for the next launch
# still counts as the call's cost (relaunching after a sync); the rest is the host's.
DRAIN_RELAUNCH_US = 200.0

# A launching thread that sits this long inside one host op (or annotation) without issuing
# any launch, while the device idles with its next kernel queued, is what the device waits on.
QUIET_HOST_MIN_US = 1000.0

# Allocator calls that synchronize the device (the drain rule applies to them).
_SYNCING_ALLOC_WORDS: tuple[str, ...] = ("Free", "empty_cache", "emptyCache", "Release", "Unmap")


def _concat(parts: list[Intervals]) -> Intervals:
    if not parts:
        return iv.empty()
    return iv.union(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))


def _per_thread(ctx: RuleContext, calls: npt.NDArray[np.bool_], drain: bool) -> Intervals:
    """Claims from the host rows in ``calls`` (a mask over ``trace.host``), thread by thread."""
    g = ctx.gaps
    host = ctx.trace.host_cols
    if g.start_us.size == 0 or not calls.any():
        return iv.empty()
    hs, he, htid = host["start_us"], host["end_us"], host["tid"]
    # The part of each gap host activity may explain, and for drain the host-wait part only.
    known_end = ~np.isnan(g.host_wait_end_us)
    part_end = np.where(known_end, g.host_wait_end_us, np.where(g.unknown, g.end_us, np.nan))
    usable = ~np.isnan(part_end)
    if drain:
        # The window's start (or a step's start after left-out time) is not a drain.
        usable &= known_end & ~np.isin(g.start_us, ctx.window_starts_us)
    out: list[Intervals] = []
    for tid in np.unique(g.tid[usable]):
        sel_gap = usable & (g.tid == tid)
        sel_call = calls & (htid == tid) if tid >= 0 else calls
        if not sel_call.any():
            continue
        g0, pe = g.start_us[sel_gap], part_end[sel_gap]
        if not drain:
            out.append(iv.intersect(iv.make(g0, pe), (hs[sel_call], he[sel_call])))
            continue
        cs, ce = iv.union(hs[sel_call], he[sel_call])
        if cs.size == 0:
            continue
        i = np.searchsorted(cs, g0, side="right") - 1  # last merged call starting at or before g0
        call_start = cs[np.maximum(i, 0)]
        call_end = ce[np.maximum(i, 0)]
        inside = (i >= 0) & (call_end >= g0)
        # Without the blocking call the host would have gone on that much earlier, so the
        # next launch comes that much sooner: the gap shrinks by up to the call's length.
        end = np.minimum(pe, g0 + (call_end - call_start) + DRAIN_RELAUNCH_US)
        out.append(iv.make(g0[inside], end[inside]))
    return _concat(out)


def syncing_alloc_mask(ctx: RuleContext, alloc: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
    """Allocator rows that synchronize the device (decided per distinct name)."""
    cats = ctx.trace.host_cols.labels("name")
    if cats.size == 0:
        return alloc & False
    flag = np.array([any(w in n for w in _SYNCING_ALLOC_WORDS) for n in cats], dtype=bool)
    codes = ctx.trace.host_cols.codes("name")
    return alloc & (codes >= 0) & flag[np.maximum(codes, 0)]


def allocator(ctx: RuleContext) -> Intervals:
    """Device memory allocation and release calls the device waited on (memory)."""
    alloc = ctx.host_mask(Category.ALLOC)
    during = _per_thread(ctx, alloc, drain=False)
    drained = _per_thread(ctx, syncing_alloc_mask(ctx, alloc), drain=True)
    return _concat([during, drained])


def dataloader(ctx: RuleContext) -> Intervals:
    """The host was fetching the next batch (``enumerate(DataLoader)#...__next__``)."""
    return _per_thread(ctx, ctx.host_mask(Category.DATALOAD), drain=False)


def sync(ctx: RuleContext) -> Intervals:
    """The host blocked on the device (or had just been), see the module docstring."""
    calls = ctx.host_mask(Category.SYNC)
    return _concat([_per_thread(ctx, calls, drain=False), _per_thread(ctx, calls, drain=True)])


def _launch_calls(ctx: RuleContext) -> npt.NDArray[np.bool_]:
    """Host rows that launched device activity present in the trace (matched by correlation)."""
    host, dev = ctx.trace.host_cols, ctx.trace.device_cols
    corr = dev["correlation"][ctx.act]
    hc = host["correlation"]
    kinds = host["kind"]
    api = one_of(kinds, (int(Kind.RUNTIME), int(Kind.DRIVER))) & (hc >= 0)
    return api & np.isin(hc, corr[corr >= 0])


def _quiet_busy(ctx: RuleContext, tid: int, launch: npt.NDArray[np.bool_]) -> Intervals:
    """Where thread ``tid`` sat inside a host op or annotation (not a step or phase marker)
    and issued no launch for at least :data:`QUIET_HOST_MIN_US`."""
    host = ctx.trace.host_cols
    hs, he, htid = host["start_us"], host["end_us"], host["tid"]
    mine = htid == tid
    ls, le = hs[launch & mine], he[launch & mine]
    order = np.argsort(ls, kind="stable")
    ls, le = ls[order], np.maximum.accumulate(le[order]) if le.size else le
    q0 = np.r_[-np.inf, le]
    q1 = np.r_[ls, np.inf]
    long = (q1 - q0) >= QUIET_HOST_MIN_US
    quiet = iv.clip(iv.make(q0[long], q1[long]), ctx.lo_us, ctx.hi_us)
    ranges = (
        mine
        & one_of(host["kind"], (int(Kind.OP), int(Kind.ANNOTATION)))
        & (host["category"] != int(Category.STEP))
        & (he > ctx.lo_us)
        & (hs < ctx.hi_us)
    )
    # Phase markers (``## backward ##``) say where the loop is, not that the thread is busy:
    # during backward the main thread waits while the autograd thread launches.
    ranges &= ~_phase_mask(ctx)
    return iv.intersect(iv.normalize(quiet), iv.union(hs[ranges], he[ranges]))


def _phase_mask(ctx: RuleContext) -> npt.NDArray[np.bool_]:
    """Host rows named like a phase marker, ``## ... ##``."""
    host = ctx.trace.host_cols
    cats = host.labels("name")
    if cats.size == 0:
        return np.zeros(len(host), dtype=bool)
    flag = np.array([n.startswith("## ") and n.endswith(" ##") for n in cats], dtype=bool)
    codes = host.codes("name")
    return (codes >= 0) & flag[np.maximum(codes, 0)]


def blocked_host(ctx: RuleContext) -> Intervals:
    """Queued gaps (the next kernel had been launched, yet the device sat idle with nothing
    else running) during which a launching thread was inside a host op for a long stretch
    without issuing any launch: the device waited on work that thread had not issued yet
    (an event, a collective, or kernels a sampled trace left out). Short queued gaps stay
    ``other`` (device-side scheduling, cross-stream event latency)."""
    if ctx.queued[0].size == 0:
        return iv.empty()
    launch = _launch_calls(ctx)
    tids = np.unique(ctx.trace.host_cols["tid"][launch])
    parts = [_quiet_busy(ctx, int(t), launch) for t in tids]
    got_s, got_e = iv.intersect(iv.normalize(ctx.queued), _concat(parts))
    long = (got_e - got_s) >= QUIET_HOST_MIN_US
    return got_s[long], got_e[long]


def late_launch(ctx: RuleContext) -> Intervals:
    """Whatever remains of the device waiting for a launch: Python and framework overhead,
    launch latency, many tiny kernels (host)."""
    return ctx.host_wait

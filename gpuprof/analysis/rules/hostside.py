"""Rules that explain a gap by what the host was doing while the device waited for it.

They only claim inside :meth:`RuleContext.host_parts_of_gaps` (the device was waiting for
the host, or the launch is unknown), so a kernel that was already queued -- the device
waiting on another stream's event, say -- is never blamed on the host.

Two ways a host call explains device idle time:

* *during*: the host was inside the call (DataLoader ``__next__``, ``cudaMalloc``) while
  the device waited for its next kernel;
* *drain*: the device ran out of work *while* the host was blocked in a call that waits
  for the device (``cudaStreamSynchronize``, ``aten::item``, ``cudaFree``). The sync
  emptied the queue, so the whole wait that follows -- until the host has issued compute
  again -- is the sync's doing; without it the host would have been ahead. Parts of that
  wait where the host does something more specific (DataLoader, allocator) still go to
  that cause, by precedence.
"""

from __future__ import annotations

import numpy as np

from gpuprof.analysis import intervals as iv
from gpuprof.analysis.intervals import Intervals
from gpuprof.analysis.rules.context import RuleContext
from gpuprof.model.timeline import Category

# Allocator calls that synchronize the device (the drain rule applies to them).
_SYNCING_ALLOC_WORDS: tuple[str, ...] = ("Free", "empty_cache", "emptyCache", "Release", "Unmap")


def _during(ctx: RuleContext, calls: Intervals) -> Intervals:
    return iv.intersect(ctx.host_parts_of_gaps(), calls)


def _drained_by(ctx: RuleContext, calls: Intervals) -> Intervals:
    """Host-wait parts of the gaps that began while the host was inside one of ``calls``."""
    g0, _g1 = ctx.gaps
    hw_end = ctx.gap_host_wait_end_us
    if g0.size == 0 or calls[0].size == 0:
        return iv.empty()
    cs, ce = iv.normalize(calls)
    i = np.searchsorted(cs, g0, side="right") - 1  # the last merged call starting at or before g0
    inside = (i >= 0) & (ce[np.maximum(i, 0)] >= g0)
    # The window's first gap did not start by the device running out of work.
    inside &= g0 > ctx.lo_us
    end = np.where(np.isnan(hw_end), np.nan, hw_end)
    sel = inside & ~np.isnan(end)
    return iv.make(g0[sel], end[sel])


def allocator(ctx: RuleContext) -> Intervals:
    """Device memory allocation and release calls the device waited on (memory)."""
    host = ctx.trace.host
    s, e = ctx.host_rows(Category.ALLOC)
    claimed = _during(ctx, (s, e))
    sel = (host["category"].to_numpy() == int(Category.ALLOC)) & (host["end_us"].to_numpy() > ctx.lo_us)
    sel &= host["start_us"].to_numpy() < ctx.hi_us
    if sel.any():
        # Decide per distinct name, not per event: a trace has few distinct names.
        names = host["name"]
        cats = names.cat.categories.astype(str)
        syncing_cat = np.array([any(w in n for w in _SYNCING_ALLOC_WORDS) for n in cats], dtype=bool)
        codes = names.cat.codes.to_numpy()
        syncing = sel & (codes >= 0) & syncing_cat[np.maximum(codes, 0)] if cats.size else sel & False
        drained = _drained_by(ctx, (host["start_us"].to_numpy()[syncing], host["end_us"].to_numpy()[syncing]))
        claimed = iv.union(np.concatenate((claimed[0], drained[0])), np.concatenate((claimed[1], drained[1])))
    return claimed


def dataloader(ctx: RuleContext) -> Intervals:
    """The host was fetching the next batch (``enumerate(DataLoader)#...__next__``)."""
    return _during(ctx, ctx.host_rows(Category.DATALOAD))


def sync(ctx: RuleContext) -> Intervals:
    """The host blocked on the device (or had just been), see the module docstring."""
    calls = ctx.host_rows(Category.SYNC)
    during = _during(ctx, calls)
    drained = _drained_by(ctx, calls)
    return iv.union(np.concatenate((during[0], drained[0])), np.concatenate((during[1], drained[1])))


def late_launch(ctx: RuleContext) -> Intervals:
    """Whatever remains of the device waiting for a launch: Python and framework overhead,
    launch latency, many tiny kernels (host)."""
    return ctx.host_wait

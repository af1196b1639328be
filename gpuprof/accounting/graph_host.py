"""The host side of one rank's dependency graph: its blocking calls and the host time each
what-if can remove.

On the threads that launch device work the host is one timeline (see
:mod:`gpuprof.accounting.graph`). A what-if deletes some of its time -- DataLoader waits,
syncs, allocator calls, launch calls, the operators that launch kernels, DDP's buffer
broadcast, blocking copies, or all of the host's own work (``removable``, keys
:data:`REMOVABLE`) -- and its *blocking calls* (``cudaStreamSynchronize``, ``.item()``,
blocking copies, synchronizing frees) return no earlier than the device work they wait
for. Each blocking call carries a tag saying which what-if removes it (:data:`BLOCK_SYNC`,
:data:`BLOCK_ALLOC`, :data:`BLOCK_COPY`). :func:`host_side` finds both, relative to the
window's start. Pure: the trace is only read.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpuprof.accounting.hostfacts import ddp_buffer_spans
from gpuprof.accounting.rules.context import RuleContext
from gpuprof.accounting.rules.hostside import syncing_alloc_mask
from gpuprof.model import intervals as iv
from gpuprof.model.grouping import is_in
from gpuprof.model.intervals import Intervals
from gpuprof.model.timeline import Category, CopyKind, Kind

FloatArray = npt.NDArray[np.float64]

# Tags of blocking host calls: which what-if makes them stop blocking (and removes them).
BLOCK_SYNC = 0  # cudaStreamSynchronize, .item(), a device-to-host copy the host waited for
BLOCK_ALLOC = 1  # a synchronizing free (cudaFree, empty_cache)
BLOCK_COPY = 2  # another blocking copy (pageable host-to-device): pinned_copies frees it

# Host time each what-if can remove, keys of :attr:`RankGraph.removable`.
REMOVABLE: tuple[str, ...] = (
    "dataloader",
    "sync",
    "allocator",
    "launch",
    "operators",
    "ddp_buffers",
    "blocking_copies",
    "host_work",
)


def _blocking_copies(ctx: RuleContext, sel: npt.NDArray[np.bool_]) -> tuple[Intervals, Intervals]:
    """Launch calls of copies the host waited through (the call lasted past most of its
    copy), split into device-to-host ones (the host waited for a result: a sync) and the
    others."""
    dev = ctx.trace.device_cols
    ds, de = ctx.cols.dev_start_us, ctx.cols.dev_end_us
    ls, le = ctx.launches.start_us, ctx.launches.end_us
    copy = sel & (dev["category"] == int(Category.COPY))
    # The host stayed in the call for most of the copy: a pageable copy is staged by the
    # driver and the call returns as the last chunk is handed over, microseconds before
    # the copy ends on the device.
    known = ~np.isnan(le)
    blocking = copy & known & (np.where(known, le, 0.0) - ds >= 0.5 * (de - ds)) & (de - ds > 0)
    d2h = blocking & (dev["copy_kind"] == int(CopyKind.DTOH))
    lo, hi = ctx.lo_us, ctx.hi_us
    a = iv.clip(iv.union(ls[d2h] - lo, le[d2h] - lo), 0.0, hi - lo)
    rest = blocking & ~d2h
    b = iv.clip(iv.union(ls[rest] - lo, le[rest] - lo), 0.0, hi - lo)
    return a, b


def _host_union(ctx: RuleContext, mask: npt.NDArray[np.bool_], threads: npt.NDArray[np.bool_] | None) -> Intervals:
    """Union of the masked host rows (on the launching threads when known), relative to
    lo, clipped to the window."""
    if threads is not None:
        mask = mask & threads
    hs, he = ctx.cols.host_start_us[mask], ctx.cols.host_end_us[mask]
    return iv.clip(iv.union(hs - ctx.lo_us, he - ctx.lo_us), 0.0, ctx.hi_us - ctx.lo_us)


def _kernel_launch_mask(ctx: RuleContext) -> npt.NDArray[np.bool_]:
    """Host rows that are the launch calls of kernels."""
    host, dev = ctx.trace.host_cols, ctx.trace.device_cols
    kern = dev["kind"] == int(Kind.KERNEL)
    corr = dev["correlation"][kern]
    hc = host["correlation"]
    return ctx.host_mask(Category.LAUNCH) & (hc >= 0) & np.isin(hc, corr[corr >= 0])


def _kernel_op_mask(ctx: RuleContext, launch: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
    """Framework operator rows (any depth) that contain a kernel launch call of their thread."""
    host = ctx.trace.host_cols
    hs, he, tid = ctx.cols.host_start_us, ctx.cols.host_end_us, host["tid"]
    ops = ctx.host_mask(Category.OTHER, Category.COPY, Category.LAUNCH) & (host["kind"] == int(Kind.OP))
    out = np.zeros(len(host), dtype=bool)
    for t in np.unique(tid[launch]):
        starts = np.sort(hs[launch & (tid == t)])
        rows = np.flatnonzero(ops & (tid == t))
        out[rows[_holds_a_start(starts, hs[rows], he[rows])]] = True
    return out


def _holds_a_start(starts: FloatArray, lo: FloatArray, hi: FloatArray) -> npt.NDArray[np.bool_]:
    """Per range ``[lo, hi)``: one of ``starts`` (sorted) lies inside it, i.e. the first
    start at or after ``lo`` is before ``hi`` (one binary search per range, not two)."""
    if starts.size == 0:
        return np.zeros(lo.size, dtype=bool)
    first = np.searchsorted(starts, lo, side="left")
    return (first < starts.size) & (starts[np.minimum(first, starts.size - 1)] < hi)  # type: ignore[no-any-return]



def host_side(
    ctx: RuleContext, sel: npt.NDArray[np.bool_]
) -> tuple[Intervals, npt.NDArray[np.int8], dict[str, Intervals]]:
    """Blocking calls (sorted by end, tagged) and the removable host time of each what-if."""
    tids = np.unique(ctx.launches.tid[ctx.act & (ctx.launches.tid >= 0)])
    htid = ctx.trace.host_cols["tid"]
    threads = is_in(htid, tids) if tids.size else None
    sync_calls = _host_union(ctx, ctx.host_mask(Category.SYNC), threads)
    alloc_mask = ctx.host_mask(Category.ALLOC)
    alloc = _host_union(ctx, alloc_mask, threads)
    syncing_alloc = _host_union(ctx, syncing_alloc_mask(ctx, alloc_mask), threads)
    d2h, other_copies = _blocking_copies(ctx, sel)
    dataloader = _host_union(ctx, ctx.host_mask(Category.DATALOAD), threads)
    launch = _kernel_launch_mask(ctx)
    launch_iv = _host_union(ctx, launch, threads)
    ops = _host_union(ctx, _kernel_op_mask(ctx, launch) | launch, threads)
    # A CUDA graph removes the operators' dispatch and launches, not the allocator calls,
    # syncs or input waits inside them: those belong to their own what-ifs, so that no
    # host time is removed by two of them.
    own = (alloc, sync_calls, d2h, dataloader)
    ops = iv.subtract(ops, (np.concatenate([o[0] for o in own]), np.concatenate([o[1] for o in own])))
    sync_all = iv.normalize(iv.union(np.concatenate((sync_calls[0], d2h[0])), np.concatenate((sync_calls[1], d2h[1]))))
    spans, _ = ddp_buffer_spans(ctx)
    ddp = iv.clip((spans[0] - ctx.lo_us, spans[1] - ctx.lo_us), 0.0, ctx.hi_us - ctx.lo_us)
    parts = [(sync_all, BLOCK_SYNC), (syncing_alloc, BLOCK_ALLOC), (iv.subtract(other_copies, sync_all), BLOCK_COPY)]
    bs = np.concatenate([p[0][0] for p in parts])
    be = np.concatenate([p[0][1] for p in parts])
    tag = np.concatenate([np.full(p[0][0].size, p[1], dtype=np.int8) for p in parts])
    order = np.argsort(be, kind="stable")
    # Everything else on the host's timeline: its own work (Python, framework, launches),
    # which an infinitely fast host would not spend; its waits (input, syncs, allocator,
    # blocking copies) stay.
    waits = [alloc, sync_all, other_copies, dataloader]
    host_work = iv.complement(
        iv.union(np.concatenate([w[0] for w in waits]), np.concatenate([w[1] for w in waits])),
        0.0,
        ctx.hi_us - ctx.lo_us,
    )
    removable = {
        "host_work": host_work,
        "blocking_copies": iv.subtract(other_copies, sync_all),
        "dataloader": dataloader,
        "sync": sync_all,
        "allocator": alloc,
        "launch": launch_iv,
        "operators": ops,
        "ddp_buffers": iv.normalize(ddp),
    }
    return (bs[order], be[order]), tag[order], removable


__all__ = ["BLOCK_ALLOC", "BLOCK_COPY", "BLOCK_SYNC", "REMOVABLE", "host_side"]

"""What-if replay: the step time a rank would have without one host-side cause.

Attribution (:mod:`gpuprof.analysis.attribution`) says which cause each lost microsecond
belongs to, but removing a cause can save more or less than its share. A DataLoader wait
lets the device drain its queue; when the host resumes, the next kernels run as fast as the
host launches them (launch-bound) until the host gets ahead again, so those ``host`` gaps
are the stall's consequence too. A host stall while the device is busy anyway saves
nothing. This module replays the window's device work to measure that.

The model
---------
For every device activity that starts in the window we know its device start ``s``,
duration ``d``, stream, and its *launch time* ``a`` (end of the runtime call that enqueued
it, matched by correlation id; :mod:`gpuprof.analysis.launches`).

1. *Host time compresses.* Removing a cause deletes a set ``X`` of host intervals (the
   launching threads' DataLoader ``__next__`` calls, sync calls, allocator calls, or kernel
   launch calls): a launch at host time ``t`` moves to ``t - |X ∩ [lo, t)|``. The host is
   treated as one sequential timeline, since a backward thread's launches follow the main
   thread's work that triggered them.
2. *Syncs are dependencies.* A blocking call that is kept (``cudaStreamSynchronize``,
   ``aten::item``, ..., or a copy's launch call that returned only after its copy had
   finished: pageable or synchronous copies) returns once the device work it waited for is
   done: in the replay it
   returns at ``max(its shifted start, the replayed end of that work)`` plus the part of the
   call that was not waiting, and every later host time moves with it. The awaited work is
   the latest-ending device event launched before the call that ended before it returned.
3. *Device work replays in stream order*, durations unchanged: each event starts at
   ``max(shifted launch + its launch latency, end of the previous event on its stream +
   fixed gap)``. An event that started within :data:`HOST_BOUND_SLACK_US` of its launch was
   host-bound: its observed latency is kept and it has no fixed gap. An event held back
   longer after its launch waited for something the host does not explain (an event on
   another stream, a collective): its gap after its stream predecessor is kept as a
   minimum. Events whose launch is unknown keep their original start as a lower bound.
   Per stream this is a scan, ``end_i = max(r_i + d_i, end_{i-1} + g_i + d_i)``, computed
   with a cumulative maximum: ``end_i = E_i + max(c, max_{j<=i}(r_j + d_j - E_j))`` where
   ``E`` is the prefix sum of ``g + d`` and ``c`` the stream's end before the window.
4. *Steps.* The window ends at the later of the replayed host end and the last replayed
   device end; each step boundary moves to the shifted host boundary, but not before the
   replayed end of the work that started before it nor after the start of the work after it.

With nothing removed the replay reproduces the measured steps (the ``baseline`` entry); the
advice uses the difference ``baseline - cause`` so that the model's residual error cancels.

What each cause's what-if removes (keys of ``whatif_step_times_us``):

``dataloader``  the DataLoader ``__next__`` calls (input ready when asked for).
``sync``        the blocking calls (no sync; the host runs ahead).
``allocator``   the device allocator calls (``cudaMalloc``, ``cudaFree``, ...).
``launch``      the kernel launch calls themselves (CUDA graphs / ``torch.compile``:
                launches cost nothing). Conservative: the Python and framework time
                between launches stays, although ``torch.compile`` removes much of it.
``operators``   the framework operators that launch kernels, whole (dispatch, checks and
                launch), and any launch call outside them, as a CUDA graph replay removes
                them; Python between them stays.
                The CUDA-graph / ``torch.compile`` model of the host-side findings; the
                ``launch`` replay is its conservative lower end.
``ddp_buffers`` DDP's buffer broadcast at the start of each forward (the spans from the
                first to the last ``flatten_dense_tensors`` / ``broadcast`` /
                ``unflatten_dense_tensors`` inside ``DistributedDataParallel.forward``):
                ``broadcast_buffers=False``. Its broadcast kernels stay on the device.

Only calls on threads that launch device work are removed or kept as syncs; a background
thread's calls do not hold the launches back.

Limits: host work is not re-timed (a faster host after the fix, e.g. less CPU contention
without in-process data loading, is not predicted); cross-stream dependencies are only kept
as fixed gaps; kept allocator calls are not sync points; collectives keep their measured
durations, so a rank's wait for a late peer stays (the job-level combination, the slowest
rank's step, is :mod:`gpuprof.advice.savings`'). Cost: a few vectorized passes over the
window's device events per what-if, plus a loop over the kept sync calls (per stream).
Pure: the trace is only read.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from gpuprof.analysis import intervals as iv
from gpuprof.analysis.hostfacts import ddp_buffer_spans
from gpuprof.analysis.intervals import Intervals
from gpuprof.analysis.rules.context import LAUNCH_QUEUE_US, LAUNCH_SLACK_US, RuleContext
from gpuprof.model.timeline import Category, Kind, Step

FloatArray = npt.NDArray[np.float64]

# An event that starts within this long after its launch returned was waiting for it.
HOST_BOUND_SLACK_US = LAUNCH_SLACK_US
# Latency from a launch call's return to the device start, for events that were held back.
QUEUE_LATENCY_US = LAUNCH_QUEUE_US
# Below this share of device work with a known launch the replay is not attempted.
MIN_MATCHED_SHARE = 0.5
WHATIF_CAUSES: tuple[str, ...] = ("dataloader", "sync", "allocator", "launch", "operators", "ddp_buffers")


@dataclass(frozen=True)
class _Events:
    """Window events in per-stream order (stream, then device start); times relative to lo."""

    start: FloatArray
    dur: FloatArray
    launch: FloatArray  # launch call end, NaN unknown
    launch_start: FloatArray  # launch call start, NaN unknown
    lat: FloatArray  # latency kept from launch to start
    gap: FloatArray  # fixed minimum gap after the stream predecessor
    bounds: npt.NDArray[np.int64]  # stream i is rows bounds[i]:bounds[i+1]
    carry: FloatArray  # per stream: end of its last event before the window (-inf none)
    issued: FloatArray  # per stream, running max of the issue time (launch, else start)
    by_start: npt.NDArray[np.int64]  # rows in device start order
    # Derived once for every replay of the window.
    known: npt.NDArray[np.bool_]  # launch known
    base: FloatArray  # launch call end, 0 unknown
    floor: FloatArray  # launch call start (else end, else 0): no start before it
    orig_end: FloatArray  # measured end
    issued_list: list[float]  # ``issued`` as floats (searched once per sync and stream)
    orig_end_list: list[float]  # ``orig_end`` as floats


@dataclass(frozen=True)
class Replay:
    """A replayed window: its length and per-step times, microseconds."""

    window_us: float
    step_times_us: tuple[float, ...]


def _events(ctx: RuleContext) -> _Events | None:
    dev = ctx.trace.device
    lo, hi = ctx.lo_us, ctx.hi_us
    act = ctx.act
    ds_all, de_all = dev["start_us"].to_numpy(), dev["end_us"].to_numpy()
    stream_all = dev["stream"].to_numpy()
    sel = act & (ds_all >= lo) & (ds_all < hi)
    if not sel.any():
        return None
    ds, de, stream = ds_all[sel] - lo, de_all[sel] - lo, stream_all[sel]
    la, ls = ctx.launches.end_us[sel] - lo, ctx.launches.start_us[sel] - lo
    order = np.lexsort((ds, stream))
    ds, de, stream, la, ls = ds[order], de[order], stream[order], la[order], ls[order]
    dur = np.maximum(de - ds, 0.0)
    cut = np.flatnonzero(np.diff(stream)) + 1
    bounds = np.concatenate(([0], cut, [ds.size])).astype(np.int64)
    # Predecessor end on the same stream; the first of each stream looks before the window.
    prev_end = np.concatenate(([-np.inf], de[:-1]))
    firsts = stream[bounds[:-1]]
    pre = act & (ds_all < lo)
    carry = np.full(firsts.size, -np.inf)
    if pre.any():
        slot = np.searchsorted(firsts, stream_all[pre])  # firsts is sorted (lexsort by stream)
        ok = (slot < firsts.size) & (firsts[np.minimum(slot, firsts.size - 1)] == stream_all[pre])
        np.maximum.at(carry, slot[ok], de_all[pre][ok] - lo)
    prev_end[bounds[:-1]] = carry
    known = ~np.isnan(la)
    lat_obs = ds - la
    host_bound = known & (lat_obs <= HOST_BOUND_SLACK_US)
    lat = np.where(host_bound, lat_obs, QUEUE_LATENCY_US)
    lat = np.where(known, lat, 0.0)
    gap = np.where(host_bound, 0.0, np.maximum(ds - np.where(np.isfinite(prev_end), prev_end, ds), 0.0))
    # What decides when an event is issued, as a running max per stream so that "issued
    # before t" is a prefix of the stream.
    issued = np.where(known, la, ds)
    for k in range(bounds.size - 1):
        issued[bounds[k] : bounds[k + 1]] = np.maximum.accumulate(issued[bounds[k] : bounds[k + 1]])
    by_start = np.argsort(ds, kind="stable").astype(np.int64)
    base = np.where(known, la, 0.0)
    # No event starts before the host reached its launch call: a kernel often starts before
    # its launch call returns (negative latency), which must not carry over when the call
    # itself is removed.
    floor = np.where(known & ~np.isnan(ls), ls, base)
    orig_end = ds + dur
    return _Events(
        start=ds,
        dur=dur,
        launch=la,
        launch_start=ls,
        lat=lat,
        gap=gap,
        bounds=bounds,
        carry=carry,
        issued=issued,
        by_start=by_start,
        known=known,
        base=base,
        floor=floor,
        orig_end=orig_end,
        issued_list=issued.tolist(),
        orig_end_list=orig_end.tolist(),
    )


class _HostMap:
    """Shifted host time ``t - removed_before(t) + shift`` (relative to lo)."""

    def __init__(self, removed: Intervals) -> None:
        self.rs, self.re = removed
        self.cum = np.concatenate(([0.0], np.cumsum(self.re - self.rs)))
        self.shift = 0.0
        # The same in plain floats, for the one-value maps of the sync loop (a numpy call
        # per value costs more than the arithmetic; the results are the same doubles).
        self._rs_list: list[float] = self.rs.tolist()
        self._re_list: list[float] = self.re.tolist()
        self._cum_list: list[float] = self.cum.tolist()

    def removed_before(self, t: FloatArray) -> FloatArray:
        """Removed host time in ``[0, t)``."""
        if self.rs.size == 0:
            return np.zeros_like(t)
        i = np.maximum(np.searchsorted(self.rs, t, side="right") - 1, 0)
        inside = np.clip(t - self.rs[i], 0.0, self.re[i] - self.rs[i])
        return np.asarray(self.cum[i] + inside, dtype=np.float64)

    def unshifted(self, t: FloatArray) -> FloatArray:
        """``t - removed_before(t)``: add :attr:`shift` to get the map."""
        return t - self.removed_before(t)

    def removed_before_one(self, t: float) -> float:
        """:meth:`removed_before` of one time."""
        if not self._rs_list:
            return 0.0
        i = max(bisect_right(self._rs_list, t) - 1, 0)
        r0 = self._rs_list[i]
        inside = min(max(t - r0, 0.0), self._re_list[i] - r0)
        return self._cum_list[i] + inside

    def one(self, t: float) -> float:
        """The map of one time."""
        return t - self.removed_before_one(t) + self.shift

    def __call__(self, t: FloatArray) -> FloatArray:
        return t - self.removed_before(t) + self.shift


def _scan(r: FloatArray, d: FloatArray, g: FloatArray, carry: float) -> FloatArray:
    """Ends of a serialized stream: ``end_i = max(r_i + d_i, end_{i-1} + g_i + d_i)``."""
    e = np.cumsum(g + d)
    x = np.maximum.accumulate(r + d - e)
    return np.asarray(e + np.maximum(x, carry), dtype=np.float64)


def replay(
    ev: _Events,
    removed: Intervals,
    syncs: Intervals,
    host_end: float,
    boundaries: FloatArray,
) -> Replay:
    """Replay ``ev`` with ``removed`` host intervals deleted (times relative to lo).

    ``syncs`` are the kept blocking calls, ``host_end`` the host's original end of the
    window, ``boundaries`` the original inner step boundaries: per step, the host start
    (``boundaries[0]``) and the device-aligned start (``boundaries[1]``).
    """
    hmap = _HostMap(removed)
    n_streams = ev.bounds.size - 1
    known = ev.known
    key_run = ev.issued_list
    # The map without its shift, once: the shift (set by the syncs) only adds a constant.
    base_u, floor_u = hmap.unshifted(ev.base), hmap.unshifted(ev.floor)
    new_end = np.full(ev.start.size, np.nan)
    bounds: list[int] = ev.bounds.tolist()
    done = bounds[:-1]  # per stream: next row to replay
    last_end: list[float] = ev.carry.tolist()
    orig_end_list = ev.orig_end_list

    def run_until(limit: float) -> None:
        shift = hmap.shift
        for k in range(n_streams):
            a, b = done[k], bounds[k + 1]
            if a >= b or key_run[a] > limit:  # nothing issued on this stream yet
                continue
            stop = bisect_right(key_run, limit, a, b)
            if stop <= a:
                continue
            sl = slice(a, stop)
            ready = np.maximum(base_u[sl] + shift + ev.lat[sl], floor_u[sl] + shift)
            ready = np.where(known[sl], ready, ev.start[sl])
            ends = _scan(ready, ev.dur[sl], ev.gap[sl], last_end[k])
            new_end[sl] = ends
            last_end[k] = float(ends[-1])
            done[k] = stop

    ss, se = syncs
    for s0, s1 in zip(ss.tolist(), se.tolist()):
        run_until(s1)
        # The awaited work: latest original end <= s1 among the replayed events.
        best_orig, best_new = -np.inf, -np.inf
        for k in range(n_streams):
            a, b = bounds[k], done[k]
            if b <= a:
                continue
            j = bisect_right(orig_end_list, s1, a, b) - 1
            if j >= a and orig_end_list[j] > best_orig:
                best_orig, best_new = orig_end_list[j], float(new_end[j])
        s_new = hmap.one(s0)
        tail = s1 - max(best_orig, s0)
        e_new = max(s_new, best_new) + tail
        hmap.shift = e_new - (s1 - hmap.removed_before_one(s1))
    run_until(np.inf)
    dev_end = float(np.nanmax(new_end)) if new_end.size else 0.0
    end = max(dev_end, hmap.one(host_end))
    step_bounds = _step_bounds(ev, new_end, hmap, boundaries)
    edges = np.concatenate(([0.0], np.minimum(step_bounds, end), [end]))
    edges = np.maximum.accumulate(edges)
    return Replay(window_us=end, step_times_us=tuple(float(x) for x in np.diff(edges)))


def _step_bounds(ev: _Events, new_end: FloatArray, hmap: _HostMap, boundaries: FloatArray) -> FloatArray:
    """Replayed inner step boundaries (see the module docstring, 4). ``boundaries`` is
    ``(2, k)``: per step, its host start and its device-aligned start."""
    host0, dev0 = boundaries[0], boundaries[1]
    if dev0.size == 0:
        return dev0
    order = ev.by_start
    s_sorted = ev.start[order]
    end_sorted = new_end[order]
    start_sorted = end_sorted - ev.dur[order]
    prev_max = np.maximum.accumulate(end_sorted)
    next_min = np.minimum.accumulate(start_sorted[::-1])[::-1]
    i = np.searchsorted(s_sorted, dev0, side="left")
    before = np.where(i > 0, prev_max[np.maximum(i - 1, 0)], -np.inf)
    after = np.where(i < s_sorted.size, next_min[np.minimum(i, s_sorted.size - 1)], np.inf)
    return np.asarray(np.minimum(np.maximum(hmap(host0), before), after), dtype=np.float64)


def _launch_tids(ctx: RuleContext) -> npt.NDArray[np.int64]:
    sel = ctx.act & (ctx.launches.tid >= 0)
    return np.unique(ctx.launches.tid[sel])


def _launch_threads(ctx: RuleContext) -> npt.NDArray[np.bool_] | None:
    """Host rows on the launching threads; ``None`` when those are unknown (all rows)."""
    tids = _launch_tids(ctx)
    return np.isin(ctx.trace.host["tid"].to_numpy(), tids) if tids.size else None


def _host_union(
    ctx: RuleContext, mask: npt.NDArray[np.bool_], threads: npt.NDArray[np.bool_] | None = None
) -> Intervals:
    """Union of the masked host rows on the launching threads (``threads``: the rows of
    :func:`_launch_threads` when known already), relative to lo, clipped."""
    host = ctx.trace.host
    if threads is None:
        threads = _launch_threads(ctx)
    if threads is not None:
        mask = mask & threads
    hs, he = host["start_us"].to_numpy()[mask], host["end_us"].to_numpy()[mask]
    return iv.clip(iv.union(hs - ctx.lo_us, he - ctx.lo_us), 0.0, ctx.hi_us - ctx.lo_us)


def _kernel_launch_mask(ctx: RuleContext) -> npt.NDArray[np.bool_]:
    """Host rows that are the launch calls of kernels."""
    host, dev = ctx.trace.host, ctx.trace.device
    kern = dev["kind"].to_numpy() == int(Kind.KERNEL)
    corr = dev["correlation"].to_numpy()[kern]
    hc = host["correlation"].to_numpy()
    return ctx.host_mask(Category.LAUNCH) & (hc >= 0) & np.isin(hc, corr[corr >= 0])


def _kernel_op_mask(ctx: RuleContext, launch: npt.NDArray[np.bool_] | None = None) -> npt.NDArray[np.bool_]:
    """Framework operator rows (any depth) that contain a kernel launch call of their thread
    (``launch``: :func:`_kernel_launch_mask` when known already)."""
    host = ctx.trace.host
    hs, he, tid = host["start_us"].to_numpy(), host["end_us"].to_numpy(), host["tid"].to_numpy()
    if launch is None:
        launch = _kernel_launch_mask(ctx)
    ops = ctx.host_mask(Category.OTHER, Category.COPY, Category.LAUNCH) & (
        host["kind"].to_numpy() == int(Kind.OP)
    )
    out = np.zeros(len(host), dtype=bool)
    for t in np.unique(tid[launch]):
        starts = np.sort(hs[launch & (tid == t)])
        rows = np.flatnonzero(ops & (tid == t))
        inside = np.searchsorted(starts, he[rows], side="left") - np.searchsorted(
            starts, hs[rows], side="left"
        )
        out[rows[inside > 0]] = True
    return out


def _blocking_copies(ctx: RuleContext) -> Intervals:
    """Launch calls of copies that returned only once their copy had finished (pageable or
    synchronous ``cudaMemcpy``): the host waited for the device in them, like a sync."""
    dev = ctx.trace.device
    ds, de = dev["start_us"].to_numpy(), dev["end_us"].to_numpy()
    ls, le = ctx.launches.start_us, ctx.launches.end_us
    copy = ctx.act & (dev["category"].to_numpy() == int(Category.COPY)) & (ds >= ctx.lo_us) & (ds < ctx.hi_us)
    blocking = copy & ~np.isnan(le) & (de <= le)
    return iv.clip(iv.union(ls[blocking] - ctx.lo_us, le[blocking] - ctx.lo_us), 0.0, ctx.hi_us - ctx.lo_us)


def _step_edges(ctx: RuleContext, steps: tuple[Step, ...]) -> tuple[FloatArray, float]:
    """Per inner step boundary its host and device-aligned start, and the host's end of the
    window (relative to lo); the host ranges are the trace's step markers of the same number."""
    lo, hi = ctx.lo_us, ctx.hi_us
    host_steps = {st.number: st for st in ctx.trace.steps}
    dev0 = np.array([st.start_us - lo for st in steps[1:]], dtype=np.float64)
    host0 = np.array(
        [
            host_steps[st.number].start_us - lo if st.number in host_steps else st.start_us - lo
            for st in steps[1:]
        ],
        dtype=np.float64,
    )
    last = host_steps.get(steps[-1].number) if steps else None
    host_end = min(hi, last.end_us) - lo if last is not None else hi - lo
    return np.vstack([np.minimum(host0, dev0), dev0]), float(host_end)


def _ddp_spans(ctx: RuleContext) -> Intervals:
    """DDP's per-forward buffer sync (flatten, broadcast, unflatten), relative to lo."""
    spans, _ = ddp_buffer_spans(ctx)
    return spans[0] - ctx.lo_us, spans[1] - ctx.lo_us


def whatif_facts(ctx: RuleContext, steps: tuple[Step, ...]) -> dict[str, Any]:
    """``whatif_step_times_us`` ({``baseline`` and each of :data:`WHATIF_CAUSES`: per-step
    replayed times, or the whole window without steps}) and ``whatif_removed_us`` ({cause:
    host time removed}); both ``None`` when the launches are not known well enough."""
    none: dict[str, Any] = {"whatif_step_times_us": None, "whatif_removed_us": None}
    share = ctx.launches.matched_share
    if share is None or share < MIN_MATCHED_SHARE:
        return none
    ev = _events(ctx)
    if ev is None:
        return none
    edges, host_end = _step_edges(ctx, steps)
    threads = _launch_threads(ctx)
    sync_calls = _host_union(ctx, ctx.host_mask(Category.SYNC), threads)
    blocking = iv.normalize(
        iv.union(*(np.concatenate((a, b)) for a, b in zip(sync_calls, _blocking_copies(ctx))))
    )
    launch = _kernel_launch_mask(ctx)
    removed = {
        "dataloader": _host_union(ctx, ctx.host_mask(Category.DATALOAD), threads),
        "sync": sync_calls,
        "allocator": _host_union(ctx, ctx.host_mask(Category.ALLOC), threads),
        "launch": _host_union(ctx, launch, threads),
        # Launch calls outside any operator go too: a CUDA graph replays without them.
        "operators": _host_union(ctx, _kernel_op_mask(ctx, launch) | launch, threads),
        "ddp_buffers": _ddp_spans(ctx),
    }
    base = replay(ev, iv.empty(), blocking, host_end, edges)
    out: dict[str, list[float]] = {"baseline": list(base.step_times_us)}
    for cause, rem in removed.items():
        if rem[0].size == 0:
            out[cause] = list(base.step_times_us)
            continue
        # The removed calls no longer block (for ``sync``: all of them).
        kept = iv.subtract(blocking, rem)
        out[cause] = list(replay(ev, rem, kept, host_end, edges).step_times_us)
    return {
        "whatif_step_times_us": out,
        "whatif_removed_us": {c: iv.total(r) for c, r in removed.items()},
    }


__all__ = ["WHATIF_CAUSES", "Replay", "replay", "whatif_facts"]

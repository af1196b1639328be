"""Measured numbers per rank for the advice (``RankSummary.facts``).

All values are plain JSON types; ``None`` means unknown (never 0). Times in microseconds,
sizes in bytes, restricted to the analysis window unless the key says otherwise (time left
out between steps is outside it: :meth:`RuleContext.clip`).

Keys:

``steps`` (int), ``step_time_us_median`` (float | None)
    complete steps in the window and their median duration.
``kernels`` (int), ``kernel_median_us`` (float | None)
    compute kernels that start in the window and their median duration.
``launch_median_us`` (float | None)
    median duration of the host calls that launched those kernels.
``compiled_kernel_share`` (float | None), ``compiled_regions`` (int)
    share of those kernels that Inductor generated (``triton_*`` names), and the host ranges
    of compiled code (``Torch-Compiled Region``, ``CompiledFxGraph``, ``CompiledFunction``):
    a model already compiled is not told to compile itself.
``kernels_shorter_than_launch_share`` (float | None)
    share of those kernels that ran for less time than their own launch call took: the
    device cannot be kept busy by one host thread issuing them one by one.
``launches_per_ms`` (float | None)
    compute kernels launched per millisecond of window.
``host_wait_us`` (float)
    lost time during which the device waited for a late launch (any host activity).
``queued_gap_us`` (float)
    lost time during which the next kernel was already launched (device waited for
    something else, e.g. another stream's event).
``sync_calls`` (int), ``sync_wait_us`` (float), ``sync_calls_by_name`` (dict str -> int)
    host calls that block on the device (runtime syncs, blocking copies, ``aten::item``);
    wait = union of those calls' host time.
``scalar_reads`` (int), ``scalar_reads_per_step`` (float | None)
    ``aten::item`` / ``aten::_local_scalar_dense`` calls (``.item()``, ``float(t)``, ...;
    the outermost one is counted when both appear).
``dataloader_calls`` (int), ``dataloader_wait_us`` (float), ``dataloader_wait_per_step_us`` (float | None)
    host time in DataLoader ``__next__`` inside the window (union over threads).
``dataloader_call_mean_us`` (float | None)
    mean full duration of the (outermost) ``__next__`` calls overlapping the window.
``copy_us_by_kind`` / ``exposed_copy_us_by_kind`` (dict str -> float)
    device time in copies per direction (``HtoD``, ``DtoH``, ``DtoD``, ``HtoH``, ``PtoP``,
    ``unknown``), and the part of it no compute overlaps; ``memset_us``, ``exposed_memset_us``.
``pageable_copies`` (int), ``pageable_copy_bytes`` (int | None), ``pageable_copy_us`` (float)
    copies from or to pageable host memory (bytes ``None`` when the trace has no sizes).
``dataloader_single_process`` (bool | None)
    the DataLoader iterator is ``_SingleProcessDataLoaderIter`` (``num_workers=0``).
``pageable_exposed_copy_us`` (float)
    the part of pageable copies no compute overlaps.
``local_lost_us_by_rule`` (dict str -> float)
    lost time each local rule gets when only the local claims are attributed (precedence
    as in :mod:`gpuprof.accounting.attribution`; within one cause, in :data:`RULES` order). The
    cross-rank claims can only take time away from these.
``alloc_calls_by_name`` (dict str -> int), ``alloc_calls`` (int), ``alloc_time_us`` (float)
    device allocator calls (``cudaMalloc``, ``cudaFree``, ``hipMalloc``, ...).
``alloc_before_first_compute_share`` (float | None)
    share of that allocator time spent before the window's first compute kernel starts: a
    trace that opens with allocation and library set-up (a cold start) has most of it there.
``mem_peak_allocated_bytes``, ``mem_peak_reserved_bytes``, ``mem_capacity_bytes`` (int | None),
``mem_peak_share`` (float | None)
    from ``[memory]`` samples over the whole trace; share = peak (reserved if known, else
    allocated) / capacity.
``comm_us``, ``comm_exposed_us`` (float)
    device time in collective / P2P kernels, and the part no compute overlaps.
``lost_by_op`` (dict cause -> list of dict)
    for ``host``, ``sync`` and ``other`` (local attribution): the top enclosing host ops or
    annotations of that lost time, each ``{"op", "lost_us", "lost_us_per_step", "calls"}``
    (:func:`gpuprof.accounting.enclosing.lost_by_op`).
``host_wait_in_launch_share`` (float | None)
    of the time the device waited for a late launch, the share the launching threads spent
    inside launch API calls (high: launch-bound; low: framework / Python overhead).
``workload`` (str | None)
    ``"training"``, ``"inference"`` or ``None`` (unknown), from op names.
``ddp_buffer_sync`` (dict | None)
    DDP's per-forward buffer broadcast: ``broadcasts``, ``host_us``, ``lost_us`` and their
    ``*_per_step``.
``python_stacks`` (bool), ``empty_op_median_us`` (float | None), ``runtime_calls`` (int),
``runtime_calls_matched_share`` (float | None)
    how far host times and the trace's completeness can be trusted
    (:func:`gpuprof.accounting.hostfacts.trust`).
``device_aligned_steps`` (bool), ``launch_matched_share`` (float | None)
    set by :func:`gpuprof.accounting.summarize.summarize`: whether step bounds follow the
    device (see :mod:`gpuprof.accounting.window`), and the share of device work whose launch
    call is in the trace.
``window_gaps_us`` (float)
    set by :func:`gpuprof.accounting.summarize.summarize`: time between the window's outer
    bounds left out of it because no selected step covers it (0 when steps are contiguous).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from gpuprof.accounting import enclosing, hostfacts
from gpuprof.accounting.attribution import PRECEDENCE
from gpuprof.accounting.rules import RULES
from gpuprof.accounting.rules.context import RuleContext
from gpuprof.model import intervals as iv
from gpuprof.model.report import Cause
from gpuprof.model.table import one_of
from gpuprof.model.timeline import Category, Columns, CopyKind

_SCALAR_READS = ("aten::item", "aten::_local_scalar_dense")
_COPY_LABEL = {
    int(CopyKind.HTOD): "HtoD",
    int(CopyKind.DTOH): "DtoH",
    int(CopyKind.DTOD): "DtoD",
    int(CopyKind.HTOH): "HtoH",
    int(CopyKind.PTOP): "PtoP",
}


# Host ranges of code torch.compile generated.
_COMPILED_WORDS: tuple[str, ...] = ("Torch-Compiled Region", "CompiledFxGraph", "CompiledFunction")

def _median(x: np.ndarray) -> float | None:
    return float(np.median(x)) if x.size else None


def _count_by_name(host: Columns, rows: np.ndarray) -> dict[str, int]:
    """Calls per name among the host table's ``rows`` (a mask), most frequent first (ties
    in the order of their first row)."""
    if not rows.any():
        return {}
    labels = host.labels("name").tolist() + ["nan"]
    codes = host.codes("name")[rows].astype(np.int64)
    counts: dict[str, int] = {}
    for c in np.where(codes < 0, len(labels) - 1, codes).tolist():
        name = labels[c]
        counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def _in_window(cols: Columns, lo: float, hi: float) -> np.ndarray:
    return (cols["end_us"] > lo) & (cols["start_us"] < hi)


def _outermost(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Mask of intervals (sorted by start) not nested inside an earlier one."""
    if s.size == 0:
        return np.zeros(0, dtype=bool)
    prev_end = np.maximum.accumulate(np.concatenate(([-np.inf], e[:-1])))
    return s >= prev_end


def rank_facts(
    ctx: RuleContext, n_steps: int, step_times_us: list[float], by_rule: Mapping[str, iv.Intervals]
) -> dict[str, Any]:
    """The facts of one rank (keys in the module docstring); ``by_rule`` is
    :func:`gpuprof.accounting.rules.claims_by_rule` of ``ctx``."""
    lo, hi = ctx.lo_us, ctx.hi_us
    dev, host = ctx.trace.device_cols, ctx.trace.host_cols
    per_step = n_steps if n_steps > 0 else None
    f: dict[str, Any] = {
        "steps": n_steps,
        "step_time_us_median": _median(np.asarray(step_times_us, dtype=float)),
    }
    # Kernels and their launches.
    ds, de = dev["start_us"], dev["end_us"]
    cat = dev["category"]
    kern = ctx.act & (cat == int(Category.COMPUTE)) & (ds >= lo) & (ds < hi)
    dur = (de - ds)[kern]
    ls, le = ctx.launches.start_us[kern], ctx.launches.end_us[kern]
    known = ~np.isnan(ls)
    launch_dur = (le - ls)[known]
    f["kernels"] = int(kern.sum())
    f["kernel_median_us"] = _median(dur)
    labels = dev.labels("name")
    triton = np.array([str(n).startswith("triton") for n in labels], dtype=bool)
    codes_k = dev.codes("name")[kern]
    f["compiled_kernel_share"] = (
        float(np.mean(triton[codes_k[codes_k >= 0]])) if kern.any() and labels.size and (codes_k >= 0).any() else None
    )
    host_labels = host.labels("name")
    compiled_names = np.array(
        [any(w in str(n) for w in _COMPILED_WORDS) for n in host_labels], dtype=bool
    )
    hcodes = host.codes("name")
    f["compiled_regions"] = int(np.sum(compiled_names[hcodes[hcodes >= 0]])) if host_labels.size else 0
    f["launch_median_us"] = _median(launch_dur)
    f["kernels_shorter_than_launch_share"] = float(np.mean(dur[known] < launch_dur)) if known.any() else None
    window_us = ctx.window_us
    f["launches_per_ms"] = (
        float(known.sum() / (window_us / 1000.0)) if known.any() and window_us > 0 else None
    )
    f["host_wait_us"] = iv.total(iv.normalize(ctx.host_wait))
    f["queued_gap_us"] = iv.total(iv.normalize(ctx.queued))
    # Host calls.
    win = _in_window(host, lo, hi)
    hcat = host["category"]
    hs, he = host["start_us"], host["end_us"]
    sync = win & (hcat == int(Category.SYNC))
    f["sync_calls"] = int(sync.sum())
    # Per name, the outermost blocking calls only: one .item() is one call, not also the
    # aten::_local_scalar_dense and cudaStreamSynchronize inside it.
    sync_rows = np.flatnonzero(sync)
    outer_sync = np.zeros_like(sync)
    outer_sync[sync_rows[_outermost(hs[sync_rows], he[sync_rows])]] = True
    f["sync_calls_by_name"] = _count_by_name(host, outer_sync)
    f["sync_wait_us"] = iv.total(iv.union(hs[sync], he[sync]))
    codes = host.codes("name")
    labels = host.labels("name")
    is_scalar = np.isin(labels, _SCALAR_READS)  # per name, not per row
    scalar = sync & (codes >= 0) & is_scalar[np.maximum(codes, 0)] if is_scalar.size else np.zeros_like(sync)
    n_scalar = int(_outermost(hs[scalar], he[scalar]).sum())
    f["scalar_reads"] = n_scalar
    f["scalar_reads_per_step"] = n_scalar / per_step if per_step else None
    dl = win & (hcat == int(Category.DATALOAD))
    dl_iv = ctx.clip(iv.union(hs[dl], he[dl]))
    outer = _outermost(hs[dl], he[dl])
    f["dataloader_calls"] = int(outer.sum())
    f["dataloader_call_mean_us"] = float(np.mean((he[dl] - hs[dl])[outer])) if outer.any() else None
    f["dataloader_wait_us"] = iv.total(dl_iv)
    f["dataloader_wait_per_step_us"] = f["dataloader_wait_us"] / per_step if per_step else None
    f["dataloader_single_process"] = (
        any("SingleProcessDataLoaderIter" in (labels[c] if c >= 0 else "nan") for c in np.unique(codes[dl]).tolist())
        if dl.any()
        else None
    )
    alloc = win & (hcat == int(Category.ALLOC))
    f["alloc_calls_by_name"] = _count_by_name(host, alloc)
    f["alloc_calls"] = int(alloc.sum())
    f["alloc_time_us"] = iv.total(ctx.clip(iv.union(hs[alloc], he[alloc])))
    first = float(ds[kern].min()) if kern.any() else None
    if first is not None and f["alloc_time_us"] > 0:
        early = ctx.clip(iv.clip(iv.union(hs[alloc], he[alloc]), lo, first))
        f["alloc_before_first_compute_share"] = iv.total(early) / f["alloc_time_us"]
    else:
        f["alloc_before_first_compute_share"] = None
    # Copies and memsets on the device.
    copy_kind = dev["copy_kind"]
    copies = ctx.act & (cat == int(Category.COPY)) & (de > lo) & (ds < hi)
    by_kind: dict[str, float] = {}
    exposed_by_kind: dict[str, float] = {}
    for code in np.unique(copy_kind[copies]):
        sel = copies & (copy_kind == code)
        ivs = ctx.clip(iv.union(ds[sel], de[sel]))
        label = _COPY_LABEL.get(int(code), "unknown")
        by_kind[label] = by_kind.get(label, 0.0) + iv.total(ivs)
        exposed_by_kind[label] = exposed_by_kind.get(label, 0.0) + iv.total(iv.subtract(ivs, ctx.compute))
    f["copy_us_by_kind"] = by_kind
    f["exposed_copy_us_by_kind"] = exposed_by_kind
    memset = ctx.act & (cat == int(Category.MEMSET)) & (de > lo) & (ds < hi)
    ms_iv = ctx.clip(iv.union(ds[memset], de[memset]))
    f["memset_us"] = iv.total(ms_iv)
    f["exposed_memset_us"] = iv.total(iv.subtract(ms_iv, ctx.compute))
    pageable = copies & dev["pageable"]
    nbytes = dev["bytes"][pageable]
    f["pageable_copies"] = int(pageable.sum())
    f["pageable_copy_bytes"] = int(nbytes[nbytes >= 0].sum()) if (nbytes >= 0).any() else None
    pg_iv = ctx.clip(iv.union(ds[pageable], de[pageable]))
    f["pageable_copy_us"] = iv.total(pg_iv)
    f["pageable_exposed_copy_us"] = iv.total(iv.subtract(pg_iv, ctx.compute))
    # Communication.
    comm = ctx.act & one_of(cat, (int(Category.COLLECTIVE), int(Category.P2P)))
    comm_iv = ctx.clip(iv.union(ds[comm], de[comm]))
    f["comm_us"] = iv.total(comm_iv)
    f["comm_exposed_us"] = iv.total(iv.subtract(comm_iv, ctx.compute))
    f.update(_memory_facts(ctx))
    lost_us, lost_iv = _lost_by_rule(ctx, by_rule)
    f["local_lost_us_by_rule"] = lost_us
    f.update(_host_facts(ctx, lost_iv, per_step))
    return f


def _host_facts(
    ctx: RuleContext, lost_iv: Mapping[str, iv.Intervals], per_step: int | None
) -> dict[str, Any]:
    """Enclosing ops of the local host / sync / other time, launch share, workload, trust."""

    def cause_iv(*rules: str) -> iv.Intervals:
        parts = [lost_iv[r] for r in rules if r in lost_iv]
        if not parts:
            return iv.empty()
        return iv.union(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))

    host_rules = [r.name for r in RULES if r.cause is Cause.HOST]
    sync_rules = [r.name for r in RULES if r.cause is Cause.SYNC]
    host_lost = cause_iv(*host_rules)
    ops = enclosing.OpIndex(ctx)  # shared by the three causes
    out: dict[str, Any] = {
        "lost_by_op": {
            "host": enclosing.lost_by_op(ctx, host_lost, per_step, ops),
            "sync": enclosing.lost_by_op(ctx, cause_iv(*sync_rules), per_step, ops),
            "other": enclosing.lost_by_op(ctx, cause_iv("unclaimed"), per_step, ops),
        },
        "host_wait_in_launch_share": hostfacts.host_wait_in_launch_share(ctx, cause_iv("late_launch")),
        "workload": hostfacts.workload(ctx),
        "ddp_buffer_sync": hostfacts.ddp_buffer_sync(ctx, per_step),
    }
    out.update(hostfacts.trust(ctx))
    return out


def _lost_by_rule(
    ctx: RuleContext, by_rule: Mapping[str, iv.Intervals]
) -> tuple[dict[str, float], dict[str, iv.Intervals]]:
    """Local-only attribution, split further by rule inside each cause (µs and intervals;
    ``unclaimed`` is what no rule got)."""
    remaining = ctx.lost
    out: dict[str, float] = {}
    out_iv: dict[str, iv.Intervals] = {}
    by_cause: dict[Cause, list[tuple[str, iv.Intervals]]] = {}
    for rule in RULES:
        if rule.name in by_rule:
            by_cause.setdefault(rule.cause, []).append((rule.name, by_rule[rule.name]))
    for cause in PRECEDENCE:
        for name, claim in by_cause.get(cause, []):
            got = iv.intersect(remaining, claim)
            out[name] = iv.total(got)
            out_iv[name] = got
            if got[0].size:
                remaining = iv.subtract(remaining, got)
    out["unclaimed"] = iv.total(remaining)
    out_iv["unclaimed"] = remaining
    return out, out_iv


def _memory_facts(ctx: RuleContext) -> dict[str, Any]:
    samples = ctx.trace.memory
    alloc = [m.allocated_bytes for m in samples if m.allocated_bytes is not None]
    reserved = [m.reserved_bytes for m in samples if m.reserved_bytes is not None]
    cap = ctx.trace.device_memory_bytes
    peak_alloc = max(alloc) if alloc else None
    peak_res = max(reserved) if reserved else None
    peak = peak_res if peak_res is not None else peak_alloc
    return {
        "mem_peak_allocated_bytes": peak_alloc,
        "mem_peak_reserved_bytes": peak_res,
        "mem_capacity_bytes": cap,
        "mem_peak_share": (peak / cap) if (peak is not None and cap) else None,
    }


__all__ = ["rank_facts"]

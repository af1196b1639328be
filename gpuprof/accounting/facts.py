"""Measured numbers per rank for the advice: :func:`rank_facts` builds a rank's
:class:`~gpuprof.accounting.factrecord.RankFacts` (``RankSummary.facts``; each field is
documented there).

``None`` means unknown (never 0). Times in microseconds, sizes in bytes, restricted to the
analysis window unless the field says otherwise (time left out between steps is outside
it: :meth:`RuleContext.clip`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gpuprof.accounting import enclosing, hostfacts
from gpuprof.accounting.attribution import PRECEDENCE
from gpuprof.accounting.evidence import trace_lacks
from gpuprof.accounting.factrecord import RankFacts
from gpuprof.accounting.rules import RULES
from gpuprof.accounting.rules.context import RuleContext
from gpuprof.accounting.warmup import warmup_facts
from gpuprof.model import intervals as iv
from gpuprof.model.report import Cause
from gpuprof.model.table import one_of
from gpuprof.model.timeline import Category, Columns, CopyKind, Step

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
    ctx: RuleContext,
    steps: Sequence[Step],
    by_rule: Mapping[str, iv.Intervals],
    *,
    device_aligned_steps: bool,
    step_marker: str | None,
    window_gaps_us: float,
) -> RankFacts:
    """The facts of one rank over the window's complete ``steps``; ``by_rule`` is
    :func:`gpuprof.accounting.rules.claims_by_rule` of ``ctx``. The window's own facts
    (whether the steps follow the device, their marker, the time left out between them)
    are given by the caller, who chose the window."""
    lo, hi = ctx.lo_us, ctx.hi_us
    dev, host = ctx.trace.device_cols, ctx.trace.host_cols
    n_steps = len(steps)
    per_step = n_steps if n_steps > 0 else None
    # Kernels and their launches.
    ds, de = dev["start_us"], dev["end_us"]
    cat = dev["category"]
    kern = ctx.act & (cat == int(Category.COMPUTE)) & (ds >= lo) & (ds < hi)
    dur = (de - ds)[kern]
    ls, le = ctx.launches.start_us[kern], ctx.launches.end_us[kern]
    known = ~np.isnan(ls)
    launch_dur = (le - ls)[known]
    labels = dev.labels("name")
    triton = np.array([str(n).startswith("triton") for n in labels], dtype=bool)
    codes_k = dev.codes("name")[kern]
    host_labels = host.labels("name")
    compiled_names = np.array(
        [any(w in str(n) for w in _COMPILED_WORDS) for n in host_labels], dtype=bool
    )
    hcodes = host.codes("name")
    window_us = ctx.window_us
    # Host calls.
    win = _in_window(host, lo, hi)
    hcat = host["category"]
    hs, he = host["start_us"], host["end_us"]
    sync = win & (hcat == int(Category.SYNC))
    # Per name, the outermost blocking calls only: one .item() is one call, not also the
    # aten::_local_scalar_dense and cudaStreamSynchronize inside it.
    sync_rows = np.flatnonzero(sync)
    outer_sync = np.zeros_like(sync)
    outer_sync[sync_rows[_outermost(hs[sync_rows], he[sync_rows])]] = True
    codes = host.codes("name")
    hlabels = host.labels("name")
    is_scalar = np.isin(hlabels, _SCALAR_READS)  # per name, not per row
    scalar = sync & (codes >= 0) & is_scalar[np.maximum(codes, 0)] if is_scalar.size else np.zeros_like(sync)
    n_scalar = int(_outermost(hs[scalar], he[scalar]).sum())
    dl = win & (hcat == int(Category.DATALOAD))
    dl_iv = ctx.clip(iv.union(hs[dl], he[dl]))
    outer = _outermost(hs[dl], he[dl])
    dl_wait_us = iv.total(dl_iv)
    alloc = win & (hcat == int(Category.ALLOC))
    alloc_time_us = iv.total(ctx.clip(iv.union(hs[alloc], he[alloc])))
    first = float(ds[kern].min()) if kern.any() else None
    alloc_early: float | None = None
    if first is not None and alloc_time_us > 0:
        early = ctx.clip(iv.clip(iv.union(hs[alloc], he[alloc]), lo, first))
        alloc_early = iv.total(early) / alloc_time_us
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
    memset = ctx.act & (cat == int(Category.MEMSET)) & (de > lo) & (ds < hi)
    ms_iv = ctx.clip(iv.union(ds[memset], de[memset]))
    pageable = copies & dev["pageable"]
    nbytes = dev["bytes"][pageable]
    pg_iv = ctx.clip(iv.union(ds[pageable], de[pageable]))
    # Communication.
    comm = ctx.act & one_of(cat, (int(Category.COLLECTIVE), int(Category.P2P)))
    comm_iv = ctx.clip(iv.union(ds[comm], de[comm]))
    mem = _memory_facts(ctx)
    lost_us, lost_iv = _lost_by_rule(ctx, by_rule)
    trust = hostfacts.trust(ctx)
    return RankFacts(
        steps=n_steps,
        step_time_us_median=_median(np.asarray([s.duration_us for s in steps], dtype=float)),
        kernels=int(kern.sum()),
        kernel_median_us=_median(dur),
        compiled_kernel_share=(
            float(np.mean(triton[codes_k[codes_k >= 0]])) if kern.any() and labels.size and (codes_k >= 0).any() else None
        ),
        compiled_regions=int(np.sum(compiled_names[hcodes[hcodes >= 0]])) if host_labels.size else 0,
        launch_median_us=_median(launch_dur),
        kernels_shorter_than_launch_share=float(np.mean(dur[known] < launch_dur)) if known.any() else None,
        launches_per_ms=float(known.sum() / (window_us / 1000.0)) if known.any() and window_us > 0 else None,
        host_wait_us=iv.total(iv.normalize(ctx.host_wait)),
        queued_gap_us=iv.total(iv.normalize(ctx.queued)),
        sync_calls=int(sync.sum()),
        sync_calls_by_name=_count_by_name(host, outer_sync),
        sync_wait_us=iv.total(iv.union(hs[sync], he[sync])),
        scalar_reads=n_scalar,
        scalar_reads_per_step=n_scalar / per_step if per_step else None,
        dataloader_calls=int(outer.sum()),
        dataloader_call_mean_us=float(np.mean((he[dl] - hs[dl])[outer])) if outer.any() else None,
        dataloader_wait_us=dl_wait_us,
        dataloader_wait_per_step_us=dl_wait_us / per_step if per_step else None,
        dataloader_single_process=(
            any("SingleProcessDataLoaderIter" in (hlabels[c] if c >= 0 else "nan") for c in np.unique(codes[dl]).tolist())
            if dl.any()
            else None
        ),
        alloc_calls_by_name=_count_by_name(host, alloc),
        alloc_calls=int(alloc.sum()),
        alloc_time_us=alloc_time_us,
        alloc_before_first_compute_share=alloc_early,
        copy_us_by_kind=by_kind,
        exposed_copy_us_by_kind=exposed_by_kind,
        memset_us=iv.total(ms_iv),
        exposed_memset_us=iv.total(iv.subtract(ms_iv, ctx.compute)),
        pageable_copies=int(pageable.sum()),
        pageable_copy_bytes=int(nbytes[nbytes >= 0].sum()) if (nbytes >= 0).any() else None,
        pageable_copy_us=iv.total(pg_iv),
        pageable_exposed_copy_us=iv.total(iv.subtract(pg_iv, ctx.compute)),
        comm_us=iv.total(comm_iv),
        comm_exposed_us=iv.total(iv.subtract(comm_iv, ctx.compute)),
        mem_peak_allocated_bytes=mem.peak_allocated_bytes,
        mem_peak_reserved_bytes=mem.peak_reserved_bytes,
        mem_capacity_bytes=mem.capacity_bytes,
        mem_peak_share=mem.peak_share,
        local_lost_us_by_rule=lost_us,
        lost_by_op=_lost_by_op(ctx, lost_iv, per_step),
        host_wait_in_launch_share=hostfacts.host_wait_in_launch_share(ctx, _cause_iv(lost_iv, "late_launch")),
        workload=hostfacts.workload(ctx),
        ddp_buffer_sync=hostfacts.ddp_buffer_sync(ctx, per_step),
        trust=trust,
        device_aligned_steps=device_aligned_steps,
        step_marker=step_marker,
        window_gaps_us=window_gaps_us,
        trace_lacks=trace_lacks(ctx.trace, trust),
        warmup=warmup_facts(ctx, steps),
    )


def _cause_iv(lost_iv: Mapping[str, iv.Intervals], *rules: str) -> iv.Intervals:
    """The lost time ``rules`` got in the local attribution, as one interval set."""
    parts = [lost_iv[r] for r in rules if r in lost_iv]
    if not parts:
        return iv.empty()
    return iv.union(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))


def _lost_by_op(
    ctx: RuleContext, lost_iv: Mapping[str, iv.Intervals], per_step: int | None
) -> dict[str, tuple[enclosing.OpLoss, ...]]:
    """Enclosing ops of the local host / sync / other time."""
    host_rules = [r.name for r in RULES if r.cause is Cause.HOST]
    sync_rules = [r.name for r in RULES if r.cause is Cause.SYNC]
    ops = enclosing.OpIndex(ctx)  # shared by the three causes
    return {
        "host": tuple(enclosing.lost_by_op(ctx, _cause_iv(lost_iv, *host_rules), per_step, ops)),
        "sync": tuple(enclosing.lost_by_op(ctx, _cause_iv(lost_iv, *sync_rules), per_step, ops)),
        "other": tuple(enclosing.lost_by_op(ctx, _cause_iv(lost_iv, "unclaimed"), per_step, ops)),
    }


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


@dataclass(frozen=True)
class _Memory:
    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None
    capacity_bytes: int | None
    peak_share: float | None


def _memory_facts(ctx: RuleContext) -> _Memory:
    """Peaks of the ``[memory]`` samples over the whole trace, and the share of the device's
    memory the peak takes (reserved if known, else allocated)."""
    samples = ctx.trace.memory
    alloc = [m.allocated_bytes for m in samples if m.allocated_bytes is not None]
    reserved = [m.reserved_bytes for m in samples if m.reserved_bytes is not None]
    cap = ctx.trace.device_memory_bytes
    peak_alloc = max(alloc) if alloc else None
    peak_res = max(reserved) if reserved else None
    peak = peak_res if peak_res is not None else peak_alloc
    return _Memory(peak_alloc, peak_res, cap, (peak / cap) if (peak is not None and cap) else None)


__all__ = ["rank_facts"]

"""Facts about the host side of one rank: how it launches, what the job is, and how far the
trace itself can be trusted. (Where its lost time sits on the host, by enclosing op, is
:mod:`gpuprof.accounting.enclosing`.)

* **Launch share.** Of the time the device waited for a late launch, the share the
  launching thread spent inside launch API calls (``cudaLaunchKernel``, ...). High: the
  launches themselves are the bottleneck; low: framework / Python work between them is.
* **Workload.** ``training`` when backward or optimizer ops appear, ``inference`` when none
  do and inference markers do (vLLM ops, ``execute_model``, prefill / decode, generation
  contexts), else ``None``.
* **DDP buffer sync.** ``DistributedDataParallel.forward`` broadcasting its buffers
  (``flatten_dense_tensors`` / ``broadcast`` / ``unflatten_dense_tensors``, or
  ``_sync_buffers``) at the start of every forward.
* **Trust.** Python stacks recorded (``python_function`` events) and slow trivial ops
  (``aten::empty``) mean the profiler inflated host time; runtime calls all matched to
  device work (none of the usual event / stream calls) mean a filtered or sampled trace.

Times in microseconds on the trace's clock. Pure: the trace is only read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from gpuprof.accounting.rules.context import RuleContext
from gpuprof.model import intervals as iv
from gpuprof.model import notice
from gpuprof.model.grouping import is_in
from gpuprof.model.intervals import Intervals
from gpuprof.model.notice import Notice
from gpuprof.model.timeline import Category, Kind

_TRAINING = re.compile(
    r"Backward|autograd::engine|^Optimizer\.(step|zero_grad)|## backward ##|## optimizer ##"
)
_INFERENCE = re.compile(
    r"vllm|execute_model|model_runner|prefill|decode|_generation_|generate|sglang|inference", re.IGNORECASE
)
_DDP_SYNC = re.compile(r"_sync_buffers|_sync_module_buffers|_sync_params_and_buffers")
_DDP_PARTS = re.compile(r"^(aten::flatten_dense_tensors|aten::unflatten_dense_tensors|c10d::broadcast_)$")
# ``aten::empty`` only asks the caching allocator for a block: a few µs. Slower than this
# (median), the profiler itself (with_stack, record_shapes) or a starved CPU slows the host.
SLOW_EMPTY_US = 15.0
# A filtered trace keeps only runtime calls that launched something; a full one always has
# event / stream calls (cudaEventRecord, cudaStreamWaitEvent, ...) without device work.
FILTERED_MIN_RUNTIME_CALLS = 100


@dataclass(frozen=True)
class DdpBufferSync:
    """DDP's per-forward buffer broadcast on one rank (:func:`ddp_buffer_sync`): the
    ``c10d::broadcast_`` calls, the host time of the spans holding them and the lost time
    inside those spans, µs, and both per step (``None`` without steps)."""

    broadcasts: int
    host_us: float
    lost_us: float
    host_us_per_step: float | None
    lost_us_per_step: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"broadcasts": self.broadcasts, "host_us": self.host_us, "lost_us": self.lost_us,
                "host_us_per_step": self.host_us_per_step, "lost_us_per_step": self.lost_us_per_step}


@dataclass(frozen=True)
class TrustFacts:
    """How far one rank's host times and the trace's completeness can be trusted
    (:func:`trust`)."""

    # Python stacks recorded (``with_stack=True`` or ``python_function`` events).
    python_stacks: bool
    # Launch calls belong in the trace (not in an op-level timeline, which has none).
    launches_expected: bool
    # Median host duration of ``aten::empty`` ops, µs (``None``: none in the trace).
    empty_op_median_us: float | None
    # Runtime API calls on the host, and the share of them whose device work is in the trace.
    runtime_calls: int
    runtime_calls_matched_share: float | None
    # Share of device work whose launch call is in the trace (``None``: no device work).
    launch_matched_share: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"python_stacks": self.python_stacks, "launches_expected": self.launches_expected,
                "empty_op_median_us": self.empty_op_median_us, "runtime_calls": self.runtime_calls,
                "runtime_calls_matched_share": self.runtime_calls_matched_share,
                "launch_matched_share": self.launch_matched_share}


def host_wait_in_launch_share(ctx: RuleContext, host_lost: Intervals) -> float | None:
    """Share of ``host_lost`` (the device waiting for late launches) during which a
    launching thread was inside a launch API call; ``None`` when there is none."""
    total = iv.total(host_lost)
    if total <= 0:
        return None
    host = ctx.trace.host_cols
    launch = ctx.host_mask(Category.LAUNCH)
    tids = np.unique(ctx.launches.tid[ctx.act & (ctx.launches.tid >= 0)])
    if tids.size:
        launch &= is_in(host["tid"], tids)
    calls = iv.union(host["start_us"][launch], host["end_us"][launch])
    return iv.total(iv.intersect(host_lost, calls)) / total


def workload(ctx: RuleContext) -> str | None:
    """``"training"``, ``"inference"`` or ``None`` (unknown), from op and annotation names."""
    names = ctx.trace.host_cols.labels("name")
    if any(_TRAINING.search(n) for n in names):
        return "training"
    if any(_INFERENCE.search(n) for n in names):
        return "inference"
    return None


def ddp_buffer_spans(ctx: RuleContext) -> tuple[Intervals, int]:
    """Per ``DistributedDataParallel.forward`` in the window, the span from its first to its
    last buffer-sync op (normalized, clipped to the window), and the broadcasts in them."""
    host = ctx.trace.host_cols
    cats = host.labels("name")
    # Most ranks have no DDP forward at all: say so before touching the rows.
    if cats.size == 0 or not (cats == "DistributedDataParallel.forward").any():
        return iv.empty(), 0
    hs, he, htid = host["start_us"], host["end_us"], host["tid"]
    win = (he > ctx.lo_us) & (hs < ctx.hi_us)
    codes = host.codes("name")

    def by_name(flag: list[bool]) -> npt.NDArray[np.bool_]:
        f = np.asarray(flag, dtype=bool)
        return (codes >= 0) & f[np.maximum(codes, 0)]

    fwd = np.flatnonzero(win & by_name([c == "DistributedDataParallel.forward" for c in cats]))
    if fwd.size == 0:
        return iv.empty(), 0
    parts = win & by_name([bool(_DDP_PARTS.match(c) or _DDP_SYNC.search(c)) for c in cats])
    bcast = by_name([c == "c10d::broadcast_" for c in cats])
    spans_s, spans_e = [], []
    n_bcast = 0
    for k in fwd:
        inside = parts & (htid == htid[k]) & (hs >= hs[k]) & (he <= he[k])
        if not inside.any():
            continue
        n_bcast += int(np.sum(inside & bcast))
        spans_s.append(float(hs[inside].min()))
        spans_e.append(float(he[inside].max()))
    if not spans_s:
        return iv.empty(), 0
    return iv.clip(iv.union(np.array(spans_s), np.array(spans_e)), ctx.lo_us, ctx.hi_us), n_bcast


def ddp_buffer_sync(ctx: RuleContext, per_step: int | None) -> DdpBufferSync | None:
    """DDP's per-forward buffer broadcast: ``broadcasts`` (count), ``host_us`` (the spans
    of :func:`ddp_buffer_spans`) and ``lost_us`` (lost time inside those spans), with
    ``*_per_step``; ``None`` when not seen."""
    spans, n_bcast = ddp_buffer_spans(ctx)
    if spans[0].size == 0:
        return None
    host_us = iv.total(spans)
    lost_us = iv.total(iv.intersect(ctx.lost, spans))
    return DdpBufferSync(
        broadcasts=n_bcast,
        host_us=host_us,
        lost_us=lost_us,
        host_us_per_step=host_us / per_step if per_step else None,
        lost_us_per_step=lost_us / per_step if per_step else None,
    )


def trust(ctx: RuleContext) -> TrustFacts:
    """Whether Python stacks were recorded, how slow trivial ops run, the runtime calls and
    the share of them whose device work is in the trace, and the share of device work whose
    launch call is (:class:`TrustFacts`)."""
    host, dev = ctx.trace.host_cols, ctx.trace.device_cols
    kinds = host["kind"]
    is_empty = np.flatnonzero(host.labels("name") == "aten::empty")
    empty = (kinds == int(Kind.OP)) & np.isin(host.codes("name"), is_empty)
    durs = (host["end_us"] - host["start_us"])[empty]
    runtime = kinds == int(Kind.RUNTIME)
    corr = dev["correlation"]
    hc = host["correlation"][runtime]
    n_rt = int(runtime.sum())
    return TrustFacts(
        python_stacks=ctx.trace.python_stacks or bool((kinds == int(Kind.PYTHON)).any()),
        # Framework timers (op-level timelines) record no launch calls: none is missing.
        launches_expected=ctx.trace.holds.launch_calls,
        empty_op_median_us=float(np.median(durs)) if durs.size else None,
        runtime_calls=n_rt,
        runtime_calls_matched_share=float(np.mean(np.isin(hc, corr[corr >= 0]))) if n_rt else None,
        launch_matched_share=ctx.launches.matched_share,
    )


def trust_warnings(f: TrustFacts) -> tuple[Notice, ...]:
    """Warnings for the rank from :func:`trust`'s facts, each with its code
    (:mod:`gpuprof.model.notice`: ``trust.*``)."""
    out = []
    if f.python_stacks:
        out.append(Notice(
            notice.PYTHON_STACKS,
            "the trace recorded Python stacks (with_stack=True): the profiler slows the host, so host "
            "time and host-bound estimates may be inflated",
        ))
    empty = f.empty_op_median_us
    if empty is not None and empty > SLOW_EMPTY_US:
        out.append(Notice(
            notice.SLOW_HOST,
            f"host ops run slow (median aten::empty {empty:.0f} µs, normally a few µs): the profiler itself "
            "(record_shapes, with_stack, profile_memory) or a busy CPU may inflate host time",
        ))
    n_rt, matched = f.runtime_calls, f.runtime_calls_matched_share
    launch = f.launch_matched_share
    if n_rt >= FILTERED_MIN_RUNTIME_CALLS and matched is not None and matched >= 0.999:
        out.append(Notice(
            notice.FILTERED_TRACE,
            "the trace looks filtered or sampled (every runtime call launched device work; none of the usual "
            "event/stream calls): ops or kernels left out may show as idle time",
        ))
    elif launch is not None and launch < 0.5 and f.launches_expected:
        out.append(Notice(
            notice.FEW_LAUNCHES,
            f"only {100 * launch:.0f}% of device work has its launch call in the trace (filtered or sampled?): "
            "host-side causes cannot be told apart for the rest",
        ))
    return tuple(out)


__all__ = [
    "FILTERED_MIN_RUNTIME_CALLS",
    "SLOW_EMPTY_US",
    "DdpBufferSync",
    "TrustFacts",
    "ddp_buffer_spans",
    "ddp_buffer_sync",
    "host_wait_in_launch_share",
    "trust",
    "trust_warnings",
    "workload",
]

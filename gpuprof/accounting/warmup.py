"""A first profiled step that is warm-up, and where a rank's allocator calls fall by step.

A profiler started with the job records its warm-up as a step: the caching allocator's
first ``cudaMalloc``/``hipMalloc`` calls, cuDNN trying every convolution algorithm once
(``torch.backends.cudnn.benchmark``), compilation. Counted as training, one such step of
10 s beside steps of 200 ms reads as "stop allocator churn, 65 %". Steady-state allocator
churn looks the other way round: calls in every step (the caching allocator disabled,
``PYTORCH_NO_CUDA_MEMORY_CACHING=1`` / ``PYTORCH_NO_HIP_MEMORY_CACHING=1``, or
``empty_cache()`` each step).

Facts (``RankSummary.facts``; ``None`` when unknown, e.g. with fewer than two steps):

``first_step_ratio`` (float | None)
    the window's first step's duration over the median of the other steps.
``first_step_top_op`` (str | None), ``first_step_top_op_us`` (float | None)
    the longest host op of that first step (step markers aside), and its duration.
``alloc_first_step_share`` (float | None)
    share of the rank's allocator time (union of the calls, in the window) inside its
    first step.
``alloc_steps`` (int | None)
    how many of the window's steps have an allocator call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gpuprof.accounting.rules.context import RuleContext
from gpuprof.model import intervals as iv
from gpuprof.model.timeline import Category, Step
from gpuprof.util import phrases

# A first step this many times the median of the others is warm-up, not a step like them.
WARMUP_RATIO = 3.0


def warmup_facts(ctx: RuleContext, steps: Sequence[Step]) -> dict[str, Any]:
    """The module's facts for one rank's window and steps."""
    out: dict[str, Any] = {
        "first_step_ratio": None,
        "first_step_top_op": None,
        "first_step_top_op_us": None,
        "alloc_first_step_share": None,
        "alloc_steps": None,
    }
    if len(steps) < 2:
        return out
    first = steps[0]
    rest = float(np.median([s.duration_us for s in steps[1:]]))
    out["first_step_ratio"] = first.duration_us / rest if rest > 0 else None
    host = ctx.trace.host_cols
    hs, he, cat = host["start_us"], host["end_us"], host["category"]
    # The step's own marker (ProfilerStep#N) spans it: it is no op of the step.
    inside = (hs >= first.start_us) & (he <= first.end_us) & (cat != int(Category.STEP))
    if inside.any():
        dur = np.where(inside, he - hs, -1.0)
        top = int(np.argmax(dur))
        out["first_step_top_op"] = str(host.labels("name")[host.codes("name")[top]]) if host.codes("name")[top] >= 0 else None
        out["first_step_top_op_us"] = float(dur[top])
    alloc = cat == int(Category.ALLOC)
    if alloc.any():
        calls = ctx.clip(iv.union(hs[alloc], he[alloc]))
        total = iv.total(calls)
        if total > 0:
            in_first = iv.total(iv.clip(calls, first.start_us, first.end_us))
            out["alloc_first_step_share"] = in_first / total
        starts = hs[alloc]
        out["alloc_steps"] = sum(1 for s in steps if bool(((starts >= s.start_us) & (starts < s.end_us)).any()))
    return out


def warmup_warning(facts: dict[str, Any], steps: Sequence[Step]) -> tuple[str, ...]:
    """One line when the first step is warm-up (:data:`WARMUP_RATIO`)."""
    ratio = facts.get("first_step_ratio")
    if ratio is None or ratio < WARMUP_RATIO or len(steps) < 2:
        return ()
    op, op_us = facts.get("first_step_top_op"), facts.get("first_step_top_op_us")
    longest = f"; its longest op, {op}, takes {_dur(op_us)}" if op and op_us else ""
    line = (
        f"step {steps[0].number}, the first profiled, takes {_dur(steps[0].duration_us)}, {ratio:.1f}x the median "
        f"of the others{longest}: it is warm-up (first allocations, cuDNN autotuning, compilation), not a "
        "step like the others; profile after it (torch.profiler.schedule(wait=1, warmup=1, active=3)) or "
        f"leave it out with --steps {steps[1].number}:"
    )
    return (line,)


def _dur(us: float) -> str:
    return phrases.duration(us)


__all__ = ["WARMUP_RATIO", "warmup_facts", "warmup_warning"]

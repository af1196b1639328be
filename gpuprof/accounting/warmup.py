"""A first profiled step that is warm-up, and where a rank's allocator calls fall by step.

A profiler started with the job records its warm-up as a step: the caching allocator's
first ``cudaMalloc``/``hipMalloc`` calls, cuDNN trying every convolution algorithm once
(``torch.backends.cudnn.benchmark``), compilation. Counted as training, one such step of
10 s beside steps of 200 ms reads as "stop allocator churn, 65 %". Steady-state allocator
churn looks the other way round: calls in every step (the caching allocator disabled,
``PYTORCH_NO_CUDA_MEMORY_CACHING=1`` / ``PYTORCH_NO_HIP_MEMORY_CACHING=1``, or
``empty_cache()`` each step).

Its facts (:class:`WarmupFacts`, ``RankFacts.warmup``) are ``None`` when unknown, e.g.
with fewer than two steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuprof.accounting.rules.context import RuleContext
from gpuprof.model import intervals as iv
from gpuprof.model.timeline import Category, Step
from gpuprof.util import phrases

# A first step this many times the median of the others is warm-up, not a step like them.
WARMUP_RATIO = 3.0


@dataclass(frozen=True)
class WarmupFacts:
    """The first step against the others, and where the allocator calls fall by step
    (``None``: unknown, e.g. with fewer than two steps)."""

    # The window's first step's duration over the median of the other steps.
    first_step_ratio: float | None = None
    # The longest host op of that first step (step markers aside), and its duration, µs.
    first_step_top_op: str | None = None
    first_step_top_op_us: float | None = None
    # Share of the rank's allocator time (union of the calls, in the window) inside its first step.
    alloc_first_step_share: float | None = None
    # How many of the window's steps have an allocator call.
    alloc_steps: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"first_step_ratio": self.first_step_ratio, "first_step_top_op": self.first_step_top_op,
                "first_step_top_op_us": self.first_step_top_op_us,
                "alloc_first_step_share": self.alloc_first_step_share, "alloc_steps": self.alloc_steps}


def warmup_facts(ctx: RuleContext, steps: Sequence[Step]) -> WarmupFacts:
    """The module's facts for one rank's window and steps."""
    if len(steps) < 2:
        return WarmupFacts()
    first = steps[0]
    rest = float(np.median([s.duration_us for s in steps[1:]]))
    top_op: str | None = None
    top_op_us: float | None = None
    alloc_share: float | None = None
    alloc_steps: int | None = None
    host = ctx.trace.host_cols
    hs, he, cat = host["start_us"], host["end_us"], host["category"]
    # The step's own marker (ProfilerStep#N) spans it: it is no op of the step.
    inside = (hs >= first.start_us) & (he <= first.end_us) & (cat != int(Category.STEP))
    if inside.any():
        dur = np.where(inside, he - hs, -1.0)
        top = int(np.argmax(dur))
        top_op = str(host.labels("name")[host.codes("name")[top]]) if host.codes("name")[top] >= 0 else None
        top_op_us = float(dur[top])
    alloc = cat == int(Category.ALLOC)
    if alloc.any():
        calls = ctx.clip(iv.union(hs[alloc], he[alloc]))
        total = iv.total(calls)
        if total > 0:
            alloc_share = iv.total(iv.clip(calls, first.start_us, first.end_us)) / total
        starts = hs[alloc]
        alloc_steps = sum(1 for s in steps if bool(((starts >= s.start_us) & (starts < s.end_us)).any()))
    return WarmupFacts(
        first_step_ratio=first.duration_us / rest if rest > 0 else None,
        first_step_top_op=top_op,
        first_step_top_op_us=top_op_us,
        alloc_first_step_share=alloc_share,
        alloc_steps=alloc_steps,
    )


def warmup_warning(facts: WarmupFacts, steps: Sequence[Step]) -> tuple[str, ...]:
    """One line when the first step is warm-up (:data:`WARMUP_RATIO`)."""
    ratio = facts.first_step_ratio
    if ratio is None or ratio < WARMUP_RATIO or len(steps) < 2:
        return ()
    op, op_us = facts.first_step_top_op, facts.first_step_top_op_us
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


__all__ = ["WARMUP_RATIO", "WarmupFacts", "warmup_facts", "warmup_warning"]

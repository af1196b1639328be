"""Advice for pipeline-parallel jobs: a slow stage, and the schedule's own bubble.

Savings follow :mod:`gpuprof.advice.savings`: a shorter pipeline span shortens every rank's
step. The findings are worded by :mod:`gpuprof.advice.phrasebook.pipeline`.

``pipeline-imbalance``  one stage computes much longer per microbatch than the others
``pipeline-bubble``     few microbatches for the number of stages (fill and drain)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpuprof.advice.context import AdviceContext, advisor
from gpuprof.advice.finding import Fact, Finding, said
from gpuprof.advice.replayed import replayed
from gpuprof.advice.savings import savings_pct
from gpuprof.job.findings import PipelineFindings, StageRow
from gpuprof.model.report import Cause, RankReport

# Below this share of the job step time a finding is not worth a recommendation.
MIN_SAVINGS_PCT = 1.0
# A pipeline stage this much slower than the median stage is worth rebalancing.
IMBALANCE_RATIO = 1.15
# Below this theoretical bubble, more microbatches would gain too little to advise.
MIN_THEORETICAL_BUBBLE = 0.1


def _pipeline_removed(reports: Sequence[RankReport], saved_us_per_step: float) -> dict[int, float]:
    return {r.rank: saved_us_per_step * max(r.steps, 1) for r in reports}


def _imbalance(ctx: AdviceContext, pipe: PipelineFindings, rows: list[StageRow]) -> Finding | None:
    """One stage computes much longer per microbatch than the others: the balanced-stages
    replay, else the bottleneck model of the span."""
    reports = list(ctx.reports)
    span = pipe.span_us
    top = pipe.slowest
    ratio = top.ratio if top is not None else None
    if not rows or top is None or ratio is None or float(ratio) < IMBALANCE_RATIO or not span:
        return None
    slow = int(top.stage)
    slow_row = next(r for r in rows if r.stage == slow)
    others = [r for r in rows if r.stage != slow]
    modelled = float(top.modelled_span_us)
    balanced = float(top.modelled_balanced_span_us)
    saved = float(span) * (1.0 - balanced / modelled) if modelled > 0 else 0.0
    got = replayed(ctx, "balanced_stages")
    pct = got.pct if got is not None else savings_pct(reports, _pipeline_removed(reports, saved))
    if pct < MIN_SAVINGS_PCT:
        return None
    theory = pipe.theoretical_bubble_fraction
    o_f = float(np.median([r.forward_per_microbatch_us for r in others]))
    o_b = float(np.median([r.backward_per_microbatch_us for r in others]))
    o_bubble = [float(r.bubble_fraction) for r in others]
    idle = (100 * min(o_bubble), 100 * max(o_bubble))
    compute_us = float(slow_row.compute_per_microbatch_us or 0.0)
    forward_us = float(slow_row.forward_per_microbatch_us or 0.0)
    backward_us = float(slow_row.backward_per_microbatch_us or 0.0)
    evidence = [
        said("pipeline.slow_stage", stage=slow, ratio=float(ratio), compute_us=compute_us, forward_us=forward_us,
             backward_us=backward_us, others_forward_us=o_f, others_backward_us=o_b),
        said("pipeline.others_idle", idle_pct=idle)
        if theory is None
        else said("pipeline.others_idle_theory", idle_pct=idle, theory_pct=100 * float(theory),
                  schedule=pipe.schedule, stages=int(pipe.stages or 0),
                  microbatches=pipe.microbatches, stage=slow,
                  stage_idle_pct=100 * float(slow_row.bubble_fraction)),
        got.said if got is not None else said("pipeline.balanced_span", span_us=float(span), after_us=float(span) - saved),
    ]
    facts: dict[str, Fact] = {
        "slow_stage": slow,
        "stage_ratio": float(ratio),
        "compute_per_microbatch_us": compute_us,
        "forward_per_microbatch_us": forward_us,
        "backward_per_microbatch_us": backward_us,
        "others_forward_per_microbatch_us": o_f,
        "others_backward_per_microbatch_us": o_b,
        "others_min_idle_pct": idle[0],
        "others_max_idle_pct": idle[1],
        "span_us": float(span),
        "balanced_span_us": float(span) - saved,
        **(got.facts if got is not None else {}),
    }
    return Finding("pipeline-imbalance", Cause.PIPELINE_BUBBLE, pct, said("title.pipeline-imbalance", stage=slow,
                   ratio=float(ratio)), tuple(evidence), (said("pipeline.imbalance_actions", stage=slow),),
                   ranks=tuple(int(r) for r in top.ranks),
                   whatif=got.name if got is not None else None, facts=facts)


def _bubble(ctx: AdviceContext, pipe: PipelineFindings, rows: list[StageRow]) -> Finding | None:
    """Few microbatches for the stages: doubling the microbatches (half the size) or
    interleaving 2 chunks halves the fill and drain."""
    reports = list(ctx.reports)
    p = int(pipe.stages or 0)
    m = pipe.microbatches
    theory = pipe.theoretical_bubble_fraction
    if theory is None or not m or p <= 1 or not rows:
        return None
    t_mb = float(np.median([float(r.compute_per_microbatch_us or 0.0) for r in rows]))
    chunks = int(pipe.chunks or 1)
    # The span shrinks by (p-1) * t_mb / 2 (t_mb: per-microbatch compute).
    saved = (p - 1) * t_mb / (2.0 * chunks)
    got = replayed(ctx, "double_microbatches")
    pct = got.pct if got is not None else savings_pct(reports, _pipeline_removed(reports, saved))
    if pct < MIN_SAVINGS_PCT or float(theory) < MIN_THEORETICAL_BUBBLE:
        return None
    source = pipe.microbatches_source
    schedule = pipe.schedule
    bubbles = tuple((r.stage, 100 * float(r.bubble_fraction)) for r in pipe.per_stage)
    theory_pct = 100 * float(theory)
    evidence = (
        said("pipeline.schedule_chunks", schedule=schedule, stages=p, microbatches=m, chunks=chunks, theory_pct=theory_pct)
        if chunks > 1
        else said("pipeline.schedule", schedule=schedule, stages=p, microbatches=m, theory_pct=theory_pct),
        said("pipeline.bubbles", bubbles=bubbles),
        got.said if got is not None else said("pipeline.halved", saved_us=saved, stages_less_one=p - 1, microbatch_us=t_mb),
        *((said("pipeline.counted_from", source=source),) if source else ()),
    )
    facts: dict[str, Fact] = {
        "stages": p,
        "microbatches": m,
        "chunks": chunks,
        "schedule": schedule,
        "theoretical_bubble_pct": theory_pct,
        "max_bubble_pct": max(b for _, b in bubbles) if bubbles else None,
        "compute_per_microbatch_us": t_mb,
        **(got.facts if got is not None else {}),
    }
    # Fewer than 4 microbatches per stage is few; with more, the advice is to double them.
    few = int(m) < 4 * p
    title = said("title.pipeline-bubble" if few else "title.pipeline-bubble-enough", microbatches=m, stages=p)
    actions = (
        said("pipeline.bubble_actions", min_microbatches=4 * p)
        if few
        else said("pipeline.bubble_actions_more", microbatches=m, min_microbatches=2 * int(m))
    )
    return Finding("pipeline-bubble", Cause.PIPELINE_BUBBLE, pct, title, evidence, (actions,),
                   ranks=tuple(sorted(int(r) for row in pipe.per_stage for r in row.ranks)),
                   whatif=got.name if got is not None else None, facts=facts)


@advisor
def pipeline_advice(ctx: AdviceContext) -> list[Finding]:
    pipe = ctx.cross.pipeline
    if pipe is None or not ctx.reports:
        return []
    rows = [r for r in pipe.per_stage if r.compute_per_microbatch_us is not None]
    return [f for f in (_imbalance(ctx, pipe, rows), _bubble(ctx, pipe, rows)) if f is not None]

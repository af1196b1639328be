"""Advice for pipeline-parallel jobs: a slow stage, and the schedule's own bubble.

Registered through :mod:`gpuprof.advice.distributed` (which imports this module). Savings
follow :mod:`gpuprof.advice.savings`: a shorter pipeline span shortens every rank's step.

``pipeline-imbalance``  one stage computes much longer per microbatch than the others
``pipeline-bubble``     few microbatches for the number of stages (fill and drain)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gpuprof.advice.context import AdviceContext, advisor
from gpuprof.advice.replayed import replayed
from gpuprof.advice.savings import savings_pct
from gpuprof.model.report import Cause, RankReport, Recommendation
from gpuprof.util.phrases import duration, pct_range

# Below this share of the job step time a finding is not worth a recommendation.
MIN_SAVINGS_PCT = 1.0
# A pipeline stage this much slower than the median stage is worth rebalancing.
IMBALANCE_RATIO = 1.15
# Below this theoretical bubble, more microbatches would gain too little to advise.
MIN_THEORETICAL_BUBBLE = 0.1


def _ms(us: float) -> str:
    return duration(us)  # the one duration formatter of every report (gpuprof.util.phrases)


def _pipeline_removed(reports: Sequence[RankReport], saved_us_per_step: float) -> dict[int, float]:
    return {r.rank: saved_us_per_step * max(r.steps, 1) for r in reports}


@advisor
def pipeline_advice(ctx: AdviceContext) -> list[Recommendation]:
    pipe: Mapping[str, Any] | None = ctx.cross.get("pipeline")
    reports = list(ctx.reports)
    if not pipe or not reports:
        return []
    out: list[Recommendation] = []
    p = int(pipe.get("stages") or 0)
    m = pipe.get("microbatches")
    theory = pipe.get("theoretical_bubble_fraction")
    rows = [r for r in pipe.get("per_stage", []) if "compute_per_microbatch_us" in r]
    span = pipe.get("span_us")
    schedule = pipe.get("schedule", "unknown")
    ratio = pipe.get("slowest_stage_ratio")
    if rows and ratio is not None and float(ratio) >= IMBALANCE_RATIO and span:
        slow = int(pipe["slowest_stage"])
        slow_row = next(r for r in rows if r["stage"] == slow)
        others = [r for r in rows if r["stage"] != slow]
        modelled = float(pipe["modelled_span_us"])
        balanced = float(pipe["modelled_balanced_span_us"])
        saved = float(span) * (1.0 - balanced / modelled) if modelled > 0 else 0.0
        got = replayed(ctx, "balanced_stages")
        pct = got.pct if got is not None else savings_pct(reports, _pipeline_removed(reports, saved))
        if pct >= MIN_SAVINGS_PCT:
            o_f = float(np.median([r["forward_per_microbatch_us"] for r in others]))
            o_b = float(np.median([r["backward_per_microbatch_us"] for r in others]))
            o_bubble = [float(r["bubble_fraction"]) for r in others]
            evidence = [
                (
                    f"stage {slow}'s compute per microbatch is {_ms(float(slow_row['compute_per_microbatch_us']))}, "
                    f"{float(ratio):.2f}x the median of the other stages (forward {_ms(float(slow_row['forward_per_microbatch_us']))} "
                    f"vs {_ms(o_f)}, backward {_ms(float(slow_row['backward_per_microbatch_us']))} vs {_ms(o_b)})"
                ),
                f"the other stages sit idle {pct_range(100 * min(o_bubble), 100 * max(o_bubble))} of the pipeline span "
                f"waiting for it, against {100 * float(theory):.0f}% that a balanced {schedule} schedule with "
                f"p={p}, m={m} leaves; stage {slow} itself idles {100 * float(slow_row['bubble_fraction']):.0f}%"
                if theory is not None
                else f"the other stages sit idle {pct_range(100 * min(o_bubble), 100 * max(o_bubble))} of the pipeline span",
                got.line
                if got is not None
                else (
                    f"with the same total compute spread evenly the pipeline span would drop from about {_ms(float(span))} "
                    f"to {_ms(float(span) - saved)} per step (bottleneck model sum(t) + (m-1) max(t))"
                ),
            ]
            out.append(
                Recommendation(
                    id="pipeline-imbalance",
                    category=Cause.PIPELINE_BUBBLE,
                    title=f"Pipeline stage {slow} is {float(ratio):.1f}x slower than the others: move layers off it",
                    estimated_savings_pct=pct,
                    ranks=tuple(int(r) for r in pipe.get("slowest_stage_ranks", ())),
                    evidence=tuple(evidence),
                    actions=(
                        (
                            f"Rebalance layers across stages: give stage {slow} fewer transformer layers to pay for what "
                            "only it runs (embedding, output head, loss) -- e.g. Megatron's "
                            "--decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers, or an uneven "
                            "split_spec in torch.distributed.pipelining."
                        ),
                        "Re-profile after the change: the stages' compute per microbatch should be within ~10% of each other.",
                    ),
                    whatif=got.name if got is not None else None,
                )
            )
    if theory is not None and m and p > 1 and rows:
        t_mb = float(np.median([float(r["compute_per_microbatch_us"]) for r in rows]))
        chunks = int(pipe.get("chunks") or 1)
        # Doubling the microbatches (half the size) or interleaving 2 chunks halves the
        # fill/drain: the span shrinks by (p-1) * t_mb / 2 (t_mb: per-microbatch compute).
        saved = (p - 1) * t_mb / (2.0 * chunks)
        got_mb = replayed(ctx, "double_microbatches")
        pct = got_mb.pct if got_mb is not None else savings_pct(reports, _pipeline_removed(reports, saved))
        source = pipe.get("microbatches_source")
        if pct >= MIN_SAVINGS_PCT and float(theory) >= MIN_THEORETICAL_BUBBLE:
            out.append(
                Recommendation(
                    id="pipeline-bubble",
                    category=Cause.PIPELINE_BUBBLE,
                    title=f"Only {m} microbatches for {p} pipeline stages: use more microbatches or an interleaved schedule",
                    estimated_savings_pct=pct,
                    ranks=tuple(sorted(int(r) for row in pipe.get("per_stage", []) for r in row["ranks"])),
                    evidence=(
                        f"{schedule} schedule with p={p} stages, m={m} microbatches"
                        + (f", v={chunks} chunks" if chunks > 1 else "")
                        + f": even with balanced stages {100 * float(theory):.0f}% of the pipeline span is fill and drain",
                        "measured bubble per stage: "
                        + ", ".join(
                            f"stage {r['stage']} {100 * float(r['bubble_fraction']):.0f}%"
                            for r in pipe["per_stage"]
                        ),
                        got_mb.line
                        if got_mb is not None
                        else f"halving the bubble saves about {_ms(saved)} per step ({p - 1} x {_ms(t_mb)} / 2)",
                        *((f"microbatches counted from the {source}",) if source else ()),
                    ),
                    actions=(
                        (
                            f"Raise the number of microbatches to at least {4 * p} (smaller micro-batch size or more "
                            "gradient-accumulation steps at the same global batch)."
                        ),
                        (
                            "Use an interleaved schedule (virtual pipeline stages: Megatron "
                            "--num-layers-per-virtual-pipeline-stage, torch.distributed.pipelining "
                            "ScheduleInterleaved1F1B) or a zero-bubble schedule (ScheduleInterleavedZeroBubble)."
                        ),
                    ),
                    whatif=got_mb.name if got_mb is not None else None,
                )
            )
    return out

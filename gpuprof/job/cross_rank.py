"""Job-level analysis across ranks: from compact per-rank summaries to claims and findings.

Steps, each in its own module:

1. :mod:`gpuprof.job.collectives` matches every collective across ranks, aligns the
   ranks' clocks on them (:mod:`gpuprof.job.clocks`), and measures how long each rank
   waited in each one for the last member (in op-level timelines from its last activity
   before the op, :mod:`gpuprof.job.untimed`): those waits are claimed as ``straggler`` on
   the waiting rank's own clock. In op-level timelines :mod:`gpuprof.job.barriers` also
   finds barriers before timer ops and claims the waits there.
2. :mod:`gpuprof.job.pipeline_parallel` finds pipeline stages and claims the time a
   stage waits for a neighbour as ``pipeline_bubble``.
3. :mod:`gpuprof.job.stragglers` names the stragglers (the ranks others wait for) and the
   phase that makes them slow; :mod:`gpuprof.job.linkspeed` measures the links' bandwidth.
4. Here: the critical rank of each step and the compute imbalance across ranks and stages,
   the findings put together, and the job model built (:mod:`gpuprof.job.assemble`) and
   replayed once per what-if (:mod:`gpuprof.job.whatifs`).

The findings are typed records (:class:`gpuprof.job.findings.JobFindings`: each rank's
waits, the named stragglers and how the waits were measured, the rank that set the pace of
each step, the compute imbalance, barrier waits, the pipeline, the collectives' bandwidth,
the what-if replays); their ``to_dict`` is the report's ``job`` section (docs/report.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from gpuprof.accounting.summary import RankSummary
from gpuprof.job.assemble import build_job_model
from gpuprof.job.barriers import barrier_findings, barrier_waits
from gpuprof.job.collectives import match_collectives, own_pipeline_claims, rank_totals, wait_claims
from gpuprof.job.findings import (
    ComputeImbalance,
    CriticalStep,
    JobFindings,
    RankImbalance,
    RankRow,
    StageImbalance,
)
from gpuprof.job.linkspeed import job_bandwidth
from gpuprof.job.opdag import wait_claims as opdag_wait_claims
from gpuprof.job.pipeline_parallel import PipelineResult, analyze_pipeline
from gpuprof.job.stragglers import name_stragglers
from gpuprof.job.whatif_results import WhatIfResults, run_whatifs
from gpuprof.model import intervals as iv
from gpuprof.model.intervals import Intervals
from gpuprof.model.report import Cause


@dataclass(frozen=True)
class CrossRankResult:
    """``claims[rank][cause]``: intervals (on that rank's own clock) claimed by job-level
    rules; ``findings``: what the job-level analysis found, for the report and the advice."""

    claims: Mapping[int, Mapping[Cause, Intervals]] = field(default_factory=dict)
    findings: JobFindings = field(default_factory=JobFindings)
    # The job model replayed with each cause removed (None: nothing could be replayed).
    whatifs: WhatIfResults | None = None


def _per_step_lost(s: RankSummary, claim: Intervals) -> dict[int, float]:
    if not s.steps:
        return {-1: iv.total(claim)}
    st = np.array([x.start_us for x in s.steps])
    en = np.array([x.end_us for x in s.steps])
    got = iv.overlap_with_each((st, en), claim)
    return {x.number: float(g) for x, g in zip(s.steps, got)}


def _critical(summaries: Sequence[RankSummary], waited: Mapping[int, Intervals]) -> list[CriticalStep]:
    table: dict[int, dict[int, float]] = {}
    for s in summaries:
        for step, us in _per_step_lost(s, waited.get(s.rank, iv.empty())).items():
            table.setdefault(step, {})[s.rank] = us
    out = []
    for step in sorted(table):
        row = table[step]
        if len(row) < 2:
            continue
        rank = min(row, key=lambda r: (row[r], r))
        out.append(
            CriticalStep(
                step=step,
                rank=rank,
                waited_us=round(row[rank], 3),
                others_median_waited_us=round(float(np.median([v for r, v in row.items() if r != rank])), 3),
            )
        )
    return out


def _imbalance(summaries: Sequence[RankSummary], pipe: PipelineResult | None) -> ComputeImbalance:
    ranks = stages = None
    per = {s.rank: iv.total(s.compute) / s.step_count for s in summaries if s.window_us > 0}
    if len(per) >= 2:
        med = float(np.median(list(per.values())))
        top = max(per, key=lambda r: per[r])
        ranks = RankImbalance(
            max_over_median=round(per[top] / med, 4) if med > 0 else None,
            max_rank=top,
            max_compute_us_per_step=round(per[top], 3),
            median_compute_us_per_step=round(med, 3),
        )
    if pipe is not None:
        rows = [r for r in pipe.findings.per_stage if r.compute_per_microbatch_us is not None]
        if len(rows) >= 2:
            vals = [float(r.compute_per_microbatch_us or 0.0) for r in rows]
            med = float(np.median(vals))
            top_row = rows[int(np.argmax(vals))]
            # Against the other stages, as the pipeline's slowest_stage_ratio (one number
            # for one stage in every part of the report).
            others = float(np.median([x for i, x in enumerate(vals) if i != int(np.argmax(vals))]))
            stages = StageImbalance(
                max_over_median=round(max(vals) / med, 4) if med > 0 else None,
                max_over_others_median=round(max(vals) / others, 4) if others > 0 else None,
                max_stage=top_row.stage,
                max_compute_per_microbatch_us=round(max(vals), 3),
                median_compute_per_microbatch_us=round(med, 3),
            )
    return ComputeImbalance(across_ranks=ranks, across_stages=stages)


def analyze_job(summaries: Sequence[RankSummary]) -> CrossRankResult:
    """Claims (``straggler``, ``pipeline_bubble``) and job-level findings for a job."""
    active = [s for s in summaries if s.empty_reason is None and s.window_us > 0]
    if not active:
        return CrossRankResult()
    matched = match_collectives(active)
    waits = wait_claims(matched)
    barriers = barrier_waits(active, matched.offsets_us)
    if barriers is not None:
        for rank, b in barriers.claims.items():
            w = waits.get(rank)
            waits[rank] = (
                b if w is None else iv.union(np.concatenate((w[0], b[0])), np.concatenate((w[1], b[1])))
            )
    pipe = analyze_pipeline(active, matched.offsets_us) if len(active) >= 2 else None
    if pipe is not None:
        # Waiting in a collective for another stage of one's own pipeline replica is the
        # pipeline's drain (see gpuprof.job.untimed).
        for rank, own in own_pipeline_claims(matched).items():
            prior = pipe.claims.get(rank)
            merged = (
                own
                if prior is None
                else iv.union(np.concatenate((prior[0], own[0])), np.concatenate((prior[1], own[1])))
            )
            pipe = replace(pipe, claims={**pipe.claims, rank: merged})

    claims: dict[int, dict[Cause, Intervals]] = {}
    for rank, w in waits.items():
        claims.setdefault(rank, {})[Cause.STRAGGLER] = w
    if pipe is not None:
        for rank, b in pipe.claims.items():
            if b[0].size:
                claims.setdefault(rank, {})[Cause.PIPELINE_BUBBLE] = b

    stragglers, info = name_stragglers(active, matched, pipe.claims if pipe is not None else None)
    slow = {x.rank for x in stragglers}
    totals = rank_totals(matched)
    per_rank: dict[int, RankRow] = {}
    for s in active:
        wait = float(totals["exposed_wait_us"].get(s.rank, 0.0))
        hidden = float(totals["wait_us"].get(s.rank, 0.0)) - wait
        stage = pipe.stage_of.get(s.rank) if pipe is not None else None
        stage_row = (
            next((r for r in pipe.findings.per_stage if r.stage == stage), None)
            if pipe is not None and stage is not None else None
        )
        per_rank[s.rank] = RankRow(
            straggler_wait_us=round(wait, 3),
            hidden_wait_us=round(max(hidden, 0.0), 3),
            straggler_wait_us_per_step=round(wait / s.step_count, 3),
            is_straggler=s.rank in slow,
            last_arrivals=int(totals["last_calls"].get(s.rank, 0)),
            collectives=int(totals["calls"].get(s.rank, 0)),
            clock_offset_us=round(float(matched.offsets_us.get(s.rank, 0.0)), 3),
            barrier_wait_us_per_step=(
                round(barriers.wait_us.get(s.rank, 0.0) / s.step_count, 3) if barriers is not None else None
            ),
            stage=stage,
            bubble_fraction=stage_row.bubble_fraction if stage_row is not None else None,
        )

    waited: dict[int, Intervals] = {}
    for s in active:
        parts = [c for c in (waits.get(s.rank), pipe.claims.get(s.rank) if pipe else None) if c is not None]
        if parts:
            waited[s.rank] = iv.union(
                np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
            )

    findings = JobFindings(
        measured=True,
        per_rank=per_rank,
        stragglers=stragglers,
        straggler_analysis=info,
        critical_rank_per_step=tuple(_critical(active, waited)) if len(active) >= 2 else (),
        compute_imbalance=_imbalance(active, pipe),
        barrier_waits=barrier_findings(barriers, active, matched.offsets_us) if barriers is not None else None,
        pipeline=pipe.findings if pipe is not None else None,
        collective_bandwidth=job_bandwidth(active, matched.calls_table if matched.n_calls else None),
    )
    model = build_job_model(
        active,
        matched,
        matched.offsets_us,
        pipe.stage_of if pipe is not None else {},
        pipe.findings if pipe is not None else None,
        barriers.points_us if barriers is not None else (),
        pipe.bubble_us_per_step if pipe is not None else None,
    )
    if model is not None and model.dag is not None:
        # The untimed waits before ops that are not communication (op-level timelines).
        for rank, by_cause in opdag_wait_claims(model.dag, active, matched.offsets_us).items():
            mine = claims.setdefault(rank, {})
            for cause, got in by_cause.items():
                prior = mine.get(cause)
                mine[cause] = got if prior is None else iv.union(
                    np.concatenate((prior[0], got[0])), np.concatenate((prior[1], got[1]))
                )
    whatifs = run_whatifs(model) if model is not None else None
    findings = replace(findings, whatif=whatifs)
    return CrossRankResult(claims=claims, findings=findings, whatifs=whatifs)

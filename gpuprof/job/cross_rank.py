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

Findings (all JSON-serializable), keys of :attr:`CrossRankResult.findings`:

``per_rank``           ``{rank: {...}}`` merged into each rank's JSON row: ``straggler_wait_us``
                       (waiting in collectives with no compute beside it; before precedence),
                       ``straggler_wait_us_per_step``, ``hidden_wait_us`` (waiting that compute
                       on another stream hid), ``is_straggler``, ``clock_offset_us``,
                       ``collectives`` (matched), ``last_arrivals`` (arrived last among those present),
                       and for pipeline stages ``stage``, ``bubble_fraction``.
``stragglers``         list of ``{rank, caused_wait_us_per_step, last_arrivals, collectives,
                       phase, phase_ratio, phase_excess_us_per_step, late_start_us,
                       gain_us_per_step, gains_us}``: ``gain_us_per_step`` is what the job's
                       critical path loses to that rank per step, the sum over the collectives
                       it arrives last at of its arrival minus the next-latest member's
                       (``gains_us`` lists them, largest first); a
                       straggler is a rank that arrives last at collectives and whose lateness
                       accounts for a fair share of everyone else's waiting.
``straggler_analysis`` how the waits were measured: collectives matched, clock offsets,
                       incomplete groups and why no straggler could be named;
                       ``world_size`` and ``world_size_note`` when the world size was
                       inferred from the collectives; ``arrivals``:
                       how lateness is spread over the complete collectives (``collectives``,
                       ``last_counts`` {rank: times last}, ``rotating``: no rank is last at
                       most of them, ``gain_us_per_step``: sum over collectives of the last
                       arrival minus the next-latest, per step), and ``early_starters``:
                       ranks that begin the step well before the others and wait for them
                       (``{rank, lead_us, lead_over_last_us, wait_us_per_step}``: lead over the
                       median rank and over the last rank to start); ``stragglers_gain_us_per_step``:
                       the critical-path gain per step if all named stragglers arrived with
                       the latest other member.
``critical_rank_per_step`` list of ``{step, rank, waited_us}``: the rank that waited least
                       (in collectives and pipeline bubbles) in that step, i.e. set the pace.
``compute_imbalance``  ``{across_ranks: {...}, across_stages: {...}}``: max over median of
                       compute per step (per microbatch for stages) and who is the max; for
                       stages also ``max_over_others_median`` (over the other stages' median,
                       the pipeline's ``slowest_stage_ratio``).
``barrier_waits``      op-level timelines only: waits at barriers (ops that start at the same
                       instant on every worker): ``barriers``, ``wait_us_per_step`` (measured,
                       before precedence), ``last_arrivals``, ``waited_for_ranks``,
                       ``last_activity`` (what the last arriver did just before, counted),
                       ``late_comm``: per op name, what the waited-for ranks communicate
                       between their last compute and the barriers (``name``, ``calls``,
                       ``median_us``, ``outliers`` (> 5x the median), ``outlier_us``,
                       ``outlier_barriers``, ``total_us``, ``only_late_ranks``: the
                       waiting ranks run no such op there, ``waiting_median_us``).
``pipeline``           see :func:`gpuprof.job.pipeline_parallel.analyze_pipeline`.
``collective_bandwidth`` ``{rank: {...}}`` for ranks whose collectives have known sizes:
                       achieved bus bandwidth against the link peak, see
                       :func:`gpuprof.job.linkspeed.rank_bandwidth`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gpuprof.accounting.summary import RankSummary
from gpuprof.job.assemble import build_job_model
from gpuprof.job.barriers import barrier_findings, barrier_waits
from gpuprof.job.collectives import match_collectives, own_pipeline_claims, rank_totals, wait_claims
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
    rules; ``findings``: JSON-serializable job-level facts for the report and the advice."""

    claims: Mapping[int, Mapping[Cause, Intervals]] = field(default_factory=dict)
    findings: Mapping[str, Any] = field(default_factory=dict)
    # The job model replayed with each cause removed (None: nothing could be replayed).
    whatifs: WhatIfResults | None = None


def _per_step_lost(s: RankSummary, claim: Intervals) -> dict[int, float]:
    if not s.steps:
        return {-1: iv.total(claim)}
    st = np.array([x.start_us for x in s.steps])
    en = np.array([x.end_us for x in s.steps])
    got = iv.overlap_with_each((st, en), claim)
    return {x.number: float(g) for x, g in zip(s.steps, got)}


def _critical(summaries: Sequence[RankSummary], waited: Mapping[int, Intervals]) -> list[dict[str, Any]]:
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
            {
                "step": step,
                "rank": rank,
                "waited_us": round(row[rank], 3),
                "others_median_waited_us": round(
                    float(np.median([v for r, v in row.items() if r != rank])), 3
                ),
            }
        )
    return out


def _imbalance(summaries: Sequence[RankSummary], pipe: PipelineResult | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    per = {s.rank: iv.total(s.compute) / s.step_count for s in summaries if s.window_us > 0}
    if len(per) >= 2:
        med = float(np.median(list(per.values())))
        top = max(per, key=lambda r: per[r])
        out["across_ranks"] = {
            "max_over_median": round(per[top] / med, 4) if med > 0 else None,
            "max_rank": top,
            "max_compute_us_per_step": round(per[top], 3),
            "median_compute_us_per_step": round(med, 3),
        }
    if pipe is not None:
        rows = [r for r in pipe.findings.get("per_stage", []) if "compute_per_microbatch_us" in r]
        if len(rows) >= 2:
            vals = [float(r["compute_per_microbatch_us"]) for r in rows]
            med = float(np.median(vals))
            top = rows[int(np.argmax(vals))]
            # Against the other stages, as the pipeline's slowest_stage_ratio (one number
            # for one stage in every part of the report).
            others = float(np.median([x for i, x in enumerate(vals) if i != int(np.argmax(vals))]))
            out["across_stages"] = {
                "max_over_median": round(max(vals) / med, 4) if med > 0 else None,
                "max_over_others_median": round(max(vals) / others, 4) if others > 0 else None,
                "max_stage": top["stage"],
                "max_compute_per_microbatch_us": round(max(vals), 3),
                "median_compute_per_microbatch_us": round(med, 3),
            }
    return out


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
    slow = {x["rank"] for x in stragglers}
    totals = rank_totals(matched)
    per_rank: dict[int, dict[str, Any]] = {}
    for s in active:
        wait = float(totals["exposed_wait_us"].get(s.rank, 0.0))
        hidden = float(totals["wait_us"].get(s.rank, 0.0)) - wait
        row: dict[str, Any] = {
            "straggler_wait_us": round(wait, 3),
            "hidden_wait_us": round(max(hidden, 0.0), 3),
            "straggler_wait_us_per_step": round(wait / s.step_count, 3),
            "is_straggler": s.rank in slow,
            "last_arrivals": int(totals["last_calls"].get(s.rank, 0)),
            "collectives": int(totals["calls"].get(s.rank, 0)),
            "clock_offset_us": round(float(matched.offsets_us.get(s.rank, 0.0)), 3),
        }
        if barriers is not None:
            row["barrier_wait_us_per_step"] = round(barriers.wait_us.get(s.rank, 0.0) / s.step_count, 3)
        if pipe is not None and s.rank in pipe.stage_of:
            row["stage"] = pipe.stage_of[s.rank]
            stage_row = next(
                (r for r in pipe.findings.get("per_stage", []) if r["stage"] == row["stage"]), None
            )
            if stage_row is not None:
                row["bubble_fraction"] = stage_row["bubble_fraction"]
        per_rank[s.rank] = row

    waited: dict[int, Intervals] = {}
    for s in active:
        parts = [c for c in (waits.get(s.rank), pipe.claims.get(s.rank) if pipe else None) if c is not None]
        if parts:
            waited[s.rank] = iv.union(
                np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
            )

    findings: dict[str, Any] = {
        "per_rank": per_rank,
        "stragglers": stragglers,
        "straggler_analysis": info,
        "critical_rank_per_step": _critical(active, waited) if len(active) >= 2 else [],
        "compute_imbalance": _imbalance(active, pipe),
    }
    if barriers is not None:
        findings["barrier_waits"] = barrier_findings(barriers, active, matched.offsets_us)
    if pipe is not None:
        findings["pipeline"] = dict(pipe.findings)
    bandwidth = job_bandwidth(active, matched.calls_table if matched.n_calls else None)
    if bandwidth:
        findings["collective_bandwidth"] = dict(bandwidth)
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
    findings["whatif"] = whatifs.to_dict() if whatifs is not None else None
    return CrossRankResult(claims=claims, findings=findings, whatifs=whatifs)

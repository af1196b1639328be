"""Never silent, never double counted: what :func:`gpuprof.advice.advise` adds last.

*General advice.* Any cause holding at least :data:`NEVER_SILENT_PCT` of a rank's step gets
a recommendation. When no specific advisor spoke for it (the schedule was unknown, the
trace has no host events, no one finding stood out), the general advice for that cause is
given with its measured share, its saving from the cause's what-if replay where one exists
(else the closed form: the cause's time vanishing on every rank, the job's step set by its
slowest rank), and a line saying what was missing to be specific.

*Overlaps.* Two fixes can act on the same lost time (a slow stage and the pipeline's fill
and drain; allocator frees inside the operators a CUDA graph would remove). Their savings do
not add up: every recommendation with a replay carries one line with the saving of fixing
all of them at once, from one replay of every what-if together
(:meth:`gpuprof.job.whatif_results.WhatIfResults.combined_pct`), whenever that is less than the
sum. The same figure is the report's ``job.combined_savings_pct``, never more than the
largest share of a step any rank loses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gpuprof.advice.context import AdviceContext, unit_of
from gpuprof.advice.finding import Fact, Finding, Said, said
from gpuprof.advice.local.hits import compiled
from gpuprof.advice.phrasebook import recommendation, sentence
from gpuprof.advice.phrasebook.general import AGREE_MARK
from gpuprof.advice.replayed import replayed, results
from gpuprof.advice.savings import MIN_WINDOW_US, cause_savings_pct
from gpuprof.job.whatif_registry import for_cause
from gpuprof.model.causes import spec_of
from gpuprof.model.report import CAUSES, Cause, Recommendation

# A cause holding this share of a rank's step always gets a recommendation.
NEVER_SILENT_PCT = 5.0
# A recommendation whose saving differs from its cause's lost share by more than this
# factor says why (``Saving vs lost share:``).
AGREE_FACTOR = 3.0
# Most of the rank's kernels from Inductor (this share or more): the model is compiled.
# Unexplained idle time during which the next kernel was already launched for at least
# this share of it waited on work the trace does not show.
QUEUED_SHARE = 0.5




def _shares(ctx: AdviceContext) -> dict[Cause, tuple[float, list[int]]]:
    """Per cause, the largest share of a rank's window it holds (percent) and the ranks
    where it holds at least :data:`NEVER_SILENT_PCT`."""
    out: dict[Cause, tuple[float, list[int]]] = {}
    for cause in CAUSES:
        top = 0.0
        ranks: list[int] = []
        for r in ctx.reports:
            if r.window_us <= 0:
                continue
            pct = 100.0 * float(r.lost_us.get(cause, 0.0)) / r.window_us
            top = max(top, pct)
            if pct >= NEVER_SILENT_PCT:
                ranks.append(r.rank)
        out[cause] = (top, ranks)
    return out


def _compiled(ctx: AdviceContext) -> bool:
    """Some rank's kernels are mostly Inductor's: the model is already compiled."""
    return any(compiled(s.facts) for s in ctx.summaries if s.empty_reason is None and s.facts is not None)


def _queued(ctx: AdviceContext, ranks: Sequence[int]) -> list[Said]:
    """What the unexplained idle time of ``ranks`` is made of, where the trace says: the
    share during which the next kernel had already been launched (the GPU waited on
    something the trace does not show: an event of work it left out, a filtered export)."""
    by = {s.rank: s for s in ctx.summaries}
    rep = {r.rank: r for r in ctx.reports}
    for r in ranks:
        s, rp = by.get(r), rep.get(r)
        if s is None or rp is None:
            continue
        other = float(rp.lost_us.get(Cause.OTHER, 0.0))
        queued = s.facts.queued_gap_us if s.facts is not None else 0.0
        if other > 0 and queued >= QUEUED_SHARE * other:
            return [said("general.queued", rank=r)]
    return []


def general_findings(ctx: AdviceContext, recs: Sequence[Recommendation]) -> list[Finding]:
    """A general finding for every cause with at least :data:`NEVER_SILENT_PCT` of a
    rank's step that no recommendation of ``recs`` covers."""
    covered = {r.category for r in recs}
    out: list[Finding] = []
    for cause, (top, ranks) in _shares(ctx).items():
        if top < NEVER_SILENT_PCT or cause in covered:
            continue
        # The what-ifs whose replay gives a cause's general saving (their declarations say
        # which), the first replayed that saves.
        got = next((x for x in (replayed(ctx, n) for n in for_cause(cause)) if x is not None and x.pct > 0), None)
        evidence = [said("general.share", cause=cause.value, top_pct=top, ranks=tuple(ranks))]
        pipe = ctx.cross.pipeline if cause is Cause.PIPELINE_BUBBLE else None
        known = pipe is not None and bool(pipe.microbatches) and pipe.theoretical_bubble_fraction is not None
        if cause is Cause.OTHER or (known and got is None):
            # Time no rule explains has no fix to replay, nor has a bubble the schedule does
            # not make (stages waiting for a slower part of the job, named above): its share
            # is shown, no saving is claimed.
            pct = 0.0
            evidence.append(said("general.no_saving"))
            evidence.extend(_queued(ctx, ranks))
        elif all(r.window_us < MIN_WINDOW_US for r in ctx.reports):
            pct = 0.0
            evidence.append(said("window.too_short_clause", min_window_ms=MIN_WINDOW_US / 1000))
        elif got is not None:
            pct = got.pct
            evidence.append(got.said)
        else:
            pct = cause_savings_pct(ctx.reports, cause)
            evidence.append(said("general.closed_form"))
        if known and pipe is not None:
            # The schedule is known and its own fill and drain are small: the measured
            # bubble is stages waiting for a slower one (a straggler's replica, varying work).
            evidence.append(said("general.why_pipeline_known", schedule=str(pipe.schedule),
                                 stages=int(pipe.stages or 0), microbatches=int(pipe.microbatches or 0),
                                 theory_pct=100 * float(pipe.theoretical_bubble_fraction or 0.0)))
        else:
            evidence.append(said("general.why", cause=cause.value))
        facts: dict[str, Fact] = {"lost_pct": top, "ranks_affected": len(ranks), **(got.facts if got is not None else {})}
        out.append(Finding(
            f"{cause.value.replace('_', '-')}-general", cause, pct, said("title.general", cause=cause.value),
            tuple(evidence), (said("general.actions", cause=cause.value, compiled=_compiled(ctx)),), ranks=tuple(ranks),
            whatif=got.name if got is not None else None, facts=facts,
        ))
    return out


def general_advice(ctx: AdviceContext, recs: Sequence[Recommendation]) -> list[Recommendation]:
    """:func:`general_findings`, worded."""
    unit = unit_of(ctx)
    return [recommendation(f, unit) for f in general_findings(ctx, recs)]


def disagreement(ctx: AdviceContext, rec: Recommendation) -> Said | None:
    """The line for a recommendation whose saving is more than :data:`AGREE_FACTOR` times
    off the share of the step its cause holds on its ranks (``None``: they agree): the
    replay follows the whole job, so fixing a cause can save less (the time freed is then
    spent waiting on other work of the critical path) or more (it also removes waits it set
    off)."""
    by_rank = {r.rank: r for r in ctx.reports if r.window_us > 0}
    # A straggler's or a slow stage's own ranks are not the ones that wait: job-level
    # causes are measured on every rank.
    job_level = spec_of(rec.category).between_ranks
    ranks = ([] if job_level else [by_rank[r] for r in rec.ranks if r in by_rank]) or list(by_rank.values())
    share = max((100.0 * float(r.lost_us.get(rec.category, 0.0)) / r.window_us for r in ranks), default=0.0)
    est = rec.estimated_savings_pct
    if rec.category is Cause.OTHER or max(share, est) < NEVER_SILENT_PCT:
        return None
    if est * AGREE_FACTOR < share:
        return said("agree.less", est_pct=est, share_pct=share, cause=rec.category.value)
    if est > AGREE_FACTOR * share:
        return said("agree.more", est_pct=est, share_pct=share, cause=rec.category.value)
    return None


def explain_disagreement(ctx: AdviceContext, recs: Sequence[Recommendation]) -> list[Recommendation]:
    """Each recommendation with its :func:`disagreement` line, worded, added to its evidence
    (:func:`gpuprof.advice.advise_all` keeps the line a record until it words the report)."""
    unit = unit_of(ctx)
    out: list[Recommendation] = []
    for rec in recs:
        line = disagreement(ctx, rec)
        out.append(rec if line is None else replace(rec, evidence=(*rec.evidence, sentence(line, unit))))
    return out


def combined_savings_pct(ctx: AdviceContext, recs: Sequence[Recommendation]) -> float | None:
    """Saving of every recommended fix at once, from one replay (``None``: no replay),
    capped by the largest share of a step that any rank loses."""
    w = results(ctx)
    names = sorted({r.whatif for r in recs if r.whatif})
    if w is None or not names:
        return None
    pct = w.combined_pct(names)
    if pct is None:
        return None
    # All the fixes at once save no less than the best of them alone (an estimate may go
    # beyond its what-if's replay where the fix changes more than the trace shows).
    pct = max([pct] + [float(r.estimated_savings_pct) for r in recs if r.whatif])
    lost = max(
        (sum(float(v) for v in r.lost_us.values()) / r.window_us for r in ctx.reports if r.window_us > 0),
        default=0.0,
    )
    return min(pct, 100.0 * lost)


__all__ = [
    "AGREE_FACTOR",
    "AGREE_MARK",
    "NEVER_SILENT_PCT",
    "combined_savings_pct",
    "disagreement",
    "explain_disagreement",
    "general_advice",
    "general_findings",
]

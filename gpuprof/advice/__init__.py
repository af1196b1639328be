"""Recommendations: measured findings turned into ranked, actionable advice.

Summaries, attributions and the job result in (:class:`AdviceContext`), ranked
:class:`~gpuprof.model.report.Recommendation` s out. Each advisor measures: it is a pure
function ``(AdviceContext) -> list[Finding]`` (:mod:`gpuprof.advice.finding`: the id,
cause, ranks, what-if, saving and its bounds, and the measured facts as named numbers),
registered with ``@advisor`` in :data:`ADVISORS` (in the order modules are listed in
:data:`_ADVISOR_MODULES`). The phrasebook (:mod:`gpuprof.advice.phrasebook`) is the one
place that words findings: titles, evidence and actions, each recommendation carrying its
facts beside the prose. :func:`advise` runs the advisors, holds back what the trace cannot
support (below) and ranks the rest: a fault (a GPU, link, group or host slower than its
peers, :data:`FAULTS`) first when it saves a fair share, then by estimated savings.

Evidence
--------
A recommendation rests on kinds of events (:class:`~gpuprof.accounting.evidence.Evidence`):
overlap advice needs compute kernels, DataLoader or host-overhead advice needs host
events, and so on. What each one needs is declared once: by its id in :data:`NEEDS`, by
its advisor (``@advisor(needs=...)``), else by its category in :data:`CATEGORY_NEEDS`.
Each rank's summary says what its trace lacks (``facts.trace_lacks``, see
:func:`gpuprof.accounting.evidence.trace_lacks`). A recommendation is *held back* when a
rank it rests on lacks something it needs: it is not shown, and one line says what was
held back and why (:attr:`Advice.held_back`). The ranks it rests on are all ranks with
device activity for job-level causes (straggler, communication, pipeline bubbles, and any
recommendation with no ranks), else its own ranks.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpuprof.accounting.evidence import Evidence
from gpuprof.advice import context
from gpuprof.advice.context import (
    _JOB_LEVEL,
    ADVISORS,
    CATEGORY_NEEDS,
    MIN_SAVINGS_PCT,
    NEEDS,
    AdviceContext,
    Advisor,
    advisor,
    rank_spans,
    unit_of,
)
from gpuprof.advice.drafts import Draft, word_once
from gpuprof.advice.finding import Finding, Said, said
from gpuprof.advice.phrasebook import Unit, recommendation, sentence
from gpuprof.advice.replayed import results
from gpuprof.model.report import Recommendation, sort_recommendations

__all__ = [
    "ADVISORS",
    "CATEGORY_NEEDS",
    "FAULTS",
    "FAULT_FIRST_PCT",
    "MIN_SAVINGS_PCT",
    "NEEDS",
    "Advice",
    "AdviceContext",
    "Advisor",
    "Finding",
    "HeldBack",
    "Said",
    "advise",
    "advise_all",
    "advisor",
    "hold_back",
    "needs_of",
    "rank_recommendations",
    "rank_spans",
    "ranked",
    "recommendation",
]


_ADVISOR_MODULES = (
    "gpuprof.advice.local",
    "gpuprof.advice.distributed",
    "gpuprof.advice.pipeline",
    "gpuprof.advice.samples",
)
_loaded = False


def _load() -> None:
    global _loaded
    if _loaded:
        return
    for name in _ADVISOR_MODULES:
        importlib.import_module(name)
    _loaded = True


@dataclass(frozen=True)
class HeldBack:
    """A recommendation the trace cannot support: what it needs, and which ranks lack it."""

    recommendation: Recommendation
    missing: Mapping[str, tuple[int, ...]]  # evidence -> ranks lacking it
    why: Mapping[str, str]  # evidence -> why (the first lacking rank's reason)

    @property
    def line(self) -> str:
        """The report's line: what was held back and why."""
        missing = tuple((Evidence(ev).label, ranks, self.why[ev]) for ev, ranks in self.missing.items())
        return sentence(said("held_back", title=self.recommendation.title, missing=missing))

    def to_dict(self) -> dict[str, Any]:
        rec = self.recommendation
        return {
            "id": rec.id,
            "category": rec.category.value,
            "title": rec.title,
            "ranks": list(rec.ranks),
            "needs": sorted(self.missing),
            "lacking_ranks": {ev: list(r) for ev, r in self.missing.items()},
            "why": dict(self.why),
        }


@dataclass(frozen=True)
class Advice:
    """What :func:`advise_all` found: the recommendations, those held back, and the saving
    of all the recommended fixes at once from one replay (``None``: no replay)."""

    recommendations: tuple[Recommendation, ...]
    held_back: tuple[HeldBack, ...] = ()
    combined_savings_pct: float | None = None
    # Warnings said beside the saving they qualify (gpuprof.advice.wording), not again at
    # the bottom of the human-facing reports.
    absorbed_warnings: tuple[str, ...] = ()


def needs_of(rec: Recommendation, made_by: Advisor | None = None) -> frozenset[Evidence]:
    """What ``rec`` needs from the trace (see the module docstring)."""
    declared = context._ADVISOR_NEEDS.get(made_by, frozenset()) if made_by is not None else frozenset()
    return declared | NEEDS.get(rec.id, CATEGORY_NEEDS.get(rec.category, frozenset()))


def hold_back(
    rec: Recommendation, needs: frozenset[Evidence], lacks: Mapping[int, Mapping[str, str]]
) -> HeldBack | None:
    """Whether ``rec``, needing ``needs``, is held back given what each rank's trace lacks
    (``lacks[rank]``: evidence -> why, for every rank with device activity)."""
    if not needs:
        return None
    ranks = list(lacks) if rec.category in _JOB_LEVEL or not rec.ranks else [r for r in rec.ranks if r in lacks]
    missing: dict[str, tuple[int, ...]] = {}
    why: dict[str, str] = {}
    for ev in sorted(needs, key=lambda e: list(Evidence).index(e)):
        short = tuple(sorted(r for r in ranks if ev.value in lacks[r]))
        if short:
            missing[ev.value] = short
            why[ev.value] = lacks[short[0]][ev.value]
    return HeldBack(rec, missing, why) if missing else None


# Faults: one part of the job slower than its peers (a GPU, a pipeline link, a group's
# collectives, a host). Repairing one restores the job's own speed; the other advice tunes a
# healthy job. A fault that saves at least FAULT_FIRST_PCT of the step is named first.
FAULTS = frozenset({"straggler-link", "straggler-collective", "straggler-host"})
FAULT_FIRST_PCT = 5.0


def _is_fault(r: Recommendation) -> bool:
    if r.id == "straggler-rank":
        return r.facts.get("kind") == "hardware"
    return r.id in FAULTS


# How many recommendations are ordered by what each adds to the ones above it.
GREEDY_DEPTH = 5


def rank_recommendations(recs: Sequence[Recommendation], ctx: AdviceContext | None = None) -> tuple[Recommendation, ...]:
    """Faults that save at least :data:`FAULT_FIRST_PCT` first, then the rest by estimated
    savings (ties by id). Then, with the job's replays, the next place goes to the fix that
    adds most to the ones above it, replayed together (:data:`GREEDY_DEPTH` places): fixes
    that reinforce each other come together (data balanced per step unmasks a heavier
    stage), and a fix whose gain the one above already takes falls back. A recommendation
    moved up says what it adds (worded here; :func:`advise_all` keeps that line a record
    until it words the report, :func:`ranked`)."""
    unit = unit_of(ctx) if ctx is not None else Unit.STEP
    return tuple(
        r if adds is None else replace(r, evidence=(*r.evidence, sentence(adds, unit))) for r, adds in ranked(recs, ctx)
    )


def ranked(recs: Sequence[Recommendation], ctx: AdviceContext | None = None) -> tuple[tuple[Recommendation, Said | None], ...]:
    """``recs`` in the order of :func:`rank_recommendations`, each with the line that says
    what it adds to the ones above it (``None``: not moved up), as a record."""
    order = sort_recommendations(recs)
    first = [r for r in order if _is_fault(r) and r.estimated_savings_pct >= FAULT_FIRST_PCT]
    order = tuple(first) + tuple(r for r in order if r not in first)
    w = results(ctx) if ctx is not None else None
    if w is None or len(order) < 3:
        return tuple((r, None) for r in order)
    out: list[tuple[Recommendation, Said | None]] = [(order[0], None)]
    rest = list(order[1:])
    chosen = [order[0].whatif] if order[0].whatif else []
    base = w.combined_pct(chosen) if chosen else 0.0
    for _ in range(GREEDY_DEPTH - 1):
        if not rest or base is None:
            break
        gains: dict[int, float] = {}
        for i, r in enumerate(rest):
            if r.whatif and not _is_fault(r):
                both = w.combined_pct([*chosen, r.whatif])
                if both is not None:
                    gains[i] = both - base
        if not gains:
            break
        best = max(gains, key=lambda i: (gains[i], rest[i].estimated_savings_pct))
        standalone = rest[0]
        adds: Said | None = None
        if best == 0 or gains[best] <= standalone.estimated_savings_pct + 0.5:
            pick = rest.pop(0)
        else:
            pick = rest.pop(best)
            adds = said("rank.adds", gain_pct=gains[best], alone_pct=pick.estimated_savings_pct, above=len(out))
        out.append((pick, adds))
        if pick.whatif:
            chosen.append(pick.whatif)
            base = w.combined_pct(chosen)
    return tuple(out) + tuple((r, None) for r in rest)


def advise_all(ctx: AdviceContext) -> Advice:
    """Run every advisor; rank what the trace supports, hold back the rest, add the general
    advice for any cause left without a recommendation (:mod:`gpuprof.advice.general`) and
    put each qualifier beside the saving it qualifies (:mod:`gpuprof.advice.wording`). The
    evidence is said last, each line once (:mod:`gpuprof.advice.drafts`)."""
    from gpuprof.advice.general import combined_savings_pct, disagreement, general_findings
    from gpuprof.advice.wording import finalize

    _load()
    unit = unit_of(ctx)
    made: list[tuple[Recommendation, Advisor, Finding | None]] = []
    for fn in context.ADVISORS:
        if isinstance(fn, context.Worded):
            made.extend((recommendation(f, unit), fn, f) for f in fn.find(ctx))
        else:
            made.extend((r, fn, None) for r in fn(ctx))
    # One recommendation per id: keep the one with the larger estimate.
    best: dict[str, tuple[Recommendation, Advisor, Finding | None]] = {}
    for r, fn, f in made:
        if r.id not in best or r.estimated_savings_pct > best[r.id][0].estimated_savings_pct:
            best[r.id] = (r, fn, f)
    lacks = {
        s.rank: dict(s.facts.trace_lacks if s.facts is not None else {}) for s in ctx.summaries if s.empty_reason is None
    }
    kept: list[Recommendation] = []
    # What each kept recommendation was worded from, by place in ``kept``.
    found: list[Finding | None] = []
    held: list[HeldBack] = []
    for r, fn, f in best.values():
        # A change that would not shorten the job's step is not worth a reader's attention:
        # the measured loss still shows in the per-rank table, but it is not advertised.
        if r.estimated_savings_pct < MIN_SAVINGS_PCT:
            continue
        h = hold_back(r, needs_of(r, fn), lacks)
        if h is None:
            kept.append(r)
            found.append(f)
        else:
            held.append(h)
    # Never silent: a cause holding a fair share of a step with no recommendation gets the
    # general advice for it (held back in turn when the trace cannot support even that).
    for f in general_findings(ctx, kept + [h.recommendation for h in held]):
        r = recommendation(f, unit)
        h = hold_back(r, needs_of(r), lacks)
        if h is None:
            kept.append(r)
            found.append(f)
        else:
            held.append(h)
    held.sort(key=lambda h: (-h.recommendation.estimated_savings_pct, h.recommendation.id))
    combined = combined_savings_pct(ctx, kept)
    # What the fixes save together is said once, under the recommendations (the renderers'
    # combined line), not in each of them.
    # The lines said after the advisors stay records (the saving against its cause's share,
    # what a fix moved up adds) until the evidence is said, once, in rank order.
    drafts = []
    for r, adds in ranked(kept, ctx):
        i = next(i for i, k in enumerate(kept) if k is r)
        added = tuple(x for x in (disagreement(ctx, r), adds) if x is not None)
        drafts.append(Draft(r, found[i], added))
    done = finalize(ctx, word_once(drafts, unit))
    return Advice(done.recommendations, tuple(held), combined, done.absorbed_warnings)


def advise(ctx: AdviceContext) -> tuple[Recommendation, ...]:
    """The recommendations the trace supports, highest estimated savings first."""
    return advise_all(ctx).recommendations

"""The last pass over the recommendations: each qualifier beside the saving it qualifies
(the words themselves are the phrasebook's, :mod:`gpuprof.advice.phrasebook.general`).

Advisors write their evidence as they find it; this pass, run once on the ranked
recommendations (:func:`finalize`, from :func:`gpuprof.advice.advise_all`), applies the
rules that hold for all of them, so that no advisor has to remember them:

- A saving estimated from part of a job (fewer ranks in the input than the job has) is an
  upper bound on the job's saving: the ranks that are missing may hold the step. It gets
  ``savings_bound="upper"`` and the caveat ``upper bound: 1 of 8 ranks profiled``. A timeline
  that keeps one tensor-parallel rank per position is the whole job
  (:func:`expected_ranks`).
- A host-side saving (host, dataloader, sync) on a rank whose trace says the profiler slowed
  its host (Python stacks recorded, host ops running slow) gets that as a caveat; the
  matching warning is then said beside the saving rather than at the bottom of the report
  (:attr:`Qualified.absorbed_warnings`, which the renderers leave out of their warnings).
- A saving that is an end of its own range is a bound, and is written as one: the high end
  is ``savings_bound="upper"`` (``≤``), the low end ``"lower"`` (``≥``), never an estimate
  ``~`` with the same number as the range's end beside it.
- Each evidence line is said once: a later recommendation does not repeat a line a
  higher-ranked one already gave. That is not this pass's: the evidence is said
  last, once, on the findings (:func:`gpuprof.advice.drafts.word_once`), before this pass.
- Without step markers (no rank has a step) there is no step: the analysis window is the
  unit. That is not this pass's: the phrasebook says each title and line in its unit as it
  words them (:func:`gpuprof.advice.context.unit_of`, :mod:`gpuprof.advice.phrasebook.unit`).

That every estimate rests on a single profiled step is said once for the whole report, by
the renderers under the headline, never in each recommendation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpuprof.advice.context import AdviceContext
from gpuprof.advice.finding import said
from gpuprof.advice.phrasebook import sentence
from gpuprof.model import causes, notice
from gpuprof.model.report import Recommendation

# Causes whose saving is host time: the profiler's own slowing of the host inflates them.
HOST_SIDE = causes.where(host_side=True)


@dataclass(frozen=True)
class Qualified:
    """The recommendations after the pass, and the warnings now said beside a saving."""

    recommendations: tuple[Recommendation, ...]
    absorbed_warnings: tuple[str, ...] = ()


def _ranks_with_data(ctx: AdviceContext) -> list[int]:
    return sorted(s.rank for s in ctx.summaries if s.empty_reason is None and s.window_us > 0)


def world_size(ctx: AdviceContext) -> int | None:
    """The job's number of ranks as its traces (or the cross-rank matching) state it."""
    known = [s.world_size for s in ctx.summaries if s.world_size]
    inferred = ctx.cross.straggler_analysis.world_size
    sizes = [int(x) for x in [*known, inferred] if isinstance(x, int) and x > 0]
    return max(sizes) if sizes else None


def expected_ranks(ctx: AdviceContext) -> int | None:
    """How many ranks the input should hold to be the whole job: the world size, except
    for an op-level timeline that keeps one tensor-parallel rank per (data-parallel,
    pipeline) position (as Megatron's timer exports do): its tensor-, sequence- or
    context-parallel peers run the same ops at the same times and are not missing, so the
    job is whole with one worker per position."""
    world = world_size(ctx)
    active = [s for s in ctx.summaries if s.empty_reason is None and s.window_us > 0]
    if world is None or not active or not all(s.holds.tp_peers_optional and "pp_rank" in s.parallel for s in active):
        return world
    if len({s.parallel.get("tp_rank") for s in active}) != 1:
        return world
    dp = max(int(s.parallel.get("dp_size", 1)) for s in active)
    pp = max(int(s.parallel.get("pp_size", 1)) for s in active)
    return min(world, max(dp * pp, 1))


def _host_caveats(ctx: AdviceContext) -> dict[int, tuple[str, str]]:
    """Per rank: (caveat beside a host-side saving, the warning it stands for), the warning
    found among the rank's trust warnings by its code (gpuprof.model.notice), not its words."""
    from gpuprof.accounting.hostfacts import trust_warnings

    out: dict[int, tuple[str, str]] = {}
    for s in ctx.summaries:
        if s.facts is None:
            continue
        f = s.facts.trust
        warnings = trust_warnings(f)
        stacks = notice.of_code(warnings, notice.PYTHON_STACKS)
        slow = notice.of_code(warnings, notice.SLOW_HOST)
        if stacks:
            out[s.rank] = (sentence(said("caveat.python_stacks")), stacks[0].text)
        elif slow and f.empty_op_median_us is not None:
            out[s.rank] = (sentence(said("caveat.slow_host", empty_op_median_us=f.empty_op_median_us)), slow[0].text)
    return out


def _range_end(rec: Recommendation) -> str | None:
    """``"upper"`` when the saving is the high end of its range, ``"lower"`` when the low
    end (as written, to 0.1 percentage point), else ``None``."""
    low, high, est = rec.savings_low_pct, rec.savings_high_pct, rec.estimated_savings_pct
    if low is None or high is None or high - low < 0.05:
        return None
    if abs(est - high) < 0.05:
        return "upper"
    if abs(est - low) < 0.05:
        return "lower"
    return None


def finalize(ctx: AdviceContext, recs: Sequence[Recommendation]) -> Qualified:
    """Apply the module's rules to the ranked recommendations (order kept)."""
    present = _ranks_with_data(ctx)
    world = expected_ranks(ctx)
    partial = world is not None and 0 < len(present) < world
    host = _host_caveats(ctx)
    absorbed: list[str] = []
    out: list[Recommendation] = []
    for rec in recs:
        caveats = list(rec.caveats)
        bound = rec.savings_bound
        if partial and rec.estimated_savings_pct > 0:
            bound = "upper"
            caveats.append(sentence(said("caveat.partial_job", present=len(present), world=world)))
        bound = bound or _range_end(rec)
        if rec.category in HOST_SIDE:
            on = [r for r in (rec.ranks or present) if r in host]
            if on:
                caveat, warning = host[on[0]]
                caveats.append(caveat)
                absorbed.append(warning)
        out.append(
            replace(
                rec,
                savings_bound=bound,
                caveats=tuple(dict.fromkeys(caveats)),
            )
        )
    return Qualified(tuple(out), tuple(dict.fromkeys(absorbed)))


__all__ = ["HOST_SIDE", "Qualified", "expected_ranks", "finalize", "world_size"]

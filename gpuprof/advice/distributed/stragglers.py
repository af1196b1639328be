"""Stragglers: ranks the others wait for in collectives.

``straggler_advice`` gives at most one finding, the first that holds of: ranks that compute
slower than their peers (:mod:`~gpuprof.advice.distributed.slowranks`), named slow ranks
(last at the collectives, by a margin over the next-latest), lateness that moves from rank
to rank (``straggler-rotating``), ranks late at the barriers of an op-level timeline
(:mod:`~gpuprof.advice.distributed.barriers`), and ranks waiting for a rank not in the input
(``straggler-absent-rank``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpuprof.advice.context import AdviceContext, advisor
from gpuprof.advice.distributed.barriers import barrier_finding
from gpuprof.advice.distributed.slowpaths import slow_hosts
from gpuprof.advice.distributed.slowranks import MIN_SAVINGS_PCT, slow_rank_advice
from gpuprof.advice.finding import Fact, Finding, Said, said
from gpuprof.advice.replayed import best, replayed, results
from gpuprof.advice.savings import cause_savings_pct, job_step_time_us, savings_pct
from gpuprof.job.findings import Straggler
from gpuprof.model.report import Cause, RankReport

# The ranks named as last to arrive when the lateness moves from rank to rank.
ROTATING_SHOWN = 8


def skew(ctx: AdviceContext) -> tuple[list[Said], list[int]]:
    """Ranks that start their steps early and wait (arrival skew): the line, and the ranks."""
    early = ctx.cross.straggler_analysis.early_starters
    if not early:
        return [], []
    ranks = [int(e.rank) for e in early]
    leads = [float(e.lead_us) for e in early]
    waits = [float(e.wait_us_per_step) for e in early]
    last = [float(e.lead_over_last_us) for e in early]
    # one lead where the ranks start about together, else the range; the same for the waits
    lead = (min(leads),) if max(leads) - min(leads) < 0.1 * max(leads) else (min(leads), max(leads))
    waited = (min(waits),) if len(waits) == 1 else (min(waits), max(waits))
    if last:
        line = said("straggler.skew_last", ranks=tuple(ranks), lead_us=lead, lead_over_last_us=max(last), wait_us=waited)
    else:
        line = said("straggler.skew", ranks=tuple(ranks), lead_us=lead, wait_us=waited)
    return [line], ranks


def _named(
    ctx: AdviceContext,
    reports: Sequence[RankReport],
    stragglers: Sequence[Straggler],
) -> Finding | None:
    """Named slow ranks. The estimate is the critical-path gain: if a slow rank arrived
    with the next-latest member, each collective it is last at would end that much
    sooner on every rank; the rest of the spread of arrivals is not its doing."""
    slow = [int(x.rank) for x in stragglers]
    others = [r for r in reports if r.rank not in slow]
    if not others:
        return None
    joint = ctx.cross.straggler_analysis.stragglers_gain_us_per_step
    gain = float(joint) if joint is not None else sum(float(x.gain_us_per_step) for x in stragglers)
    pct = savings_pct(reports, {r.rank: gain * max(r.steps, 1) for r in reports})
    # A straggler that is late because it begins its step late (no phase inside the step
    # is slower): the replay of every late rank beginning with the median rank.
    w = results(ctx)
    late_ranks = sorted(w.model.late_start_us) if w is not None else []
    on_time = (
        replayed(ctx, "on_time_start")
        if late_ranks and all(not x.phase and int(x.rank) in late_ranks for x in stragglers)
        else None
    )
    if on_time is not None:
        pct = on_time.pct
    if pct < MIN_SAVINGS_PCT:
        return None
    evidence: list[Said] = []
    for x in stragglers:
        gains = tuple(float(g) for g in x.gains_us)
        if gains:
            evidence.append(said("straggler.arrived_last_by", rank=x.rank, last_arrivals=x.last_arrivals,
                                 collectives=x.collectives, margins_us=gains,
                                 margin_us_per_step=float(x.gain_us_per_step)))
        else:
            evidence.append(said("straggler.arrived_last", rank=x.rank, last_arrivals=x.last_arrivals,
                                 collectives=x.collectives))
        evidence.append(said("straggler.others_waited", wait_us_per_step=float(x.caused_wait_us_per_step)))
        if x.phase:
            evidence.append(said("straggler.phase", rank=x.rank, phase=x.phase, ratio=float(x.phase_ratio or 0.0),
                                 peers=len(others), excess_us_per_step=float(x.phase_excess_us_per_step or 0.0)))
        elif x.late_start_us is not None and float(x.late_start_us) > 0:
            evidence.append(said("straggler.late_start", rank=x.rank, late_us=float(x.late_start_us)))
    arrivals = ctx.cross.straggler_analysis.arrivals
    counts = dict(arrivals.last_counts) if arrivals is not None else {}
    also = [(r, counts[r]) for r in counts if r not in slow]
    if also and arrivals is not None:
        evidence.append(said("straggler.last_elsewhere", counts=tuple(also), collectives=arrivals.collectives))
    skewed, early = skew(ctx)
    evidence.extend(skewed)
    if on_time is not None and w is not None:
        lates = w.model.late_start_us
        also_late = [r for r in late_ranks if r not in slow]
        if also_late:
            evidence.append(said("straggler.also_late", ranks=tuple(also_late), late=tuple((r, lates[r]) for r in also_late)))
            alone = w.model.on_time_pct(slow, w.baseline.step_us)
            if alone is not None:
                evidence.append(said("straggler.alone_on_time", slow=tuple(slow), alone_pct=alone, pct=on_time.pct))
        evidence.append(on_time.said)
    else:
        evidence.append(said("straggler.estimate_margin"))
    n_last = sum(int(x.last_arrivals) for x in stragglers)
    n_coll = max(int(x.collectives) for x in stragglers)
    first = stragglers[0]
    phase = first.phase
    actions = [said("straggler.phase_actions", phase=phase)] + ([said("straggler.skew_action")] if early else [])
    facts: dict[str, Fact] = {
        "slow_rank": int(first.rank),
        "slow_ranks": len(slow),
        "last_arrivals": int(first.last_arrivals),
        "collectives": int(first.collectives),
        "margin_us_per_step": first.gain_us_per_step,
        "joint_margin_us_per_step": gain,
        "max_margin_us": max((float(g) for g in first.gains_us), default=None),
        "caused_wait_us_per_step": float(first.caused_wait_us_per_step),
        "phase": phase or None,
        "phase_ratio": first.phase_ratio if phase else None,
        "phase_excess_us_per_step": first.phase_excess_us_per_step if phase else None,
        "late_start_us": first.late_start_us,
        "peers": len(others),
        **(on_time.facts if on_time is not None else {}),
    }
    if on_time is not None:
        title = said("title.straggler.late_start", late=tuple(late_ranks), slow=tuple(slow), last=n_last, collectives=n_coll)
        return Finding("straggler-rank", Cause.STRAGGLER, pct, title, tuple(evidence), tuple(actions),
                       ranks=tuple(late_ranks), whatif=on_time.name, facts=facts)
    title = said("title.straggler.named", slow=tuple(slow), last=n_last, collectives=n_coll)
    return Finding("straggler-rank", Cause.STRAGGLER, pct, title, tuple(evidence), tuple(actions), ranks=tuple(slow),
                   facts=facts)


def _variation(ctx: AdviceContext) -> list[Said]:
    """How much the compute ops' durations vary (op-level timelines) and how often the
    slowest rank changes from step to step: the signature of data-dependent work."""
    w = results(ctx)
    if w is None:
        return []
    out = []
    var = w.model.op_variation()
    shown = sorted(((n, v) for n, v in var.items() if v[2] >= 2), key=lambda kv: -kv[1][0] * kv[1][2])[:3]
    if shown:
        out.append(said("straggler.op_variation", ops=tuple((n, m, cv, k) for n, (m, cv, k) in shown)))
    per_group = w.model.slowest_per_step()
    steps = max((len(v) for v in per_group.values()), default=0)
    changing = [g for g, v in per_group.items() if len(set(v)) > 1]
    if steps >= 2 and changing:
        distinct = max(len(set(per_group[g])) for g in changing)
        out.append(said("straggler.slowest_changes", distinct=distinct, steps=steps, changing=len(changing),
                        groups=len(per_group)))
    return out


def _job_step_us(reports: Sequence[RankReport]) -> float:
    """The job's step: its slowest rank's mean step (the window without steps)."""
    return max((r.window_us / max(r.steps, 1) for r in reports if r.window_us > 0), default=0.0)


def _rotating(ctx: AdviceContext, reports: Sequence[RankReport]) -> Finding | None:
    """Lateness that moves from rank to rank: data-dependent imbalance, not one slow rank."""
    arrivals = ctx.cross.straggler_analysis.arrivals
    if arrivals is None or not arrivals.rotating:
        return None
    gain = float(arrivals.gain_us_per_step or 0.0)
    # The fix is the same work per rank in every step: balanced batches where the ops are
    # known (every replica's and microbatch's op at the step's mean), else each rank's
    # compute in each step at its peers' median, replayed; the critical-path gain (the last
    # arrival brought to the next-latest) where the job could not be replayed.
    got = best(ctx, ("balanced_batches", "peer_median_compute"))
    pct = got.pct if got is not None else savings_pct(reports, {r.rank: gain * max(r.steps, 1) for r in reports})
    if pct < MIN_SAVINGS_PCT:
        return None
    counts = dict(arrivals.last_counts)
    ranks = sorted(counts, key=lambda r: (-counts[r], r))
    w = results(ctx)
    # Where the batches are balanced, the fix takes work from the ranks that carried more
    # than their stage's mean in some step.
    heavy = w.model.heavy_ranks() if w is not None and got is not None and got.name == "balanced_batches" else []
    skewed, _ = skew(ctx)
    shown = tuple((r, counts[r]) for r in ranks[:ROTATING_SHOWN])
    more = len(ranks) - ROTATING_SHOWN
    evidence = (
        said("straggler.rotating_last_more", collectives=arrivals.collectives, counts=shown, more=more)
        if more > 0
        else said("straggler.rotating_last", collectives=arrivals.collectives, counts=shown),
        *_variation(ctx),
        # Summed over collectives of groups that run side by side (a data-parallel group per
        # stage), the margins are no one path's: said only where they fit in a step.
        *((said("straggler.rotating_margin", margin_us_per_step=gain),) if gain < _job_step_us(reports) else ()),
        *((got.said,) if got is not None else ()),
        *skewed,
    )
    facts: dict[str, Fact] = {
        "collectives": arrivals.collectives,
        "ranks_last": len(ranks),
        "most_last_rank": ranks[0] if ranks else None,
        "most_last_arrivals": counts[ranks[0]] if ranks else None,
        "margin_us_per_step": gain,
        **(got.facts if got is not None else {}),
    }
    return Finding("straggler-rotating", Cause.STRAGGLER, pct, said("title.straggler-rotating"), evidence,
                   (said("straggler.rotating_actions"),), ranks=tuple(heavy or ranks),
                   whatif=got.name if got is not None else None, facts=facts)


def _arrivals(ctx: AdviceContext) -> list[Said]:
    rows = [(int(r), v) for r, v in ctx.cross.per_rank.items() if v.collectives]
    if len(rows) < 2:
        return []
    rank, v = max(rows, key=lambda x: x[1].last_arrivals)
    return [said("straggler.present_last", rank=rank, last_arrivals=v.last_arrivals, collectives=v.collectives)]


def _absent(ctx: AdviceContext, reports: Sequence[RankReport], wait: Mapping[int, float]) -> Finding | None:
    """Ranks waiting in collectives for a rank that is not in the input. What removing the
    measured waits saves under the critical-rank model is often nothing, since the slow
    rank is not known; the advice is still given when the waits are a visible share of the
    step: the fix is to collect the missing ranks."""
    groups = ctx.cross.straggler_analysis.incomplete_groups
    if not groups or sum(wait.values()) <= 0:
        return None
    pct = cause_savings_pct(reports, Cause.STRAGGLER)
    per_step = {r.rank: wait[r.rank] / max(r.steps, 1) for r in reports}
    worst = max(per_step.values())
    if 100.0 * worst / max(job_step_time_us(reports), 1e-9) < MIN_SAVINGS_PCT:
        return None
    parts = tuple((g, present, expected if int(expected) > 0 else None) for g, (present, expected) in groups.items())
    evidence = (
        said("straggler.groups_partial", groups=parts),
        said("straggler.waits_present", waits=tuple(per_step.items())),
        *_arrivals(ctx),
    )
    facts = {"incomplete_groups": len(groups), "max_wait_us_per_step": worst}
    return Finding("straggler-absent-rank", Cause.STRAGGLER, pct, said("title.straggler-absent-rank"), evidence,
                   (said("straggler.absent_actions"),), facts=facts)


@advisor
def straggler_advice(ctx: AdviceContext) -> list[Finding]:
    stragglers = ctx.cross.stragglers
    reports = list(ctx.reports)
    if not reports:
        return []
    wait = {r.rank: float(r.lost_us.get(Cause.STRAGGLER, 0.0)) for r in reports}
    peer = slow_rank_advice(ctx, reports)
    if peer is not None:
        return [peer]
    if stragglers:
        hosts = slow_hosts(ctx)
        if hosts and replayed(ctx, "peer_median_host") is not None and {int(x.rank) for x in stragglers} <= set(hosts):
            return []  # the ranks the others wait for have a slow host: said by straggler-host
        named = _named(ctx, reports, stragglers)
        return [named] if named is not None else []
    rotating = _rotating(ctx, reports)
    if rotating is not None:
        return [rotating]
    barrier = barrier_finding(ctx, reports, wait)
    if barrier is not None:
        return [barrier]
    absent = _absent(ctx, reports, wait)
    return [absent] if absent is not None else []

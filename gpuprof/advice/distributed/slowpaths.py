"""One part of the job slower than its peers, other than a GPU: a pipeline link, a
data-parallel group's collectives, a rank's host.

``straggler-link``        the sends and receives between two stages of one replica take
                          several times as long as the same link on the other replicas (a bad
                          NIC, cable or switch port on that path); estimate: the
                          ``peer_median_link`` replay
``straggler-collective``  one group's collectives (a stage's data-parallel reduce-scatter or
                          all-gather) take several times as long as the same op on the other
                          groups; estimate: ``peer_median_collective``
``straggler-host``        one rank's own host work (Python, framework, launches) takes several
                          times its peers' per step, so it arrives last at the collectives;
                          estimate: ``peer_median_host``

Each is a fault of one part of the job, not a property of the model or the schedule: it is
named with the ranks at its ends and the ratio to its peers, and ranked before the tuning
advice (:data:`gpuprof.advice.FAULTS`). The families compared are
:mod:`gpuprof.job.peercomm`'s.
"""

from __future__ import annotations

import numpy as np

from gpuprof.advice.context import AdviceContext, advisor
from gpuprof.advice.finding import Fact, Finding, said
from gpuprof.advice.replayed import replayed, results
from gpuprof.job import peercomm
from gpuprof.model import intervals as iv
from gpuprof.model.report import Cause

# Below this share of the job step time a finding is not worth a recommendation.
MIN_SAVINGS_PCT = 1.0
# A rank's own host work this many times its peers' median per step is slow.
SLOW_HOST_RATIO = 1.5


def _link(ctx: AdviceContext) -> Finding | None:
    w = results(ctx)
    got = replayed(ctx, "peer_median_link")
    if w is None or w.model.dag is None or got is None or got.pct < MIN_SAVINGS_PCT:
        return None
    slow = peercomm.slow_families(w.model.dag, "link")
    if not slow:
        return None
    f = slow[0]
    replica, lower, upper, phase = int(f.key[1]), int(f.key[2]), int(f.key[3]), f.key[4]
    stage = w.model.stage_of
    ends = sorted(f.ranks, key=lambda r: stage.get(r, 0))
    ratio = float(f.ratio or 0.0)
    evidence = [
        said("slowpath.link", ranks=tuple(ends), lower=lower, upper=upper, replica=replica, phase=phase,
             median_us=f.median_us, peers_us=float(f.peers_median_us or 0.0), ratio=ratio, calls=f.calls),
        *(said("slowpath.also_slow_link", ranks=tuple(x.ranks), lower=int(x.key[2]), upper=int(x.key[3]),
               replica=int(x.key[1]), ratio=float(x.ratio or 0.0)) for x in slow[1:3]),
        got.said,
    ]
    facts: dict[str, Fact] = {
        "replica": replica, "lower_stage": lower, "upper_stage": upper, "phase": phase,
        "transfer_median_us": f.median_us, "peers_transfer_median_us": f.peers_median_us, "transfer_ratio": ratio,
        "slow_links": len(slow), **got.facts,
    }
    return Finding("straggler-link", Cause.COMMUNICATION, got.pct,
                   said("title.straggler-link", ranks=tuple(ends), lower=lower, upper=upper, replica=replica, ratio=ratio),
                   tuple(evidence), (said("slowpath.link_actions", ranks=tuple(ends)),), ranks=tuple(ends),
                   whatif=got.name, facts=facts)


def _collective(ctx: AdviceContext) -> Finding | None:
    w = results(ctx)
    got = replayed(ctx, "peer_median_collective")
    if w is None or w.model.dag is None or got is None or got.pct < MIN_SAVINGS_PCT:
        return None
    slow = peercomm.slow_families(w.model.dag, "collective")
    if not slow:
        return None
    f = slow[0]
    op = f.key[1]
    stages = sorted({w.model.stage_of[r] for r in f.ranks if r in w.model.stage_of})
    ratio = float(f.ratio or 0.0)
    evidence = [
        said("slowpath.collective", op=op, ranks=f.ranks, stages=tuple(stages), median_us=f.median_us,
             peers_us=float(f.peers_median_us or 0.0), ratio=ratio, calls=f.calls),
        got.said,
    ]
    facts: dict[str, Fact] = {
        "op": op, "stage": stages[0] if len(stages) == 1 else None, "group_ranks": len(f.ranks),
        "transfer_median_us": f.median_us, "peers_transfer_median_us": f.peers_median_us, "transfer_ratio": ratio,
        "slow_groups": len(slow), **got.facts,
    }
    return Finding("straggler-collective", Cause.COMMUNICATION, got.pct,
                   said("title.straggler-collective", op=op, ranks=f.ranks, stages=tuple(stages), ratio=ratio),
                   tuple(evidence), (said("slowpath.collective_actions", ranks=f.ranks),), ranks=f.ranks,
                   whatif=got.name, facts=facts)


def slow_hosts(ctx: AdviceContext) -> dict[int, tuple[float, float]]:
    """Ranks whose own host work per step is at least :data:`SLOW_HOST_RATIO` times the
    median of the other ranks doing the same work: rank -> (its, their median), us."""
    w = results(ctx)
    if w is None:
        return {}
    m = w.model
    per_step: dict[int, float] = {}
    for g in m.graphs:
        work = g.removable.get("host_work")
        steps = max(int(m.compute_by_step[g.rank].size), 1) if g.rank in m.compute_by_step else 1
        if work is not None and work[0].size:
            per_step[g.rank] = iv.total(work) / steps
    slow: dict[int, tuple[float, float]] = {}
    for r, own in per_step.items():
        others = [per_step[q] for q in m.peers.get(r, ()) if q != r and q in per_step]
        if others and own >= SLOW_HOST_RATIO * float(np.median(others)):
            slow[r] = (own, float(np.median(others)))
    return slow


def _host(ctx: AdviceContext) -> Finding | None:
    got = replayed(ctx, "peer_median_host")
    if got is None or got.pct < MIN_SAVINGS_PCT:
        return None
    slow = slow_hosts(ctx)
    if not slow:
        return None
    ranks = sorted(slow, key=lambda r: -slow[r][0] / slow[r][1])
    first = ranks[0]
    own, peer = slow[first]
    named = {int(x.rank): x for x in ctx.cross.stragglers}
    evidence = [said("slowpath.host", rank=first, own_us=own, peers_us=peer, ratio=own / peer)]
    x = named.get(first)
    if x is not None:
        evidence.append(said("slowrank.waited_at", rank=first, wait_us_per_step=float(x.caused_wait_us_per_step),
                             last_arrivals=x.last_arrivals))
    evidence.append(got.said)
    facts: dict[str, Fact] = {
        "slow_rank": first, "host_us_per_step": own, "peers_host_us_per_step": peer, "host_ratio": own / peer,
        "slow_hosts": len(ranks), **got.facts,
    }
    return Finding("straggler-host", Cause.STRAGGLER, got.pct,
                   said("title.straggler-host", ranks=tuple(ranks), ratio=own / peer), tuple(evidence),
                   (said("slowpath.host_actions", ranks=tuple(ranks)),), ranks=tuple(ranks), whatif=got.name,
                   facts=facts)


@advisor
def slow_path_advice(ctx: AdviceContext) -> list[Finding]:
    if not ctx.reports:
        return []
    return [f for f in (_link(ctx), _collective(ctx), _host(ctx)) if f is not None]


__all__ = ["MIN_SAVINGS_PCT", "SLOW_HOST_RATIO", "slow_hosts", "slow_path_advice"]

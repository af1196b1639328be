"""Ranks that compute slower than the ranks doing the same work (``straggler-rank``): a slow
GPU, clock or node, or heavier data on that rank; and which of the two the trace shows."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpuprof.accounting.summary import RankSummary
from gpuprof.advice.context import AdviceContext
from gpuprof.advice.finding import Fact, Finding, Said, said
from gpuprof.advice.replayed import replayed, results
from gpuprof.model.report import Cause, RankReport

# Below this share of the job step time a finding is not worth a recommendation.
MIN_SAVINGS_PCT = 1.0
# A slow rank runs "more work" when it launches this many times the compute kernels (or
# ops) of its peers' median per step, or is not slower than them in every step.
MORE_WORK_RATIO = 1.1
SLOWER_EVERY_STEP_RATIO = 1.05


def _peers_complete(ctx: AdviceContext, peers: Sequence[int]) -> bool:
    """Whether ``peers`` (ranks doing the same work) are every data-parallel replica the
    layout says the job has."""
    by_rank = {s.rank: s for s in ctx.summaries}
    sizes = {int(by_rank[r].parallel.get("dp_size", 0)) for r in peers if r in by_rank}
    return len(sizes) == 1 and min(sizes) >= 2 and len(set(peers)) >= min(sizes)


def _work_or_hardware(ctx: AdviceContext, rank: int, peers: Sequence[int]) -> tuple[str, list[Said]]:
    """Whether a slow rank has more work than its peers (``work``: more kernels per step,
    or slower only in some steps, as data of varying size makes it) or is slower on the
    same work in every step (``hardware``: the GPU, its clocks or its node), with the
    evidence."""
    w = results(ctx)
    by = {s.rank: s for s in ctx.summaries}
    others = [q for q in peers if q != rank and q in by]
    me = by.get(rank)
    if w is None or me is None or not others:
        return "hardware", []

    def per_step(s: RankSummary) -> float | None:
        n = s.facts.kernels if s.facts is not None else None
        if not n and s.graph is not None:
            n = int(np.sum(s.graph.kind == 0))  # compute events of an op-level timeline
        return float(n) / max(len(s.steps), 1) if n else None

    mine, theirs = per_step(me), [x for x in (per_step(by[q]) for q in others) if x]
    what = "kernels" if me.facts is not None and me.facts.kernels else "compute_ops"
    if mine and theirs and mine >= MORE_WORK_RATIO * float(np.median(theirs)):
        return "work", [said("slowrank.more_work", rank=rank, mine=mine, median=float(np.median(theirs)), what=what)]
    table = w.model.compute_by_step
    if rank in table and all(q in table for q in others):
        steps = min(int(table[q].size) for q in (rank, *others))
        if steps >= 2:
            theirs_t = np.vstack([table[q][:steps] for q in others])
            med = np.median(theirs_t, axis=0)
            ratio = table[rank][:steps] / np.where(med > 0, med, np.inf)
            # A slow GPU computes the most of its group in every step; data of varying
            # size makes a different rank the heaviest from step to step.
            heaviest = table[rank][:steps] >= theirs_t.max(axis=0)
            lo, hi = float(np.min(ratio)), float(np.max(ratio))
            if lo < SLOWER_EVERY_STEP_RATIO or not heaviest.all():
                return "work", [said("slowrank.follows_data", rank=rank, low=lo, high=hi,
                                     heaviest=int(heaviest.sum()), steps=steps)]
            return "hardware", [said("slowrank.slower_every_step", rank=rank, low=lo, high=hi, what=what)]
    return "unknown", []


def slow_rank_advice(ctx: AdviceContext, reports: Sequence[RankReport]) -> Finding | None:
    """Ranks that compute clearly slower than the ranks doing the same work (the same
    pipeline stage on the other data-parallel replicas, or every rank of a data-parallel
    job): a slow GPU, clocks, node or heavier data on that rank. The estimate is the
    ``peer_median_compute`` replay: their compute at their peers' median, the whole job
    replayed (whoever waited for them, in collectives or the pipeline, waits less)."""
    w = results(ctx)
    if w is None:
        return None
    slow = w.model.slow_ranks()
    if ctx.cross.straggler_analysis.incomplete_groups:
        # With ranks missing, a slower peer may be among them: a rank is called slow only
        # where every rank doing the same work is in the input (the same stage on every
        # data-parallel replica the layout names: TP peers, absent from a timeline that
        # keeps one TP rank per position, do the same work and change nothing).
        slow = {r: x for r, x in slow.items() if _peers_complete(ctx, w.model.peers.get(r, ()))}
    got = replayed(ctx, "peer_median_compute")
    if not slow or got is None or got.pct < MIN_SAVINGS_PCT:
        return None
    ranks = sorted(slow)
    per = ctx.cross.per_rank
    comp = w.model.compute_us_per_step
    evidence: list[Said] = []
    peers = {r: [q for q in w.model.peers.get(r, ()) if q != r] for r in ranks}
    peer_median = {r: float(np.median([comp[q] for q in peers[r]])) for r in ranks}
    for r in ranks:
        row = per.get(r)
        stage = row.stage if row is not None else None
        if stage is not None:
            evidence.append(said("slowrank.computes_stage", rank=r, compute_us=comp[r], ratio=slow[r], stage=stage,
                                 peers=tuple(peers[r]), peer_median_us=peer_median[r]))
        else:
            evidence.append(said("slowrank.computes", rank=r, compute_us=comp[r], ratio=slow[r], peers=tuple(peers[r]),
                                 peer_median_us=peer_median[r]))
    waited = [rp for rp in reports if rp.rank not in slow and float(rp.lost_us.get(Cause.STRAGGLER, 0.0)) > 0]
    wait_share = None
    if waited:
        wait_share = max(float(rp.lost_us.get(Cause.STRAGGLER, 0.0)) / max(rp.window_us, 1e-9) for rp in waited)
        evidence.append(said("slowrank.others_wait", ranks=tuple(rp.rank for rp in waited), share_pct=100 * wait_share))
    named = {int(x.rank): x for x in ctx.cross.stragglers}
    phase = None
    for r in ranks:
        x = named.get(r)
        if x is None:
            continue
        evidence.append(said("slowrank.waited_at", rank=r, wait_us_per_step=float(x.caused_wait_us_per_step),
                             last_arrivals=x.last_arrivals))
        if x.phase:
            phase = phase or x.phase
            evidence.append(said("slowrank.phase", rank=r, phase=x.phase, ratio=float(x.phase_ratio or 0.0),
                                 excess_us_per_step=float(x.phase_excess_us_per_step or 0.0)))
    stages = {per[r].stage for r in ranks if r in per} - {None}
    kinds = {r: _work_or_hardware(ctx, r, w.model.peers.get(r, ())) for r in ranks}
    work = all(k == "work" for k, _ in kinds.values())
    unknown = any(k == "unknown" for k, _ in kinds.values())
    for _, lines in kinds.values():
        evidence.extend(lines)
    if stages and not work:
        evidence.append(said("slowrank.stage_elsewhere_normal"))
    evidence.append(got.said)
    first = ranks[0]
    x0 = named.get(first)
    facts: dict[str, Fact] = {
        "slow_rank": first,
        "slow_ranks": len(ranks),
        "compute_us_per_step": comp[first],
        "peer_median_compute_us_per_step": peer_median[first],
        "compute_ratio": slow[first],
        "peers": len(peers[first]),
        "stage": per[first].stage if first in per else None,
        "kind": "work" if work else "unknown" if unknown else "hardware",
        "max_wait_pct": None if wait_share is None else 100.0 * wait_share,
        "caused_wait_us_per_step": None if x0 is None else float(x0.caused_wait_us_per_step),
        "phase": phase,
        **got.facts,
    }
    ratio = max(slow.values())
    title = said("title.straggler.work" if work else "title.straggler.slow_gpu", ranks=tuple(ranks), ratio=ratio)
    actions = said("slowrank.work_actions") if work else said("slowrank.gpu_actions", phase=phase, unknown=unknown)
    return Finding("straggler-rank", Cause.STRAGGLER, got.pct, title, tuple(evidence), (actions,), ranks=tuple(ranks),
                   whatif=got.name, facts=facts)

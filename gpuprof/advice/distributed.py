"""Advice for distributed jobs: stragglers, pipeline bubbles and imbalance, communication.

Every estimate follows :mod:`gpuprof.advice.savings`: the job's step time is the slowest
rank's, and a fix saves what it takes off that. Recommendation ids are stable:

``straggler-rank``        named slow ranks that the others wait for in collectives (or at
                          barriers of op-level timelines); estimate: the critical-path gain,
                          i.e. each collective the rank is last at ends sooner by its margin
                          over the next-latest member, on every rank
``straggler-rotating``    a different rank is last at each collective (data-dependent
                          imbalance): no one rank is named
``straggler-absent-rank`` ranks wait in collectives for a rank that is not in the input
``pipeline-imbalance``, ``pipeline-bubble``: see :mod:`gpuprof.advice.pipeline`
``communication-slow-collectives`` collectives far slower than their bytes need at link
                          speed: waiting for ranks not in the input, or a slow transport
``comm-overlap``          exposed collectives that hardly overlap compute
``exposed-communication`` exposed collectives that already overlap but still cost time, or
                          of an inference job (tensor-parallel collectives on the critical path)

Evidence says when the conclusion rests on one profiled step.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

# The pipeline advisors live beside these; importing registers them.
from gpuprof.advice import pipeline as _pipeline  # noqa: F401
from gpuprof.advice.context import AdviceContext, advisor
from gpuprof.advice.replayed import best, replayed, results
from gpuprof.advice.savings import cause_savings_pct, job_step_time_us, savings_pct, step_time_us
from gpuprof.model import intervals as iv
from gpuprof.model.report import Cause, RankReport, Recommendation
from gpuprof.model.timeline import Category
from gpuprof.util import phrases
from gpuprof.util.phrases import duration

# Below this share of the job step time a finding is not worth a recommendation.
MIN_SAVINGS_PCT = 1.0
# Exposed collectives whose device time overlaps compute less than this are not overlapped.
# DDP's bucketed all-reduces already hide a visible share (mi300 ResNet: 25%) behind
# backward; telling such a job to "overlap with backward" misreads it.
LOW_OVERLAP = 0.15


def _ms(us: float) -> str:
    return duration(us)  # the one duration formatter of every report (gpuprof.util.phrases)


def _ranks_text(ranks: Sequence[int]) -> str:
    return ", ".join(str(r) for r in ranks)


_PHASE_ACTIONS: Mapping[str | None, tuple[str, ...]] = {
    "data": (
        (
            "Feed the slow rank faster: more DataLoader workers (num_workers), pin_memory=True, "
            "prefetch_factor, or pre-tokenized / pre-decoded data on local disk."
        ),
        (
            "If its batches are heavier (longer sequences), balance work per rank: length "
            "bucketing or sequence packing so that every rank gets the same number of tokens."
        ),
    ),
    "forward": (
        (
            "Give the slow rank the same work as the others: for data-dependent work use length "
            "bucketing or sequence packing; for sharded models (embedding tables, experts) "
            "rebalance the shard placement."
        ),
        (
            "Check the slow rank's GPU for throttling or a different clock "
            "(nvidia-smi -q -d PERFORMANCE,CLOCK) and its PCIe/NVLink health."
        ),
    ),
    "backward": (
        (
            "Give the slow rank the same work as the others: for data-dependent work use length "
            "bucketing or sequence packing; for sharded models (embedding tables, experts) "
            "rebalance the shard placement."
        ),
        (
            "Check the slow rank's GPU for throttling or a different clock "
            "(nvidia-smi -q -d PERFORMANCE,CLOCK) and its PCIe/NVLink health."
        ),
    ),
    "optimizer": (
        (
            "Balance optimizer state across ranks (ZeRO / FSDP sharding evenly, or a fused / "
            "foreach optimizer) so the slow rank does not update more parameters than the others."
        ),
    ),
    None: (
        (
            "The slow rank starts its steps late: look at what it does between steps (logging, "
            "checkpointing, metrics, garbage collection, input preparation on rank-specific data) "
            "and move that off the critical path or onto every rank alike."
        ),
        (
            "Check the slow rank's GPU and host for throttling or contention "
            "(nvidia-smi -q -d PERFORMANCE, other processes on that host)."
        ),
    ),
}


def _one_step_note(
    reports: Sequence[RankReport], what: str = "arrival order can change from step to step"
) -> list[str]:
    """Nothing: that every estimate rests on a single profiled step is said once for the
    whole report, under its headline (gpuprof.model.figures.report_caveats), not in each
    recommendation."""
    return []


def _skew_text(ctx: AdviceContext, reports: Sequence[RankReport]) -> tuple[list[str], list[int]]:
    """Evidence about ranks that start their steps early and wait (arrival skew)."""
    early = list((ctx.cross.get("straggler_analysis") or {}).get("early_starters") or [])
    if not early:
        return [], []
    ranks = [int(e["rank"]) for e in early]
    leads = [float(e["lead_us"]) for e in early]
    waits = [float(e["wait_us_per_step"]) for e in early]
    lead_txt = (
        _ms(min(leads))
        if max(leads) - min(leads) < 0.1 * max(leads)
        else f"{_ms(min(leads))}-{_ms(max(leads))}"
    )
    lead_txt += " before the median rank"
    last = [float(e["lead_over_last_us"]) for e in early if e.get("lead_over_last_us") is not None]
    if last:
        lead_txt += f" ({_ms(max(last))} before the last rank to start)"
    wait_txt = _ms(min(waits)) if len(waits) == 1 else f"{_ms(min(waits))}-{_ms(max(waits))}"
    return [
        (
            f"arrival skew: rank{'s' if len(ranks) > 1 else ''} {_ranks_text(ranks)} begin{'' if len(ranks) > 1 else 's'} "
            f"the step {lead_txt} and wait{'' if len(ranks) > 1 else 's'} {wait_txt} per step in "
            "collectives: most of that waiting is their early start, not another rank's lateness"
        )
    ], ranks


_SKEW_ACTION = (
    "Arrival skew (some ranks start the step early and wait): find what the other ranks do before the "
    "first collective that these do not (data loading, host-side preprocessing of rank-specific input, "
    "logging) and even it out; it costs the early ranks idle time, not the job's step time."
)


def _named_straggler_advice(
    ctx: AdviceContext,
    reports: Sequence[RankReport],
    stragglers: Sequence[Mapping[str, Any]],
    wait: Mapping[int, float],
) -> Recommendation | None:
    """Named slow ranks. The estimate is the critical-path gain: if a slow rank arrived
    with the next-latest member, each collective it is last at would end that much
    sooner on every rank; the rest of the spread of arrivals is not its doing. Without the
    gains (older findings) the waits of the others are the estimate."""
    slow = [int(x["rank"]) for x in stragglers]
    others = [r for r in reports if r.rank not in slow]
    if not others:
        return None
    have_gain = all(x.get("gain_us_per_step") is not None for x in stragglers)
    if have_gain:
        joint = (ctx.cross.get("straggler_analysis") or {}).get("stragglers_gain_us_per_step")
        gain = float(joint) if joint is not None else sum(float(x["gain_us_per_step"]) for x in stragglers)
        removed = {r.rank: gain * max(r.steps, 1) for r in reports}
    else:
        median_wait = float(np.median([wait[r.rank] for r in others]))
        removed = {r.rank: wait[r.rank] for r in others}
        removed.update({r: median_wait for r in slow})
    pct = savings_pct(reports, removed)
    # A straggler that is late because it begins its step late (no phase inside the step
    # is slower): the replay of every late rank beginning with the median rank.
    w = results(ctx)
    late_ranks = sorted(w.model.late_start_us) if w is not None else []
    on_time = (
        replayed(ctx, "on_time_start")
        if late_ranks and all(not x.get("phase") and int(x["rank"]) in late_ranks for x in stragglers)
        else None
    )
    if on_time is not None:
        pct = on_time.pct
    if pct < MIN_SAVINGS_PCT:
        return None
    evidence = []
    for x in stragglers:
        gains = [float(g) for g in x.get("gains_us") or []]
        if gains:
            evidence.append(
                f"rank {x['rank']} arrived last at {x['last_arrivals']} of {x['collectives']} collectives, by "
                + ", ".join(_ms(g) for g in gains)
                + f" over the next-latest rank: {_ms(float(x['gain_us_per_step']))} per step on the critical path"
            )
        else:
            evidence.append(
                f"rank {x['rank']} arrived last at {x['last_arrivals']} of {x['collectives']} collectives"
            )
        evidence.append(
            f"the other ranks waited {_ms(float(x['caused_wait_us_per_step']))} per step at those collectives "
            "(median per collective, summed); only the margin over the next-latest rank is this rank's doing"
        )
        if x.get("phase"):
            evidence.append(
                f"rank {x['rank']}'s {x['phase']} takes {float(x['phase_ratio']):.2f}x the median of the other "
                f"{len(others)} ranks ({_ms(float(x['phase_excess_us_per_step']))} more per step)"
            )
        elif x.get("late_start_us") is not None and float(x["late_start_us"]) > 0:
            evidence.append(
                f"rank {x['rank']} begins its step {_ms(float(x['late_start_us']))} after the median rank; "
                "no phase inside the step is markedly slower"
            )
    arrivals = (ctx.cross.get("straggler_analysis") or {}).get("arrivals") or {}
    counts = {int(r): int(n) for r, n in (arrivals.get("last_counts") or {}).items()}
    also = [r for r in counts if r not in slow]
    if also:
        evidence.append(
            "other ranks arrive last elsewhere: "
            + ", ".join(f"rank {r} at {counts[r]}" for r in also)
            + f" of {arrivals.get('collectives')} collectives"
        )
    skew, early = _skew_text(ctx, reports)
    evidence.extend(skew)
    if on_time is not None and w is not None:
        lates = w.model.late_start_us
        also_late = [r for r in late_ranks if r not in slow]
        if also_late:
            evidence.append(
                f"rank{'s' if len(also_late) > 1 else ''} {_ranks_text(also_late)} also begin{'' if len(also_late) > 1 else 's'} "
                "the step late: "
                + ", ".join(f"rank {r} {_ms(lates[r])}" for r in also_late)
                + " after the median rank"
            )
            alone = w.model.on_time_pct(slow, w.baseline.step_us)
            several = len(slow) > 1
            if alone is not None:
                evidence.append(
                    f"with only rank{'s' if several else ''} {_ranks_text(slow)} on time the step shortens by {alone:.1f}%: "
                    "the next-latest rank then holds the collectives; every late rank on time saves the "
                    f"{on_time.pct:.1f}% below"
                )
        evidence.append(on_time.line)
    elif have_gain:
        evidence.append(
            "estimate: every rank's step shortens by the critical-path gain above, through the slowest-rank "
            "step-time model"
        )
    evidence.extend(_one_step_note(reports))
    n_last = sum(int(x["last_arrivals"]) for x in stragglers)
    n_coll = max(int(x["collectives"]) for x in stragglers)
    many = len(slow) > 1
    phase = stragglers[0].get("phase")
    actions = tuple(_PHASE_ACTIONS.get(phase, _PHASE_ACTIONS[None])) + ((_SKEW_ACTION,) if early else ())
    if on_time is not None:
        lates_many = len(late_ranks) > 1
        return Recommendation(
            id="straggler-rank",
            category=Cause.STRAGGLER,
            title=f"Rank{'s' if lates_many else ''} {_ranks_text(late_ranks)} begin{'' if lates_many else 's'} the "
            f"step late and the job waits for {'them' if lates_many else 'it'} (rank{'s' if many else ''} "
            f"{_ranks_text(slow)} last at {n_last} of {n_coll} collectives): find what delays "
            f"{'them' if lates_many else 'it'} before the step",
            estimated_savings_pct=pct,
            ranks=tuple(late_ranks),
            evidence=tuple(evidence),
            actions=actions,
            whatif=on_time.name,
        )
    return Recommendation(
        id="straggler-rank",
        category=Cause.STRAGGLER,
        title=f"Rank{'s' if many else ''} {_ranks_text(slow)} arrive{'' if many else 's'} last at {n_last} of "
        f"{n_coll} collectives: make {'them' if many else 'it'} as fast as the others",
        estimated_savings_pct=pct,
        ranks=tuple(slow),
        evidence=tuple(evidence),
        actions=actions,
    )


def _variation_text(ctx: AdviceContext) -> list[str]:
    """How much the compute ops' durations vary (op-level timelines) and how often the
    slowest rank changes from step to step: the signature of data-dependent work."""
    w = results(ctx)
    if w is None:
        return []
    out = []
    var = w.model.op_variation()
    shown = sorted(((n, v) for n, v in var.items() if v[2] >= 2), key=lambda kv: -kv[1][0] * kv[1][2])[:3]
    if shown:
        out.append(
            "the ops' durations vary widely: "
            + "; ".join(f"{n} {_ms(m)} mean, coefficient of variation {cv:.2f} over {k} ops" for n, (m, cv, k) in shown)
        )
    per_group = w.model.slowest_per_step()
    steps = max((len(v) for v in per_group.values()), default=0)
    changing = [g for g, v in per_group.items() if len(set(v)) > 1]
    if steps >= 2 and changing:
        distinct = max(len(set(per_group[g])) for g in changing)
        out.append(
            f"among the ranks doing the same work, the one with the most compute changes from step to step "
            f"(up to {distinct} different ranks in {steps} steps, in {len(changing)} of {len(per_group)} groups)"
        )
    return out


def _rotating_advice(ctx: AdviceContext, reports: Sequence[RankReport]) -> Recommendation | None:
    """Lateness that moves from rank to rank: data-dependent imbalance, not one slow rank."""
    arrivals = (ctx.cross.get("straggler_analysis") or {}).get("arrivals") or {}
    if not arrivals.get("rotating"):
        return None
    gain = float(arrivals.get("gain_us_per_step") or 0.0)
    # The fix is the same work per rank in every step: balanced batches where the ops are
    # known (every replica's and microbatch's op at the step's mean), else each rank's
    # compute in each step at its peers' median, replayed; the critical-path gain (the last
    # arrival brought to the next-latest) where the job could not be replayed.
    got = best(ctx, ("balanced_batches", "peer_median_compute"))
    pct = got.pct if got is not None else savings_pct(reports, {r.rank: gain * max(r.steps, 1) for r in reports})
    if pct < MIN_SAVINGS_PCT:
        return None
    counts = {int(r): int(n) for r, n in (arrivals.get("last_counts") or {}).items()}
    ranks = sorted(counts, key=lambda r: (-counts[r], r))
    w = results(ctx)
    # Where the batches are balanced, the fix takes work from the ranks that carried more
    # than their stage's mean in some step.
    heavy = w.model.heavy_ranks() if w is not None and got is not None and got.name == "balanced_batches" else []
    skew, _ = _skew_text(ctx, reports)
    return Recommendation(
        id="straggler-rotating",
        category=Cause.STRAGGLER,
        title="The work varies from batch to batch and a different rank is last each time: balance the data per step",
        estimated_savings_pct=pct,
        ranks=tuple(heavy or ranks),
        evidence=(
            f"of {arrivals.get('collectives')} collectives, the last to arrive was "
            + ", ".join(f"rank {r} at {counts[r]}" for r in ranks[:8])
            + (f" and {len(ranks) - 8} more ranks" if len(ranks) > 8 else ""),
            *_variation_text(ctx),
            (
                f"the last arrival leads the next-latest by {_ms(gain)} per step in total: what evening out "
                "the work would take off the critical path"
            ),
            *((got.line,) if got is not None else ()),
            *skew,
            *_one_step_note(reports),
        ),
        actions=(
            (
                "Lateness that moves between ranks is data-dependent: give every rank and microbatch the same "
                "work -- sequence packing to a fixed number of tokens per microbatch, or length bucketing so a "
                "global batch holds sequences of similar length, then split by tokens rather than by samples."
            ),
            (
                "For RL rollouts of uneven length: schedule rollouts across ranks by expected length (longest "
                "first), or cap and resume long generations, so no rank waits for one long tail."
            ),
            "Check for host-side jitter on all ranks alike (garbage collection, logging, page cache).",
        ),
        whatif=got.name if got is not None else None,
    )


def _peers_complete(ctx: AdviceContext, peers: Sequence[int]) -> bool:
    """Whether ``peers`` (ranks doing the same work) are every data-parallel replica the
    layout says the job has."""
    by_rank = {s.rank: s for s in ctx.summaries}
    sizes = {int(by_rank[r].parallel.get("dp_size", 0)) for r in peers if r in by_rank}
    return len(sizes) == 1 and min(sizes) >= 2 and len(set(peers)) >= min(sizes)


# A slow rank runs "more work" when it launches this many times the compute kernels (or
# ops) of its peers' median per step, or is not slower than them in every step.
MORE_WORK_RATIO = 1.1
SLOWER_EVERY_STEP_RATIO = 1.05


def _work_or_hardware(ctx: AdviceContext, rank: int, peers: Sequence[int]) -> tuple[str, list[str]]:
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

    def per_step(s: Any) -> float | None:
        n = s.facts.get("kernels")
        if not n and s.graph is not None:
            n = int(np.sum(s.graph.kind == 0))  # compute events of an op-level timeline
        return float(n) / max(len(s.steps), 1) if n else None

    mine, theirs = per_step(me), [x for x in (per_step(by[q]) for q in others) if x]
    what = "kernels" if me.facts.get("kernels") else "compute ops"
    if mine and theirs and mine >= MORE_WORK_RATIO * float(np.median(theirs)):
        return "work", [
            f"rank {rank} runs {mine:,.0f} {what} per step against a median of {float(np.median(theirs)):,.0f} on "
            "the ranks doing the same work: it has more work, not a slower GPU"
        ]
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
            if float(np.min(ratio)) < SLOWER_EVERY_STEP_RATIO or not heaviest.all():
                return "work", [
                    f"rank {rank} computes {float(np.min(ratio)):.2f}-{float(np.max(ratio)):.2f}x its peers' median "
                    f"from step to step and is the heaviest of them in {int(heaviest.sum())} of {steps} steps: the "
                    "work follows its data (a slow GPU would be the slowest in every step)"
                ]
            return "hardware", [
                f"rank {rank} is the slowest of the ranks doing the same work in every step ({float(np.min(ratio)):.2f}-"
                f"{float(np.max(ratio)):.2f}x their median) on the same number of {what}: the same work runs slower there"
            ]
    return "unknown", []


_WORK_ACTIONS: tuple[str, ...] = (
    (
        "Balance the data across ranks: sequence packing to a fixed number of tokens per rank and step, or length "
        "bucketing so that each global batch holds sequences of similar length, split by tokens rather than samples."
    ),
    (
        "For RL rollouts of uneven length: schedule rollouts across ranks by expected length (longest first), cap "
        "and resume long generations, or generate asynchronously from training."
    ),
    "For sharded models (embedding tables, experts): rebalance the shard or expert placement by measured load.",
)


def _slow_rank_advice(ctx: AdviceContext, reports: Sequence[RankReport]) -> Recommendation | None:
    """Ranks that compute clearly slower than the ranks doing the same work (the same
    pipeline stage on the other data-parallel replicas, or every rank of a data-parallel
    job): a slow GPU, clocks, node or heavier data on that rank. The estimate is the
    ``peer_median_compute`` replay: their compute at their peers' median, the whole job
    replayed (whoever waited for them, in collectives or the pipeline, waits less)."""
    w = results(ctx)
    info = ctx.cross.get("straggler_analysis") or {}
    if w is None:
        return None
    slow = w.model.slow_ranks()
    if info.get("incomplete_groups"):
        # With ranks missing, a slower peer may be among them: a rank is called slow only
        # where every rank doing the same work is in the input (the same stage on every
        # data-parallel replica the layout names: TP peers, absent from a timeline that
        # keeps one TP rank per position, do the same work and change nothing).
        slow = {r: x for r, x in slow.items() if _peers_complete(ctx, w.model.peers.get(r, ()))}
    got = replayed(ctx, "peer_median_compute")
    if not slow or got is None or got.pct < MIN_SAVINGS_PCT:
        return None
    ranks = sorted(slow)
    per = ctx.cross.get("per_rank") or {}
    comp = w.model.compute_us_per_step
    evidence = []
    for r in ranks:
        peers = [q for q in w.model.peers.get(r, ()) if q != r]
        stage = per.get(r, {}).get("stage")
        same = f"the other ranks of pipeline stage {stage}" if stage is not None else "the other ranks"
        evidence.append(
            f"rank {r} computes {_ms(comp[r])} per step, {slow[r]:.2f}x the median of {same} doing the same work "
            f"({phrases.ranks(peers)}: {_ms(float(np.median([comp[q] for q in peers])))})"
        )
    waited = [rp for rp in reports if rp.rank not in slow and float(rp.lost_us.get(Cause.STRAGGLER, 0.0)) > 0]
    if waited:
        share = max(float(rp.lost_us.get(Cause.STRAGGLER, 0.0)) / max(rp.window_us, 1e-9) for rp in waited)
        evidence.append(
            f"{phrases.ranks([rp.rank for rp in waited])} {'wait' if len(waited) > 1 else 'waits'} for it in "
            f"collectives, up to {100 * share:.0f}% of {'their' if len(waited) > 1 else 'its'} step"
        )
    named = {int(x["rank"]): x for x in ctx.cross.get("stragglers") or []}
    phase = None
    for r in ranks:
        x = named.get(r)
        if x is None:
            continue
        evidence.append(
            f"the other ranks waited {_ms(float(x['caused_wait_us_per_step']))} per step for rank {r} at the "
            f"{x['last_arrivals']} collectives it arrived last at"
        )
        if x.get("phase"):
            phase = phase or x["phase"]
            evidence.append(
                f"rank {r}'s {x['phase']} takes {float(x['phase_ratio']):.2f}x the median of the others "
                f"({_ms(float(x['phase_excess_us_per_step']))} more per step)"
            )
    stages = {per.get(r, {}).get("stage") for r in ranks} - {None}
    kinds = {r: _work_or_hardware(ctx, r, w.model.peers.get(r, ())) for r in ranks}
    work = all(k == "work" for k, _ in kinds.values())
    unknown = any(k == "unknown" for k, _ in kinds.values())
    for _, lines in kinds.values():
        evidence.extend(lines)
    if stages and not work:
        evidence.append(
            "the same stage runs at normal speed on the other data-parallel replicas: the layers are not too many "
            "for the stage, this rank is slow"
        )
    evidence.append(got.line)
    evidence.extend(_one_step_note(reports, "compute times vary from step to step"))
    many = len(ranks) > 1
    if work:
        return Recommendation(
            id="straggler-rank",
            category=Cause.STRAGGLER,
            title=f"Work imbalance: rank{'s' if many else ''} {_ranks_text(ranks)} get{'' if many else 's'} more work "
            f"than the ranks doing the same job ({max(slow.values()):.1f}x the compute), and the whole job waits: "
            "balance the data",
            estimated_savings_pct=got.pct,
            ranks=tuple(ranks),
            evidence=tuple(evidence),
            actions=_WORK_ACTIONS,
            whatif=got.name,
        )
    return Recommendation(
        id="straggler-rank",
        category=Cause.STRAGGLER,
        title=f"Rank{'s' if many else ''} {_ranks_text(ranks)} compute{'' if many else 's'} "
        f"{max(slow.values()):.1f}x slower than the ranks doing the same work, and the whole job waits: "
        "check that GPU and node",
        estimated_savings_pct=got.pct,
        ranks=tuple(ranks),
        evidence=tuple(evidence),
        # The phase's own first action only where it is not about the data (a slow GPU,
        # not heavier batches: balancing the data is the work-imbalance advice).
        actions=tuple(
            a
            for a in (_PHASE_ACTIONS[phase][:1] if phase in _PHASE_ACTIONS and phase is not None else ())
            if phase in ("data", "optimizer")
        )
        + (
            (
                "Check the slow rank's GPU: clocks and throttle reasons (nvidia-smi -q -d PERFORMANCE,CLOCK), "
                "temperature and power cap, ECC/XID errors in dmesg, and that nothing else runs on it "
                "(nvidia-smi, other processes on that host)."
            ),
            (
                "Check its node: CPU frequency governor and contention, NUMA/PCIe placement of the GPU and NIC "
                "(nvidia-smi topo -m), and whether it is a different GPU model or driver."
            ),
            "Until fixed, exclude or replace the node: the job moves at the pace of its slowest rank.",
        )
        # With one step the trace cannot tell a slow GPU from heavier data: both checks.
        + (_WORK_ACTIONS[:1] if unknown else ()),
        whatif=got.name,
    )


@advisor
def straggler_advice(ctx: AdviceContext) -> list[Recommendation]:
    stragglers: list[Mapping[str, Any]] = list(ctx.cross.get("stragglers") or [])
    reports = list(ctx.reports)
    if not reports:
        return []
    wait = {r.rank: float(r.lost_us.get(Cause.STRAGGLER, 0.0)) for r in reports}
    out: list[Recommendation] = []
    peer = _slow_rank_advice(ctx, reports)
    if peer is not None:
        return [peer]
    if stragglers:
        rec = _named_straggler_advice(ctx, reports, stragglers, wait)
        return [rec] if rec is not None else []
    rotating = _rotating_advice(ctx, reports)
    if rotating is not None:
        return [rotating]
    barrier = _barrier_advice(ctx, reports, wait)
    if barrier is not None:
        return [barrier]
    info = ctx.cross.get("straggler_analysis") or {}
    if info.get("incomplete_groups") and sum(wait.values()) > 0:
        # What removing the measured waits saves under the critical-rank model: often
        # nothing, since the slow rank is not known. The advice is still given when the
        # waits are a visible share of the step: the fix is to collect the missing ranks.
        pct = cause_savings_pct(reports, Cause.STRAGGLER)
        worst = max(wait[r.rank] / max(r.steps, 1) for r in reports)
        if 100.0 * worst / max(job_step_time_us(reports), 1e-9) >= MIN_SAVINGS_PCT:
            groups = info["incomplete_groups"]
            desc = "; ".join(
                f"{g}: {v['present']} of {v['expected'] if int(v['expected']) > 0 else 'an unknown number of'} ranks"
                for g, v in groups.items()
            )
            out.append(
                Recommendation(
                    id="straggler-absent-rank",
                    category=Cause.STRAGGLER,
                    title="Ranks wait in collectives for a slower rank that is not in these traces: profile every rank",
                    estimated_savings_pct=pct,
                    ranks=(),
                    evidence=(
                        f"process groups only partly in the input ({desc})",
                        "measured waits among the ranks present: "
                        + ", ".join(
                            f"rank {r.rank} {_ms(wait[r.rank] / max(r.steps, 1))}/step" for r in reports
                        ),
                        *_arrivals_text(ctx),
                    ),
                    actions=(
                        (
                            "Collect traces from all ranks of the job (or at least whole process groups) so the slow "
                            "rank can be named, then rerun gpuprof analyze on the folder."
                        ),
                    ),
                )
            )
    return out


def _stages_text(ctx: AdviceContext, ranks: Sequence[int]) -> str:
    """``stages 0, 3 (ranks 0, 1, 6, 7)`` when the pipeline stages are known, else the ranks."""
    per = ctx.cross.get("per_rank") or {}
    stages = sorted({int(per[r]["stage"]) for r in ranks if r in per and "stage" in per[r]})
    if stages and all(r in per and "stage" in per[r] for r in ranks):
        word = "stage" if len(stages) == 1 else "stages"
        return f"{word} {_ranks_text(stages)} (ranks {_ranks_text(ranks)})"
    return f"rank{'s' if len(ranks) > 1 else ''} {_ranks_text(ranks)}"


def _late_comm_text(ops: Sequence[Mapping[str, Any]], barriers: int) -> list[str]:
    out = []
    for op in ops:
        if float(op["total_us"]) <= 0 or float(op["median_us"]) < 1000.0:
            continue
        text = f"{op['name']}: {_ms(float(op['median_us']))} median over {op['calls']} calls"
        if op["only_late_ranks"]:
            text += " (only these ranks run it before the barrier)"
        elif op.get("waiting_median_us") is not None:
            text += f" ({_ms(float(op['waiting_median_us']))} on the waiting ranks)"
        if op["outliers"]:
            lo, hi = (float(x) for x in op["outlier_us"])
            at = ", ".join(str(int(j) + 1) for j in op["outlier_barriers"])
            text += (
                f"; {op['outliers']} outlier calls of {_ms(lo)}-{_ms(hi)} at barrier{'s' if len(op['outlier_barriers']) > 1 else ''} "
                f"{at} of {barriers}"
            )
        out.append(text)
    return out


def _barrier_advice(
    ctx: AdviceContext, reports: Sequence[RankReport], wait: Mapping[int, float]
) -> Recommendation | None:
    """Ranks that wait at barriers of an op-level timeline for ranks that arrive late.

    The estimate follows the critical-path model of the named stragglers: if the late
    ranks arrived with the latest waiting rank, the barrier would come sooner by that
    rank's wait (the smallest wait among the waiting ranks), on every rank."""
    b: Mapping[str, Any] | None = ctx.cross.get("barrier_waits")
    if not b or not b.get("waited_for_ranks"):
        return None
    slow = [int(r) for r in b["waited_for_ranks"]]
    waiting = [r for r in reports if r.rank not in slow and wait[r.rank] > 0]
    if not waiting:
        return None
    gain = min(wait[r.rank] / max(r.steps, 1) for r in waiting)
    median_wait = float(np.median([wait[r.rank] for r in waiting]))
    pct = savings_pct(reports, {r.rank: gain * max(r.steps, 1) for r in reports})
    if pct < MIN_SAVINGS_PCT:
        return None
    activity: Mapping[str, int] = b.get("last_activity") or {}
    late_ops: list[Mapping[str, Any]] = list(b.get("late_comm") or [])
    comm_bound = any(name != "compute" for name in list(activity)[:1])
    steps = max(1, int(np.median([max(r.steps, 1) for r in waiting])))
    who = _stages_text(ctx, slow)
    evidence = [
        (
            f"{b['barriers']} barriers (ops that start at the same instant on every rank); ranks "
            f"{_ranks_text([r.rank for r in waiting])} wait at them {_ms(median_wait / steps)} per step "
            f"(median, pipeline bubble excluded) for {who}"
        ),
    ]
    ops_text = _late_comm_text(late_ops, int(b["barriers"]))
    if ops_text:
        evidence.append(
            f"between their last compute and each barrier, {who} run communication only: "
            + "; ".join(ops_text)
        )
    else:
        doing = ", ".join(f"{name} ({n} of {b['barriers']})" for name, n in activity.items())
        evidence.append(f"just before each barrier the last rank to arrive was in: {doing}")
    evidence.append(
        f"estimate: the barrier comes {_ms(gain)} per step sooner on every rank (the smallest wait among the "
        "waiting ranks) if the late ranks arrive with them"
    )
    evidence.extend(_one_step_note(reports))
    embedding = [
        op for op in late_ops if "embedding" in str(op["name"]).lower() and float(op["median_us"]) >= 1000.0
    ]
    actions: list[str] = []
    if embedding:
        actions.append(
            "The embedding-gradient all-reduce between the first and last pipeline stage (tied input/output "
            "embeddings) runs after the pipeline drain while the other stages wait: untie the embeddings "
            "(--untie-embeddings-and-output-weights), or place the first and last stage so that group's "
            "all-reduce runs over NVLink."
        )
        if any(op["outliers"] for op in embedding):
            actions.append(
                "Its outliers (10x+ the usual time) mark a slow or contended link at those steps: check that "
                "group's transport with NCCL_DEBUG=INFO and what else ran on the link then."
            )
    if comm_bound or late_ops:
        actions.append(
            "Overlap the gradient reduce-scatter with backward (Megatron: --overlap-grad-reduce with "
            "--use-distributed-optimizer) so the last stages to drain do not add it after their compute."
        )
    if not actions:
        actions.extend(_PHASE_ACTIONS["backward"])
    title = f"{who[0].upper()}{who[1:]} are the last to reach the barrier after the pipeline drain: " + (
        "their embedding-gradient all-reduce holds up the other stages"
        if embedding
        else "their communication after compute holds up the others"
        if late_ops or comm_bound
        else "the other ranks wait for them"
    )
    return Recommendation(
        id="straggler-rank",
        category=Cause.STRAGGLER,
        title=title,
        estimated_savings_pct=pct,
        ranks=tuple(slow),
        evidence=tuple(evidence),
        actions=tuple(actions),
    )


def _arrivals_text(ctx: AdviceContext) -> list[str]:
    per = ctx.cross.get("per_rank") or {}
    rows = [(int(r), v) for r, v in per.items() if v.get("collectives")]
    if len(rows) < 2:
        return []
    rank, v = max(rows, key=lambda x: x[1].get("last_arrivals", 0))
    return [
        (
            f"among the ranks present, rank {rank} arrives last at {v['last_arrivals']} of {v['collectives']} "
            "collectives (it is slower than the others present, but an absent rank may be slower still)"
        )
    ]


def _overlap_share(ctx: AdviceContext) -> float | None:
    """Share of collective device time that runs beside compute, over all ranks."""
    total = 0.0
    hidden = 0.0
    for s in ctx.summaries:
        c = s.comms_table
        if len(c) == 0:
            continue
        coll = np.asarray(c["category"]) == int(Category.COLLECTIVE)
        if not coll.any():
            continue
        ivs = iv.clip(iv.union(np.asarray(c["start_us"])[coll], np.asarray(c["end_us"])[coll]), s.window[0], s.window[1])
        if s.window_iv is not None:  # time left out between steps is not in the window
            ivs = iv.intersect(ivs, s.window_iv)
        total += iv.total(ivs)
        hidden += iv.total(iv.intersect(ivs, s.compute))
    return hidden / total if total > 0 else None


def _inference_comm(
    pct: float, ranks: tuple[int, ...], evidence: list[str], whatif: str | None = None
) -> Recommendation:
    """Exposed collectives of an inference job: tensor-parallel all-reduces sit on the
    critical path by design (there is no backward to hide them behind)."""
    return Recommendation(
        id="exposed-communication",
        category=Cause.COMMUNICATION,
        title="Tensor-parallel collectives sit on the inference critical path: make them cheaper or fewer",
        estimated_savings_pct=pct,
        ranks=ranks,
        evidence=(
            *evidence,
            (
                "inference job (no backward or optimizer work): each layer's all-reduce must finish before the "
                "next layer starts, so it cannot be hidden behind backward"
            ),
        ),
        actions=(
            (
                "Use a one-shot / custom all-reduce for small messages (vLLM's custom all-reduce, PyTorch "
                "symmetric-memory multimem all-reduce) and fuse the all-reduce with the following RMSNorm "
                "(vLLM / torch.compile fusion passes)."
            ),
            (
                "Lower the tensor-parallel degree and serve with more replicas (data parallel) when the model "
                "fits: fewer all-reduce hops per token."
            ),
            (
                "Capture decode steps in CUDA graphs so collectives and small kernels launch back to back; "
                "with NCCL_DEBUG=INFO check that the all-reduce uses NVLink (P2P/NVLS), not SHM or the network."
            ),
        ),
        whatif=whatif,
    )


_MEGATRON_COMMS = re.compile("grads-reduce-scatter|params-all-gather")


def _is_megatron(ctx: AdviceContext) -> bool:
    for s in ctx.summaries:
        c = s.comms_table
        if len(c) and any(_MEGATRON_COMMS.search(str(n)) for n in c["name"]):
            return True
    return False


def _inference(ctx: AdviceContext) -> bool:
    """An inference job: said by the summary's ``workload`` fact, else guessed from a
    Kineto trace whose host side was recorded (its collectives have launch times) and
    shows neither backward nor optimizer work."""
    said = [s.facts.get("workload") for s in ctx.summaries if s.facts]
    if any(w == "training" for w in said):
        return False
    if any(w == "inference" for w in said):
        return True
    kineto = [s for s in ctx.summaries if s.fmt == "kineto"]
    return bool(kineto) and all(
        "backward" not in s.phases_us
        and "optimizer" not in s.phases_us
        and len(s.comms_table) > 0
        and bool((~np.isnan(np.asarray(s.comms_table["launch_us"], dtype=np.float64))).any())
        for s in kineto
    )


def _slow_excess_us(ctx: AdviceContext, reports: Sequence[RankReport]) -> dict[int, float]:
    """Per rank, exposed collective time beyond what the bytes need at link speed (slow
    collectives only), capped by the rank's lost ``communication`` time (waits measured
    against ranks present are ``straggler`` already)."""
    bw: Mapping[str, Mapping[str, Any]] = ctx.cross.get("collective_bandwidth") or {}
    out: dict[int, float] = {}
    for r in reports:
        b = bw.get(str(r.rank))
        if not b or not b.get("excess_us_per_step"):
            continue
        excess = float(b["excess_us_per_step"]) * max(r.steps, 1)
        out[r.rank] = min(excess, float(r.lost_us.get(Cause.COMMUNICATION, 0.0)))
    return out


def _gb(gbps: float) -> str:
    return f"{gbps:.1f} GB/s" if gbps < 100 else f"{gbps:.0f} GB/s"


def _size(nbytes: float) -> str:
    if nbytes >= 1e5:
        return f"{nbytes / 1e6:.1f} MB"
    return f"{nbytes / 1e3:.0f} KB" if nbytes >= 1e3 else f"{nbytes:.0f} B"


def _range(lo: float, hi: float, fmt: Any) -> str:
    return str(fmt(lo)) if fmt(lo) == fmt(hi) else f"{fmt(lo)}-{fmt(hi)}"


def _slow_text(b: Mapping[str, Any], rank: int, device: str | None) -> str:
    d = b["slow"]
    peak = float(b["peak_gbps"])
    s_lo, s_hi = (float(x) for x in d["sizes_bytes"])
    d_lo, d_hi = (float(x) for x in d["duration_us"])
    if not d.get("busbw_gbps"):  # the transfer part is not known or too short to time
        return (
            f"rank {rank}: {b['slow_calls']} {'/'.join(d['names']) or 'collective'} calls of "
            f"{_range(s_lo, s_hi, _size)} take {_range(d_lo, d_hi, _ms)}, over 10x what their bytes need at "
            f"the ~{_gb(peak)} link peak of {device or 'this GPU'}; bandwidth "
            + str(b.get("bandwidth_note") or "not measurable")
        )
    lo, hi = (float(x) for x in d["busbw_gbps"])
    return (
        f"rank {rank}: {b['slow_calls']} {'/'.join(d['names']) or 'collective'} calls of "
        f"{_range(s_lo, s_hi, _size)} take {_range(d_lo, d_hi, _ms)}: "
        f"{_range(lo, hi, _gb)} achieved bus bandwidth, {peak / max(hi, 1e-9):.0f}-{peak / max(lo, 1e-9):.0f}x "
        f"below the ~{_gb(peak)} link peak of {device or 'this GPU'}"
    )


def _bandwidth_text(b: Mapping[str, Any], rank: int, device: str | None) -> str:
    lo, hi = b["sizes_bytes"]
    d_lo, d_hi = b["duration_us"]
    names = "/".join(b.get("names") or ["collective"])
    sizes = _size(lo) if lo == hi else f"{_size(lo)}-{_size(hi)}"
    durs = _ms(d_lo) if d_lo == d_hi else f"{_ms(d_lo)}-{_ms(d_hi)}"
    bw = b.get("busbw_gbps")
    kind = "bus" if bw is not None else "algorithm"
    bw = bw if bw is not None else b.get("algbw_gbps")
    if bw is None:  # no call's transfer part could be timed (see gpuprof.job.linkspeed)
        return f"rank {rank}: {b['calls']} {names} calls of {sizes} take {durs}: bandwidth " + str(
            b.get("bandwidth_note") or "not measurable"
        )
    text = f"rank {rank}: {b['calls']} {names} calls of {sizes} take {durs}: median {kind} bandwidth {_gb(float(bw))}"
    peak = b.get("peak_gbps")
    if peak:
        text += f", {100.0 * float(bw) / float(peak):.1f}% of the ~{_gb(float(peak))} link peak of {device or 'this GPU'}"
    return text


_TRANSPORT_ACTION = (
    "Check the transport with NCCL_DEBUG=INFO (RCCL: the same variable): the log names the path per peer "
    "(P2P/CUMEM or NVLS over NVLink/xGMI is fast; SHM, NET/Socket or a disabled P2P (NCCL_P2P_DISABLE=1) is "
    "not) and the protocol chosen."
)


def _slow_collective_actions(absent: bool) -> tuple[str, ...]:
    """With members missing from the input the first suspect is a late rank; with every
    member profiled (and none late, or the straggler advice would say so) it is the
    transport."""
    if absent:
        return (
            (
                "Profile all ranks (or whole process groups) and rerun gpuprof analyze on the folder: the "
                "cross-rank analysis then names the late rank(s) and measures how long the others wait."
            ),
            _TRANSPORT_ACTION,
            (
                "If a rank is late, look at what it does before the collective (data loading, host-side "
                "work, checkpointing, logging) on that rank."
            ),
        )
    return (
        _TRANSPORT_ACTION,
        (
            "Look for settings that force a slow path: NCCL_P2P_DISABLE, NCCL_SHM_DISABLE, NCCL_IB_DISABLE, a "
            "NCCL_SOCKET_IFNAME on the wrong interface, or GPUs of one node in different containers without "
            "shared IPC (NCCL then falls back to sockets)."
        ),
        (
            "Measure the link alone with nccl-tests (all_reduce_perf -b 8M -e 512M -f 2 -g <GPUs>) on the same "
            "nodes: if it reaches the expected bus bandwidth the job's setup differs, if not the system does."
        ),
    )


@advisor
def slow_collectives_advice(ctx: AdviceContext) -> list[Recommendation]:
    """Collectives far slower than their bytes need: a late (maybe absent) rank, or a
    transport that does not use the fast links. Estimate: the exposed time beyond the
    time at link speed (see :mod:`gpuprof.job.linkspeed`) vanishes."""
    reports = list(ctx.reports)
    excess = _slow_excess_us(ctx, reports)
    if not excess:
        return []
    upper = savings_pct(reports, excess)
    bw: Mapping[str, Mapping[str, Any]] = ctx.cross.get("collective_bandwidth") or {}
    info = ctx.cross.get("straggler_analysis") or {}
    absent = bool(info.get("note"))
    # With every member present, a faster transport is the fix: its what-if is transfers
    # at twice the bandwidth, replayed; the excess vanishing altogether (link speed) is
    # the upper end. With ranks missing the time may be waiting: the closed form stays.
    got = None if absent else replayed(ctx, "double_bandwidth")
    pct = got.pct if got is not None else upper
    if pct < MIN_SAVINGS_PCT:
        return []
    devices = {s.rank: s.device_name for s in ctx.summaries}
    evidence: list[str] = []
    for rank in sorted(excess):
        b = bw[str(rank)]
        evidence.append(
            _slow_text(b, rank, devices.get(rank))
            if b.get("slow")
            else _bandwidth_text(b, rank, devices.get(rank))
        )
        steps = max(next((r.steps for r in reports if r.rank == rank), 1), 1)
        evidence.append(
            f"rank {rank}: at link speed its exposed collectives would take {_ms(float(b['at_link_us_per_step']))} "
            f"per step; {_ms(excess[rank] / steps)} per step more is spent in {b['slow_calls']} collectives that "
            f"take over 10x what their bytes need"
        )
    share = _overlap_share(ctx)
    if share is not None:
        evidence.append(f"{100 * share:.0f}% of collective device time already overlaps compute")
    if absent:
        evidence.append(
            "only part of each process group is in the input: a collective ends when its last member arrives, "
            "so the time beyond the transfer is most likely this rank waiting for the others"
        )
    if got is not None:
        evidence.append(got.line)
        evidence.append(
            f"at link speed (the excess gone altogether) up to {upper:.1f}%: link peaks are approximate datasheet "
            "figures (both directions), and collectives are taken to reach 40% of them"
        )
    else:
        evidence.append(
            "estimate (an upper bound): that excess vanishes, i.e. the late ranks arrive with this one or the "
            "transport runs at link speed; link peaks are approximate datasheet figures (both directions), and "
            "collectives are taken to reach 40% of them. Overlap or bucket tuning could at most hide the time at "
            "link speed"
        )
    evidence.extend(_one_step_note(reports, "collective times vary from step to step"))
    ranks = tuple(sorted(excess)) if not absent else ()
    title = (
        "Collectives take 10x+ longer than their bytes need: other ranks are likely late (or the transport is slow); "
        "profile all ranks"
        if absent
        else "Collectives run far below the link speed: check the transport NCCL/RCCL uses"
    )
    return [
        Recommendation(
            id="communication-slow-collectives",
            category=Cause.COMMUNICATION,
            title=title,
            estimated_savings_pct=pct,
            ranks=ranks,
            evidence=tuple(evidence),
            actions=_slow_collective_actions(absent),
            whatif=got.name if got is not None else None,
        )
    ]


def _measured(b: Mapping[str, Any] | None) -> bool:
    """A rank's collectives have a measured bandwidth (their transfer could be told from
    the wait for the other members)."""
    return b is not None and (b.get("busbw_gbps") is not None or b.get("algbw_gbps") is not None)


@advisor
def communication_advice(ctx: AdviceContext) -> list[Recommendation]:
    reports = list(ctx.reports)
    if not reports:
        return []
    comm = {r.rank: float(r.lost_us.get(Cause.COMMUNICATION, 0.0)) for r in reports}
    if sum(comm.values()) <= 0:
        return []
    # Assume half of the exposed time can be hidden or removed: overlap is rarely perfect.
    # Time that slow collectives spend beyond their transfer at link speed is not
    # something overlap or bucket tuning removes (see slow_collectives_advice): only the
    # rest counts.
    excess = _slow_excess_us(ctx, reports)
    closed = savings_pct(reports, {r: 0.5 * max(comm[r] - excess.get(r, 0.0), 0.0) for r in comm})
    share = _overlap_share(ctx)
    info = ctx.cross.get("straggler_analysis") or {}
    partial = bool(info.get("note")) and not ctx.cross.get("stragglers")
    # What-if: collectives that run after compute are overlapped; ones already beside
    # compute but longer than it transfer faster. With ranks missing, part of the time is
    # waiting for them, which neither removes: the closed form (half the exposed time) stays.
    got = None if partial else replayed(
        ctx, "overlap_collectives" if share is not None and share < LOW_OVERLAP else "double_bandwidth"
    )
    pct = got.pct if got is not None else closed
    if pct < MIN_SAVINGS_PCT:
        return []
    top = sorted(reports, key=lambda r: -comm[r.rank] / max(r.steps, 1))
    worst = top[0]
    per_step = comm[worst.rank] / max(worst.steps, 1)
    evidence = [
        (
            f"rank {worst.rank} loses {_ms(per_step)} per step ({100 * per_step / max(step_time_us(worst), 1e-9):.1f}% "
            "of its step) to collectives with no compute beside them"
            + ("" if partial else " (waiting for late ranks excluded)")
        ),
    ]
    if share is not None:
        evidence.append(
            f"{100 * share:.0f}% of collective device time overlaps compute"
            + (
                " (gradient buckets already run during backward; the exposed part is the tail)"
                if share >= LOW_OVERLAP
                else ""
            )
        )
    if partial:
        evidence.append(
            "part of this may be waiting for ranks that are not in the input: "
            + str(info["note"]).split(":")[0]
        )
    if got is not None:
        evidence.append(got.line)
    elif excess:
        evidence.append(
            "estimate assumes half of the exposed time can be hidden, leaving out the time slow collectives "
            "spend beyond their transfer at link speed"
        )
    else:
        evidence.append("estimate assumes half of the exposed time can be hidden")
    bw: Mapping[str, Mapping[str, Any]] = ctx.cross.get("collective_bandwidth") or {}
    if str(worst.rank) in bw:
        evidence.append(_bandwidth_text(bw[str(worst.rank)], worst.rank, worst.device))
    evidence.extend(_one_step_note(reports, "collective times vary from step to step"))
    ranks = tuple(r.rank for r in reports if comm[r.rank] > 0)
    if _inference(ctx):
        return [_inference_comm(pct, ranks, evidence, got.name if got is not None else None)]
    # Ranks missing and no measured transfer to tell it from waiting: the first thing to do
    # is to see the other ranks.
    unsure = partial and not any(_measured(bw.get(str(r.rank))) for r in reports)
    first: tuple[str, ...] = (
        (
            (
                "Profile all ranks (or whole process groups) first: with only part of the job in the input, part of "
                "this time may be waiting for a late rank, which no overlap or tuning removes."
            ),
        )
        if unsure
        else ()
    )
    suffix = " (profile all ranks first: part may be waiting)" if unsure else ""
    if _is_megatron(ctx):
        overlap_actions: tuple[str, ...] = (
            (
                "Megatron: --overlap-grad-reduce (with --use-distributed-optimizer) starts the gradient "
                "reduce-scatter during backward; --overlap-param-gather hides the parameter all-gather behind "
                "the next forward."
            ),
            "Larger --ddp-bucket-size for fewer, bandwidth-bound transfers.",
        )
    else:
        overlap_actions = (
            (
                "DDP: let gradient buckets all-reduce during backward (do not call all-reduce by hand after "
                "backward; tune bucket_cap_mb, e.g. 25 -> 50-100 MB for fewer, larger transfers; "
                "gradient_as_bucket_view=True)."
            ),
            (
                "FSDP: enable backward_prefetch=BACKWARD_PRE and forward_prefetch=True (FSDP2: "
                "set_modules_to_forward_prefetch / reshard_after_forward) so all-gathers run ahead of compute."
            ),
            "Put communication on its own stream and avoid synchronizing on it before it is needed.",
        )
    if share is not None and share < LOW_OVERLAP:
        return [
            Recommendation(
                id="comm-overlap",
                category=Cause.COMMUNICATION,
                title="Collectives run after compute instead of beside it: overlap them with backward"
                + suffix,
                estimated_savings_pct=pct,
                ranks=ranks,
                evidence=tuple(evidence),
                actions=first + overlap_actions,
                whatif=got.name if got is not None else None,
            )
        ]
    return [
        Recommendation(
            id="exposed-communication",
            category=Cause.COMMUNICATION,
            title="Collectives take longer than the compute that hides them: send less or send faster"
            + suffix,
            estimated_savings_pct=pct,
            ranks=ranks,
            evidence=tuple(evidence),
            actions=first
            + (
                (
                    "Reduce the volume: gradient compression (PowerSGD / bf16 or fp16 compression hooks for DDP), "
                    "reduce-scatter instead of all-reduce with sharded optimizers."
                ),
                (
                    "Use the topology: hierarchical all-reduce (intra-node NVLink first, then inter-node), check "
                    "NCCL_ALGO/NCCL_PROTO and that inter-node traffic uses RDMA (NCCL_DEBUG=INFO shows the transport)."
                ),
                "Larger buckets (DDP bucket_cap_mb) for fewer, bandwidth-bound transfers.",
            ),
            whatif=got.name if got is not None else None,
        )
    ]

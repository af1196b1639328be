"""Exposed collectives: ones that hardly overlap compute (``comm-overlap``), ones that
already overlap but still cost time (``exposed-communication``), and the tensor-parallel
collectives of an inference job, on its critical path by design."""

from __future__ import annotations

import re

import numpy as np

from gpuprof.advice.context import AdviceContext, advisor
from gpuprof.advice.distributed.collectives import bandwidth, bandwidth_facts, overlap_share, slow_excess_us
from gpuprof.advice.distributed.slowranks import MIN_SAVINGS_PCT
from gpuprof.advice.finding import Fact, Finding, Said, said
from gpuprof.advice.replayed import replayed
from gpuprof.advice.savings import savings_pct, step_time_us
from gpuprof.job.findings import RankBandwidth
from gpuprof.model.report import Cause

# Exposed collectives whose device time overlaps compute less than this are not overlapped.
# DDP's bucketed all-reduces already hide a visible share (mi300 ResNet: 25%) behind
# backward; telling such a job to "overlap with backward" misreads it.
LOW_OVERLAP = 0.15
_MEGATRON_COMMS = re.compile("grads-reduce-scatter|params-all-gather")


def _measured(b: RankBandwidth | None) -> bool:
    """A rank's collectives have a measured bandwidth (their transfer could be told from
    the wait for the other members)."""
    return b is not None and (b.busbw_gbps is not None or b.algbw_gbps is not None)


def _is_megatron(ctx: AdviceContext) -> bool:
    for s in ctx.summaries:
        c = s.comms_table
        if len(c) and any(_MEGATRON_COMMS.search(str(n)) for n in c["name"]):
            return True
    return False


def inference(ctx: AdviceContext) -> bool:
    """An inference job: said by the summary's ``workload`` fact, else guessed from
    traces that record launch calls (Kineto) whose host side was recorded (their
    collectives have launch times) and show neither backward nor optimizer work."""
    said_ = [s.facts.workload for s in ctx.summaries if s.facts is not None]
    if any(w == "training" for w in said_):
        return False
    if any(w == "inference" for w in said_):
        return True
    launched = [s for s in ctx.summaries if s.holds.launch_calls]
    return bool(launched) and all(
        "backward" not in s.phases_us
        and "optimizer" not in s.phases_us
        and len(s.comms_table) > 0
        and bool((~np.isnan(np.asarray(s.comms_table["launch_us"], dtype=np.float64))).any())
        for s in launched
    )


@advisor
def communication_advice(ctx: AdviceContext) -> list[Finding]:
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
    excess = slow_excess_us(ctx, reports)
    closed = savings_pct(reports, {r: 0.5 * max(comm[r] - excess.get(r, 0.0), 0.0) for r in comm})
    share = overlap_share(ctx)
    info = ctx.cross.straggler_analysis
    partial = bool(info.note) and not ctx.cross.stragglers
    # What-if: collectives that run after compute are overlapped; ones already beside
    # compute but longer than it transfer faster. With ranks missing, part of the time is
    # waiting for them, which neither removes: the closed form (half the exposed time) stays.
    low = share is not None and share < LOW_OVERLAP
    got = None if partial else replayed(ctx, "overlap_collectives" if low else "double_bandwidth")
    pct = got.pct if got is not None else closed
    if pct < MIN_SAVINGS_PCT:
        return []
    worst = min(reports, key=lambda r: -comm[r.rank] / max(r.steps, 1))
    per_step = comm[worst.rank] / max(worst.steps, 1)
    step_pct = 100 * per_step / max(step_time_us(worst), 1e-9)
    exposed = "communication.exposed_partial" if partial else "communication.exposed"
    evidence: list[Said] = [said(exposed, rank=worst.rank, per_step_us=per_step, step_pct=step_pct)]
    if share is not None:
        evidence.append(said("collectives.overlap" if low else "collectives.overlap_tail", share_pct=100 * share))
    if partial:
        alone = info.alone
        evidence.append(said("communication.maybe_waiting", ranks_present=alone.ranks_present if alone else None,
                             world_size=alone.world_size if alone else None))
    if got is not None:
        evidence.append(got.said)
    else:
        evidence.append(said("communication.estimate_half_excess" if excess else "communication.estimate_half"))
    bw = ctx.cross.collective_bandwidth
    mine = bw.get(worst.rank)
    if mine is not None:
        evidence.append(bandwidth(mine, worst.rank, worst.device))
    ranks = tuple(r.rank for r in reports if comm[r.rank] > 0)
    facts: dict[str, Fact] = {
        "rank": worst.rank,
        "exposed_us_per_step": per_step,
        "exposed_pct": step_pct,
        "overlap_pct": None if share is None else 100.0 * share,
        **(bandwidth_facts(mine) if mine is not None else {}),
        **(got.facts if got is not None else {}),
    }
    whatif = got.name if got is not None else None
    if inference(ctx):
        return [Finding("exposed-communication", Cause.COMMUNICATION, pct, said("title.communication.inference"),
                        (*evidence, said("communication.inference")), (said("communication.inference_actions"),),
                        ranks=ranks, whatif=whatif, facts=facts)]
    # Ranks missing and no measured transfer to tell it from waiting: the first thing to do
    # is to see the other ranks.
    unsure = partial and not any(_measured(bw.get(r.rank)) for r in reports)
    rec_id = "comm-overlap" if low else "exposed-communication"
    fix = ("communication.overlap_megatron" if _is_megatron(ctx) else "communication.overlap_ddp_fsdp") if low else (
        "communication.send_less"
    )
    actions = ((said("communication.profile_all"),) if unsure else ()) + (said(fix),)
    title = said(f"title.{rec_id}.unsure" if unsure else f"title.{rec_id}")
    return [Finding(rec_id, Cause.COMMUNICATION, pct, title, tuple(evidence), actions, ranks=ranks, whatif=whatif,
                    facts=facts)]

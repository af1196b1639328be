"""Phrases of the straggler findings (:mod:`gpuprof.advice.distributed`): named slow ranks,
ranks slower than their peers, lateness that moves from rank to rank, ranks late at
barriers, ranks waiting for a rank not in the input."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuprof.advice.phrasebook.book import listed, phrase, specs, templates, unit_specs
from gpuprof.util.phrases import duration, value_range

_SAME_WORK = (
    "Give the slow rank the same work as the others: for data-dependent work use length "
    "bucketing or sequence packing; for sharded models (embedding tables, experts) "
    "rebalance the shard placement."
)
_CLOCKS = (
    "Check the slow rank's GPU for throttling or a different clock "
    "(nvidia-smi -q -d PERFORMANCE,CLOCK) and its PCIe/NVLink health."
)
# The actions for a slow rank, by the phase of its step that is slower (None: none is).
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
    "forward": (_SAME_WORK, _CLOCKS),
    "backward": (_SAME_WORK, _CLOCKS),
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
_BALANCE_DATA = (
    "Balance the data across ranks: sequence packing to a fixed number of tokens per rank and step, or length "
    "bucketing so that each global batch holds sequences of similar length, split by tokens rather than samples."
)
_GPU_CHECKS = (
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


@phrase("straggler.phase_actions")
def phase_actions(phase: str | None) -> tuple[str, ...]:
    return _PHASE_ACTIONS.get(phase, _PHASE_ACTIONS[None])


@phrase("slowrank.gpu_actions")
def gpu_actions(phase: str | None, unknown: bool) -> tuple[str, ...]:
    """The GPU and node checks; the phase's own first action only where it is not about the
    data (a slow GPU, not heavier batches: balancing the data is the work-imbalance advice);
    with one step the trace cannot tell a slow GPU from heavier data: both checks."""
    first = _PHASE_ACTIONS[phase][:1] if phase in ("data", "optimizer") else ()
    return first + _GPU_CHECKS + ((_BALANCE_DATA,) if unknown else ())


@phrase("straggler.groups_partial")
def groups_partial(groups: Sequence[tuple[str, int, int | None]]) -> str:
    """Each process group only partly in the input: ranks present of those expected."""
    desc = "; ".join(f"{g}: {n} of {'an unknown number of' if of is None else of} ranks" for g, n, of in groups)
    return f"process groups only partly in the input ({desc})"


@phrase("straggler.op_variation")
def op_variation(ops: Sequence[tuple[str, float, float, int]]) -> str:
    return "the ops' durations vary widely: " + "; ".join(
        f"{n} {duration(m)} mean, coefficient of variation {cv:.2f} over {k} ops" for n, m, cv, k in ops
    )


def _who(ranks: Sequence[int], stages: Sequence[int] | None) -> str:
    """``stages 0, 3 (ranks 0, 1, 6, 7)`` when the pipeline stages are known, else the ranks."""
    if stages:
        return f"stage{'' if len(stages) == 1 else 's'} {listed(stages)} (ranks {listed(ranks)})"
    return f"rank{'s' if len(ranks) > 1 else ''} {listed(ranks)}"


_HOLDS_UP = {
    "embedding": "their embedding-gradient all-reduce holds up the other stages",
    "communication": "their communication after compute holds up the others",
    "none": "the other ranks wait for them",
}


@phrase("title.straggler.barrier")
def barrier_title(holds: str, ranks: Sequence[int], stages: Sequence[int] | None) -> str:
    who = _who(ranks, stages)
    return f"{who[0].upper()}{who[1:]} are the last to reach the barrier after the pipeline drain: {_HOLDS_UP[holds]}"


@phrase("barrier.late_comm")
def late_comm(ops: Sequence[Mapping[str, Any]], barriers: int, ranks: Sequence[int], stages: Sequence[int] | None) -> str:
    """The late ranks' communication between their last compute and each barrier: its
    median, who else runs it, and its outlier calls."""
    out = []
    for op in ops:
        text = f"{op['name']}: {duration(op['median_us'])} median over {op['calls']} calls"
        if op["only_late_ranks"]:
            text += " (only these ranks run it before the barrier)"
        elif op["waiting_median_us"] is not None:
            text += f" ({duration(op['waiting_median_us'])} on the waiting ranks)"
        if op["outliers"]:
            lo, hi = op["outlier_us"]
            at = op["outlier_barriers"]
            text += f"; {op['outliers']} outlier calls of {value_range(lo, hi, duration)} at barrier"
            text += f"{'s' if len(at) > 1 else ''} {listed(at)} of {barriers}"
        out.append(text)
    return f"between their last compute and each barrier, {_who(ranks, stages)} run communication only: " + "; ".join(out)


def _pairs(pairs: Sequence[tuple[Any, Any]], form: str) -> str:
    return ", ".join(form.format(a, b) for a, b in pairs)


specs({
    # (rank, count) and (rank, microseconds) pairs, joined
    "rank_at": lambda v: _pairs(v, "rank {} at {}"),
    "rank_dur": lambda v: ", ".join(f"rank {r} {duration(us)}" for r, us in v),
    "activity": lambda v: ", ".join(f"{name} ({n} of {of})" for name, n, of in v),
    "who": lambda v: _who(*v),
})
unit_specs({
    # (rank, microseconds per step) pairs, in the report's unit
    "rank_dur_step": lambda v, unit: ", ".join(f"rank {r} {duration(us)}{unit.slash}" for r, us in v),
    # "of its step" / "of their step" (ranks: one, or several), or "of the window"
    "of_their_step": lambda v, unit: f"of {'its' if len(v) == 1 else 'their'} step" if unit.is_step else unit.of_the,
})
templates({
    # named slow ranks
    "title.straggler.named": (
        "Rank{slow:s} {slow:list} arrive{slow:v} last at {last} of {collectives} collectives: make {slow:them} "
        "as fast as the others"
    ),
    "title.straggler.late_start": (
        "Rank{late:s} {late:list} begin{late:v} the step late and the job waits for {late:them} (rank{slow:s} "
        "{slow:list} last at {last} of {collectives} collectives): find what delays {late:them} before the step"
    ),
    "straggler.arrived_last": "rank {rank} arrived last at {last_arrivals} of {collectives} collectives",
    "straggler.arrived_last_by": (
        "rank {rank} arrived last at {last_arrivals} of {collectives} collectives, by {margins_us:durs} over the "
        "next-latest rank: {margin_us_per_step:dur} {unit.per} on the critical path"
    ),
    "straggler.others_waited": (
        "the other ranks waited {wait_us_per_step:dur} {unit.per} at those collectives "
        "(median per collective, summed); only the margin over the next-latest rank is this rank's doing"
    ),
    "straggler.phase": (
        "rank {rank}'s {phase} takes {ratio:.2f}x the median of the other {peers} ranks "
        "({excess_us_per_step:dur} more {unit.per})"
    ),
    "straggler.late_start": (
        "rank {rank} begins its step {late_us:dur} after the median rank; no phase inside the step is markedly slower"
    ),
    "straggler.last_elsewhere": "other ranks arrive last elsewhere: {counts:rank_at} of {collectives} collectives",
    "straggler.skew": (
        "arrival skew: rank{ranks:s} {ranks:list} begin{ranks:v} the step {lead_us:span} before the median rank "
        "and wait{ranks:v} {wait_us:span} {unit.per} in collectives: most of that waiting is their early start, "
        "not another rank's lateness"
    ),
    "straggler.skew_last": (
        "arrival skew: rank{ranks:s} {ranks:list} begin{ranks:v} the step {lead_us:span} before the median rank "
        "({lead_over_last_us:dur} before the last rank to start) and wait{ranks:v} {wait_us:span} {unit.per} in "
        "collectives: most of that waiting is their early start, not another rank's lateness"
    ),
    "straggler.also_late": (
        "rank{ranks:s} {ranks:list} also begin{ranks:v} the step late: {late:rank_dur} after the median rank"
    ),
    "straggler.alone_on_time": (
        "with only rank{slow:s} {slow:list} on time the step shortens by {alone_pct:.1f}%: the next-latest rank "
        "then holds the collectives; every late rank on time saves the {pct:.1f}% below"
    ),
    "straggler.estimate_margin": (
        "estimate: every rank's step shortens by the critical-path gain above, through the slowest-rank "
        "step-time model"
    ),
    "straggler.skew_action": (
        "Arrival skew (some ranks start the step early and wait): find what the other ranks do before the "
        "first collective that these do not (data loading, host-side preprocessing of rank-specific input, "
        "logging) and even it out; it costs the early ranks idle time, not the job's step time."
    ),
    # ranks slower than their peers
    "title.straggler.work": (
        "Work imbalance: rank{ranks:s} {ranks:list} get{ranks:v} more work than the ranks doing the same job "
        "({ratio:.1f}x the compute), and the whole job waits: balance the data"
    ),
    "title.straggler.slow_gpu": (
        "Rank{ranks:s} {ranks:list} compute{ranks:v} {ratio:.1f}x slower than the ranks doing the same work, and the "
        "whole job waits: check that GPU and node"
    ),
    "slowrank.computes": (
        "rank {rank} computes {compute_us:dur} {unit.per}, {ratio:.2f}x the median of the other ranks doing the "
        "same work ({peers:ranks}: {peer_median_us:dur})"
    ),
    "slowrank.computes_stage": (
        "rank {rank} computes {compute_us:dur} {unit.per}, {ratio:.2f}x the median of the other ranks of pipeline "
        "stage {stage} doing the same work ({peers:ranks}: {peer_median_us:dur})"
    ),
    "slowrank.others_wait": (
        "{ranks:ranks} wait{ranks:v} for it in collectives, up to {share_pct:.0f}% {ranks:of_their_step}"
    ),
    "slowrank.waited_at": (
        "the other ranks waited {wait_us_per_step:dur} {unit.per} for rank {rank} at the {last_arrivals} "
        "collectives it arrived last at"
    ),
    "slowrank.phase": (
        "rank {rank}'s {phase} takes {ratio:.2f}x the median of the others ({excess_us_per_step:dur} more {unit.per})"
    ),
    "slowrank.more_work": (
        "rank {rank} runs {mine:,.0f} {what:words} {unit.per} against a median of {median:,.0f} on "
        "the ranks doing the same work: it has more work, not a slower GPU"
    ),
    "slowrank.follows_data": (
        "rank {rank} computes {low:.2f}-{high:.2f}x its peers' median from step to step and is the heaviest of "
        "them in {heaviest} of {steps} steps: the work follows its data (a slow GPU would be the slowest in every step)"
    ),
    "slowrank.slower_every_step": (
        "rank {rank} is the slowest of the ranks doing the same work in every step ({low:.2f}-{high:.2f}x their "
        "median) on the same number of {what:words}: the same work runs slower there"
    ),
    "slowrank.stage_elsewhere_normal": (
        "the same stage runs at normal speed on the other data-parallel replicas: the layers are not too many "
        "for the stage, this rank is slow"
    ),
    "slowrank.work_actions": (
        _BALANCE_DATA,
        (
            "For RL rollouts of uneven length: schedule rollouts across ranks by expected length (longest first), "
            "cap and resume long generations, or generate asynchronously from training."
        ),
        "For sharded models (embedding tables, experts): rebalance the shard or expert placement by measured load.",
    ),
    # lateness that moves from rank to rank
    "title.straggler-rotating": (
        "The work varies from batch to batch and a different rank is last each time: balance the data {unit.per}"
    ),
    "straggler.rotating_last": "of {collectives} collectives, the last to arrive was {counts:rank_at}",
    "straggler.rotating_last_more": (
        "of {collectives} collectives, the last to arrive was {counts:rank_at} and {more} more ranks"
    ),
    "straggler.slowest_changes": (
        "among the ranks doing the same work, the one with the most compute changes from step to step "
        "(up to {distinct} different ranks in {steps} steps, in {changing} of {groups} groups)"
    ),
    "straggler.rotating_margin": (
        "the last arrival leads the next-latest by {margin_us_per_step:dur} {unit.per} in total: what evening out "
        "the work would take off the critical path"
    ),
    "straggler.rotating_actions": (
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
    # ranks waiting for a rank not in the input
    "title.straggler-absent-rank": (
        "Ranks wait in collectives for a slower rank that is not in these traces: profile every rank"
    ),
    "straggler.waits_present": "measured waits among the ranks present: {waits:rank_dur_step}",
    "straggler.present_last": (
        "among the ranks present, rank {rank} arrives last at {last_arrivals} of {collectives} "
        "collectives (it is slower than the others present, but an absent rank may be slower still)"
    ),
    "straggler.absent_actions": (
        "Collect traces from all ranks of the job (or at least whole process groups) so the slow "
        "rank can be named, then rerun gpuprof analyze on the folder."
    ),
    # ranks late at barriers
    "barrier.waits": (
        "{barriers} barriers (ops that start at the same instant on every rank); ranks {waiting:list} wait at them "
        "{wait_us_per_step:dur} {unit.per} (median, pipeline bubble excluded) for {who:who}"
    ),
    "barrier.last_activity": "just before each barrier the last rank to arrive was in: {activity:activity}",
    "barrier.estimate": (
        "estimate: the barrier comes {margin_us_per_step:dur} {unit.per} sooner on every rank (the smallest wait "
        "among the waiting ranks) if the late ranks arrive with them"
    ),
    "barrier.untie_embeddings": (
        "The embedding-gradient all-reduce between the first and last pipeline stage (tied input/output "
        "embeddings) runs after the pipeline drain while the other stages wait: untie the embeddings "
        "(--untie-embeddings-and-output-weights), or place the first and last stage so that group's "
        "all-reduce runs over NVLink."
    ),
    "barrier.embedding_outliers": (
        "Its outliers (10x+ the usual time) mark a slow or contended link at those steps: check that "
        "group's transport with NCCL_DEBUG=INFO and what else ran on the link then."
    ),
    "barrier.overlap_reduce": (
        "Overlap the gradient reduce-scatter with backward (Megatron: --overlap-grad-reduce with "
        "--use-distributed-optimizer) so the last stages to drain do not add it after their compute."
    ),
})

"""Local findings of memory: copies from pageable memory (``memory-pageable-copies``),
copies and memsets nothing overlaps (``memory-exposed-copies``), and the device allocator
(``memory-allocator``, or ``memory-cold-start`` when the trace opens with set-up: before
the first kernel without step markers, or in a first step that is warm-up).

The allocator's advice is said in the platform's names: a ROCm trace (``hipMalloc``) is
told ``PYTORCH_HIP_ALLOC_CONF`` and ``PYTORCH_NO_HIP_MEMORY_CACHING``; and a rank that
calls the allocator in every profiled step runs without the caching allocator (or empties
it each step), so the first action is to re-enable it."""

from __future__ import annotations

from collections.abc import Mapping

from gpuprof.accounting.summary import RankSummary
from gpuprof.accounting.warmup import WARMUP_RATIO
from gpuprof.advice.context import AdviceContext, advisor
from gpuprof.advice.finding import Fact, Finding, Said, said
from gpuprof.advice.local.hits import Hit, inference, local, recommend, rule_share, worst
from gpuprof.model.report import Cause, RankReport

# Memory peaking at this share of the GPU's capacity or more is near it.
NEAR_CAPACITY_SHARE = 0.9
# Without step markers, this share of the allocator time before the first compute kernel
# marks a cold start (the process's set-up) rather than allocator churn.
COLD_START_SHARE = 0.6


def _pageable_us(s: RankSummary, r: RankReport) -> float:
    """Exposed copies from or to pageable memory, within what the copies rule kept."""
    return min(_pageable_exposed_us(s), rule_share(s, r, Cause.MEMORY, ["exposed_copies"]))


def _other_copies_us(s: RankSummary, r: RankReport) -> float:
    """The copies rule's time less the pageable copies'."""
    return max(0.0, rule_share(s, r, Cause.MEMORY, ["exposed_copies"]) - _pageable_exposed_us(s))


def _pageable_exposed_us(s: RankSummary) -> float:
    return s.facts.pageable_exposed_copy_us if s.facts is not None else 0.0


def _allocator_us(s: RankSummary, r: RankReport) -> float:
    return rule_share(s, r, Cause.MEMORY, ["allocator"])


@advisor
@local(_pageable_us)
def memory_pageable_copies(ctx: AdviceContext, found: list[Hit]) -> list[Finding]:
    w = worst(found)
    evidence: list[Said] = []
    n, nbytes = w.fact.pageable_copies, w.fact.pageable_copy_bytes
    if n and nbytes is not None:
        evidence.append(said("memory.pageable_copies_sized", rank=w.rank, copies=n, size_mib=nbytes / 2**20))
    elif n:
        evidence.append(said("memory.pageable_copies", rank=w.rank, copies=n))
    return recommend(
        ctx, found, "memory-pageable-copies", Cause.MEMORY, evidence, [said("memory.pageable_actions")],
        whatif="pinned_copies", facts={"pageable_copies": n, "pageable_copy_bytes": nbytes},
    )


@advisor
@local(_other_copies_us)
def memory_exposed_copies(ctx: AdviceContext, found: list[Hit]) -> list[Finding]:
    w = worst(found)
    per = max(w.report.steps, 1)
    by_kind: Mapping[str, float] = w.fact.exposed_copy_us_by_kind
    kinds = [(k, v / per) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1]) if v > 0]
    if w.fact.exposed_memset_us:
        kinds.append(("memset", float(w.fact.exposed_memset_us) / per))
    stepped = w.report.steps > 0
    line = "memory.exposed_by_kind" if stepped else "memory.exposed_by_kind_window"
    evidence = [said(line, rank=w.rank, kinds=tuple(kinds))] if kinds else []
    unit = "_us_per_step" if stepped else "_us"
    return recommend(
        ctx, found, "memory-exposed-copies", Cause.MEMORY, evidence, [said("memory.exposed_actions")],
        whatif="hidden_copies", facts={f"exposed_{k.lower()}{unit}": v for k, v in kinds},
    )


@advisor
@local(_allocator_us)
def memory_allocator(ctx: AdviceContext, found: list[Hit]) -> list[Finding]:
    w = worst(found)
    evidence: list[Said] = []
    calls: Mapping[str, int] = w.fact.alloc_calls_by_name
    alloc_us = float(w.fact.alloc_time_us or 0.0)
    if calls:
        top = tuple(sorted(calls.items(), key=lambda kv: -kv[1])[:4])
        evidence.append(said("memory.allocator_calls", rank=w.rank, calls=top, total_us=alloc_us))
    share = w.fact.mem_peak_share
    near = share is not None and float(share) >= NEAR_CAPACITY_SHARE
    peak = w.fact.mem_peak_reserved_bytes or w.fact.mem_peak_allocated_bytes or 0
    cap = w.fact.mem_capacity_bytes or 0
    if near and share is not None:
        evidence.append(said("memory.peak", peak_gib=peak / 2**30, capacity_gib=cap / 2**30, share_pct=100 * float(share)))
    facts: dict[str, Fact] = {
        "alloc_time_us": alloc_us,
        "alloc_calls": sum(int(n) for n in calls.values()) if calls else None,
        "mem_peak_pct": None if share is None else 100.0 * float(share),
        "mem_peak_bytes": peak or None,
        "mem_capacity_bytes": cap or None,
    }
    rocm = any(str(name).lower().startswith("hip") for name in calls)
    idle_as = "memory-allocator-rocm" if rocm else "memory-allocator"
    early = w.fact.alloc_before_first_compute_share
    if w.report.steps == 0 and early is not None and float(early) >= COLD_START_SHARE:
        # No step markers, and the allocation happens before the first kernel: the trace
        # opens with the process's set-up, not with a training loop that churns memory.
        evidence.append(said("memory.cold_start", share_pct=100 * float(early)))
        facts["before_first_compute_pct"] = 100.0 * float(early)
        return recommend(ctx, found, "memory-cold-start", Cause.MEMORY, evidence, [said("memory.cold_start_actions")],
                         whatif="no_allocator", facts=facts, idle_as=idle_as)
    first, ratio = w.fact.warmup.alloc_first_step_share, w.fact.warmup.first_step_ratio
    if first is not None and float(first) >= COLD_START_SHARE and ratio is not None and float(ratio) >= WARMUP_RATIO:
        # The allocator time sits in a first step many times longer than the others: the
        # warm-up (first blocks, cuDNN autotuning, compilation) profiled as a step.
        evidence.append(said("memory.warm_up", share_pct=100 * float(first), ratio=float(ratio),
                             op=w.fact.warmup.first_step_top_op, op_us=w.fact.warmup.first_step_top_op_us))
        facts["alloc_first_step_pct"] = 100.0 * float(first)
        facts["first_step_ratio"] = float(ratio)
        return recommend(ctx, found, "memory-cold-start", Cause.MEMORY, evidence, [said("memory.cold_start_actions")],
                         whatif="no_allocator", facts=facts, idle_as=idle_as)
    every = w.report.steps >= 2 and w.fact.warmup.alloc_steps == w.report.steps
    if every:
        evidence.append(said("memory.every_step", rank=w.rank, steps=w.report.steps))
    actions = [said("memory.allocator_actions_rocm" if rocm else "memory.allocator_actions", every=every)]
    if near:
        actions.append(said("memory.lower_peak_inference" if inference(found) else "memory.lower_peak"))
    return recommend(ctx, found, "memory-allocator", Cause.MEMORY, evidence, actions, whatif="no_allocator", facts=facts,
                     idle_as=idle_as)

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
(:meth:`gpuprof.job.whatifs.WhatIfResults.combined_pct`), whenever that is less than the
sum. The same figure is the report's ``job.combined_savings_pct``, never more than the
largest share of a step any rank loses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from gpuprof.advice.context import AdviceContext
from gpuprof.advice.replayed import replayed, results
from gpuprof.advice.savings import MIN_WINDOW_US, cause_savings_pct
from gpuprof.model.report import CAUSES, Cause, Recommendation

# A cause holding this share of a rank's step always gets a recommendation.
NEVER_SILENT_PCT = 5.0
# A recommendation whose saving differs from its cause's lost share by more than this
# factor says why (``Saving vs lost share:``).
AGREE_FACTOR = 3.0
AGREE_MARK = "Saving vs lost share:"


@dataclass(frozen=True)
class _General:
    title: str
    whatifs: tuple[str, ...]
    actions: tuple[str, ...]
    missing: str


_GENERAL: Mapping[Cause, _General] = {
    Cause.PIPELINE_BUBBLE: _General(
        "Pipeline stages sit idle waiting for their neighbours: shrink the bubble",
        ("double_microbatches", "balanced_stages"),
        (
            "Use more microbatches per step (at least 4x the number of stages) at the same global batch.",
            "Use an interleaved or zero-bubble schedule (virtual pipeline stages).",
            "Balance the layers across stages so that no stage computes longer per microbatch than the others.",
        ),
        "the pipeline's schedule could not be worked out from the trace (microbatch count or stage times unknown)",
    ),
    Cause.COMMUNICATION: _General(
        "Collectives run with no compute beside them: overlap them or make them cheaper",
        ("overlap_collectives", "double_bandwidth"),
        (
            "Overlap gradient collectives with backward (DDP buckets, FSDP prefetch, Megatron --overlap-grad-reduce).",
            "Check the transport with NCCL_DEBUG=INFO and send less (larger buckets, reduce-scatter, compression).",
        ),
        "no specific communication finding stood out (message sizes or the other ranks are missing)",
    ),
    Cause.STRAGGLER: _General(
        "Ranks wait in collectives for slower ranks: find what makes those ranks late",
        ("peer_median_compute",),
        (
            "Profile every rank and compare the slowest one's GPU (clocks, throttling), node and data with the others.",
            "Balance the work per rank (length bucketing, sequence packing, balanced sharding).",
        ),
        "no single rank could be named as the one the others wait for",
    ),
    Cause.MEMORY: _General(
        "The GPU waits on memory management and transfers: overlap copies, pin memory, stop allocator churn",
        ("hidden_copies", "no_allocator", "pinned_copies"),
        (
            "Pin host buffers and copy with non_blocking=True on a side stream, one step ahead.",
            "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True and keep shapes stable.",
        ),
        "no single kind of memory operation stood out",
    ),
    Cause.DATALOADER: _General(
        "The GPU waits for input data: speed up the input pipeline",
        ("no_dataloader",),
        ("Raise DataLoader num_workers, use pin_memory=True and persistent_workers=True.",),
        "the DataLoader calls are not in the trace",
    ),
    Cause.SYNC: _General(
        "The host blocks on the GPU inside the loop: remove the syncs",
        ("no_sync",),
        (
            "Remove .item() / .cpu() / print(loss) from the step; read metrics every N steps.",
            "Find hidden syncs with torch.cuda.set_sync_debug_mode('warn').",
        ),
        "the blocking calls could not be tied to the device's idle time",
    ),
    Cause.HOST: _General(
        "The host issues GPU work too slowly: cut framework and Python overhead",
        ("free_host",),
        (
            "torch.compile the model (mode='reduce-overhead' also captures CUDA graphs).",
            "Profile the host side (py-spy, the profiler's CPU view) and move Python work out of the step.",
        ),
        "the trace does not show which host work delays the launches (no launch calls or host ops)",
    ),
    Cause.OTHER: _General(
        "Idle GPU time that no rule explains: profile with more detail",
        (),
        (
            "Record the trace with the host side (activities CPU and CUDA, record_shapes=True) and without "
            "filters, so that every idle gap can be tied to what the host or another stream was doing.",
            "Look at the gaps in Perfetto: gpuprof annotate TRACE -o annotated.json marks each one.",
        ),
        "nothing in the trace explains this idle time (waits on other streams, device scheduling, or events "
        "the trace left out)",
    ),
}


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


def _actions(ctx: AdviceContext, cause: Cause, actions: tuple[str, ...]) -> tuple[str, ...]:
    """The general actions, fitted to the trace: a model already compiled (most of its
    kernels Inductor's) is not told to compile itself."""
    if cause is Cause.HOST and any(
        (s.facts.get("compiled_kernel_share") or 0.0) >= 0.5 for s in ctx.summaries if s.empty_reason is None
    ):
        return tuple(
            "The model is already compiled: capture CUDA graphs too (torch.compile(mode='reduce-overhead')) and "
            "look for graph breaks (TORCH_LOGS=graph_breaks)."
            if a.startswith("torch.compile")
            else a
            for a in actions
        )
    return actions


def _queued_text(ctx: AdviceContext, ranks: Sequence[int]) -> list[str]:
    """What the unexplained idle time of ``ranks`` is made of, where the trace says: the
    share during which the next kernel had already been launched (the GPU waited on
    something the trace does not show: an event of work it left out, a filtered export)."""
    by = {s.rank: s for s in ctx.summaries}
    rep = {r.rank: r for r in ctx.reports}
    out = []
    for r in ranks:
        s, rp = by.get(r), rep.get(r)
        if s is None or rp is None:
            continue
        other = float(rp.lost_us.get(Cause.OTHER, 0.0))
        queued = float(s.facts.get("queued_gap_us") or 0.0)
        if other > 0 and queued >= 0.5 * other:
            out.append(
                f"on rank {r} the next kernel had already been launched during most of the lost time that no rule "
                "explains, and nothing recorded ran on the GPU meanwhile: it waited on work the trace does not "
                "show (a filtered or sampled export, or an event of a stream the profiler left out)"
            )
            break
    return out


def general_advice(ctx: AdviceContext, recs: Sequence[Recommendation]) -> list[Recommendation]:
    """A general recommendation for every cause with at least :data:`NEVER_SILENT_PCT` of
    a rank's step that no recommendation of ``recs`` covers."""
    covered = {r.category for r in recs}
    out: list[Recommendation] = []
    for cause, (top, ranks) in _shares(ctx).items():
        if top < NEVER_SILENT_PCT or cause in covered:
            continue
        g = _GENERAL[cause]
        got = next((x for x in (replayed(ctx, n) for n in g.whatifs) if x is not None and x.pct > 0), None)
        evidence = [
            f"{cause.value} holds {top:.1f}% of the step on rank{'s' if len(ranks) > 1 else ''} "
            + ", ".join(str(r) for r in ranks)
        ]
        if cause is Cause.OTHER:
            # Time no rule explains has no fix to replay: its share is shown, no saving is claimed.
            pct = 0.0
            evidence.append("no saving is estimated: nothing says what would remove this idle time")
            evidence.extend(_queued_text(ctx, ranks))
        elif all(r.window_us < MIN_WINDOW_US for r in ctx.reports):
            pct = 0.0
            evidence.append(
                f"the analysed window is under {MIN_WINDOW_US / 1000:.0f} ms: too little to estimate a saving "
                "(profile a few full steps)"
            )
        elif got is not None:
            pct = got.pct
            evidence.append(got.line)
        else:
            pct = cause_savings_pct(ctx.reports, cause)
            evidence.append(
                "estimate: this idle time vanishing on every rank, with the job's step set by its slowest rank "
                "(an upper bound: no replay of this fix was possible)"
            )
        evidence.append(f"general advice: {g.missing}, so no more specific fix can be named")
        out.append(
            Recommendation(
                id=f"{cause.value.replace('_', '-')}-general",
                category=cause,
                title=g.title,
                estimated_savings_pct=pct,
                ranks=tuple(ranks),
                evidence=tuple(evidence),
                actions=_actions(ctx, cause, g.actions),
                whatif=got.name if got is not None else None,
            )
        )
    return out


def explain_disagreement(ctx: AdviceContext, recs: Sequence[Recommendation]) -> list[Recommendation]:
    """Add one line to each recommendation whose saving is more than :data:`AGREE_FACTOR`
    times off the share of the step its cause holds on its ranks: the replay follows the
    whole job, so fixing a cause can save less (the time freed is then spent waiting on
    other work of the critical path) or more (it also removes waits it set off)."""
    out: list[Recommendation] = []
    by_rank = {r.rank: r for r in ctx.reports if r.window_us > 0}
    for rec in recs:
        # A straggler's or a slow stage's own ranks are not the ones that wait: job-level
        # causes are measured on every rank.
        job_level = rec.category in (Cause.STRAGGLER, Cause.PIPELINE_BUBBLE, Cause.COMMUNICATION)
        ranks = ([] if job_level else [by_rank[r] for r in rec.ranks if r in by_rank]) or list(by_rank.values())
        share = max((100.0 * float(r.lost_us.get(rec.category, 0.0)) / r.window_us for r in ranks), default=0.0)
        est = rec.estimated_savings_pct
        if rec.category is Cause.OTHER or max(share, est) < NEVER_SILENT_PCT:
            out.append(rec)
            continue
        if est * AGREE_FACTOR < share:
            line = (
                f"{AGREE_MARK} its {est:.1f}% is less than the {share:.1f}% of a step that {rec.category.value} holds: once that idle time is gone the job still waits on other work of its critical path "
                "(other ranks, collectives, other causes), which the estimate follows"
            )
        elif est > AGREE_FACTOR * share:
            line = (
                f"{AGREE_MARK} its {est:.1f}% is more than the {share:.1f}% of a step that {rec.category.value} holds: "
                "removing it also removes idle time it sets off that is counted under other causes (a drained "
                "queue refilled by late launches, waits of the ranks that waited for it)"
            )
        else:
            out.append(rec)
            continue
        out.append(replace(rec, evidence=(*rec.evidence, line)))
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
    "explain_disagreement",
    "general_advice",
]

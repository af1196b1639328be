"""Local findings of a host that keeps the GPU waiting on it: for the next batch
(``dataloader-starvation``) and in calls that block on the GPU (``sync-host-blocking``)."""

from __future__ import annotations

from collections.abc import Mapping

from gpuprof.advice.context import AdviceContext, advisor
from gpuprof.advice.finding import Finding, Said, said
from gpuprof.advice.local.hits import Hit, local, ops, recommend, top_op_facts, worst
from gpuprof.model.report import Cause


@advisor
@local(Cause.DATALOADER)
def dataloader_starvation(ctx: AdviceContext, found: list[Hit]) -> list[Finding]:
    w = worst(found)
    evidence: list[Said] = []
    mean, calls = w.fact.get("dataloader_call_mean_us"), w.fact.get("dataloader_calls")
    if mean is not None and calls:
        evidence.append(said("dataloader.calls", rank=w.rank, mean_us=float(mean), calls=calls))
    single = any(h.fact.get("dataloader_single_process") for h in found)
    if single:
        evidence.append(said("dataloader.in_process"))
    actions = [said("dataloader.start_workers" if single else "dataloader.more_workers"), said("dataloader.actions")]
    return recommend(
        ctx, found, "dataloader-starvation", Cause.DATALOADER, evidence, actions,
        whatif="no_dataloader",
        replay_note=said("dataloader.replay_in_process") if single else None,
        upper=("free_launches",) if single else (),
        facts={"dataloader_call_mean_us": mean, "dataloader_calls": calls,
               "dataloader_workers": 0 if single else None},
    )


@advisor
@local(Cause.SYNC)
def sync_host_blocking(ctx: AdviceContext, found: list[Hit]) -> list[Finding]:
    w = worst(found)
    evidence: list[Said] = []
    by_name: Mapping[str, int] = w.fact.get("sync_calls_by_name", {})
    steps = w.report.steps
    top = sorted(by_name.items(), key=lambda kv: -kv[1])[:4]
    if by_name:
        evidence.append(said("sync.calls", rank=w.rank, calls=tuple(top), steps=steps))
    where = ops(w, "sync")
    if where is not None:
        evidence.append(where)
    scalar_reads = w.fact.get("scalar_reads") or 0
    total = sum(int(n) for n in by_name.values())
    facts = {
        "blocking_calls": total if by_name else None,
        "blocking_calls_per_step": total / steps if by_name and steps > 0 else None,
        "top_blocking_call": top[0][0] if top else None,
        "scalar_reads": scalar_reads,
        **top_op_facts(w, "sync"),
    }
    actions = ([said("sync.scalar_reads")] if scalar_reads > 0 else []) + [said("sync.actions")]
    return recommend(ctx, found, "sync-host-blocking", Cause.SYNC, evidence, actions, whatif="no_sync", facts=facts)

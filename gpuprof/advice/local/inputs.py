"""Local findings of a host that keeps the GPU waiting on it: for the next batch
(``dataloader-starvation``) and in calls that block on the GPU (``sync-host-blocking``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from gpuprof.advice.context import AdviceContext, advisor
from gpuprof.advice.finding import Finding, Said, said
from gpuprof.advice.local.hits import Hit, local, ops, recommend, top_op_facts, worst
from gpuprof.advice.replayed import results
from gpuprof.model.report import Cause


@advisor
@local(Cause.DATALOADER)
def dataloader_starvation(ctx: AdviceContext, found: list[Hit]) -> list[Finding]:
    w = worst(found)
    evidence: list[Said] = []
    mean, calls = w.fact.dataloader_call_mean_us, w.fact.dataloader_calls
    if mean is not None and calls:
        evidence.append(said("dataloader.calls", rank=w.rank, mean_us=float(mean), calls=calls))
    single = any(h.fact.dataloader_single_process for h in found)
    if single:
        evidence.append(said("dataloader.in_process"))
    actions = [said("dataloader.start_workers" if single else "dataloader.more_workers"), said("dataloader.actions")]
    made = recommend(
        ctx, found, "dataloader-starvation", Cause.DATALOADER, evidence, actions,
        whatif="no_dataloader",
        replay_note=said("dataloader.replay_in_process") if single else None,
        facts={"dataloader_call_mean_us": mean, "dataloader_calls": calls,
               "dataloader_workers": 0 if single else None},
    )
    return [_with_cores_range(ctx, f, w, single) for f in made]


def _with_cores_range(ctx: AdviceContext, f: Finding, w: Hit, single: bool) -> Finding:
    """The saving of loading in (more) worker processes as a range over the host's free
    cores, which one trace cannot show. With a free core per worker the waits are gone
    (the replay of ``no_dataloader``), and a loader that ran in the training process takes
    its host work with it (that replayed with ``free_launches`` too: the upper end). With the
    workers sharing the training process's cores, its own host work grows by up to the
    loading it hands over, the DataLoader's wait per step, on the critical path (the lower
    end, never below nothing). The estimate is the middle: no constant fitted to one pair.
    The evidence says what would place it (the host's cores against the workers)."""
    if f.whatif is None:
        return f
    wr = results(ctx)
    load_us = float(w.fact.dataloader_wait_per_step_us or 0.0)
    step_us = wr.model.measured_step_us if wr is not None else 0.0
    if load_us <= 0 or step_us <= 0:
        return f
    replayed_pct = f.saving_pct
    high = replayed_pct
    if single and wr is not None:
        both = wr.combined_pct(("no_dataloader", "free_launches"))
        if both is not None and both > high + 1.0:
            high = both
    low = max(0.0, replayed_pct - 100.0 * load_us / step_us)
    estimate = (low + high) / 2.0
    line = said("dataloader.cores_range", low_pct=low, high_pct=high, pct=estimate, load_us=load_us,
                in_process=single)
    facts = {**f.facts, "dataloader_wait_per_step_us": load_us, "savings_low_pct": low, "savings_high_pct": high}
    return replace(f, saving_pct=estimate, savings_low_pct=low, savings_high_pct=high,
                   evidence=(*f.evidence, line), facts=facts)


@advisor
@local(Cause.SYNC)
def sync_host_blocking(ctx: AdviceContext, found: list[Hit]) -> list[Finding]:
    w = worst(found)
    evidence: list[Said] = []
    by_name: Mapping[str, int] = w.fact.sync_calls_by_name
    steps = w.report.steps
    top = sorted(by_name.items(), key=lambda kv: -kv[1])[:4]
    if by_name:
        evidence.append(said("sync.calls", rank=w.rank, calls=tuple(top), steps=steps))
    where = ops(w, "sync")
    if where is not None:
        evidence.append(where)
    scalar_reads = w.fact.scalar_reads or 0
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

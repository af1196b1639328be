"""Local findings of a host that issues GPU work too slowly: launch-bound
(``host-launch-bound``), framework and Python overhead (``host-overhead``), and DDP's
buffer broadcast (``host-ddp-buffer-sync``)."""

from __future__ import annotations

from collections.abc import Sequence

from gpuprof.accounting.summary import RankSummary
from gpuprof.advice.context import AdviceContext, advisor
from gpuprof.advice.finding import Fact, Finding, Said, said
from gpuprof.advice.local.hits import (
    Hit,
    compiled,
    has_optimizer,
    inference,
    local,
    ops,
    recommend,
    top_op_facts,
    worst,
)
from gpuprof.advice.replayed import replayed
from gpuprof.advice.savings import savings_pct
from gpuprof.model.report import Cause, RankReport

# ``host-launch-bound`` rather than ``host-overhead``: at least this share of kernels runs
# shorter than its launch call, at a rate of at least this many launches per millisecond.
LAUNCH_BOUND_TINY_SHARE = 0.3
LAUNCH_BOUND_RATE_PER_MS = 2.0
# ... and the host spent at least this share of the device's wait inside launch calls.
LAUNCH_BOUND_CALL_SHARE = 0.5
# A DataLoader working in the training process for this share of the window or more slows
# the host ops around it (resnet50-nw0: 22% in __next__, host ops ~2.7x slower than with
# workers): host estimates then count only the launch calls (see host_launch).
LOADER_CONTENTION_SHARE = 0.15


def _top_ops(hit: Hit, cause: str = "host") -> list[str]:
    return [o.op for o in hit.fact.lost_by_op.get(cause, ())]


def optimizer_name(op: str) -> str:
    """The optimizer a host op names (``Optimizer.step#SGD.step`` -> ``SGD``; ``""``: none)."""
    return op.split("#", 1)[-1].split(".", 1)[0] if "#" in op else ""


def _actions(w: Hit, launch_bound: bool, inference: bool) -> list[Said]:
    """The host actions, fitted to the rank: compiled already, inference (vLLM), the
    optimizer and ``zero_grad`` ops the host time sits under (optimizer advice only where
    the trace shows an optimizer: an inference trace has none)."""
    ops_ = _top_ops(w)
    if compiled(w.fact):
        return [said("host.compiled_actions")]
    if inference:
        vllm = any("vllm" in op or "execute_context" in op or "execute_model" in op for op in ops_)
        return ([said("host.vllm")] if vllm else []) + [said("host.inference_actions")]
    if not has_optimizer(w.summary):
        return [said("host.launch_bound_actions" if launch_bound else "host.overhead_actions")]
    out = [said("host.zero_grad")] if any(op.startswith("Optimizer.zero_grad") for op in ops_[:3]) else []
    # An optimizer step among the top three host ops runs long; one further down is named too.
    step = next((op for op in ops_[:3] if op.startswith("Optimizer.step")), None)
    if step is not None:
        out.append(said("host.optimizer_step", op=step, optimizer=optimizer_name(step)))
    out.append(said("host.launch_bound_actions" if launch_bound else "host.overhead_actions"))
    if step is None:
        named = next((op for op in ops_ if op.startswith("Optimizer.step")), None)
        out.append(said("host.optimizer_named", op=named, optimizer=optimizer_name(named)) if named is not None
                   else said("host.optimizer_any"))
    return out


@advisor
@local(Cause.HOST)
def host_launch(ctx: AdviceContext, found: list[Hit]) -> list[Finding]:
    w = worst(found)
    tiny = w.fact.kernels_shorter_than_launch_share
    in_launch = w.fact.host_wait_in_launch_share
    evidence: list[Said] = []
    if in_launch is not None:
        evidence.append(said("host.in_launch", rank=w.rank, share_pct=100 * float(in_launch)))
    kmed, lmed = w.fact.kernel_median_us, w.fact.launch_median_us
    if tiny is not None and kmed is not None and lmed is not None:
        evidence.append(said("host.tiny_kernels", rank=w.rank, share_pct=100 * tiny, kernels=w.fact.kernels,
                             kernel_median_us=kmed, launch_median_us=lmed))
    rate = w.fact.launches_per_ms
    if rate is not None:
        evidence.append(said("host.launch_rate", rank=w.rank, per_ms=float(rate)))
    where = ops(w, "host")
    if where is not None:
        evidence.append(where)
    ddp = w.fact.ddp_buffer_sync
    if ddp is not None and ddp.lost_us_per_step is not None and ddp.host_us_per_step is not None:
        evidence.append(said("host.ddp_elsewhere", rank=w.rank, broadcasts=ddp.broadcasts,
                             host_us=ddp.host_us_per_step, lost_us=ddp.lost_us_per_step))
    infer = inference(found)
    if infer:
        evidence.append(said("host.inference"))
    # Launch-bound only when the launch calls themselves dominate the host's wait and many
    # kernels are shorter than their launch; otherwise it is framework / Python overhead.
    launch_bound = (
        in_launch is not None
        and in_launch >= LAUNCH_BOUND_CALL_SHARE
        and tiny is not None
        and tiny >= LAUNCH_BOUND_TINY_SHARE
        and (rate or 0.0) >= LAUNCH_BOUND_RATE_PER_MS
    )
    rec_id = "host-launch-bound" if launch_bound else "host-overhead"
    actions = _actions(w, launch_bound, infer)
    facts: dict[str, Fact] = {
        "in_launch_pct": None if in_launch is None else 100.0 * float(in_launch),
        "kernels_shorter_than_launch_pct": None if tiny is None else 100.0 * float(tiny),
        "kernels": w.fact.kernels,
        "kernel_median_us": kmed,
        "launch_median_us": lmed,
        "launches_per_ms": rate,
        **top_op_facts(w, "host"),
    }
    if _loader_in_process(found):
        # The in-process DataLoader slows every host op (CPU and cache contention): the
        # CUDA-graph replay would count host time the DataLoader fix removes anyway. Until
        # that is fixed, only the launch-call replay is claimed.
        graphs = replayed(ctx, "free_launches")
        upper = graphs.pct if graphs is not None else savings_pct(ctx.reports, {h.rank: h.lost_us for h in found})
        evidence.append(said("host.loader_in_process", upper_pct=upper))
        facts["free_launches_pct"] = upper
        return recommend(ctx, found, rec_id, Cause.HOST, evidence, actions, whatif="free_launch_calls", facts=facts,
                         idle_as="host-launch")
    return recommend(ctx, found, rec_id, Cause.HOST, evidence, actions, whatif="free_launches",
                     lower="free_launch_calls", facts=facts, idle_as="host-launch")


def _loader_in_process(found: Sequence[Hit]) -> bool:
    """A rank of ``found`` loads its data in the training process and waits on it for a
    large share of its window (:data:`LOADER_CONTENTION_SHARE`)."""
    for h in found:
        dl = float(h.report.lost_us.get(Cause.DATALOADER, 0.0))
        if (
            h.fact.dataloader_single_process
            and h.report.window_us > 0
            and dl / h.report.window_us >= LOADER_CONTENTION_SHARE
        ):
            return True
    return False


def _ddp_buffers_us(s: RankSummary, r: RankReport) -> float | None:
    """The GPU's idle time under DDP's buffer broadcast, within the rank's lost time."""
    ddp = s.facts.ddp_buffer_sync if s.facts is not None else None
    if ddp is None:
        return None
    return min(ddp.lost_us, sum(float(v) for v in r.lost_us.values()))


@advisor
@local(_ddp_buffers_us)
def host_ddp_buffer_sync(ctx: AdviceContext, found: list[Hit]) -> list[Finding]:
    w = worst(found)
    ddp = w.fact.ddp_buffer_sync
    if ddp is None:  # every hit has one (_ddp_buffers_us)
        return []
    stepped = ddp.host_us_per_step is not None
    host_us = ddp.host_us_per_step if ddp.host_us_per_step is not None else ddp.host_us
    evidence = [
        said("host.ddp_broadcasts" if w.report.steps > 0 else "host.ddp_broadcasts_window", rank=w.rank,
             broadcasts=ddp.broadcasts, host_us=host_us),
    ]
    return recommend(
        ctx, found, "host-ddp-buffer-sync", Cause.HOST, evidence, [said("host.ddp_actions")],
        whatif="no_ddp_buffer_sync",
        facts={"broadcasts": ddp.broadcasts, "broadcast_host_us_per_step" if stepped else "broadcast_host_us": host_us},
    )

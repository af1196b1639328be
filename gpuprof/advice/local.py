"""Advice from what each rank does on its own: input pipeline, syncs, memory, launches.

One advisor per finding; ids are prefixed by their cause so that the cross-rank advisors
(:mod:`gpuprof.advice.distributed`) can use their own without clashing. Exposed
communication is advised there (``comm-overlap``, ``exposed-communication``), single rank
included, so it has no advisor here.

| id | cause | when |
|---|---|---|
| ``dataloader-starvation`` | dataloader | the GPU idles while the host is in DataLoader ``__next__`` |
| ``sync-host-blocking`` | sync | the GPU idles after the host blocked on it (``.item()``, syncs) |
| ``memory-pageable-copies`` | memory | exposed copies from/to pageable host memory |
| ``memory-exposed-copies`` | memory | other copies / memsets nothing overlaps |
| ``memory-allocator`` | memory | the GPU waits on ``cudaMalloc`` / ``cudaFree`` (often near capacity) |
| ``host-launch-bound`` | host | launches arrive late and the host spends >= 50% of the device's wait inside launch calls; many kernels (>= 2/ms), >= 30% shorter than their launch |
| ``host-overhead`` | host | launches arrive late otherwise: framework / Python work between the launches |
| ``host-ddp-buffer-sync`` | host | the GPU idles while ``DistributedDataParallel.forward`` broadcasts its buffers |

The host findings name where the host time sits (the top enclosing ops, facts
``lost_by_op``), and fit the workload: inference (facts ``workload``) gets CUDA-graph
advice (vLLM: no ``enforce_eager``), not optimizer or ``zero_grad`` advice.

A finding is reported for the ranks where it costs at least :data:`MIN_SHARE` of the window;
``ranks`` are the ranks where the cause originates.

``estimated_savings_pct`` comes from :mod:`gpuprof.advice.savings` (job step time is set by
the slowest rank). For the host-side findings it uses the what-if replay of
:mod:`gpuprof.job.whatifs` where the summary has one (``whatif_step_times_us``): the
time a rank would save is its replayed step time without the cause subtracted from the
replayed step time with it, so a stall that also leaves the device to run launch-bound
afterwards saves more than its own share, and one the device was busy through saves
nothing. Which what-if each finding uses:

| id | what-if |
|---|---|
| ``dataloader-starvation`` | ``dataloader``: input ready when asked for |
| ``sync-host-blocking`` | ``sync``: no blocking calls |
| ``memory-allocator`` | ``allocator``: allocator calls cost nothing |
| ``host-launch-bound`` / ``host-overhead`` | ``operators``: framework operators that launch kernels cost
  nothing on the host (CUDA graphs / ``torch.compile``; Python between them kept); the ``launch`` replay
  (only the launch calls free) is given as the lower end of the range. Where the rank's DataLoader runs
  in-process and stalls it, the ``launch`` replay alone: the in-process loader slows every host op, and
  the operators replay would count time the DataLoader fix removes |
| ``host-ddp-buffer-sync`` | ``ddp_buffers``: DDP's buffer broadcast removed |

Ranks without a replay (launches not in the trace) fall back to removing the cause's
attributed time. The fix is assumed to apply on every rank that has the cause. No saving is
estimated from a window under 1 ms (:data:`gpuprof.advice.savings.MIN_WINDOW_US`); a single
profiled step is flagged as low confidence in the evidence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuprof.accounting.rules import RULES
from gpuprof.accounting.summary import RankSummary
from gpuprof.advice.context import AdviceContext, advisor
from gpuprof.advice.replayed import replayed, results
from gpuprof.advice.savings import MIN_WINDOW_US, savings_pct
from gpuprof.model.report import Cause, RankReport, Recommendation
from gpuprof.util.phrases import duration

# Below this share of a rank's window a finding is not worth the user's attention.
MIN_SHARE = 0.02
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


@dataclass(frozen=True)
class _Hit:
    """One rank's measure of a finding: ``lost_us`` of its window it costs."""

    summary: RankSummary
    report: RankReport
    lost_us: float

    @property
    def share(self) -> float:
        return self.lost_us / self.report.window_us if self.report.window_us > 0 else 0.0

    @property
    def per_step_us(self) -> float:
        return self.lost_us / self.report.steps if self.report.steps > 0 else self.lost_us

    @property
    def fact(self) -> Mapping[str, Any]:
        return self.summary.facts


def _pairs(ctx: AdviceContext) -> list[tuple[RankSummary, RankReport]]:
    by_rank = {r.rank: r for r in ctx.reports}
    return [(s, by_rank[s.rank]) for s in ctx.summaries if s.rank in by_rank and s.empty_reason is None]


def _rule_share(s: RankSummary, r: RankReport, cause: Cause, rules: Sequence[str]) -> float:
    """Lost time of ``rules`` on one rank, scaled to what the cause kept after the
    cross-rank claims (they can only take time away from the local rules)."""
    by_rule: Mapping[str, float] = s.facts.get("local_lost_us_by_rule", {})
    cause_rules = [x.name for x in RULES if x.cause is cause]
    local_total = sum(float(by_rule.get(n, 0.0)) for n in cause_rules)
    mine = sum(float(by_rule.get(n, 0.0)) for n in rules)
    kept = float(r.lost_us.get(cause, 0.0))
    if local_total <= 0:
        return 0.0
    return mine * min(1.0, kept / local_total)


def _hits(ctx: AdviceContext, cause: Cause, rules: Sequence[str] | None = None) -> list[_Hit]:
    out = []
    for s, r in _pairs(ctx):
        lost = float(r.lost_us.get(cause, 0.0)) if rules is None else _rule_share(s, r, cause, rules)
        hit = _Hit(s, r, lost)
        if hit.share >= MIN_SHARE:
            out.append(hit)
    return out


def _ms(us: float) -> str:
    return duration(us)  # the one duration formatter of every report (gpuprof.util.phrases)


def _where(hits: Sequence[_Hit]) -> str:
    if len(hits) == 1:
        return f"rank {hits[0].report.rank}"
    return f"{len(hits)} ranks (worst: rank {max(hits, key=lambda h: h.share).report.rank})"


def _worst(hits: Sequence[_Hit]) -> _Hit:
    return max(hits, key=lambda h: h.share)


def _idle_line(hits: Sequence[_Hit], what: str) -> str:
    w = _worst(hits)
    unit = "per step" if w.report.steps > 0 else "in the window"
    line = f"On {_where(hits)} the GPU idled {_ms(w.per_step_us)} {unit} ({100 * w.share:.1f}% of the "
    line += "step" if w.report.steps > 0 else "window"
    line += f") {what}"
    if len(hits) > 1:
        lo, hi = min(h.share for h in hits), max(h.share for h in hits)
        line += f"; {100 * lo:.1f}-{100 * hi:.1f}% across those ranks"
    return line + "."


_WHATIF_WHAT = {
    "no_dataloader": "DataLoader wait",
    "no_sync": "blocking calls",
    "no_allocator": "allocator calls",
    "free_launch_calls": "kernel launch calls",
    "free_launches": "framework operators that launch kernels",
    "no_ddp_buffer_sync": "DDP buffer broadcast",
    "pinned_copies": "pageable copies",
    "hidden_copies": "exposed copies",
}


def _recommend(
    ctx: AdviceContext,
    hits: Sequence[_Hit],
    rec_id: str,
    cause: Cause,
    title: str,
    evidence: Sequence[str],
    actions: Sequence[str],
    whatif: str | None = None,
    lower: str | None = None,
    replay_note: str | None = None,
    upper: tuple[str, ...] = (),
    upper_note: str = "",
) -> list[Recommendation]:
    """One recommendation whose saving is the replay of ``whatif`` on the whole job (the
    closed-form removal of the hits' lost time where the job could not be replayed);
    ``lower``: a what-if whose saving is the lower end of the range. ``upper``: what-ifs
    that, replayed together with ``whatif``, bound the fix from above (it changes more than
    the trace can show); the estimate is then the middle of the two, and the evidence says
    so (``upper_note``: what the upper end assumes)."""
    removed = {h.report.rank: h.lost_us for h in hits}
    estimate = savings_pct(ctx.reports, removed)
    evidence = list(evidence)
    used: str | None = None
    span: tuple[float, float] | None = None  # the range the saving lies in, when one is known
    got = replayed(ctx, whatif) if whatif is not None else None
    if got is not None:
        estimate, used = got.pct, got.name
        evidence.append(got.line)
        low = replayed(ctx, lower) if lower is not None else None
        if low is not None and low.pct < estimate:
            span = (low.pct, estimate)
            evidence.append(
                f"Model: the {_WHATIF_WHAT[got.name]} cost nothing on the host, as CUDA graph capture or "
                "torch.compile achieve; the Python between them is kept. Estimated saving between "
                f"{low.pct:.1f}% (only the {_WHATIF_WHAT[low.name]} free) and {estimate:.1f}%."
            )
        if replay_note is not None:
            evidence.append(replay_note)
        w = results(ctx)
        hi = w.combined_pct((got.name, *upper)) if upper and w is not None else None
        if hi is not None and hi > estimate + 1.0:
            lo_pct = estimate
            estimate = (lo_pct + hi) / 2.0
            span = (lo_pct, hi)
            evidence.append(
                f"Estimate {estimate:.1f}%, the middle of {lo_pct:.1f}% (the host as measured) and {hi:.1f}% "
                f"({upper_note}): the fix speeds up the host too, by an amount one trace cannot show."
            )
    elif whatif is not None:
        evidence.append(
            "No replay of this job was possible (launches not in the trace): the estimate assumes this idle "
            "time vanishes on those ranks, with the job's step set by its slowest rank."
        )
    if any(h.report.window_us < MIN_WINDOW_US for h in hits):
        estimate, span = 0.0, None
        evidence.append(
            f"The analysed window is under {MIN_WINDOW_US / 1000:.0f} ms: too little to estimate a saving "
            "(profile a few full steps)."
        )
    return [
        Recommendation(
            id=rec_id,
            category=cause,
            title=title,
            estimated_savings_pct=estimate,
            ranks=tuple(sorted(removed)),
            evidence=tuple(evidence),
            actions=tuple(actions),
            whatif=used,
            savings_low_pct=None if span is None else span[0],
            savings_high_pct=None if span is None else span[1],
        )
    ]


@advisor
def dataloader_starvation(ctx: AdviceContext) -> list[Recommendation]:
    hits = _hits(ctx, Cause.DATALOADER)
    if not hits:
        return []
    w = _worst(hits)
    evidence = [_idle_line(hits, "while the host waited for the next batch in DataLoader.__next__")]
    mean, calls = w.fact.get("dataloader_call_mean_us"), w.fact.get("dataloader_calls")
    if mean is not None and calls:
        evidence.append(
            f"On rank {w.report.rank} each DataLoader.__next__ call took {_ms(float(mean))} on the host "
            f"({calls} call{'s' if calls != 1 else ''} in the window)."
        )
    single = any(h.fact.get("dataloader_single_process") for h in hits)
    actions = []
    if single:
        evidence.append(
            "The DataLoader runs in the training process (num_workers=0: _SingleProcessDataLoaderIter)."
        )
        actions.append(
            "Load in worker processes: DataLoader(..., num_workers=N) with N up to the CPU cores per GPU."
        )

    else:
        actions.append(
            "Raise DataLoader num_workers (up to the CPU cores per GPU) and prefetch_factor (default 2)."
        )
    actions += [
        "Keep workers alive across epochs: persistent_workers=True.",
        "Use pin_memory=True and .to(device, non_blocking=True) so the copy overlaps compute.",
        (
            "If workers are already saturated, move decoding/augmentation to the GPU (e.g. NVIDIA DALI, "
            "torchvision.transforms.v2 on CUDA tensors) or pre-process the data set offline."
        ),
    ]
    return _recommend(
        ctx,
        hits,
        "dataloader-starvation",
        Cause.DATALOADER,
        "The GPU waits for input data: speed up the DataLoader",
        evidence,
        actions,
        whatif="no_dataloader",
        replay_note=(
            "The replay keeps the host's measured speed between launches. Host ops run slow while the "
            "DataLoader works in-process (its tensor work and intra-op threads compete with the training "
            "loop for the cores); loading in worker processes speeds them up too."
        )
        if single
        else None,
        upper=("free_launches",) if single else (),
        upper_note="the framework operators' host time gone as well, the most the host can speed up",
    )


@advisor
def sync_host_blocking(ctx: AdviceContext) -> list[Recommendation]:
    hits = _hits(ctx, Cause.SYNC)
    if not hits:
        return []
    w = _worst(hits)
    evidence = [_idle_line(hits, "after the host blocked waiting for it")]
    by_name: Mapping[str, int] = w.fact.get("sync_calls_by_name", {})
    steps = w.report.steps
    if by_name:
        top = sorted(by_name.items(), key=lambda kv: -kv[1])[:4]
        per = (lambda n: f"{n / steps:.1f}/step") if steps > 0 else (lambda n: f"{n}")
        evidence.append(
            f"Rank {w.report.rank} blocking calls: " + ", ".join(f"{k} {per(n)}" for k, n in top) + "."
        )
    where = _op_line(w, "sync", "time the GPU idled after blocking calls")
    if where is not None:
        evidence.append(where)
    actions = []
    if (w.fact.get("scalar_reads") or 0) > 0:
        actions.append(
            "Remove .item() / .cpu() / float(tensor) / print(loss) from the training loop: accumulate "
            "metrics on the GPU (e.g. running_loss += loss.detach()) and read them every N steps."
        )
    actions += [
        "Drop explicit torch.cuda.synchronize() calls outside of timing code.",
        (
            "Avoid data-dependent host decisions on GPU values (if loss > x, torch.nonzero, masked indexing); "
            "find them with torch.cuda.set_sync_debug_mode('warn')."
        ),
        "Make device-to-host copies non_blocking=True into pinned memory and consume them a step later.",
    ]
    return _recommend(
        ctx,
        hits,
        "sync-host-blocking",
        Cause.SYNC,
        "The host blocks on the GPU inside the loop: remove the syncs",
        evidence,
        actions,
        whatif="no_sync",
    )


@advisor
def memory_pageable_copies(ctx: AdviceContext) -> list[Recommendation]:
    hits = []
    for s, r in _pairs(ctx):
        exposed = min(
            float(s.facts.get("pageable_exposed_copy_us") or 0.0),
            _rule_share(s, r, Cause.MEMORY, ["exposed_copies"]),
        )
        h = _Hit(s, r, exposed)
        if h.share >= MIN_SHARE:
            hits.append(h)
    if not hits:
        return []
    w = _worst(hits)
    evidence = [_idle_line(hits, "in copies from or to pageable (not pinned) host memory")]
    n, nbytes = w.fact.get("pageable_copies"), w.fact.get("pageable_copy_bytes")
    if n:
        size = f", {nbytes / 2**20:.0f} MiB" if nbytes is not None else ""
        evidence.append(
            f"Rank {w.report.rank}: {n} pageable copies{size} in the window; they cannot overlap compute."
        )
    actions = [
        "Pin host buffers: DataLoader(..., pin_memory=True), or tensor.pin_memory() for buffers you reuse.",
        "Copy with .to(device, non_blocking=True) so the transfer runs beside compute.",
        "Prefetch the next batch to the GPU on a side stream while the current step runs.",
    ]
    return _recommend(
        ctx,
        hits,
        "memory-pageable-copies",
        Cause.MEMORY,
        "Host-device copies use pageable memory and stall the GPU: pin memory",
        evidence,
        actions,
        whatif="pinned_copies",
    )


@advisor
def memory_exposed_copies(ctx: AdviceContext) -> list[Recommendation]:
    hits = []
    for s, r in _pairs(ctx):
        copies = _rule_share(s, r, Cause.MEMORY, ["exposed_copies"])
        h = _Hit(s, r, max(0.0, copies - float(s.facts.get("pageable_exposed_copy_us") or 0.0)))
        if h.share >= MIN_SHARE:
            hits.append(h)
    if not hits:
        return []
    w = _worst(hits)
    evidence = [_idle_line(hits, "in copies and memsets that no compute overlapped")]
    by_kind: Mapping[str, float] = w.fact.get("exposed_copy_us_by_kind", {})
    per = max(w.report.steps, 1)
    parts = [f"{k} {_ms(v / per)}" for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1]) if v > 0]
    if w.fact.get("exposed_memset_us"):
        parts.append(f"memset {_ms(float(w.fact['exposed_memset_us']) / per)}")
    if parts:
        unit = " per step" if w.report.steps > 0 else ""
        evidence.append(
            f"Rank {w.report.rank} exposed transfer time{unit} by direction: " + ", ".join(parts) + "."
        )
    actions = [
        (
            "Overlap transfers with compute: issue them non_blocking=True from pinned memory on a side stream, "
            "one step ahead."
        ),
        (
            "Keep tensors on the GPU across steps instead of moving them back and forth (CPU offload, "
            "metrics, masks built on the CPU)."
        ),
        (
            "For device-to-device copies, avoid needless .contiguous(), torch.cat of large buffers, or "
            "dtype conversions in the hot loop."
        ),
    ]
    return _recommend(
        ctx,
        hits,
        "memory-exposed-copies",
        Cause.MEMORY,
        "Memory transfers run with nothing beside them: overlap or remove them",
        evidence,
        actions,
        whatif="hidden_copies",
    )


# Without step markers, this share of the allocator time before the first compute kernel
# marks a cold start (the process's set-up) rather than allocator churn.
COLD_START_SHARE = 0.6


@advisor
def memory_allocator(ctx: AdviceContext) -> list[Recommendation]:
    hits = []
    for s, r in _pairs(ctx):
        h = _Hit(s, r, _rule_share(s, r, Cause.MEMORY, ["allocator"]))
        if h.share >= MIN_SHARE:
            hits.append(h)
    if not hits:
        return []
    w = _worst(hits)
    evidence = [
        _idle_line(hits, "while the host was in device allocator calls (cudaMalloc/cudaFree and kin)")
    ]
    calls: Mapping[str, int] = w.fact.get("alloc_calls_by_name", {})
    if calls:
        evidence.append(
            f"Rank {w.report.rank} allocator calls: "
            + ", ".join(f"{k} x{n}" for k, n in sorted(calls.items(), key=lambda kv: -kv[1])[:4])
            + f", {_ms(float(w.fact.get('alloc_time_us') or 0.0))} in total."
        )
    share = w.fact.get("mem_peak_share")
    near = share is not None and float(share) >= 0.9
    if near and share is not None:
        peak = w.fact.get("mem_peak_reserved_bytes") or w.fact.get("mem_peak_allocated_bytes") or 0
        cap = w.fact.get("mem_capacity_bytes") or 0
        evidence.append(
            f"Memory peaked at {peak / 2**30:.1f} GiB of {cap / 2**30:.1f} GiB ({100 * float(share):.0f}%): "
            "the caching allocator frees and retries when it runs out."
        )
    actions = [
        "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to cut fragmentation and cudaMalloc retries.",
        "Remove torch.cuda.empty_cache() from the training loop (cudaFree synchronizes the device).",
        "Keep tensor shapes stable (pad or bucket variable sequence lengths) so cached blocks get reused.",
    ]
    if near and _inference(hits):
        actions.append(
            "Lower peak memory: a smaller KV-cache budget or maximum batch (vLLM: gpu_memory_utilization, "
            "max_num_seqs), quantized weights or KV cache, or more tensor parallelism."
        )
    elif near:
        actions.append(
            "Lower peak memory: activation checkpointing, a smaller micro-batch with gradient accumulation, "
            "bf16/fp16 autocast, or sharding optimizer state (FSDP/ZeRO)."
        )
    early = w.fact.get("alloc_before_first_compute_share")
    if w.report.steps == 0 and early is not None and float(early) >= COLD_START_SHARE:
        # No step markers, and the allocation happens before the first kernel: the trace
        # opens with the process's set-up, not with a training loop that churns memory.
        evidence.append(
            f"{100 * float(early):.0f}% of that allocator time comes before the first compute kernel, in a trace "
            "without step markers: the trace opens with the process's set-up (allocations, library handles), a "
            "cold start, not a loop that allocates every step."
        )
        return _recommend(
            ctx,
            hits,
            "memory-cold-start",
            Cause.MEMORY,
            "The trace opens with allocator and library set-up (a cold start): profile steady-state steps",
            evidence,
            (
                "Start the profiler after a few iterations (torch.profiler.schedule(wait=5, warmup=2, active=3), or "
                "gpuprof run's --profile-wait) so the trace shows the steady state, and mark the steps "
                "(prof.step() each iteration) so that gpuprof can tell set-up from training.",
                "If start-up time itself matters (short jobs, serving): warm the allocator and load kernels once "
                "before timing (a dummy batch), and cache compiled artifacts.",
            ),
            whatif="no_allocator",
        )
    return _recommend(
        ctx,
        hits,
        "memory-allocator",
        Cause.MEMORY,
        "The GPU waits on memory allocation and release: stop allocator churn",
        evidence,
        actions,
        whatif="no_allocator",
    )


def _op_line(hit: _Hit, cause: str, what: str) -> str | None:
    """Where the lost time of ``cause`` sits on the worst rank: its top enclosing ops."""
    ops: Sequence[Mapping[str, Any]] = (hit.fact.get("lost_by_op") or {}).get(cause) or []
    parts = []
    for o in ops[:5]:
        per = o.get("lost_us_per_step")
        amount = f"{_ms(float(per))}/step" if per is not None else _ms(float(o["lost_us"]))
        n = int(o.get("calls") or 0)
        calls = f", {n} call{'s' if n != 1 else ''}" if n else ""
        if o.get("launches_per_call") and float(o["launches_per_call"]) >= 10:
            each = " each" if n != 1 else ""
            calls += f", {float(o['launches_per_call']):,.0f} kernel launches{each}"
        inner = ""
        if o.get("inner_op"):
            steps = hit.report.steps
            in_us = float(o["inner_lost_us"]) / steps if steps > 0 else float(o["inner_lost_us"])
            inner = (
                f" (of which {o['inner_op']} {_ms(in_us)}{'/step' if steps > 0 else ''}; "
                f"its longest call took {_ms(float(o['inner_longest_us']))} on the host)"
            )
        parts.append(f"{o['op']} {amount}{calls}{inner}")
    if not parts:
        return None
    return f"On rank {hit.report.rank} the {what} sits under: " + "; ".join(parts) + "."


def _top_ops(hit: _Hit, cause: str = "host") -> list[str]:
    return [str(o["op"]) for o in (hit.fact.get("lost_by_op") or {}).get(cause) or []]


def _inference(hits: Sequence[_Hit]) -> bool:
    return any(h.fact.get("workload") == "inference" for h in hits)


def _vllm(hit: _Hit) -> bool:
    return any("vllm" in op or "execute_context" in op or "execute_model" in op for op in _top_ops(hit))


def _compiled(w: _Hit) -> bool:
    """Most of the rank's kernels come from Inductor: the model is already compiled."""
    share = w.fact.get("compiled_kernel_share")
    return share is not None and float(share) >= 0.5


_COMPILED_ACTION = (
    "The model is already compiled (most kernels are Inductor's triton_ kernels): capture CUDA graphs too "
    "(torch.compile(mode='reduce-overhead'), or torch.cuda.graphs around the compiled step) and look for graph "
    "breaks (TORCH_LOGS=graph_breaks) that leave parts of the step eager."
)


def _host_actions(w: _Hit, launch_bound: bool, inference: bool) -> list[str]:
    if _compiled(w):
        return [
            _COMPILED_ACTION,
            "Give each kernel more work: a larger batch per GPU.",
            "Profile the host side (py-spy record --native) for the Python left between compiled regions.",
        ]
    if inference:
        actions = []
        if _vllm(w):
            actions.append(
                "vLLM: do not set enforce_eager=True; let it capture CUDA graphs (compilation_config "
                "cudagraph_capture_sizes covering your batch sizes) and torch.compile the model."
            )
        actions += [
            (
                "Capture the decode step in CUDA graphs (torch.compile(mode='reduce-overhead') or "
                "torch.cuda.graphs) so one replay replaces hundreds of eager launches."
            ),
            "Batch more requests per step so each kernel does more work.",
        ]
        return actions
    ops = _top_ops(w)
    actions = []
    if any(op.startswith("Optimizer.zero_grad") for op in ops[:3]):
        actions.append(
            "optimizer.zero_grad(set_to_none=True): the trace zero-fills every gradient with its own kernel "
            "launch (set_to_none is the default since PyTorch 2.0)."
        )
    step = next((op for op in ops[:3] if op.startswith("Optimizer.step")), None)
    if step is not None:
        actions.append(f"{step} runs long on the host: {optimizer_advice(step)}")
    if launch_bound:
        actions += [
            (
                "Compile the model: torch.compile(model) fuses elementwise kernels; "
                "mode='reduce-overhead' also captures CUDA graphs."
            ),
            "Capture the static part of the step in a CUDA graph (torch.cuda.graphs / make_graphed_callables).",
            "Give each kernel more work: a larger batch per GPU, or fewer, bigger layers.",
        ]
    else:
        actions += [
            (
                "torch.compile(model) removes most per-op Python and framework overhead (mode='reduce-overhead' "
                "also captures CUDA graphs)."
            ),
            "Profile the host side (py-spy record --native, or the torch profiler's CPU view) to find the slow Python.",
            "Move CPU pre-processing, logging and metric code out of the step or into background threads.",
        ]
    if step is None:
        named = next((op for op in ops if op.startswith("Optimizer.step")), None)
        actions.append(
            f"{named} is part of the host's time too: {optimizer_advice(named)}"
            if named is not None
            else "Use your optimizer's foreach or fused implementation (foreach=True; fused=True for Adam and AdamW)."
        )
    return actions


# Optimizers of torch.optim with a fused implementation (a few kernels for the whole update),
# and those with a foreach one (one kernel per operation over all parameters).
_FUSED = ("Adam", "AdamW")
_FOREACH = ("SGD", "Adagrad", "Adadelta", "Adamax", "ASGD", "NAdam", "RAdam", "RMSprop", "Rprop")


def optimizer_advice(op: str) -> str:
    """The change for the optimizer the trace names (``Optimizer.step#SGD.step``): its own
    foreach or fused implementation, never another optimizer's."""
    name = op.split("#", 1)[-1].split(".", 1)[0] if "#" in op else ""
    if name in _FUSED:
        return (
            f"torch.optim.{name}(..., fused=True) runs the whole update in a few kernels "
            "(foreach=True batches it per operation)."
        )
    if name in _FOREACH:
        return f"torch.optim.{name}(..., foreach=True) batches the update over all parameters in a few kernels."
    return (
        "use a foreach or fused implementation of this optimizer if it has one, keep its state on the GPU, or "
        "run its expensive part (preconditioner updates) every N steps."
    )


@advisor
def host_launch(ctx: AdviceContext) -> list[Recommendation]:
    hits = _hits(ctx, Cause.HOST)
    if not hits:
        return []
    w = _worst(hits)
    tiny = w.fact.get("kernels_shorter_than_launch_share")
    in_launch = w.fact.get("host_wait_in_launch_share")
    evidence = [_idle_line(hits, "waiting for the host to launch the next kernel")]
    if in_launch is not None:
        evidence.append(
            f"Rank {w.report.rank}: while the GPU waited, the host spent {100 * float(in_launch):.0f}% of that "
            "time inside kernel launch calls, the rest in framework and Python work between them."
        )
    kmed, lmed = w.fact.get("kernel_median_us"), w.fact.get("launch_median_us")
    if tiny is not None and kmed is not None and lmed is not None:
        evidence.append(
            f"Rank {w.report.rank}: {100 * tiny:.0f}% of {w.fact.get('kernels')} kernels ran shorter than "
            f"their own launch call (median kernel {kmed:.1f} µs, median launch {lmed:.1f} µs)."
        )
    rate = w.fact.get("launches_per_ms")
    if rate is not None:
        evidence.append(f"Rank {w.report.rank} launched {float(rate):.1f} compute kernels per ms.")
    ops = _op_line(w, "host", "time the GPU waited for the host")
    if ops is not None:
        evidence.append(ops)
    ddp = w.fact.get("ddp_buffer_sync")
    if ddp and ddp.get("lost_us_per_step") is not None:
        evidence.append(
            f"Rank {w.report.rank}: DistributedDataParallel broadcasts its buffers at the start of every forward "
            f"({ddp['broadcasts']} broadcasts, {_ms(float(ddp['host_us_per_step']))}/step on the host, "
            f"{_ms(float(ddp['lost_us_per_step']))}/step of GPU idle inside it): a recommendation of its own."
        )
    inference = _inference(hits)
    if inference:
        evidence.append("This is an inference workload (no backward or optimizer ops; inference markers).")
    # Launch-bound only when the launch calls themselves dominate the host's wait and many
    # kernels are shorter than their launch; otherwise it is framework / Python overhead.
    launch_bound = (
        in_launch is not None
        and in_launch >= LAUNCH_BOUND_CALL_SHARE
        and tiny is not None
        and tiny >= LAUNCH_BOUND_TINY_SHARE
        and (rate or 0.0) >= LAUNCH_BOUND_RATE_PER_MS
    )
    actions = _host_actions(w, launch_bound, inference)
    if launch_bound:
        rec_id, title = (
            "host-launch-bound",
            "Kernel launches cannot keep up with many tiny kernels: fuse them or capture CUDA graphs",
        )
    else:
        rec_id, title = (
            "host-overhead",
            "The host issues GPU work too slowly: framework and Python overhead between kernels",
        )
    if _loader_in_process(hits):
        # The in-process DataLoader slows every host op (CPU and cache contention): the
        # CUDA-graph replay would count host time the DataLoader fix removes anyway. Until
        # that is fixed, only the launch-call replay is claimed.
        graphs = replayed(ctx, "free_launches")
        upper = graphs.pct if graphs is not None else savings_pct(ctx.reports, {h.report.rank: h.lost_us for h in hits})
        evidence.append(
            "The DataLoader runs in the training process and slows the host ops between kernels; fix "
            "the DataLoader first (its own recommendation) and profile again. Until then the estimate counts only the launch "
            f"calls (the CUDA-graph replay, operators free, gives {upper:.1f}%, much of it host time the "
            "DataLoader fix removes)."
        )
        return _recommend(ctx, hits, rec_id, Cause.HOST, title, evidence, actions, whatif="free_launch_calls")
    return _recommend(
        ctx, hits, rec_id, Cause.HOST, title, evidence, actions, whatif="free_launches", lower="free_launch_calls"
    )


def _loader_in_process(hits: Sequence[_Hit]) -> bool:
    """A rank of ``hits`` loads its data in the training process and waits on it for a
    large share of its window (:data:`LOADER_CONTENTION_SHARE`)."""
    for h in hits:
        dl = float(h.report.lost_us.get(Cause.DATALOADER, 0.0))
        if (
            h.fact.get("dataloader_single_process")
            and h.report.window_us > 0
            and dl / h.report.window_us >= LOADER_CONTENTION_SHARE
        ):
            return True
    return False


@advisor
def host_ddp_buffer_sync(ctx: AdviceContext) -> list[Recommendation]:
    hits = []
    for s, r in _pairs(ctx):
        ddp = s.facts.get("ddp_buffer_sync")
        if ddp:
            h = _Hit(s, r, min(float(ddp.get("lost_us") or 0.0), sum(float(v) for v in r.lost_us.values())))
            if h.share >= MIN_SHARE:
                hits.append(h)
    if not hits:
        return []
    w = _worst(hits)
    ddp = w.fact["ddp_buffer_sync"]
    unit = "/step" if w.report.steps > 0 else " in the window"
    host_us = ddp["host_us_per_step"] if ddp.get("host_us_per_step") is not None else ddp["host_us"]
    evidence = [
        _idle_line(hits, "while DistributedDataParallel broadcast its buffers at the start of the forward"),
        (
            f"Rank {w.report.rank}: {ddp['broadcasts']} buffer broadcasts (flatten_dense_tensors, broadcast, "
            f"unflatten_dense_tensors) take {_ms(float(host_us))}{unit} on the host before the forward's first kernels."
        ),
    ]
    return _recommend(
        ctx,
        hits,
        "host-ddp-buffer-sync",
        Cause.HOST,
        "DDP re-broadcasts its buffers every step: turn it off",
        evidence,
        [
            (
                "DistributedDataParallel(model, broadcast_buffers=False): the buffers (e.g. BatchNorm running "
                "stats) start equal on every rank; broadcasting them each forward is rarely needed."
            ),
            "If buffers must agree, use SyncBatchNorm or sync them every N steps instead.",
        ],
        whatif="no_ddp_buffer_sync",
    )

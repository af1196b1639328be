"""Advice from NVML samples alone: idle phases, memory near capacity, throttling, lost GPUs.

:func:`advise_samples` is pure: :class:`~gpuprof.accounting.samples.SampleFindings` in,
recommendations out. ``estimated_savings_pct`` is the share of the run's wall time that
fixing the finding could give back (idle time that overlapping would fill, clock speed
lost to throttling); findings that are risks rather than lost time (memory near capacity,
a lost GPU) carry 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuprof.advice.context import AdviceContext, advisor
from gpuprof.model.report import Cause, Recommendation

if TYPE_CHECKING:  # only a session with NVML samples needs the module (its import costs ms)
    from gpuprof.accounting.samples import SampleFindings

STARTUP_MIN_S = 30.0  # a startup idle phase shorter than this is not worth a line
IDLE_MIN_PCT = 5.0  # non-periodic idle below this share of the run is not worth a line
THROTTLE_MIN_PCT = 5.0  # share of busy polls


def _gpus(gpus: tuple[int, ...]) -> str:
    return "GPU " + ", ".join(str(g) for g in gpus) if len(gpus) <= 4 else f"{len(gpus)} GPUs"


def _periodic(f: SampleFindings) -> list[Recommendation]:
    p = f.periodic_idle
    if p is None:
        return []
    return [
        Recommendation(
            id="samples-periodic-idle",
            category=Cause.OTHER,
            title=(
                f"GPUs idle {p.idle_pct_of_run:.0f}% of the run in periodic phases of ~{p.mean_idle_s:.0f} s "
                f"every ~{p.period_s:.0f} s: overlap rollout generation (or evaluation) with training"
            ),
            estimated_savings_pct=p.idle_pct_of_run,
            ranks=(),
            evidence=(
                f"{p.phases} idle phases (all GPUs below 5% utilization), mean {p.mean_idle_s:.1f} s, "
                f"period {p.period_s:.1f} s, duty cycle {p.duty_cycle_pct:.0f}% idle",
                f"run length {f.duration_s:.0f} s sampled every {f.interval_s * 1000:.0f} ms",
            ),
            actions=(
                "RL post-training: generate rollouts on separate GPUs or asynchronously (one step off-policy) "
                "so the trainer GPUs never wait for generation",
                "periodic evaluation: evaluate less often or on fewer batches, or on a separate worker",
                "periodic checkpointing: save asynchronously (torch.distributed.checkpoint.async_save)",
            ),
        )
    ]


def _other_idle(f: SampleFindings) -> list[Recommendation]:
    recs: list[Recommendation] = []
    periodic = f.periodic_idle is not None
    interior = [p for p in f.idle_phases if p.kind == "interior"]
    if interior and not periodic and f.duration_s > 0:
        pct = 100.0 * sum(p.duration_s for p in interior) / f.duration_s
        if pct >= IDLE_MIN_PCT:
            longest = max(interior, key=lambda p: p.duration_s)
            recs.append(
                Recommendation(
                    id="samples-idle-phases",
                    category=Cause.OTHER,
                    title=(
                        f"GPUs idle {pct:.0f}% of the run in {len(interior)} phase(s), "
                        f"longest {longest.duration_s:.0f} s "
                        f"at {longest.start_s:.0f} s: find what the job does then"
                    ),
                    estimated_savings_pct=pct,
                    ranks=(),
                    evidence=tuple(
                        f"idle {p.start_s:.0f}-{p.end_s:.0f} s ({p.duration_s:.0f} s)" for p in interior[:5]
                    ),
                    actions=(
                        "profile the idle phase (gpuprof run --profile-wait N) or add logging around evaluation, "
                        "checkpointing and data preparation",
                    ),
                )
            )
    startup = [p for p in f.idle_phases if p.kind == "startup"]
    in_pattern = f.periodic_idle is not None and f.periodic_idle.includes_startup
    if startup and not in_pattern and f.duration_s > 0 and startup[0].duration_s >= STARTUP_MIN_S:
        s = startup[0]
        recs.append(
            Recommendation(
                id="samples-startup-idle",
                category=Cause.OTHER,
                title=f"GPUs idle for the first {s.duration_s:.0f} s (startup: loading, compilation, data preparation)",
                estimated_savings_pct=100.0 * s.duration_s / f.duration_s,
                ranks=(),
                evidence=(f"no GPU above 5% utilization until {s.end_s:.0f} s of a {f.duration_s:.0f} s run",),
                actions=(
                    "load checkpoints and datasets lazily or in parallel; cache torch.compile artifacts",
                ),
            )
        )
    return recs


def _memory(f: SampleFindings) -> list[Recommendation]:
    if not f.memory_pressure:
        return []
    gpus = tuple(m.gpu for m in f.memory_pressure)
    peak = max(m.peak_pct for m in f.memory_pressure)
    return [
        Recommendation(
            id="samples-memory-near-capacity",
            category=Cause.MEMORY,
            title=f"GPU memory peaked at {peak:.0f}% of capacity on {_gpus(gpus)}: one larger batch away from OOM",
            estimated_savings_pct=0.0,
            ranks=(),
            evidence=tuple(
                f"GPU {m.gpu}: peak {m.peak_pct:.1f}%, {m.time_near_capacity_pct:.0f}% of polls at >= 95%"
                for m in f.memory_pressure
            ),
            actions=(
                "check the step records for allocator retries (torch.cuda.memory_stats num_alloc_retries)",
                "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to cut fragmentation",
                "use activation checkpointing or a smaller micro-batch if retries or OOMs appear",
            ),
        )
    ]


def _throttling(f: SampleFindings) -> list[Recommendation]:
    recs = []
    for t in f.throttling:
        if t.busy_samples_pct < THROTTLE_MIN_PCT:
            continue
        # Time lost ~ share of busy polls throttled x clock speed lost while throttled.
        savings = t.busy_samples_pct * (t.clock_loss_pct or 0.0) / 100.0
        loss = "N/A" if t.clock_loss_pct is None else f"{t.clock_loss_pct:.0f}%"
        recs.append(
            Recommendation(
                id=f"samples-throttle-{t.reason}",
                category=Cause.OTHER,
                title=(
                    f"GPU clocks slowed by {t.reason.replace('_', ' ')} in {t.busy_samples_pct:.0f}% of busy samples "
                    f"on {_gpus(t.gpus)}: check power limits and cooling"
                ),
                estimated_savings_pct=savings,
                ranks=(),
                evidence=(f"SM clock {loss} lower while the reason was set than in unthrottled busy samples",),
                actions=(
                    "compare nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE with the GPU's rated limits",
                    "ask the cluster admins about power capping and airflow for these nodes",
                ),
            )
        )
    return recs


def _lost(f: SampleFindings) -> list[Recommendation]:
    if not f.lost_gpus:
        return []
    return [
        Recommendation(
            id="samples-gpu-lost",
            category=Cause.OTHER,
            title=f"{_gpus(f.lost_gpus)} fell off the bus during the run (NVML: GPU is lost)",
            estimated_savings_pct=0.0,
            ranks=(),
            evidence=tuple(
                f"GPU {g.gpu} lost at {g.lost_at_s:.0f} s" for g in f.gpus if g.lost_at_s is not None
            ),
            actions=("check `dmesg` for Xid errors and have the node drained and inspected",),
        )
    ]


def advise_samples(findings: SampleFindings | None) -> list[Recommendation]:
    """Recommendations from sample findings alone (empty for ``None``)."""
    if findings is None:
        return []
    recs: list[Recommendation] = []
    for rule in (_periodic, _other_idle, _memory, _throttling, _lost):
        recs.extend(rule(findings))
    return recs


@advisor
def samples_advisor(ctx: AdviceContext) -> list[Recommendation]:
    """The pipeline's hook: advice from a session's NVML samples, when it has any."""
    if ctx.samples is None:
        return []
    from gpuprof.accounting.samples import SampleFindings  # noqa: F811 -- only sessions get here

    return advise_samples(ctx.samples if isinstance(ctx.samples, SampleFindings) else None)

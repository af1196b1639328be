"""Advice from NVML samples alone: idle phases, memory near capacity, throttling, lost GPUs.

:func:`advise_samples` is pure: :class:`~gpuprof.accounting.samples.SampleFindings` in,
recommendations out (:func:`sample_findings` gives the findings before the phrasebook
words them). ``estimated_savings_pct`` is the share of the run's wall time that fixing the
finding could give back (idle time that overlapping would fill, clock speed lost to
throttling); findings that are risks rather than lost time (memory near capacity, a lost
GPU) carry 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuprof.advice.context import AdviceContext, advisor
from gpuprof.advice.finding import Fact, Finding, said
from gpuprof.advice.phrasebook import recommendation
from gpuprof.model.report import Cause, Recommendation

if TYPE_CHECKING:  # only a session with NVML samples needs the module (its import costs ms)
    from gpuprof.accounting.samples import SampleFindings

STARTUP_MIN_S = 30.0  # a startup idle phase shorter than this is not worth a line
IDLE_MIN_PCT = 5.0  # non-periodic idle below this share of the run is not worth a line
THROTTLE_MIN_PCT = 5.0  # share of busy polls
SHOWN_PHASES = 5  # idle phases listed in the evidence


def _periodic(f: SampleFindings) -> list[Finding]:
    p = f.periodic_idle
    if p is None:
        return []
    facts = {
        "idle_pct_of_run": p.idle_pct_of_run,
        "mean_idle_s": p.mean_idle_s,
        "period_s": p.period_s,
        "phases": p.phases,
        "duty_cycle_pct": p.duty_cycle_pct,
        "run_s": f.duration_s,
        "interval_ms": f.interval_s * 1000,
    }
    evidence = (said("samples.periodic", phases=p.phases, mean_idle_s=p.mean_idle_s, period_s=p.period_s,
                     duty_cycle_pct=p.duty_cycle_pct), said("samples.run", run_s=f.duration_s, interval_ms=f.interval_s * 1000))
    title = said("title.samples-periodic-idle", idle_pct=p.idle_pct_of_run, mean_idle_s=p.mean_idle_s, period_s=p.period_s)
    return [Finding("samples-periodic-idle", Cause.OTHER, p.idle_pct_of_run, title, evidence,
                    (said("samples.periodic_actions"),), facts=facts)]


def _other_idle(f: SampleFindings) -> list[Finding]:
    out: list[Finding] = []
    interior = [p for p in f.idle_phases if p.kind == "interior"]
    pct = 100.0 * sum(p.duration_s for p in interior) / f.duration_s if interior and f.duration_s > 0 else 0.0
    if interior and f.periodic_idle is None and pct >= IDLE_MIN_PCT:
        longest = max(interior, key=lambda p: p.duration_s)
        title = said("title.samples-idle-phases", idle_pct=pct, phases=len(interior), longest_s=longest.duration_s,
                     at_s=longest.start_s)
        shown = tuple(said("samples.idle_phase", start_s=p.start_s, end_s=p.end_s, length_s=p.duration_s)
                      for p in interior[:SHOWN_PHASES])
        facts = {"idle_pct_of_run": pct, "phases": len(interior), "longest_s": longest.duration_s,
                 "longest_at_s": longest.start_s}
        out.append(Finding("samples-idle-phases", Cause.OTHER, pct, title, shown, (said("samples.idle_actions"),),
                           facts=facts))
    startup = [p for p in f.idle_phases if p.kind == "startup"]
    in_pattern = f.periodic_idle is not None and f.periodic_idle.includes_startup
    if startup and not in_pattern and f.duration_s > 0 and startup[0].duration_s >= STARTUP_MIN_S:
        s = startup[0]
        out.append(Finding(
            "samples-startup-idle", Cause.OTHER, 100.0 * s.duration_s / f.duration_s,
            said("title.samples-startup-idle", length_s=s.duration_s),
            (said("samples.startup", end_s=s.end_s, run_s=f.duration_s),), (said("samples.startup_actions"),),
            facts={"startup_s": s.duration_s, "run_s": f.duration_s},
        ))
    return out


def _memory(f: SampleFindings) -> list[Finding]:
    if not f.memory_pressure:
        return []
    gpus = tuple(m.gpu for m in f.memory_pressure)
    peak = max(m.peak_pct for m in f.memory_pressure)
    evidence = tuple(said("samples.memory_gpu", gpu=m.gpu, peak_pct=m.peak_pct, near_pct=m.time_near_capacity_pct)
                     for m in f.memory_pressure)
    return [Finding("samples-memory-near-capacity", Cause.MEMORY, 0.0,
                    said("title.samples-memory-near-capacity", peak_pct=peak, gpus=gpus), evidence,
                    (said("samples.memory_actions"),), facts={"peak_pct": peak, "gpus": len(gpus)})]


def _throttling(f: SampleFindings) -> list[Finding]:
    out = []
    for t in f.throttling:
        if t.busy_samples_pct < THROTTLE_MIN_PCT:
            continue
        # Time lost ~ share of busy polls throttled x clock speed lost while throttled.
        savings = t.busy_samples_pct * (t.clock_loss_pct or 0.0) / 100.0
        title = said("title.samples-throttle", reason=t.reason, busy_pct=t.busy_samples_pct, gpus=t.gpus)
        loss = (said("samples.clock_loss_unknown") if t.clock_loss_pct is None
                else said("samples.clock_loss", loss_pct=t.clock_loss_pct))
        facts: dict[str, Fact] = {"reason": t.reason, "busy_samples_pct": t.busy_samples_pct, "clock_loss_pct": t.clock_loss_pct,
                 "gpus": len(t.gpus)}
        out.append(Finding(f"samples-throttle-{t.reason}", Cause.OTHER, savings, title,
                           (loss,), (said("samples.throttle_actions"),),
                           facts=facts))
    return out


def _lost(f: SampleFindings) -> list[Finding]:
    if not f.lost_gpus:
        return []
    evidence = tuple(said("samples.lost_at", gpu=g.gpu, at_s=g.lost_at_s) for g in f.gpus if g.lost_at_s is not None)
    return [Finding("samples-gpu-lost", Cause.OTHER, 0.0, said("title.samples-gpu-lost", gpus=f.lost_gpus), evidence,
                    (said("samples.lost_actions"),), facts={"gpus": len(f.lost_gpus)})]


def sample_findings(findings: SampleFindings | None) -> list[Finding]:
    """Findings from sample findings alone (empty for ``None``)."""
    if findings is None:
        return []
    out: list[Finding] = []
    for rule in (_periodic, _other_idle, _memory, _throttling, _lost):
        out.extend(rule(findings))
    return out


def advise_samples(findings: SampleFindings | None) -> list[Recommendation]:
    """Recommendations from sample findings alone (empty for ``None``)."""
    return [recommendation(f) for f in sample_findings(findings)]


@advisor
def samples_advisor(ctx: AdviceContext) -> list[Finding]:
    """The pipeline's hook: advice from a session's NVML samples, when it has any."""
    if ctx.samples is None:
        return []
    from gpuprof.accounting.samples import SampleFindings

    return sample_findings(ctx.samples if isinstance(ctx.samples, SampleFindings) else None)

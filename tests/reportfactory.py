"""Hand-built reports for renderer, gate and diff tests: every figure known by construction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuprof.model.report import CAUSES, Cause, RankReport, Recommendation, Report

XSS = "<script>document.title='PWNED'</script><img src=x id=injected onerror=\"document.title='PWNED'\">"


def rank(
    rank: int,
    window_ms: float = 100.0,
    lost_ms: Mapping[str, float] | None = None,
    steps: int = 4,
    device: str | None = "NVIDIA H100 80GB HBM3",
    extra: Mapping[str, Any] | None = None,
) -> RankReport:
    """A rank whose window is ``window_ms``; compute is what ``lost_ms`` leaves."""
    lost = {c: 0.0 for c in CAUSES}
    for name, ms in (lost_ms or {}).items():
        lost[Cause(name)] = ms * 1000.0
    window_us = window_ms * 1000.0
    compute_us = window_us - sum(lost.values())
    step_us = window_us / steps if steps else 0.0
    return RankReport(
        rank=rank,
        device=device,
        steps=steps,
        window_us=window_us,
        compute_us=compute_us,
        lost_us=lost,
        source=f"rank{rank}.json",
        step_times_us=tuple([step_us] * steps),
        extra=dict(extra or {}),
    )


def stepped_rank(
    rank: int,
    step_ms: Sequence[float],
    lost_ms: Mapping[str, Sequence[float]] | None = None,
    device: str | None = "NVIDIA H100 80GB HBM3",
    extra: Mapping[str, Any] | None = None,
) -> RankReport:
    """A rank whose steps last ``step_ms`` each, with lost time per cause per step
    (``lost_ms``: cause -> one value per step); compute is what each step has left. Carries
    ``step_numbers``, ``step_compute_us`` and ``step_lost_us`` as an analysis writes them."""
    n = len(step_ms)
    per_step = {c.value: [1000.0 * float(v) for v in (lost_ms or {}).get(c.value, [0.0] * n)] for c in CAUSES}
    assert all(len(v) == n for v in per_step.values()), "one lost value per step"
    step_us = [1000.0 * float(s) for s in step_ms]
    compute = [s - sum(per_step[c][i] for c in per_step) for i, s in enumerate(step_us)]
    assert min(compute, default=0.0) >= 0, "lost time cannot pass the step"
    return RankReport(
        rank=rank,
        device=device,
        steps=n,
        window_us=sum(step_us),
        compute_us=sum(compute),
        lost_us={c: sum(per_step[c.value]) for c in CAUSES},
        source=f"rank{rank}.json",
        step_times_us=tuple(step_us),
        extra={"step_numbers": list(range(1, n + 1)), "step_compute_us": compute, "step_lost_us": per_step, **(extra or {})},
    )


def rec(category: str, savings: float, title: str = "Do the thing", evidence: tuple[str, ...] = ("measured",),
        actions: tuple[str, ...] = ("try this",), ranks: tuple[int, ...] = (0,)) -> Recommendation:
    return Recommendation(
        id=f"{category}-rule",
        category=Cause(category),
        title=title,
        estimated_savings_pct=savings,
        ranks=ranks,
        evidence=evidence,
        actions=actions,
    )


def report(ranks: list[RankReport], recs: list[Recommendation] | None = None, warnings: tuple[str, ...] = (),
           extra: Mapping[str, Any] | None = None) -> Report:
    return Report(
        inputs=tuple(r.source or "" for r in ranks),
        ranks=tuple(ranks),
        recommendations=tuple(recs or ()),
        warnings=warnings,
        extra=dict(extra or {}),
    )

"""Savings from the job's what-if replays (:mod:`gpuprof.job.whatifs`), for the advisors.

Every advisor names the what-if its fix corresponds to; the estimate is what that
what-if's replay saves on the job's step (its slowest rank's), and the evidence says so in
one line with the replayed step times and the model's error (phrase ``replay.saved``).
Where no replay exists (no launches in the trace, an op-level timeline without the events
a what-if removes), the advisor's closed-form estimate stands and the recommendation has no
``whatif``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuprof.advice.context import AdviceContext
from gpuprof.advice.finding import Fact, Said, said
from gpuprof.advice.savings import MIN_WINDOW_US
from gpuprof.job.whatif_results import WhatIfResults

# Above this model error (percent of the measured step) estimates are called rough.
ROUGH_MODEL_ERROR_PCT = 5.0


def results(ctx: AdviceContext) -> WhatIfResults | None:
    w = ctx.whatifs
    return w if isinstance(w, WhatIfResults) else None


@dataclass(frozen=True)
class Replayed:
    """A what-if's saving: the job's step before and after the fix, and the record of the
    evidence line that states it."""

    name: str
    pct: float
    step_us: float
    step_after_us: float
    said: Said

    @property
    def facts(self) -> dict[str, Fact]:
        return {"step_us": self.step_us, "step_after_us": self.step_after_us}


def replayed(ctx: AdviceContext, name: str) -> Replayed | None:
    """The saving of what-if ``name`` on the job, or ``None`` when it was not replayed."""
    w = results(ctx)
    if w is None:
        return None
    pct = w.savings_pct(name)
    if pct is None:
        return None
    if ctx.reports and all(r.window_us < MIN_WINDOW_US for r in ctx.reports):
        # A few kernels say nothing about a job: no saving from a window under 1 ms.
        pct = 0.0
    measured = w.model.measured_step_us
    after = measured * (1.0 - pct / 100.0)
    err = w.model_error_pct
    # The model's error is said once for the report (its what-if finding); here only when
    # it makes this estimate rough.
    rough = err if abs(err) > ROUGH_MODEL_ERROR_PCT else None
    floor: float | None = None
    if name in ("pinned_copies", "hidden_copies"):
        busiest = w.model.copy_floor_us()
        if busiest > 0 and after <= busiest * 1.001:
            floor = busiest  # the copies' own time bounds the step from below
    line = said("replay.saved", whatif=name, step_us=measured, after_us=after, pct=pct, rough_error_pct=rough,
                copy_floor_us=floor)
    return Replayed(name, pct, measured, after, line)


def best(ctx: AdviceContext, names: Sequence[str]) -> Replayed | None:
    """The first of ``names`` that was replayed."""
    for n in names:
        got = replayed(ctx, n)
        if got is not None:
            return got
    return None


__all__ = ["ROUGH_MODEL_ERROR_PCT", "Replayed", "best", "replayed", "results"]

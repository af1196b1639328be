"""Savings from the job's what-if replays (:mod:`gpuprof.job.whatifs`), for the advisors.

Every advisor names the what-if its fix corresponds to; the estimate is what that
what-if's replay saves on the job's step (its slowest rank's), and the evidence says so in
one line with the replayed step times and the model's error. Where no replay exists (no
launches in the trace, an op-level timeline without the events a what-if removes), the
advisor's closed-form estimate stands and the recommendation has no ``whatif``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuprof.advice.context import AdviceContext
from gpuprof.advice.savings import MIN_WINDOW_US
from gpuprof.job.whatifs import WHATIFS, WhatIfResults
from gpuprof.util import phrases
from gpuprof.util.phrases import duration

# Above this model error (percent of the measured step) estimates are called rough.
ROUGH_MODEL_ERROR_PCT = 5.0


def results(ctx: AdviceContext) -> WhatIfResults | None:
    w = ctx.whatifs
    return w if isinstance(w, WhatIfResults) else None


def _ms(us: float) -> str:
    return duration(us)  # the one duration formatter of every report (gpuprof.util.phrases)


@dataclass(frozen=True)
class Replayed:
    """A what-if's saving and the evidence line that states it."""

    name: str
    pct: float
    line: str


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
    rough = (
        f", rough: the model misses the measured step by {phrases.signed_pct(err)}" if abs(err) > ROUGH_MODEL_ERROR_PCT else ""
    )
    how = (
        "a model of the pipeline schedule with the measured stage times"
        if name == "double_microbatches"
        else f"a replay of the job's dependency graph{rough}"
    )
    if name in ("pinned_copies", "hidden_copies"):
        floor = w.model.copy_floor_us()
        if floor > 0 and after <= floor * 1.001:
            how += f"; no shorter than the {_ms(floor)} per step its busiest copy direction keeps the copy engine busy"
    line = (
        f"The job replayed with this fix ({WHATIFS[name]}): its step {_ms(measured)} -> {_ms(after)}, "
        f"{pct:.1f}% saved ({how})."
    )
    return Replayed(name, pct, line)


def best(ctx: AdviceContext, names: Sequence[str]) -> Replayed | None:
    """The first of ``names`` that was replayed."""
    for n in names:
        got = replayed(ctx, n)
        if got is not None:
            return got
    return None


__all__ = ["ROUGH_MODEL_ERROR_PCT", "Replayed", "best", "replayed", "results"]

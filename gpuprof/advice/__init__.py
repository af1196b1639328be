"""Recommendations: measured findings turned into ranked, actionable advice.

Each advisor is a function ``(AdviceContext) -> list[Recommendation]`` registered in
:data:`ADVISORS` (in the order modules are listed in :data:`_ADVISOR_MODULES`). Advisors are
pure. :func:`advise` runs them all and ranks the result by estimated savings.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from gpuprof.analysis.summary import RankSummary
from gpuprof.model.report import RankReport, Recommendation, sort_recommendations


@dataclass(frozen=True)
class AdviceContext:
    """Everything an advisor may look at. ``cross`` is the job-level findings dict of the
    cross-rank analysis; ``samples`` the NVML sample findings of a ``gpuprof run`` session
    (``None`` when the input has no samples)."""

    summaries: Sequence[RankSummary]
    reports: Sequence[RankReport]
    cross: Mapping[str, Any] = field(default_factory=dict)
    samples: Any = None


Advisor = Callable[[AdviceContext], list[Recommendation]]
ADVISORS: list[Advisor] = []

# Recommendations estimated to save less than this share of the step are left out.
MIN_SAVINGS_PCT = 0.5


def advisor(fn: Advisor) -> Advisor:
    """Decorator: register an advisor."""
    ADVISORS.append(fn)
    return fn


_ADVISOR_MODULES = (
    "gpuprof.advice.local",
    "gpuprof.advice.distributed",
    "gpuprof.advice.pipeline",
    "gpuprof.advice.samples",
)
_loaded = False


def _load() -> None:
    global _loaded
    if _loaded:
        return
    for name in _ADVISOR_MODULES:
        importlib.import_module(name)
    _loaded = True


def advise(ctx: AdviceContext) -> tuple[Recommendation, ...]:
    _load()
    recs: list[Recommendation] = []
    for fn in ADVISORS:
        recs.extend(fn(ctx))
    # One recommendation per id: keep the one with the larger estimate.
    best: dict[str, Recommendation] = {}
    for r in recs:
        if r.id not in best or r.estimated_savings_pct > best[r.id].estimated_savings_pct:
            best[r.id] = r
    # A change that would not shorten the job's step is not worth a reader's attention: the
    # measured loss still shows in the per-rank table, but it is not advertised as a fix.
    kept = [r for r in best.values() if r.estimated_savings_pct >= MIN_SAVINGS_PCT]
    return sort_recommendations(kept)

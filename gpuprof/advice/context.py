"""What every advisor shares: the context it reads, the registry it joins, what each
recommendation needs from the trace, and how a set of ranks is written.

The advisors (``local``, ``distributed``, ``pipeline``, ``samples``) and the final passes
(``general``, ``wording``) import this module; :mod:`gpuprof.advice` runs them. An advisor
is written as a function of the context that returns :class:`~gpuprof.advice.finding.Finding`
records; :func:`advisor` registers it worded: called, it gives the recommendations the
phrasebook (:mod:`gpuprof.advice.phrasebook`) writes from them (its ``find`` gives the
findings themselves).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, overload

from gpuprof.accounting.evidence import Evidence
from gpuprof.accounting.summary import RankSummary
from gpuprof.advice.finding import Finding
from gpuprof.advice.phrasebook import Unit, recommendation
from gpuprof.job.findings import JobFindings
from gpuprof.model import causes
from gpuprof.model.causes import REGISTRY as CAUSE_REGISTRY
from gpuprof.model.report import Cause, RankReport, Recommendation
from gpuprof.util.phrases import spans as rank_spans

if TYPE_CHECKING:
    from gpuprof.accounting.samples import SampleFindings
    from gpuprof.job.whatif_results import WhatIfResults


@dataclass(frozen=True)
class AdviceContext:
    """Everything an advisor may look at. ``cross`` is what the cross-rank analysis found
    (:class:`gpuprof.job.findings.JobFindings`); ``samples`` the NVML sample findings of a
    ``gpuprof run`` session (``None`` when the input has no samples); ``whatifs`` the job's
    what-if replays (``None`` when none could be built)."""

    summaries: Sequence[RankSummary]
    reports: Sequence[RankReport]
    cross: JobFindings = field(default_factory=JobFindings)
    samples: SampleFindings | None = None
    whatifs: WhatIfResults | None = None


def unit_of(ctx: AdviceContext) -> Unit:
    """What the recommendations measure in: a step, or the analysis window when no rank
    with a window has a step (no step markers)."""
    no_steps = bool(ctx.reports) and not any(r.steps > 0 for r in ctx.reports if r.window_us > 0)
    return Unit.WINDOW if no_steps else Unit.STEP


Advisor = Callable[[AdviceContext], list[Recommendation]]
# What an advisor is written as: the findings it measures, never words.
Finder = Callable[[AdviceContext], Sequence[Finding]]


class Worded:
    """An advisor: its finding function ``find``, worded by the phrasebook when called."""

    def __init__(self, find: Finder) -> None:
        self.find = find
        functools.update_wrapper(self, find)

    def __call__(self, ctx: AdviceContext) -> list[Recommendation]:
        unit = unit_of(ctx)
        return [recommendation(f, unit) for f in self.find(ctx)]


ADVISORS: list[Advisor] = []
# What every recommendation of an advisor needs (``@advisor(needs=...)``).
_ADVISOR_NEEDS: dict[Advisor, frozenset[Evidence]] = {}

# Recommendations estimated to save less than this share of the step are left out.
MIN_SAVINGS_PCT = 0.5

_HOST_SIDE = frozenset({Evidence.HOST_EVENTS})
_LAUNCH_GAPS = frozenset({Evidence.HOST_EVENTS, Evidence.LAUNCH_CALLS, Evidence.ALL_LAUNCHES})
_EXPOSURE = frozenset({Evidence.COMPUTE_KERNELS, Evidence.ALL_KERNELS})

# What each recommendation needs from the trace, by id.
NEEDS: Mapping[str, frozenset[Evidence]] = {
    # collectives' exposure, and what a late rank costs, depend on the compute beside them
    "comm-overlap": _EXPOSURE,
    "exposed-communication": _EXPOSURE,
    "communication-slow-collectives": _EXPOSURE,
    "straggler-rank": _EXPOSURE,
    "straggler-rotating": _EXPOSURE,
    "straggler-absent-rank": _EXPOSURE,
    "straggler-link": _EXPOSURE,
    "straggler-collective": _EXPOSURE,
    # a slow host is told from its host events
    "straggler-host": _EXPOSURE | _HOST_SIDE,
    "pipeline-bubble": _EXPOSURE,
    "pipeline-imbalance": _EXPOSURE,
    "memory-exposed-copies": _EXPOSURE,
    "memory-pageable-copies": _EXPOSURE,
    # the host ops the advice names
    "dataloader-starvation": _HOST_SIDE,
    "host-ddp-buffer-sync": _HOST_SIDE,
    # sync and allocation calls themselves
    "sync-host-blocking": frozenset({Evidence.HOST_EVENTS, Evidence.RUNTIME_CALLS}),
    "memory-allocator": frozenset({Evidence.HOST_EVENTS, Evidence.RUNTIME_CALLS}),
    # gaps between kernels told apart by when each kernel was launched (an export that
    # kept only the launch calls still shows that, and the ops the host was in)
    "host-overhead": _LAUNCH_GAPS,
    "host-launch-bound": _LAUNCH_GAPS,
    # idle time no rule explains only means something beside the compute it interrupts
    "other-general": frozenset({Evidence.COMPUTE_KERNELS}),
}
# ... else by category (a new advisor's recommendation needs at least this): each cause's
# declaration says it (gpuprof.model.causes).
CATEGORY_NEEDS: Mapping[Cause, frozenset[Evidence]] = {
    c: frozenset(Evidence(e) for e in s.needs) for c, s in CAUSE_REGISTRY.items()
}
# Causes whose recommendations concern the whole job (time lost between ranks).
_JOB_LEVEL = causes.where(between_ranks=True)


@overload
def advisor(fn: Finder) -> Worded: ...
@overload
def advisor(*, needs: Iterable[Evidence]) -> Callable[[Finder], Worded]: ...


def advisor(fn: Finder | None = None, *, needs: Iterable[Evidence] = ()) -> Any:
    """Decorator: register a finding function as an advisor, worded (``@advisor``, or
    ``@advisor(needs=...)`` to declare what every recommendation it makes needs from the
    trace)."""

    def register(f: Finder) -> Worded:
        worded = Worded(f)
        ADVISORS.append(worded)
        wanted = frozenset(needs)
        if wanted:
            _ADVISOR_NEEDS[worded] = wanted
        return worded

    return register(fn) if fn is not None else register


__all__ = [
    "ADVISORS",
    "CATEGORY_NEEDS",
    "MIN_SAVINGS_PCT",
    "NEEDS",
    "AdviceContext",
    "Advisor",
    "Finder",
    "Worded",
    "advisor",
    "rank_spans",
    "unit_of",
]

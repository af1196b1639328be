"""Local attribution rules: each claims, for one cause, the intervals it has evidence for.

A rule is a function ``(RuleContext) -> Intervals`` (see :mod:`.context`); :data:`RULES`
lists them with the cause they claim for. Claims may overlap each other and compute time:
:func:`gpuprof.accounting.attribution.attribute` keeps only lost time and gives each lost
microsecond to the first cause in its precedence
(pipeline_bubble > straggler > communication > memory > dataloader > sync > host > other).
The order of :data:`RULES` is that precedence too, so reading the list top to bottom is
reading who wins.

| rule | cause | claims |
|---|---|---|
| ``exposed_communication`` | communication | collective / P2P kernels (exposed part) |
| ``exposed_copies`` | memory | copies and memsets on the device (exposed part) |
| ``allocator`` | memory | host in ``cudaMalloc``/``cudaFree``/... while the device waits for it; gaps that began inside a synchronizing free |
| ``dataloader`` | dataloader | host in DataLoader ``__next__`` while the device waits for it |
| ``input_timers`` | dataloader | op-level timelines: the worker's own data-loading ops |
| ``sync`` | sync | host in a sync call while the device waits for it; gaps that began inside one (drain) |
| ``late_launch`` | host | every remaining part of a gap where the next kernel was launched late |
| ``blocked_host`` | host | queued gaps while a launching thread sat >= 1 ms in one host op (not a step or ``## phase ##`` marker) issuing nothing |

What no rule claims is ``other``: chiefly short gaps where the next kernel was already
queued (waiting on another stream, device-side scheduling) while the host kept issuing
work, and gaps whose launch is unknown.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from gpuprof.accounting.rules import device, hostside
from gpuprof.accounting.rules.context import RuleContext, build_context
from gpuprof.model import intervals as iv
from gpuprof.model.intervals import Intervals
from gpuprof.model.report import Cause

Rule = Callable[[RuleContext], Intervals]


@dataclass(frozen=True)
class LocalRule:
    name: str
    cause: Cause
    claim: Rule


RULES: tuple[LocalRule, ...] = (
    LocalRule("exposed_communication", Cause.COMMUNICATION, device.exposed_communication),
    LocalRule("exposed_copies", Cause.MEMORY, device.exposed_copies),
    LocalRule("allocator", Cause.MEMORY, hostside.allocator),
    LocalRule("dataloader", Cause.DATALOADER, hostside.dataloader),
    LocalRule("input_timers", Cause.DATALOADER, device.input_timers),
    LocalRule("sync", Cause.SYNC, hostside.sync),
    LocalRule("late_launch", Cause.HOST, hostside.late_launch),
    LocalRule("blocked_host", Cause.HOST, hostside.blocked_host),
)


def claims_by_rule(ctx: RuleContext, rules: tuple[LocalRule, ...] = RULES) -> dict[str, Intervals]:
    """Each rule's own claim, clipped to the window and normalized (keyed by rule name)."""
    return {r.name: iv.normalize(ctx.clip(r.claim(ctx))) for r in rules}


def claims_by_cause(
    by_rule: Mapping[str, Intervals], rules: tuple[LocalRule, ...] = RULES
) -> dict[Cause, Intervals]:
    """Union the rules' claims per cause (causes nobody claimed are left out)."""
    parts: dict[Cause, list[Intervals]] = {}
    for rule in rules:
        got = by_rule.get(rule.name)
        if got is not None and got[0].size:
            parts.setdefault(rule.cause, []).append(got)
    return {
        cause: iv.union(np.concatenate([p[0] for p in ps]), np.concatenate([p[1] for p in ps]))
        for cause, ps in parts.items()
    }


def run_rules(ctx: RuleContext, rules: tuple[LocalRule, ...] = RULES) -> dict[Cause, Intervals]:
    """Every rule's claim, unioned per cause and clipped to the window (normalized sets)."""
    return claims_by_cause(claims_by_rule(ctx, rules), rules)


__all__ = ["RULES", "LocalRule", "Rule", "RuleContext", "build_context", "claims_by_rule", "run_rules"]

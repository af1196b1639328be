"""Rules that claim device intervals themselves: exposed communication, copies and memsets.

Each claims the device intervals of its kind whole; the attribution keeps only the part no
compute kernel overlaps (the *exposed* part), which is the time the device spent on nothing
but that transfer.
"""

from __future__ import annotations

from gpuprof.accounting.rules.context import RuleContext
from gpuprof.model.intervals import Intervals
from gpuprof.model.timeline import Category


def exposed_communication(ctx: RuleContext) -> Intervals:
    """Collective and point-to-point kernels. The part spent waiting for a late rank is
    claimed by the cross-rank analysis as ``straggler`` and wins by precedence."""
    return ctx.device_rows(Category.COLLECTIVE, Category.P2P)


def exposed_copies(ctx: RuleContext) -> Intervals:
    """Host<->device and device<->device copies and memsets (memory movement)."""
    return ctx.device_rows(Category.COPY, Category.MEMSET)


def input_timers(ctx: RuleContext) -> Intervals:
    """Op-level timelines: a worker's own data-loading ops (``batch-generator``, ...)."""
    return ctx.device_rows(Category.DATALOAD)

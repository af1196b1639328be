"""Running a scenario's plan once: one :class:`RankSim` per rank, with or without traces.

:func:`simulate_job` is what ``generate`` runs for the written job and what every what-if
re-runs with its fix (writing nothing). It owns no files: the caller hands it one writer
per rank (a :class:`KinetoWriter`, or a :class:`NullWriter` when no Kineto trace is
wanted) and closes or aborts them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpuprof.simulate.engine import Job, run_job
from gpuprof.simulate.kineto import TraceWriter
from gpuprof.simulate.plan import Plan
from gpuprof.simulate.platform import Platform
from gpuprof.simulate.rank import RankSim


def host_pid(rank: int) -> int:
    return 4_000_000 + 1000 * rank


def null_writer(rank: int) -> TraceWriter:
    from gpuprof.simulate.kineto import NullWriter

    return NullWriter(pid=host_pid(rank), device=rank % 8)


def simulate_job(
    plan: Plan,
    seed: int,
    *,
    fixes: frozenset[str] = frozenset(),
    platform: Platform,
    writer_for: Callable[[int], TraceWriter] = null_writer,
    timers: bool = False,
    writers: list[TraceWriter] | None = None,
) -> list[RankSim]:
    """Run ``plan`` with ``fixes`` and return its ranks (windows, steps, ground truth).

    ``writers``, when given, receives each writer as it is made, so that the caller can
    abort them if the simulation fails. ``timers`` keeps each rank's Megatron-style timer
    ops (``RankSim.timers``).
    """
    job = Job(world_size=plan.world_size)
    sims: list[RankSim] = []
    for r in range(plan.world_size):
        w = writer_for(r)
        if writers is not None:
            writers.append(w)
        sim = RankSim(job, r, w, seed, plan.timing, fixes=fixes, platform=platform)
        sim.wait_cause = plan.wait_cause
        if timers:
            sim.timers = []
        sims.append(sim)
    run_job(sims, [plan.program] * plan.world_size)
    if plan.post is not None:
        plan.post(sims)
    return sims


def job_step_us(sims: Sequence[RankSim]) -> float:
    """The job's step time: the slowest rank's mean step over its profiled steps
    (``window / steps``), as gpuprof's report measures it, except that the window ends no
    earlier than the rank's last device work: a job whose host runs ahead of its device
    (no sync at the end of a step) is done when its device is. When every step ends with
    the device drained (an ``.item()`` at the end), this is exactly the report's measure."""
    out = 0.0
    for s in sims:
        if s.window is not None and s.steps:
            end = max([s.window[1], *s.stream_free.values()])
            out = max(out, (end - s.window[0]) / len(s.steps))
    return out

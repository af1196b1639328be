"""What a scenario hands the simulator: ranks, the program each runs, what it is built to show."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuprof.model.report import Cause
from gpuprof.simulate.engine import Program, SimulationError, Timing
from gpuprof.simulate.rank import RankSim


@dataclass(frozen=True)
class Plan:
    """A scenario ready to run: ``expected`` holds what it is built to show (``intended``
    top cause or ``None``, ``culprit_ranks``, and for pipelines the theoretical bubble),
    copied into ``ground_truth.json``.

    The programs read ``RankSim.fixes`` for the job-level what-if fixes they implement;
    ``whatifs`` lists those that change this job (see :mod:`gpuprof.simulate.whatif`) and
    ``intended_whatifs`` the fixes it is built to show."""

    world_size: int
    program: Callable[[RankSim], Program]
    expected: Mapping[str, Any] = field(default_factory=dict)
    timing: Timing = field(default_factory=Timing)
    wait_cause: Cause = Cause.STRAGGLER  # cause of waiting inside a collective for a late rank
    session: bool = False  # write a gpuprof session folder with NVML-like samples
    # process groups of a rank for distributedInfo.pg_config (None: only the default group)
    pg_config: Callable[[int], list[dict[str, Any]]] | None = None
    # job-level ground truth added once every rank has run (e.g. pipeline drain)
    post: Callable[[Sequence[RankSim]], None] | None = None
    whatifs: tuple[str, ...] = ()  # job-level fixes (fixes.JOB_FIXES) that change this job
    intended_whatifs: tuple[str, ...] = ()
    # per job-level fix, the ranks whose compute it makes faster (where the fix applies)
    whatif_culprits: Mapping[str, Sequence[int]] = field(default_factory=dict)
    platform: str | None = None  # the platform the scenario is about (None: the caller's choice)
    # Megatron-style parallel sizes (pp_size, dp_size, tp_size) when the programs record
    # timer ops, so that the op-level timeline layout can be written
    parallel: Mapping[str, int] | None = None


def check(cond: bool, message: str) -> None:
    """Reject knobs that make no sense, as one line for the user."""
    if not cond:
        raise SimulationError(message)

"""The event loop of a simulated training job: ranks' programs, run until they meet.

Each rank runs a *program*: a generator that calls :class:`~gpuprof.simulate.rank.RankSim`
methods for what the host does (operators, kernel launches, copies, synchronizations,
waiting for data) and ``yield from``s the calls that need other ranks (collectives,
point-to-point receives), which yield a :class:`Wait` on a rendezvous key. :func:`run_job`
interleaves the programs: a rank runs until it waits on a key the :class:`Job` has not
resolved, and resumes once the last member has posted to it. Simulated time is kept per
rank (:mod:`gpuprof.simulate.host`) and is never coupled to the order in which the loop
runs them; the rendezvous carries the times (a collective starts when its last member
arrives; point-to-point data is buffered: a receive ends when the sender's data is there).

Also here, for every part of the simulator: the streams each rank has, the host-side
costs (:class:`Timing`) and the error a scenario that cannot run raises.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from gpuprof.errors import GpuprofError

COMPUTE_STREAM = 7
COPY_STREAM = 13
NCCL_STREAM = 20
P2P_STREAM = 24

Program = Generator["Wait", None, None]


class SimulationError(GpuprofError):
    """The scenario cannot be simulated (inconsistent knobs or a schedule that deadlocks)."""


@dataclass(frozen=True)
class Wait:
    """Yielded by a program: resume me when ``key`` is resolved by the job."""

    key: tuple[Any, ...]


@dataclass(frozen=True)
class Timing:
    """Host-side costs, microseconds; jittered per call by the rank's random generator."""

    launch_us: float = 5.0  # cudaLaunchKernel call on the host
    queue_us: float = 3.0  # from the end of the launch call to the earliest device start
    op_us: float = 9.0  # framework + Python overhead of one operator around its launches
    jitter: float = 0.03  # relative standard deviation of every duration
    # Noise like real jobs' (issue 30): every duration of a rank's step is scaled by
    # exp(N(0, step_cv)), drawn per (seed, rank, step), and every duration of the run by
    # exp(N(0, run_cv)), drawn per seed (the same for every rank: the run's machine).
    # 0 draws nothing, so traces without noise stay exactly as they were.
    step_cv: float = 0.0
    run_cv: float = 0.0


@dataclass
class Job:
    """Shared state of all ranks: rendezvous of collectives and point-to-point data."""

    world_size: int
    arrivals: dict[tuple[Any, ...], dict[int, float]] = field(default_factory=dict)
    resolved: dict[tuple[Any, ...], tuple[float, float]] = field(default_factory=dict)
    woken: list[tuple[Any, ...]] = field(default_factory=list)
    # times ranks report for job-level ground truth (e.g. when each stage's pipeline work ended)
    marks: dict[tuple[Any, ...], dict[int, float]] = field(default_factory=dict)

    def post(
        self, key: tuple[Any, ...], rank: int, arrival_us: float, group_size: int, transfer_us: float
    ) -> None:
        got = self.arrivals.setdefault(key, {})
        if rank in got:
            raise SimulationError(f"rank {rank} posted {key} twice")
        got[rank] = arrival_us
        if len(got) == group_size:
            start = max(got.values())
            self.resolved[key] = (start, start + transfer_us)
            del self.arrivals[key]
            self.woken.append(key)

    def post_data(self, key: tuple[Any, ...], ready_us: float) -> None:
        self.resolved[key] = (ready_us, ready_us)
        self.woken.append(key)


class Rank(Protocol):
    """What the loop needs of a rank (a :class:`~gpuprof.simulate.rank.RankSim`)."""

    job: Job

    def finish(self) -> None: ...


R = TypeVar("R", bound=Rank)


def run_job(sims: Sequence[R], programs: Sequence[Callable[[R], Program]]) -> None:
    """Run one program per rank to completion, resuming ranks as rendezvous resolve."""
    job = sims[0].job
    gens = [p(s) for p, s in zip(programs, sims)]
    blocked: dict[tuple[Any, ...], list[int]] = {}
    ready = list(range(len(gens)))
    done = 0
    while ready:
        r = ready.pop()
        gen = gens[r]
        while True:
            try:
                w = next(gen)
            except StopIteration:
                done += 1
                break
            if w.key in job.resolved:
                continue
            blocked.setdefault(w.key, []).append(r)
            break
        for key in job.woken:
            ready.extend(blocked.pop(key, []))
        job.woken.clear()
    if done != len(gens):
        waiting = sorted(k for k in blocked)[:3]
        raise SimulationError(f"the simulated schedule deadlocks: ranks wait on {waiting}")
    for s in sims:
        s.finish()

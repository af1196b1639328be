"""Replaying a job's dependency graph, as measured or with one cause removed.

The graph of each rank comes from :mod:`gpuprof.accounting.graph`; what couples ranks is a
list of *groups*: a collective's calls on its members, a point-to-point send with its
receive. A :class:`WhatIf` says what changes: host time deleted per rank, blocking calls
that stop blocking, device durations scaled (compute of a slow rank, collective transfers).
The replay then recomputes every event's start and end, in the order of the measured
times (every edge of the graph points forward in measured time, so that order is a
topological one), and returns each rank's replayed window and steps.

One rank, one pass
------------------
*Host time compresses.* Deleting host intervals ``X`` moves a launch at host time ``t`` to
``t - |X ∩ [0, t)|``; a kept blocking call that returns at ``s1`` returns in the replay at
``max(its shifted start, the replayed end of the device work it waited for)`` plus the part
of the call that was not waiting, and moves every later host time with it (a *shift*,
looked up by the original host time at which work was issued).

*Device work replays in stream order.* Between events that need something from outside
their stream, a stream is a scan, ``end_i = max(r_i + d_i, end_{i-1} + g_i + d_i)``, done
with a cumulative maximum (``r``: the release by the host, ``g``: the fixed gap). An event
with a dependency on another stream, or a member of a group, is computed on its own once
what it needs is known.

Groups across ranks
-------------------
A member *arrives* when its stream lets it start. A collective's transfer starts once the
last member has arrived: each member that was measured ending after the last arrival ends,
in the replay, at the replayed last arrival (on the common clock, see the clock offsets of
:mod:`gpuprof.job.collectives`) plus its measured transfer (its end minus the last
arrival), scaled by the what-if's ``transfer_scale``. A member that ended before the last
arrival did not wait for the others (a buffered send): it ends at its own arrival plus its
duration. Groups are resolved in order of their last measured arrival, kept blocking calls
in order of their measured end: each is resolved after every member rank has replayed all
the work issued before it.

With nothing changed the replay reproduces the measurement; where it does not (clock
skew the alignment leaves, a member that cannot be reached in order), the difference is
the model's error, reported beside every estimate.

Compiled once, run per what-if
------------------------------
Which events are computed together, in which order, and which member or blocking call
waits for which event depends only on the measured times -- the what-if changes durations
and host time, never the order (every decision compares measured times: what was issued
before a blocking call's measured end, which group comes first, which member was reached).
So the order is worked out once per job and per set of kept blocking calls, as a
*program* of steps (:class:`~gpuprof.job.replay_compile.Program`: a scan of a run of
events, one event, a blocking call, a group), and each what-if runs the program with its
own durations and host time.
Running a program does the same arithmetic, in the same order, as deciding and computing
together did: the results are the same to the last bit.

Modules
-------
:func:`replay_job` is the entry point. What a replay takes and gives (groups, the change,
the replayed ranks) is in :mod:`gpuprof.job.replay_types`; one rank's part that every
replay shares (its host-time map, kept blocking calls, static arrays) in
:mod:`gpuprof.job.replay_rank`; the plan and its compiled programs in
:mod:`gpuprof.job.replay_compile`; running a program for one what-if in
:mod:`gpuprof.job.replay_run`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpuprof.accounting.graph import RankGraph
from gpuprof.job.replay_compile import ReplayPlan
from gpuprof.job.replay_run import run_program
from gpuprof.job.replay_types import Group, JobReplay, RankReplay, WhatIf

# The default change: nothing (one instance, as a default argument is evaluated once).
UNCHANGED = WhatIf()


def replay_job(
    graphs: Sequence[RankGraph],
    groups: Sequence[Group] = (),
    offsets_us: Mapping[int, float] | None = None,
    whatif: WhatIf = UNCHANGED,
    plan: ReplayPlan | None = None,
) -> JobReplay:
    """Replay every rank's graph, coupled by ``groups`` (see the module docstring).

    ``offsets_us[rank]`` is subtracted from a rank's own clock to get the common clock.
    ``plan``: the :class:`ReplayPlan` of these graphs, groups and offsets, when the caller
    replays the same job several times.
    """
    if plan is None:
        plan = ReplayPlan(graphs, groups, offsets_us)
    return run_program(plan, plan.program(whatif.unblock), whatif)


__all__ = ["Group", "JobReplay", "RankReplay", "ReplayPlan", "WhatIf", "replay_job"]

"""The shortest step a fix that keeps the compute can give: what no what-if saves past.

A what-if that removes idle time (host work, syncs, allocator calls, copies, exposed
collectives, late starts) leaves every compute kernel as long as it was measured. The
job's step after it is then no shorter, on any rank, than

* the rank's compute per step: the union of its compute kernels, which is time the GPU is
  busy computing (kernels made to run side by side share the GPU's SMs; the replay, which
  lets independent streams overlap freely, could otherwise shorten it), and
* the transfers of its busiest communication stream per step, which a fix of something
  else leaves as they are (a transfer is taken as the shortest duration of the call among
  its members, the last to arrive waiting for no one; a call whose peers are not in the
  input counts whole, as the replay counts it); halved with twice the bandwidth, and none
  with the collectives overlapped (that what-if is defined as their transfer costing
  nothing, hidden behind compute: an upper bound, and one that needs compute to hide
  behind, see :meth:`gpuprof.job.whatifs.JobModel.applicable`).

So a fix's saving is at most the idle time of the rank that sets the step: "free host
93.6 %" on a trace whose GPU computes 99.7 % of the time cannot be. The what-ifs that
change compute durations (the work evened out, more microbatches, the no-variation
bound) have no such floor.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from gpuprof.accounting.graph import EV_COLLECTIVE, EV_COMPUTE, RankGraph
from gpuprof.job import whatif_registry as registry
from gpuprof.job.replay_types import Group
from gpuprof.model import intervals as iv


def changes_compute() -> frozenset[str]:
    """The what-ifs the floor does not bound: those that change compute durations, or the
    transfers of one path (a slow link or group at its peers' speed) -- the declarations
    that do not keep the compute (:mod:`gpuprof.job.whatif_registry`)."""
    return registry.names_where(keeps_compute=False)


# The built-in ones (a what-if registered later is read live by step_floor_us).
CHANGES_COMPUTE: frozenset[str] = changes_compute()


def transfer_us(graphs: Sequence[RankGraph], groups: Sequence[Group]) -> dict[int, npt.NDArray[np.float64]]:
    """Per rank, each collective event's transfer time (0 for other events), microseconds."""
    by_rank = {g.rank: g for g in graphs}
    out = {g.rank: np.where(g.kind == EV_COLLECTIVE, g.dur, 0.0).astype(np.float64) for g in graphs}
    for grp in groups:
        if grp.kind != "collective":
            continue
        members = [(r, i) for r, i in grp.members if r in by_rank and 0 <= i < by_rank[r].n_events]
        if not members:
            continue
        shortest = min(float(by_rank[r].dur[i]) for r, i in members)
        for r, i in members:
            if by_rank[r].kind[i] == EV_COLLECTIVE:
                out[r][i] = shortest
    return out


def step_floor_us(
    graphs: Sequence[RankGraph],
    transfers: Mapping[int, npt.NDArray[np.float64]],
    steps_of: Mapping[int, int],
    names: Iterable[str],
) -> float:
    """The shortest job step (µs) the what-ifs ``names`` together can give; 0 when one of
    them changes compute durations (no floor)."""
    names = set(names)
    if names & changes_compute():
        return 0.0
    factor = 0.0 if "overlap_collectives" in names else 0.5 if "double_bandwidth" in names else 1.0
    best = 0.0
    for g in graphs:
        if g.n_events == 0:
            continue
        steps = max(int(steps_of.get(g.rank, 1)), 1)
        comp = g.kind == EV_COMPUTE
        busy = iv.total(iv.union(g.start[comp], g.start[comp] + g.dur[comp])) if comp.any() else 0.0
        moved = transfers.get(g.rank)
        if moved is not None and moved.size == g.n_events:
            for k in range(g.n_streams):
                a, b = int(g.bounds[k]), int(g.bounds[k + 1])
                busy = max(busy, factor * float(moved[a:b].sum()))
        best = max(best, busy / steps)
    return best


__all__ = ["CHANGES_COMPUTE", "changes_compute", "step_floor_us", "transfer_us"]

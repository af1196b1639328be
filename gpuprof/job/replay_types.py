"""What a replay of the job takes and gives (see :mod:`gpuprof.job.replay`).

A :class:`Group` couples events of several ranks (a collective's calls, a send with its
receive, ops behind a barrier); a :class:`WhatIf` is the change to replay; a
:class:`JobReplay` holds every rank's replayed window and steps (:class:`RankReplay`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpuprof.accounting.graph import EV_COLLECTIVE, EV_P2P
from gpuprof.model.intervals import Intervals

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Group:
    """One collective call (or a send with its receive) across ranks: the members'
    ``(rank, event index in that rank's graph)``."""

    members: tuple[tuple[int, int], ...]
    # ``collective``: members arrive when their stream lets them start, and the transfer
    # follows the last arrival. ``barrier``: op-level timers started behind a barrier, so
    # the members' ops start together once the last member is ready (its stream's previous
    # work done; the idle time before the op is the wait) and each then lasts as measured.
    # ``after``: the first member (a receive that did not wait: its data had arrived) starts
    # no earlier than the second (its buffered send) ends; the send waits for nothing.
    # ``p2p``: op-level timers of a receive (first member) and its send (second) that start
    # together: as a barrier, and the receive never starts before its send (its data cannot
    # arrive earlier), while the send waits for the receive only if it measurably did.
    kind: str = "collective"


@dataclass(frozen=True)
class WhatIf:
    """A change to replay. ``removed[rank]``: host intervals deleted (relative to the
    rank's window start); ``unblock``: tags of blocking calls that no longer block (see
    :data:`gpuprof.accounting.graph.BLOCK_SYNC`), which are deleted from host time too when
    listed in ``removed``; ``scale[rank]``: per-event duration factors of that rank's
    graph; ``transfer_scale`` / ``p2p_scale``: factors on the transfer part of collectives
    and of point-to-point transfers; ``no_delays``: op-level timelines only, the launch
    delays and latencies the model keeps as measured are removed too (the published
    what-if simulator's "ideal" runs without them)."""

    name: str = "baseline"
    removed: Mapping[int, Intervals] = field(default_factory=dict)
    unblock: frozenset[int] = frozenset()
    scale: Mapping[int, FloatArray] = field(default_factory=dict)
    transfer_scale: float = 1.0
    p2p_scale: float = 1.0
    no_delays: bool = False

    def comm_scale(self, kind: int) -> float:
        """The factor on the transfer of a communication event of graph kind ``kind``."""
        if kind == EV_COLLECTIVE:
            return self.transfer_scale
        if kind == EV_P2P:
            return self.p2p_scale
        return 1.0


@dataclass(frozen=True)
class RankReplay:
    """One rank replayed: its window length and step times, microseconds."""

    window_us: float
    step_times_us: tuple[float, ...]

    @property
    def step_us(self) -> float:
        """Mean step time (the whole window without steps)."""
        return float(np.mean(self.step_times_us)) if self.step_times_us else self.window_us


@dataclass(frozen=True)
class JobReplay:
    """Every rank replayed; ``step_us`` is the job's step time (the slowest rank's mean
    step); ``unreached`` counts group members the replay could not reach in order (kept at
    their measured times)."""

    ranks: Mapping[int, RankReplay]
    unreached: int = 0

    @property
    def step_us(self) -> float:
        return max((r.step_us for r in self.ranks.values()), default=0.0)


__all__ = ["Group", "JobReplay", "RankReplay", "WhatIf"]

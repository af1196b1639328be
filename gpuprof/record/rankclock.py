"""The rank that is consistently slowest, from the step clock alone (no trace).

In synchronous data-parallel training every rank ends its optimizer step at about the same
moment (they all leave the gradient all-reduce together), so step times cannot tell which
rank the others wait for. What differs is how long each rank takes from the end of one step
to the start of its next backward pass (loading the batch, the forward pass): that part runs
before any collective, so a rank that is slower there is the one the others wait for inside
backward. The torch hooks time it (``backward_unix_s`` of each step record: the first
``torch.autograd.backward`` of the step).

Definition (the live line and the report use it): over the last :data:`WINDOW_STEPS` steps
that every rank recorded, the rank with the longest time to backward in each step is that
step's slowest rank. A rank is named **consistently slowest** when it is the slowest in at
least :data:`MIN_SHARE_PCT` of those steps (and at least :data:`MIN_STEPS` of them), and its
median excess over the median of the other ranks is at least :data:`MIN_EXCESS_PCT` of the
median step time (and at least :data:`MIN_EXCESS_S`). Pure: columns in, a
:class:`SlowRank` or ``None`` out.

What it cannot see: a rank slower inside backward itself (its own backward compute), and on
GPUs a host that runs ahead of its device (the time to backward is the host's; where the host
waits for the device every step, e.g. on ``.item()``, it is the device's too).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass

WINDOW_STEPS = 100
MIN_STEPS = 10
MIN_SHARE_PCT = 75.0
MIN_EXCESS_PCT = 5.0
MIN_EXCESS_S = 0.0005


@dataclass(frozen=True)
class SlowRank:
    """A consistently slowest rank. Times in seconds."""

    rank: int
    excess_s: float  # median over the steps compared of (its time to backward - the others' median)
    slowest_pct: float  # share of the steps compared in which it was the slowest
    steps: int  # steps compared
    first_step: int
    last_step: int
    step_s: float | None = None  # median step time over those steps, when known

    def to_dict(self) -> dict[str, float | int | None]:
        return {"rank": self.rank, "excess_us": round(self.excess_s * 1e6, 3), "slowest_pct": round(self.slowest_pct, 1),
                "steps": self.steps, "first_step": self.first_step, "last_step": self.last_step,
                "step_us": None if self.step_s is None else round(self.step_s * 1e6, 3)}


def slowest_rank(
    to_backward_s: Mapping[int, Mapping[int, float]],
    step_s: Mapping[int, float] | None = None,
    window_steps: int = WINDOW_STEPS,
) -> SlowRank | None:
    """The consistently slowest rank, or ``None``.

    ``to_backward_s``: rank -> step -> seconds from the end of the previous step to the
    step's first backward. ``step_s``: step -> the job's step time, for the excess's share
    (without it, only :data:`MIN_EXCESS_S` applies).
    """
    ranks = sorted(to_backward_s)
    if len(ranks) < 2:
        return None
    common = set(to_backward_s[ranks[0]])
    for r in ranks[1:]:
        common &= set(to_backward_s[r])
    steps = sorted(common)[-window_steps:]
    if len(steps) < MIN_STEPS:
        return None
    wins: dict[int, int] = {}
    for s in steps:
        top = max(ranks, key=lambda r: (to_backward_s[r][s], -r))
        wins[top] = wins.get(top, 0) + 1
    rank, won = max(wins.items(), key=lambda kv: (kv[1], -kv[0]))
    share = 100.0 * won / len(steps)
    others = [o for o in ranks if o != rank]
    median_excess = statistics.median(
        to_backward_s[rank][s] - statistics.median(to_backward_s[o][s] for o in others) for s in steps
    )
    times = [step_s[s] for s in steps if step_s is not None and s in step_s]
    median_step = statistics.median(times) if times else None
    floor = MIN_EXCESS_S
    if median_step is not None:
        floor = max(floor, MIN_EXCESS_PCT / 100.0 * median_step)
    if share < MIN_SHARE_PCT or median_excess < floor:
        return None
    return SlowRank(rank=rank, excess_s=median_excess, slowest_pct=share, steps=len(steps), first_step=steps[0],
                    last_step=steps[-1], step_s=median_step)


__all__ = ["SlowRank", "slowest_rank"]

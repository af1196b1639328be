"""Turn claims into the exact partition of each rank's window.

Every rule (local ones in :mod:`gpuprof.accounting.rules`, job-level ones in the cross-rank
analysis) only *claims* intervals for its cause. This module decides, in one place, who
gets each lost microsecond: the first cause in :data:`PRECEDENCE` whose claim covers it
(each cause's place is in its declaration, :mod:`gpuprof.model.causes`).
What no claim covers is ``other``. Compute time is never lost time, so a claim that
overlaps compute is simply cut down to the lost part.

Precedence, most specific first, and why:

1. ``pipeline_bubble`` -- a stage waiting on a neighbour is a property of the schedule;
   the point-to-point kernels it waits in are not "communication" to tune.
2. ``straggler`` -- inside a collective, the wait for the last rank comes before the
   transfer itself; fixing the slow rank removes it, tuning NCCL would not.
3. ``communication`` -- the remaining exposed collective time.
4. ``memory`` -- allocator calls (``cudaFree`` synchronizes), exposed copies and memsets.
5. ``dataloader`` -- the host is fetching the next batch; any sync it does on the way is
   part of input loading.
6. ``sync`` -- the host blocked on the device and then had to issue work again.
7. ``host`` -- launches arrive late for no more specific reason.
8. ``other`` -- the rest, shown honestly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from gpuprof.model import causes
from gpuprof.model import intervals as iv
from gpuprof.model.intervals import Intervals
from gpuprof.model.report import CAUSES, Cause

PRECEDENCE: tuple[Cause, ...] = causes.precedence()


@dataclass(frozen=True)
class Attribution:
    """Lost time of one rank split by cause, with the intervals behind each share."""

    lost_us: Mapping[Cause, float]
    intervals: Mapping[Cause, Intervals]


def attribute(lost: Intervals, claims: Mapping[Cause, Intervals]) -> Attribution:
    """Give each lost microsecond to the first cause in :data:`PRECEDENCE` that claims it.

    ``lost`` must be the lost part of the window (normalized or not). The sum of the
    returned ``lost_us`` equals the total length of ``lost`` up to float rounding.
    """
    remaining = iv.normalize(lost)
    out_us: dict[Cause, float] = {c: 0.0 for c in CAUSES}
    out_iv: dict[Cause, Intervals] = {c: iv.empty() for c in CAUSES}
    for cause in PRECEDENCE:
        if cause is Cause.OTHER:
            break
        claim = claims.get(cause)
        if claim is None or claim[0].size == 0 or remaining[0].size == 0:
            continue
        got = iv.intersect(remaining, claim)
        if got[0].size == 0:
            continue
        out_iv[cause] = got
        out_us[cause] = iv.total(got)
        remaining = iv.subtract(remaining, got)
    out_iv[Cause.OTHER] = remaining
    out_us[Cause.OTHER] = iv.total(remaining)
    return Attribution(lost_us=out_us, intervals=out_iv)


def merge_claims(*claim_maps: Mapping[Cause, Intervals]) -> dict[Cause, Intervals]:
    """Union several claim maps cause by cause (local rules plus cross-rank findings)."""
    merged: dict[Cause, Intervals] = {}
    for claims in claim_maps:
        for cause, ivs in claims.items():
            if cause in merged:
                prev = merged[cause]
                merged[cause] = iv.union(np.concatenate((prev[0], ivs[0])), np.concatenate((prev[1], ivs[1])))
            else:
                merged[cause] = iv.normalize(ivs)
    return merged

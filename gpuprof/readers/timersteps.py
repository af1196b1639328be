"""Step ranges of op-level timelines, from the ``args.step`` of their timer ops.

A worker's step ``s`` starts at its first op of step ``s``. Where it ends depends on what
follows it in the file:

* the next recorded step is ``s + 1`` and the clock is the job's own: step ``s`` runs
  until the first op of step ``s + 1``. The time between is real time of the job that no
  timer covers (data loading, logging, ...), and it belongs to the step it follows;
* the next recorded step is not ``s + 1`` (steps in between were not recorded), or ``s``
  is the last step: step ``s`` ends at the end of its last op. The time up to the next
  recorded step holds unrecorded steps, not step ``s``;
* the file's clock is stitched: some recorded steps are followed by a much later step
  sooner than the steps in between could have run (``megatron-pp4-timeline`` goes from
  step 36 to step 259 in 0.26 s, with 2.1 s steps). Such a file is stitched together from
  separately recorded steps with made-up gaps; the gap after a step followed by ``s + 1``
  (0.27 s there) is as made-up as the others. Every step then ends at its last op.

Steps are told apart per file (all workers of a file share one clock), and the file gets
one warning saying that inter-step time is left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpuprof.model.timeline import Step

# A gap shorter than this share of the time the skipped steps would take (at the median
# recorded step span) cannot be real time of the job. Generous so that recorded steps
# slowed down by the recording itself do not make a real clock look stitched.
_STITCHED_SHARE = 0.25


@dataclass(frozen=True)
class OpSpans:
    """Per recorded step of one worker, in time order: its number and the start of its
    first op and end of its last op (microseconds)."""

    numbers: npt.NDArray[np.int64]
    first_us: npt.NDArray[np.float64]
    last_us: npt.NDArray[np.float64]


@dataclass(frozen=True)
class Jump:
    """A recorded step followed by a later one that is not the next: ``after`` then
    ``before``, ``gap_us`` apart (from the end of the last op to the next first op)."""

    after: int
    before: int
    gap_us: float
    step_span_us: float  # median op span of the worker's recorded steps

    @property
    def impossible(self) -> bool:
        """True when the skipped steps could not have run in the gap: a stitched clock."""
        skipped = self.before - self.after - 1
        return self.gap_us < _STITCHED_SHARE * skipped * self.step_span_us


def op_spans(
    start: npt.NDArray[np.float64], end: npt.NDArray[np.float64], step: npt.NDArray[np.int64]
) -> OpSpans:
    """The op span of each recorded step (ops with step -1 belong to none)."""
    known = step >= 0
    if not known.any():
        return OpSpans(np.zeros(0, np.int64), np.zeros(0), np.zeros(0))
    s, e, st = start[known], end[known], step[known]
    # Per step: first op start and last op end, grouped by a sort (no per-step scans).
    by_step = np.argsort(st, kind="stable")
    s, e, st = s[by_step], e[by_step], st[by_step]
    bounds = np.flatnonzero(np.r_[True, st[1:] != st[:-1]])
    numbers = st[bounds]
    firsts = np.minimum.reduceat(s, bounds)
    lasts = np.maximum.reduceat(e, bounds)
    order = np.argsort(firsts, kind="stable")
    return OpSpans(numbers[order], firsts[order], lasts[order])


def jumps(spans: OpSpans) -> list[Jump]:
    """The places where a recorded step is followed by a later step that is not the next."""
    nums = spans.numbers
    if len(nums) < 2:
        return []
    after, before = nums[:-1], nums[1:]
    where = np.flatnonzero(before > after + 1)
    if not where.size:
        return []
    span = float(np.median(spans.last_us - spans.first_us))
    gaps = spans.first_us[1:] - spans.last_us[:-1]
    return [Jump(int(after[i]), int(before[i]), float(gaps[i]), span) for i in where.tolist()]


def stitched_jump(all_jumps: Sequence[Jump]) -> Jump | None:
    """The jump (of any worker of a file) that shows best that the file's clock cannot be
    the job's: of the impossible ones, the one skipping most steps; ``None`` if none is."""
    impossible = [j for j in all_jumps if j.impossible]
    return max(impossible, key=lambda j: j.before - j.after) if impossible else None


def timer_steps(spans: OpSpans, real_clock: bool) -> tuple[Step, ...]:
    """Step ranges of one worker (see the module docstring)."""
    nums, firsts, lasts = spans.numbers, spans.first_us, spans.last_us
    out: list[Step] = []
    for i, num in enumerate(nums.tolist()):
        stop = float(lasts[i])
        if real_clock and i + 1 < len(nums) and int(nums[i + 1]) == num + 1:
            stop = float(firsts[i + 1])
        out.append(Step(num, float(firsts[i]), stop))
    return tuple(out)


def steps_warning(all_jumps: Sequence[Jump]) -> str | None:
    """The file's one warning about non-consecutive steps, or ``None`` when all are."""
    if not all_jumps:
        return None
    bad = stitched_jump(all_jumps)
    if bad is not None:
        return (
            f"the timeline holds non-consecutive steps (step {bad.after} is followed by step "
            f"{bad.before} only {bad.gap_us / 1e3:.0f} ms later, too soon for the "
            f"{_steps_between(bad)} between): "
            "the recorded steps were put side by side (the stitched clock's gaps are not the job's "
            "time), so every step ends at its last op and the time between steps is left out"
        )
    first = all_jumps[0]
    return (
        f"the timeline holds non-consecutive steps (e.g. step {first.after}, then step {first.before}); "
        "a step followed by an unrecorded one ends at its last op, so the time between "
        "recorded steps is left out"
    )


def _steps_between(j: Jump) -> str:
    n = j.before - j.after - 1
    return "step" if n == 1 else f"{n} steps"

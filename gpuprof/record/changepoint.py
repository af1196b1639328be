"""The step clock's change-point test: has the step time shifted beyond its own noise?

``gpuprof run`` opens a profiling window when a job's step time changes (a data shard with
longer sequences, a GPU that starts throttling, a rank that falls behind); ``gpuprof
analyze`` names the same changes over the whole run. Both feed every step's duration, in
step order, to one :class:`StepChangeDetector`, so that the run and the report agree.

The test is a two-sided CUSUM (Page, 1954) on the logarithm of the step time, so that a
shift is a ratio (+31 %) whatever the step's length:

1. **Reference.** The first :attr:`ChangeTest.reference_steps` steps (20) set the level
   ``mu`` (their median log step time) and the noise ``sigma`` (1.4826 x their median
   absolute deviation, the standard deviation of Gaussian noise, unmoved by a few spikes).
2. **Smallest shift that counts.** ``shift = max(log(1 + min_shift_pct/100), noise_sigmas x
   sigma)``: at least 10 %, and at least 3 sigma of the job's own noise, so a noisy job
   must change more before it counts.
3. **The sums.** Each later step adds ``x = clip(log(t) - mu, -2 shift, +2 shift)`` to
   ``up = max(0, up + x - shift/2)`` and ``down = max(0, down - x - shift/2)``; a change is
   declared when either reaches ``4 shift``. The change's first step is, among the steps
   since the sum last stood at zero, the one after which a shifted level explains them best
   (the largest squared sum of deviations after it, divided by their number).
   The change is declared only when the median of the steps from there on is at least 3/4
   of the smallest shift away from the level: a smaller shift can reach the threshold too,
   slowly (each of its steps adds its excess over the slack), and is not a change yet -- the
   sums start again, so a slow drift is declared once it has moved that far.
4. **After a change** the detector learns a new reference from the steps since the change
   and goes on.

Detection delay, in steps after the change: a sustained shift of exactly ``shift`` adds
``shift/2`` per step and is declared on the 8th step; a shift of twice ``shift`` or more
adds ``1.5 shift`` (the clip) and is declared on the 3rd. So a change is declared at most
8 steps after it starts, 3 for a shift twice the smallest. Because each step adds at most
``1.5 shift`` and the threshold is ``4 shift``, one or two isolated slow steps (a garbage
collection, a checkpoint write) never declare a change by themselves: it takes three in a
row at least. Pure Python, a few operations per step: cheap enough for the live run.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MAD_TO_SIGMA = 1.4826  # the MAD of Gaussian noise times this is its standard deviation
ACCEPT = 0.75  # of the smallest shift: how far the new level must be from the old one


@dataclass(frozen=True)
class ChangeTest:
    """The test's settings (the defaults are the documented ones)."""

    reference_steps: int = 20
    min_shift_pct: float = 10.0
    noise_sigmas: float = 3.0
    slack: float = 0.5  # of the smallest shift, taken off every step's contribution
    threshold: float = 4.0  # of the smallest shift
    clip: float = 2.0  # of the smallest shift: one step's largest contribution before the slack

    def delay_steps(self, shift_ratio: float = 1.0) -> int:
        """Steps after its start at which a sustained shift of ``shift_ratio`` times the
        smallest one is declared, without noise (8 for 1, 3 for 2 and more)."""
        per_step = min(shift_ratio, self.clip) - self.slack
        if per_step <= 0:
            raise ValueError("a shift below the slack is never declared")
        return math.ceil(self.threshold / per_step - 1e-9)


@dataclass(frozen=True)
class Change:
    """A shift of the step time. Steps are the job's optimizer steps (1 = the first)."""

    step: int  # the first step at the new level (the test's estimate)
    detected_step: int  # the step at which the test declared it
    before_s: float  # the reference level: median step time before, seconds
    after_s: float  # median step time from ``step`` to ``detected_step``, seconds

    @property
    def change_pct(self) -> float:
        """The shift in percent of the step time before (+31.0: 31 % slower)."""
        return 100.0 * (self.after_s / self.before_s - 1.0) if self.before_s > 0 else 0.0

    @property
    def direction(self) -> str:
        return "rose" if self.after_s >= self.before_s else "fell"

    def to_dict(self) -> dict[str, float | int]:
        return {"step": self.step, "detected_step": self.detected_step, "before_us": round(self.before_s * 1e6, 3),
                "after_us": round(self.after_s * 1e6, 3), "change_pct": round(self.change_pct, 2)}


class StepChangeDetector:
    """The online test on one process's (or the job's) step times; feed steps in order."""

    def __init__(self, test: ChangeTest | None = None) -> None:
        self.test = test or ChangeTest()
        self._ref: list[tuple[int, float]] = []  # (step, log duration) while learning
        self.mu: float | None = None
        self.shift: float | None = None
        self._up = 0.0
        self._down = 0.0
        self._since: list[tuple[int, float]] = []  # steps since either sum last stood at zero

    @property
    def learning(self) -> bool:
        return self.mu is None

    def reset(self) -> None:
        """Forget the reference (e.g. after a profiled window, whose steps are slower)."""
        self._ref = []
        self.mu = self.shift = None
        self._up = self._down = 0.0
        self._since = []

    def _learn(self) -> None:
        logs = [x for _, x in self._ref]
        mu = statistics.median(logs)
        sigma = MAD_TO_SIGMA * statistics.median(abs(x - mu) for x in logs)
        self.mu = mu
        self.shift = max(math.log1p(self.test.min_shift_pct / 100.0), self.test.noise_sigmas * sigma)

    def add(self, step: int, duration_s: float) -> Change | None:
        """Take one step's duration; a :class:`Change` when this step declares one."""
        if not (duration_s > 0.0) or not math.isfinite(duration_s):
            return None
        x = math.log(duration_s)
        if self.mu is None or self.shift is None:
            self._ref.append((step, x))
            if len(self._ref) >= self.test.reference_steps:
                self._learn()
            return None
        shift = self.shift
        d = min(max(x - self.mu, -self.test.clip * shift), self.test.clip * shift)
        k = self.test.slack * shift
        self._up = max(0.0, self._up + d - k)
        self._down = max(0.0, self._down - d - k)
        if self._up == 0.0 and self._down == 0.0:
            self._since = []
            return None
        self._since.append((step, x))
        if max(self._up, self._down) < self.test.threshold * shift * (1.0 - 1e-9):  # reached, up to rounding
            return None
        # Where the new level starts, among the steps since the sums last stood at zero: the
        # split that best explains them as the old level, then a new one (the likelihood of a
        # shift of the mean: the largest (sum of deviations after the split)^2 / steps after
        # it, unclipped), so that noise before the change is not taken for its start.
        sign = 1.0 if self._up >= self._down else -1.0
        run = self._since
        best, best_i, acc = -math.inf, 0, 0.0
        for i in range(len(run) - 1, -1, -1):
            acc += sign * (run[i][1] - self.mu)
            score = acc * acc / (len(run) - i) if acc > 0 else -math.inf
            if score > best:
                best, best_i = score, i
        run = run[best_i:]
        after = statistics.median(v for _, v in run)
        if abs(after - self.mu) < ACCEPT * shift:
            # The sums got there on a smaller shift, slowly (the slack lets half the smallest
            # shift accumulate): not a change yet. Start the sums again on the same level.
            self._up = self._down = 0.0
            self._since = []
            return None
        change = Change(step=run[0][0], detected_step=step, before_s=math.exp(self.mu), after_s=math.exp(after))
        # The steps of the new level seed the next reference.
        self.reset()
        self._ref = list(run)
        if len(self._ref) >= self.test.reference_steps:
            self._learn()
        return change


def detect_changes(steps: Sequence[int], durations_s: Sequence[float], skip: Iterable[tuple[int, int]] = (),
                   test: ChangeTest | None = None) -> list[Change]:
    """Every change in a whole series, as the live run declares them.

    ``skip``: inclusive step ranges left out (profiled windows, whose steps the profiler
    slows). The reference stays across them: a change inside a window is declared on the
    first steps after it.
    """
    ranges = sorted(skip)
    det = StepChangeDetector(test or ChangeTest())
    out: list[Change] = []
    i = 0  # steps come in order: the first range that may still hold the step
    for step, dt in zip(steps, durations_s):
        while i < len(ranges) and ranges[i][1] < step:
            i += 1
        if i < len(ranges) and ranges[i][0] <= step:
            continue
        found = det.add(step, dt)
        if found is not None:
            out.append(found)
    return out


__all__ = ["Change", "ChangeTest", "StepChangeDetector", "detect_changes"]

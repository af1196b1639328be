"""Choosing the analysis window of a rank, and where each step begins and ends on the device.

With step markers (``ProfilerStep#N``, or a timeline's step numbers) the window is the
profiled steps: by default every complete step; ``--steps`` selects a subset. Without step
markers it spans the first to the last device activity.

Step boundaries follow the device, not the host annotation
-----------------------------------------------------------
``ProfilerStep#N`` is a *host* range. The host usually runs ahead of the device: kernels it
launches in step N run after the annotation has ended (in ``mi300-resnet-ckpt-rank0`` the
device finishes each step's work 30-38 ms after the host step ends, and the first 30 ms of
the recording are kernels launched before profiling began). Host boundaries would then count
the previous step's kernels as this step's compute and cut off the last step's own work, and
the per-step times would be the host's pace (16 ms there) instead of the job's (19 ms).

So, for step N with host range ``[h0, h1)``:

* the device events *launched* (matched by correlation id) while the host was in step N
  belong to step N; events whose launch is not in the trace and that run before the first
  step's own work were launched before profiling began and belong to no step;
* step N starts on the device at ``max(h0, end of all device work launched before h0)``,
  but no later than the start of its own first device event: the step begins when the host
  has begun it *and* the device is free of earlier work. Idle device time after the earlier
  work ended but before the host started step N belongs to the previous step (its host
  tail: optimizer bookkeeping, logging); idle time after both belongs to step N (e.g. its
  DataLoader wait, which happens at the top of the step);
* step N ends where step N+1 starts; the last step ends at the later of its host end and
  the end of all device work launched up to then.

When the host is the bottleneck the device is idle at each ``h0`` and the boundaries fall
on the host's; when the device is the bottleneck they fall between the device's kernels. In
both cases the steps tile the window, and the per-step times add up to it.

Without correlation ids (op-level timelines, stripped traces) the host ranges are used.

Steps that are not contiguous
-----------------------------
Device-aligned steps tile the window. Host ranges may leave time between steps, and the
window is then the union of the steps (:attr:`Window.spans`), leaving that time out:

* between consecutive ``ProfilerStep`` ranges (``N`` then ``N + 1``) the time is the job's
  own (``profiler.step()`` bookkeeping, tens of microseconds): it stays in the window, as
  it would with device-aligned bounds;
* an op-level timeline's reader has already decided where each step ends
  (:mod:`gpuprof.readers.timersteps`): a step ends at its last op exactly when the time
  after it is not the job's (a stitched clock's made-up gap) or holds unrecorded steps.
  That time is in no step, so it is in no cause either: counting it as lost ``other``
  time would blame the job for time it never spent on these steps;
* likewise between non-consecutive step numbers in any trace.

Compute and lost time, and so ``window_us``, are then measured inside the steps only.

Partial steps
-------------
A first or last step is left out when its device work is not all in the recording: most of
its launches have no device event (the device recording began late or was cut off), or it
launched no device work while the other steps did (Kineto's trailing ``ProfilerStep`` that
only brackets ``profiler.stop()``). Without correlation ids, a last step that starts after
the last device activity, or a first step that ends before the first, is left out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpuprof.accounting.launches import Launches, activity_mask, match_launches
from gpuprof.errors import GpuprofError
from gpuprof.model import intervals as iv
from gpuprof.model.intervals import Intervals
from gpuprof.model.table import one_of
from gpuprof.model.timeline import Category, Kind, RankTrace, Step

# Below this share of device rows with a known launch, host step ranges are used.
_MIN_MATCHED_SHARE = 0.5
# A step whose launches miss their device event this often (and at least this many
# times) has lost device work to the edge of the recording.
_PARTIAL_MISSING_SHARE = 0.2
_PARTIAL_MISSING_MIN = 5


@dataclass(frozen=True)
class StepSelection:
    """Which steps to analyze: ``first``..``last`` inclusive (step numbers as in the trace).
    ``None`` = unbounded."""

    first: int | None = None
    last: int | None = None

    @staticmethod
    def parse(text: str | None) -> StepSelection:
        """Parse ``N``, ``N:M``, ``N:`` or ``:M`` (inclusive step numbers)."""
        if text is None or text.strip() == "":
            return StepSelection()
        t = text.strip()
        try:
            if ":" in t:
                a, b = t.split(":", 1)
                first = int(a) if a.strip() else None
                last = int(b) if b.strip() else None
            else:
                first = last = int(t)
        except ValueError:
            raise GpuprofError(
                f"--steps: expected N, N:M, N: or :M with step numbers, got {text!r}"
            ) from None
        if first is not None and last is not None and last < first:
            raise GpuprofError(f"--steps: last step {last} is before first step {first}")
        return StepSelection(first, last)

    def accepts(self, number: int) -> bool:
        return (self.first is None or number >= self.first) and (self.last is None or number <= self.last)


@dataclass(frozen=True)
class Window:
    """The analysis window: outer bounds ``[start_us, end_us)`` and its steps.

    ``spans`` is the window as a normalized interval set when time between steps is left
    out (see the module docstring); ``None`` when the window is all of
    ``[start_us, end_us)`` (contiguous steps, or no steps).
    """

    start_us: float
    end_us: float
    steps: tuple[Step, ...]
    note: str | None = None  # why the window is what it is, when not the obvious
    device_aligned: bool = False  # step bounds follow device work (see module docstring)
    spans: Intervals | None = None

    @property
    def intervals(self) -> Intervals:
        """The window as a normalized interval set (one interval when contiguous)."""
        if self.spans is not None:
            return self.spans
        return iv.make([self.start_us], [self.end_us])

    @property
    def duration_us(self) -> float:
        """Time inside the window: the outer span less the time left out between steps."""
        if self.spans is not None:
            return iv.total(self.spans)
        return self.end_us - self.start_us


def step_spans(steps: tuple[Step, ...], reader_ends_steps: bool) -> Intervals | None:
    """The window of ``steps`` (host ranges, sorted) as an interval set, or ``None`` when
    it is all of ``[first start, last end)``.

    The time between two steps is left out when the numbers are not consecutive, or when
    ``reader_ends_steps`` (an op-level timeline: its reader ended a step early exactly where
    the time after it is not the job's). Between consecutive ``ProfilerStep`` ranges it is
    the job's own time and stays.
    """
    if len(steps) < 2:
        return None
    starts = np.array([s.start_us for s in steps])
    ends = np.array([s.end_us for s in steps])
    nums = np.array([s.number for s in steps])
    gap = starts[1:] > ends[:-1]
    if not reader_ends_steps:
        gap &= nums[1:] != nums[:-1] + 1
    if not gap.any():
        return None
    # Fill the gaps that stay: each kept gap's step extends to the next step's start.
    keep_to_next = ~gap
    ends = ends.copy()
    ends[:-1] = np.where(keep_to_next, np.maximum(ends[:-1], starts[1:]), ends[:-1])
    return iv.union(starts, ends)


@dataclass(frozen=True)
class _StepWork:
    """Per host step (sorted): device work launched in it and its launches' coverage."""

    first_dev_start_us: npt.NDArray[np.float64]  # NaN: the step launched no device work
    dev_end_upto_us: npt.NDArray[np.float64]  # max end of work launched before step k (k=0..n)
    launches: npt.NDArray[np.int64]  # launch API calls issued in the step
    missing: npt.NDArray[np.int64]  # ... of which no device event was recorded
    has_work: npt.NDArray[np.bool_]


def _step_work(trace: RankTrace, steps: tuple[Step, ...], launches: Launches) -> _StepWork:
    n = len(steps)
    h0 = np.array([s.start_us for s in steps])
    h1_last = steps[-1].end_us
    dev = trace.device_cols
    act = activity_mask(dev)
    ds = dev["start_us"][act]
    de = dev["end_us"][act]
    ls = launches.start_us[act]
    known = ~np.isnan(ls)
    # Step index of each device row by its launch time: -1 before the first step, n after.
    k = np.searchsorted(h0, np.where(known, ls, -np.inf), side="right") - 1
    k[known & (ls >= h1_last)] = n
    # Work launched before recording: unknown launch, running before step 0's first work.
    first0 = ds[known & (k == 0)].min() if (known & (k == 0)).any() else np.inf
    k[~known & (ds < first0)] = -1
    k[~known & (ds >= first0)] = n + 1  # unknown and later: ignored for boundaries
    first_start = np.full(n, np.inf)
    max_end = np.full(n + 1, -np.inf)  # slot 0: before step 0; slot j+1: step j
    counted = (k >= -1) & (k < n)
    np.maximum.at(max_end, k[counted] + 1, de[counted])
    own = (k >= 0) & (k < n)
    np.minimum.at(first_start, k[own], ds[own])
    first_start[np.isinf(first_start)] = np.nan
    upto = np.maximum.accumulate(max_end)  # upto[j]: work launched before step j ends
    # Launch API calls per step and how many have no device event.
    host = trace.host_cols
    is_launch = (host["category"] == int(Category.LAUNCH)) & one_of(host["kind"], (int(Kind.RUNTIME), int(Kind.DRIVER)))
    hc = host["correlation"][is_launch]
    hs = host["start_us"][is_launch]
    has_dev = np.isin(hc, dev["correlation"][act])
    hk = np.searchsorted(h0, hs, side="right") - 1
    hk[hs >= h1_last] = n
    in_step = (hk >= 0) & (hk < n)
    launches_per = np.bincount(hk[in_step], minlength=n).astype(np.int64)
    missing_per = np.bincount(hk[in_step & ~has_dev], minlength=n).astype(np.int64)
    return _StepWork(first_start, upto, launches_per, missing_per, ~np.isnan(first_start))


def _is_partial(work: _StepWork, i: int) -> str | None:
    if (
        work.missing[i] >= _PARTIAL_MISSING_MIN
        and work.missing[i] > _PARTIAL_MISSING_SHARE * work.launches[i]
    ):
        return f"{work.missing[i]} of its {work.launches[i]} launches have no device event in the recording"
    if not work.has_work[i] and work.has_work.any():
        return "it launched no device work"
    return None


def _device_bounds(steps: tuple[Step, ...], work: _StepWork) -> list[Step]:
    """Device-aligned ``Step`` ranges tiling the steps (see module docstring)."""
    n = len(steps)
    starts = np.empty(n)
    prev = -np.inf
    for j, s in enumerate(steps):
        b = max(s.start_us, float(work.dev_end_upto_us[j]))
        if not np.isnan(work.first_dev_start_us[j]):
            b = min(b, float(work.first_dev_start_us[j]))
        b = max(b, prev)
        starts[j] = prev = b
    last_end = max(steps[-1].end_us, float(work.dev_end_upto_us[n]), float(starts[-1]))
    ends = np.append(starts[1:], last_end)
    return [Step(s.number, float(a), float(b)) for s, a, b in zip(steps, starts, ends)]


def _edge_trim(steps: list[Step], reasons: list[str | None]) -> tuple[list[Step], list[str]]:
    notes: list[str] = []
    lo, hi = 0, len(steps)
    while lo < hi and reasons[lo] is not None:
        notes.append(f"step {steps[lo].number} left out as partial: {reasons[lo]}")
        lo += 1
    while hi > lo and reasons[hi - 1] is not None:
        notes.append(f"step {steps[hi - 1].number} left out as partial: {reasons[hi - 1]}")
        hi -= 1
    return steps[lo:hi], notes


def complete_steps(
    trace: RankTrace, launches: Launches | None = None
) -> tuple[tuple[Step, ...], str | None, bool]:
    """The complete steps of a trace with their (device-aligned where possible) bounds.

    Returns ``(steps, note, device_aligned)``; ``note`` says which steps were left out.
    """
    steps = tuple(sorted((s for s in trace.steps if s.end_us > s.start_us), key=lambda s: s.start_us))
    if not steps:
        return (), None, False
    act = activity_mask(trace.device_cols)
    if not act.any():
        return steps, None, False
    if launches is None:
        launches = match_launches(trace)
    if launches.matched_share is not None and launches.matched_share >= _MIN_MATCHED_SHARE:
        work = _step_work(trace, steps, launches)
        bounds = _device_bounds(steps, work)
        kept, notes = _edge_trim(bounds, [_is_partial(work, i) for i in range(len(steps))])
        return tuple(kept), "; ".join(notes) or None, True
    # Host ranges: only the cheap edge checks are possible.
    dev = trace.device_cols
    dev_end = float(dev["end_us"][act].max())
    dev_start = float(dev["start_us"][act].min())
    reasons: list[str | None] = []
    for s in steps:
        if s.start_us >= dev_end or s.end_us <= dev_start:
            reasons.append("it is outside the recorded device activity")
        else:
            reasons.append(None)
    kept, notes = _edge_trim(list(steps), reasons)
    return tuple(kept), "; ".join(notes) or None, False


def select_window(
    trace: RankTrace, selection: StepSelection = StepSelection(), launches: Launches | None = None
) -> Window | None:
    """The analysis window, or ``None`` when the rank has no device activity at all.

    Raises :class:`GpuprofError` when ``selection`` selects none of the complete steps.
    """
    act = activity_mask(trace.device_cols)
    if not act.any():
        return None
    steps, note, aligned = complete_steps(trace, launches)
    if steps:
        chosen = tuple(s for s in steps if selection.accepts(s.number))
        if not chosen:
            nums = ", ".join(str(s.number) for s in steps)
            raise GpuprofError(
                f"--steps selects no complete step of rank {trace.rank}; its complete steps are {nums}",
                trace.source,
            )
        spans = None if aligned else step_spans(chosen, reader_ends_steps=trace.holds.reader_ends_steps)
        # Steps are sorted by start; one may end after the last (a damaged timestamp): the
        # outer bounds hold every step, so that compute and lost still partition the window.
        return Window(chosen[0].start_us, max(s.end_us for s in chosen), chosen, note, aligned, spans)
    if selection.first is not None or selection.last is not None:
        what = "no complete step" if trace.steps else "no step markers"
        raise GpuprofError(f"--steps: rank {trace.rank} has {what} to select", trace.source)
    dev = trace.device_cols
    why = "no step markers: first to last device activity"
    if trace.steps:
        why = (note + "; " if note else "") + "no complete step: first to last device activity"
    return Window(
        float(dev["start_us"][act].min()),
        float(dev["end_us"][act].max()),
        (),
        why,
        False,
    )

"""Choosing the analysis window of a rank.

With step markers the window is the profiled steps: by default every complete step (a first
or last step that is cut off by the start or end of the trace's device activity is left
out); ``--steps`` selects a subset. Without step markers it spans the first to the last
device activity.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuprof.errors import GpuprofError
from gpuprof.model.timeline import RankTrace, Step


@dataclass(frozen=True)
class StepSelection:
    """Which steps to analyze: ``first``..``last`` inclusive (step numbers as in the trace),
    or ``skip_first``/``count`` counted within the trace's complete steps. ``None`` = all."""

    first: int | None = None
    last: int | None = None

    @staticmethod
    def parse(text: str | None) -> "StepSelection":
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
            raise GpuprofError(f"--steps: expected N, N:M, N: or :M with step numbers, got {text!r}") from None
        if first is not None and last is not None and last < first:
            raise GpuprofError(f"--steps: last step {last} is before first step {first}")
        return StepSelection(first, last)

    def accepts(self, number: int) -> bool:
        return (self.first is None or number >= self.first) and (self.last is None or number <= self.last)


@dataclass(frozen=True)
class Window:
    start_us: float
    end_us: float
    steps: tuple[Step, ...]
    note: str | None = None  # why the window is what it is, when not the obvious


def complete_steps(trace: RankTrace) -> tuple[tuple[Step, ...], str | None]:
    """Steps that are fully inside the trace's device activity, or the host span."""
    steps = tuple(sorted(trace.steps, key=lambda s: s.start_us))
    if not steps:
        return (), None
    dev = trace.device
    if len(dev) == 0:
        return steps, None
    note = None
    # A step is partial when device activity it launched is cut off by the end of the trace:
    # the last step is partial if the trace stops recording device work before it ends.
    dev_end = float(dev["end_us"].max())
    dev_start = float(dev["start_us"].min())
    kept = [s for s in steps if s.end_us > s.start_us]
    if kept and kept[-1].start_us >= dev_end:
        kept = kept[:-1]
        note = "last step has no device activity and was left out"
    if kept and kept[0].end_us <= dev_start:
        kept = kept[1:]
        note = "first step has no device activity and was left out"
    return tuple(kept), note


def select_window(trace: RankTrace, selection: StepSelection = StepSelection()) -> Window | None:
    """The analysis window, or ``None`` when the rank has no device activity at all."""
    steps, note = complete_steps(trace)
    if steps:
        chosen = tuple(s for s in steps if selection.accepts(s.number))
        if not chosen:
            nums = ", ".join(str(s.number) for s in steps)
            raise GpuprofError(f"--steps selects no step of rank {trace.rank}; the trace has steps {nums}", trace.source)
        return Window(chosen[0].start_us, chosen[-1].end_us, chosen, note)
    if len(trace.device) == 0:
        return None
    return Window(float(trace.device["start_us"].min()), float(trace.device["end_us"].max()), (), "no step markers: first to last device activity")

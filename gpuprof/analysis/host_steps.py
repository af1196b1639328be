"""Host-side time per profiled step, for a trace with no device activity (a CPU-only run).

With no GPU there is no GPU time to split into compute and causes of lost time, but the
profiler still measured the steps: how long each took, and how much of it the host spent
inside framework operators (the rest is Python and framework overhead between them, or
waiting). Pure: a :class:`~gpuprof.model.timeline.RankTrace` in, figures out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuprof.analysis import intervals as iv
from gpuprof.model.timeline import Category, Kind, RankTrace


@dataclass(frozen=True)
class HostSteps:
    """Medians over the profiled steps of one trace; ``None`` when the trace marks no step."""

    steps: int  # profiled steps (ProfilerStep#N spans) in the trace
    step_us: float | None  # median step duration
    op_us: float | None  # median time per step inside operators (nested calls counted once)

    @property
    def op_pct(self) -> float | None:
        if self.step_us is None or self.op_us is None or self.step_us <= 0:
            return None
        return 100.0 * self.op_us / self.step_us


def host_steps(trace: RankTrace) -> HostSteps:
    """Step durations and operator time per step, from the trace's step markers and host ops."""
    steps = [s for s in trace.steps if s.end_us > s.start_us]
    if not steps:
        return HostSteps(steps=0, step_us=None, op_us=None)
    host = trace.host
    is_op = (host["kind"].to_numpy() == int(Kind.OP)) & (host["category"].to_numpy() != int(Category.STEP))
    ops = iv.union(host["start_us"].to_numpy()[is_op], host["end_us"].to_numpy()[is_op])
    durations = np.array([s.end_us - s.start_us for s in steps], dtype=np.float64)
    in_ops = np.array([iv.total(iv.clip(ops, s.start_us, s.end_us)) for s in steps], dtype=np.float64)
    return HostSteps(steps=len(steps), step_us=float(np.median(durations)), op_us=float(np.median(in_ops)))

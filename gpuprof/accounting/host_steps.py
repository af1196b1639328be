"""Host-side time per profiled step, for a trace with no device activity (a CPU-only run).

With no GPU there is no GPU time to split into compute and causes of lost time, but the
profiler still measured the steps: how long each took, how much of it the host spent
inside framework operators (the rest is Python and framework overhead between them, or
waiting), and how much inside collectives (gloo under ``torchrun`` on CPUs). Pure: a
:class:`~gpuprof.model.timeline.RankTrace` in, figures out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuprof.model import intervals as iv
from gpuprof.model.timeline import Category, Kind, RankTrace


@dataclass(frozen=True)
class HostSteps:
    """Means over the profiled steps of one trace (the one step statistic of the reports),
    microseconds; ``None`` when the trace marks no step."""

    steps: int  # profiled steps (ProfilerStep#N spans) in the trace
    step_us: float | None  # mean step duration
    op_us: float | None  # mean time per step inside operators (nested calls counted once)
    collective_us: float | None = None  # mean time per step inside host collectives (gloo)
    backend: str | None = None  # the collectives' backend when their names say it ("gloo")
    # Mean time per step waiting for the DataLoader's next batch (``enumerate(DataLoader)``),
    # and outside any operator, collective or DataLoader call (Python code, sleeps, waits
    # nothing marks): with the operators' and collectives' own time they split the step.
    dataloader_us: float | None = None
    outside_us: float | None = None

    @property
    def op_pct(self) -> float | None:
        if self.step_us is None or self.op_us is None or self.step_us <= 0:
            return None
        return 100.0 * self.op_us / self.step_us

    def to_dict(self) -> dict[str, Any]:
        """The figures as a rank's ``host_steps`` key of the JSON report."""
        def r(v: float | None) -> float | None:
            return None if v is None else round(v, 3)

        return {
            "profiled_steps": self.steps,
            "step_us": r(self.step_us),
            "op_us": r(self.op_us),
            "collective_us": r(self.collective_us),
            "collective_backend": self.backend,
            "dataloader_us": r(self.dataloader_us),
            "outside_us": r(self.outside_us),
        }


def _per_step(spans: iv.Intervals, steps: list[tuple[float, float]]) -> float:
    return float(np.mean([iv.total(iv.clip(spans, a, b)) for a, b in steps]))


def host_steps(trace: RankTrace) -> HostSteps:
    """Step durations, operator and collective time per step, from the trace's step
    markers and host events."""
    steps = [(s.start_us, s.end_us) for s in trace.steps if s.end_us > s.start_us]
    if not steps:
        return HostSteps(steps=0, step_us=None, op_us=None)
    host = trace.host_cols  # numpy columns: a CPU-only rank never imports pandas for this
    kind = host["kind"]
    category = host["category"]
    start, end = host["start_us"], host["end_us"]
    is_op = (kind == int(Kind.OP)) & (category != int(Category.STEP))
    is_coll = category == int(Category.COLLECTIVE)
    is_data = category == int(Category.DATALOAD)
    busy = is_op | is_coll | is_data
    durations = np.array([b - a for a, b in steps], dtype=np.float64)
    backend = None
    if is_coll.any():
        names = {str(n).split(":", 1)[0] for n in host["name"][is_coll] if ":" in str(n)}
        backend = next(iter(names)) if len(names) == 1 and next(iter(names)) in ("gloo", "mpi", "ucc") else None
    return HostSteps(
        steps=len(steps),
        step_us=float(np.mean(durations)),
        op_us=_per_step(iv.union(start[is_op], end[is_op]), steps),
        collective_us=_per_step(iv.union(start[is_coll], end[is_coll]), steps),
        backend=backend,
        dataloader_us=_per_step(iv.union(start[is_data], end[is_data]), steps),
        outside_us=float(np.mean(durations)) - _per_step(iv.union(start[busy], end[busy]), steps),
    )

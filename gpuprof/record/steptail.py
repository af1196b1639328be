"""Every step record of a running job's hook logs, incrementally (for the window controller).

:class:`~gpuprof.record.hooktail.HookTail` keeps only what the live line shows (each
process's latest step); the change-point test and the slowest rank need every step. This
follower reads the same files the same way (an offset per file, only what was appended) and
hands out every step as a :class:`StepMark`, plus the records of the profiling windows.

Step lines are the hooks' hand-formatted ones (:mod:`gpuprof_torch_hooks`) and are parsed
with one regular expression each; any other line (a step with memory statistics, a trace
record) with ``json``. Lines that are neither are skipped: the logs are the job's processes'
writing, read as untrusted input.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, NamedTuple

from gpuprof.record.hooktail import HookTail, ProcessState

_STEP_RE = re.compile(
    rb'\{"time_unix_s":([0-9.]+),"kind":"step","rank":(null|[0-9]+),"pid":([0-9]+),"step":([0-9]+)'
    rb'(?:,"backward_unix_s":([0-9.]+))?\}$'
)
WINDOW_KINDS = ("profiler_start", "trace", "window_missed", "exit", "note", "error")


class StepMark(NamedTuple):
    """One optimizer step of one process, as its hook logged it (wall-clock seconds)."""

    pid: int
    rank: int | None
    step: int
    time_unix_s: float
    backward_unix_s: float | None


def _int_or_none(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _num_or_none(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


class StepTail(HookTail):
    """A :class:`HookTail` that keeps every step (:meth:`drain`) and the window records."""

    def __init__(self, hooks_dir: Path) -> None:
        super().__init__(hooks_dir)
        self._steps: list[StepMark] = []
        self._records: list[dict[str, Any]] = []

    def drain(self) -> tuple[list[StepMark], list[dict[str, Any]]]:
        """The steps and window-related records read since the last call, in file order."""
        steps, recs = self._steps, self._records
        self._steps, self._records = [], []
        return steps, recs

    def _take(self, complete: bytes) -> None:
        for line in complete.split(b"\n"):
            line = line.strip()
            if not line:
                continue
            m = _STEP_RE.match(line)
            if m is not None:
                t, rank, pid, step, back = m.groups()
                mark = StepMark(int(pid), None if rank == b"null" else int(rank), int(step), float(t),
                                float(back) if back else None)
                self._keep_step(mark)
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if not isinstance(rec, dict) or _int_or_none(rec.get("pid")) is None:
                continue
            if rec.get("kind") == "step":
                step, t = _int_or_none(rec.get("step")), _num_or_none(rec.get("time_unix_s"))
                if step is None or t is None:
                    continue
                self._keep_step(StepMark(rec["pid"], _int_or_none(rec.get("rank")), step, t,
                                         _num_or_none(rec.get("backward_unix_s"))))
                continue
            self._record(line)
            if rec.get("kind") in WINDOW_KINDS:
                self._records.append(rec)

    def _keep_step(self, mark: StepMark) -> None:
        self._steps.append(mark)
        p = self.processes.setdefault(mark.pid, ProcessState(pid=mark.pid))
        if mark.rank is not None:
            p.rank = mark.rank
        if mark.step >= p.step:
            p.step = mark.step
            p.step_time_unix_s = mark.time_unix_s


__all__ = ["StepMark", "StepTail"]

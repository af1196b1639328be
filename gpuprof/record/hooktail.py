"""Following the hook logs of a running job, incrementally (for ``gpuprof run``'s live line).

Each poll lists ``<session>/hooks/*.jsonl`` and reads only the bytes appended since the
last poll (an offset per file; a torn last line waits for its end). Step lines are by far
the most common and only the last one of each file per poll matters, so only that one is
parsed; the rare other records (profiler start, trace written, note, error) are parsed
whole. A poll costs a directory listing plus what the job wrote since, never a re-read.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

MAX_READ_BYTES = 8 << 20  # per file per poll: a burst is caught up over the next polls
_STEP_KINDS = (b'"kind":"step"', b'"kind": "step"')


@dataclass
class ProcessState:
    """What one process of the job has logged so far."""

    pid: int
    rank: int | None = None
    step: int = 0
    step_time_unix_s: float | None = None  # when that step ended
    profiler_start_step: int | None = None
    trace_written: bool = False
    profiler_note: str | None = None  # why no trace (the job's own profiler)
    errors: list[str] = field(default_factory=list)  # hook errors ("where": ...)
    exited: bool = False


@dataclass
class _File:
    offset: int = 0
    partial: bytes = b""


class HookTail:
    """Incremental reader of a session's hook logs; :attr:`processes` by pid."""

    def __init__(self, hooks_dir: Path) -> None:
        self.hooks_dir = hooks_dir
        self.processes: dict[int, ProcessState] = {}
        self._files: dict[str, _File] = {}
        self.bytes_read = 0  # for tests: what the polls cost

    def poll(self) -> None:
        try:
            entries = [e for e in os.scandir(self.hooks_dir) if e.name.endswith(".jsonl")]
        except OSError:
            return
        for entry in entries:
            state = self._files.setdefault(entry.name, _File())
            try:
                size = entry.stat().st_size
                if size <= state.offset:
                    continue
                with open(entry.path, "rb") as fh:
                    fh.seek(state.offset)
                    chunk = fh.read(min(size - state.offset, MAX_READ_BYTES))
            except OSError:
                continue
            state.offset += len(chunk)
            self.bytes_read += len(chunk)
            data = state.partial + chunk
            end = data.rfind(b"\n")
            if end < 0:
                state.partial = data  # no complete line yet
                continue
            complete, state.partial = data[:end], data[end + 1 :]
            self._take(complete)

    def _take(self, complete: bytes) -> None:
        steps = sum(complete.count(k) for k in _STEP_KINDS)
        if steps and steps == complete.count(b'"kind"'):
            # Only step lines (the common case): the last one says all there is to know.
            self._record(complete[complete.rfind(b"\n") + 1 :])
            return
        lines = complete.split(b"\n")
        last_step: bytes | None = None
        for line in lines:
            if not line:
                continue
            if any(k in line for k in _STEP_KINDS):
                last_step = line  # only the latest step of this batch matters
                continue
            self._record(line)
        if last_step is not None:
            self._record(last_step)

    def _record(self, line: bytes) -> None:
        try:
            rec = json.loads(line)
        except ValueError:
            return
        if not isinstance(rec, dict) or not isinstance(rec.get("pid"), int):
            return
        p = self.processes.setdefault(rec["pid"], ProcessState(pid=rec["pid"]))
        if isinstance(rec.get("rank"), int):
            p.rank = rec["rank"]
        kind = rec.get("kind")
        step = rec.get("step")
        if kind == "step" and isinstance(step, int) and step >= p.step:
            p.step = step
            t = rec.get("time_unix_s")
            p.step_time_unix_s = float(t) if isinstance(t, (int, float)) else None
        elif kind == "profiler_start" and isinstance(step, int):
            p.profiler_start_step = step
        elif kind == "trace":
            p.trace_written = True
        elif kind == "note":
            p.profiler_note = str(rec.get("message"))
        elif kind == "error":
            p.errors.append(str(rec.get("where") or rec.get("message")))
        elif kind == "exit":
            p.exited = True

"""The background sampler: polls every visible GPU through a backend into the session.

Time is injected: ``clock`` gives the wall time written into samples (Unix seconds) and
``wait(timeout_s) -> bool`` sleeps until the next poll or returns True when asked to stop.
Tests pass a fake clock and a ``wait`` that advances it, so the real loop runs without
sleeping. A GPU that is lost is recorded once and skipped from then on; the others go on.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Callable

from gpuprof.record.backend import GpuBackend, GpuLostError, GpuSample
from gpuprof.session.writer import SessionWriter

DEFAULT_INTERVAL_MS = 500
"""Default poll interval. NVML's utilization counters cover a window of about 1/6 s to 1 s
depending on the GPU, so polling faster adds cost without adding information."""


def process_tree_pids(root_pid: int, proc: Path = Path("/proc")) -> frozenset[int]:
    """``root_pid`` and all its descendants, from ``/proc`` (empty where there is no /proc)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir(proc)
    except OSError:
        return frozenset()
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(proc / name / "stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        # The command name is in parentheses and may contain spaces: split after the last ")".
        rest = stat[stat.rfind(b")") + 2 :].split()
        if len(rest) > 1:
            children.setdefault(int(rest[1]), []).append(int(name))
    out = {root_pid}
    stack = [root_pid]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in out:
                out.add(child)
                stack.append(child)
    return frozenset(out)


class Sampler:
    """Polls ``backend`` every ``interval_s`` seconds and appends to ``writer``."""

    def __init__(
        self,
        backend: GpuBackend,
        writer: SessionWriter,
        interval_s: float = DEFAULT_INTERVAL_MS / 1000.0,
        clock: Callable[[], float] = time.time,
        wait: Callable[[float], bool] | None = None,
        pids: Callable[[], frozenset[int]] = frozenset,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self.backend = backend
        self.writer = writer
        self.interval_s = interval_s
        self.clock = clock
        self._stop = threading.Event()
        self.wait = wait if wait is not None else self._stop.wait
        self.pids = pids
        self.lost: set[int] = set()
        # The latest sample of each GPU still polled, for the live status line (read from
        # another thread: entries are replaced whole, never mutated).
        self.latest: dict[int, GpuSample] = {}
        self._failing: set[int] = set()
        self.polls = 0
        self._thread: threading.Thread | None = None
        self.gpu_count = len(backend.devices())

    def poll_once(self) -> None:
        """Poll every GPU not yet lost; never raises for a per-GPU problem."""
        now = self.clock()
        pids = self.pids() if self.gpu_count else frozenset()
        for gpu in range(self.gpu_count):
            if gpu in self.lost:
                continue
            try:
                poll = self.backend.poll(gpu, pids)
            except GpuLostError as exc:
                self.lost.add(gpu)
                self.latest.pop(gpu, None)
                info = self.backend.devices()[gpu]
                self.writer.samples.append({"time_unix_s": now, "gpu": gpu, "uuid": info.uuid, "lost": True})
                self.writer.event("gpu_lost", str(exc), time_unix_s=now, gpu=gpu)
                continue
            except Exception as exc:  # a sampler bug or driver hiccup must not stop the job
                if gpu not in self._failing:
                    self._failing.add(gpu)
                    self.writer.event("error", f"GPU {gpu}: sampling failed: {exc!r}", time_unix_s=now, gpu=gpu)
                continue
            self._failing.discard(gpu)
            self.latest[gpu] = poll.sample
            self.writer.samples.append(poll.sample.to_record(now))
            for p in poll.processes:
                self.writer.processes.append(
                    {"time_unix_s": now, "gpu": p.gpu, "pid": p.pid, "mem_used_bytes": p.mem_used_bytes,
                     "util_sm_pct": p.util_sm_pct, "util_mem_pct": p.util_mem_pct}
                )
        self.polls += 1
        if self.interval_s >= self.writer.samples.flush_interval_s:
            self.writer.flush()  # polls are at least a flush interval apart: flush every one
        else:
            self.writer.maybe_flush()

    def run(self) -> None:
        """Poll on a fixed grid until ``wait`` reports a stop; polls missed while busy are skipped."""
        next_t = self.clock()
        while True:
            self.poll_once()
            next_t += self.interval_s
            now = self.clock()
            if next_t < now:  # fell behind (slow NVML): realign instead of bursting
                next_t = now + self.interval_s
            if self.wait(max(0.0, next_t - now)):
                break
        self.writer.flush()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run_guarded, name="gpuprof-sampler", daemon=True)
        self._thread.start()

    def _run_guarded(self) -> None:
        try:
            self.run()
        except Exception as exc:  # never let the sampler thread die silently
            self.writer.event("error", f"sampler stopped: {exc!r}")

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

"""Run one command as a subprocess and measure its wall time and peak memory; and
(:func:`best_cpu`) the CPU time of a function in this process, best of a few runs.

Peak memory is the larger of two measures:

* the kernel's high-water mark of the largest single process (``ru_maxrss`` from
  ``wait4``), exact but blind to the memory of several processes added together;
* the sum over the whole process tree (the command and every process it starts, such as
  ``--jobs`` workers or HTA's parsing pool) of the proportional set size (PSS, shared pages
  split between the processes that share them, so forked workers are not counted twice),
  sampled every ``interval_s`` (20 ms: the workers of a one-second run live a fraction of
  it). Falls back to RSS where ``smaps_rollup`` is unreadable.

Finding the tree's new processes must stay cheap at that rate on a 2-core machine: each
sample lists ``/proc`` and reads the parent of the processes that were not there before.

Linux only (``/proc``); only the standard library is used.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


@dataclass(frozen=True)
class Measured:
    wall_s: float
    peak_bytes: int
    max_single_rss_bytes: int
    peak_tree_bytes: int
    timed_out: bool
    cpu_s: float  # user + system time of the command and every child it waited for
    returncode: int
    stdout: str
    stderr: str
    load_before: float  # 1-minute load average when the run started


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    # the command name may hold spaces or parentheses: fields start after the last ')'
    return int(stat[stat.rfind(b")") + 2 :].split()[1])


class _Tree:
    """The pids of a process and all its descendants, kept up to date cheaply: each update
    lists ``/proc`` and reads the parent of the processes not seen before only."""

    def __init__(self, root: int) -> None:
        self.pids = {root}
        self.seen: set[int] = set()

    def update(self) -> None:
        now = {int(e.name) for e in os.scandir("/proc") if e.name.isdigit()}
        new = now - self.seen
        # Parents before children: a worker's parent may be new too.
        for pid in sorted(new):
            ppid = _ppid(pid)
            if ppid is not None and ppid in self.pids:
                self.pids.add(pid)
        gone = self.seen - now
        self.pids -= gone  # a pid that ended may be reused by an unrelated process
        self.seen = now


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            for line in fh:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            return int(fh.read().split()[1]) * PAGE_KB
    except OSError:
        return 0


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def run_measured(
    cmd: Sequence[str],
    cwd: Path | None = None,
    interval_s: float = 0.02,
    env: dict[str, str] | None = None,
    timeout_s: float | None = None,
) -> Measured:
    """Run ``cmd`` to completion; stdout/stderr are captured (keep them small).

    With ``timeout_s`` the command and all it started are killed then (``timed_out``)."""
    load = os.getloadavg()[0]
    peak_tree_kb = 0
    stop = threading.Event()
    t0 = time.perf_counter()
    # its own session, so that a timeout ends the command and every process it started
    proc = subprocess.Popen(
        list(cmd), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    timer = None
    if timeout_s is not None:
        timer = threading.Timer(timeout_s, lambda: _kill_group(proc.pid))
        timer.daemon = True
        timer.start()

    def sample() -> None:
        nonlocal peak_tree_kb
        tree = _Tree(proc.pid)
        while not stop.is_set():
            tree.update()
            total = sum(_pss_kb(p) for p in tree.pids)
            peak_tree_kb = max(peak_tree_kb, total)
            stop.wait(interval_s)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    # read the pipes in threads so a chatty child never blocks on a full pipe
    out_chunks: list[bytes] = []
    err_chunks: list[bytes] = []
    assert proc.stdout is not None and proc.stderr is not None
    readers = [
        threading.Thread(target=lambda: out_chunks.append(proc.stdout.read()), daemon=True),  # type: ignore[union-attr]
        threading.Thread(target=lambda: err_chunks.append(proc.stderr.read()), daemon=True),  # type: ignore[union-attr]
    ]
    for t in readers:
        t.start()
    _, status, usage = os.wait4(proc.pid, 0)
    if timer is not None:
        timer.cancel()
    wall = time.perf_counter() - t0
    stop.set()
    sampler.join()
    for t in readers:
        t.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    single = int(usage.ru_maxrss) * 1024  # Linux reports KiB
    tree = peak_tree_kb * 1024
    return Measured(
        wall_s=wall,
        peak_bytes=max(single, tree),
        max_single_rss_bytes=single,
        peak_tree_bytes=tree,
        cpu_s=usage.ru_utime + usage.ru_stime,
        timed_out=timeout_s is not None and wall >= timeout_s and proc.returncode < 0,
        returncode=proc.returncode,
        stdout=b"".join(out_chunks).decode("utf-8", "replace"),
        stderr=b"".join(err_chunks).decode("utf-8", "replace"),
        load_before=load,
    )


def cpu_s() -> float:
    """User + system CPU seconds of this process so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def best_cpu(fn: Callable[[], Any], repeat: int) -> float:
    """The least CPU time of ``repeat`` calls of ``fn`` in this process (user + system:
    steadier than wall time on a shared machine; slower repeats measure the neighbours)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = cpu_s()
        out = fn()
        best = min(best, cpu_s() - t0)
        del out
    return best

"""The window controller of ``gpuprof run``: it follows the step clock while the job runs,
asks every rank for the same profiled steps when a window is due, has each window diagnosed
in a low-priority process, and keeps the session's disk bounded.

Twice a second (:meth:`WindowController.tick`, on its own thread) it reads what the hooks
appended (:class:`~gpuprof.record.steptail.StepTail`), feeds every step's duration to one
change-point test per process (:mod:`gpuprof.record.changepoint`; the steps of profiled
windows are left out, since the profiler slows them), names a consistently slowest rank
(:mod:`gpuprof.record.rankclock`), and lets the planner (:mod:`gpuprof.record.windowplan`)
decide on a window; a request is written to ``windows/<NNNN>/request.json``, which every
rank's hooks read (:mod:`gpuprof_hook_windows`).

A window is recorded when every process that started it has written its trace (or after
:data:`WINDOW_TIMEOUT_S`). Then ``python -m gpuprof.pipeline.windowdiag SESSION N`` analyzes
it at the lowest CPU priority (``nice`` 19), one window at a time, and writes
``diagnosis.json`` and ``report.json`` beside its traces; the latest diagnosis is what the
live line shows. Then windows beyond ``--keep`` lose their traces (their reports stay).

On demand: ``gpuprof trigger SESSION`` writes a demand into ``control/``; ``kill -s RTMIN+1``
of gpuprof's own process asks for a window too. Nothing here may cost the job its run: every
failure is one line in the session's events and the controller goes on or stops.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuprof.record.changepoint import Change, StepChangeDetector
from gpuprof.record.rankclock import SlowRank, slowest_rank
from gpuprof.record.runner import RunObserver
from gpuprof.record.sampler import Sampler
from gpuprof.record.steptail import StepMark, StepTail
from gpuprof.record.windowplan import KeptWindow, WindowOptions, WindowPlanner, to_prune
from gpuprof.session.layout import CONTROL_DIR, HOOKS_DIR, TRACES_DIR, WINDOWS_DIR
from gpuprof.session.windows import (
    DIAGNOSIS_FILE,
    Demand,
    WindowRequest,
    read_demands,
    read_json_small,
    take_demand,
    window_dir,
    write_request,
)
from gpuprof.util import phrases
from gpuprof.util.phrases import duration

TICK_S = 0.5
UNSEEN_S = 1.5  # steps of at most this long ago may not be in the hooks' logs yet
WINDOW_TIMEOUT_S = 120.0  # after its last step, a window waits this long for late traces
SLOWEST_EVERY_S = 2.0
FINISH_WAIT_S = 10.0  # at the end of the run, a diagnosis still running gets this long
RECENT_STEPS = 256
DIAGNOSE_MODULE = "gpuprof.pipeline.windowdiag"

Launch = Callable[[Path, int], "subprocess.Popen[bytes]"]


def launch_diagnosis(session_dir: Path, window: int) -> subprocess.Popen[bytes]:
    """``python -m gpuprof.pipeline.windowdiag SESSION N`` at the lowest CPU priority."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPROF_")}
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    return subprocess.Popen(
        [sys.executable, "-m", DIAGNOSE_MODULE, str(session_dir), str(window)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
        preexec_fn=lambda: os.nice(19),  # noqa: PLW1509 -- nothing else runs between fork and exec
    )



# The signal that asks gpuprof for a window: a real-time signal, which no supervisor sends
# (SIGUSR1/2, which Slurm and others use to warn a job, are the job's and are forwarded to
# it, gpuprof/record/jobsignals.py). ``kill -s RTMIN+1 <gpuprof's pid>``; None where the
# platform has no real-time signals (``gpuprof trigger`` works everywhere).
TRIGGER_SIGNAL: int | None = int(signal.SIGRTMIN) + 1 if hasattr(signal, "SIGRTMIN") else None
TRIGGER_SIGNAL_NAME = "RTMIN+1"


@dataclass
class _Window:
    request: WindowRequest
    started: set[int] = field(default_factory=set)  # pids that opened it
    traced: set[int] = field(default_factory=set)  # pids that wrote its trace
    missed: set[int] = field(default_factory=set)
    passed_s: float | None = None  # when the lead step went past its last step
    state: str = "asked"  # asked, recording, waiting, diagnosing, done
    diagnosis: Mapping[str, Any] | None = None
    pruned: bool = False


@dataclass
class _Process:
    rank: int | None
    detector: StepChangeDetector
    last_step: int = 0
    last_time_s: float | None = None
    durations: deque[float] = field(default_factory=lambda: deque(maxlen=64))


@dataclass(frozen=True)
class WindowsStatus:
    """What the live line shows of the windows: the latest one and the slowest rank."""

    window: str | None = None
    slowest: str | None = None


def top_line(diag: Mapping[str, Any]) -> str | None:
    """A diagnosis's top cause and saving in a few words ("dataloader, saves 38.0 ms/step (31%)")."""
    top = diag.get("top")
    if not isinstance(top, list) or not top or not isinstance(top[0], dict):
        return "no cause stands out" if diag.get("ok") else None
    t = top[0]
    cause = str(t.get("cause")) if isinstance(t.get("cause"), str) else "?"
    saved, pct = t.get("saved_us_per_step"), t.get("savings_pct")
    us, share = t.get("us_per_step"), t.get("pct_of_step")
    if isinstance(saved, (int, float)) and isinstance(pct, (int, float)):
        line = f"{cause}, saves {duration(float(saved))}/step ({pct:.0f}%)"
    elif isinstance(us, (int, float)) and isinstance(share, (int, float)):
        line = f"{cause} {duration(float(us))}/step ({share:.0f}% of the step)"
    else:
        line = cause
    crit, waiting = diag.get("critical_rank"), diag.get("waiting_ranks")
    if isinstance(crit, int) and isinstance(waiting, list) and waiting and all(isinstance(r, int) for r in waiting):
        line += f" on rank {crit}, which {phrases.ranks(waiting)} wait{'s' if len(waiting) == 1 else ''} for"
    return line


class WindowController(RunObserver):
    """Follows the run and asks for windows; see the module docstring."""

    def __init__(
        self,
        session_dir: Path,
        opts: WindowOptions,
        schedule: tuple[int, int, int] | None,
        launch: Launch | None = launch_diagnosis,
        note: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        interval_s: float = TICK_S,
        use_signal: bool = True,
    ) -> None:
        self.root = session_dir
        self.opts = opts
        self.launch = launch
        self.note = note
        self.clock = clock
        self.wall = wall
        self.interval_s = interval_s
        self.use_signal = use_signal
        self.tail = StepTail(session_dir / HOOKS_DIR)
        first_end = 0
        self.first_window: tuple[int, int] | None = None
        if schedule is not None and schedule[2] > 0:
            wait, warmup, active = schedule
            # As the hooks open it: the profiler starts after step 1 (confirmed by its record).
            self.first_window = (1, 1 + wait + warmup + active + 1)
            first_end = self.first_window[1]
        self.planner = WindowPlanner(opts, clock(), busy_until_step=first_end)
        self.windows: dict[int, _Window] = {}
        self.procs: dict[int, _Process] = {}
        # The recent steps the slowest rank is judged on: rank -> (step, seconds to backward),
        # and (step, the lead process's step time).
        self.to_backward: dict[int, deque[tuple[int, float]]] = {}
        self.step_s: deque[tuple[int, float]] = deque(maxlen=RECENT_STEPS)
        self.lead_step = 0
        self.lead_time_s: float | None = None  # when the lead step ended (wall clock)
        self.pending_change: Change | None = None
        self.slow: SlowRank | None = None
        self._slow_at = -math.inf
        self._signals = 0
        self._signals_taken = 0
        self._signal_demands: list[Demand] = []
        self._queue: deque[int] = deque()
        self._running: tuple[int, subprocess.Popen[bytes]] | None = None
        self._latest_diag: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._old_usr1: Any = None
        self._lock = threading.Lock()
        self.errors: list[str] = []

    # -- RunObserver ------------------------------------------------------------------
    def started(self, pid: int, sampler: Sampler | None) -> None:
        for folder in (self.root / WINDOWS_DIR, self.root / CONTROL_DIR):
            with contextlib.suppress(OSError):
                folder.mkdir(exist_ok=True)
        if self.use_signal and TRIGGER_SIGNAL is not None:
            with contextlib.suppress(ValueError, OSError, AttributeError):
                self._old_usr1 = signal.signal(TRIGGER_SIGNAL, self._on_signal)
        self._thread = threading.Thread(target=self._loop, name="gpuprof-windows", daemon=True)
        self._thread.start()

    def finished(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)
        if self._old_usr1 is not None and TRIGGER_SIGNAL is not None:
            with contextlib.suppress(ValueError, OSError):
                signal.signal(TRIGGER_SIGNAL, self._old_usr1)
            self._old_usr1 = None
        self._finish_diagnosis()

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._signals += 1  # read by the controller's thread; an int store is atomic

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.tick()
            except Exception as exc:  # noqa: BLE001  (the job goes on without windows)
                self.errors.append(f"windows stopped: {exc!r}")
                return

    # -- one look at the run ---------------------------------------------------------------
    def tick(self) -> None:
        now = self.clock()
        self.tail.poll()
        steps, recs = self.tail.drain()
        for rec in recs:
            self._take_record(rec, now)
        for mark in steps:
            self._take_step(mark)
        if now - self._slow_at >= SLOWEST_EVERY_S:
            self._slow_at = now
            self.slow = slowest_rank({r: dict(v) for r, v in self.to_backward.items()}, dict(self.step_s))
        self._check_windows(now)
        self._diagnose()  # first: a diagnosis just finished lets the next window be asked for now
        self._plan(now)

    def _skip(self, step: int) -> bool:
        """Steps a profiler slowed (a window's warm-up, steps and trace export)."""
        if self.first_window is not None and self.first_window[0] <= step <= self.first_window[1] + 1:
            return True
        # Windows are asked for in step order and the steps read are the recent ones: only the
        # latest windows can hold them (this runs once per step followed).
        for w in itertools.islice(reversed(self.windows.values()), 3):
            r = w.request
            if r.start_step - r.warmup - 1 <= step <= r.last_step + 2:
                return True
        return False

    def _take_step(self, m: StepMark) -> None:
        p = self.procs.get(m.pid)
        if p is None:
            p = self.procs[m.pid] = _Process(rank=m.rank, detector=StepChangeDetector(self.opts.test))
        if m.step <= p.last_step:
            return  # a line read twice, or a process whose step count went back
        prev_t = p.last_time_s if m.step == p.last_step + 1 else None
        p.last_step, p.last_time_s = m.step, m.time_unix_s
        if m.step >= self.lead_step:
            self.lead_step, self.lead_time_s = m.step, m.time_unix_s
        if prev_t is None:
            return
        dt = m.time_unix_s - prev_t
        if m.rank is not None and m.backward_unix_s is not None and m.backward_unix_s >= prev_t:
            per = self.to_backward.get(m.rank)
            if per is None:
                per = self.to_backward[m.rank] = deque(maxlen=RECENT_STEPS)
            per.append((m.step, m.backward_unix_s - prev_t))
        if self._skip(m.step):
            return
        p.durations.append(dt)
        if m.step >= self.lead_step - 1:
            self.step_s.append((m.step, dt))
        change = p.detector.add(m.step, dt)
        pending = self.pending_change
        # Another rank declaring the same change keeps the first; a later change replaces it.
        if change is not None and (pending is None or change.step > pending.detected_step):
            self.pending_change = change

    def _take_record(self, rec: Mapping[str, Any], now: float) -> None:
        kind, pid = rec.get("kind"), rec.get("pid")
        w = rec.get("window")
        if kind == "profiler_start" and not w:
            steps = rec.get("window_steps")
            if isinstance(steps, list) and len(steps) == 2 and all(isinstance(x, int) for x in steps):
                self.first_window = (int(rec.get("step") or 1), steps[1] + 1)
            return
        if not isinstance(w, int) or w not in self.windows or not isinstance(pid, int):
            return
        win = self.windows[w]
        if kind == "profiler_start":
            win.started.add(pid)
            win.state = "recording" if win.state == "asked" else win.state
        elif kind == "trace":
            win.traced.add(pid)
        elif kind == "window_missed":
            win.missed.add(pid)

    def _check_windows(self, now: float) -> None:
        exited = {pid for pid, p in self.tail.processes.items() if p.exited}
        for n, w in sorted(self.windows.items()):
            if w.state not in ("asked", "recording"):
                continue
            if self.lead_step > w.request.last_step + 1 and w.passed_s is None:
                w.passed_s = now
            if w.started and w.started <= (w.traced | exited):
                self._recorded(n, w)
            elif w.passed_s is not None and now - w.passed_s >= WINDOW_TIMEOUT_S:
                self._recorded(n, w)  # a process that never wrote its trace: diagnose what there is

    def _recorded(self, n: int, w: _Window) -> None:
        w.state = "waiting"
        if w.traced:
            self._queue.append(n)
        else:
            w.state = "done"  # no rank recorded it (every one was past its start, or stopped)

    def _demands(self) -> list[Demand]:
        """Demands from ``control/`` and from :data:`TRIGGER_SIGNAL`, oldest first."""
        while self._signals_taken < self._signals:
            self._signals_taken += 1
            self._signal_demands.append(Demand(name=f"signal-{self._signals_taken}", requested_unix_s=self.wall()))
        return sorted(read_demands(self.root) + self._signal_demands, key=lambda d: d.requested_unix_s)

    def _plan(self, now: float) -> None:
        demands = self._demands()
        durations = self._lead_durations()
        step_s = statistics.median(durations) if durations else None
        change, self.pending_change = self.pending_change, None  # taken now, or dropped (a window is on its way)
        # A window waiting for its diagnosis holds traces: no other is asked for (but on
        # demand) until it is diagnosed, so windows never pile up faster than that.
        ready = self._running is None and not self._queue
        reached = self._reached(step_s)
        req = self.planner.tick(now, self.wall(), reached, step_s, change, demands, ready=ready)
        if req is None:
            # A change keeps waiting until a window starts after it (one in flight now began
            # before it, or the last one is still being diagnosed, or the gap is not over).
            if change is not None and not any(w.request.start_step >= change.step for w in self.windows.values()):
                self.pending_change = change
            return
        try:
            write_request(self.root, req)
        except OSError as exc:
            self.errors.append(f"window {req.window} not asked for: {exc}")
            return
        self.windows[req.window] = _Window(req)
        if req.reason == "change":
            for p in self.procs.values():
                p.detector.reset()  # every rank saw the change: learn the new level, do not trigger again
        if req.demand is not None:
            if req.demand.startswith("signal-"):
                self._signal_demands = [d for d in self._signal_demands if d.name != req.demand]
            else:
                take_demand(self.root, Demand(req.demand, 0.0))

    def _reached(self, step_s: float | None) -> int:
        """The furthest step any rank has reached by now: the last one logged, plus the steps
        the time since it holds, at most :data:`UNSEEN_S` of them (the hooks write their log
        every second and the controller looks every half second: older steps are in the log,
        so a job that logged nothing for longer has stalled rather than run ahead)."""
        t = self.lead_time_s
        if t is None or not step_s or step_s <= 0:
            return self.lead_step
        ahead = min(max(0.0, self.wall() - t), UNSEEN_S) / step_s
        return self.lead_step + int(ahead)

    def _lead_durations(self) -> list[float]:
        if not self.procs:
            return []
        lead = max(self.procs.values(), key=lambda p: p.last_step)
        return list(lead.durations)[-5:]  # the latest steps: the level after a change, at once

    # -- diagnosis and pruning ------------------------------------------------------------
    def _diagnose(self) -> None:
        if self._running is not None:
            n, proc = self._running
            if proc.poll() is None:
                return
            self._running = None
            self._diagnosed(n)
        if not self._queue or self.launch is None:
            return
        n = self._queue.popleft()
        self.windows[n].state = "diagnosing"
        try:
            self._running = (n, self.launch(self.root, n))
        except OSError as exc:
            self.errors.append(f"window {n} not diagnosed: {exc}")
            self.windows[n].state = "done"

    def _diagnosed(self, n: int) -> None:
        w = self.windows[n]
        w.state = "done"
        doc = read_json_small(window_dir(self.root, n) / DIAGNOSIS_FILE)
        w.diagnosis = doc if isinstance(doc, dict) else None
        with self._lock:
            self._latest_diag = n
        if self.note is not None and w.diagnosis is not None:
            line = top_line(w.diagnosis)
            r = w.request
            self.note(f"window {n} (steps {r.start_step}-{r.last_step}, {r.detail}): {line or 'not diagnosed'}")
        self._prune()

    def _prune(self) -> None:
        kept = [KeptWindow(n, w.state == "done", w.pruned, _step_us(w.diagnosis)) for n, w in self.windows.items()]
        for n in to_prune(kept, self.opts.keep):
            folder = window_dir(self.root, n)
            shutil.rmtree(folder / TRACES_DIR, ignore_errors=True)  # its report and diagnosis stay
            self.windows[n].pruned = True

    def _finish_diagnosis(self) -> None:
        """The run ended: give a running diagnosis a moment, then stop it (the run's report
        diagnoses what is left)."""
        if self._running is None:
            return
        n, proc = self._running
        try:
            proc.wait(timeout=FINISH_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5.0)
            self._running = None
            return
        self._running = None
        self._diagnosed(n)

    # -- what the live line shows ------------------------------------------------------------
    def status(self) -> WindowsStatus:
        window = None
        with self._lock:
            latest = self._latest_diag
        current = max((n for n, w in self.windows.items() if w.state in ("asked", "recording")), default=None)
        if current is not None:
            r = self.windows[current].request
            window = f"window {current}: steps {r.start_step}-{r.last_step} ({r.reason})"
        elif latest is not None:
            w = self.windows[latest]
            line = top_line(w.diagnosis) if w.diagnosis is not None else None
            window = f"window {latest} @{w.request.start_step}: {line or 'not diagnosed'}"
        slowest = None
        s = self.slow
        if s is not None:
            slowest = f"slowest rank {s.rank} (+{duration(s.excess_s * 1e6)} before backward)"
        return WindowsStatus(window=window, slowest=slowest)


def _step_us(diag: Mapping[str, Any] | None) -> float | None:
    v = diag.get("step_us") if diag is not None else None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None




class Observers(RunObserver):
    """Several run observers as one (the live line and the window controller); each is
    told in turn, and one that fails does not keep the others from being told."""

    def __init__(self, *observers: RunObserver | None) -> None:
        self.observers = [o for o in observers if o is not None]

    def _each(self, call: Callable[[RunObserver], None]) -> None:
        for o in self.observers:
            with contextlib.suppress(Exception):
                call(o)

    def started(self, pid: int, sampler: Sampler | None) -> None:
        self._each(lambda o: o.started(pid, sampler))

    def paused(self) -> None:
        self._each(lambda o: o.paused())

    def resumed(self) -> None:
        self._each(lambda o: o.resumed())

    def finished(self) -> None:
        self._each(lambda o: o.finished())


__all__ = ["Observers", "WindowController", "WindowsStatus", "launch_diagnosis", "top_line"]

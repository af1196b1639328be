"""The live status line of ``gpuprof run``, drawn on stderr while the job runs.

What it shows: elapsed time; optimizer steps and steps per second (from the hook logs,
followed incrementally by :class:`~gpuprof.record.hooktail.HookTail`); the profiler phase
(waiting / warm-up / recording step k of n / trace written); the windows after the first
(the one being recorded, else the latest one's top cause and saving) and a rank that is
consistently slowest (:mod:`gpuprof.record.windows`); and per GPU the utilization,
memory used/total and power of the sampler's latest poll. At most twice a second, and only
when stderr is a terminal.

How it stays out of the job's way: the job writes to the same terminal, straight from its
own processes, so the usual redraw-in-place (rich ``Live``) would erase or split the job's
lines. Instead the bottom row is taken out of the terminal's scrolling region (DECSTBM, as
``apt`` draws its progress bar): the job's lines scroll in the rows above, untouched, and
the status is redrawn in the bottom row with the cursor saved and restored around it, in
one write. The region is handed back when the job stops (Ctrl-Z) or ends. Nothing goes to
stdout. rich lays the line out (:class:`StatusLine`), so it fits any width.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text

from gpuprof.record.hooktail import HookTail, ProcessState
from gpuprof.record.runner import RunObserver
from gpuprof.record.sampler import Sampler

REFRESH_S = 0.5  # 2 Hz at most: a status line, not an animation
RATE_WINDOW_S = 10.0  # steps per second over the job's last seconds of steps
STALL_AFTER_S = 5.0  # say "no step for N s" after this long (or 10 step times) without one
SEP = " │ "


@dataclass(frozen=True)
class GpuStatus:
    """The latest poll of one GPU; ``None`` = unsupported or not polled yet."""

    index: int
    util_pct: float | None
    mem_used_bytes: int | None
    mem_total_bytes: int | None
    power_w: float | None


@dataclass(frozen=True)
class StatusSnapshot:
    """Everything the status line shows, as plain data (units in the names)."""

    elapsed_s: float
    steps: int | None  # None: no process of the job has logged a step yet
    steps_per_s: float | None
    since_step_s: float | None  # set when the job has not stepped for a while
    phase: str | None  # the profiler phase, None when there is no profiler
    gpus: tuple[GpuStatus, ...] = ()
    processes: int = 0  # Python processes with hooks
    window: str | None = None  # the latest window after the first, and what it found
    slowest: str | None = None  # a rank that is consistently slowest


def profiler_phase(processes: Iterable[ProcessState], schedule: tuple[int, int, int] | None) -> str | None:
    """The profiler's phase as the first process that started it tells (all ranks step together).

    ``schedule`` is (wait, warm-up, active) in optimizer steps; ``None`` or active 0: no profiler.
    Mirrors the hooks: the profiler starts after step s0, and while the job runs step
    ``n + 1`` the profiler is at step ``n - s0`` of its schedule.
    """
    if schedule is None or schedule[2] <= 0:
        return None
    procs = sorted(processes, key=lambda p: (p.rank if p.rank is not None else 1 << 30, p.pid))
    written = sum(p.trace_written for p in procs)
    if written:
        return "trace written" if written == 1 else f"{written} traces written"
    if any(p.profiler_note for p in procs):
        return "off (the job runs its own profiler)"
    if any(e in ("profiler", "trace export") for p in procs for e in p.errors):
        return "failed (see the session's hook log)"
    started = [p for p in procs if p.profiler_start_step is not None]
    wait, warmup, active = schedule
    if not started:
        return f"waiting ({wait + warmup} steps, then {active} recorded)"
    p = started[0]
    k = p.step - (p.profiler_start_step or 0)
    if k < wait:
        return f"waiting ({wait - k} more step{'s' if wait - k != 1 else ''})"
    if k < wait + warmup:
        return "warm-up"
    if k < wait + warmup + active:
        return f"recording step {k - wait - warmup + 1} of {active}"
    return "writing the trace"


class StepRate:
    """Steps per second of the leading process, over its last :data:`RATE_WINDOW_S` of steps.

    Uses the step records' own times (the job's clock), so the rate does not depend on
    when the log was flushed or polled.
    """

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self.window_s = window_s
        self._points: dict[int, deque[tuple[float, int]]] = {}

    def update(self, p: ProcessState) -> float | None:
        if p.step_time_unix_s is None:
            return None
        pts = self._points.setdefault(p.pid, deque())
        if not pts or pts[-1][1] != p.step:
            pts.append((p.step_time_unix_s, p.step))
        while len(pts) > 2 and pts[-1][0] - pts[1][0] >= self.window_s:
            pts.popleft()
        (t0, s0), (t1, s1) = pts[0], pts[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 and s1 > s0 else None


def _gib(n: int | None) -> str:
    return "N/A" if n is None else f"{n / 2**30:.1f}"


def _pct(v: float | None) -> str:
    return "N/A" if v is None else f"{v:.0f}%"


def _elapsed(s: float) -> str:
    s = int(s)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def _gpu_each(g: GpuStatus) -> str:
    mem = f"{_gib(g.mem_used_bytes)}/{_gib(g.mem_total_bytes)} GiB"
    power = "N/A" if g.power_w is None else f"{g.power_w:.0f} W"
    return f"GPU{g.index} {_pct(g.util_pct)} {mem} {power}"


def _gpu_summary(gpus: tuple[GpuStatus, ...]) -> str:
    """All GPUs in one field: mean and lowest utilization (a straggler shows), memory, power."""
    utils = [(g.util_pct, g.index) for g in gpus if g.util_pct is not None]
    util = "util N/A"
    if utils:
        lo, lo_gpu = min(utils)
        util = f"util {sum(u for u, _ in utils) / len(utils):.0f}% (min {lo:.0f}% GPU{lo_gpu})"
    used = [g.mem_used_bytes for g in gpus if g.mem_used_bytes is not None]
    total = [g.mem_total_bytes for g in gpus if g.mem_total_bytes is not None]
    mem = f"mem {_gib(max(used) if used else None)}/{_gib(max(total) if total else None)} GiB max"
    watts = [g.power_w for g in gpus if g.power_w is not None]
    power = f"{sum(watts) / 1000:.1f} kW" if watts else "power N/A"
    return f"{len(gpus)} GPUs {util}, {mem}, {power}"


class StatusLine:
    """A :class:`StatusSnapshot` as one line; laid out at render time to fit the width."""

    def __init__(self, snapshot: StatusSnapshot) -> None:
        self.snapshot = snapshot

    def _fields(self, gpu_fields: list[str]) -> list[Text]:
        s = self.snapshot
        out = [Text.assemble(("gpuprof ", "bold cyan"), (_elapsed(s.elapsed_s), "cyan"))]
        if s.steps is None:
            out.append(Text("no step yet", style="dim"))
        else:
            step = Text(f"step {s.steps}", style="bold")
            if s.steps_per_s is not None:
                step.append(f" · {s.steps_per_s:.3g}/s" if s.steps_per_s < 1000 else f" · {s.steps_per_s:.0f}/s")
            if s.since_step_s is not None:
                step.append(f" · no step for {_elapsed(s.since_step_s)}", style="yellow")
            out.append(step)
        if s.phase is not None:
            style = "magenta" if s.phase.startswith("recording") else ""
            out.append(Text.assemble("profiler ", (s.phase, style)))
        if s.window is not None:
            out.append(Text(s.window, style="magenta" if "steps" in s.window else ""))
        if s.slowest is not None:
            out.append(Text(s.slowest, style="yellow"))
        out.extend(Text(f) for f in gpu_fields)
        return out

    def layout(self, width: int) -> Text:
        """Per-GPU fields when they fit, else one summary field; cut with … at the edge."""
        gpus = self.snapshot.gpus
        candidates = [[_gpu_each(g) for g in gpus]]
        if len(gpus) > 1:
            candidates.append([_gpu_summary(gpus)])
        line = Text()
        for gpu_fields in candidates:
            line = Text()
            for i, f in enumerate(self._fields(gpu_fields)):
                if i:
                    line.append(SEP, style="dim")
                line.append_text(f)
            if line.cell_len <= width:
                return line
        line.truncate(width, overflow="ellipsis")
        return line

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.layout(options.max_width)


class BottomRow:
    """Draws one line in the terminal's bottom row, outside the scrolling region.

    ``write`` sends text to the terminal in one call; ``size`` returns (columns, rows).
    """

    def __init__(self, write: Callable[[str], None], size: Callable[[], tuple[int, int]]) -> None:
        self.write = write
        self.size = size
        self.rows: int | None = None  # the terminal height the region was set for

    def setup(self) -> bool:
        _, rows = self.size()
        if rows < 3:
            return False
        # A new line first, so that a cursor on the last row moves up out of it; then the
        # region without the last row (setting it homes the cursor: save/restore around it).
        self.write(f"\n\0337\033[1;{rows - 1}r\0338\033[1A")
        self.rows = rows
        return True

    def draw(self, line: str) -> None:
        cols, rows = self.size()
        if self.rows is None:
            return
        if rows != self.rows:  # resized: set the region again for the new height
            self.teardown()
            if not self.setup():
                return
        self.write(f"\0337\033[{self.rows};1H\033[2K{line}\0338")

    def teardown(self) -> None:
        if self.rows is None:
            return
        # Clear the status row, then give the whole screen back to scrolling.
        self.write(f"\0337\033[{self.rows};1H\033[2K\033[r\0338")
        self.rows = None


class LiveStatus(RunObserver):
    """The run observer that keeps the status line up to date while the job runs."""

    def __init__(
        self,
        session_dir: Path,
        schedule: tuple[int, int, int] | None,
        console: Console,
        row: BottomRow,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        interval_s: float = REFRESH_S,
        windows: Callable[[], Any] | None = None,
    ) -> None:
        self.tail = HookTail(session_dir / "hooks")
        self.windows = windows  # () -> WindowsStatus (gpuprof.record.windows), when windows follow the run
        self.schedule = schedule
        self.console = console
        self.row = row
        self.clock = clock
        self.wall = wall
        self.interval_s = interval_s
        self.rate = StepRate()
        self.sampler: Sampler | None = None
        self.start_s = clock()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._drawing = False
        self._old_ttou: Any = None

    # -- the data -----------------------------------------------------------------------
    def snapshot(self) -> StatusSnapshot:
        self.tail.poll()
        procs = list(self.tail.processes.values())
        steps = steps_per_s = since = None
        stepping = [p for p in procs if p.step > 0]
        if stepping:
            lead = max(stepping, key=lambda p: (p.step, -p.pid))
            steps = lead.step
            steps_per_s = self.rate.update(lead)
            if lead.step_time_unix_s is not None:
                idle = self.wall() - lead.step_time_unix_s
                typical = 10.0 / steps_per_s if steps_per_s else 0.0
                since = idle if idle >= max(STALL_AFTER_S, typical) else None
        win = self.windows() if self.windows is not None else None
        return StatusSnapshot(
            window=getattr(win, "window", None),
            slowest=getattr(win, "slowest", None),
            elapsed_s=self.clock() - self.start_s,
            steps=steps,
            steps_per_s=steps_per_s,
            since_step_s=since,
            phase=profiler_phase(procs, self.schedule) if procs else None,
            gpus=self._gpus(),
            processes=len(procs),
        )

    def _gpus(self) -> tuple[GpuStatus, ...]:
        if self.sampler is None:
            return ()
        latest: dict[int, Any] = dict(self.sampler.latest)
        return tuple(
            GpuStatus(
                index=i,
                util_pct=s.util_gpu_pct,
                mem_used_bytes=s.mem_used_bytes,
                mem_total_bytes=s.mem_total_bytes,
                power_w=s.power_w,
            )
            for i, s in sorted(latest.items())
        )

    def render(self, width: int | None = None) -> str:
        """The status line as the terminal gets it (with colours), at most ``width`` columns."""
        with self.console.capture() as cap:
            self.console.print(StatusLine(self.snapshot()), end="", no_wrap=True, overflow="ellipsis", crop=True,
                               width=width)
        return cap.get().rstrip("\n")

    # -- the drawing --------------------------------------------------------------------
    def _draw(self) -> None:
        with self._lock:
            if self._drawing:
                cols, _ = self.row.size()
                self.row.draw(self.render(max(10, cols - 1)))  # never the last column: no wrap

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._draw()
            except Exception:  # the display must never disturb the run: stop drawing
                self.finished()
                return

    def started(self, pid: int, sampler: Sampler | None) -> None:
        self.sampler = sampler
        # gpuprof draws while the job owns the terminal: with `stty tostop`, a background
        # write would stop gpuprof by SIGTTOU. Ignored, the write goes through (POSIX). Set
        # after the job started, so the job does not inherit it.
        try:
            self._old_ttou = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
        except (ValueError, OSError, AttributeError):
            self._old_ttou = None
        with self._lock:
            self._drawing = self.row.setup()
        if self._drawing:
            self._draw()
            self._thread = threading.Thread(target=self._loop, name="gpuprof-live", daemon=True)
            self._thread.start()

    def paused(self) -> None:
        with self._lock:
            if self._drawing:
                self.row.teardown()
                self._drawing = False

    def resumed(self) -> None:
        with self._lock:
            if self._thread is not None and not self._stop.is_set():
                self._drawing = self.row.setup()

    def finished(self) -> None:
        self._stop.set()
        with self._lock:
            self.row.teardown()
            self._drawing = False
        if self._old_ttou is not None:
            try:
                signal.signal(signal.SIGTTOU, self._old_ttou)
                self._old_ttou = None
            except ValueError:  # not the main thread: restored when the main thread finishes
                pass
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)


def terminal_live_status(session_dir: Path, schedule: tuple[int, int, int] | None, fd: int = 2,
                         windows: Callable[[], Any] | None = None) -> LiveStatus | None:
    """A live status on the terminal at ``fd`` (stderr), or ``None`` when it is not a terminal."""
    try:
        if not os.isatty(fd) or os.environ.get("TERM", "") in ("dumb", ""):
            return None
        os.get_terminal_size(fd)
    except OSError:
        return None
    console = Console(file=sys.__stderr__, force_terminal=True)  # renders only; drawing goes through ``write``

    def write(text: str) -> None:
        os.write(fd, text.encode("utf-8", "replace"))

    def size() -> tuple[int, int]:
        s = os.get_terminal_size(fd)
        return s.columns, s.lines

    return LiveStatus(session_dir, schedule, console, BottomRow(write, size), windows=windows)

"""Torch hooks injected by ``gpuprof run`` into Python children (no change to user code).

:func:`arm` (called from gpuprof's ``sitecustomize``) watches for ``import torch``; once
torch is loaded it registers one global optimizer-step post hook. That hook is the step
clock: it counts steps of the first optimizer that steps (a second optimizer in the same
job does not double-count), logs the step boundary, reads ``torch.cuda.memory_stats()``
when CUDA is in use, and drives the ``torch.profiler`` window of a few steps whose trace
the session analyzes.

The hooks are three modules of this folder, imported by their own names (``sitecustomize``
puts the folder on ``sys.path``): this one, the step clock and its records;
:mod:`gpuprof_hook_profiler`, the profiler window, its trace, SIGTERM inside it and the
job's own profiler; :mod:`gpuprof_hook_files`, the hook log and the trace's name, written
so that a full disk loses no record silently.

It also wraps ``torch.autograd.backward`` (which ``Tensor.backward`` calls) to note when
each step's first backward pass starts: the step record's ``backward_unix_s``, from which
``gpuprof run`` names a rank the others wait for (:mod:`gpuprof.record.rankclock`). When
``gpuprof run`` follows the run with more windows (``GPUPROF_WINDOWS=1``), the hook reads
their requests from the session folder every half second (:mod:`gpuprof_hook_windows`).

Outside the profiler's active window a step costs a counter increment, one clock read,
two comparisons and one buffered line; a backward pass, one clock read more. Any error in here is logged to the session's hook log and the
failing part switches itself off; the user's job never sees an exception from gpuprof.

Configuration (set by ``gpuprof run``): ``GPUPROF_SESSION_DIR``, ``GPUPROF_HOOKS``
(``0`` = off), ``GPUPROF_PROFILE`` (``wait,warmup,active`` in steps; active ``0`` = no
profiler), ``GPUPROF_WINDOWS`` (``1``: read later windows' requests). Standard library and a lazily imported torch only: these files must load in
any interpreter the user runs.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import sys
import time
import traceback
from typing import Any

from gpuprof_hook_files import HookLog
from gpuprof_hook_profiler import _ProfilerWindow
from gpuprof_hook_windows import WindowRequests

# torch.cuda.memory_stats() key -> session column (kept in sync with gpuprof.session.layout).
_MEMORY_STAT_KEYS = {
    "allocated_bytes.all.current": "allocated_bytes",
    "allocated_bytes.all.peak": "allocated_peak_bytes",
    "reserved_bytes.all.current": "reserved_bytes",
    "reserved_bytes.all.peak": "reserved_peak_bytes",
    "num_alloc_retries": "alloc_retries",
    "num_ooms": "ooms",
    "num_device_alloc": "device_allocs",
    "num_device_free": "device_frees",
}
_FLUSH_INTERVAL_S = 1.0
# memory_stats() builds a dict of a few hundred entries; on a very short step that can cost
# more than we allow. Reading it every N steps keeps its cost under this share of a step
# (the retry / OOM counters are cumulative, so a sparser reading loses none of them).
_MEMORY_BUDGET = 0.002
_DEFAULT_SCHEDULE = (5, 2, 3)


def _env_rank() -> int | None:
    """``RANK`` from the environment (torchrun, Slurm wrappers), else ``None`` (unknown)."""
    raw = os.environ.get("RANK")
    if raw is None or not raw.strip():
        return None
    try:
        return int(raw)
    except ValueError:
        return None


def _parse_schedule(text: str | None) -> tuple[int, int, int]:
    if not text:
        return _DEFAULT_SCHEDULE
    try:
        wait, warmup, active = (max(0, int(x)) for x in text.split(","))
    except ValueError:
        return _DEFAULT_SCHEDULE
    return wait, warmup, active


class _Hooks(_ProfilerWindow):
    """All hook state of one process (the profiler window's in :class:`_ProfilerWindow`)."""

    def __init__(self, session_dir: str, schedule: tuple[int, int, int]) -> None:
        super().__init__(schedule)
        self.session_dir = session_dir
        self.schedule = schedule
        self.rank = _env_rank()  # None: unknown (no RANK); torch.distributed may know later
        self.pid = os.getpid()
        self.step = 0
        self.clock_opt_id: int | None = None
        self.torch: Any = None
        self.cuda_checked = False
        self.memory_on = False
        self.memory_every = 1  # read memory_stats() every this many steps
        self.prev_step_s: float | None = None
        self.step_dt_s: float | None = None  # moving average of the step time, seconds
        self.log: Any = None
        self.last_flush = time.time()  # wall clock: the hot path reads only one clock
        self.disabled = False
        self.forked = False
        self.backward_s = 0.0  # when this step's first backward started (wall clock), 0.0: none yet
        self.next_poll_s = float("inf")  # when to look for window requests next (never without windows)
        if os.environ.get("GPUPROF_WINDOWS") == "1":
            self.requests = WindowRequests(session_dir)
            self.next_poll_s = 0.0
        self._step_line, self._step_line_b = self._step_lines()

    # -- the log ------------------------------------------------------------------------
    def _log_path(self) -> str:
        hooks_dir = os.path.join(self.session_dir, "hooks")
        os.makedirs(hooks_dir, exist_ok=True)
        name = f"rank{self.rank}-{self.pid}.jsonl" if self.rank is not None else f"pid{self.pid}.jsonl"
        return os.path.join(hooks_dir, name)

    def _open_log(self) -> None:
        self.log = HookLog(self._log_path)

    def _step_lines(self) -> tuple[str, str]:
        # The hot path formats step lines by hand: json.dumps per step costs more than the step.
        rank = "null" if self.rank is None else str(self.rank)
        head = '{"time_unix_s":%.6f,"kind":"step","rank":' + rank + ',"pid":' + str(self.pid) + ',"step":%d'
        return head + "}\n", head + ',"backward_unix_s":%.6f}\n'

    def _write_step(self, now: float) -> None:
        b = self.backward_s
        if b:
            self.log.write(self._step_line_b % (now, self.step, b))
            self.backward_s = 0.0
        else:
            self.log.write(self._step_line % (now, self.step))

    def before_fork(self) -> None:
        # A forked child inherits our write buffer: empty it first, so no line is written twice.
        try:
            self.flush()
        except Exception:
            pass

    def after_fork_in_child(self) -> None:
        """A forked child (a DataLoader worker, a Hogwild trainer) gets its own, lazily created log."""
        self.pid = os.getpid()
        self._step_line, self._step_line_b = self._step_lines()
        self.log = HookLog(self._log_path)
        self.next_poll_s = float("inf")  # windows are the parent's (see _forget_window_in_child)
        self._forget_window_in_child()
        self.clock_opt_id = None
        self.step = 0
        self.forked = True

    def record(self, kind: str, **fields: Any) -> None:
        if self.log is None:
            return
        rec = {"time_unix_s": time.time(), "kind": kind, "rank": self.rank, "pid": self.pid}
        rec.update(fields)
        self.log.write(json.dumps(rec, default=str) + "\n")

    def error(self, where: str, exc: BaseException) -> None:
        """Log a hook failure in the session; never re-raise into the user's code."""
        try:
            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=6))
            self.record("error", where=where, message=f"{where}: {exc!r}", traceback=tb)
            self.flush()
        except Exception:
            pass

    def flush(self) -> None:
        if self.log is not None:
            self.log.flush()
        self.last_flush = time.time()

    def write_problem(self) -> str | None:
        """One line on what of this process's records could not be written, if anything."""
        log = self.log
        parts = []
        if self.trace_error:
            parts.append(self.trace_error)
        if log is not None and (log.error or log.lines_lost):
            lost = f" ({log.lines_lost} hook records lost)" if log.lines_lost else ""
            parts.append(f"cannot write {log.path or 'the hook log'}: {log.error or 'not written'}{lost}")
        return "; ".join(parts) or None

    # -- installation -------------------------------------------------------------------
    def on_torch_imported(self, torch: Any) -> None:
        self.torch = torch
        self._open_log()
        self.record("start", argv=sys.argv, torch_version=getattr(torch, "__version__", None),
                    schedule={"wait": self.schedule[0], "warmup": self.schedule[1], "active": self.schedule[2]})
        self.flush()
        from torch.optim.optimizer import register_optimizer_step_post_hook

        register_optimizer_step_post_hook(self.post_step)
        try:
            self._watch_backward(torch)
        except Exception as exc:  # noqa: BLE001  (without it no rank is named slowest; nothing else changes)
            self.error("backward watch", exc)
        try:
            self._watch_profilers(torch)
        except Exception as exc:  # without it, a job's own profiler collides with gpuprof's (as before)
            self.error("profiler watch", exc)
        atexit.register(self.at_exit)
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(before=self.before_fork, after_in_child=self.after_fork_in_child)

    def _watch_backward(self, torch: Any) -> None:
        """Note when each step's first backward pass starts (``torch.autograd.backward``,
        which ``Tensor.backward`` looks up at every call)."""
        autograd = torch.autograd
        original = getattr(autograd, "backward", None)
        if original is None or getattr(original, "_gpuprof_watched", False):
            return
        import functools

        hooks = self

        @functools.wraps(original)
        def backward(*args: Any, **kwargs: Any) -> Any:
            if not hooks.backward_s:
                hooks.backward_s = time.time()
            return original(*args, **kwargs)

        backward._gpuprof_watched = True  # type: ignore[attr-defined]
        autograd.backward = backward

    # -- the per-step hook --------------------------------------------------------------
    def post_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """Runs after every ``optimizer.step()`` of the job: keep the common path short."""
        if self.disabled:
            return
        try:
            if id(optimizer) != self.clock_opt_id:
                if self.clock_opt_id is not None:
                    return  # another optimizer of the same job: its steps are not ours to count
                self.clock_opt_id = id(optimizer)
            self.step += 1
            now = time.time()
            if (self.profiler_done and self.cuda_checked and not self.memory_on and now < self.next_poll_s
                    and self.step < self.window_at):
                self._write_step(now)  # the steady state
            else:
                self._slow_step(now)
            if now - self.last_flush >= _FLUSH_INTERVAL_S or now < self.last_flush:
                self.flush()
        except Exception as exc:
            self.disabled = True  # one failure: stop hooking steps, keep the job running
            self.error("step hook", exc)

    def _slow_step(self, now: float) -> None:
        if self.prev_step_s is not None:
            dt = now - self.prev_step_s
            self.step_dt_s = dt if self.step_dt_s is None else 0.9 * self.step_dt_s + 0.1 * dt
        self.prev_step_s = now
        if not self.cuda_checked or (self.memory_on and self.step % self.memory_every == 0):
            self._memory_step(now)
        else:
            self._write_step(now)
        if now >= self.next_poll_s and self.requests is not None:
            self._poll_windows(now)
            self.next_poll_s = self.requests.next_poll_s if self.requests is not None else float("inf")
        elif self.requests is None:
            self.next_poll_s = float("inf")
        if not self.profiler_done:
            self._profiler_step()
        elif self.step >= self.window_at:
            self._open_window()

    def _memory_step(self, now: float) -> None:
        cuda = self.torch.cuda
        stats: dict[str, Any] = {}
        if not self.cuda_checked:
            # Only once CUDA is initialized by the job: never initialize it ourselves.
            self.memory_on = bool(cuda.is_available() and cuda.is_initialized())
            self.cuda_checked = self.memory_on or self.step >= 3
        t0 = time.perf_counter()
        if self.memory_on:
            try:
                raw = cuda.memory_stats()
                stats = {ours: raw.get(key) for key, ours in _MEMORY_STAT_KEYS.items()}
            except Exception as exc:
                self.memory_on = False
                self.error("memory_stats", exc)
        if self.backward_s:
            stats["backward_unix_s"] = self.backward_s
            self.backward_s = 0.0
        self.record("step", step=self.step, **stats)
        if self.memory_on and self.step_dt_s:
            # What this memory record cost (the query and the JSON line) sets how often to take it.
            cost_s = time.perf_counter() - t0
            self.memory_every = max(1, min(1000, math.ceil(cost_s / (_MEMORY_BUDGET * self.step_dt_s))))

    def _report_write_problem(self) -> None:
        problem = self.write_problem()
        if problem:
            where = f"rank {self.rank}" if self.rank is not None else "torch hooks"
            try:
                sys.stderr.write(f"gpuprof: {where} (pid {self.pid}): {problem}\n")
                sys.stderr.flush()
            except Exception:
                pass

    def at_exit(self) -> None:
        if self.forked and self.step == 0:
            return  # a forked helper process that never trained: leave no file behind
        try:
            self._stop_own_profiler()
            self.record("exit", steps=self.step)
            if self.log is not None:
                self.log.close()
        except Exception as exc:
            self.error("exit", exc)
        self._report_write_problem()



_HOOKS: _Hooks | None = None


class _TorchWatcher:
    """A one-shot meta-path finder: lets ``import torch`` proceed, then installs the hooks."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "torch":
            return None
        sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: Any) -> None:
            original(module)
            _on_torch(module)

        # Patch this loader instance only (one per module): torch keeps its real loader.
        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _on_torch(torch: Any) -> None:
    if _HOOKS is None:
        return
    try:
        _HOOKS.on_torch_imported(torch)
    except Exception as exc:
        _HOOKS.error("install", exc)


def arm() -> None:
    """Install the hooks now if torch is loaded, else when it gets imported."""
    global _HOOKS
    session = os.environ.get("GPUPROF_SESSION_DIR")
    if not session or _HOOKS is not None:
        return
    _HOOKS = _Hooks(session, _parse_schedule(os.environ.get("GPUPROF_PROFILE")))
    if "torch" in sys.modules:
        _on_torch(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _TorchWatcher())  # type: ignore[arg-type]

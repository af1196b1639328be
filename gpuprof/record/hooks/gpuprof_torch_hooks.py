"""Torch hooks injected by ``gpuprof run`` into Python children (no change to user code).

:func:`arm` (called from gpuprof's ``sitecustomize``) watches for ``import torch``; once
torch is loaded it registers one global optimizer-step post hook. That hook is the step
clock: it counts steps of the first optimizer that steps (a second optimizer in the same
job does not double-count), logs the step boundary, reads ``torch.cuda.memory_stats()``
when CUDA is in use, and drives a ``torch.profiler`` schedule (wait, warm-up, active) whose
trace is written to ``<session>/traces/rank<R>.pt.trace.json.gz`` (``unranked-pid<P>...``
when the process's rank is unknown, see :meth:`_Hooks._trace_names`).

A job that runs its own profiler keeps it (:meth:`_Hooks._watch_profilers`): gpuprof's
steps aside, and the traces the job writes are recorded for the session to analyze.

Outside the profiler's active window a step costs a counter increment, one clock read
and one buffered line. Any error in here is logged to the session's hook log and the
failing part switches itself off; the user's job never sees an exception from gpuprof.
A full disk loses no step record silently: unwritten lines are kept (up to a bound) and
retried, and what is finally lost is said in one stderr line when the process exits.

While the profiler window is open, SIGTERM (a scheduler's kill) first flushes what the
profiler holds into the trace, as Ctrl-C does through ``KeyboardInterrupt``, then ends the
process by SIGTERM as before -- unless the job installed its own SIGTERM handler. Kineto's
own log lines (``USDT: ... profiler_start``) are silenced for gpuprof's profiler through
``KINETO_LOG_LEVEL``, unless the user set that variable.

Configuration (set by ``gpuprof run``): ``GPUPROF_SESSION_DIR``, ``GPUPROF_HOOKS``
(``0`` = off), ``GPUPROF_PROFILE`` (``wait,warmup,active`` in steps; active ``0`` = no
profiler). Standard library and a lazily imported torch only: this file must load in any
interpreter the user runs.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import signal
import sys
import time
import traceback
from typing import Any, Callable

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
# Lines kept in memory while the disk refuses them; beyond, they are counted as lost.
_MAX_BACKLOG_BYTES = 4 << 20
# Kineto's log levels run from 0 (verbose) to 5 (USDT, the profiler_start/stop lines);
# a minimum above the highest silences them all, for the profiler gpuprof starts itself.
_KINETO_QUIET_LEVEL = "6"


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


class _Hooks:
    """All hook state of one process."""

    def __init__(self, session_dir: str, schedule: tuple[int, int, int]) -> None:
        self.session_dir = session_dir
        self.schedule = schedule
        self.rank = _env_rank()  # None: unknown (no RANK); torch.distributed may know later
        self.pid = os.getpid()
        self.step = 0
        self.clock_opt_id: int | None = None
        self.torch: Any = None
        self.prof: Any = None
        self.profile_end_step = 0
        self.profiler_done = schedule[2] == 0
        self.cuda_checked = False
        self.memory_on = False
        self.memory_every = 1  # read memory_stats() every this many steps
        self.prev_step_s: float | None = None
        self.step_dt_s: float | None = None  # moving average of the step time, seconds
        self.log: Any = None
        self.last_flush = time.time()  # wall clock: the hot path reads only one clock
        self.disabled = False
        self.forked = False
        self.trace_error: str | None = None  # why the trace could not be written, if so
        self._exporting = False
        self._term_pending = False
        self._term_installed = False
        self._kineto_env_set = False
        self._step_line = self._step_line_for()
        # The job's own profiler (see _watch_profilers): while gpuprof calls into its own,
        # ``_own_call`` is set, so that only the job's calls count as the job's.
        self._own_call = False
        self._export_depth = 0
        self.job_profiler = False
        self._discard_trace = False

    # -- the log ------------------------------------------------------------------------
    def _log_path(self) -> str:
        hooks_dir = os.path.join(self.session_dir, "hooks")
        os.makedirs(hooks_dir, exist_ok=True)
        name = f"rank{self.rank}-{self.pid}.jsonl" if self.rank is not None else f"pid{self.pid}.jsonl"
        return os.path.join(hooks_dir, name)

    def _open_log(self) -> None:
        self.log = _HookLog(self._log_path)

    def _step_line_for(self) -> str:
        # The hot path formats step lines by hand: json.dumps per step costs more than the step.
        rank = "null" if self.rank is None else str(self.rank)
        return '{"time_unix_s":%.6f,"kind":"step","rank":' + rank + ',"pid":' + str(self.pid) + ',"step":%d}\n'

    def before_fork(self) -> None:
        # A forked child inherits our write buffer: empty it first, so no line is written twice.
        try:
            self.flush()
        except Exception:
            pass

    def after_fork_in_child(self) -> None:
        """A forked child (a DataLoader worker, a Hogwild trainer) gets its own, lazily created log."""
        self.pid = os.getpid()
        self._step_line = self._step_line_for()
        self.log = _HookLog(self._log_path)
        self.prof = None
        self.profiler_done = True  # the profiler session belongs to the parent
        self.clock_opt_id = None
        self.step = 0
        self.forked = True
        if self._term_installed:  # the window's SIGTERM handler belongs to the parent too
            self._term_installed = False
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
            except (ValueError, OSError):
                pass
        if self._kineto_env_set:
            os.environ.pop("KINETO_LOG_LEVEL", None)
            self._kineto_env_set = False

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
            self._watch_profilers(torch)
        except Exception as exc:  # without it, a job's own profiler collides with gpuprof's (as before)
            self.error("profiler watch", exc)
        atexit.register(self.at_exit)
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(before=self.before_fork, after_in_child=self.after_fork_in_child)

    # -- the job's own profiler ------------------------------------------------------------
    def _watch_profilers(self, torch: Any) -> None:
        """Notice a profiler the job starts itself, and the traces it writes.

        Kineto allows one profiler per thread: a job that runs ``torch.profiler`` (or the
        autograd profiler, or ``emit_nvtx``) while gpuprof's window is open died with
        "Profiler is already enabled on this thread", then SIGSEGV. Every one of them
        prepares or enables Kineto through ``torch.autograd.profiler``'s
        ``_prepare_profiler`` / ``_enable_profiler``: wrapped here, the first call that is
        not gpuprof's own stops gpuprof's profiler (its trace is dropped) and gpuprof steps
        aside for the rest of the process, saying so in the session (a ``note``). The job's
        ``export_chrome_trace`` calls are recorded (``job_trace``, the file's path), so that
        the job's own traces are analyzed as the run's.
        """
        ap = torch.autograd.profiler
        for name in ("_prepare_profiler", "_enable_profiler"):
            original = getattr(ap, name, None)
            if original is None or getattr(original, "_gpuprof_watched", False):
                continue

            def watched(*args: Any, __original: Any = original, **kwargs: Any) -> Any:
                if not self._own_call:
                    self._job_profiler_starts()
                return __original(*args, **kwargs)

            watched._gpuprof_watched = True  # type: ignore[attr-defined]
            setattr(ap, name, watched)
        classes = [ap.profile]
        kineto = getattr(getattr(getattr(torch, "profiler", None), "profiler", None), "_KinetoProfile", None)
        if kineto is not None:
            classes.append(kineto)
        for cls in classes:
            original = cls.__dict__.get("export_chrome_trace")
            if original is None or getattr(original, "_gpuprof_watched", False):
                continue

            def export(prof: Any, path: Any, *args: Any, __original: Any = original, **kwargs: Any) -> Any:
                self._export_depth += 1  # torch.profiler's export calls the autograd one inside
                try:
                    result = __original(prof, path, *args, **kwargs)
                finally:
                    self._export_depth -= 1
                if self._export_depth == 0 and not self._own_call:
                    self._job_trace_written(path)
                return result

            export._gpuprof_watched = True  # type: ignore[attr-defined]
            cls.export_chrome_trace = export

    def _job_profiler_starts(self) -> None:
        if self.job_profiler or self.forked:
            return
        try:
            self.job_profiler = True
            if self.profiler_done and self.prof is None:
                return  # gpuprof's window is over (or never opened): nothing to step aside from
            if self.prof is not None:
                self._discard_trace = True  # the job's profiler records these steps; ours would be half
                self._own_call = True
                try:
                    self._stop_profiler()
                finally:
                    self._own_call = False
            self.profiler_done = True
            self.record("note", job_profiler=True, step=self.step,
                        message="the job runs its own torch.profiler: gpuprof stepped aside (no trace of its "
                        "own) and analyzes the traces the job's profiler writes")
            self.flush()
        except Exception as exc:
            self.error("job profiler", exc)

    def _job_trace_written(self, path: Any) -> None:
        try:
            self.record("job_trace", path=os.path.abspath(os.fspath(path)), step=self.step)
            self.flush()
        except Exception as exc:
            self.error("job trace", exc)

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
            if self.profiler_done and self.cuda_checked and not self.memory_on:
                self.log.write(self._step_line % (now, self.step))  # the steady state
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
            self.log.write(self._step_line % (now, self.step))
        if not self.profiler_done:
            self._profiler_step()

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
        self.record("step", step=self.step, **stats)
        if self.memory_on and self.step_dt_s:
            # What this memory record cost (the query and the JSON line) sets how often to take it.
            cost_s = time.perf_counter() - t0
            self.memory_every = max(1, min(1000, math.ceil(cost_s / (_MEMORY_BUDGET * self.step_dt_s))))

    def _profiler_step(self) -> None:
        self._own_call = True
        try:
            if self.prof is None:
                self._start_profiler()
                return
            self.prof.step()
            if self.step >= self.profile_end_step:
                self._stop_profiler()
        except Exception as exc:
            self.profiler_done = True
            self.prof = None
            self.error("profiler", exc)
        finally:
            self._own_call = False

    def _start_profiler(self) -> None:
        enabled = getattr(getattr(self.torch._C, "_autograd", None), "_profiler_enabled", None)
        if enabled is not None and enabled():
            # The job runs its own profiler: two Kineto sessions would spoil each other's traces.
            self.profiler_done = True
            self.record("note", message="the job's own torch.profiler is active; gpuprof records no trace")
            return
        profiler = self.torch.profiler
        wait, warmup, active = self.schedule
        activities = [profiler.ProfilerActivity.CPU]
        if self.torch.cuda.is_available():
            activities.append(profiler.ProfilerActivity.CUDA)
        if "KINETO_LOG_LEVEL" not in os.environ:
            # Kineto reads it once, when it first starts in this process; it is unset again
            # when the window closes, so that child processes the job starts later are untouched.
            os.environ["KINETO_LOG_LEVEL"] = _KINETO_QUIET_LEVEL
            self._kineto_env_set = True
        import warnings

        with warnings.catch_warnings():
            # torch warns about a schedule without warm-up; the user chose it (--profile-warmup
            # 0), and a warning pointing into gpuprof's hooks would only puzzle them.
            warnings.simplefilter("ignore", UserWarning)
            schedule = profiler.schedule(wait=wait, warmup=warmup, active=active, repeat=1)
        self.prof = profiler.profile(activities=activities, schedule=schedule, on_trace_ready=self._trace_ready)
        self._install_sigterm()
        self.prof.start()
        # prof.step() is called at the end of each later step: ProfilerStep#k spans one
        # optimizer step to the next. One extra step lets the schedule hand the trace over.
        self.profile_end_step = self.step + wait + warmup + active + 1
        self.record("profiler_start", step=self.step)

    def _stop_profiler(self) -> None:
        prof, self.prof = self.prof, None
        self.profiler_done = True
        try:
            if prof is not None:
                prof.stop()
        finally:
            self._uninstall_sigterm()
            if self._kineto_env_set:
                os.environ.pop("KINETO_LOG_LEVEL", None)
                self._kineto_env_set = False

    # -- SIGTERM inside the profiler window ---------------------------------------------
    def _install_sigterm(self) -> None:
        """Catch SIGTERM while the window is open, unless the job handles SIGTERM itself."""
        import threading

        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread may set handlers; the default action stays
        try:
            if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
                return  # the job's own handler decides (and its normal exit flushes the trace)
            signal.signal(signal.SIGTERM, self._on_sigterm)
            self._term_installed = True
        except (ValueError, OSError):
            pass

    def _uninstall_sigterm(self) -> None:
        if not self._term_installed:
            return
        self._term_installed = False
        try:
            if signal.getsignal(signal.SIGTERM) == self._on_sigterm:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
        except (ValueError, OSError):
            pass

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        """Write the trace recorded so far, then die of SIGTERM as the job would have."""
        if self._exporting:
            self._term_pending = True  # finish writing the trace first, then go
            return
        try:
            if self.prof is not None:
                self._own_call = True
                try:
                    self._stop_profiler()  # RECORD -> stop: the schedule hands the trace over
                finally:
                    self._own_call = False
            self.record("exit", steps=self.step, signal=int(signum))
            self.flush()
            self._report_write_problem()
        except Exception as exc:
            self.error("SIGTERM", exc)
        self._die_of_sigterm()

    def _die_of_sigterm(self) -> None:
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        except (ValueError, OSError):
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    def _trace_names(self) -> list[str]:
        """Names to try for this process's trace, best first; the first free one is taken.

        The rank comes from torch.distributed, else ``RANK``. Without either, a process that
        multiprocessing did not start is the job's only trainer as far as anyone can tell
        (``python train.py``): rank 0, unless another process already holds that name. A
        process started by multiprocessing (``torch.multiprocessing.spawn`` trainers without
        torch.distributed) has no rank anyone knows: its trace is named by process id
        (``unranked-pid<P>``, which sorts after every ``rank<R>`` name, so that ``analyze``
        numbers such traces after the ranked ones).
        """
        rank = None
        dist = getattr(self.torch, "distributed", None)
        try:
            if dist is not None and dist.is_available() and dist.is_initialized():
                rank = int(dist.get_rank())
        except Exception:
            rank = None
        if rank is None:
            rank = self.rank
        if rank is not None:
            return [f"rank{rank}.pt.trace.json.gz", f"rank{rank}-{self.pid}.pt.trace.json.gz"]
        unranked = f"unranked-pid{self.pid}.pt.trace.json.gz"
        try:
            import multiprocessing

            spawned = multiprocessing.parent_process() is not None
        except Exception:
            spawned = False
        return [unranked] if spawned else ["rank0.pt.trace.json.gz", unranked]

    def _trace_ready(self, prof: Any) -> None:
        if self._discard_trace:
            return  # the job's own profiler took over: these steps are in its traces
        tmp = None
        self._exporting = True
        try:
            traces = os.path.join(self.session_dir, "traces")
            os.makedirs(traces, exist_ok=True)
            tmp = os.path.join(traces, f".{self.pid}.tmp.pt.trace.json.gz")
            prof.export_chrome_trace(tmp)
            name = _claim_name(tmp, traces, self._trace_names())  # readers never see half a trace
            tmp = None
            self.record("trace", path=os.path.join("traces", name), step=self.step)
            self.flush()
        except Exception as exc:
            why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            self.trace_error = f"trace not written to {tmp or self.session_dir}: {why}"
            self.error("trace export", exc)
            if tmp is not None:
                try:
                    os.unlink(tmp)  # a cut-off gzip is of no use, and it holds disk space
                except OSError:
                    pass
        finally:
            self._exporting = False
        if self._term_pending:
            self._term_pending = False
            self._on_sigterm(signal.SIGTERM, None)

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
            if self.prof is not None:
                self._own_call = True
                try:
                    self._stop_profiler()
                finally:
                    self._own_call = False
            self.record("exit", steps=self.step)
            if self.log is not None:
                self.log.close()
        except Exception as exc:
            self.error("exit", exc)
        self._report_write_problem()


def _claim_name(tmp: str, folder: str, names: list[str]) -> str:
    """Give ``tmp`` the first of ``names`` not yet taken in ``folder``, atomically.

    ``os.link`` fails when the name exists, so two processes never take the same name
    (``os.replace`` would silently overwrite). Where hard links are not supported, the
    first name that does not exist is taken by ``os.replace``.
    """
    for name in names:
        dest = os.path.join(folder, name)
        try:
            os.link(tmp, dest)
        except FileExistsError:
            continue
        except OSError:
            if os.path.exists(dest):
                continue
            os.replace(tmp, dest)
            return name
        os.unlink(tmp)
        return name
    name = names[-1]
    os.replace(tmp, os.path.join(folder, name))  # every name taken: the last one is per-process
    return name


def _os_write(fd: int, data: bytes) -> int:
    """Where hook records reach the disk (a seam: tests inject a full disk here)."""
    return os.write(fd, data)


class _HookLog:
    """The process's hook log: lines buffered in memory, written with ``os.write`` on flush.

    Opened on the first flush (a forked helper that never logs leaves no file). A write the
    disk refuses keeps the unwritten bytes -- a torn line's tail included, so a retry
    completes it -- and is retried at the next flush; beyond :data:`_MAX_BACKLOG_BYTES`
    new lines are counted as lost. Never raises.
    """

    def __init__(self, path: Callable[[], str]) -> None:
        self._path = path
        self.path: str | None = None
        self._fd: int | None = None
        self._pending: list[str] = []
        self._backlog = b""
        self.error: str | None = None
        self.lines_lost = 0

    def write(self, text: str) -> None:
        self._pending.append(text)  # the hot path: one list append

    def flush(self) -> bool:
        if not self._pending and not self._backlog:
            return True
        data = self._backlog + "".join(self._pending).encode("utf-8")
        self._pending = []
        done = 0
        try:
            if self._fd is None:
                self.path = self._path()
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            while done < len(data):
                done += _os_write(self._fd, data[done:])
        except OSError as exc:
            if self.error is None:
                self.error = exc.strerror or str(exc)
            rest = data[done:]
            if len(rest) > _MAX_BACKLOG_BYTES:
                cut = rest.find(b"\n", len(rest) - _MAX_BACKLOG_BYTES)  # keep whole lines at the end
                self.lines_lost += rest[: cut + 1].count(b"\n") if cut >= 0 else 0
                rest = rest[cut + 1 :] if cut >= 0 else rest
            self._backlog = rest
            return False
        self._backlog = b""
        return True

    def close(self) -> None:
        self.flush()
        if self._backlog:
            self.lines_lost += self._backlog.count(b"\n")
            self._backlog = b""
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None


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

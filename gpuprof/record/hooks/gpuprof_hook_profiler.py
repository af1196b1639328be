"""The ``torch.profiler`` window of gpuprof's torch hooks: a few steps recorded into a trace.

The step hook (:mod:`gpuprof_torch_hooks`) drives a ``torch.profiler`` schedule (wait,
warm-up, active) from its step count; the trace is written to
``<session>/traces/rank<R>.pt.trace.json.gz`` (``unranked-pid<P>...`` when the process's
rank is unknown, see :meth:`_ProfilerWindow._trace_names`), under a temporary name first,
so that a reader never sees half a trace.

Later windows (:mod:`gpuprof_hook_windows`: ``gpuprof run`` asks for them in the session
folder) open the same way at the step the request names, with no wait, and write their
traces to ``<session>/windows/<NNNN>/traces/``; a process already past a window's first
step when it reads the request records ``window_missed`` instead.

A job that runs its own profiler keeps it (:meth:`_ProfilerWindow._watch_profilers`):
gpuprof steps aside, and the traces the job writes are recorded for the session to
analyze.

While the window is open, SIGTERM (a scheduler's kill) first flushes what the profiler
holds into the trace, as Ctrl-C does through ``KeyboardInterrupt``, then ends the process
by SIGTERM as before -- unless the job installed its own SIGTERM handler. Kineto's own log
lines (``USDT: ... profiler_start``) are silenced for gpuprof's profiler through
``KINETO_LOG_LEVEL``, unless the user set that variable.

Part of the torch hooks: standard library and a lazily imported torch only, loaded from
this folder without gpuprof. Any error here switches the window off and is logged; the
user's job never sees an exception from gpuprof.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

from gpuprof_hook_files import claim_name
from gpuprof_hook_windows import WINDOWS_DIR, WindowRequests

NO_WINDOW = 1 << 62  # the step "at which the next window opens" when none is asked for

# Kineto's log levels run from 0 (verbose) to 5 (USDT, the profiler_start/stop lines);
# a minimum above the highest silences them all, for the profiler gpuprof starts itself.
_KINETO_QUIET_LEVEL = "6"


class _ProfilerWindow:
    """The profiler part of the hook object (:class:`gpuprof_torch_hooks._Hooks`, which
    derives from this class): the window's state and the methods that open, step and close
    it, write its trace, and step aside for the job's own profiler."""

    # Kept by the hook object itself: its session, schedule, identity, step count and log.
    session_dir: str
    schedule: tuple[int, int, int]
    rank: int | None
    pid: int
    step: int
    torch: Any
    forked: bool
    record: Callable[..., None]
    error: Callable[[str, BaseException], None]
    flush: Callable[[], None]
    _report_write_problem: Callable[[], None]

    def __init__(self, schedule: tuple[int, int, int]) -> None:
        self.prof: Any = None
        self.profile_end_step = 0
        self.profiler_done = schedule[2] == 0
        self.trace_error: str | None = None  # why the trace could not be written, if so
        self._exporting = False
        self._term_pending = False
        self._term_installed = False
        self._kineto_env_set = False
        # The job's own profiler (see _watch_profilers): while gpuprof calls into its own,
        # ``_own_call`` is set, so that only the job's calls count as the job's.
        self._own_call = False
        self._export_depth = 0
        self.job_profiler = False
        self._discard_trace = False
        # The window being recorded (0: the first, into traces/) and its optimizer steps.
        self.window = 0
        self.window_steps: tuple[int, int] | None = None
        self._traces_rel = "traces"
        # Later windows, when gpuprof run asks for them (None: it does not).
        self.requests: WindowRequests | None = None
        self.window_at = NO_WINDOW  # the step after which the next window's profiler starts

    def _forget_window_in_child(self) -> None:
        """In a forked child: the profiler session, its SIGTERM handler and the Kineto
        setting belong to the parent."""
        self.prof = None
        self.profiler_done = True
        self.requests = None
        self.window_at = NO_WINDOW
        if self._term_installed:
            self._term_installed = False
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
            except (ValueError, OSError):
                pass
        if self._kineto_env_set:
            os.environ.pop("KINETO_LOG_LEVEL", None)
            self._kineto_env_set = False

    def _stop_own_profiler(self) -> None:
        """Stop gpuprof's profiler, if it runs, as gpuprof's own call (not the job's)."""
        if self.prof is not None:
            self._own_call = True
            try:
                self._stop_profiler()
            finally:
                self._own_call = False

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
            self.requests = None  # no later window either: two Kineto sessions would spoil each other
            self.window_at = NO_WINDOW
            if self.prof is not None:
                self._discard_trace = True  # the job's profiler records these steps; ours would be half
                self._stop_own_profiler()
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

    # -- later windows ----------------------------------------------------------------------
    def _poll_windows(self, now: float) -> None:
        """Read new window requests (at most every POLL_S; called from the step hook)."""
        if self.requests is None:
            return
        if self.requests.poll(now):
            nxt = self.requests.next_start()
            self.window_at = NO_WINDOW if nxt is None else nxt

    def _open_window(self) -> None:
        """The step after which the next requested window's profiler starts has come."""
        requests = self.requests
        req = requests.take() if requests is not None else None
        nxt = requests.next_start() if requests is not None else None
        self.window_at = NO_WINDOW if nxt is None else nxt
        if req is None or self.job_profiler:
            return
        start, window, _, active = req
        if start <= self.step:
            # Too late for this process: the others record it; the session says why this one did not.
            self.record("window_missed", window=window, step=self.step, start_step=start)
            self.flush()
            return
        self._own_call = True
        try:
            self.window = window
            self._traces_rel = os.path.join(WINDOWS_DIR, f"{window:04d}", "traces")
            self.profiler_done = False
            # No wait; the warm-up is what is left before the first recorded step.
            self._start_profiler((0, start - self.step - 1, active))
        except Exception as exc:  # noqa: BLE001  (one failure: no window in this process, the job goes on)
            self.profiler_done = True
            self.prof = None
            self.error("profiler", exc)
        finally:
            self._own_call = False

    def _start_profiler(self, schedule: tuple[int, int, int] | None = None) -> None:
        enabled = getattr(getattr(self.torch._C, "_autograd", None), "_profiler_enabled", None)
        if enabled is not None and enabled():
            # The job runs its own profiler: two Kineto sessions would spoil each other's traces.
            self.profiler_done = True
            self.requests = None
            self.window_at = NO_WINDOW
            self.record("note", message="the job's own torch.profiler is active; gpuprof records no trace")
            return
        profiler = self.torch.profiler
        wait, warmup, active = schedule or self.schedule
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
        first = self.step + wait + warmup + 1
        self.window_steps = (first, first + active - 1)
        if self.window:
            self.record("profiler_start", step=self.step, window=self.window, window_steps=list(self.window_steps))
            self.flush()  # a run killed inside the window still says that it was recording
        else:
            self.record("profiler_start", step=self.step, window_steps=list(self.window_steps))

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
            self._stop_own_profiler()  # RECORD -> stop: the schedule hands the trace over
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
            traces = os.path.join(self.session_dir, self._traces_rel)
            os.makedirs(traces, exist_ok=True)
            tmp = os.path.join(traces, f".{self.pid}.tmp.pt.trace.json.gz")
            prof.export_chrome_trace(tmp)
            name = claim_name(tmp, traces, self._trace_names())  # readers never see half a trace
            tmp = None
            where = {"window": self.window} if self.window else {}
            window_steps = list(self.window_steps) if self.window_steps else None
            # Relative to the session folder, as every path a session holds.
            self.record("trace", path=os.path.join(self._traces_rel, name), step=self.step, window_steps=window_steps,
                        **where)
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

"""Profile a few training steps after warm-up and report on them: the engine of the
Lightning and Hugging Face callbacks (:mod:`gpuprof.lightning`, :mod:`gpuprof.hf`).

A training loop calls :meth:`StepProfiler.start` once, :meth:`StepProfiler.step` at the end
of every training step and :meth:`StepProfiler.stop` when training ends. After ``wait``
steps (start-up: compilation, caches, allocator growth), ``warmup`` steps (the profiler
warms up, not recorded) and ``active`` recorded steps, every rank writes
``rank<k>.pt.trace.json.gz`` into ``out_dir``; under ``torch.distributed`` the ranks then
meet at a barrier and rank 0 analyzes all of them together (stragglers, exposed
communication, pipeline bubbles need every rank), writes ``report.gpuprof.json`` and
``report.html`` beside them and prints the text report (``gpuprof analyze`` on the folder
reads the traces and leaves ``*.gpuprof.json`` reports aside). The profiler is stopped after that
one window, so the rest of training runs without it. A run that ends inside the window
still gets its (shorter) trace and report.

Multi-node jobs need ``out_dir`` on a filesystem that rank 0 sees; traces it cannot see are
named in a warning and left out.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, TextIO

from gpuprof.errors import GpuprofError
from gpuprof.integrations.torch import REPORT_SUFFIX, TraceHandler, dist_rank_world, print_text_report
from gpuprof.model.report import Report

__all__ = ["ProfilingCallback", "StepProfiler"]

DEFAULT_WAIT, DEFAULT_WARMUP, DEFAULT_ACTIVE = 5, 2, 3
REPORT_NAME = "report" + REPORT_SUFFIX


def _say(text: str) -> None:
    from gpuprof.util.safetext import one_line  # what reaches a terminal: docs/reliability.md

    if sys.stderr is not None:
        print(f"gpuprof: {one_line(text)}", file=sys.stderr, flush=True)


def barrier() -> None:
    """Wait for every rank (torch.distributed is initialized when this is called)."""
    sys.modules["torch"].distributed.barrier()


def _check_steps(wait: int, warmup: int, active: int) -> None:
    for name, value, least in (("wait", wait, 0), ("warmup", warmup, 0), ("active", active, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name}: expected a whole number of steps >= {least}, got {value!r}")


class StepProfiler:
    """One profiling window of a training run, and its job-level gpuprof report."""

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        wait: int = DEFAULT_WAIT,
        warmup: int = DEFAULT_WARMUP,
        active: int = DEFAULT_ACTIVE,
        *,
        print_report: bool = True,
        file: TextIO | None = None,
        record_shapes: bool = True,
        with_stack: bool = False,
    ) -> None:
        _check_steps(wait, warmup, active)
        self.out_dir = Path(out_dir)
        self.wait, self.warmup, self.active = wait, warmup, active
        self.print_report = print_report
        self.file = file
        self.record_shapes = record_shapes
        self.with_stack = with_stack
        self.report: Report | None = None
        self.report_path: Path | None = None
        self.steps_done = 0
        self._prof: Any = None
        self._handler: TraceHandler | None = None
        self._finished = False

    @property
    def running(self) -> bool:
        return self._prof is not None

    def start(self) -> None:
        """Start the profiler (its schedule waits ``wait`` steps before it records)."""
        if self._prof is not None or self._finished:
            return
        import torch  # the training loop runs torch: already imported

        enabled = getattr(getattr(torch._C, "_autograd", None), "_profiler_enabled", None)
        if enabled is not None and enabled():
            # Another profiler runs (the trainer's own, or gpuprof run's hooks): two Kineto
            # sessions would spoil each other's traces.
            _say("another torch profiler is active; the gpuprof callback records no trace")
            self._finished = True
            return
        rank = (dist_rank_world() or (0, 1))[0]
        self._handler = TraceHandler(
            self.out_dir, print_report=False, save_report=False, name_trace=lambda suffix: f"rank{rank}{suffix}"
        )
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._prof = torch.profiler.profile(
            activities=activities,
            schedule=torch.profiler.schedule(wait=self.wait, warmup=self.warmup, active=self.active, repeat=1),
            on_trace_ready=self._handler,
            record_shapes=self.record_shapes,  # tensor sizes give communication bytes and bandwidth
            with_stack=self.with_stack,
        )
        self._prof.start()

    def step(self) -> None:
        """Call at the end of each training step."""
        if self._prof is None:
            return
        self._prof.step()
        self.steps_done += 1
        if self.steps_done >= self.wait + self.warmup + self.active:
            self._finish()  # the schedule has just handed the trace over

    def stop(self, *, failed: bool = False) -> None:
        """Call when training ends: flushes a window cut short, then reports. With
        ``failed`` (training raised), ranks do not meet at the barrier, which a failed
        rank would never reach: each keeps its trace, and only a single-process run reports."""
        if self._prof is not None:
            self._finish(collective=not failed)

    def _finish(self, collective: bool = True) -> None:
        prof, self._prof = self._prof, None
        self._finished = True
        try:
            prof.stop()  # writes the trace when the run ended inside the window
        except Exception as exc:  # noqa: BLE001  (never let profiling end the training run)
            _say(f"the profiler failed to stop: {type(exc).__name__}: {exc}")
        ranks = dist_rank_world()
        wrote = bool(self._handler and self._handler.trace_paths)
        if ranks is not None:
            if not collective:
                return
            # Every rank has written (or not) its trace before rank 0 reads them all. Every
            # rank gets here at the same step, so the barrier cannot deadlock.
            barrier()
            if ranks[0] != 0:
                return
        if ranks is None and not wrote:
            return  # training ended before the profiler recorded anything
        self._job_report(ranks[1] if ranks else 1)

    def _job_report(self, world_size: int) -> None:
        from gpuprof.api import analyze
        from gpuprof.render import render
        from gpuprof.util.atomic import write_text_atomic

        suffix = ".pt.trace.json.gz"
        expected = [self.out_dir / f"rank{k}{suffix}" for k in range(world_size)]
        found = [p for p in expected if p.is_file()]
        missing = [p.name for p in expected if not p.is_file()]
        if not found:
            return
        if missing:
            shown = ", ".join(missing[:4]) + (", ..." if len(missing) > 4 else "")
            _say(f"{len(missing)} rank trace(s) not found in {self.out_dir} ({shown}); the report covers the others")
        try:
            report = analyze(found)
            write_text_atomic(self.out_dir / REPORT_NAME, report.to_json())
            write_text_atomic(self.out_dir / "report.html", render(report, "html"))
        except GpuprofError as exc:
            _say(f"could not analyze the profiled steps: {exc}")
            return
        except Exception as exc:  # noqa: BLE001  (a gpuprof bug must not end the training run)
            _say(f"could not analyze the profiled steps ({type(exc).__name__}: {exc}); please report this with the traces")
            return
        self.report, self.report_path = report, self.out_dir / REPORT_NAME
        if self.print_report:
            print_text_report(report, self.file)
        _say(f"report of the profiled steps written to {self.report_path} (and report.html)")


class ProfilingCallback:
    """What the framework callbacks (:mod:`gpuprof.lightning`, :mod:`gpuprof.hf`) share:
    their settings, the :class:`StepProfiler` they start when training starts, and its
    results (``report``, ``report_path``). Each callback mixes it into its framework's
    callback class and maps the framework's hooks onto :meth:`_start`, :meth:`_step` and
    :meth:`_stop`."""

    def __init__(
        self,
        wait: int = DEFAULT_WAIT,
        warmup: int = DEFAULT_WARMUP,
        active: int = DEFAULT_ACTIVE,
        dirpath: str | os.PathLike[str] | None = None,
        *,
        print_report: bool = True,
        file: TextIO | None = None,
        record_shapes: bool = True,
        with_stack: bool = False,
    ) -> None:
        super().__init__()  # the framework's callback class, next in the MRO
        _check_steps(wait, warmup, active)
        self.wait, self.warmup, self.active = wait, warmup, active
        self.dirpath = dirpath
        self.print_report = print_report
        self.file = file
        self.record_shapes = record_shapes
        self.with_stack = with_stack
        self.profiler: StepProfiler | None = None

    @property
    def report(self) -> Report | None:
        return self.profiler.report if self.profiler else None

    @property
    def report_path(self) -> Path | None:
        return self.profiler.report_path if self.profiler else None

    def _start(self, default_dir: Path) -> None:
        """Start profiling into ``dirpath``, else into ``default_dir``."""
        out = Path(self.dirpath) if self.dirpath else default_dir
        self.profiler = StepProfiler(
            out, self.wait, self.warmup, self.active, print_report=self.print_report, file=self.file,
            record_shapes=self.record_shapes, with_stack=self.with_stack,
        )
        self.profiler.start()

    def _step(self) -> None:
        if self.profiler is not None:
            self.profiler.step()

    def _stop(self, *, failed: bool = False) -> None:
        if self.profiler is not None:
            self.profiler.stop(failed=failed)

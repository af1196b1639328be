"""``torch.profiler`` integration: an ``on_trace_ready`` handler that writes the trace and
the gpuprof report of each profiling cycle.

The drop-in replacement for the retired ``torch.profiler.tensorboard_trace_handler``::

    import torch
    import gpuprof.torch

    with torch.profiler.profile(
        schedule=torch.profiler.schedule(wait=5, warmup=2, active=3),
        on_trace_ready=gpuprof.torch.trace_handler("./traces"),
    ) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()

Each cycle writes ``<worker>.<time_ns>.pt.trace.json.gz`` (as the TensorBoard handler
named them; the worker is ``<host>_rank<k>`` under ``torch.distributed``, else
``<host>_<pid>``), then analyzes that trace: the report is saved beside it as
``<worker>.<time_ns>.gpuprof.json`` (render it again with ``gpuprof analyze FILE -o
report.html``) and printed as text on stderr by rank 0. Each rank reports on its own trace; for the
job-level view (stragglers, pipeline bubbles) run ``gpuprof analyze`` on the traces of one
cycle from every rank.

The analysis runs in the training process when a cycle ends and takes about a second per
rank-trace of a few steps. A failed analysis never stops training: it prints one line on
stderr and keeps the trace. torch is never imported here; the profiler hands us its object.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from gpuprof.errors import GpuprofError
from gpuprof.model.report import Report

__all__ = ["TraceHandler", "trace_handler"]

REPORT_SUFFIX = ".gpuprof.json"


def dist_rank_world() -> tuple[int, int] | None:
    """``(rank, world_size)`` under an initialized ``torch.distributed``, else ``None``.
    Looks torch up in ``sys.modules``: whoever calls this already imported it."""
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return int(dist.get_rank()), int(dist.get_world_size())


def default_worker_name() -> str:
    """``<host>_rank<k>`` under torch.distributed (the rank is what gpuprof reads from a file
    name), else ``<host>_<pid>`` as the TensorBoard handler named its workers."""
    ranks = dist_rank_world()
    host = socket.gethostname()
    return f"{host}_rank{ranks[0]}" if ranks else f"{host}_{os.getpid()}"


def _say(text: str) -> None:
    from gpuprof.util.safetext import one_line  # what reaches a terminal: docs/reliability.md

    if sys.stderr is not None:
        print(f"gpuprof: {one_line(text)}", file=sys.stderr, flush=True)


class TraceHandler:
    """The ``on_trace_ready`` callable that :func:`trace_handler` returns.

    After each cycle, ``trace_paths`` / ``report_paths`` / ``reports`` hold what was
    written and analyzed (a report is ``None`` when its analysis failed).
    """

    def __init__(
        self,
        dir_name: str | os.PathLike[str],
        worker_name: str | None = None,
        use_gzip: bool = True,
        *,
        print_report: bool = True,
        save_report: bool = True,
        file: TextIO | None = None,
        name_trace: Callable[[str], str] | None = None,
    ) -> None:
        self.dir = Path(dir_name)
        self.worker_name = worker_name
        self.use_gzip = use_gzip
        self.print_report = print_report
        self.save_report = save_report
        self.file = file
        self._name_trace = name_trace
        self.trace_paths: list[Path] = []
        self.report_paths: list[Path] = []
        self.reports: list[Report | None] = []
        self._warned = False  # said once that the folder cannot take traces

    def trace_name(self) -> str:
        """The file name of this cycle's trace."""
        worker = self.worker_name or default_worker_name()
        suffix = ".pt.trace.json.gz" if self.use_gzip else ".pt.trace.json"
        if self._name_trace is not None:
            return self._name_trace(suffix)
        # Nanoseconds, as the TensorBoard handler: two cycles never share a name.
        return f"{worker}.{time.time_ns()}{suffix}"

    def __call__(self, prof: Any) -> None:
        # Runs inside the training loop: a folder that cannot be made or written (read-only,
        # not permitted, a file in the way, a full disk) costs this trace and one line, never
        # the training run.
        name = self.trace_name()
        final = self.dir / name
        # A hidden temporary name (torch gzips when the name ends in .gz), renamed when
        # complete: a folder scan never reads half a trace.
        tmp = self.dir / f".{name}.{os.getpid()}.partial{'.gz' if self.use_gzip else ''}"
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            prof.export_chrome_trace(str(tmp))
            os.replace(tmp, final)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            if not self._warned:
                self._warned = True
                _say(f"cannot write the trace in {self.dir}: {exc.strerror or exc}; training goes on without it")
            return
        self.trace_paths.append(final)
        if self.print_report or self.save_report:
            self.reports.append(self._report(final))

    def _report(self, trace: Path) -> Report | None:
        from gpuprof.model import notice
        from gpuprof.pipeline.inputs import outcome_of, route

        ranks = dist_rank_world()
        try:
            # As gpuprof.analyze(trace) does, with the warnings as records.
            outcome = outcome_of(route([trace]))
        except GpuprofError as exc:
            _say(f"could not analyze the trace: {exc}")
            return None
        except Exception as exc:  # noqa: BLE001  (a gpuprof bug must not end the training run)
            _say(f"could not analyze {trace} ({type(exc).__name__}: {exc}); please report this with the trace")
            return None
        report = outcome.report
        if ranks is None:
            # Outside torch.distributed the job is this one process: its rank (0) is known,
            # whatever the trace's name says or does not say. Known by the warning's code.
            from dataclasses import replace

            kept = notice.without(outcome.notices, notice.GUESSED_RANK)
            if kept != outcome.notices:
                report = replace(report, warnings=notice.words(kept))
        if self.save_report:
            from gpuprof.util.atomic import write_text_atomic

            out = trace.with_name(trace.name.split(".pt.trace.json")[0] + REPORT_SUFFIX)
            try:
                write_text_atomic(out, report.to_json())
                self.report_paths.append(out)
            except (OSError, GpuprofError) as exc:
                _say(f"could not save the report {out}: {exc}")
        if self.print_report and (ranks is None or ranks[0] == 0):
            print_text_report(report, self.file)
        return report


def print_text_report(report: Report, file: TextIO | None = None) -> None:
    """The text report on ``file`` (stderr by default, beside the training log's own
    progress, never into its stdout): coloured and wrapped to the terminal on a terminal,
    one line per finding anywhere else (a log file, a CI job)."""
    from gpuprof.render.text import render_text

    out = file if file is not None else sys.stderr
    isatty = getattr(out, "isatty", None)
    terminal = bool(isatty and isatty())
    width = 100
    if terminal:
        try:
            width = max(60, min(os.get_terminal_size(out.fileno()).columns, 160))
        except (OSError, ValueError, AttributeError):
            pass
    from gpuprof.util.safetext import visible_text  # what reaches a terminal: docs/reliability.md

    out.write(visible_text(render_text(report, width, color=terminal, wrap=terminal), keep_color=terminal))
    out.flush()


def trace_handler(
    dir_name: str | os.PathLike[str],
    worker_name: str | None = None,
    use_gzip: bool = True,
    *,
    print_report: bool = True,
    save_report: bool = True,
    file: TextIO | None = None,
) -> TraceHandler:
    """A ``torch.profiler`` ``on_trace_ready`` handler: each cycle's trace in ``dir_name``,
    and the gpuprof report of that cycle (see the module docstring).

    ``worker_name``: the trace's name prefix (default ``<host>_rank<k>`` or
    ``<host>_<pid>``). ``use_gzip``: write ``.pt.trace.json.gz`` (default) or plain JSON.
    ``print_report``: print the text report (rank 0 only under torch.distributed) to
    ``file`` (default stderr). ``save_report``: save the JSON report beside the trace.
    """
    return TraceHandler(
        dir_name, worker_name, use_gzip, print_report=print_report, save_report=save_report, file=file
    )

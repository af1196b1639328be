"""Where the per-rank work runs: one small interface, two implementations.

:class:`Executor` reads each trace source and reduces its ranks to summaries; the job-level
steps then run in the calling process whatever the executor. :class:`LocalExecutor` runs
here, serially or in ``jobs`` processes; :class:`gpuprof.pipeline.dask.DaskExecutor` on a
Dask cluster. A source that cannot be read is handed to ``unreadable`` (which may raise).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from gpuprof.accounting.summarize import summarize
from gpuprof.accounting.summary import RankSummary
from gpuprof.accounting.window import StepSelection
from gpuprof.errors import GpuprofError

__all__ = ["Executor", "LocalExecutor", "Progress", "Unreadable", "summarize_source"]


class Progress(Protocol):
    """Told how the work goes: a message, and while traces are read, ``done`` of ``total``
    files read and ``ranks`` summarized so far (a message without counts names the next stage).
    The counts come as keywords, so a callback must accept them."""

    def __call__(self, message: str, done: int | None = None, total: int | None = None, ranks: int | None = None) -> None: ...


Unreadable = Callable[[Any, GpuprofError], None]


def summarize_source(source: Any, selection: StepSelection) -> list[RankSummary]:
    """Read one trace source and reduce each of its ranks to a summary (runs in workers)."""
    return [summarize(trace, selection) for trace in source.load()]


class Executor(Protocol):
    """Summarize every source, in the order of ``sources``."""

    def summaries(
        self, sources: Sequence[Any], steps: StepSelection, progress: Progress | None, unreadable: Unreadable
    ) -> list[RankSummary]: ...


class LocalExecutor:
    """Here: one source after the other, or ``jobs`` processes at once."""

    def __init__(self, jobs: int = 1) -> None:
        self.jobs = jobs

    def summaries(
        self, sources: Sequence[Any], steps: StepSelection, progress: Progress | None, unreadable: Unreadable
    ) -> list[RankSummary]:
        out: list[RankSummary] = []
        n = len(sources)
        jobs = max(1, min(self.jobs, n))
        if jobs == 1:
            for i, src in enumerate(sources, 1):
                if progress:
                    progress(f"reading {src.path}", done=i - 1, total=n, ranks=len(out))
                try:
                    out.extend(summarize_source(src, steps))
                except GpuprofError as exc:
                    unreadable(src, exc)
            if progress:
                progress(f"read {n} file(s)", done=n, total=n, ranks=len(out))
            return out
        from concurrent.futures import ProcessPoolExecutor  # here: one process needs none of it (~7 ms)

        pool = ProcessPoolExecutor(max_workers=jobs)
        try:
            futures = [pool.submit(summarize_source, src, steps) for src in sources]
            if progress:
                progress(f"reading {n} file(s) in {jobs} processes", done=0, total=n, ranks=0)
            for i, (src, fut) in enumerate(zip(sources, futures), 1):
                try:
                    out.extend(fut.result())
                except GpuprofError as exc:
                    unreadable(src, exc)
                if progress:
                    progress(f"read {src.path}", done=i, total=n, ranks=len(out))
        except BaseException:
            # A bad file (or Ctrl-C) ends the run now, not after every other rank is read.
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        return out

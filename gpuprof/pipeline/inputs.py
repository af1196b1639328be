"""What the paths given to ``gpuprof analyze``, ``check``, ``diff`` and :func:`gpuprof.analyze`
are, decided once: a saved report, a ``gpuprof run`` session, or traces.

:func:`route` looks at the paths (a saved report is told by its content, given alone; a
session folder by its metadata file, given alone; anything else is traces: files, folders
of per-rank traces, several sessions) and reads a session folder there, once;
:func:`report_of` makes the report: the saved one read back, the session's (traces and
NVML samples, or samples alone when the job left no trace, with the run's own figures), or
the traces analyzed. Every command and the API go through both, so that the same input
gives the same report whichever asked; what each refuses (options that apply to traces
only, given with a saved report) stays with the caller, which knows its own words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpuprof.errors import GpuprofError
from gpuprof.model.report import Report
from gpuprof.pipeline.executors import Progress
from gpuprof.pipeline.outcome import Outcome

if TYPE_CHECKING:
    from gpuprof.pipeline import AnalyzeOptions
    from gpuprof.session.reader import Session


@dataclass(frozen=True)
class Input:
    """The paths and what they are: ``saved`` a saved report's file, ``session`` a session
    folder as read; neither: traces."""

    paths: tuple[Path, ...]
    saved: Path | None = None
    session: Session | None = None

    @property
    def kind(self) -> str:
        """``"saved"``, ``"session"`` or ``"traces"``."""
        return "saved" if self.saved is not None else "session" if self.session is not None else "traces"


def route(paths: Sequence[Path]) -> Input:
    """What ``paths`` are; a session folder given alone is read here (and only here).

    A saved report combined with anything else is a :class:`GpuprofError` naming it."""
    from gpuprof.readers.saved import is_report_file
    from gpuprof.session import is_session

    given = tuple(Path(p) for p in paths)
    saved = [p for p in given if is_report_file(p)]
    if saved:
        if len(given) > 1:
            raise GpuprofError("a saved report cannot be combined with other inputs; give it alone", saved[0])
        return Input(given, saved=saved[0])
    if len(given) == 1 and is_session(given[0]):
        from gpuprof.session import read_session

        return Input(given, session=read_session(given[0]))
    return Input(given)


def report_of(inp: Input, options: AnalyzeOptions | None = None, progress: Progress | None = None) -> Report:
    """The report of an input: a saved report read back (validated, bounded by
    ``options.max_input_gb``), a session's report, or the traces analyzed."""
    return outcome_of(inp, options, progress).report


def outcome_of(inp: Input, options: AnalyzeOptions | None = None, progress: Progress | None = None) -> Outcome:
    """:func:`report_of`'s report with its warnings as records (a saved report's have no codes)."""
    from gpuprof.pipeline import AnalyzeOptions, run_analysis

    opts = options if options is not None else AnalyzeOptions()
    if inp.saved is not None:
        from gpuprof.readers.limits import ReadLimits
        from gpuprof.readers.saved import read_report

        return Outcome.of_saved(read_report(inp.saved, ReadLimits.from_gb(opts.max_input_gb)))
    if inp.session is not None:
        from gpuprof.pipeline.session_report import session_outcome

        return session_outcome(inp.session, opts, progress=progress)
    analysis = run_analysis(inp.paths, opts, progress=progress)
    return Outcome(analysis.report, analysis.notices)


__all__ = ["Input", "Outcome", "outcome_of", "report_of", "route"]
